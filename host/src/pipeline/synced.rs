//! The host's `Synced` condition on each parent, as Crossplane's managed
//! resources show it: `False` with the reason and message of the reconcile
//! that failed (the guest's failure, the sandbox's, a refused or failed
//! write), `True` once one succeeds. A guest's own `Ready` says what its
//! last good reconcile saw; when every later one fails after a side effect
//! (an outbound call, a child written, then a write refused), only this
//! condition tells it on the parent.
//!
//! Written only where it cannot harm, and not too often:
//! - the Reconciler did not opt out (`spec.syncedCondition: false`);
//! - the parent's CRD serves a status subresource whose `conditions` is a
//!   list keyed by `type` (`x-kubernetes-list-type: map`), so that the
//!   server-side apply of this one item merges with the guest's conditions
//!   and never replaces them ([`supports`]); other kinds are left alone;
//! - as the plugin's identity, after the fence check (`Applier::condition`);
//! - on a change of status or reason at once, on a change of message only
//!   once per [`MIN_INTERVAL`] per parent, and never when the parent already
//!   shows it ([`decide`]): a failing loop writes once, not at every
//!   backoff step.

use super::Error;
use crate::apply::{self, SYNCED};
use crate::cache::{CachedObject, ObjectKey};
use crate::contract::Gvk;
use crate::leader::Fence;
use crate::runtime::CallError;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest time between two writes of the condition on one parent
/// whose status and reason stay the same.
pub const MIN_INTERVAL: Duration = Duration::from_secs(30);
/// How long an unanswered question about the parent kind's CRD waits
/// before it is asked again.
const ASK_AGAIN: Duration = Duration::from_secs(60);
/// Most parents whose last write is remembered.
const REMEMBERED: usize = 10_000;
/// The field manager's suffix (`operon/<controller>-synced`).
const MANAGER_SUFFIX: &str = "synced";

/// What the condition should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    /// `True`: the last reconcile succeeded.
    pub status: bool,
    /// CamelCase, as the event of the same failure.
    pub reason: &'static str,
    /// The error, or empty.
    pub message: String,
}

impl Want {
    /// The condition a reconcile's result calls for.
    pub fn of(result: &Result<crate::controller::Action, Error>) -> Want {
        match result {
            Ok(_) => Want { status: true, reason: "ReconcileSuccess", message: String::new() },
            Err(e) => {
                let mut message: String = e.to_string().chars().take(1000).collect();
                if message.len() < e.to_string().len() {
                    message.push('…');
                }
                Want { status: false, reason: reason(e), message }
            }
        }
    }
}

/// The reason of a failed reconcile: the same as its event's.
fn reason(e: &Error) -> &'static str {
    match e {
        Error::Guest { source: CallError::Malformed(_) | CallError::OutputTooLarge { .. }, .. } => "InvalidOutcome",
        Error::Guest { .. } => "ReconcileError",
        Error::Transient(_) => "ReconcileFailed",
        Error::Terminal(_) => "ReconcileTerminal",
        Error::Apply(apply::Error::Invalid(_)) => "InvalidOutcome",
        Error::Apply(a) if a.is_permanent() => "ApplyRefused",
        Error::Apply(_) | Error::Finalizer(_) => "ApplyFailed",
        Error::RelatedTooLarge(_) => "RelatedTooLarge",
    }
}

/// Whether to write `want` on a parent whose conditions hold `current`
/// (the `Synced` one, if any), last written by this controller at
/// `last`.
pub fn decide(current: Option<&Value>, want: &Want, last: Option<Instant>, now: Instant) -> bool {
    let field = |name: &str| current.and_then(|c| c.get(name)).and_then(Value::as_str);
    let status = if want.status { "True" } else { "False" };
    if field("status") != Some(status) || field("reason") != Some(want.reason) {
        return true;
    }
    if field("message").unwrap_or_default() == want.message {
        return false;
    }
    last.is_none_or(|at| now.saturating_duration_since(at) >= MIN_INTERVAL)
}

/// Whether version `version` of `crd` can carry the condition without
/// harm: a status subresource, and `status.conditions` a list keyed by
/// `type`.
pub fn supports(crd: &CustomResourceDefinition, version: &str) -> bool {
    let Some(v) = crd.spec.versions.iter().find(|v| v.name == version) else { return false };
    if v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_none() {
        return false;
    }
    let schema = v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref());
    let conditions = schema
        .and_then(|s| s.properties.as_ref()?.get("status"))
        .and_then(|s| s.properties.as_ref()?.get("conditions"));
    conditions.is_some_and(|c| {
        c.type_.as_deref() == Some("array")
            && c.x_kubernetes_list_type.as_deref() == Some("map")
            && c.x_kubernetes_list_map_keys.as_ref().is_some_and(|k| k.iter().any(|k| k == "type"))
    })
}

/// The condition of one controller's parents.
pub struct Synced {
    /// `spec.syncedCondition` (default on).
    enabled: bool,
    /// The host's client: reads the parent's CRD.
    host: kube::Client,
    /// Whether the parent kind supports it, once learnt; else when it was
    /// last asked (the API server did not answer).
    support: Mutex<Result<bool, Option<Instant>>>,
    /// When each parent's condition was last written.
    written: Mutex<HashMap<ObjectKey, Instant>>,
}

impl Synced {
    /// For a controller whose parents are `kind`.
    pub fn new(enabled: bool, host: kube::Client) -> Synced {
        Synced { enabled, host, support: Mutex::new(Err(None)), written: Mutex::new(HashMap::new()) }
    }

    /// Say on `parent` how its reconcile ended. Failures to write are
    /// logged, never the reconcile's: the condition is worth less than the
    /// reconcile it describes.
    pub async fn report(&self, applier: &apply::Applier, kind: &Gvk, parent: &CachedObject, want: Want, fence: &Fence) {
        if !self.enabled || parent.is_deleting() || !self.supported(kind).await {
            return;
        }
        let status = parent.status();
        let current = status
            .pointer("/conditions")
            .and_then(Value::as_array)
            .and_then(|list| list.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(SYNCED)));
        let key = parent.key();
        let last = self.written.lock().unwrap_or_else(|p| p.into_inner()).get(&key).copied();
        let now = Instant::now();
        if !decide(current, &want, last, now) {
            return;
        }
        let status_text = if want.status { "True" } else { "False" };
        let since = current
            .filter(|c| c.get("status").and_then(Value::as_str) == Some(status_text))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| {
                let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
                serde_json::to_value(now).unwrap_or_default()
            });
        let mut condition = serde_json::json!({
            "type": SYNCED, "status": status_text, "reason": want.reason, "message": want.message,
            "lastTransitionTime": since,
        });
        if let Some(generation) = parent.generation() {
            condition["observedGeneration"] = generation.into();
        }
        match applier.condition(parent, condition, MANAGER_SUFFIX, fence).await {
            Ok(()) => {
                let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
                if written.len() >= REMEMBERED {
                    written.clear();
                }
                written.insert(key, now);
            }
            Err(apply::Error::NotLeading(_)) => {}
            Err(e) if e.status_code() == Some(409) => {
                tracing::info!(object = %key, "the Synced condition was not written: another field manager owns it ({e})");
            }
            Err(e) => tracing::debug!(object = %key, "the Synced condition was not written: {e}"),
        }
    }

    /// Whether the parents' kind can carry the condition: asked of its CRD
    /// once (a built-in kind: no). An unanswered question is asked again a
    /// minute later, meanwhile the answer is no.
    async fn supported(&self, kind: &Gvk) -> bool {
        match *self.support.lock().unwrap_or_else(|p| p.into_inner()) {
            Ok(known) => return known,
            Err(Some(asked)) if asked.elapsed() < ASK_AGAIN => return false,
            Err(_) => {}
        }
        let answer = match crd_of(&self.host, kind).await {
            Ok(Some(crd)) => Ok(supports(&crd, &kind.version)),
            Ok(None) => Ok(false),
            Err(e) => {
                tracing::debug!(%kind, "whether the Synced condition may be written is not known yet: {e}");
                Err(Some(Instant::now()))
            }
        };
        if answer == Ok(false) {
            tracing::info!(
                %kind,
                "the Synced condition is not written on this kind: its CRD's status has no `conditions` list keyed by type \
                 (x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [type]) to merge it into"
            );
        }
        *self.support.lock().unwrap_or_else(|p| p.into_inner()) = answer;
        answer == Ok(true)
    }
}

/// The CRD serving `kind` (`None`: a built-in kind).
async fn crd_of(client: &kube::Client, kind: &Gvk) -> Result<Option<CustomResourceDefinition>, kube::Error> {
    if kind.group.is_empty() || !kind.group.contains('.') {
        return Ok(None);
    }
    let (resource, _) = crate::cache::resolve(client, kind).await?;
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    api.get_opt(&format!("{}.{}", resource.plural, kind.group)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn want(status: bool, reason: &'static str, message: &str) -> Want {
        Want { status, reason, message: message.into() }
    }

    #[test]
    fn a_failing_loop_writes_once_and_a_changing_message_at_most_every_interval() {
        let t0 = Instant::now();
        let failed = want(false, "ApplyFailed", "apply Ingress shop/web refused: forbidden");
        assert!(decide(None, &failed, None, t0), "the first failure is written");
        let shown = json!({"type": "Synced", "status": "False", "reason": "ApplyFailed", "message": failed.message});
        assert!(!decide(Some(&shown), &failed, Some(t0), t0 + Duration::from_secs(1)), "the same failure: nothing");
        let other = want(false, "ApplyFailed", "apply Ingress shop/web refused: forbidden (attempt 7)");
        assert!(!decide(Some(&shown), &other, Some(t0), t0 + Duration::from_secs(5)), "a new message waits");
        assert!(decide(Some(&shown), &other, Some(t0), t0 + MIN_INTERVAL), "…until the interval passed");
        let terminal = want(false, "ReconcileTerminal", "guest: cannot");
        assert!(decide(Some(&shown), &terminal, Some(t0), t0 + Duration::from_secs(1)), "a new reason at once");
        let ok = want(true, "ReconcileSuccess", "");
        assert!(decide(Some(&shown), &ok, Some(t0), t0 + Duration::from_secs(1)), "recovery at once");
        let healthy = json!({"type": "Synced", "status": "True", "reason": "ReconcileSuccess", "message": ""});
        assert!(!decide(Some(&healthy), &ok, None, t0), "a success on a synced parent writes nothing");
    }

    fn crd(conditions: Value, status_subresource: bool) -> CustomResourceDefinition {
        let mut version = json!({"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "status": {"type": "object", "properties": {"conditions": conditions}}}}}});
        if status_subresource {
            version["subresources"] = json!({"status": {}});
        }
        serde_json::from_value(json!({"metadata": {"name": "webapps.example.operon.dev"}, "spec": {
            "group": "example.operon.dev", "scope": "Namespaced",
            "names": {"plural": "webapps", "kind": "WebApp"}, "versions": [version]}}))
        .unwrap()
    }

    #[test]
    fn only_a_conditions_list_keyed_by_type_carries_the_condition() {
        let keyed = json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
            "items": {"type": "object"}});
        assert!(supports(&crd(keyed.clone(), true), "v1"));
        assert!(!supports(&crd(keyed, false), "v1"), "no status subresource: a write would bump the generation");
        assert!(!supports(&crd(json!({"type": "array", "items": {"type": "object"}}), true), "v1"), "an atomic list");
        assert!(!supports(&crd(json!({"type": "object"}), true), "v2"), "another version");
    }
}
