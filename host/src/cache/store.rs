//! The objects one informer holds, with the indexes reconciles need.

use super::{CachedObject, ObjectKey};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Objects of one (kind, namespace scope, selector), indexed by namespace
/// and by controller-owner UID. Only the informer task writes to it.
#[derive(Default)]
pub struct Store {
    objects: HashMap<ObjectKey, Arc<CachedObject>>,
    by_namespace: HashMap<String, BTreeSet<ObjectKey>>,
    by_owner: HashMap<String, BTreeSet<ObjectKey>>,
    revision: u64,
}

/// Revisions are unique across every store: a store swapped in by a
/// re-list never shows a revision an earlier one had (but for the empty
/// store's 0, which holds the same: nothing).
static REVISIONS: AtomicU64 = AtomicU64::new(1);

impl Store {
    /// Changes whenever what the store holds changes: what is derived from
    /// every object (the lifecycle's overlap check reads all Reconcilers at
    /// every step) is derived again only when it differs.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// One object by key.
    pub fn get(&self, key: &ObjectKey) -> Option<&Arc<CachedObject>> {
        self.objects.get(key)
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Every object, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<CachedObject>> {
        self.objects.values()
    }

    /// Objects in one namespace, sorted by name. `None` lists cluster-scoped
    /// objects (and, for a namespaced kind, every namespace).
    pub fn in_namespace(&self, namespace: Option<&str>) -> Vec<Arc<CachedObject>> {
        match namespace {
            Some(ns) => {
                self.by_namespace.get(ns).into_iter().flatten().filter_map(|k| self.objects.get(k).cloned()).collect()
            }
            None => {
                let mut all: Vec<_> = self.objects.values().cloned().collect();
                all.sort_by_key(|o| o.key());
                all
            }
        }
    }

    /// Objects whose controller ownerReference has this UID, sorted by
    /// namespace then name.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<CachedObject>> {
        self.by_owner.get(uid).into_iter().flatten().filter_map(|k| self.objects.get(k).cloned()).collect()
    }

    /// Insert or replace; returns the previous version.
    pub fn insert(&mut self, object: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        self.revision = REVISIONS.fetch_add(1, Ordering::Relaxed);
        let key = object.key();
        let old = self.remove(&key);
        if let Some(ns) = &key.namespace {
            self.by_namespace.entry(ns.clone()).or_default().insert(key.clone());
        }
        if let Some(owner) = object.controller_owner().map(|o| &*o.uid) {
            self.by_owner.entry(owner.to_string()).or_default().insert(key.clone());
        }
        self.objects.insert(key, object);
        old
    }

    /// Remove by key; returns what was there.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        let old = self.objects.remove(key)?;
        self.revision = REVISIONS.fetch_add(1, Ordering::Relaxed);
        if let Some(ns) = &key.namespace {
            remove_from(&mut self.by_namespace, ns, key);
        }
        if let Some(owner) = old.controller_owner().map(|o| &*o.uid) {
            remove_from(&mut self.by_owner, owner, key);
        }
        Some(old)
    }
}

fn remove_from(index: &mut HashMap<String, BTreeSet<ObjectKey>>, at: &str, key: &ObjectKey) {
    if let Some(set) = index.get_mut(at) {
        set.remove(key);
        if set.is_empty() {
            index.remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(ns: &str, name: &str, owner: Option<&str>) -> Arc<CachedObject> {
        let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}")}});
        if let Some(o) = owner {
            v["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "X", "name": "p", "uid": o, "controller": true}]);
        }
        Arc::new(CachedObject::from_value(v).unwrap())
    }

    #[test]
    fn store_indexes_follow_updates_and_removals() {
        let mut s = Store::default();
        s.insert(obj("a", "one", Some("p1")));
        s.insert(obj("a", "two", Some("p1")));
        s.insert(obj("b", "three", None));
        assert_eq!(s.owned_by("p1").len(), 2);
        assert_eq!(s.in_namespace(Some("a")).len(), 2);
        // Ownership moves with an update.
        s.insert(obj("a", "two", Some("p2")));
        assert_eq!(s.owned_by("p1").len(), 1);
        assert_eq!(s.owned_by("p2").len(), 1);
        s.remove(&ObjectKey::new(Some("a"), "one"));
        assert!(s.owned_by("p1").is_empty());
        assert_eq!(s.in_namespace(Some("a")).len(), 1);
        assert_eq!(s.in_namespace(None).len(), 2);
    }

    #[test]
    fn the_revision_should_change_with_the_content_and_never_repeat() {
        let mut s = Store::default();
        assert_eq!(s.revision(), 0, "an empty store");
        s.insert(obj("a", "one", None));
        let first = s.revision();
        s.insert(obj("a", "one", None));
        assert_ne!(s.revision(), first, "an update");
        let updated = s.revision();
        assert!(s.remove(&ObjectKey::new(Some("a"), "none")).is_none());
        assert_eq!(s.revision(), updated, "removing nothing changes nothing");
        s.remove(&ObjectKey::new(Some("a"), "one"));
        assert_ne!(s.revision(), updated, "a removal");
        // A store built again (a re-list) by the same steps: another revision.
        let mut again = Store::default();
        again.insert(obj("a", "one", None));
        assert!(![first, updated, s.revision()].contains(&again.revision()));
    }
}
