//! Settings of one module's controller: what it may touch and how it is
//! bounded. The host decides them (a Reconciler's grants and limits, or the
//! command line's), never the module.

use crate::apply::{Namespaces, Policy};
use crate::cache::ObjectKey;
use crate::contract::Gvk;
use crate::controller;
use std::sync::Arc;
use std::time::Duration;

/// What a controller may do beyond its parents' own namespace: the host's
/// grants (a Reconciler's `spec.grants`, or the command line's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants {
    /// Namespaces children of cluster-scoped parents may be written in.
    pub namespaces: Namespaces,
    /// Whether cluster-scoped children may be written.
    pub cluster_scoped: bool,
    /// Whether an existing object without a controller owner may be adopted
    /// as a child. Objects controlled by someone else are never taken over.
    pub adopt: bool,
}

impl Default for Grants {
    /// What `operon run --module` grants a module it was given: what its
    /// manifest asks, in any namespace, without adoption.
    fn default() -> Self {
        Grants { namespaces: Namespaces::Any, cluster_scoped: true, adopt: false }
    }
}

/// Objects no plugin may write or adopt, whatever its grants: those the
/// host itself depends on, such as the ConfigMap holding a Reconciler's
/// module (a plugin that could rewrite it would run its own code under
/// another plugin's grants and ServiceAccount). The lookup answers why an
/// object is protected. Cheap to clone; by default nothing is.
#[derive(Clone, Default)]
pub struct Protected(Option<Arc<ProtectedLookup>>);

/// Why an object is protected (`None`: it is not).
type ProtectedLookup = dyn Fn(&Gvk, &ObjectKey) -> Option<String> + Send + Sync;

impl Protected {
    /// Objects for which `lookup` says why they are protected.
    pub fn new(lookup: impl Fn(&Gvk, &ObjectKey) -> Option<String> + Send + Sync + 'static) -> Protected {
        Protected(Some(Arc::new(lookup)))
    }

    /// Why the object `kind` `key` may not be written by a plugin, if so.
    pub fn why(&self, kind: &Gvk, key: &ObjectKey) -> Option<String> {
        self.0.as_ref().and_then(|lookup| lookup(kind, key))
    }
}

impl std::fmt::Debug for Protected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Protected(lookup)" } else { "Protected(none)" })
    }
}

/// Which parents a controller reconciles (and whose objects it may read):
/// informers are shared per kind, each controller sees its part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// These namespaces, or `None` for every namespace.
    pub namespaces: Option<Vec<String>>,
    /// Whether cluster-scoped objects are in scope.
    pub cluster: bool,
    /// Whether a namespaced parent's reference (`namespace/name`) may name
    /// an object of another namespace in scope. Off for tenants: a
    /// parent's author in one namespace would otherwise have the plugin
    /// read another namespace's objects for them (the confused deputy that
    /// Gateway API's ReferenceGrant exists for). A ClusterReconciler opts in
    /// with `spec.grants.crossNamespaceReferences`.
    pub references_across_namespaces: bool,
}

impl Default for Scope {
    fn default() -> Self {
        Scope::all()
    }
}

impl Scope {
    /// Every namespace and cluster-scoped objects.
    pub fn all() -> Scope {
        Scope { namespaces: None, cluster: true, references_across_namespaces: true }
    }

    /// One namespace only (a namespaced Reconciler).
    pub fn namespace(ns: &str) -> Scope {
        Scope { namespaces: Some(vec![ns.to_string()]), cluster: false, references_across_namespaces: false }
    }

    /// Whether an object in `namespace` (`None`: cluster-scoped) is in scope.
    pub fn contains(&self, namespace: Option<&str>) -> bool {
        match (namespace, &self.namespaces) {
            (None, _) => self.cluster,
            (Some(_), None) => true,
            (Some(ns), Some(list)) => list.iter().any(|n| n == ns),
        }
    }

    /// Whether every namespace is in scope.
    pub fn all_namespaces(&self) -> bool {
        self.namespaces.is_none()
    }
}

/// How many of a new version's first reconciles are watched, and how many
/// of those may fail before the version is reported as failed
/// ([`super::Notice::ProbationFailed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probation {
    /// How many of the new version's first reconciles are watched.
    pub calls: u32,
    /// How many of those may fail.
    pub max_failures: u32,
}

impl Default for Probation {
    fn default() -> Self {
        Probation { calls: 10, max_failures: 3 }
    }
}

/// Settings of one module's controller.
#[derive(Debug, Clone)]
pub struct Config {
    /// The controller's name (metrics, logs, field manager `operon/<name>`);
    /// by default the module manifest's.
    pub name: Option<String>,
    /// The queue and workers.
    pub controller: controller::Config,
    /// The namespace informers watch; `None` for all namespaces. Informers
    /// are shared by every controller with the same kind and namespace.
    pub namespace: Option<String>,
    /// The parents this controller reconciles, within what is watched.
    pub scope: Scope,
    /// Only parents whose labels (and annotations) match this selector.
    pub parent_selector: Option<ParentSelector>,
    /// When a swapped-in version is reported as failed.
    pub probation: Probation,
    /// Shortest requeue-after honoured; a guest asking for less gets this.
    pub requeue_floor: Duration,
    /// Guest time this controller's calls may use, in CPUs (guest seconds
    /// per second, its workers together); `0` for no limit. Past it, the
    /// next reconcile waits until the debt is repaid.
    pub guest_cpu: f64,
    /// Guest seconds a controller may save up and spend at once.
    pub guest_cpu_burst: Duration,
    /// The most a Reconciler's `spec.limits.cpu` may ask (a tenant who may
    /// write Reconcilers must not lift the budget); `0` for no ceiling.
    pub guest_cpu_max: f64,
    /// Reporting instance for events (e.g. the pod name).
    pub instance: Option<String>,
    /// What the controller may write beyond the parent's namespace.
    pub grants: Grants,
    /// Most children per outcome.
    pub max_desired: usize,
    /// Most events per outcome.
    pub max_events: usize,
    /// Objects no plugin may write (the host's own, such as module
    /// ConfigMaps).
    pub protected: Protected,
    /// The host's guest CPU budget, shared by every controller
    /// (`--max-guest-cpu-total`); `None` for no host-wide limit.
    pub host_cpu: Option<Arc<super::Budget>>,
    /// Events per second the controller may record (`--event-qps`); `0`
    /// for no limit.
    pub event_qps: f64,
    /// Events it may record at once (`--event-burst`).
    pub event_burst: u32,
    /// Outbound HTTP its module may make (a Reconciler's
    /// `spec.grants.egress` and `spec.credentials`); `None`: none.
    pub egress: Option<Arc<crate::egress::Settings>>,
    /// What any Reconciler may grant itself egress to
    /// (`--egress-allow`); by default everything.
    pub egress_allowed: crate::egress::grants::Allowed,
    /// Record sampled reconciles as fixtures (`operon run --record`).
    pub record: Option<Arc<super::record::Recorder>>,
    /// Write the host's `Synced` condition on parents whose CRD has a
    /// conditions list keyed by type (a Reconciler's
    /// `spec.syncedCondition`, on by default).
    pub synced: bool,
    /// Most bytes of related objects one request carries (the read
    /// budget's 64 MiB): past it the reconcile fails with
    /// [`super::Error::RelatedTooLarge`] instead of building the request.
    pub max_related_bytes: usize,
    /// Reconcile a parent again this long after its last successful
    /// reconcile, though nothing changed (a Reconciler's
    /// `spec.resyncPeriodSeconds`); `None`: only on changes and requeues.
    pub resync: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: None,
            controller: controller::Config::default(),
            namespace: None,
            scope: Scope::all(),
            parent_selector: None,
            probation: Probation::default(),
            requeue_floor: Duration::from_millis(100),
            guest_cpu: 0.25,
            guest_cpu_burst: Duration::from_secs(2),
            guest_cpu_max: 2.0,
            instance: None,
            grants: Grants::default(),
            max_desired: Policy::DEFAULT_MAX_DESIRED,
            max_events: Policy::DEFAULT_MAX_EVENTS,
            protected: Protected::default(),
            host_cpu: None,
            event_qps: crate::apply::events::Budget::DEFAULT_QPS,
            event_burst: crate::apply::events::Budget::DEFAULT_BURST,
            egress: None,
            egress_allowed: crate::egress::grants::Allowed::default(),
            record: None,
            synced: true,
            max_related_bytes: super::request::MAX_RELATED_BYTES,
            resync: None,
        }
    }
}

/// Which parents a Reconciler reconciles: `spec.selector` over labels and
/// `spec.annotationSelector` over annotations, both required.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParentSelector {
    /// Over labels.
    pub labels: Option<crate::contract::Selector>,
    /// Over annotations (parsed from the cached object only when set).
    pub annotations: Option<crate::contract::Selector>,
}

impl ParentSelector {
    /// `None` when neither selects: every parent in scope.
    pub fn of(
        labels: Option<crate::contract::Selector>,
        annotations: Option<crate::contract::Selector>,
    ) -> Option<ParentSelector> {
        (labels.is_some() || annotations.is_some()).then_some(ParentSelector { labels, annotations })
    }

    /// Whether `object` is one of this Reconciler's parents.
    pub fn matches(&self, object: &crate::cache::CachedObject) -> bool {
        self.labels.as_ref().is_none_or(|s| s.matches_with(|k| object.label(k)))
            && self.annotations.as_ref().is_none_or(|s| {
                let annotations = object.annotations();
                s.matches_with(|k| annotations.get(k).map(String::as_str))
            })
    }

    /// Whether the selector reads the label `key`.
    pub fn reads_label(&self, key: &str) -> bool {
        self.labels.as_ref().is_some_and(|s| s.keys().any(|k| k == key))
    }

    /// Whether the selector reads the annotation `key`.
    pub fn reads_annotation(&self, key: &str) -> bool {
        self.annotations.as_ref().is_some_and(|s| s.keys().any(|k| k == key))
    }
}
