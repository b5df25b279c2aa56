//! What a plugin may touch: the Reconciler's grants against the module's
//! manifest. The manifest may ask for less than the grants, never more.

use super::crd::{Grants, KindRef};
use crate::apply::{Namespaces, reserved};
use crate::contract::{Gvk, Manifest};
use crate::pipeline::{self, Scope};

/// Where a plugin lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A `Reconciler` in this namespace: acts only there.
    Namespaced(String),
    /// A `ClusterReconciler`.
    Cluster,
}

impl KindRef {
    /// Whether this grant covers `kind` (any version).
    pub fn covers(&self, kind: &Gvk) -> bool {
        self.group == kind.group && (self.kind == "*" || self.kind == kind.kind)
    }
}

fn granted(list: &[KindRef], kind: &Gvk) -> bool {
    list.iter().any(|g| g.covers(kind))
}

/// What a manifest asks for beyond its grants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the module asks for more than the Reconciler grants: {}", .0.join("; "))]
pub struct Forbidden(pub Vec<String>);

/// Check a manifest against the grants.
///
/// # Errors
/// [`Forbidden`] listing everything the manifest asks for that the grants
/// do not give (or that no plugin may have), for a `Forbidden` condition.
pub fn check(manifest: &Manifest, grants: &Grants) -> Result<(), Forbidden> {
    let mut missing = reserved_uses(manifest);
    if !granted(&grants.for_kinds, &manifest.for_kind) {
        missing.push(format!("for {} (spec.grants.for)", manifest.for_kind));
    }
    for kind in &manifest.owns {
        if let Some(why) = reserved(kind) {
            missing.push(format!("owns {kind}, which no plugin may write ({why})"));
        } else if !granted(&grants.owns, kind) {
            missing.push(format!("owns {kind} (spec.grants.owns)"));
        }
    }
    let readable = |k: &Gvk| granted(&grants.reads, k) || granted(&grants.owns, k) || granted(&grants.for_kinds, k);
    for kind in manifest.reads.iter().chain(manifest.watches.iter().map(|w| &w.kind)) {
        if reserved(kind).is_some() {
            continue;
        }
        if !readable(kind) {
            missing.push(format!("reads {kind} (spec.grants.reads)"));
        }
    }
    if missing.is_empty() { Ok(()) } else { Err(Forbidden(missing)) }
}

/// What a manifest asks of the kinds no plugin may have, whatever its
/// grants (the host's own kinds, Leases, RBAC, webhook configurations):
/// reconciling one would let a plugin write its status and finalizers
/// (forging a Reconciler's Ready and digests), reading one would show it the
/// cluster's access control or every other plugin's spec. Module files are
/// held to this too.
pub fn reserved_uses(manifest: &Manifest) -> Vec<String> {
    let mut refused = Vec::new();
    if let Some(why) = reserved(&manifest.for_kind) {
        refused.push(format!("for {}, which no plugin may reconcile ({why})", manifest.for_kind));
    }
    for kind in manifest.reads.iter().chain(manifest.watches.iter().map(|w| &w.kind)) {
        if let Some(why) = reserved(kind) {
            refused.push(format!("reads {kind}, which no plugin may read ({why})"));
        }
    }
    refused
}

/// The controller settings a placement and grants imply: which parents it
/// sees, where children may go, adoption.
pub fn controller_settings(placement: &Placement, grants: &Grants) -> (Scope, pipeline::Grants) {
    match placement {
        Placement::Namespaced(ns) => (
            Scope::namespace(ns),
            pipeline::Grants { namespaces: Namespaces::ParentOnly, cluster_scoped: false, adopt: grants.adopt },
        ),
        Placement::Cluster => {
            let all = grants.namespaces.iter().any(|n| n == "*");
            let scope = Scope {
                namespaces: if all { None } else { Some(grants.namespaces.clone()) },
                cluster: grants.cluster_scoped,
                references_across_namespaces: grants.cross_namespace_references,
            };
            let namespaces = if all { Namespaces::Any } else { Namespaces::Only(grants.namespaces.clone()) };
            (scope, pipeline::Grants { namespaces, cluster_scoped: grants.cluster_scoped, adopt: grants.adopt })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Mapping, Watch};

    fn kind(group: &str, kind: &str) -> KindRef {
        KindRef { group: group.into(), kind: kind.into() }
    }

    fn manifest() -> Manifest {
        Manifest {
            name: "webapp".into(),
            for_kind: Gvk::new("example.operon.dev", "v1alpha1", "WebApp"),
            owns: vec![Gvk::new("apps", "v1", "Deployment"), Gvk::new("", "v1", "Service")],
            watches: vec![Watch { kind: Gvk::new("", "v1", "ConfigMap"), mapping: Mapping::AllInNamespace }],
            reads: vec![Gvk::new("", "v1", "Secret")],
            finalizer: None,
            updates: Vec::new(),
        }
    }

    fn grants() -> Grants {
        Grants {
            for_kinds: vec![kind("example.operon.dev", "WebApp")],
            owns: vec![kind("apps", "Deployment"), kind("", "Service")],
            reads: vec![kind("", "ConfigMap"), kind("", "Secret")],
            ..Grants::default()
        }
    }

    #[test]
    fn reserved_kinds_should_never_be_reconciled_or_read_whatever_the_grants() {
        let reconciler = Gvk::new("operon.dev", "v1alpha1", "Reconciler");
        let mut m = manifest();
        m.for_kind = reconciler.clone();
        let mut g = grants();
        g.for_kinds = vec![kind("operon.dev", "*")];
        let err = check(&m, &g).unwrap_err().to_string();
        assert!(err.contains("for operon.dev/v1alpha1 Reconciler, which no plugin may reconcile"), "{err}");

        let mut m = manifest();
        m.reads.push(Gvk::new("operon.dev", "v1alpha1", "ClusterReconciler"));
        m.watches.push(Watch {
            kind: Gvk::new("rbac.authorization.k8s.io", "v1", "ClusterRole"),
            mapping: Mapping::AllInNamespace,
        });
        let mut g = grants();
        g.reads.extend([kind("operon.dev", "*"), kind("rbac.authorization.k8s.io", "*")]);
        let err = check(&m, &g).unwrap_err().to_string();
        assert!(err.contains("reads operon.dev/v1alpha1 ClusterReconciler, which no plugin may read"), "{err}");
        assert!(err.contains("reads rbac.authorization.k8s.io/v1 ClusterRole, which no plugin may read"), "{err}");
        assert_eq!(reserved_uses(&manifest()), Vec::<String>::new());
    }

    #[test]
    fn a_manifest_within_its_grants_should_pass() {
        assert_eq!(check(&manifest(), &grants()), Ok(()));
        let mut wide = grants();
        wide.owns = vec![kind("apps", "*"), kind("", "*")];
        assert_eq!(check(&manifest(), &wide), Ok(()), "a wildcard covers the group");
    }

    #[test]
    fn a_manifest_beyond_its_grants_should_list_what_it_asked_for() {
        let mut g = grants();
        g.owns.retain(|k| k.kind != "Service");
        g.reads.clear();
        let err = check(&manifest(), &g).unwrap_err().to_string();
        assert!(err.contains("owns v1 Service (spec.grants.owns)"), "{err}");
        assert!(err.contains("reads v1 Secret"), "{err}");
        assert!(err.contains("reads v1 ConfigMap"), "watched kinds need a read grant: {err}");
        let mut m = manifest();
        m.owns.push(Gvk::new("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"));
        let mut g = grants();
        g.owns.push(kind("rbac.authorization.k8s.io", "*"));
        let err = check(&m, &g).unwrap_err().to_string();
        assert!(err.contains("no plugin may write"), "reserved kinds are never granted: {err}");
    }

    #[test]
    fn a_namespaced_reconciler_should_see_only_its_namespace() {
        let (scope, g) = controller_settings(&Placement::Namespaced("team-a".into()), &grants());
        assert!(scope.contains(Some("team-a")) && !scope.contains(Some("team-b")) && !scope.contains(None));
        assert_eq!(g.namespaces, Namespaces::ParentOnly);
        assert!(!g.cluster_scoped && !g.adopt);
    }

    #[test]
    fn a_cluster_reconciler_should_see_only_its_granted_namespaces() {
        let mut g = grants();
        g.namespaces = vec!["a".into(), "b".into()];
        let (scope, cg) = controller_settings(&Placement::Cluster, &g);
        assert!(scope.contains(Some("a")) && !scope.contains(Some("c")) && !scope.contains(None));
        assert_eq!(cg.namespaces, Namespaces::Only(vec!["a".into(), "b".into()]));
        g.namespaces = vec!["*".into()];
        g.cluster_scoped = true;
        let (scope, cg) = controller_settings(&Placement::Cluster, &g);
        assert!(scope.contains(Some("anything")) && scope.contains(None));
        assert_eq!(cg.namespaces, Namespaces::Any);
    }
}
