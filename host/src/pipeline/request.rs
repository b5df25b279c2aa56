//! What one module version reads, and the request it is handed: the
//! parent, its children grouped by owned kind, the related objects its
//! watches map to it — all from the cache, never from the API server.
//!
//! **Related objects are read as the guest's own reads would be**: only in
//! the controller's scope (a cluster-scoped parent's selector does not
//! reach past the granted namespaces), a namespaced parent's reference only
//! in its own namespace unless the grants say otherwise
//! ([`Scope::references_across_namespaces`]), and no more bytes than the
//! read budget ([`MAX_RELATED_BYTES`]).

use super::{CacheReader, Scope};
use crate::cache::{Cache, CachedObject, Informer, ObjectKey, WatchKey};
use crate::contract::{Gvk, Manifest, Request, Watch};
use crate::controller::index::{self, Pointer};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The most bytes of related objects a request carries by default: the
/// read budget of one guest call (`host.get`/`host.list`), which the
/// related objects stand in for.
pub const MAX_RELATED_BYTES: usize = 64 << 20;

/// The related objects of a parent pass what one request may carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the watches relate more than {max} bytes of objects to this parent (the read budget of one call): narrow the \
     parent's selector or reference, or split what it selects"
)]
pub struct RelatedTooLarge {
    /// The bound.
    pub max: usize,
}

/// The informers of one manifest's kinds.
pub(super) struct ReadSet {
    pub(super) owned: Vec<(Gvk, Arc<Informer>)>,
    pub(super) watched: Vec<(Watch, Arc<Informer>)>,
    readable: Arc<HashMap<Gvk, Arc<Informer>>>,
}

impl ReadSet {
    /// Start (or join) the informers `manifest` reads, in `namespace`
    /// (`None`: every namespace); `parents` is the informer of its `for`.
    pub(super) fn new(manifest: &Manifest, parents: &Arc<Informer>, cache: &Cache, namespace: Option<&str>) -> ReadSet {
        let informer = |kind: &Gvk| cache.informer(WatchKey::new(kind.clone(), namespace.map(str::to_string)));
        let owned: Vec<_> = manifest.owns.iter().map(|k| (k.clone(), informer(k))).collect();
        let watched: Vec<_> = manifest.watches.iter().map(|w| (w.clone(), informer(&w.kind))).collect();
        let mut readable: HashMap<Gvk, Arc<Informer>> = HashMap::new();
        readable.insert(manifest.for_kind.clone(), parents.clone());
        for (k, i) in &owned {
            readable.insert(k.clone(), i.clone());
        }
        for (w, i) in &watched {
            readable.insert(w.kind.clone(), i.clone());
        }
        for k in &manifest.reads {
            readable.entry(k.clone()).or_insert_with(|| informer(k));
        }
        ReadSet { owned, watched, readable: Arc::new(readable) }
    }

    /// Every informer read.
    pub(super) fn informers(&self) -> Vec<Arc<Informer>> {
        self.readable.values().cloned().collect()
    }

    /// The guest's reads for a parent in `parent_namespace`, within `scope`.
    pub(super) fn reader(&self, parent_namespace: Option<String>, scope: &Scope) -> CacheReader {
        CacheReader { informers: self.readable.clone(), parent_namespace, scope: scope.clone() }
    }

    /// An object of an owned kind, from the cache.
    pub(super) fn owned_object(&self, kind: &Gvk, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        self.owned.iter().find(|(k, _)| k == kind).and_then(|(_, i)| i.store().get(key).cloned())
    }

    /// Owned children from the cache, per owned kind. A namespaced parent's
    /// children are in its namespace only (as Kubernetes' garbage collector
    /// has it): an object elsewhere naming it as controller is someone
    /// else's forgery, neither handed to the guest nor pruned.
    pub(super) fn children(&self, parent: &CachedObject) -> Vec<(Gvk, Arc<CachedObject>)> {
        let Some(uid) = parent.uid() else { return Vec::new() };
        let mut out = Vec::new();
        for (kind, informer) in &self.owned {
            for child in informer.store().owned_by(uid) {
                if parent.namespace().is_some() && child.namespace() != parent.namespace() {
                    continue;
                }
                out.push((kind.clone(), child));
            }
        }
        out
    }

    /// The request for one parent, built from the cache only, its related
    /// objects within `scope` and `max_related` bytes.
    ///
    /// # Errors
    /// [`RelatedTooLarge`] past `max_related` bytes of related objects.
    #[allow(clippy::too_many_arguments, reason = "one request's inputs, passed once")]
    pub(super) fn request(
        &self,
        parent: &CachedObject,
        children: &[(Gvk, Arc<CachedObject>)],
        finalizing: bool,
        attempt: u32,
        scope: &Scope,
        rates_readiness: bool,
        max_related: usize,
    ) -> Result<Request, RelatedTooLarge> {
        let grouped: Vec<(Gvk, Vec<&Arc<CachedObject>>)> = self
            .owned
            .iter()
            .map(|(kind, _)| (kind.clone(), children.iter().filter(|(k, _)| k == kind).map(|(_, c)| c).collect()))
            .collect();
        // Rated once per object version (the cache keeps it), for contract
        // 0.2, whose request carries it.
        let readiness = match rates_readiness {
            true => {
                grouped.iter().map(|(_, objects)| objects.iter().map(|c| c.readiness().clone()).collect()).collect()
            }
            false => Vec::new(),
        };
        let children = grouped
            .into_iter()
            .map(|(kind, objects)| (kind, objects.iter().map(|c| c.json().to_string()).collect()))
            .collect();
        let key = parent.key();
        let mut related = Related { objects: Vec::new(), bytes: 0, max: max_related };
        // What the guest may be handed of `o`: within the scope, and for a
        // namespaced parent's reference, in its namespace unless the grants
        // let references cross.
        let readable = |o: &CachedObject| scope.contains(o.namespace());
        // Parsed only when a watch reads a field of the parent.
        let mut parsed: Option<Value> = None;
        for (watch, informer) in &self.watched {
            let store = informer.store();
            if watch.mapping.parent_path().is_some() {
                let parent = parsed.get_or_insert_with(|| serde_json::from_str(parent.json()).unwrap_or_default());
                match index::pointer(&watch.mapping, &key, parent) {
                    None => {}
                    Some(Pointer::Target(target)) => {
                        // A cluster-scoped kind is keyed without a namespace.
                        // A parent may name anything: only what the
                        // controller may read is handed in.
                        let across = target.namespace != key.namespace
                            && key.namespace.is_some()
                            && !scope.references_across_namespaces;
                        let found = store.get(&target).or_else(|| store.get(&ObjectKey::new(None, &target.name)));
                        if let Some(o) = found.filter(|o| readable(o) && !(across && o.namespace().is_some())) {
                            related.push(o)?;
                        }
                    }
                    Some(Pointer::Selector(selector)) => {
                        for o in store.in_namespace(key.namespace.as_deref()) {
                            if readable(&o) && selector.matches_with(|l| o.label(l)) {
                                related.push(&o)?;
                            }
                        }
                    }
                }
                continue;
            }
            for o in store.in_namespace(key.namespace.as_deref()) {
                if readable(&o) && crate::controller::mapping::relates_to(&o, &watch.mapping, &key) {
                    related.push(&o)?;
                }
            }
        }
        let related = related.objects;
        Ok(Request {
            object: parent.json().to_string(),
            children,
            related,
            finalizing,
            attempt,
            now: jiff::Timestamp::now(),
            generation: parent.generation(),
            readiness,
        })
    }
}

/// The related objects of one request, counted as they are taken.
struct Related {
    objects: Vec<String>,
    bytes: usize,
    max: usize,
}

impl Related {
    fn push(&mut self, o: &CachedObject) -> Result<(), RelatedTooLarge> {
        self.bytes += o.json().len();
        if self.bytes > self.max {
            return Err(RelatedTooLarge { max: self.max });
        }
        self.objects.push(o.json().to_string());
        Ok(())
    }
}

/// Whether two manifests read the same kinds the same way (then a
/// candidate shares the live version's informers and request).
pub(super) fn same_reads(a: &Manifest, b: &Manifest) -> bool {
    a.for_kind == b.for_kind && a.owns == b.owns && a.watches == b.watches && a.reads == b.reads
}
