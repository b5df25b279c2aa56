//! Which parents point at an object: the index behind watches by reference
//! (`spec.configRef.name`) and by selector (`spec.selector`) — what
//! controller-runtime users build with a field indexer and
//! `EnqueueRequestsFromMapFunc`, kept by the host.
//!
//! The index follows the parents (every event of the parent informer
//! updates it), so an event on a watched object costs a lookup: a hash
//! lookup by the object's key for references; for selectors, a lookup by
//! each of the object's labels (selectors are filed under one `key=value`
//! they require), plus the few selectors that require none. Never a guest
//! call, never a scan of the parents' JSON.

use crate::cache::{CachedObject, ObjectKey};
use crate::contract::{Mapping, Selector, field_at};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// The parents of one watch mapping that reads a field of the parent.
pub struct ParentIndex {
    mapping: Mapping,
    selector: bool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Reference: the named object → the parents naming it.
    by_target: HashMap<ObjectKey, BTreeSet<ObjectKey>>,
    /// Selector: (namespace, label, value) a selector requires → parents.
    by_label: HashMap<(Option<String>, String, String), BTreeSet<ObjectKey>>,
    /// Selector: parents whose selector requires no single label, per
    /// namespace (matched one by one).
    unfiled: HashMap<Option<String>, BTreeSet<ObjectKey>>,
    /// What each parent is filed under, to unfile it when it changes.
    of_parent: HashMap<ObjectKey, Filed>,
}

enum Filed {
    Target(ObjectKey),
    Selector(Selector),
}

/// What a parent's field says, parsed.
pub enum Pointer {
    /// The key of the object it names.
    Target(ObjectKey),
    /// The selector it holds.
    Selector(Selector),
}

impl ParentIndex {
    /// An index for `mapping`, or `None` for mappings that read no field of
    /// the parent (labels, annotations, fan-out).
    pub fn new(mapping: &Mapping) -> Option<ParentIndex> {
        mapping.parent_path()?;
        let selector = matches!(mapping, Mapping::Selector(_));
        Some(ParentIndex { mapping: mapping.clone(), selector, inner: Mutex::new(Inner::default()) })
    }

    /// File a parent as it is now (an added or updated parent).
    pub fn update(&self, parent: &CachedObject) {
        let key = parent.key();
        let pointer = serde_json::from_str::<Value>(parent.json()).ok().and_then(|v| pointer(&self.mapping, &key, &v));
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.unfile(&key);
        match pointer {
            None => {}
            Some(Pointer::Target(target)) => {
                inner.by_target.entry(target.clone()).or_default().insert(key.clone());
                inner.of_parent.insert(key, Filed::Target(target));
            }
            Some(Pointer::Selector(selector)) => {
                let ns = key.namespace.clone();
                match selector.required_label() {
                    Some((k, v)) => {
                        inner.by_label.entry((ns, k.to_string(), v.to_string())).or_default().insert(key.clone())
                    }
                    None => inner.unfiled.entry(ns).or_default().insert(key.clone()),
                };
                inner.of_parent.insert(key, Filed::Selector(selector));
            }
        }
    }

    /// Forget a deleted parent.
    pub fn remove(&self, key: &ObjectKey) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).unfile(key);
    }

    /// The parents an event on `object` concerns: for references, those
    /// naming it; for selectors, those whose selector matches its labels
    /// now or (`old`) before the change.
    pub fn parents_of(&self, object: &CachedObject, old: Option<&CachedObject>) -> Vec<ObjectKey> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !self.selector {
            if object.namespace().is_none() {
                // A cluster-scoped object: named by parents of any namespace.
                let name = object.key().name;
                let named = inner.by_target.iter().filter(|(t, _)| t.name == name).flat_map(|(_, p)| p.iter().cloned());
                return named.collect::<BTreeSet<_>>().into_iter().collect();
            }
            return inner.by_target.get(&object.key()).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        }
        let ns = object.namespace().map(str::to_string);
        let mut found = BTreeSet::new();
        for o in std::iter::once(object).chain(old) {
            let candidates = o
                .labels()
                .filter_map(|(k, v)| inner.by_label.get(&(ns.clone(), k.to_string(), v.to_string())))
                .chain(inner.unfiled.get(&ns))
                .flatten();
            for parent in candidates {
                if let Some(Filed::Selector(s)) = inner.of_parent.get(parent)
                    && s.matches_with(|k| o.label(k))
                {
                    found.insert(parent.clone());
                }
            }
        }
        found.into_iter().collect()
    }

    /// How many parents are filed (for tests and metrics).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).of_parent.len()
    }

    /// Whether no parent is filed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What `parent`'s field at the mapping's path says (`None`: nothing, or
/// not a reference or a selector; a missing or empty selector selects
/// nothing). `parent` is parsed JSON: the same reading serves the index and
/// the request's `related`.
pub fn pointer(mapping: &Mapping, parent_key: &ObjectKey, parent: &Value) -> Option<Pointer> {
    let field = field_at(parent, mapping.parent_path()?)?;
    if matches!(mapping, Mapping::Selector(_)) {
        return Selector::from_json(field).ok().flatten().map(Pointer::Selector);
    }
    let text = field.as_str().filter(|t| !t.is_empty())?;
    Some(Pointer::Target(match text.split_once('/') {
        Some((ns, name)) => ObjectKey::new(Some(ns), name),
        None => ObjectKey::new(parent_key.namespace.as_deref(), text),
    }))
}

impl Inner {
    fn unfile(&mut self, key: &ObjectKey) {
        let Some(filed) = self.of_parent.remove(key) else { return };
        match filed {
            Filed::Target(target) => remove_from(&mut self.by_target, &target, key),
            Filed::Selector(selector) => {
                let ns = key.namespace.clone();
                match selector.required_label() {
                    Some((k, v)) => remove_from(&mut self.by_label, &(ns, k.to_string(), v.to_string()), key),
                    None => remove_from(&mut self.unfiled, &ns, key),
                }
            }
        }
    }
}

fn remove_from<K: std::hash::Hash + Eq>(map: &mut HashMap<K, BTreeSet<ObjectKey>>, at: &K, key: &ObjectKey) {
    if let Some(set) = map.get_mut(at) {
        set.remove(key);
        if set.is_empty() {
            map.remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> CachedObject {
        CachedObject::from_value(v).unwrap()
    }

    fn parent(name: &str, spec: Value) -> CachedObject {
        object(
            json!({"apiVersion": "x.io/v1", "kind": "App", "metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": spec}),
        )
    }

    fn config_map(name: &str, labels: Value) -> CachedObject {
        object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns", "labels": labels}}),
        )
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(Some("ns"), name)
    }

    #[test]
    fn references_should_map_an_object_to_exactly_the_parents_naming_it() {
        let index = ParentIndex::new(&Mapping::Reference("spec.configRef.name".into())).unwrap();
        index.update(&parent("a", json!({"configRef": {"name": "one"}})));
        index.update(&parent("b", json!({"configRef": {"name": "two"}})));
        index.update(&parent("c", json!({"configRef": {"name": "other/one"}})));
        index.update(&parent("d", json!({})));
        assert_eq!(index.parents_of(&config_map("one", json!({})), None), vec![key("a")]);
        // The parent changes its reference: filed under the new one only.
        index.update(&parent("a", json!({"configRef": {"name": "two"}})));
        assert_eq!(index.parents_of(&config_map("one", json!({})), None), Vec::<ObjectKey>::new());
        assert_eq!(index.parents_of(&config_map("two", json!({})), None), vec![key("a"), key("b")]);
        index.remove(&key("b"));
        assert_eq!(index.parents_of(&config_map("two", json!({})), None), vec![key("a")]);
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn selectors_should_match_labels_before_or_after_a_change() {
        let index = ParentIndex::new(&Mapping::Selector("spec.selector".into())).unwrap();
        index.update(&parent("web", json!({"selector": {"matchLabels": {"app": "web"}}})));
        index.update(&parent("db", json!({"selector": {"app": "db"}})));
        index.update(&parent(
            "any-env",
            json!({"selector": {"matchExpressions": [{"key": "env", "operator": "Exists"}]}}),
        ));
        index.update(&parent("none", json!({"selector": {}})));
        let web = config_map("p", json!({"app": "web"}));
        let db = config_map("p", json!({"app": "db", "env": "prod"}));
        assert_eq!(index.parents_of(&web, None), vec![key("web")]);
        // Relabelled from web to db: both sides hear of it.
        assert_eq!(index.parents_of(&db, Some(&web)), vec![key("any-env"), key("db"), key("web")]);
        assert_eq!(index.parents_of(&config_map("p", json!({"app": "cache"})), None), Vec::<ObjectKey>::new());
        assert_eq!(index.len(), 3, "an empty selector selects nothing");
    }

    #[test]
    fn mappings_without_a_parent_field_need_no_index() {
        assert!(ParentIndex::new(&Mapping::Label("app".into())).is_none());
        assert!(ParentIndex::new(&Mapping::AllInNamespace).is_none());
    }
}
