//! The guest's `host.get`/`host.list`, answered from the controller's
//! informers.

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
        self.informers.get(kind).map(|i| &**i).ok_or_else(|| ReadError::NotCached(kind.clone()))
    }

    /// The namespace a read addresses, checked against the scope.
    fn namespace(&self, informer: &Informer, asked: Option<&str>) -> Result<Option<String>, ReadError> {
        if informer.namespaced() == Some(false) {
            return Ok(None);
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
        let ns = self.namespace(informer, namespace)?;
        let store = informer.store();
        Ok(store.get(&ObjectKey { namespace: ns, name: name.to_string() }).map(|o| o.json().to_string()))
    }

    fn list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let selector =
            Selector::parse(label_selector.unwrap_or_default()).map_err(|e| ReadError::Selector(e.to_string()))?;
        let informer = self.informer(kind)?;
        let ns = self.namespace(informer, namespace)?;
        let objects = informer.store().in_namespace(ns.as_deref());
        Ok(objects.iter().filter(|o| selector.matches_with(|k| o.label(k))).map(|o| o.json().to_string()).collect())
    }
}
