//! The declarative applier: turns a guest's [`Outcome`] into writes.
//!
//! Order of work for one reconcile, all-or-nothing up to the first write:
//! 1. [`validate`] the whole outcome (kinds owned, namespace, names, sizes,
//!    duplicates). Any violation → error, nothing written.
//! 2. Server-side apply each desired child with field manager
//!    `operon/<controller>` and a controller ownerReference.
//! 3. Delete owned children that are no longer desired (UID precondition).
//! 4. Write the status through the status subresource, only if it changed.
//! 5. Record events (events.k8s.io/v1).
//!
//! Finalizers are added and removed by [`Applier::set_finalizer`], also with
//! server-side apply, so the host owns exactly its own finalizer.

use crate::cache::{CachedObject, ObjectKey};
use crate::runtime::{Gvk, Manifest, Outcome};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// Largest object the host will write (etcd's limit is 1.5 MiB).
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Most children whose last apply is remembered (see `Applier::applied`).
const MEMO_LIMIT: usize = 100_000;

/// Why an outcome was refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("outcome refused, nothing written: {0}")]
pub struct ValidationError(pub String);

/// Errors of writing an outcome.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The outcome broke a rule; nothing was written.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// Discovery could not resolve a kind.
    #[error("cannot resolve {kind}: {source}")]
    Discovery {
        /// The kind.
        kind: Gvk,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// An API call failed.
    #[error("{operation} {target} failed: {source}")]
    Api {
        /// What was being done (apply, delete, status, finalizer).
        operation: &'static str,
        /// The object, as `Kind namespace/name`.
        target: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

/// A desired child after validation: its kind and the object to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Child {
    /// The child's kind.
    pub kind: Gvk,
    /// Namespace and name.
    pub key: ObjectKey,
    /// The object to apply (namespace set, ownerReference added).
    pub object: Value,
}

/// Check a whole outcome against the manifest and the parent, and build the
/// children to apply. `namespaced(kind)` says whether an owned kind is
/// namespaced (from discovery).
///
/// # Errors
/// The first violation found, naming the offending object.
pub fn validate(
    manifest: &Manifest,
    parent: &CachedObject,
    outcome: &Outcome,
    namespaced: impl Fn(&Gvk) -> bool,
) -> Result<Vec<Child>, ValidationError> {
    let parent_ns = parent.object.metadata.namespace.as_deref();
    let owner = owner_reference(parent);
    let mut seen = HashSet::new();
    let mut children = Vec::with_capacity(outcome.desired.len());
    for (i, desired) in outcome.desired.iter().enumerate() {
        let kind = Gvk::of(desired).ok_or_else(|| ValidationError(format!("desired[{i}] lacks apiVersion or kind")))?;
        let name = desired.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let what = format!("desired[{i}] ({} {name})", kind);
        if !manifest.owns.contains(&kind) {
            let owns: Vec<String> = manifest.owns.iter().map(ToString::to_string).collect();
            return Err(ValidationError(format!(
                "{what}: kind {kind} is not in the manifest's owns ({})",
                if owns.is_empty() { "nothing".to_string() } else { owns.join(", ") }
            )));
        }
        if !valid_name(name) {
            return Err(ValidationError(format!(
                "{what}: metadata.name must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; at most 253)"
            )));
        }
        let child_ns = desired.pointer("/metadata/namespace").and_then(Value::as_str);
        let ns = match (namespaced(&kind), parent_ns) {
            (true, Some(parent_ns)) => match child_ns {
                None => Some(parent_ns),
                Some(ns) if ns == parent_ns => Some(parent_ns),
                Some(ns) => {
                    return Err(ValidationError(format!(
                        "{what}: namespace {ns:?} differs from the parent's {parent_ns:?}; children live in their parent's namespace"
                    )));
                }
            },
            (true, None) => match child_ns {
                Some(ns) => Some(ns),
                None => {
                    return Err(ValidationError(format!(
                        "{what}: a namespaced child of a cluster-scoped parent needs metadata.namespace"
                    )));
                }
            },
            (false, Some(_)) => {
                return Err(ValidationError(format!(
                    "{what}: {kind} is cluster-scoped and cannot be owned by a namespaced parent"
                )));
            }
            (false, None) => None,
        };
        let key = ObjectKey::new(ns, name);
        if !seen.insert((kind.clone(), key.clone())) {
            return Err(ValidationError(format!("{what}: returned twice")));
        }
        let mut object = desired.clone();
        prepare(&mut object, ns, &owner);
        let size = serde_json::to_vec(&object).map(|v| v.len()).unwrap_or(usize::MAX);
        if size > MAX_OBJECT_BYTES {
            return Err(ValidationError(format!(
                "{what}: {size} bytes exceeds the {MAX_OBJECT_BYTES}-byte object limit"
            )));
        }
        children.push(Child { kind, key, object });
    }
    for (i, e) in outcome.events.iter().enumerate() {
        if e.reason.is_empty() || e.reason.len() > 128 {
            return Err(ValidationError(format!("events[{i}]: reason must be 1-128 characters")));
        }
    }
    Ok(children)
}

/// DNS-1123 subdomain.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Set the namespace, replace ownerReferences with the controller reference,
/// and drop server-owned metadata a guest may have echoed back.
fn prepare(object: &mut Value, namespace: Option<&str>, owner: &Value) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    for server_owned in
        ["resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "selfLink", "deletionTimestamp"]
    {
        meta.remove(server_owned);
    }
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), ns.into());
    }
    meta.insert("ownerReferences".into(), json!([owner]));
}

fn owner_reference(parent: &CachedObject) -> Value {
    let types = parent.object.types.clone().unwrap_or_default();
    json!({
        "apiVersion": types.api_version,
        "kind": types.kind,
        "name": parent.object.metadata.name,
        "uid": parent.object.metadata.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Writes outcomes for one controller.
pub struct Applier {
    client: kube::Client,
    field_manager: String,
    recorder: Recorder,
    resources: Mutex<HashMap<Gvk, (ApiResource, bool)>>,
    /// Hash of what we last applied per child and the resourceVersion the
    /// API server answered: if both still match, the apply would be a no-op
    /// and is skipped.
    applied: Mutex<HashMap<(Gvk, ObjectKey), (u64, String)>>,
}

/// What [`Applier::apply`] did, for logs and metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Children applied.
    pub applied: usize,
    /// Children skipped because nothing changed since our last apply.
    pub unchanged: usize,
    /// Children deleted.
    pub deleted: usize,
    /// Whether the status was written.
    pub status_written: bool,
}

impl Applier {
    /// An applier for controller `name` (field manager `operon/<name>`).
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Applier {
        let reporter = Reporter { controller: format!("operon/{controller}"), instance };
        Applier {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            field_manager: format!("operon/{controller}"),
            resources: Mutex::new(HashMap::new()),
            applied: Mutex::new(HashMap::new()),
        }
    }

    /// The field manager used for every write.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// Resolve a kind (cached after the first call).
    pub async fn resource(&self, kind: &Gvk) -> Result<(ApiResource, bool), Error> {
        if let Some(r) = self.resources.lock().unwrap_or_else(|p| p.into_inner()).get(kind) {
            return Ok(r.clone());
        }
        let resolved = crate::cache::resolve(&self.client, kind)
            .await
            .map_err(|source| Error::Discovery { kind: kind.clone(), source })?;
        self.resources.lock().unwrap_or_else(|p| p.into_inner()).insert(kind.clone(), resolved.clone());
        Ok(resolved)
    }

    /// Whether each kind is namespaced, resolving all first so `validate`
    /// can stay synchronous.
    pub async fn scopes(&self, kinds: &[Gvk]) -> Result<HashMap<Gvk, bool>, Error> {
        let mut out = HashMap::new();
        for k in kinds {
            out.insert(k.clone(), self.resource(k).await?.1);
        }
        Ok(out)
    }

    fn api(&self, resource: &ApiResource, namespaced: bool, namespace: Option<&str>) -> kube::Api<DynamicObject> {
        match (namespaced, namespace) {
            (true, Some(ns)) => kube::Api::namespaced_with(self.client.clone(), ns, resource),
            _ => kube::Api::all_with(self.client.clone(), resource),
        }
    }

    /// Apply validated children, prune `existing` children not among them,
    /// write the status, record events.
    ///
    /// # Errors
    /// The first failed API call; earlier writes stay (the next reconcile
    /// converges, since everything here is idempotent).
    pub async fn apply(
        &self,
        parent: &CachedObject,
        children: &[Child],
        existing: &[(Gvk, Arc<CachedObject>)],
        outcome: &Outcome,
    ) -> Result<Report, Error> {
        let mut report = Report::default();
        let params = PatchParams::apply(&self.field_manager).force();
        for child in children {
            let (resource, namespaced) = self.resource(&child.kind).await?;
            let hash = hash_value(&child.object);
            let current_rv = existing
                .iter()
                .find(|(k, o)| *k == child.kind && o.key() == child.key)
                .and_then(|(_, o)| o.object.metadata.resource_version.clone());
            let memo = (child.kind.clone(), child.key.clone());
            let last = self.applied.lock().unwrap_or_else(|p| p.into_inner()).get(&memo).cloned();
            if let (Some((h, rv)), Some(current)) = (&last, &current_rv)
                && *h == hash
                && rv == current
            {
                report.unchanged += 1;
                continue;
            }
            let api = self.api(&resource, namespaced, child.key.namespace.as_deref());
            let written = api
                .patch(&child.key.name, &params, &Patch::Apply(&child.object))
                .await
                .map_err(|source| Error::Api { operation: "apply", target: target(&child.kind, &child.key), source })?;
            if let Some(rv) = written.metadata.resource_version {
                let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
                // Children the garbage collector removed never leave this map;
                // forgetting everything now and then costs only one redundant
                // apply per child.
                if applied.len() >= MEMO_LIMIT {
                    applied.clear();
                }
                applied.insert(memo, (hash, rv));
            }
            report.applied += 1;
        }

        let wanted: HashSet<(&Gvk, ObjectKey)> = children.iter().map(|c| (&c.kind, c.key.clone())).collect();
        for (kind, object) in existing {
            let key = object.key();
            if wanted.contains(&(kind, key.clone())) {
                continue;
            }
            let (resource, namespaced) = self.resource(kind).await?;
            let api = self.api(&resource, namespaced, key.namespace.as_deref());
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: object.uid().map(str::to_string), resource_version: None }),
                ..DeleteParams::background()
            };
            match api.delete(&key.name, &params).await {
                Ok(_) => report.deleted += 1,
                // Already gone, or replaced by a new object of the same name
                // (UID precondition failed): nothing of ours to delete.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(source) => return Err(Error::Api { operation: "delete", target: target(kind, &key), source }),
            }
            self.applied.lock().unwrap_or_else(|p| p.into_inner()).remove(&(kind.clone(), key));
        }

        if let Some(status) = &outcome.status {
            let current = parent.object.data.get("status").cloned().unwrap_or(Value::Null);
            if !is_subset(status, &current) {
                self.write_status(parent, status).await?;
                report.status_written = true;
            }
        }
        for e in &outcome.events {
            self.event(parent, e.warning, &e.reason, &e.message).await;
        }
        Ok(report)
    }

    async fn write_status(&self, parent: &CachedObject, status: &Value) -> Result<(), Error> {
        let (api, body, key) = self.parent_patch(parent, json!({ "status": status })).await?;
        let params = PatchParams::apply(&self.field_manager).force();
        api.patch_status(&key.name, &params, &Patch::Apply(&body)).await.map_err(|source| Error::Api {
            operation: "status",
            target: target_of(parent),
            source,
        })?;
        Ok(())
    }

    /// Add (`present`) or remove the host's finalizer on the parent with
    /// server-side apply: the host owns exactly this list entry.
    pub async fn set_finalizer(&self, parent: &CachedObject, finalizer: &str, present: bool) -> Result<(), Error> {
        let finalizers = if present { json!([finalizer]) } else { json!([]) };
        let (api, body, key) = self.parent_patch(parent, json!({ "metadata": { "finalizers": finalizers } })).await?;
        // A separate field manager: status and children applies must not
        // drop the finalizer by omitting it.
        let params = PatchParams::apply(&format!("{}-finalizer", self.field_manager)).force();
        match api.patch(&key.name, &params, &Patch::Apply(&body)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 && !present => Ok(()),
            Err(source) => Err(Error::Api { operation: "finalizer", target: target_of(parent), source }),
        }
    }

    async fn parent_patch(
        &self,
        parent: &CachedObject,
        mut body: Value,
    ) -> Result<(kube::Api<DynamicObject>, Value, ObjectKey), Error> {
        let types = parent.object.types.clone().unwrap_or_default();
        let kind = Gvk::of(&json!({"apiVersion": types.api_version, "kind": types.kind}))
            .unwrap_or_else(|| Gvk::new("", "", ""));
        let (resource, namespaced) = self.resource(&kind).await?;
        let key = parent.key();
        let api = self.api(&resource, namespaced, key.namespace.as_deref());
        body["apiVersion"] = types.api_version.into();
        body["kind"] = types.kind.into();
        let meta = body.as_object_mut().map(|b| b.entry("metadata").or_insert_with(|| json!({})));
        if let Some(meta) = meta {
            meta["name"] = key.name.clone().into();
            if let Some(ns) = &key.namespace {
                meta["namespace"] = ns.clone().into();
            }
        }
        Ok((api, body, key))
    }

    /// Record an event on the parent. Failures are logged, never fatal: an
    /// event is worth less than the reconcile that produced it.
    pub async fn event(&self, parent: &CachedObject, warning: bool, reason: &str, message: &str) {
        let types = parent.object.types.clone().unwrap_or_default();
        let reference = ObjectReference {
            api_version: Some(types.api_version),
            kind: Some(types.kind),
            name: parent.object.metadata.name.clone(),
            namespace: parent.object.metadata.namespace.clone(),
            uid: parent.object.metadata.uid.clone(),
            resource_version: parent.object.metadata.resource_version.clone(),
            field_path: None,
        };
        let mut note: String = message.chars().take(1000).collect();
        if note.len() < message.len() {
            note.push('…');
        }
        let event = KubeEvent {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_string(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(object = %parent.key(), reason, error = %e, "could not record event");
        }
    }
}

fn target(kind: &Gvk, key: &ObjectKey) -> String {
    format!("{} {key}", kind.kind)
}

fn target_of(parent: &CachedObject) -> String {
    let kind = parent.object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
    format!("{kind} {}", parent.key())
}

fn hash_value(v: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    h.finish()
}

/// Whether every field of `want` is present with the same value in `have`
/// (arrays must match element by element). Fields the API server defaulted,
/// or other managers set, do not count as a difference.
pub fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            w.iter().all(|(k, v)| h.get(k).is_some_and(|hv| is_subset(v, hv)) || v.is_null() && !h.contains_key(k))
        }
        (Value::Array(w), Value::Array(h)) => w.len() == h.len() && w.iter().zip(h).all(|(a, b)| is_subset(a, b)),
        _ => want == have,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Event;

    fn manifest() -> Manifest {
        Manifest {
            name: "webapp".into(),
            for_kind: Gvk::new("example.operon.dev", "v1alpha1", "WebApp"),
            owns: vec![Gvk::new("apps", "v1", "Deployment"), Gvk::new("", "v1", "Service")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn parent() -> CachedObject {
        CachedObject::new(
            serde_json::from_value(json!({
                "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                "metadata": {"name": "shop", "namespace": "team-a", "uid": "u-1"}
            }))
            .unwrap(),
        )
    }

    fn outcome(desired: Vec<Value>) -> Outcome {
        Outcome { desired, ..Outcome::default() }
    }

    fn deployment(ns: Option<&str>) -> Value {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop", "resourceVersion": "7"}, "spec": {}});
        if let Some(ns) = ns {
            d["metadata"]["namespace"] = ns.into();
        }
        d
    }

    fn validate_all_namespaced(o: &Outcome) -> Result<Vec<Child>, ValidationError> {
        validate(&manifest(), &parent(), o, |_| true)
    }

    #[test]
    fn validate_should_set_namespace_and_owner_and_strip_server_fields() {
        let children = validate_all_namespaced(&outcome(vec![deployment(None)])).unwrap();
        let obj = &children[0].object;
        assert_eq!(obj["metadata"]["namespace"], "team-a");
        assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(obj["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(obj["metadata"]["ownerReferences"][0]["blockOwnerDeletion"], true);
        assert!(obj["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn validate_should_refuse_kinds_not_owned() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let err = validate_all_namespaced(&outcome(vec![deployment(None), secret])).unwrap_err();
        assert!(err.0.contains("desired[1] (v1 Secret s)") && err.0.contains("not in the manifest's owns"), "{err}");
    }

    #[test]
    fn validate_should_refuse_other_namespaces() {
        let err = validate_all_namespaced(&outcome(vec![deployment(Some("kube-system"))])).unwrap_err();
        assert!(err.0.contains("\"kube-system\"") && err.0.contains("\"team-a\""), "{err}");
        assert!(validate_all_namespaced(&outcome(vec![deployment(Some("team-a"))])).is_ok());
    }

    #[test]
    fn validate_should_refuse_duplicates_bad_names_and_cluster_scoped_children() {
        let err = validate_all_namespaced(&outcome(vec![deployment(None), deployment(None)])).unwrap_err();
        assert!(err.0.contains("returned twice"), "{err}");
        let mut bad = deployment(None);
        bad["metadata"]["name"] = "Shop_1".into();
        assert!(validate_all_namespaced(&outcome(vec![bad])).unwrap_err().0.contains("DNS subdomain"));
        let err = validate(&manifest(), &parent(), &outcome(vec![deployment(None)]), |_| false).unwrap_err();
        assert!(err.0.contains("cluster-scoped"), "{err}");
    }

    #[test]
    fn validate_should_refuse_oversized_objects_and_bad_events() {
        let mut big = deployment(None);
        big["spec"]["blob"] = "x".repeat(MAX_OBJECT_BYTES).into();
        assert!(validate_all_namespaced(&outcome(vec![big])).unwrap_err().0.contains("object limit"));
        let mut o = outcome(vec![]);
        o.events.push(Event { warning: false, reason: String::new(), message: "m".into() });
        assert!(validate_all_namespaced(&o).unwrap_err().0.contains("events[0]"));
    }

    #[test]
    fn subset_ignores_defaulted_fields() {
        let want = json!({"readyReplicas": 2, "conditions": [{"type": "Ready", "status": "True"}]});
        let have =
            json!({"readyReplicas": 2, "extra": 1, "conditions": [{"type": "Ready", "status": "True", "reason": "x"}]});
        assert!(is_subset(&want, &have));
        assert!(!is_subset(&json!({"readyReplicas": 3}), &have));
        assert!(!is_subset(&json!({"conditions": []}), &have));
        assert!(!is_subset(&want, &Value::Null));
    }
}
