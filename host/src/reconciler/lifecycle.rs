//! The executor of the Reconciler lifecycle: observe one plugin, ask
//! [`plan`](super::plan::plan) what should be, carry it out. It decides
//! nothing itself.

use super::crd::{ClusterReconciler, PluginSpec, Reconciler, ReconcilerStatus};
use super::loader::{self, Fetch, Loader};
use super::plan::{self, Durable, Inputs, Live, Plan, Record, Refusal, Restore, Source, Spec};
use super::settings::{self, InvalidSpec, Settings};
use super::status::{self, Reason};
use super::{Config, Error, ModuleFile, PluginKey, RETRY_ANNOTATION, Reconcilers};
use crate::apply::events::Recorder;
use crate::cache::{CachedObject, Informer, ObjectEvent, ObjectKey, WatchKey};
use crate::contract::Gvk;
use crate::controller::{Action, Context, Enqueue, Reconcile, Trigger};
use crate::leader::Leadership;
use crate::manager::Manager;
use crate::pipeline::{ModuleController, Notice};
use crate::runtime::{Limits, Module};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// How long bookkeeping (events) waits for this replica's leadership of a
/// new unit to be decided before leaving it to the leader.
const DECIDE: std::time::Duration = std::time::Duration::from_secs(15);

/// Why one lifecycle step has to be tried again.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The source could not be fetched (retried with backoff).
    #[error("module source unavailable: {0}")]
    Source(String),
    /// The webhooks could not be registered yet.
    #[error("admission webhooks not registered yet: {0}")]
    Admission(#[source] crate::webhook::Error),
    /// The CRD's conversion could not be pointed at the plugin, or given back.
    #[error("conversion webhook not in place yet: {0}")]
    Conversion(#[source] crate::webhook::Error),
    /// The controller could not be started.
    #[error("starting the controller: {0}")]
    Start(#[source] crate::manager::Error),
}

/// One module version held by a plugin.
#[derive(Clone)]
struct Held {
    module: Module,
    /// Whether a namespaced Reconciler may run it (`None`: not resolved yet).
    cluster_scoped_kind: Option<bool>,
}

/// What the lifecycle knows about one plugin, beyond the cluster.
#[derive(Default)]
struct Plugin {
    leadership: Option<Leadership>,
    controller: Option<ModuleController>,
    built_with: Option<String>,
    modules: BTreeMap<String, Held>,
    candidate: Option<String>,
    /// The registration's settings, while registered.
    admission: Option<String>,
    admission_refused: Option<String>,
    /// The conversion registration (module digest, leading), while
    /// registered; and the last refusal told.
    conversion: Option<String>,
    /// Why the conversion was last refused, and when to ask again.
    conversion_refused: Option<(String, std::time::Instant)>,
    problem: Option<(Reason, String)>,
    /// Decisions of this replica not yet seen in the status. Only a step of
    /// this plugin writes it (one at a time): it clears what it wrote once
    /// the status holds it.
    local: Vec<Record>,
    /// What the controller's notices decided (probation passed or failed)
    /// since the last step, which moves it into `local` before it reads the
    /// record: a notice arriving while a step writes the status is kept
    /// for the next step, never cleared with what that write held.
    inbox: Vec<Record>,
    last_swap: Option<Time>,
    notices: Option<AbortHandle>,
    /// The task that tells when this replica comes to lead the plugin.
    leading: Option<AbortHandle>,
    config_map: Option<(ObjectKey, Arc<Informer>, AbortHandle)>,
    /// Finalizer names the modules served here put on parents.
    finalizers: BTreeSet<String>,
    /// The value of the retry annotation the refusals were cleared for.
    retry: Option<String>,
    /// The selector the running controller was built with (for releasing
    /// parents that leave it).
    selector: Option<crate::pipeline::ParentSelector>,
    /// When this replica last wrote the status (counters wait for
    /// `report::COUNTERS_PERIOD` after it).
    status_written: Option<std::time::Instant>,
}

/// What one reconcile observed of the Reconciler itself.
struct Observed {
    spec: Result<PluginSpec, InvalidSpec>,
    status: ReconcilerStatus,
    /// When the resource was created (older Reconcilers win overlaps).
    created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    generation: Option<i64>,
    deleting: bool,
    has_release_finalizer: bool,
    retry: Option<String>,
    object: Option<Arc<CachedObject>>,
}

/// The lifecycle: a [`Reconcile`] over plugin keys.
pub(super) struct Lifecycle {
    manager: Manager,
    config: Config,
    loader: Loader,
    recorder: Arc<Recorder>,
    files: BTreeMap<PathBuf, (ModuleFile, String)>,
    resources: Option<(Arc<Informer>, Option<Arc<Informer>>)>,
    /// Every Reconciler on the cluster (protected ConfigMaps, overlaps).
    peers: Option<super::peers::Peers>,
    /// What every module controller starts from: the manager's settings,
    /// with the objects no plugin may write.
    pipeline: crate::pipeline::Config,
    plugins: Mutex<BTreeMap<PluginKey, Arc<Mutex<Plugin>>>>,
    enqueue: mpsc::UnboundedSender<PluginKey>,
    /// Plugins seen at start and not yet acted on; `None` until known.
    unsettled: Mutex<Option<BTreeSet<PluginKey>>>,
}

/// The lifecycle, not built yet: what the manager's builder holds.
pub(super) struct Pending {
    config: Config,
    files: Vec<ModuleFile>,
}

impl crate::manager::Component for Pending {
    fn build(
        self: Box<Self>,
        manager: &Manager,
    ) -> futures::future::BoxFuture<'_, Result<Arc<dyn crate::manager::Part>, crate::manager::Error>> {
        let manager = manager.clone();
        Box::pin(async move {
            let part = Reconcilers::new(&manager, self.config, self.files)
                .await
                .map_err(|e| crate::manager::Error::Component(Box::new(e)))?;
            Ok(Arc::new(part) as Arc<dyn crate::manager::Part>)
        })
    }
}

impl Lifecycle {
    pub(super) fn component(config: Config, files: Vec<ModuleFile>) -> Pending {
        Pending { config, files }
    }

    pub(super) async fn new(
        manager: Manager,
        config: Config,
        files: Vec<ModuleFile>,
    ) -> Result<(Lifecycle, Vec<Trigger<PluginKey>>), Error> {
        let runtime = match manager.runtime() {
            Some(r) => r.clone(),
            None => crate::runtime::Runtime::new(crate::runtime::Config::default()).map_err(Error::Engine)?,
        };
        let (enqueue, rx) = mpsc::unbounded_channel();
        let loader = {
            let tx = enqueue.clone();
            let (client, metrics) = (manager.client().clone(), manager.metrics().clone());
            let allowed = manager.config().pipeline.egress_allowed.clone();
            Loader::new(
                runtime.clone(),
                client,
                metrics,
                config.bounds,
                allowed,
                config.module_trust.clone(),
                move |k: &PluginKey| {
                    let _ = tx.send(k.clone());
                },
            )
        };
        let mut triggers = vec![Trigger::channel(rx)];
        // Module files: loaded now, so that a bad file fails the start.
        let mut held_files = BTreeMap::new();
        let mut preloaded = Vec::new();
        for file in files {
            let bytes =
                tokio::fs::read(&file.path).await.map_err(|source| Error::Read { path: file.path.clone(), source })?;
            // With --require-signed-modules, a file loads only with its
            // `.sig` by a trusted key, as every other source.
            let key = PluginKey::File(file.path.clone());
            let module_source =
                super::crd::ModuleSource { path: Some(file.path.display().to_string()), ..Default::default() };
            if let Some(trust) = config.module_trust.trust() {
                let path = file.path.display().to_string();
                let fetched = super::source::from_path(&path, config.bounds).await.map_err(|e| Error::Read {
                    path: file.path.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                let allowed = &manager.config().pipeline.egress_allowed;
                let http = super::source::http_client(config.bounds, allowed);
                let trusts = std::slice::from_ref(trust);
                super::verify::check(&http, allowed, &module_source, &fetched, trusts, config.bounds)
                    .await
                    .map_err(|source| Error::Untrusted { path: file.path.clone(), source })?;
                loader.mark_verified(&key, &module_source, &fetched.digest);
            }
            let (runtime, limits) = (runtime.clone(), file.limits.clone());
            let module = tokio::task::spawn_blocking(move || runtime.load(&bytes, limits))
                .await
                .map_err(|e| Error::Load {
                    path: file.path.clone(),
                    source: crate::runtime::LoadError::Panicked(e.to_string()),
                })?
                .map_err(|source| Error::Load { path: file.path.clone(), source })?;
            tracing::info!(
                controller = %module.manifest().name, digest = %module.info().digest, path = %file.path.display(),
                compile_ms = module.info().compile_time.as_millis() as u64, "module loaded"
            );
            preloaded.push((PluginKey::File(file.path.clone()), module.clone()));
            held_files.insert(file.path.clone(), (file, module.manifest().name.clone()));
        }
        if !held_files.is_empty() {
            let keys: Vec<PluginKey> = held_files.keys().cloned().map(PluginKey::File).collect();
            let initial = keys.clone();
            triggers.push(Trigger::every(config.path_poll, move || keys.clone()));
            for k in initial {
                let _ = enqueue.send(k);
            }
        }
        let resources = config.resources.then(|| {
            let cache = manager.cache();
            let namespaced = cache.informer(Reconcilers::watch_key(&config, false));
            let cluster = config.namespace.is_none().then(|| cache.informer(Reconcilers::watch_key(&config, true)));
            (namespaced, cluster)
        });
        if let Some((namespaced, cluster)) = &resources {
            triggers.push(Trigger::events(namespaced.clone(), |ev| resource_event(ev, false)));
            if let Some(c) = cluster {
                triggers.push(Trigger::events(c.clone(), |ev| resource_event(ev, true)));
            }
            // Counters into the status; `path` sources looked at again.
            let (n, c) = (namespaced.clone(), cluster.clone());
            triggers.push(Trigger::every(config.status_period.min(config.path_poll), move || {
                let mut keys: Vec<PluginKey> = n.store().iter().map(|o| PluginKey::Reconciler(o.key())).collect();
                if let Some(c) = &c {
                    keys.extend(c.store().iter().map(|o| PluginKey::ClusterReconciler(o.name().to_string())));
                }
                keys
            }));
        }
        let recorder = Arc::new(Recorder::new(manager.client().clone(), "operon", &config.instance));
        if let Some(webhooks) = manager.webhooks() {
            handover::tell_webhook_notices(webhooks.notices(), recorder.clone(), resources.clone());
        }
        let peers = resources.as_ref().map(|(namespaced, cluster)| {
            super::peers::Peers::new(manager.cache(), config.namespace.clone(), namespaced.clone(), cluster.clone())
        });
        let mut pipeline = manager.config().pipeline.clone();
        if let Some(p) = &peers {
            pipeline.protected = p.protected();
        }
        let lifecycle = Lifecycle {
            manager,
            config,
            loader,
            recorder,
            files: held_files,
            resources,
            peers,
            pipeline,
            plugins: Mutex::new(BTreeMap::new()),
            enqueue,
            unsettled: Mutex::new(None),
        };
        for (key, module) in preloaded {
            let plugin = lifecycle.plugin(&key);
            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            p.modules.insert(module.info().digest.clone(), Held { module, cluster_scoped_kind: Some(false) });
        }
        Ok((lifecycle, triggers))
    }

    fn plugin(&self, key: &PluginKey) -> Arc<Mutex<Plugin>> {
        self.plugins.lock().unwrap_or_else(|p| p.into_inner()).entry(key.clone()).or_default().clone()
    }

    /// The controller (and unit) name of a plugin.
    fn name(&self, key: &PluginKey) -> String {
        match key {
            PluginKey::File(path) => self.files.get(path).map(|(_, n)| n.clone()).unwrap_or_default(),
            _ => key.controller_name(""),
        }
    }

    /// Whether every plugin seen at start has been acted on.
    pub(super) fn settled(&self) -> bool {
        let mut unsettled = self.unsettled.lock().unwrap_or_else(|p| p.into_inner());
        if unsettled.is_none() {
            let synced =
                self.resources.as_ref().is_none_or(|(n, c)| n.is_synced() && c.as_ref().is_none_or(|c| c.is_synced()));
            if !synced {
                return false;
            }
            let mut keys: BTreeSet<PluginKey> = self.files.keys().cloned().map(PluginKey::File).collect();
            if let Some((n, c)) = &self.resources {
                keys.extend(n.store().iter().map(|o| PluginKey::Reconciler(o.key())));
                if let Some(c) = c {
                    keys.extend(c.store().iter().map(|o| PluginKey::ClusterReconciler(o.name().to_string())));
                }
            }
            *unsettled = Some(keys);
        }
        unsettled.as_ref().is_some_and(BTreeSet::is_empty)
    }

    fn mark_settled(&self, key: &PluginKey) {
        let _ = self.settled();
        if let Some(set) = self.unsettled.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            set.remove(key);
        }
    }

    /// What the Reconciler says, or for a file what the host says.
    fn observe(&self, key: &PluginKey) -> Option<Observed> {
        if let PluginKey::File(path) = key {
            let (file, _) = self.files.get(path)?;
            let mut spec = PluginSpec::default();
            spec.module.path = Some(path.display().to_string());
            let exports = {
                let plugin = self.plugin(key);
                let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                p.modules.values().any(|h| h.module.admission())
            };
            spec.admission = file.admission.filter(|_| exports).map(|policy| super::crd::Admission {
                failure_policy: match policy {
                    crate::webhook::FailurePolicy::Fail => super::crd::FailurePolicy::Fail,
                    crate::webhook::FailurePolicy::Ignore => super::crd::FailurePolicy::Ignore,
                },
                ..Default::default()
            });
            return Some(Observed {
                spec: Ok(spec),
                status: ReconcilerStatus::default(),
                generation: None,
                deleting: false,
                has_release_finalizer: false,
                retry: None,
                object: None,
                created: None,
            });
        }
        let (namespaced, cluster) = self.resources.as_ref()?;
        let informer = match key {
            PluginKey::ClusterReconciler(_) => cluster.as_ref()?,
            _ => namespaced,
        };
        let object = informer.store().get(&key.object_key()?).cloned()?;
        let describe = |e: serde_json::Error| InvalidSpec::Unreadable(e.to_string());
        let parsed = match key {
            PluginKey::ClusterReconciler(_) => serde_json::from_str::<ClusterReconciler>(object.json())
                .map(|r| (r.spec.plugin, r.status.unwrap_or_default(), r.metadata.creation_timestamp))
                .map_err(describe),
            _ => serde_json::from_str::<Reconciler>(object.json())
                .map(|r| (r.spec.plugin, r.status.unwrap_or_default(), r.metadata.creation_timestamp))
                .map_err(describe),
        };
        let (spec, status, created) = match parsed {
            Ok((spec, status, created)) => (Ok(spec), status, created),
            Err(e) => (Err(e), ReconcilerStatus::default(), None),
        };
        Some(Observed {
            spec,
            status,
            created,
            generation: object.generation(),
            deleting: object.is_deleting(),
            has_release_finalizer: object.has_finalizer(super::RELEASE_FINALIZER),
            retry: object.annotation(RETRY_ANNOTATION),
            object: Some(object),
        })
    }
}

/// Keys for an event on a Reconciler: any change but the counters of its
/// own status (the durable record in the status counts: another replica's
/// decisions).
fn resource_event(event: &ObjectEvent, cluster: bool) -> Vec<Enqueue<PluginKey>> {
    let key = |o: &CachedObject| {
        if cluster { PluginKey::ClusterReconciler(o.name().to_string()) } else { PluginKey::Reconciler(o.key()) }
    };
    match event {
        ObjectEvent::Applied { new, initial: true, .. } => vec![Enqueue::Initial(key(new))],
        ObjectEvent::Applied { old: Some(old), new, .. } => {
            let durable = |o: &CachedObject| {
                let status = o.value().get("status").cloned().unwrap_or_default();
                ["refused", "probation", "lastGoodDigest", "retry"].map(|f| status.get(f).cloned())
            };
            if new.meaningfully_differs_from(old) || durable(old) != durable(new) {
                vec![Enqueue::Now(key(new))]
            } else {
                Vec::new()
            }
        }
        ObjectEvent::Applied { new, .. } => vec![Enqueue::Now(key(new))],
        ObjectEvent::Deleted(o) | ObjectEvent::Resync(o) => vec![Enqueue::Now(key(o))],
    }
}

/// The durable record: the status, with this replica's own decisions on top.
/// The record a step plans with: the status and, on the replica that
/// leads, its own decisions the status does not hold yet. A standby's
/// decisions are guesses from a status that may be behind (it sees the
/// source change before the leader's record of it): kept, they would
/// outlive the leader's record and contradict it — a standby that only ever
/// saw the new version would call it the last good one, and have nothing to
/// roll back to when it took over. So a standby drops them: the status,
/// which only the leader writes, is the record.
fn record(status: &ReconcilerStatus, local: &mut Vec<Record>, leading: bool, cleared: bool) -> Durable {
    if !leading {
        local.clear();
    }
    durable(status, local, cleared)
}

fn durable(status: &ReconcilerStatus, local: &[Record], cleared: bool) -> Durable {
    let mut d = Durable {
        refused: if cleared {
            Vec::new()
        } else {
            status
                .refused
                .iter()
                .map(|r| Refusal {
                    digest: r.digest.clone(),
                    reason: Reason::parse(&r.reason).unwrap_or(Reason::RolledBack),
                    message: r.message.clone(),
                })
                .collect()
        },
        last_good: status.last_good_digest.clone(),
        probation: status.probation.as_ref().map(|p| (p.digest.clone(), p.previous_digest.clone())),
    };
    for r in local {
        apply_record(&mut d, r);
    }
    d
}

fn apply_record(d: &mut Durable, r: &Record) {
    match r {
        Record::Refuse(refusal) => {
            if d.refusal(&refusal.digest).is_none() {
                d.refused.push(refusal.clone());
                let excess = d.refused.len().saturating_sub(10);
                d.refused.drain(..excess);
            }
        }
        Record::Probation { digest, previous } => d.probation = Some((digest.clone(), previous.clone())),
        Record::EndProbation => d.probation = None,
        Record::LastGood(digest) => d.last_good = Some(digest.clone()),
    }
}

/// What a step learned about the source, beside the plan's view of it.
struct SourceFacts {
    source: Source,
    fetched: Option<Arc<crate::reconciler::source::Fetched>>,
    retry: bool,
}

/// Record an event on a Reconciler as the replica that leads it, once that
/// is decided (a new unit's election may still be under way).
fn publish(
    recorder: Arc<Recorder>,
    reference: k8s_openapi::api::core::v1::ObjectReference,
    leadership: Leadership,
    warning: bool,
    reason: &'static str,
    message: String,
) {
    use crate::apply::events::EventType;
    tokio::spawn(async move {
        if !leadership.leading_within(DECIDE).await {
            return;
        }
        let type_ = if warning { EventType::Warning } else { EventType::Normal };
        if let Err(e) = recorder.publish(&reference, type_, reason, "Load", &message, &leadership.fence()).await {
            tracing::debug!(reason, "could not record event: {e}");
        }
    });
}

/// A namespaced Reconciler whose module reconciles a cluster-scoped kind.
fn namespaced_cluster_kind(placement: &super::grants::Placement, h: &Held) -> Option<String> {
    match (placement, h.cluster_scoped_kind) {
        (super::grants::Placement::Namespaced(_), Some(true)) => Some(format!(
            "a Reconciler acts in its own namespace, and {} is cluster-scoped: use a ClusterReconciler",
            h.module.manifest().for_kind
        )),
        _ => None,
    }
}

fn load_message(e: &crate::runtime::LoadError) -> String {
    use crate::runtime::LoadError;
    let hint = match e {
        LoadError::NotAComponent(_) | LoadError::WrongWorld(_) => "; build it with `operon build`",
        _ => "",
    };
    format!("the new module was not loaded: {e}{hint}")
}

fn same_module(a: &Module, b: &Module) -> bool {
    a.info().digest == b.info().digest && same_limits(a.limits(), b.limits())
}

/// Whether a module loaded with `have` (its policy resolved) runs under the
/// limits `want` asks for.
fn same_limits(have: &Limits, want: &Limits) -> bool {
    have.timeout == want.timeout
        && have.memory == want.memory
        && have.max_output == want.max_output
        && (want.instance_policy == crate::runtime::InstancePolicy::Auto
            || have.instance_policy == want.instance_policy)
}

mod admission;
mod converge;
mod execute;
mod handover;
mod report;

#[cfg(test)]
mod tests {
    use super::*;

    /// Stop 26's CI failure: a standby that first saw the source after it
    /// changed recorded the new version as its last good one; the leader
    /// rolled it back to the old one; the standby's own record shadowed the
    /// leader's, and when it took over it had nothing to roll back to.
    #[test]
    fn a_standby_should_plan_from_the_leaders_record_not_its_own() {
        let status = ReconcilerStatus { last_good_digest: Some("sha256:v1".into()), ..Default::default() };
        let mut local = vec![Record::LastGood("sha256:trap".into())];
        let d = record(&status, &mut local, false, false);
        assert_eq!(d.last_good.as_deref(), Some("sha256:v1"));
        assert!(local.is_empty(), "a standby's own decisions are dropped");

        // The leader's decisions count until its status holds them.
        let mut local = vec![Record::LastGood("sha256:v2".into())];
        let d = record(&status, &mut local, true, false);
        assert_eq!(d.last_good.as_deref(), Some("sha256:v2"));
        assert_eq!(local.len(), 1);
    }
}
