//! One condition of the host's own on a parent (the `Synced` condition of
//! `pipeline::synced`), merged into the guest's conditions, never
//! replacing them.
//!
//! **Invariant: the guest's conditions are left as they are.** The
//! condition is a server-side apply of that one list item, under a field
//! manager of its own, without force: on a `status.conditions` list keyed
//! by `type` it merges; where another manager owns the item (a guest
//! writing a condition of the same type) the API server refuses it, and it
//! is not written.

use super::{Applier, Error, target_of};
use crate::cache::CachedObject;
use crate::leader::Fence;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// The type of the host's condition on parents: whether the last
/// reconcile succeeded (`pipeline::synced`).
pub const SYNCED: &str = "Synced";

impl Applier {
    /// Server-side apply `condition` (a `metav1.Condition` as JSON) into the
    /// parent's `status.conditions` through the status subresource, as this
    /// applier's client (the plugin's identity), under the field manager
    /// `<controller>-<suffix>`.
    ///
    /// # Errors
    /// [`Error::NotLeading`] before anything is sent when this replica may
    /// not write; the API's refusal (a 409 when another manager owns the
    /// condition, a 404 when the parent is gone).
    pub async fn condition(
        &self,
        parent: &CachedObject,
        condition: Value,
        suffix: &str,
        fence: &Fence,
    ) -> Result<(), Error> {
        let (requests, body, key) =
            self.parent_patch(parent, json!({ "status": { "conditions": [condition] } })).await?;
        let params = PatchParams::apply(&format!("{}-{suffix}", self.field_manager));
        fence.check()?;
        self.send(requests.patch_subresource("status", &key.name, &params, &Patch::Apply(&body)), "patch_status")
            .await
            .map_err(|source| Error::Api { operation: "condition", target: target_of(parent), source })?;
        Ok(())
    }
}

/// `have` (a parent's status) without the conditions of type `kind` that
/// `want` (the guest's status) does not name: what the guest's status is
/// compared with, so the host's own condition never makes the guest's
/// unchanged status look changed.
pub fn without_host_condition(have: &Value, want: &Value, kind: &str) -> Value {
    let named = want
        .pointer("/conditions")
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(kind)));
    let Some(list) = have.pointer("/conditions").and_then(Value::as_array) else {
        return have.clone();
    };
    if named || !list.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(kind)) {
        return have.clone();
    }
    let mut have = have.clone();
    let kept: Vec<Value> =
        list.iter().filter(|c| c.get("type").and_then(Value::as_str) != Some(kind)).cloned().collect();
    have["conditions"] = Value::Array(kept);
    have
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guests_status_is_compared_without_the_hosts_condition() {
        let have = json!({"phase": "Ready", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]});
        let want = json!({"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]});
        let stripped = without_host_condition(&have, &want, "Synced");
        assert!(super::super::is_subset(&want, &stripped), "unchanged: {stripped}");
        assert!(!super::super::is_subset(&want, &have), "compared as it is, it would look changed");
        // A guest that writes a condition of that type itself is compared
        // with it.
        let own = json!({"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]});
        assert_eq!(without_host_condition(&have, &own, "Synced"), have);
    }
}
