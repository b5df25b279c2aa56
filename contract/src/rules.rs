//! The host's rules for an outcome, checked before anything is written:
//! the kinds a controller may write, where children may live, their names
//! and sizes, the bounds of one outcome, and whose objects may be taken.
//!
//! **One definition for every runner.** The host's applier
//! (`apply::validate`, `apply::check_ownership`), `operon test` and the
//! Rust SDK's `testing` call these functions. The other SDKs' test runners
//! (Python, TypeScript, Go, C) implement the same checks from the same data
//! ([`RULES_JSON`], `contract/src/rules.json`, of which each SDK carries a
//! copy, checked by a test) and are held to the same verdicts, message for
//! message, by the shared cases in `contract/rules/cases/`: a case one
//! runner passes and the host refuses is a failing test.
//!
//! Offline (`operon test`, the SDKs' runners) the policy is the one
//! `operon run --module` gives a module: what its manifest owns, in any
//! namespace, cluster-scoped kinds allowed, no adoption ([`Policy::offline`]);
//! which kinds are cluster-scoped comes from [`cluster_scoped`] (the live
//! host asks discovery).

use crate::Gvk;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::OnceLock;

/// The rules' data, as every SDK's copy holds it.
pub const RULES_JSON: &str = include_str!("rules.json");

/// Where each SDK carries the rules' data, and what the file must hold:
/// the JSON itself (Go embeds it), or a module of the language holding it
/// (Python, TypeScript: what their packaging carries). A test fails
/// when one differs; write them with `cargo test -p operon-contract --
/// --ignored write_sdk_copies`.
pub fn sdk_copies() -> Vec<(&'static str, String)> {
    vec![
        (
            "sdk/python/operon_sdk/_rules.py",
            format!(
                "# The host's outcome rules (contract/src/rules.json), for the test runner.\n\
                 # Generated: a test of operon-contract fails when it drifts.\n\
                 import json\n\nRULES = json.loads(r\"\"\"\n{RULES_JSON}\"\"\")\n"
            ),
        ),
        ("sdk/go/operontest/rules.json", RULES_JSON.to_string()),
        ("sdk/c/operon_rules.h", c_header()),
        (
            "sdk/typescript/src/rules.ts",
            format!(
                "// The host's outcome rules (contract/src/rules.json), for the test runner.\n\
                 // Generated: a test of operon-contract fails when it drifts.\n\
                 export const RULES = {};\n",
                RULES_JSON.trim_end()
            ),
        ),
    ]
}

/// The C SDK's copy: the JSON as a string constant.
fn c_header() -> String {
    let lines: String =
        RULES_JSON.lines().map(|l| format!("    \"{}\\n\"\n", l.replace('\\', "\\\\").replace('"', "\\\""))).collect();
    format!(
        "/* The host's outcome rules (contract/src/rules.json), for the test runner.\n \
         * Generated: a test of operon-contract fails when it drifts. */\n\
         #ifndef OPERON_RULES_H\n#define OPERON_RULES_H\n\
         static const char OPERON_RULES_JSON[] =\n{};\n#endif\n",
        lines.trim_end()
    )
}

/// The data of [`RULES_JSON`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rules {
    /// Most objects in `desired` by default.
    pub max_desired: usize,
    /// Most events per outcome by default.
    pub max_events: usize,
    /// Largest child, in bytes of compact JSON, once prepared (namespace
    /// and ownerReference set); etcd's own limit is 1.5 MiB.
    pub max_object_bytes: usize,
    /// Longest event reason, in bytes.
    pub max_reason_bytes: usize,
    /// Longest name, in bytes.
    pub max_name_bytes: usize,
    /// Kinds no plugin may write, whatever its grants.
    pub reserved: Vec<KindRule>,
    /// Kinds known to be cluster-scoped offline.
    pub cluster_scoped: Vec<KindRule>,
}

/// A group, or one kind of it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KindRule {
    /// The API group (`""`: core).
    pub group: String,
    /// The kind; none for every kind of the group.
    #[serde(default)]
    pub kind: Option<String>,
    /// Why (reserved kinds).
    #[serde(default)]
    pub why: Option<String>,
}

impl KindRule {
    fn matches(&self, kind: &Gvk) -> bool {
        self.group == kind.group && self.kind.as_deref().is_none_or(|k| k == kind.kind)
    }
}

/// The rules' data, parsed once.
///
/// # Panics
///
/// Never: `rules.json` is part of this crate and parsed by its tests.
pub fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| serde_json::from_str(RULES_JSON).expect("contract/src/rules.json is valid"))
}

/// Why an outcome was refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("outcome refused, nothing written: {0}")]
pub struct Refused(pub String);

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
    /// Defaults no real reconciler meets: 500 children.
    pub const DEFAULT_MAX_DESIRED: usize = 500;
    /// 50 events per outcome.
    pub const DEFAULT_MAX_EVENTS: usize = 50;

    /// The policy `operon run --module` gives a module (and so `operon test`
    /// and every SDK's runner): what `owns` lists, in any namespace,
    /// cluster-scoped kinds allowed, the default bounds. Adoption is off.
    pub fn offline(controller: &str, owns: &[Gvk]) -> Policy {
        Policy {
            controller: controller.to_string(),
            owns: owns.to_vec(),
            namespaces: Namespaces::Any,
            cluster_scoped: true,
            max_desired: rules().max_desired,
            max_events: rules().max_events,
        }
    }
}

/// The parent, as the rules need it.
#[derive(Debug, Clone, Copy)]
pub struct Parent<'a> {
    /// `group/version`.
    pub api_version: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Name.
    pub name: &'a str,
    /// Namespace; none for a cluster-scoped parent.
    pub namespace: Option<&'a str>,
    /// UID (children's ownerReference).
    pub uid: Option<&'a str>,
}

impl<'a> Parent<'a> {
    /// The parent as a JSON object shows it.
    pub fn of(object: &'a Value) -> Parent<'a> {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str);
        Parent {
            api_version: text("/apiVersion").unwrap_or_default(),
            kind: text("/kind").unwrap_or_default(),
            name: text("/metadata/name").unwrap_or_default(),
            namespace: text("/metadata/namespace"),
            uid: text("/metadata/uid"),
        }
    }

    /// The controller ownerReference its children carry.
    pub fn owner_reference(&self) -> Value {
        json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        })
    }
}

/// A desired child after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Child {
    /// Its kind.
    pub kind: Gvk,
    /// Its namespace (none: cluster-scoped).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The object to apply (namespace set, ownerReference added, fields
    /// the API server owns removed).
    pub object: Value,
}

/// Kinds no guest may ever write, whatever its grants, and why: the host's
/// own resources (Reconcilers, the Leases it elects with), RBAC and webhook
/// configurations would let a plugin take over its neighbours or the host.
pub fn reserved(kind: &Gvk) -> Option<&'static str> {
    rules().reserved.iter().find(|r| r.matches(kind)).and_then(|r| r.why.as_deref())
}

/// Whether a built-in kind is cluster-scoped, for offline checks (the live
/// host asks discovery); any other kind, custom ones included, counts as
/// namespaced.
pub fn cluster_scoped(kind: &Gvk) -> bool {
    rules().cluster_scoped.iter().any(|r| r.matches(kind))
}

/// A DNS-1123 subdomain: what `metadata.name` must be.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= rules().max_name_bytes
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Check a whole outcome (its `desired` objects and its events' reasons)
/// against the policy and the parent, and build the children to apply.
/// `namespaced(kind)` says whether a kind is namespaced.
///
/// # Errors
///
/// The first violation found, naming the offending object and the rule.
pub fn check_outcome<'r>(
    policy: &Policy,
    parent: &Parent<'_>,
    desired: &[Value],
    reasons: impl ExactSizeIterator<Item = &'r str>,
    namespaced: impl Fn(&Gvk) -> bool,
) -> Result<Vec<Child>, Refused> {
    if desired.len() > policy.max_desired {
        return Err(Refused(format!(
            "{} desired objects exceed the limit of {} per outcome (the host's --max-children-per-outcome)",
            desired.len(),
            policy.max_desired
        )));
    }
    if reasons.len() > policy.max_events {
        return Err(Refused(format!(
            "{} events exceed the limit of {} per outcome (the host's --max-events-per-outcome)",
            reasons.len(),
            policy.max_events
        )));
    }
    let max_bytes = rules().max_object_bytes;
    let owner = parent.owner_reference();
    let mut seen = HashSet::new();
    let mut children = Vec::with_capacity(desired.len());
    for (i, object) in desired.iter().enumerate() {
        let kind = Gvk::of(object).ok_or_else(|| Refused(format!("desired[{i}] lacks apiVersion or kind")))?;
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let what = format!("desired[{i}] ({kind} {name})");
        if let Some(why) = reserved(&kind) {
            return Err(Refused(format!("{what}: {kind} may never be written by a plugin ({why})")));
        }
        if !policy.owns.contains(&kind) {
            let owns: Vec<String> = policy.owns.iter().map(ToString::to_string).collect();
            return Err(Refused(format!(
                "{what}: kind {kind} is not among the kinds {} may write ({})",
                policy.controller,
                if owns.is_empty() { "none".to_string() } else { owns.join(", ") }
            )));
        }
        if !valid_name(name) {
            return Err(Refused(format!(
                "{what}: metadata.name must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; at most 253)"
            )));
        }
        let child_ns = object.pointer("/metadata/namespace").and_then(Value::as_str);
        let ns = match (namespaced(&kind), parent.namespace) {
            (true, Some(parent_ns)) => match child_ns {
                None => Some(parent_ns),
                Some(ns) if ns == parent_ns => Some(parent_ns),
                Some(ns) => {
                    return Err(Refused(format!(
                        "{what}: namespace {ns:?} differs from the parent's {parent_ns:?}; children live in their parent's namespace"
                    )));
                }
            },
            (true, None) => match child_ns {
                Some(ns) if policy.namespaces.allows(ns) => Some(ns),
                Some(ns) => {
                    return Err(Refused(format!(
                        "{what}: namespace {ns:?} is not granted to {} (spec.grants.namespaces)",
                        policy.controller
                    )));
                }
                None => {
                    return Err(Refused(format!(
                        "{what}: a namespaced child of a cluster-scoped parent needs metadata.namespace"
                    )));
                }
            },
            (false, Some(_)) => {
                return Err(Refused(format!(
                    "{what}: {kind} is cluster-scoped and cannot be owned by a namespaced parent"
                )));
            }
            (false, None) if !policy.cluster_scoped => {
                return Err(Refused(format!(
                    "{what}: {kind} is cluster-scoped, and {} may not write cluster-scoped kinds (spec.grants.clusterScoped)",
                    policy.controller
                )));
            }
            (false, None) => None,
        };
        if !seen.insert((kind.clone(), ns, name)) {
            return Err(Refused(format!("{what}: returned twice")));
        }
        let mut object = object.clone();
        prepare(&mut object, ns, &owner);
        let size = json_len(&object);
        if size > max_bytes {
            return Err(Refused(format!("{what}: {size} bytes exceeds the {max_bytes}-byte object limit")));
        }
        children.push(Child { kind, namespace: ns.map(str::to_string), name: name.to_string(), object });
    }
    let max_reason = rules().max_reason_bytes;
    for (i, reason) in reasons.enumerate() {
        if reason.is_empty() || reason.len() > max_reason {
            return Err(Refused(format!("events[{i}]: reason must be 1-{max_reason} characters")));
        }
    }
    Ok(children)
}

/// An existing object a child would be written over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    /// No controller owns it.
    Unowned,
    /// A controller owns it.
    ControlledBy {
        /// The owner's UID.
        uid: String,
        /// The owner's kind.
        kind: String,
        /// The owner's name.
        name: String,
    },
}

impl Existing {
    /// Who controls an object, from its `ownerReferences`.
    pub fn of(object: &Value) -> Existing {
        let owners = object.pointer("/metadata/ownerReferences").and_then(Value::as_array);
        let controller =
            owners.into_iter().flatten().find(|o| o.get("controller").and_then(Value::as_bool) == Some(true));
        match controller {
            None => Existing::Unowned,
            Some(o) => {
                let text = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                Existing::ControlledBy { uid: text("uid"), kind: text("kind"), name: text("name") }
            }
        }
    }
}

/// Refuse to write a child over an object controlled by someone else, or
/// over one with no controller unless `adopt`. `existing(kind, namespace,
/// name)` finds the object a child would be written over.
///
/// # Errors
///
/// The first child that would take an object over.
pub fn check_ownership(
    parent_uid: &str,
    children: &[Child],
    adopt: bool,
    existing: impl Fn(&Gvk, Option<&str>, &str) -> Option<Existing>,
) -> Result<(), Refused> {
    for child in children {
        let key = match &child.namespace {
            Some(ns) => format!("{ns}/{}", child.name),
            None => child.name.clone(),
        };
        match existing(&child.kind, child.namespace.as_deref(), &child.name) {
            None => {}
            Some(Existing::ControlledBy { uid, .. }) if uid == parent_uid => {}
            Some(Existing::ControlledBy { kind, name, .. }) => {
                return Err(Refused(format!(
                    "{} {key} exists and is controlled by {kind} {name}; it is never taken over (rename the child, or delete the other owner)",
                    child.kind.kind
                )));
            }
            Some(Existing::Unowned) if adopt => {}
            Some(Existing::Unowned) => {
                return Err(Refused(format!(
                    "{} {key} exists without a controller owner; adopting it needs spec.grants.adopt: true (or delete it, or rename the child)",
                    child.kind.kind
                )));
            }
        }
    }
    Ok(())
}

/// Every check of an outcome as an offline runner makes it (`operon test`,
/// the Rust SDK's `testing`): [`check_outcome`] with [`Policy::offline`]
/// and [`cluster_scoped`], then [`check_ownership`] without adoption, where
/// `children` are the parent's own (never a take-over) and `cluster` the
/// other objects a child could be written over.
///
/// # Errors
///
/// The rule the outcome breaks.
pub fn check_offline<'r>(
    controller: &str,
    owns: &[Gvk],
    parent: &Value,
    children: &[Value],
    cluster: &[Value],
    desired: &[Value],
    reasons: impl ExactSizeIterator<Item = &'r str>,
) -> Result<(), Refused> {
    let policy = Policy::offline(controller, owns);
    let parent = Parent::of(parent);
    let checked = check_outcome(&policy, &parent, desired, reasons, |k| !cluster_scoped(k))?;
    let is = |o: &Value, kind: &Gvk, namespace: Option<&str>, name: &str| {
        Gvk::of(o).as_ref() == Some(kind)
            && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
            && o.pointer("/metadata/namespace").and_then(Value::as_str).is_none_or(|ns| namespace == Some(ns))
    };
    check_ownership(parent.uid.unwrap_or_default(), &checked, false, |kind, namespace, name| {
        if children.iter().any(|c| is(c, kind, namespace, name)) {
            return None;
        }
        cluster.iter().find(|o| is(o, kind, namespace, name)).map(Existing::of)
    })
}

/// A shared rule case (`contract/rules/cases/NAME.json`) as a runner uses
/// it: its `pad` applied (`desired[I].data.pad` set to N `x`).
pub fn padded(mut case: Value) -> Value {
    if let Some(pad) = case.get("pad").cloned() {
        let i = pad["desired"].as_u64().unwrap_or_default() as usize;
        let bytes = pad["bytes"].as_u64().unwrap_or_default() as usize;
        case["outcome"]["desired"][i]["data"]["pad"] = "x".repeat(bytes).into();
    }
    case
}

/// The length of `v`'s compact JSON text, counted as it is written (no
/// buffer).
pub fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, v) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_data_should_parse_and_say_what_the_code_assumed() {
        let r = rules();
        assert_eq!((r.max_desired, r.max_events), (Policy::DEFAULT_MAX_DESIRED, Policy::DEFAULT_MAX_EVENTS));
        assert_eq!(r.max_object_bytes, 1 << 20);
        assert!(reserved(&Gvk::new("coordination.k8s.io", "v1", "Lease")).is_some());
        assert!(reserved(&Gvk::new("coordination.k8s.io", "v1", "Other")).is_none());
        assert!(reserved(&Gvk::new("rbac.authorization.k8s.io", "v1", "Role")).is_some());
        assert!(cluster_scoped(&Gvk::new("", "v1", "Namespace")));
        assert!(cluster_scoped(&Gvk::new("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration")));
        assert!(!cluster_scoped(&Gvk::new("", "v1", "ConfigMap")));
    }

    #[test]
    fn every_sdk_should_carry_the_rules_data_as_it_is_here() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (copy, text) in sdk_copies() {
            let found = std::fs::read_to_string(root.join(copy)).unwrap_or_else(|e| panic!("{copy}: {e}"));
            assert!(
                found == text,
                "{copy} differs from contract/src/rules.json: regenerate it (see sdk_copies in contract/src/rules.rs)"
            );
        }
    }

    #[test]
    #[ignore = "writes the SDKs' copies of rules.json; run it after changing the rules"]
    fn write_sdk_copies() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (copy, text) in sdk_copies() {
            std::fs::write(root.join(copy), text).unwrap();
        }
    }

    #[test]
    fn ownership_should_be_read_from_owner_references() {
        let owned = json!({"metadata": {"ownerReferences": [{"kind": "A", "name": "a", "uid": "1"},
            {"kind": "B", "name": "b", "uid": "2", "controller": true}]}});
        assert_eq!(
            Existing::of(&owned),
            Existing::ControlledBy { uid: "2".into(), kind: "B".into(), name: "b".into() }
        );
        assert_eq!(Existing::of(&json!({"metadata": {}})), Existing::Unowned);
    }
}
