//! The other Reconcilers: what no plugin may write, and who already
//! reconciles a kind.
//!
//! - **Protected objects.** A Reconciler's module ConfigMap is the code it
//!   runs: a plugin that could adopt or rewrite it would run its own code
//!   under that Reconciler's grants and ServiceAccount. A Secret a
//!   Reconciler names in `spec.credentials` is a credential the host sends
//!   out for it: a plugin that could rewrite it would redirect or replace
//!   another plugin's credential. No plugin writes either
//!   ([`Peers::protected`], checked on every outcome) — whichever host runs
//!   that Reconciler (every Reconciler and ClusterReconciler is watched for
//!   this, whatever `--reconciler-selector` says).
//! - **Overlaps.** Two controllers on one parent delete each other's
//!   children for ever. A Reconciler whose kind an older Reconciler of this
//!   host already reconciles, in namespaces and parents both may see, waits
//!   with `Overlaps` naming it ([`Peers::overlapping`]); the older one
//!   never yields to a younger one, so two never refuse each other. Hosts
//!   that share a cluster by `--reconciler-selector` each answer for their
//!   own Reconcilers.

use super::crd::{ClusterReconciler, Reconciler};
use super::{PluginKey, reconciler_gvk};
use crate::cache::{Cache, CachedObject, Informer, ObjectKey, WatchKey};
use crate::contract::Gvk;
use crate::pipeline::Protected;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// The informers of the Reconcilers. Cheap to clone.
#[derive(Clone)]
pub struct Peers {
    /// Every Reconciler in the host's namespace(s), whichever host runs it.
    every: Arc<Informer>,
    /// Every ClusterReconciler, whichever host runs it (`None` for a host
    /// confined to one namespace).
    every_cluster: Option<Arc<Informer>>,
    /// This host's Reconcilers and ClusterReconcilers.
    namespaced: Arc<Informer>,
    cluster: Option<Arc<Informer>>,
    /// Each Reconciler's claim, parsed once per version of it: every
    /// lifecycle step asks for all of them, and parsing every Reconciler at
    /// every step was quadratic in their number (a thousand Reconcilers
    /// spent their host's CPU deserializing each other).
    claims: Arc<Mutex<Claims>>,
    /// The serving claims as of the informers' revisions: unchanged
    /// Reconcilers (nearly always, between two steps) are not walked again.
    /// Walking all of them at every step of every Reconciler took 40 % of a
    /// 2-core host at a thousand (`cargo xtask bench fleet --rings 1000`).
    snapshot: Arc<Mutex<Option<(Revisions, Arc<Vec<Arc<Held>>>)>>>,
}

/// The namespaced and cluster informers' store revisions.
type Revisions = (u64, Option<u64>);

/// Parsed claims by (cluster-scoped, key), with the resourceVersion parsed.
type Claims = HashMap<(bool, ObjectKey), (Option<String>, Option<Arc<Held>>)>;

/// What a plugin claims: the parents it would reconcile.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    /// Which plugin.
    pub key: &'a PluginKey,
    /// When its resource was created (older claims win).
    pub created: Option<&'a Time>,
    /// The kind its module reconciles.
    pub kind: &'a Gvk,
    /// The namespaces of its parents; `None` for all.
    pub namespaces: Option<&'a [String]>,
    /// The labels its parents must have.
    pub selector: Option<&'a LabelSelector>,
    /// The annotations its parents must have (in a `LabelSelector`'s shape).
    pub annotations: Option<&'a LabelSelector>,
}

/// A claim another Reconciler makes, read from its resource.
struct Held {
    key: PluginKey,
    /// Its place among claims ([`order`]), computed once.
    order: (Option<i64>, String),
    group: String,
    kind: String,
    namespaces: Option<Vec<String>>,
    selector: Option<LabelSelector>,
    annotations: Option<LabelSelector>,
}

impl Peers {
    /// Every Reconciler in `namespace` (`None`: all), from the host's cache,
    /// beside this host's own (`namespaced`, `cluster`: the lifecycle's
    /// informers).
    pub fn new(
        cache: &Cache,
        namespace: Option<String>,
        namespaced: Arc<Informer>,
        cluster: Option<Arc<Informer>>,
    ) -> Peers {
        let every_cluster =
            namespace.is_none().then(|| cache.informer(WatchKey::new(super::cluster_reconciler_gvk(), None)));
        let every = cache.informer(WatchKey::new(reconciler_gvk(), namespace));
        Peers { every, every_cluster, namespaced, cluster, claims: Arc::default(), snapshot: Arc::default() }
    }

    /// The objects no plugin may write: every Reconciler's module
    /// ConfigMap, and every Secret a Reconciler or ClusterReconciler names
    /// as a credential.
    pub fn protected(&self) -> Protected {
        let namespaced = self.every.clone();
        let cluster = self.every_cluster.clone();
        Protected::new(move |kind, key| {
            if !kind.group.is_empty() {
                return None;
            }
            let ns = key.namespace.as_deref()?;
            match kind.kind.as_str() {
                "ConfigMap" => namespaced.store().in_namespace(Some(ns)).iter().find_map(|r| {
                    let spec: Named = serde_json::from_str(r.json()).ok()?;
                    (spec.spec.module.config_map?.name == key.name)
                        .then(|| format!("it holds the module of Reconciler {ns}/{} (spec.module.configMap)", r.name()))
                }),
                "Secret" => {
                    let named = |r: &Arc<CachedObject>, cluster: bool| {
                        let spec: Named = serde_json::from_str(r.json()).ok()?;
                        let c = spec.spec.credentials.iter().find(|c| {
                            let at = if cluster { c.secret_ref.namespace.as_deref() } else { Some(ns) };
                            c.secret_ref.name == key.name && at == Some(ns)
                        })?;
                        let whose = if cluster {
                            format!("ClusterReconciler {}", r.name())
                        } else {
                            format!("Reconciler {ns}/{}", r.name())
                        };
                        Some(format!("it holds credential {:?} of {whose} (spec.credentials)", c.name))
                    };
                    namespaced
                        .store()
                        .in_namespace(Some(ns))
                        .iter()
                        .find_map(|r| named(r, false))
                        .or_else(|| cluster.as_ref().and_then(|c| c.store().iter().find_map(|r| named(r, true))))
                }
                _ => None,
            }
        })
    }

    /// The older Reconciler that already reconciles `claim`'s kind where
    /// `claim` would, if there is one: a sentence naming it, for the
    /// `Overlaps` condition. Only Reconcilers that serve (`Ready`) count,
    /// so one that waits never blocks another.
    pub fn overlapping(&self, claim: &Claim<'_>) -> Option<String> {
        let held = self.held();
        let mine = order(claim.created, claim.key);
        // Oldest first: the first that meets the claim is the one to name.
        let h = held
            .iter()
            .take_while(|h| h.order < mine)
            .filter(|h| h.key != *claim.key)
            .filter(|h| h.group == claim.kind.group && h.kind == claim.kind.kind)
            .filter(|h| namespaces_meet(h.namespaces.as_deref(), claim.namespaces))
            // Disjoint by labels or by annotations: no parent is both's.
            .find(|h| {
                !disjoint(h.selector.as_ref(), claim.selector) && !disjoint(h.annotations.as_ref(), claim.annotations)
            })?;
        let where_ = match &h.namespaces {
            None => "every namespace".to_string(),
            Some(list) => list.join(", "),
        };
        Some(format!(
            "{} (created earlier) already reconciles {} {} in {where_}; two controllers on one parent would delete \
             each other's children: give them disjoint spec.selector labels, spec.annotationSelector annotations or namespaces, or \
             delete one",
            describe(&h.key),
            if h.group.is_empty() { "core" } else { &h.group },
            h.kind
        ))
    }

    /// The claims of every serving Reconciler, oldest first: the last ones if no
    /// Reconciler changed since, else walked again (each parsed again only
    /// if it changed).
    fn held(&self) -> Arc<Vec<Arc<Held>>> {
        let revisions = (self.namespaced.store().revision(), self.cluster.as_ref().map(|c| c.store().revision()));
        let mut snapshot = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, held)) = snapshot.as_ref()
            && *at == revisions
        {
            return held.clone();
        }
        let mut walked = self.walk();
        walked.sort_by(|a, b| a.order.cmp(&b.order));
        let held = Arc::new(walked);
        *snapshot = Some((revisions, held.clone()));
        held
    }

    fn walk(&self) -> Vec<Arc<Held>> {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let informers = std::iter::once((&self.namespaced, false)).chain(self.cluster.as_ref().map(|c| (c, true)));
        for (informer, cluster) in informers {
            for object in informer.store().iter() {
                let key = (cluster, object.key());
                let version = object.resource_version().map(str::to_string);
                let claim = match claims.get(&key) {
                    Some((v, claim)) if *v == version && version.is_some() => claim.clone(),
                    _ => {
                        let claim = held(object, cluster).map(Arc::new);
                        claims.insert(key.clone(), (version, claim.clone()));
                        claim
                    }
                };
                seen.insert(key);
                out.extend(claim);
            }
        }
        claims.retain(|k, _| seen.contains(k));
        out
    }
}

fn held(object: &Arc<CachedObject>, cluster: bool) -> Option<Held> {
    let (key, plugin, status, meta) = if cluster {
        let r: ClusterReconciler = serde_json::from_str(object.json()).ok()?;
        let namespaces = r.spec.plugin.grants.namespaces.clone();
        let all = namespaces.iter().any(|n| n == "*");
        (
            (PluginKey::ClusterReconciler(object.name().to_string()), (!all).then_some(namespaces)),
            r.spec.plugin,
            r.status?,
            r.metadata,
        )
    } else {
        let r: Reconciler = serde_json::from_str(object.json()).ok()?;
        let ns = r.metadata.namespace.clone()?;
        ((PluginKey::Reconciler(object.key()), Some(vec![ns])), r.spec.plugin, r.status?, r.metadata)
    };
    if meta.deletion_timestamp.is_some() || plugin.paused {
        return None;
    }
    let ready = status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
    let (api_version, kind) = status.kind.as_deref()?.split_once(' ')?;
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    ready.then(|| Held {
        order: order(meta.creation_timestamp.as_ref(), &key.0),
        key: key.0,
        group: group.to_string(),
        kind: kind.to_string(),
        namespaces: key.1,
        selector: plugin.selector,
        annotations: plugin.annotation_selector.as_ref().map(|a| a.as_label_selector()),
    })
}

/// Where a claim stands among others: created earlier first, then by kind
/// and name at the same second (a total order: of two Reconcilers, exactly
/// one precedes the other).
fn order<'a>(created: Option<&'a Time>, key: &'a PluginKey) -> (Option<i64>, String) {
    // Unknown creation (not written yet) sorts last.
    let at = created.map(|t| t.0.as_second()).or(Some(i64::MAX));
    (at, describe(key))
}

fn describe(key: &PluginKey) -> String {
    match key {
        PluginKey::Reconciler(k) => format!("Reconciler {k}"),
        PluginKey::ClusterReconciler(name) => format!("ClusterReconciler {name}"),
        PluginKey::File(path) => format!("module file {}", path.display()),
    }
}

fn namespaces_meet(a: Option<&[String]>, b: Option<&[String]>) -> bool {
    match (a, b) {
        (None, _) | (_, None) => true,
        (Some(a), Some(b)) => a.iter().any(|n| b.contains(n)),
    }
}

/// What a selector requires of one label.
#[derive(Debug, Default)]
struct LabelRule {
    /// The values it may have (`None`: any), once `excluded` is taken out.
    allowed: Option<BTreeSet<String>>,
    excluded: BTreeSet<String>,
    present: bool,
    absent: bool,
}

impl LabelRule {
    fn allow(&mut self, values: impl IntoIterator<Item = String>) {
        let values: BTreeSet<String> = values.into_iter().collect();
        self.allowed = Some(match self.allowed.take() {
            Some(have) => have.intersection(&values).cloned().collect(),
            None => values,
        });
        self.present = true;
    }

    /// The values left, if the label is restricted to a set.
    fn values(&self) -> Option<BTreeSet<String>> {
        self.allowed.as_ref().map(|a| a.difference(&self.excluded).cloned().collect())
    }
}

/// Each label a selector constrains.
fn rules(s: &LabelSelector) -> BTreeMap<String, LabelRule> {
    let mut out: BTreeMap<String, LabelRule> = BTreeMap::new();
    for (k, v) in s.match_labels.iter().flatten() {
        out.entry(k.clone()).or_default().allow([v.clone()]);
    }
    for e in s.match_expressions.iter().flatten() {
        let rule = out.entry(e.key.clone()).or_default();
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => rule.allow(values),
            "NotIn" => rule.excluded.extend(values),
            "Exists" => rule.present = true,
            "DoesNotExist" => rule.absent = true,
            _ => {}
        }
    }
    out
}

/// Whether no object can match both selectors: for some label, one
/// requires it and the other forbids it, or the values each allows do not
/// meet (`team=a` and `team=b`; `shard In {0,2}` and `shard In {1,3}`).
/// Anything else may overlap (a missing selector matches everything).
fn disjoint(a: Option<&LabelSelector>, b: Option<&LabelSelector>) -> bool {
    let (Some(a), Some(b)) = (a, b) else { return false };
    let (a, b) = (rules(a), rules(b));
    a.iter().any(|(key, ra)| {
        let Some(rb) = b.get(key) else { return false };
        if (ra.present && rb.absent) || (ra.absent && rb.present) {
            return true;
        }
        match (ra.values(), rb.values()) {
            (Some(va), Some(vb)) => va.is_disjoint(&vb),
            (Some(va), None) => va.is_subset(&rb.excluded),
            (None, Some(vb)) => vb.is_subset(&ra.excluded),
            (None, None) => false,
        }
    })
}

/// Only what protection reads of a Reconciler: the objects it names.
#[derive(serde::Deserialize)]
struct Named {
    spec: NamedSpec,
}

#[derive(serde::Deserialize)]
struct NamedSpec {
    #[serde(default)]
    module: super::crd::ModuleSource,
    #[serde(default)]
    credentials: Vec<crate::egress::credentials::Credential>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ObjectKey;

    fn selector(labels: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        }
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn selectors_should_be_disjoint_only_when_no_labels_can_match_both() {
        let (a, b, c) = (selector(&[("team", "a")]), selector(&[("team", "b")]), selector(&[("env", "prod")]));
        assert!(disjoint(Some(&a), Some(&b)));
        assert!(!disjoint(Some(&a), Some(&c)), "team=a and env=prod may both hold");
        assert!(!disjoint(Some(&a), None), "no selector matches everything");
        assert!(!disjoint(Some(&a), Some(&a)));
        // Shards, as the fleet benchmark splits one kind between Reconcilers.
        let (even, odd) = (expression("shard", "In", &["0", "2"]), expression("shard", "In", &["1", "3"]));
        assert!(disjoint(Some(&even), Some(&odd)));
        assert!(!disjoint(Some(&even), Some(&expression("shard", "In", &["2", "5"]))));
        assert!(disjoint(Some(&a), Some(&expression("team", "NotIn", &["a"]))));
        assert!(disjoint(Some(&a), Some(&expression("team", "DoesNotExist", &[]))));
        assert!(!disjoint(Some(&a), Some(&expression("team", "NotIn", &["b"]))));
    }

    #[test]
    fn namespaces_should_meet_when_either_is_everywhere_or_they_share_one() {
        let (x, y) = (vec!["a".to_string(), "b".to_string()], vec!["b".to_string()]);
        assert!(namespaces_meet(None, Some(&y)));
        assert!(namespaces_meet(Some(&x), Some(&y)));
        assert!(!namespaces_meet(Some(&x[..1]), Some(&y)));
    }

    #[test]
    fn of_two_claims_exactly_one_should_come_first() {
        let t = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
        let (k1, k2) = (
            PluginKey::Reconciler(ObjectKey::new(Some("a"), "x")),
            PluginKey::Reconciler(ObjectKey::new(Some("a"), "y")),
        );
        let (early, late) = (t(100), t(200));
        assert!(order(Some(&early), &k2) < order(Some(&late), &k1), "older first, whatever the name");
        assert!(order(Some(&early), &k1) < order(Some(&early), &k2), "same second: by name");
        assert!(order(Some(&early), &k1) < order(None, &k1), "not created yet: last");
    }
}
