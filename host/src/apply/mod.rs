//! The declarative applier: turns a guest's [`Outcome`] into writes.
//!
//! Order of work for one reconcile, all-or-nothing up to the first write:
//! 1. [`validate`] the whole outcome against the host's [`Policy`] (kinds,
//!    namespaces, names, sizes, counts, duplicates), then
//!    [`check_ownership`] of children that already exist (never take over
//!    another controller's object; adopt an unowned one only when granted).
//!    Any violation → error, nothing written.
//! 2. Server-side apply each desired child with field manager
//!    `operon/<controller>` and a controller ownerReference.
//! 3. Delete owned children that are no longer desired (UID precondition).
//! 4. Write the status through the status subresource, only if it changed.
//! 5. Record events (events.k8s.io/v1, see [`events`]).
//!
//! **Invariant: every write is preceded by a check of the caller's
//! [`Fence`]**: a replica that lost its lease sends nothing more.
//!
//! Finalizers are added and removed by [`Applier::set_finalizer`] with a
//! merge patch locked on the parent's uid and resourceVersion, which cannot
//! re-create a parent deleted meanwhile (an apply would).

mod condition;
pub mod events;
mod validate;

pub use condition::{SYNCED, without_host_condition};

pub use validate::{
    Child, MAX_OBJECT_BYTES, Namespaces, Policy, ValidationError, check_ownership, owner_reference, reserved, validate,
};

use crate::cache::{CachedObject, ObjectKey};
pub use crate::client::describe;
use crate::contract::{Gvk, Outcome, ParentMetadata, UpdateStrategy};
use crate::leader::{Fence, NotLeading};
use crate::metrics::Metrics;
use events::{Author, EventType, Recorder};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::hash::Hasher;
use std::sync::{Arc, Mutex};

/// Most children whose last apply is remembered (see `Applier::applied`).
const MEMO_LIMIT: usize = 100_000;

/// Errors of writing an outcome.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The outcome broke a rule; nothing was written.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// This replica lost its lease: nothing more is written.
    #[error(transparent)]
    NotLeading(#[from] NotLeading),
    /// Discovery could not resolve a kind.
    #[error("cannot resolve {kind}: {}", describe(source))]
    Discovery {
        /// The kind.
        kind: Gvk,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// An API call failed.
    #[error("{operation} {target} refused: {}", describe(source))]
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

impl Error {
    /// Whether retrying the same outcome cannot help until the parent (or
    /// the module) changes: a refused outcome, or the API server rejecting
    /// a child as invalid (400, 422). Permission errors (403) are retried:
    /// an administrator may grant the role meanwhile. So is a rejected
    /// status, with backoff as controller-runtime retries it: a status is
    /// checked against the one it replaces (a transition rule) or other
    /// objects (a webhook), which change without the parent's spec
    /// changing and without a reconcile being triggered.
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::Invalid(_) => true,
            Error::Api { operation: "status", .. } => false,
            Error::Api { source: kube::Error::Api(s), .. } => matches!(s.code, 400 | 422),
            _ => false,
        }
    }

    /// The HTTP status the API server answered, if it did.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Api { source: kube::Error::Api(s), .. } | Error::Discovery { source: kube::Error::Api(s), .. } => {
                Some(s.code)
            }
            _ => None,
        }
    }
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
    /// Parent uid → hash of the labels and annotations last applied to it.
    parent_metadata: Mutex<HashMap<String, u64>>,
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
    /// Children deleted to be created anew: an immutable field changed
    /// under the `recreate` update strategy.
    pub recreated: usize,
    /// Whether the status was written.
    pub status_written: bool,
}

impl Applier {
    /// An applier for controller `name` (field manager `operon/<name>`).
    /// `client` makes the writes (it may impersonate the Reconciler's
    /// ServiceAccount), the events an outcome asks for included; `events`
    /// records the host's own events about reconciles (the host's
    /// identity).
    pub fn new(client: kube::Client, events: kube::Client, controller: &str, instance: Option<String>) -> Applier {
        let instance = instance.unwrap_or_else(|| "operon".into());
        Applier {
            recorder: Recorder::new(events, &events::reporting_controller(controller), &instance)
                .with_plugin(client.clone()),
            client,
            field_manager: format!("operon/{controller}"),
            resources: Mutex::new(HashMap::new()),
            applied: Mutex::new(HashMap::new()),
            parent_metadata: Mutex::new(HashMap::new()),
        }
    }

    /// Record events within `budget`, counting what is dropped in
    /// `metrics` under `controller`.
    pub fn with_event_budget(mut self, budget: events::Budget, metrics: Arc<Metrics>, controller: &str) -> Applier {
        self.recorder = self.recorder.with_budget(budget, metrics, controller);
        self
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

    /// Requests for objects of `resource` (in `namespace` if namespaced).
    fn requests(resource: &ApiResource, namespaced: bool, namespace: Option<&str>) -> kube::core::Request {
        let namespace = if namespaced { namespace } else { None };
        kube::core::Request::new(DynamicObject::url_path(resource, namespace))
    }

    /// Send a write; its answer is read for the new resourceVersion only.
    async fn send(
        &self,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        verb: &'static str,
    ) -> Result<Written, kube::Error> {
        let mut request = request.map_err(kube::Error::BuildRequest)?;
        // The name kube's own `Api` gives the request (its trace spans).
        request.extensions_mut().insert(verb);
        self.client.request::<Written>(request).await
    }

    /// Apply validated children, prune `existing` children not among them,
    /// write the status, record events. `adopt`: whether an object without
    /// a controller may be taken over (the grants' `adopt`).
    ///
    /// A child that is not among `existing` (the parent's children as the
    /// cache saw them) and was not applied here before is looked up live
    /// first: the cache may not yet hold an object created moments ago, and
    /// server-side apply would silently adopt it. Its ownership is checked
    /// again on what the API server answers, and the apply is pinned to
    /// that resourceVersion.
    ///
    /// # Errors
    /// The first failed API call, a child whose live object may not be
    /// taken over ([`Error::Invalid`]), or [`Error::NotLeading`] as soon as
    /// the fence closes; earlier writes stay (the next reconcile converges,
    /// since everything here is idempotent).
    pub async fn apply(
        &self,
        parent: &CachedObject,
        children: &[Child],
        existing: &[(Gvk, Arc<CachedObject>)],
        outcome: &Outcome,
        adopt: bool,
        strategy: impl Fn(&Gvk) -> UpdateStrategy,
        fence: &Fence,
    ) -> Result<Report, Error> {
        let mut report = Report::default();
        let params = PatchParams::apply(&self.field_manager).force();
        for child in children {
            let (resource, namespaced) = self.resource(&child.kind).await?;
            let hash = hash_value(&child.object);
            let live = existing.iter().find(|(k, o)| *k == child.kind && o.key() == child.key).map(|(_, o)| o);
            let current_rv = live.and_then(|o| o.resource_version().map(str::to_string));
            let strategy = strategy(&child.kind);
            if strategy == UpdateStrategy::OnDelete && live.is_some() {
                report.unchanged += 1;
                continue;
            }
            let memo = (child.kind.clone(), child.key.clone());
            let last = self.applied.lock().unwrap_or_else(|p| p.into_inner()).get(&memo).cloned();
            if let (Some((h, rv)), Some(current)) = (&last, &current_rv)
                && *h == hash
                && rv == current
            {
                report.unchanged += 1;
                continue;
            }
            let requests = Self::requests(&resource, namespaced, child.key.namespace.as_deref());
            let mut object = std::borrow::Cow::Borrowed(&child.object);
            if current_rv.is_none()
                && last.is_none()
                && let Some(rv) = self.live_ownership(parent, child, &requests, adopt).await?
            {
                object.to_mut()["metadata"]["resourceVersion"] = Value::String(rv);
            }
            fence.check()?;
            let written =
                match self.send(requests.patch(&child.key.name, &params, &Patch::Apply(&*object)), "patch").await {
                    Ok(written) => written,
                    Err(kube::Error::Api(s)) if strategy == UpdateStrategy::Recreate && is_immutable(&s) => {
                        let Some(live) = live else {
                            return Err(Error::Api {
                                operation: "apply",
                                target: target(&child.kind, &child.key),
                                source: kube::Error::Api(s),
                            });
                        };
                        // The next reconcile (the deletion's event) creates it.
                        self.delete_child(&requests, &child.kind, live, fence).await?;
                        self.applied.lock().unwrap_or_else(|p| p.into_inner()).remove(&memo);
                        let note = format!(
                            "{} {} deleted to be created anew: {} (update strategy recreate)",
                            child.kind.kind, child.key, s.message
                        );
                        self.event(parent, false, "ChildRecreated", &note, fence).await;
                        report.recreated += 1;
                        continue;
                    }
                    Err(source) => {
                        return Err(Error::Api { operation: "apply", target: target(&child.kind, &child.key), source });
                    }
                };
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
            let requests = Self::requests(&resource, namespaced, key.namespace.as_deref());
            if self.delete_child(&requests, kind, object, fence).await? {
                report.deleted += 1;
            }
            self.applied.lock().unwrap_or_else(|p| p.into_inner()).remove(&(kind.clone(), key));
        }

        if let Some(status) = &outcome.status {
            report.status_written = self.status(parent, status, fence).await?;
        }
        for e in &outcome.events {
            self.event_as(Author::Plugin, parent, e.warning, &e.reason, &e.message, fence).await;
        }
        Ok(report)
    }

    /// The live object a new child would be written over: `None` when there
    /// is none; its resourceVersion when it may be written (ours already,
    /// or unowned and `adopt`).
    ///
    /// # Errors
    /// [`Error::Invalid`] when it belongs to another controller, or is
    /// unowned without `adopt`; the lookup's API error.
    async fn live_ownership(
        &self,
        parent: &CachedObject,
        child: &Child,
        requests: &kube::core::Request,
        adopt: bool,
    ) -> Result<Option<String>, Error> {
        let request =
            requests.get(&child.key.name, &kube::api::GetParams::default()).map_err(kube::Error::BuildRequest);
        let live = match request {
            Ok(mut request) => {
                request.extensions_mut().insert("get");
                self.client.request::<DynamicObject>(request).await
            }
            Err(e) => Err(e),
        };
        let live = match live {
            Ok(live) => live,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(source) => {
                return Err(Error::Api { operation: "get", target: target(&child.kind, &child.key), source });
            }
        };
        let live = Arc::new(
            CachedObject::from_value(serde_json::to_value(&live).unwrap_or_default())
                .map_err(|e| crate::contract::rules::Refused(format!("{} {}: {e}", child.kind.kind, child.key)))?,
        );
        check_ownership(parent, std::slice::from_ref(child), adopt, |_, _| Some(live.clone()))?;
        Ok(live.resource_version().map(str::to_string))
    }

    /// Delete one child, locked on its UID; `false` when it was already gone
    /// or replaced by a new object of the same name (nothing of ours).
    async fn delete_child(
        &self,
        requests: &kube::core::Request,
        kind: &Gvk,
        object: &CachedObject,
        fence: &Fence,
    ) -> Result<bool, Error> {
        let key = object.key();
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: object.uid().map(str::to_string), resource_version: None }),
            ..DeleteParams::background()
        };
        fence.check()?;
        match self.send(requests.delete(&key.name, &params), "delete").await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
            Err(source) => Err(Error::Api { operation: "delete", target: target(kind, &key), source }),
        }
    }

    /// Write the parent's status when it differs from the cached one (what
    /// an outcome asks, or a failure carries). Returns whether it wrote.
    ///
    /// # Errors
    /// The API's refusal, or [`Error::NotLeading`].
    pub async fn status(&self, parent: &CachedObject, status: &Value, fence: &Fence) -> Result<bool, Error> {
        let have = without_host_condition(&parent.status(), status, SYNCED);
        if is_subset(status, &have) {
            return Ok(false);
        }
        self.write_status(parent, status, fence).await?;
        Ok(true)
    }

    async fn write_status(&self, parent: &CachedObject, status: &Value, fence: &Fence) -> Result<(), Error> {
        let (requests, body, key) = self.parent_patch(parent, json!({ "status": status })).await?;
        let params = PatchParams::apply(&self.field_manager).force();
        fence.check()?;
        self.send(requests.patch_subresource("status", &key.name, &params, &Patch::Apply(&body)), "patch_status")
            .await
            .map_err(|source| Error::Api { operation: "status", target: target_of(parent), source })?;
        Ok(())
    }

    /// Add (`present`) or remove the host's finalizer on the parent: a
    /// merge patch of the whole list as the cache last saw it, locked on the
    /// parent's uid and resourceVersion. Not server-side apply: an apply
    /// creates a missing object, so a parent deleted since the cache saw it
    /// would come back holding only the finalizer. A stale list is a 409
    /// (retried with the fresher object); a gone parent is a 404 (done).
    pub async fn set_finalizer(
        &self,
        parent: &CachedObject,
        finalizer: &str,
        present: bool,
        fence: &Fence,
    ) -> Result<(), Error> {
        let mut finalizers: Vec<&str> = parent.finalizers().filter(|f| *f != finalizer).collect();
        if present {
            finalizers.push(finalizer);
        }
        let (requests, mut body, key) =
            self.parent_patch(parent, json!({ "metadata": { "finalizers": finalizers } })).await?;
        body["metadata"]["uid"] = parent.uid().into();
        body["metadata"]["resourceVersion"] = parent.resource_version().into();
        let params =
            PatchParams { field_manager: Some(format!("{}-finalizer", self.field_manager)), ..Default::default() };
        fence.check()?;
        match self.send(requests.patch(&key.name, &params, &Patch::Merge(&body)), "patch").await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(Error::Api { operation: "finalizer", target: target_of(parent), source }),
        }
    }

    /// Keep the labels and annotations a guest asked for on its parent
    /// (contract 0.2): server-side apply of those alone under the plugin's
    /// field manager, so keys it no longer returns are removed and others'
    /// are left. Locked on a freshly read resourceVersion: an apply never
    /// re-creates a parent deleted meanwhile. Skipped when the same set was
    /// written last time and the parent still shows it. Returns whether it
    /// wrote.
    ///
    /// # Errors
    /// The API's refusal (a conflict is retried by the next reconcile), or
    /// [`Error::NotLeading`].
    pub async fn parent_metadata(
        &self,
        parent: &CachedObject,
        wanted: &ParentMetadata,
        fence: &Fence,
    ) -> Result<bool, Error> {
        let uid = parent.uid().unwrap_or_default().to_string();
        let hash = hash_value(&serde_json::to_value(wanted).unwrap_or_default());
        let shown = wanted.labels.iter().all(|(k, v)| parent.label(k) == Some(v.as_str()))
            && wanted.annotations.iter().all(|(k, v)| parent.annotation(k).as_deref() == Some(v.as_str()));
        let memo = self.parent_metadata.lock().unwrap_or_else(|p| p.into_inner()).get(&uid).copied();
        if shown && memo == Some(hash) {
            return Ok(false);
        }
        let (requests, mut body, key) = self
            .parent_patch(parent, json!({"metadata": {"labels": wanted.labels, "annotations": wanted.annotations}}))
            .await?;
        let request = requests.get(&key.name, &kube::api::GetParams::default()).map_err(kube::Error::BuildRequest);
        let fresh = match request {
            Ok(mut request) => {
                request.extensions_mut().insert("get");
                self.client.request::<DynamicObject>(request).await
            }
            Err(e) => Err(e),
        };
        let fresh = match fresh {
            Ok(fresh) => fresh,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(source) => return Err(Error::Api { operation: "get", target: target_of(parent), source }),
        };
        if fresh.metadata.uid.as_deref() != parent.uid() {
            return Ok(false);
        }
        body["metadata"]["resourceVersion"] = fresh.metadata.resource_version.into();
        let params = PatchParams::apply(&self.field_manager).force();
        fence.check()?;
        self.send(requests.patch(&key.name, &params, &Patch::Apply(&body)), "patch")
            .await
            .map_err(|source| Error::Api { operation: "metadata", target: target_of(parent), source })?;
        let mut memo = self.parent_metadata.lock().unwrap_or_else(|p| p.into_inner());
        if memo.len() >= MEMO_LIMIT {
            memo.clear();
        }
        memo.insert(uid, hash);
        Ok(true)
    }

    async fn parent_patch(
        &self,
        parent: &CachedObject,
        mut body: Value,
    ) -> Result<(kube::core::Request, Value, ObjectKey), Error> {
        let kind = Gvk::of(&json!({"apiVersion": parent.api_version(), "kind": parent.kind()}))
            .unwrap_or_else(|| Gvk::new("", "", ""));
        let (resource, namespaced) = self.resource(&kind).await?;
        let key = parent.key();
        let requests = Self::requests(&resource, namespaced, key.namespace.as_deref());
        body["apiVersion"] = parent.api_version().into();
        body["kind"] = parent.kind().into();
        let meta = body.as_object_mut().map(|b| b.entry("metadata").or_insert_with(|| json!({})));
        if let Some(meta) = meta {
            meta["name"] = key.name.clone().into();
            if let Some(ns) = &key.namespace {
                meta["namespace"] = ns.clone().into();
            }
        }
        Ok((requests, body, key))
    }

    /// Record an event of the host's on the parent. Failures are counted
    /// and logged, never fatal: an event is worth less than the reconcile
    /// that produced it.
    pub async fn event(&self, parent: &CachedObject, warning: bool, reason: &str, message: &str, fence: &Fence) {
        self.event_as(Author::Host, parent, warning, reason, message, fence).await;
    }

    async fn event_as(
        &self,
        author: Author,
        parent: &CachedObject,
        warning: bool,
        reason: &str,
        message: &str,
        fence: &Fence,
    ) {
        let reference = ObjectReference {
            api_version: Some(parent.api_version().to_string()),
            kind: Some(parent.kind().to_string()),
            name: Some(parent.name().to_string()),
            namespace: parent.namespace().map(str::to_string),
            uid: parent.uid().map(str::to_string),
            resource_version: None,
            field_path: None,
        };
        let type_ = if warning { EventType::Warning } else { EventType::Normal };
        // Drops are counted and logged (rate-limited) by the recorder.
        if let Err(e) = self.recorder.publish_as(author, &reference, type_, reason, "Reconcile", message, fence).await {
            tracing::debug!(object = %parent.key(), reason, "event not recorded: {e}");
        }
    }
}

/// What the host reads of a write's answer: the object's new
/// resourceVersion. The answer is the whole object, `managedFields`
/// included; parsing it into a `DynamicObject` was about 9 % of the host's
/// CPU over a convergence (`cargo xtask bench manager`), for one field.
/// The rest of the text is scanned past, not built.
#[derive(Debug, Default, serde::Deserialize)]
struct Written {
    #[serde(default)]
    metadata: WrittenMeta,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    resource_version: Option<String>,
}

fn target(kind: &Gvk, key: &ObjectKey) -> String {
    format!("{} {key}", kind.kind)
}

fn target_of(parent: &CachedObject) -> String {
    format!("{} {}", parent.kind(), parent.key())
}

/// Write `v`'s JSON text piece by piece into `sink`: no string is built,
/// and no `fmt::Formatter` in between (`Value`'s `Display` is several times
/// slower than writing bytes).
fn stream_json(v: &Value, sink: impl FnMut(&[u8])) -> serde_json::Result<()> {
    struct Sink<F>(F);
    impl<F: FnMut(&[u8])> std::io::Write for Sink<F> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            (self.0)(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Sink(sink), v)
}

/// A hash of `v`'s JSON text, streamed into the hasher.
fn hash_value(v: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    // Writing a `Value` into a sink that cannot fail does not fail.
    let _ = stream_json(v, |bytes| h.write(bytes));
    h.finish()
}

/// Whether the API server refused a write because it changes an immutable
/// field (422 Invalid, "field is immutable" or "Forbidden: pod updates may
/// not change fields other than ...").
fn is_immutable(s: &kube::core::Status) -> bool {
    s.code == 422 && (s.message.contains("immutable") || s.message.contains("may not change fields"))
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

    fn object(v: Value) -> Arc<CachedObject> {
        Arc::new(CachedObject::from_value(v).unwrap())
    }

    #[test]
    fn a_writes_answer_should_give_its_resource_version_and_nothing_else_matters() {
        // An apply's answer: the whole object, managedFields included.
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "4711",
                "managedFields": [{"manager": "operon/webapp", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"replicas": 2}, "status": {"replicas": 0}});
        let written: Written = serde_json::from_str(&applied.to_string()).unwrap();
        assert_eq!(written.metadata.resource_version.as_deref(), Some("4711"));
        // A delete may answer with a Status instead of the object.
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
        let written: Written = serde_json::from_str(&status.to_string()).unwrap();
        assert_eq!(written.metadata.resource_version, None);
        assert!(serde_json::from_str::<Written>("{\"metadata\": ").is_err(), "a cut answer is an error");
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

    #[test]
    fn another_controllers_child_should_never_be_taken_over_and_unowned_ones_only_with_the_grant() {
        let parent = object(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "a", "uid": "mine"}}));
        let child = Child {
            kind: Gvk::new("apps", "v1", "Deployment"),
            key: ObjectKey::new(Some("a"), "shop"),
            object: json!({}),
        };
        let with_owner = |uid: Option<&str>| {
            let mut v =
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop", "namespace": "a"}});
            if let Some(uid) = uid {
                v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "other", "uid": uid, "controller": true}]);
            }
            object(v)
        };
        let check = |existing: Option<Arc<CachedObject>>, adopt: bool| {
            check_ownership(&parent, std::slice::from_ref(&child), adopt, |_, _| existing.clone())
        };
        assert!(check(None, false).is_ok(), "a new child is created");
        assert!(check(Some(with_owner(Some("mine"))), false).is_ok(), "our own child is updated");
        let err = check(Some(with_owner(Some("theirs"))), true).unwrap_err();
        assert!(err.0.contains("controlled by ReplicaSet other") && err.0.contains("never taken over"), "{err}");
        let err = check(Some(with_owner(None)), false).unwrap_err();
        assert!(err.0.contains("spec.grants.adopt"), "{err}");
        assert!(check(Some(with_owner(None)), true).is_ok(), "adopted with the grant");
    }

    #[test]
    fn api_errors_should_be_one_short_line() {
        let status = kube::core::Status {
            code: 422,
            reason: "Invalid".into(),
            message: "Deployment.apps \"x\" is invalid: spec.replicas: Invalid value: -1".into(),
            ..kube::core::Status::default()
        };
        let e = Error::Api {
            operation: "apply",
            target: "Deployment a/x".into(),
            source: kube::Error::Api(Box::new(status)),
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "apply Deployment a/x refused: Deployment.apps \"x\" is invalid: spec.replicas: Invalid value: -1 (422 Invalid)"
        );
        assert!(e.is_permanent());
        let forbidden = kube::core::Status { code: 403, reason: "Forbidden".into(), ..kube::core::Status::default() };
        let e = Error::Api { operation: "apply", target: "x".into(), source: kube::Error::Api(Box::new(forbidden)) };
        assert!(!e.is_permanent(), "RBAC may be granted meanwhile: retry");
    }

    #[test]
    fn a_rejected_status_should_be_retried_and_a_rejected_child_not() {
        let invalid = || {
            kube::Error::Api(Box::new(kube::core::Status {
                code: 422,
                reason: "Invalid".into(),
                message: "Thing.example.com \"x\" is invalid: status.count: Invalid value: \"integer\": frozen".into(),
                ..kube::core::Status::default()
            }))
        };
        let status = Error::Api { operation: "status", target: "Thing a/x".into(), source: invalid() };
        assert!(!status.is_permanent(), "a status may be taken once what it is checked against changes");
        let child = Error::Api { operation: "apply", target: "Thing a/x".into(), source: invalid() };
        assert!(child.is_permanent());
    }
}
