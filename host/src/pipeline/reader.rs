//! The guest's `host.get`/`host.list`, answered from the controller's
//! informers.

use crate::apply::reserved;
use crate::cache::{Informer, ObjectKey};
use crate::contract::{Gvk, Selector};
use crate::runtime::{ObjectReader, ReadError};
use std::collections::HashMap;
use std::sync::Arc;

/// Reads for one reconcile: the informers of every kind the module may read,
/// with the parent's namespace as the default.
pub struct CacheReader {
    pub(super) informers: Arc<HashMap<Gvk, Arc<Informer>>>,
    pub(super) parent_namespace: Option<String>,
    /// The namespaces the controller may read in.
    pub(super) scope: super::Scope,
}

impl CacheReader {
    fn informer(&self, kind: &Gvk) -> Result<&Informer, ReadError> {
        // Whatever the manifest declares and the grants allow: the host's
        // own kinds and the cluster's access control are never read.
        if let Some(why) = reserved(kind) {
            return Err(ReadError::Reserved { kind: kind.clone(), why: why.to_string() });
        }
        self.informers.get(kind).map(|i| &**i).ok_or_else(|| ReadError::NotCached(kind.clone()))
    }

    /// The namespace a read addresses, checked against the scope: a
    /// cluster-scoped kind only when the scope holds cluster-scoped objects.
    fn namespace(&self, kind: &Gvk, informer: &Informer, asked: Option<&str>) -> Result<Option<String>, ReadError> {
        match informer.namespaced() {
            Some(false) if self.scope.contains(None) => return Ok(None),
            Some(false) => return Err(ReadError::ClusterScoped(kind.clone())),
            // Not known yet (discovery pending): the store is empty either way.
            Some(true) | None => {}
        }
        let ns = asked.map(str::to_string).or_else(|| self.parent_namespace.clone());
        if !self.scope.contains(ns.as_deref()) {
            return Err(ReadError::OutsideScope {
                namespace: ns.unwrap_or_default(),
                scope: format!("{:?}", self.scope.namespaces),
            });
        }
        if ns.is_none() {
            // A namespaced kind across every namespace: only for a controller
            // that may read every namespace.
            if !self.scope.all_namespaces() {
                return Err(ReadError::AllNamespaces);
            }
        }
        Ok(ns)
    }
}

impl ObjectReader for CacheReader {
    fn get(&self, kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<String>, ReadError> {
        let informer = self.informer(kind)?;
        let ns = self.namespace(kind, informer, namespace)?;
        let store = informer.store();
        Ok(store.get(&ObjectKey { namespace: ns, name: name.to_string() }).map(|o| o.json().to_string()))
    }

    fn list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        self.list_within(kind, namespace, label_selector, usize::MAX)
    }

    /// Counts the objects' JSON as it goes and stops at `max_bytes`: a
    /// namespace of a million ConfigMaps is never copied whole for a guest
    /// that may not have it.
    fn list_within(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        max_bytes: usize,
    ) -> Result<Vec<String>, ReadError> {
        let selector =
            Selector::parse(label_selector.unwrap_or_default()).map_err(|e| ReadError::Selector(e.to_string()))?;
        let informer = self.informer(kind)?;
        let ns = self.namespace(kind, informer, namespace)?;
        let objects = informer.store().in_namespace(ns.as_deref());
        let mut bytes = 0usize;
        let mut out = Vec::new();
        for o in objects.iter().filter(|o| selector.matches_with(|k| o.label(k))) {
            bytes = bytes.saturating_add(o.json().len());
            if bytes > max_bytes {
                return Err(ReadError::Budget(crate::runtime::READ_BUDGET_SPENT));
            }
            out.push(o.json().to_string());
        }
        Ok(out)
    }
}
