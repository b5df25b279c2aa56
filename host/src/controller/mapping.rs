//! From informer events to parent keys: `for`, `owns` and `watches`, with
//! the default predicate.

use super::index::ParentIndex;
use crate::cache::{CachedObject, ObjectEvent, ObjectKey};
use crate::contract::{Gvk, Mapping};

/// How to enqueue a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueue<K = ObjectKey> {
    /// A change: normal priority.
    Now(K),
    /// From an initial list: low priority.
    Initial(K),
}

impl<K> Enqueue<K> {
    /// The key.
    pub fn key(&self) -> &K {
        match self {
            Enqueue::Now(k) | Enqueue::Initial(k) => k,
        }
    }

    /// The same priority for another key.
    pub fn map<L>(self, f: impl FnOnce(K) -> L) -> Enqueue<L> {
        match self {
            Enqueue::Now(k) => Enqueue::Now(f(k)),
            Enqueue::Initial(k) => Enqueue::Initial(f(k)),
        }
    }
}

/// Keys for an event on the parent kind itself (`for`).
///
/// Default predicate: an update is skipped unless it changes the generation
/// (spec), labels, annotations, finalizers or deletionTimestamp, so status
/// writes — including our own — do not trigger reconciles.
pub fn for_event(event: &ObjectEvent) -> Option<Enqueue> {
    match event {
        ObjectEvent::Applied { new, initial: true, .. } => Some(Enqueue::Initial(new.key())),
        ObjectEvent::Applied { old: None, new, .. } => Some(Enqueue::Now(new.key())),
        ObjectEvent::Applied { old: Some(old), new, .. } => {
            meaningful_change(old, new).then(|| Enqueue::Now(new.key()))
        }
        ObjectEvent::Resync(o) => Some(Enqueue::Now(o.key())),
        // Children are garbage-collected by Kubernetes; a parent with a
        // finalizer is reconciled on the update that set deletionTimestamp.
        ObjectEvent::Deleted(_) => None,
    }
}

/// Whether an update passes the default predicate.
pub fn meaningful_change(old: &CachedObject, new: &CachedObject) -> bool {
    new.meaningfully_differs_from(old)
}

/// Keys for an event on an owned kind: the controller owner, if it is of
/// the parent kind. Every change of a child counts (its status feeds the
/// parent's status), as with controller-runtime's `Owns`. A cluster-scoped
/// parent (`parent_namespaced` false) is keyed without a namespace, whatever
/// the child's.
pub fn owned_event(event: &ObjectEvent, parent: &Gvk, parent_namespaced: bool) -> Option<Enqueue> {
    let (object, initial) = event_object(event);
    let owner = object.controller_owner()?;
    if owner.group() != parent.group || *owner.kind != parent.kind {
        return None;
    }
    let namespace = if parent_namespaced { object.namespace() } else { None };
    let key = ObjectKey::new(namespace, &owner.name);
    Some(if initial { Enqueue::Initial(key) } else { Enqueue::Now(key) })
}

/// Keys for an event on a watched kind, through its declared mapping.
/// `parents_in(ns)` lists the parent keys of a namespace (for fan-out);
/// `index` holds the parents' references or selectors, for the mappings
/// that read a field of the parent.
pub fn watched_event(
    event: &ObjectEvent,
    mapping: &Mapping,
    parents_in: impl Fn(Option<&str>) -> Vec<ObjectKey>,
    index: Option<&ParentIndex>,
) -> Vec<Enqueue> {
    let (object, initial) = event_object(event);
    let old = match event {
        ObjectEvent::Applied { old, .. } => old.as_deref(),
        ObjectEvent::Deleted(_) | ObjectEvent::Resync(_) => None,
    };
    let ns = object.namespace();
    let keys = match mapping {
        Mapping::Label(label) => object.label(label).map(|name| vec![ObjectKey::new(ns, name)]).unwrap_or_default(),
        Mapping::Annotation(annotation) => object
            .annotation(annotation)
            .map(|v| match v.split_once('/') {
                Some((ns, name)) => vec![ObjectKey::new(Some(ns), name)],
                None => vec![ObjectKey::new(ns, &v)],
            })
            .unwrap_or_default(),
        Mapping::AllInNamespace => parents_in(ns),
        Mapping::Reference(_) | Mapping::Selector(_) => index.map(|i| i.parents_of(object, old)).unwrap_or_default(),
    };
    keys.into_iter().map(|k| if initial { Enqueue::Initial(k) } else { Enqueue::Now(k) }).collect()
}

/// Whether a watched object maps to `parent` (the reverse of
/// [`watched_event`]): used to gather `request.related`.
pub fn relates_to(object: &CachedObject, mapping: &Mapping, parent: &ObjectKey) -> bool {
    let ns = object.namespace();
    match mapping {
        Mapping::Label(label) => ns == parent.namespace.as_deref() && object.label(label) == Some(parent.name.as_str()),
        Mapping::Annotation(annotation) => match object.annotation(annotation) {
            Some(v) => match v.split_once('/') {
                Some((n, name)) => Some(n) == parent.namespace.as_deref() && name == parent.name,
                None => ns == parent.namespace.as_deref() && v == parent.name,
            },
            None => false,
        },
        Mapping::AllInNamespace => ns == parent.namespace.as_deref(),
        // Read from the parent's field: `pipeline::request` gathers these.
        Mapping::Reference(_) | Mapping::Selector(_) => false,
    }
}

pub(crate) fn event_object(event: &ObjectEvent) -> (&CachedObject, bool) {
    match event {
        ObjectEvent::Applied { new, initial, .. } => (new, *initial),
        ObjectEvent::Deleted(o) | ObjectEvent::Resync(o) => (o, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::sync::Arc;

    fn obj(v: Value) -> Arc<CachedObject> {
        Arc::new(CachedObject::from_value(v).unwrap())
    }

    fn webapp(generation: i64, status: i64) -> Arc<CachedObject> {
        obj(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"namespace": "a", "name": "shop", "generation": generation, "labels": {"x": "1"}},
            "status": {"readyReplicas": status}}))
    }

    fn applied(old: Option<Arc<CachedObject>>, new: Arc<CachedObject>) -> ObjectEvent {
        ObjectEvent::Applied { old, new, initial: false }
    }

    #[test]
    fn status_only_updates_of_the_parent_are_skipped() {
        assert_eq!(for_event(&applied(Some(webapp(1, 0)), webapp(1, 3))), None);
        assert_eq!(
            for_event(&applied(Some(webapp(1, 0)), webapp(2, 0))),
            Some(Enqueue::Now(ObjectKey::new(Some("a"), "shop")))
        );
        assert!(for_event(&ObjectEvent::Resync(webapp(1, 0))).is_some(), "resync bypasses predicates");
        let initial = ObjectEvent::Applied { old: None, new: webapp(1, 0), initial: true };
        assert!(matches!(for_event(&initial), Some(Enqueue::Initial(_))));
    }

    #[test]
    fn owned_events_map_to_the_controller_owner_of_the_parent_kind() {
        let parent = Gvk::new("example.operon.dev", "v1alpha1", "WebApp");
        let child = |kind: &str, controller: bool| {
            obj(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": "a", "name": "d",
                "ownerReferences": [{"apiVersion": "example.operon.dev/v1beta1", "kind": kind, "name": "shop", "uid": "u", "controller": controller}]}}))
        };
        let key = owned_event(&ObjectEvent::Deleted(child("WebApp", true)), &parent, true);
        assert_eq!(
            key,
            Some(Enqueue::Now(ObjectKey::new(Some("a"), "shop"))),
            "any version of the parent's group matches"
        );
        assert_eq!(owned_event(&ObjectEvent::Deleted(child("Other", true)), &parent, true), None);
        assert_eq!(
            owned_event(&ObjectEvent::Deleted(child("WebApp", false)), &parent, true),
            None,
            "non-controller owners do not count"
        );
    }

    #[test]
    fn a_cluster_scoped_parent_should_hear_about_its_namespaced_children() {
        let parent = Gvk::new("example.operon.dev", "v1alpha1", "Tenant");
        let child = obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "team-a", "name": "quota",
            "ownerReferences": [{"apiVersion": "example.operon.dev/v1alpha1", "kind": "Tenant", "name": "acme", "uid": "u", "controller": true}]}}),
        );
        let ev = ObjectEvent::Applied { old: None, new: child, initial: false };
        assert_eq!(owned_event(&ev, &parent, false), Some(Enqueue::Now(ObjectKey::new(None, "acme"))));
        assert_eq!(owned_event(&ev, &parent, true), Some(Enqueue::Now(ObjectKey::new(Some("team-a"), "acme"))));
    }

    #[test]
    fn watched_events_follow_their_mapping() {
        let cm = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "a", "name": "c",
            "labels": {"app": "shop"}, "annotations": {"parent": "b/other"}}}));
        let ev = ObjectEvent::Applied { old: None, new: cm.clone(), initial: false };
        let none = |_: Option<&str>| vec![];
        assert_eq!(
            watched_event(&ev, &Mapping::Label("app".into()), none, None),
            vec![Enqueue::Now(ObjectKey::new(Some("a"), "shop"))]
        );
        assert_eq!(
            watched_event(&ev, &Mapping::Annotation("parent".into()), none, None),
            vec![Enqueue::Now(ObjectKey::new(Some("b"), "other"))]
        );
        assert!(watched_event(&ev, &Mapping::Label("missing".into()), none, None).is_empty());
        let all = watched_event(
            &ev,
            &Mapping::AllInNamespace,
            |ns| vec![ObjectKey::new(ns, "p1"), ObjectKey::new(ns, "p2")],
            None,
        );
        assert_eq!(all.len(), 2);
        assert!(relates_to(&cm, &Mapping::Label("app".into()), &ObjectKey::new(Some("a"), "shop")));
        assert!(!relates_to(&cm, &Mapping::Label("app".into()), &ObjectKey::new(Some("b"), "shop")));
        assert!(relates_to(&cm, &Mapping::Annotation("parent".into()), &ObjectKey::new(Some("b"), "other")));
    }
}
