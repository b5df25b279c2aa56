//! The guest's `host.get`/`host.list`, answered from the controller's
//! informers.

use crate::cache::{Informer, ObjectKey};
use crate::runtime::{Gvk, ObjectReader};
use crate::selector::Selector;
use std::collections::HashMap;
use std::sync::Arc;

/// Reads for one reconcile: the informers of every kind the module may read,
/// with the parent's namespace as the default.
pub struct CacheReader {
    pub(super) informers: Arc<HashMap<Gvk, Arc<Informer>>>,
    pub(super) parent_namespace: Option<String>,
    /// The controller's namespace scope, if it is limited to one.
    pub(super) scope: Option<String>,
}

impl CacheReader {
    fn informer(&self, kind: &Gvk) -> Result<&Informer, String> {
        self.informers.get(kind).map(|i| &**i).ok_or_else(|| format!("{kind} is not cached for this controller"))
    }

    /// The namespace a read addresses, checked against the scope.
    fn namespace(&self, informer: &Informer, asked: Option<&str>) -> Result<Option<String>, String> {
        if informer.namespaced() == Some(false) {
            return Ok(None);
        }
        let ns = asked.map(str::to_string).or_else(|| self.parent_namespace.clone());
        match (&self.scope, &ns) {
            (Some(scope), Some(ns)) if scope != ns => {
                Err(format!("namespace {ns:?} is outside this controller's scope ({scope:?})"))
            }
            _ => Ok(ns),
        }
    }
}

impl ObjectReader for CacheReader {
    fn get(&self, kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<String>, String> {
        let informer = self.informer(kind)?;
        let ns = self.namespace(informer, namespace)?;
        let store = informer.store();
        Ok(store.get(&ObjectKey { namespace: ns, name: name.to_string() }).map(|o| o.json().to_string()))
    }

    fn list(&self, kind: &Gvk, namespace: Option<&str>, label_selector: Option<&str>) -> Result<Vec<String>, String> {
        let selector = Selector::parse(label_selector.unwrap_or_default()).map_err(|e| e.to_string())?;
        let informer = self.informer(kind)?;
        let ns = self.namespace(informer, namespace)?;
        let objects = informer.store().in_namespace(ns.as_deref());
        Ok(objects
            .iter()
            .filter(|o| {
                let labels = o.object.metadata.labels.as_ref();
                selector.matches_with(|k| labels.and_then(|l| l.get(k)).map(String::as_str))
            })
            .map(|o| o.json().to_string())
            .collect())
    }
}
