//! Checking a whole outcome before anything is written.
//!
//! **Invariant: nothing is written unless every part of the outcome is
//! allowed.** What is allowed is the host's [`Policy`] — the module's
//! manifest narrowed by the Reconciler's grants — never the module's word
//! alone.

use crate::cache::{CachedObject, ObjectKey};
use crate::contract::{Gvk, Outcome};
use serde_json::{Value, json};
use std::collections::HashSet;

/// Largest object the host will write (etcd's limit is 1.5 MiB).
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Why an outcome was refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("outcome refused, nothing written: {0}")]
pub struct ValidationError(pub String);

/// Where children may be written, besides the parent's own namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Namespaces {
    /// Only the parent's namespace (children of a cluster-scoped parent must
    /// then be cluster-scoped).
    #[default]
    ParentOnly,
    /// These namespaces (a ClusterReconciler's grant).
    Only(Vec<String>),
    /// Any namespace (standalone mode without a namespace flag).
    Any,
}

impl Namespaces {
    /// Whether a child may live in `ns`.
    pub fn allows(&self, ns: &str) -> bool {
        match self {
            Namespaces::ParentOnly => false,
            Namespaces::Only(list) => list.iter().any(|n| n == ns),
            Namespaces::Any => true,
        }
    }
}

/// What one controller may write: decided by the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Controller name, for messages.
    pub controller: String,
    /// Kinds children may have: the manifest's `owns`, each within the
    /// grants.
    pub owns: Vec<Gvk>,
    /// Namespaces children may be written in, for cluster-scoped parents.
    pub namespaces: Namespaces,
    /// Whether cluster-scoped children are allowed.
    pub cluster_scoped: bool,
    /// Most objects in `desired`.
    pub max_desired: usize,
    /// Most events per outcome.
    pub max_events: usize,
}

impl Policy {
    /// Defaults no real reconciler meets: 500 children, 50 events.
    pub const DEFAULT_MAX_DESIRED: usize = 500;
    /// See [`Policy::DEFAULT_MAX_DESIRED`].
    pub const DEFAULT_MAX_EVENTS: usize = 50;
}

/// Kinds no guest may ever write, whatever its grants: the host's own
/// resources (Reconcilers, leases it elects with) would let a plugin take
/// over its neighbours or the host.
pub fn reserved(kind: &Gvk) -> Option<&'static str> {
    if kind.group == "operon.dev" {
        return Some("operon.dev kinds belong to the host");
    }
    if kind.group == "coordination.k8s.io" && kind.kind == "Lease" {
        return Some("Leases carry leader election");
    }
    if kind.group == "rbac.authorization.k8s.io" {
        return Some("RBAC objects would let a plugin grant itself rights");
    }
    if kind.group == "admissionregistration.k8s.io" {
        return Some("webhook configurations are managed by the host");
    }
    None
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

/// Check a whole outcome against the policy and the parent, and build the
/// children to apply. `namespaced(kind)` says whether an owned kind is
/// namespaced (from discovery).
///
/// # Errors
/// The first violation found, naming the offending object and the rule.
pub fn validate(
    policy: &Policy,
    parent: &CachedObject,
    outcome: &Outcome,
    namespaced: impl Fn(&Gvk) -> bool,
) -> Result<Vec<Child>, ValidationError> {
    if outcome.desired.len() > policy.max_desired {
        return Err(ValidationError(format!(
            "{} desired objects exceed the limit of {} per outcome (the host's --max-children-per-outcome)",
            outcome.desired.len(),
            policy.max_desired
        )));
    }
    if outcome.events.len() > policy.max_events {
        return Err(ValidationError(format!(
            "{} events exceed the limit of {} per outcome (the host's --max-events-per-outcome)",
            outcome.events.len(),
            policy.max_events
        )));
    }
    let parent_ns = parent.namespace();
    let owner = owner_reference(parent);
    let mut seen = HashSet::new();
    let mut children = Vec::with_capacity(outcome.desired.len());
    for (i, desired) in outcome.desired.iter().enumerate() {
        let kind = Gvk::of(desired).ok_or_else(|| ValidationError(format!("desired[{i}] lacks apiVersion or kind")))?;
        let name = desired.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let what = format!("desired[{i}] ({kind} {name})");
        if let Some(why) = reserved(&kind) {
            return Err(ValidationError(format!("{what}: {kind} may never be written by a plugin ({why})")));
        }
        if !policy.owns.contains(&kind) {
            let owns: Vec<String> = policy.owns.iter().map(ToString::to_string).collect();
            return Err(ValidationError(format!(
                "{what}: kind {kind} is not among the kinds {} may write ({})",
                policy.controller,
                if owns.is_empty() { "none".to_string() } else { owns.join(", ") }
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
                Some(ns) if policy.namespaces.allows(ns) => Some(ns),
                Some(ns) => {
                    return Err(ValidationError(format!(
                        "{what}: namespace {ns:?} is not granted to {} (spec.grants.namespaces)",
                        policy.controller
                    )));
                }
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
            (false, None) if !policy.cluster_scoped => {
                return Err(ValidationError(format!(
                    "{what}: {kind} is cluster-scoped, and {} may not write cluster-scoped kinds (spec.grants.clusterScoped)",
                    policy.controller
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
        let size = json_len(&object);
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

/// The length of `v`'s JSON text, counted as it is written (no buffer).
fn json_len(v: &Value) -> usize {
    let mut len = 0;
    match super::stream_json(v, |bytes| len += bytes.len()) {
        Ok(()) => len,
        Err(_) => usize::MAX,
    }
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

/// The controller ownerReference children of `parent` carry.
pub fn owner_reference(parent: &CachedObject) -> Value {
    json!({
        "apiVersion": parent.api_version(),
        "kind": parent.kind(),
        "name": parent.name(),
        "uid": parent.uid(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Event;

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
