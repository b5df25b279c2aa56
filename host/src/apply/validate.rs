//! Checking a whole outcome before anything is written.
//!
//! **Invariant: nothing is written unless every part of the outcome is
//! allowed.** What is allowed is the host's [`Policy`] — the module's
//! manifest narrowed by the Reconciler's grants — never the module's word
//! alone.

use crate::cache::{CachedObject, ObjectKey};
use crate::contract::rules::{self, Existing, Parent};
use crate::contract::{Gvk, Outcome};
use serde_json::Value;
use std::sync::Arc;

pub use crate::contract::rules::{Namespaces, Policy, reserved};

/// Largest object the host will write (etcd's limit is 1.5 MiB).
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Why an outcome was refused before anything was written.
pub type ValidationError = rules::Refused;

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

fn parent_of(parent: &CachedObject) -> Parent<'_> {
    Parent {
        api_version: parent.api_version(),
        kind: parent.kind(),
        name: parent.name(),
        namespace: parent.namespace(),
        uid: parent.uid(),
    }
}

/// Check a whole outcome against the policy and the parent, and build the
/// children to apply. `namespaced(kind)` says whether an owned kind is
/// namespaced (from discovery). The rules are [`operon_contract::rules`]'s,
/// shared with `operon test` and every SDK's test runner.
///
/// # Errors
/// The first violation found, naming the offending object and the rule.
pub fn validate(
    policy: &Policy,
    parent: &CachedObject,
    outcome: &Outcome,
    namespaced: impl Fn(&Gvk) -> bool,
) -> Result<Vec<Child>, ValidationError> {
    let reasons = outcome.events.iter().map(|e| e.reason.as_str());
    let children = rules::check_outcome(policy, &parent_of(parent), &outcome.desired, reasons, namespaced)?;
    Ok(children
        .into_iter()
        .map(|c| Child { key: ObjectKey { namespace: c.namespace, name: c.name }, kind: c.kind, object: c.object })
        .collect())
}

/// Refuse to write a child over an object controlled by someone else, or
/// over one without a controller unless `adopt`; `existing` finds the
/// object a child would be written over (from the cache).
///
/// # Errors
/// The first child that would take an object over.
pub fn check_ownership(
    parent: &CachedObject,
    children: &[Child],
    adopt: bool,
    existing: impl Fn(&Gvk, &ObjectKey) -> Option<Arc<CachedObject>>,
) -> Result<(), ValidationError> {
    let children: Vec<rules::Child> = children
        .iter()
        .map(|c| rules::Child {
            kind: c.kind.clone(),
            namespace: c.key.namespace.clone(),
            name: c.key.name.clone(),
            object: Value::Null,
        })
        .collect();
    rules::check_ownership(parent.uid().unwrap_or_default(), &children, adopt, |kind, namespace, name| {
        let current = existing(kind, &ObjectKey::new(namespace, name))?;
        Some(match current.controller_owner() {
            Some(owner) => Existing::ControlledBy {
                uid: owner.uid.to_string(),
                kind: owner.kind.to_string(),
                name: owner.name.to_string(),
            },
            None => Existing::Unowned,
        })
    })
}

/// The controller ownerReference children of `parent` carry.
pub fn owner_reference(parent: &CachedObject) -> Value {
    parent_of(parent).owner_reference()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Event;
    use serde_json::json;

    fn policy() -> Policy {
        Policy {
            controller: "webapp".into(),
            owns: vec![Gvk::new("apps", "v1", "Deployment"), Gvk::new("", "v1", "Service")],
            namespaces: Namespaces::ParentOnly,
            cluster_scoped: false,
            max_desired: Policy::DEFAULT_MAX_DESIRED,
            max_events: Policy::DEFAULT_MAX_EVENTS,
        }
    }

    fn parent() -> CachedObject {
        CachedObject::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "team-a", "uid": "u-1"}
        }))
        .unwrap()
    }

    fn cluster_parent() -> CachedObject {
        CachedObject::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "uid": "u-2"}
        }))
        .unwrap()
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
        validate(&policy(), &parent(), o, |_| true)
    }

    #[test]
    fn validate_should_set_namespace_and_owner_and_strip_server_fields() {
        let children = validate_all_namespaced(&outcome(vec![deployment(None)])).unwrap();
        let obj = &children[0].object;
        assert_eq!(obj["metadata"]["namespace"], "team-a");
        assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(obj["metadata"]["ownerReferences"][0]["kind"], "WebApp");
        assert_eq!(obj["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(obj["metadata"]["ownerReferences"][0]["blockOwnerDeletion"], true);
        assert!(obj["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn validate_should_refuse_kinds_not_owned() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let err = validate_all_namespaced(&outcome(vec![deployment(None), secret])).unwrap_err();
        assert!(err.0.contains("desired[1] (v1 Secret s)") && err.0.contains("not among the kinds"), "{err}");
    }

    #[test]
    fn validate_should_refuse_reserved_kinds_even_when_owned() {
        let mut p = policy();
        let lease = Gvk::new("coordination.k8s.io", "v1", "Lease");
        let reconciler = Gvk::new("operon.dev", "v1alpha1", "Reconciler");
        p.owns.extend([lease, reconciler]);
        for (api_version, kind) in [("coordination.k8s.io/v1", "Lease"), ("operon.dev/v1alpha1", "Reconciler")] {
            let o = outcome(vec![json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}})]);
            let err = validate(&p, &parent(), &o, |_| true).unwrap_err();
            assert!(err.0.contains("may never be written"), "{err}");
        }
    }

    #[test]
    fn validate_should_refuse_other_namespaces() {
        let err = validate_all_namespaced(&outcome(vec![deployment(Some("kube-system"))])).unwrap_err();
        assert!(err.0.contains("\"kube-system\"") && err.0.contains("\"team-a\""), "{err}");
        assert!(validate_all_namespaced(&outcome(vec![deployment(Some("team-a"))])).is_ok());
    }

    #[test]
    fn children_of_a_cluster_scoped_parent_should_go_only_where_granted() {
        let mut p = policy();
        let o = outcome(vec![deployment(Some("team-b"))]);
        let err = validate(&p, &cluster_parent(), &o, |_| true).unwrap_err();
        assert!(err.0.contains("not granted"), "{err}");
        p.namespaces = Namespaces::Only(vec!["team-b".into()]);
        assert!(validate(&p, &cluster_parent(), &o, |_| true).is_ok());
        p.owns.push(Gvk::new("", "v1", "Namespace"));
        let ns = outcome(vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-c"}})]);
        let err = validate(&p, &cluster_parent(), &ns, |_| false).unwrap_err();
        assert!(err.0.contains("clusterScoped"), "{err}");
        p.cluster_scoped = true;
        assert!(validate(&p, &cluster_parent(), &ns, |_| false).is_ok());
    }

    #[test]
    fn validate_should_refuse_duplicates_bad_names_and_cluster_scoped_children() {
        let err = validate_all_namespaced(&outcome(vec![deployment(None), deployment(None)])).unwrap_err();
        assert!(err.0.contains("returned twice"), "{err}");
        let mut bad = deployment(None);
        bad["metadata"]["name"] = "Shop_1".into();
        assert!(validate_all_namespaced(&outcome(vec![bad])).unwrap_err().0.contains("DNS subdomain"));
        let err = validate(&policy(), &parent(), &outcome(vec![deployment(None)]), |_| false).unwrap_err();
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
    fn validate_should_bound_children_and_events_per_outcome_naming_the_limit() {
        let p = Policy { max_desired: 3, max_events: 2, ..policy() };
        let many: Vec<Value> = (0..4)
            .map(|i| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{i}")}}))
            .collect();
        let err = validate(&p, &parent(), &outcome(many), |_| true).unwrap_err();
        assert!(err.0.contains("4 desired objects exceed the limit of 3"), "{err}");
        let mut o = outcome(vec![]);
        o.events = (0..3).map(|i| Event { warning: false, reason: "R".into(), message: format!("{i}") }).collect();
        let err = validate(&p, &parent(), &o, |_| true).unwrap_err();
        assert!(err.0.contains("3 events exceed the limit of 2"), "{err}");
    }
}
