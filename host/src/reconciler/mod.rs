//! Reconcilers as resources: the host's own controller for the
//! `Reconciler` and `ClusterReconciler` kinds ([`crd`]). Creating one loads
//! its module and adds a controller to the running [`Manager`]; changing it
//! swaps the module (or reconfigures the controller); deleting it stops
//! exactly that controller.
//!
//! For each Reconciler, in order, all off the reconcile path of plugins:
//! 1. fetch the module ([`source`]), checking the pinned digest;
//! 2. load it — from the precompiled cache when this engine compiled that
//!    digest before — type-check it and smoke-call its `manifest`;
//! 3. check the manifest against the grants ([`grants`]): asking for more
//!    is `Forbidden`, and no controller starts;
//! 4. start the controller, or swap the module atomically (in-flight
//!    reconciles finish on the old version, queued keys stay), or — with
//!    `rollout: shadow` — run it as a candidate beside the live version;
//! 5. report it in the status ([`status`]) and as events on the Reconciler.
//!
//! A candidate that fails to load leaves the old version serving
//! (`Degraded`). A swapped-in version that fails too many of its first
//! reconciles is rolled back by its controller ([`controller::Notice`]); the
//! digest is remembered so the same bytes are not swapped in again.
//!
//! **Invariant: the host, not the plugin, decides what a plugin may touch.**
//! Grants are checked before a controller exists, and again (as a
//! [`crate::apply::Policy`]) on every outcome.

pub mod crd;
pub mod grants;
pub mod source;
pub mod status;

use crate::apply::events::{self, EventType, Recorder};
use crate::cache::{CachedObject, Informer, ObjectEvent, ObjectKey, WatchKey};
use crate::contract::Gvk;
use crate::controller::{self, Controller, Notice, Probation};
use crate::leader::Fence;
use crate::manager::Manager;
use crate::queue::{self, Queue};
use crate::runtime::{InstancePolicy, Limits, LoadError, Module, Runtime};
use crd::{ClusterReconciler, PluginSpec, Reconciler, ReconcilerStatus, Rollout, ShadowStatus};
use grants::Placement;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use status::{Reason, Want};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The API group and version of the Reconciler kinds.
pub const GROUP: &str = "operon.dev";
/// See [`GROUP`].
pub const VERSION: &str = "v1alpha1";
/// Field manager of the status the host writes.
const FIELD_MANAGER: &str = "operon";

/// Settings of the Reconciler controller.
#[derive(Clone)]
pub struct Config {
    /// The cluster connection, for clients that impersonate a Reconciler's
    /// ServiceAccount.
    pub kube_config: kube::Config,
    /// Watch Reconcilers in this namespace only (and no ClusterReconcilers);
    /// `None` for all.
    pub namespace: Option<String>,
    /// Only Reconcilers whose labels match this selector (several hosts
    /// sharing a cluster, each with its own plugins).
    pub selector: Option<String>,
    /// Refuse namespaced Reconcilers without `spec.serviceAccountName`.
    pub require_service_account: bool,
    /// Accept `spec.module.path` (a file on the host). Off in a cluster: a
    /// Reconciler author must not make the host read its files.
    pub allow_module_paths: bool,
    /// Settings every plugin's controller starts from.
    pub controller: controller::Config,
    /// How often counters are copied into the status.
    pub status_period: Duration,
    /// How often `path` sources are checked for changes.
    pub path_poll: Duration,
    /// Who records events (the pod name).
    pub instance: String,
    /// The webhook server that serves `spec.admission`; `None` when this
    /// host serves no webhooks (such Reconcilers get a warning event).
    pub webhooks: Option<crate::webhook::Webhooks>,
}

/// Identifies a Reconciler or a ClusterReconciler.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PluginKey {
    /// A ClusterReconciler.
    pub cluster: bool,
    /// Namespace and name.
    pub key: ObjectKey,
}

impl PluginKey {
    /// The name of its controller: `namespace/name` for a Reconciler, the
    /// name for a ClusterReconciler.
    pub fn controller_name(&self) -> String {
        match (&self.key.namespace, self.cluster) {
            (Some(ns), false) => format!("{ns}/{}", self.key.name),
            _ => self.key.name.clone(),
        }
    }

    fn kind(&self) -> &'static str {
        if self.cluster { "ClusterReconciler" } else { "Reconciler" }
    }
}

impl std::fmt::Display for PluginKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind(), self.key)
    }
}

/// What the host knows about one Reconciler.
#[derive(Default)]
struct State {
    /// The version that serves, once one loaded.
    active: Option<Module>,
    /// A shadow candidate's digest.
    candidate: Option<String>,
    /// The digest the source held at the last look.
    source_digest: Option<String>,
    /// Settings the running controller was built with.
    fingerprint: u64,
    /// Whether the controller runs in the manager.
    running: bool,
    /// Digests that failed to load or were rolled back, with why: not
    /// tried again until the source changes.
    refused: HashMap<String, (Reason, String)>,
    /// The condition that describes the last problem, if any.
    problem: Option<(Reason, String)>,
    /// Whether the last problem leaves no version serving.
    blocking: bool,
    last_swap: Option<Time>,
    /// Listens to the controller's rollbacks and shadow differences.
    notices: Option<tokio::task::JoinHandle<()>>,
    paused: bool,
    /// The admission settings registered with the webhook server, and the
    /// task that registers them (it retries while the kind is not served).
    admission: Option<(u64, tokio::task::JoinHandle<()>)>,
    /// The last admission warning recorded, so a settle (every status
    /// write) does not record it again.
    admission_warning: Option<String>,
}

/// The Reconciler controller. Cheap to clone.
#[derive(Clone)]
pub struct Plugins {
    inner: Arc<Inner>,
}

struct Inner {
    manager: Manager,
    runtime: Runtime,
    config: Config,
    http: reqwest::Client,
    recorder: Recorder,
    states: Mutex<BTreeMap<PluginKey, State>>,
    /// ConfigMap informers of the namespaces whose Reconcilers use one.
    config_maps: Mutex<HashMap<String, Arc<Informer>>>,
    queue: Queue<PluginKey>,
}

/// The kind of the namespaced resource.
pub fn reconciler_gvk() -> Gvk {
    Gvk::new(GROUP, VERSION, "Reconciler")
}

/// The kind of the cluster-scoped resource.
pub fn cluster_reconciler_gvk() -> Gvk {
    Gvk::new(GROUP, VERSION, "ClusterReconciler")
}

impl Plugins {
    /// A Reconciler controller adding controllers to `manager`, loading
    /// modules with `runtime`.
    pub fn new(manager: Manager, runtime: Runtime, config: Config) -> Plugins {
        crate::install_crypto_provider();
        let recorder = Recorder::new(manager.client().clone(), "operon", &config.instance);
        let http = reqwest::Client::builder().build().unwrap_or_default();
        Plugins {
            inner: Arc::new(Inner {
                manager,
                runtime,
                config,
                http,
                recorder,
                states: Mutex::new(BTreeMap::new()),
                config_maps: Mutex::new(HashMap::new()),
                queue: Queue::new(queue::Config {
                    base_delay: Duration::from_millis(500),
                    max_delay: Duration::from_secs(300),
                    ..queue::Config::default()
                }),
            }),
        }
    }

    /// Watch Reconcilers until `stop`, then stop every plugin's controller.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let inner = &self.inner;
        let cache = inner.manager.cache();
        let namespaced = cache.informer(self.watch_key(false));
        let cluster = inner.config.namespace.is_none().then(|| cache.informer(self.watch_key(true)));
        let mut tasks = tokio::task::JoinSet::new();
        for (informer, is_cluster) in
            std::iter::once((namespaced.clone(), false)).chain(cluster.clone().map(|c| (c, true)))
        {
            let mut rx = informer.subscribe();
            let queue = inner.queue.clone();
            tasks.spawn(async move {
                while let Some(ev) = rx.recv().await {
                    let (object, wanted) = match &ev {
                        ObjectEvent::Applied { old: Some(old), new, .. } => {
                            (new, controller::meaningful_change(old, new))
                        }
                        ObjectEvent::Applied { new, .. } => (new, true),
                        ObjectEvent::Deleted(o) | ObjectEvent::Resync(o) => (o, true),
                    };
                    if wanted {
                        queue.add(PluginKey { cluster: is_cluster, key: object.key() });
                    }
                }
            });
        }
        // Path sources are files: look at them now and then.
        let this = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(this.inner.config.path_poll);
            loop {
                tick.tick().await;
                for key in this.keys_where(|spec| spec.module.path.is_some()) {
                    this.inner.queue.add(key);
                }
            }
        });
        // Counters into the status, by the replica that leads each plugin.
        let this = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(this.inner.config.status_period);
            loop {
                tick.tick().await;
                let keys: Vec<PluginKey> =
                    this.inner.states.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
                for key in keys {
                    this.write_status(&key).await;
                }
            }
        });
        let this = self.clone();
        let informers = Arc::new((namespaced, cluster));
        let workers = queue::run_workers(inner.queue.clone(), 2, move |key: PluginKey| {
            let (this, informers) = (this.clone(), informers.clone());
            async move {
                let informer = if key.cluster { informers.1.as_ref() } else { Some(&informers.0) };
                let object = informer.and_then(|i| i.store().get(&key.key).cloned());
                if let Err(e) = this.reconcile(&key, object).await {
                    let delay = this.inner.queue.add_rate_limited(key.clone());
                    tracing::warn!(plugin = %key, retry_in = ?delay, "{e}");
                } else {
                    this.inner.queue.forget(&key);
                }
            }
        });
        tokio::select! {
            () = stop => {}
            () = workers => {}
        }
        inner.queue.shut_down();
        tasks.abort_all();
        let keys: Vec<PluginKey> = inner.states.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        for key in keys {
            self.teardown(&key).await;
        }
    }

    /// The informer of Reconcilers (or ClusterReconcilers) this host acts on.
    fn watch_key(&self, cluster: bool) -> WatchKey {
        let config = &self.inner.config;
        WatchKey {
            kind: if cluster { cluster_reconciler_gvk() } else { reconciler_gvk() },
            namespace: if cluster { None } else { config.namespace.clone() },
            selector: config.selector.clone(),
        }
    }

    fn keys_where(&self, pred: impl Fn(&PluginSpec) -> bool) -> Vec<PluginKey> {
        let cache = self.inner.manager.cache();
        let mut keys = Vec::new();
        for cluster in [false, true] {
            if cluster && self.inner.config.namespace.is_some() {
                continue;
            }
            let informer = cache.informer(self.watch_key(cluster));
            for object in informer.store().iter() {
                if parse(object, cluster).is_ok_and(|(spec, _)| pred(&spec)) {
                    keys.push(PluginKey { cluster, key: object.key() });
                }
            }
        }
        keys
    }

    /// Bring one plugin to what its Reconciler says.
    async fn reconcile(&self, key: &PluginKey, object: Option<Arc<CachedObject>>) -> Result<(), String> {
        let Some(object) = object else {
            self.teardown(key).await;
            self.inner.states.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
            return Ok(());
        };
        self.inner.states.lock().unwrap_or_else(|p| p.into_inner()).entry(key.clone()).or_default();
        let (spec, _) = match parse(&object, key.cluster) {
            Ok(parsed) => parsed,
            Err(e) => {
                self.problem(key, Reason::InvalidSpec, e, true).await;
                return Ok(());
            }
        };
        let placement = match (&key.key.namespace, key.cluster) {
            (Some(ns), false) => Placement::Namespaced(ns.clone()),
            _ => Placement::Cluster,
        };
        if spec.paused {
            self.stop_controller(key).await;
            self.with_state(key, |s| s.paused = true);
            self.write_status(key).await;
            return Ok(());
        }
        self.with_state(key, |s| s.paused = false);
        if let Some(Err(e)) = spec.selector.as_ref().map(label_selector) {
            self.problem(key, Reason::InvalidSpec, format!("spec.selector: {e}"), true).await;
            self.stop_controller(key).await;
            return Ok(());
        }
        if let Err(e) = guest_cpu(&spec, &self.inner.config.controller) {
            self.problem(key, Reason::InvalidSpec, e, true).await;
            self.stop_controller(key).await;
            return Ok(());
        }
        let client = match self.writer_client(key, &placement, &spec) {
            Ok(c) => c,
            Err(e) => {
                self.problem(key, Reason::InvalidSpec, e, true).await;
                self.stop_controller(key).await;
                return Ok(());
            }
        };

        // 1. The bytes.
        let fetched = match self.fetch(key, &spec).await {
            Ok(Some(f)) => f,
            Ok(None) => {
                // The pinned digest is the one running: nothing to fetch.
                return self.settle(key, &spec, &placement, client, None).await;
            }
            Err(e) => {
                let serving = self.serving(key);
                self.problem(key, Reason::SourceUnavailable, e.to_string(), !serving).await;
                return match e {
                    source::Error::DigestMismatch { .. } | source::Error::Refused(_) => Ok(()),
                    _ => Err(format!("module source unavailable: {e}")),
                };
            }
        };
        self.settle(key, &spec, &placement, client, Some(fetched)).await
    }

    /// Load `fetched` (if new) and start, swap, shadow or reconfigure.
    async fn settle(
        &self,
        key: &PluginKey,
        spec: &PluginSpec,
        placement: &Placement,
        client: Option<kube::Client>,
        fetched: Option<source::Fetched>,
    ) -> Result<(), String> {
        let name = key.controller_name();
        let fingerprint = fingerprint(spec, placement);
        let (active, refused, running, old_fingerprint, candidate) = self
            .with_state(key, |s| (s.active.clone(), s.refused.clone(), s.running, s.fingerprint, s.candidate.clone()));
        let digest = fetched.as_ref().map(|f| f.digest.clone());
        if let Some(d) = &digest {
            self.with_state(key, |s| {
                if s.source_digest.as_ref() != Some(d) {
                    s.source_digest = Some(d.clone());
                }
            });
            if let Some((reason, message)) = refused.get(d) {
                self.problem(key, *reason, message.clone(), active.is_none()).await;
                return Ok(());
            }
        }
        let same_bytes = match (&digest, &active) {
            (Some(d), Some(m)) => *d == m.info().digest,
            (None, Some(_)) => true,
            _ => false,
        };

        // 2. The module: the running one, or the new bytes loaded.
        let module = if same_bytes {
            active.clone().expect("same bytes means a module is active")
        } else {
            let fetched = fetched.expect("new bytes were fetched");
            let limits = limits(spec, fetched.bytes.len());
            let runtime = self.inner.runtime.clone();
            let bytes = fetched.bytes;
            let loaded = tokio::task::spawn_blocking(move || runtime.load(&bytes, limits))
                .await
                .map_err(|e| format!("loading the module panicked: {e}"))?;
            match loaded {
                Ok(m) => m,
                Err(e) => {
                    let reason = status::load_reason(&e);
                    let message = load_message(&e);
                    self.refuse(key, &fetched.digest, reason, message, active.is_none()).await;
                    return Ok(());
                }
            }
        };

        // 3. The grants.
        if let Err(message) = grants::check(module.manifest(), &spec.grants) {
            let digest = module.info().digest.clone();
            self.refuse(key, &digest, Reason::Forbidden, message, active.is_none()).await;
            if !running || same_bytes {
                self.stop_controller(key).await;
            }
            return Ok(());
        }
        if let Placement::Namespaced(_) = placement
            && let Ok((_, false)) =
                crate::cache::resolve(self.inner.manager.client(), &module.manifest().for_kind).await
        {
            let message = format!(
                "a Reconciler acts in its own namespace, and {} is cluster-scoped: use a ClusterReconciler",
                module.manifest().for_kind
            );
            self.refuse(key, &module.info().digest, Reason::Forbidden, message, active.is_none()).await;
            self.stop_controller(key).await;
            return Ok(());
        }

        // 4. Start, swap, shadow or reconfigure.
        let current = self.inner.manager.controller(&name).filter(|_| running);
        match current {
            Some(c) if *c.manifest() == *module.manifest() && fingerprint == old_fingerprint => {
                if same_bytes {
                    if candidate.is_some() && spec.rollout == Rollout::Immediate {
                        let _ = c.set_candidate(None);
                        self.with_state(key, |s| s.candidate = None);
                    }
                } else if spec.rollout == Rollout::Shadow {
                    if candidate.as_deref() != Some(module.info().digest.as_str()) {
                        let _ = c.set_candidate(Some(module.clone()));
                        let digest = module.info().digest.clone();
                        self.with_state(key, |s| s.candidate = Some(digest.clone()));
                        self.event(
                            key,
                            false,
                            "ShadowStarted",
                            &format!(
                                "{} runs beside the live {} without writing; set spec.rollout: immediate to promote it",
                                short(&digest),
                                active.as_ref().map(|m| short(&m.info().digest)).unwrap_or_default()
                            ),
                        )
                        .await;
                    }
                } else {
                    let from = c.module().info().digest.clone();
                    c.swap_module(module.clone()).map_err(|e| e.to_string())?;
                    let to = module.info().digest.clone();
                    self.with_state(key, |s| {
                        s.active = Some(module.clone());
                        s.candidate = None;
                        s.last_swap = Some(Time(Timestamp::now()));
                        s.problem = None;
                    });
                    self.event(
                        key,
                        false,
                        "ModuleSwapped",
                        &format!(
                            "{} → {} (loaded in {:.0} ms{}); on probation for its first {} reconciles",
                            short(&from),
                            short(&to),
                            module.info().compile_time.as_secs_f64() * 1000.0,
                            if module.info().from_cache { ", precompiled" } else { "" },
                            spec.rollback.probation_calls.unwrap_or(Probation::default().calls)
                        ),
                    )
                    .await;
                }
            }
            existing => {
                // First start, or the manifest or settings changed: a new
                // controller. The old one's informers are held until the
                // new one has joined them, so shared watches do not restart.
                let held = existing.as_ref().map(Controller::informers);
                if existing.is_some() {
                    self.stop_controller(key).await;
                }
                let config = self.controller_config(key, spec, placement);
                let controller = self
                    .inner
                    .manager
                    .add_controller(module.clone(), config, client)
                    .map_err(|e| format!("starting the controller: {e}"))?;
                drop(held);
                self.watch_notices(key, &controller);
                let first = active.is_none();
                self.with_state(key, |s| {
                    s.active = Some(module.clone());
                    s.running = true;
                    s.fingerprint = fingerprint;
                    s.candidate = None;
                    s.problem = None;
                    s.blocking = false;
                    if first || !same_bytes {
                        s.last_swap = Some(Time(Timestamp::now()));
                    }
                });
                let info = module.info();
                let what = if first { "ModuleLoaded" } else { "ControllerReconfigured" };
                self.event(
                    key,
                    false,
                    what,
                    &format!(
                        "{} reconciles {} ({} bytes, loaded in {:.0} ms{})",
                        short(&info.digest),
                        module.manifest().for_kind,
                        info.size,
                        info.compile_time.as_secs_f64() * 1000.0,
                        if info.from_cache { ", precompiled" } else { "" }
                    ),
                )
                .await;
            }
        }
        self.sync_admission(key, spec, placement, &module).await;
        self.write_status(key).await;
        Ok(())
    }

    /// Register (or re-register, or remove) the plugin's webhooks after its
    /// controller runs. The webhooks read the controller's module at each
    /// call, so a swap needs no re-registration; only new settings do.
    async fn sync_admission(&self, key: &PluginKey, spec: &PluginSpec, placement: &Placement, module: &Module) {
        let Some(admission) = &spec.admission else {
            self.drop_admission(key).await;
            return;
        };
        let Some(webhooks) = self.inner.config.webhooks.clone() else {
            self.admission_warning(
                key,
                "AdmissionNotServed",
                "spec.admission is set, but this host serves no webhooks: start `operon run` with \
                 --webhook-bind-address (the Helm chart and deploy/operon.yaml do)"
                    .into(),
            )
            .await;
            return;
        };
        if !module.admission() {
            self.drop_admission(key).await;
            let message = format!(
                "spec.admission is set, but module {} does not export operon:reconciler/admission: build it \
                 for the reconciler-with-admission world, or remove spec.admission",
                short(&module.info().digest)
            );
            self.admission_warning(key, "AdmissionNotExported", message).await;
            return;
        }
        self.with_state(key, |s| s.admission_warning = None);
        let settings = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            serde_json::to_string(admission).unwrap_or_default().hash(&mut h);
            spec.grants.namespaces.hash(&mut h);
            h.finish()
        };
        let unchanged = self.with_state(key, |s| s.admission.as_ref().is_some_and(|(f, _)| *f == settings));
        if unchanged {
            return;
        }
        let Some(controller) = self.inner.manager.controller(&key.controller_name()) else { return };
        let plugin = webhook_plugin(key, admission, placement, &spec.grants, controller);
        let (plugins, key2) = (self.clone(), key.clone());
        let task = tokio::spawn(async move {
            let mut delay = Duration::from_secs(1);
            loop {
                match webhooks.register(plugin.clone()).await {
                    Ok(()) => {
                        plugins
                            .event(
                                &key2,
                                false,
                                "AdmissionRegistered",
                                &format!(
                                    "validating and mutating webhooks operon-{} serve {} (failurePolicy {})",
                                    plugin.name,
                                    plugin.controller.manifest().for_kind,
                                    plugin.failure_policy
                                ),
                            )
                            .await;
                        return;
                    }
                    Err(
                        e @ (crate::webhook::Error::NoAdmission { .. } | crate::webhook::Error::InvalidPlugin { .. }),
                    ) => {
                        plugins.event(&key2, true, "AdmissionRefused", &e.to_string()).await;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(plugin = %key2, error = %e, retry_in = ?delay, "admission webhooks not registered yet");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(60));
                    }
                }
            }
        });
        if let Some((_, old)) = self.with_state(key, |s| s.admission.replace((settings, task))) {
            old.abort();
        }
    }

    /// Record a Warning about `spec.admission` once per distinct message.
    async fn admission_warning(&self, key: &PluginKey, reason: &str, message: String) {
        let new = self.with_state(key, |s| {
            let new = s.admission_warning.as_deref() != Some(message.as_str());
            s.admission_warning = Some(message.clone());
            new
        });
        if new {
            self.event(key, true, reason, &message).await;
        }
    }

    /// Remove the plugin's webhook configurations, if it had any.
    async fn drop_admission(&self, key: &PluginKey) {
        let Some((_, task)) = self.with_state(key, |s| s.admission.take()) else { return };
        task.abort();
        if let Some(webhooks) = &self.inner.config.webhooks
            && let Err(e) = webhooks.unregister(&webhook_name(key)).await
        {
            tracing::warn!(plugin = %key, error = %e, "removing the webhook configurations failed");
        }
    }

    /// The module's bytes, or `None` when the source pins the digest that
    /// already runs (nothing to download).
    async fn fetch(&self, key: &PluginKey, spec: &PluginSpec) -> Result<Option<source::Fetched>, source::Error> {
        let m = &spec.module;
        let active = self.with_state(key, |s| s.active.as_ref().map(|m| m.info().digest.clone()));
        if let (Some(url), Some(active)) = (&m.url, &active)
            && format!("sha256:{}", url.sha256) == *active
        {
            return Ok(None);
        }
        if let Some(cm) = &m.config_map {
            let namespace = key.key.namespace.clone().unwrap_or_default();
            let informer = self.config_maps(&namespace);
            if !informer.is_synced() {
                informer
                    .wait_synced(Duration::from_secs(10))
                    .await
                    .map_err(|e| source::Error::Unavailable(e.to_string()))?;
            }
            let object = informer.store().get(&ObjectKey::new(Some(&namespace), &cm.name)).cloned();
            return source::from_config_map(object.as_deref(), &cm.name, &cm.key).map(Some);
        }
        if let Some(url) = &m.url {
            return source::from_url(&self.inner.http, url).await.map(Some);
        }
        if let Some(oci) = &m.oci {
            return source::from_oci(oci).await.map(Some);
        }
        if let Some(path) = &m.path {
            if !self.inner.config.allow_module_paths {
                return Err(source::Error::Refused(
                    "spec.module.path is refused: this host does not load modules from its own files \
                     (start it with --allow-module-paths, for development only); use a ConfigMap, URL or OCI source"
                        .into(),
                ));
            }
            return source::from_path(path).await.map(Some);
        }
        Err(source::Error::Refused("spec.module names no source".into()))
    }

    /// The ConfigMap informer of a namespace, started on first use; its
    /// changes requeue the Reconcilers of that namespace that use one.
    fn config_maps(&self, namespace: &str) -> Arc<Informer> {
        let mut map = self.inner.config_maps.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = map.get(namespace) {
            return i.clone();
        }
        let informer = self.inner.manager.cache().informer(WatchKey {
            kind: Gvk::new("", "v1", "ConfigMap"),
            namespace: Some(namespace.to_string()),
            selector: None,
        });
        let mut rx = informer.subscribe();
        let this = self.clone();
        let ns = namespace.to_string();
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let (ObjectEvent::Applied { new: o, initial: false, .. } | ObjectEvent::Deleted(o)) = &ev else {
                    continue;
                };
                let name = o.name().to_string();
                for key in this.keys_where(|spec| spec.module.config_map.as_ref().is_some_and(|c| c.name == name)) {
                    if key.key.namespace.as_deref() == Some(ns.as_str()) {
                        this.inner.queue.add(key);
                    }
                }
            }
        });
        map.insert(namespace.to_string(), informer.clone());
        informer
    }

    /// The client that makes the plugin's writes: the host's, or one
    /// impersonating the Reconciler's ServiceAccount.
    fn writer_client(
        &self,
        key: &PluginKey,
        placement: &Placement,
        spec: &PluginSpec,
    ) -> Result<Option<kube::Client>, String> {
        let user = match (&spec.service_account_name, placement) {
            (None, Placement::Namespaced(_)) if self.inner.config.require_service_account => {
                return Err(
                    "this host requires spec.serviceAccountName on every Reconciler (--require-service-account): \
                     name a ServiceAccount whose Role allows the plugin's writes"
                        .into(),
                );
            }
            (None, _) => return Ok(None),
            (Some(sa), Placement::Namespaced(ns)) => format!("system:serviceaccount:{ns}:{sa}"),
            (Some(sa), Placement::Cluster) => match sa.split_once('/') {
                Some((ns, name)) => format!("system:serviceaccount:{ns}:{name}"),
                None => {
                    return Err(format!("a ClusterReconciler's serviceAccountName must be namespace/name, not {sa:?}"));
                }
            },
        };
        let mut config = self.inner.config.kube_config.clone();
        config.auth_info.impersonate = Some(user.clone());
        kube::Client::try_from(config)
            .map(Some)
            .map_err(|e| format!("cannot build a client impersonating {user} for {key}: {e}"))
    }

    fn controller_config(&self, key: &PluginKey, spec: &PluginSpec, placement: &Placement) -> controller::Config {
        let (scope, grants) = grants::controller_settings(placement, &spec.grants);
        let base = self.inner.config.controller.clone();
        let probation = Probation {
            calls: spec.rollback.probation_calls.unwrap_or(base.probation.calls),
            max_failures: spec.rollback.max_failures.unwrap_or(base.probation.max_failures),
        };
        controller::Config {
            name: Some(key.controller_name()),
            parent_selector: spec.selector.as_ref().and_then(|s| label_selector(s).ok()),
            max_concurrent_reconciles: spec
                .limits
                .max_concurrent_reconciles
                .map_or(base.max_concurrent_reconciles, |n| n.max(1) as usize),
            guest_cpu: guest_cpu(spec, &base).unwrap_or(base.guest_cpu),
            scope,
            grants,
            probation,
            ..base
        }
    }

    /// Start listening to a controller's rollbacks and shadow differences.
    fn watch_notices(&self, key: &PluginKey, controller: &Controller) {
        let mut rx = controller.notices();
        let (this, key2) = (self.clone(), key.clone());
        let task = tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(Notice::RolledBack { from, to, reason }) => {
                        let message = format!(
                            "{} was rolled back to {}: {reason}; fix the module and publish a new version",
                            short(&from),
                            short(&to)
                        );
                        let back = this.inner.manager.controller(&key2.controller_name()).map(|c| c.module());
                        this.with_state(&key2, |s| {
                            s.refused.insert(from.clone(), (Reason::RolledBack, message.clone()));
                            s.active = back;
                            s.problem = Some((Reason::RolledBack, message.clone()));
                            s.blocking = false;
                            s.last_swap = Some(Time(Timestamp::now()));
                        });
                        this.event(&key2, true, "RolledBack", &message).await;
                        this.write_status(&key2).await;
                    }
                    Ok(Notice::ShadowDiffers { sample }) => {
                        this.event(&key2, false, "ShadowDiffers", &sample).await;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        if let Some(old) = self.with_state(key, |s| s.notices.replace(task)) {
            old.abort();
        }
    }

    /// Remember that `digest` is refused and report it. The running version
    /// (if any) keeps serving.
    async fn refuse(&self, key: &PluginKey, digest: &str, reason: Reason, message: String, blocking: bool) {
        tracing::warn!(plugin = %key, digest, reason = reason.as_str(), "module refused: {message}");
        self.inner.manager.metrics().module_swap(&key.controller_name(), "refused");
        self.with_state(key, |s| {
            s.refused.insert(digest.to_string(), (reason, message.clone()));
        });
        self.event(key, true, reason.as_str(), &message).await;
        self.problem(key, reason, message, blocking).await;
    }

    async fn problem(&self, key: &PluginKey, reason: Reason, message: String, blocking: bool) {
        self.with_state(key, |s| {
            s.problem = Some((reason, message));
            s.blocking = blocking || s.active.is_none();
        });
        self.write_status(key).await;
    }

    fn serving(&self, key: &PluginKey) -> bool {
        self.with_state(key, |s| s.running && s.active.is_some())
    }

    /// Stop the plugin's controller (not its state).
    async fn stop_controller(&self, key: &PluginKey) {
        let running = self.with_state(key, |s| std::mem::take(&mut s.running));
        if running {
            self.inner.manager.remove(&key.controller_name()).await;
        }
        // No controller, no module to answer: the webhooks go too (a
        // `Fail` policy would otherwise deny every write of the kind).
        self.drop_admission(key).await;
        if let Some(task) = self.with_state(key, |s| s.notices.take()) {
            task.abort();
        }
    }

    async fn teardown(&self, key: &PluginKey) {
        if self.inner.states.lock().unwrap_or_else(|p| p.into_inner()).contains_key(key) {
            self.stop_controller(key).await;
            tracing::info!(plugin = %key, "Reconciler gone: its controller stopped");
        }
    }

    fn with_state<R>(&self, key: &PluginKey, f: impl FnOnce(&mut State) -> R) -> R {
        let mut states = self.inner.states.lock().unwrap_or_else(|p| p.into_inner());
        f(states.entry(key.clone()).or_default())
    }

    /// Write the status, if this replica is the one in charge of it.
    async fn write_status(&self, key: &PluginKey) {
        let name = key.controller_name();
        if !self.inner.manager.writes_for(&name) {
            return;
        }
        let informer = self.inner.manager.cache().informer(self.watch_key(key.cluster));
        let Some(object) = informer.store().get(&key.key).cloned() else { return };
        let Ok((spec, current)) = parse(&object, key.cluster) else { return };
        let controller = self.inner.manager.controller(&name);
        let status = {
            let states = self.inner.states.lock().unwrap_or_else(|p| p.into_inner());
            let Some(state) = states.get(key) else { return };
            compute_status(state, &spec, &current, object.generation(), controller.as_ref(), &self.inner.manager, &name)
        };
        if status_same(&current, &status) {
            return;
        }
        let patch = serde_json::json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": key.kind(),
            "status": status,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let client = self.inner.manager.client().clone();
        let result = if key.cluster {
            Api::<ClusterReconciler>::all(client)
                .patch_status(&key.key.name, &params, &Patch::Apply(&patch))
                .await
                .map(|_| ())
        } else {
            let ns = key.key.namespace.clone().unwrap_or_default();
            Api::<Reconciler>::namespaced(client, &ns)
                .patch_status(&key.key.name, &params, &Patch::Apply(&patch))
                .await
                .map(|_| ())
        };
        if let Err(e) = result {
            tracing::debug!(plugin = %key, error = %crate::client::describe(&e), "could not write the status");
        }
    }

    async fn event(&self, key: &PluginKey, warning: bool, reason: &str, message: &str) {
        if !self.inner.manager.writes_for(&key.controller_name()) {
            return;
        }
        let informer = self.inner.manager.cache().informer(self.watch_key(key.cluster));
        let uid = informer.store().get(&key.key).and_then(|o| o.uid().map(str::to_string));
        let reference = ObjectReference {
            api_version: Some(format!("{GROUP}/{VERSION}")),
            kind: Some(key.kind().into()),
            name: Some(key.key.name.clone()),
            namespace: key.key.namespace.clone(),
            uid,
            ..ObjectReference::default()
        };
        let type_ = if warning { EventType::Warning } else { EventType::Normal };
        match self.inner.recorder.publish(&reference, type_, reason, "Load", message, &Fence::open()).await {
            Ok(()) | Err(events::Error::Throttled { .. }) => {}
            Err(e) => tracing::debug!(plugin = %key, "could not record event: {e}"),
        }
    }
}

/// The spec and status of a Reconciler or ClusterReconciler.
fn parse(object: &CachedObject, cluster: bool) -> Result<(PluginSpec, ReconcilerStatus), String> {
    let describe = |e: serde_json::Error| format!("the spec cannot be read: {e}; fix it to match the CRD's schema");
    if cluster {
        let r: ClusterReconciler = serde_json::from_str(object.json()).map_err(describe)?;
        Ok((r.spec.plugin, r.status.unwrap_or_default()))
    } else {
        let r: Reconciler = serde_json::from_str(object.json()).map_err(describe)?;
        Ok((r.spec.plugin, r.status.unwrap_or_default()))
    }
}

/// The Degraded condition of a running controller: most reconciles failing
/// (`stats`), or its guest calls over their CPU budget in the last minute
/// (`throttled`: the budget in CPUs). Both at once (a slow guest hitting its
/// deadline): the failure is the reason, and the wait is said too.
fn health(stats: controller::StatsSnapshot, throttled: Option<f64>) -> Want {
    let throttled = throttled.map(|cpu| {
        format!(
            "the module's calls used more than their CPU budget of {}m in the last minute; its reconciles wait",
            (cpu * 1000.0).round()
        )
    });
    match (stats.last_error, throttled) {
        (Some(e), throttled) if stats.errors > 0 && stats.errors * 2 > stats.reconciles => {
            let reason = if e.contains("(403 Forbidden)") { Reason::ApiForbidden } else { Reason::ReconcileErrors };
            let also = throttled.map(|t| format!("; also, {t}")).unwrap_or_default();
            Want::yes(reason, format!("most reconciles fail; last: {e}{also}"))
        }
        (_, Some(throttled)) => Want::yes(Reason::CpuThrottled, throttled),
        (_, None) => Want::no(Reason::Loaded, "no problem"),
    }
}

/// What the status should say now.
fn compute_status(
    state: &State,
    spec: &PluginSpec,
    current: &ReconcilerStatus,
    generation: Option<i64>,
    controller: Option<&Controller>,
    manager: &Manager,
    name: &str,
) -> ReconcilerStatus {
    let active = state.active.as_ref();
    let ready = if state.paused {
        Want::no(Reason::Paused, "spec.paused is true: nothing is reconciled; set it to false to resume")
    } else {
        match (&state.problem, state.blocking || !state.running) {
            (Some((reason, message)), true) => Want::no(*reason, message.clone()),
            _ if state.running => Want::yes(
                if state.last_swap.is_some()
                    && current.digest.is_some()
                    && current.digest.as_deref() != active.map(|m| m.info().digest.as_str())
                {
                    Reason::Swapped
                } else {
                    Reason::Loaded
                },
                format!(
                    "{} reconciles {}",
                    active.map(|m| short(&m.info().digest)).unwrap_or_default(),
                    active.map(|m| m.manifest().for_kind.to_string()).unwrap_or_default()
                ),
            ),
            _ => Want::no(Reason::Loading, "the module is being fetched and loaded"),
        }
    };
    let degraded = match &state.problem {
        Some((reason, message)) if state.running && !state.blocking => {
            Want::yes(*reason, format!("{message}; the previous version keeps serving"))
        }
        _ => {
            let stats = controller.map(Controller::stats).unwrap_or_default();
            health(stats, controller.and_then(|c| c.throttled(Duration::from_secs(60))))
        }
    };
    let progressing = match (&state.candidate, spec.rollout) {
        (Some(c), Rollout::Shadow) => {
            let (compared, differing) = controller.map(Controller::shadow_counts).unwrap_or_default();
            Want::yes(
                if differing > 0 { Reason::ShadowDiffers } else { Reason::Shadowing },
                format!("candidate {} compared on {compared} reconciles, {differing} differed", short(c)),
            )
        }
        _ => Want::no(Reason::Loaded, "no candidate"),
    };
    let conditions = status::conditions(
        &current.conditions,
        &[("Ready", ready), ("Degraded", degraded), ("Progressing", progressing)],
        generation,
    );
    let stats = controller.map(Controller::stats).unwrap_or_default();
    let shadow = match (&state.candidate, controller) {
        (Some(c), Some(ctrl)) => {
            let (compared, differing) = ctrl.shadow_counts();
            Some(ShadowStatus { candidate_digest: c.clone(), compared, differing })
        }
        _ => None,
    };
    let digest = active.map(|m| m.info().digest.clone());
    ReconcilerStatus {
        observed_generation: generation,
        kind: active.map(|m| m.manifest().for_kind.to_string()),
        short_digest: digest.as_deref().map(short),
        source_digest: state.source_digest.clone().filter(|s| Some(s) != digest.as_ref()),
        digest,
        conditions,
        last_swap_time: state.last_swap.clone().or_else(|| current.last_swap_time.clone()),
        reconciles: stats.reconciles,
        errors: stats.errors,
        leader: Some(manager.identity()).filter(|i| !i.is_empty() && manager.leads(name)),
        shadow,
    }
}

/// Whether writing `new` would change nothing a reader sees (transition
/// times aside).
fn status_same(current: &ReconcilerStatus, new: &ReconcilerStatus) -> bool {
    let strip = |s: &ReconcilerStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s.last_swap_time = None;
        s
    };
    strip(current) == strip(new)
}

/// Sandbox limits from the spec. Large modules (language runtimes) are
/// pooled unless the spec says otherwise: instantiating them costs
/// milliseconds.
fn limits(spec: &PluginSpec, size: usize) -> Limits {
    let mut limits = Limits::default();
    if let Some(t) = spec.limits.timeout.as_deref().and_then(parse_duration) {
        limits.timeout = t.min(Duration::from_secs(60));
    }
    if let Some(m) = spec.limits.memory.as_deref().and_then(parse_quantity) {
        limits.memory = m;
    }
    limits.instance_policy = match spec.limits.instance_policy {
        Some(crd::InstancePolicy::Fresh) => InstancePolicy::Fresh,
        Some(crd::InstancePolicy::Pooled) => InstancePolicy::Pooled,
        None if size > 1 << 20 => InstancePolicy::Pooled,
        None => InstancePolicy::Fresh,
    };
    limits
}

/// The controller's guest CPU budget: `spec.limits.cpu` within the host's
/// ceiling, else the host's default. (The schema refuses what does not
/// parse.)
fn guest_cpu(spec: &PluginSpec, host: &controller::Config) -> Result<f64, String> {
    let Some(asked) = spec.limits.cpu.as_deref().and_then(controller::parse_cpu) else {
        return Ok(host.guest_cpu);
    };
    let ceiling = host.guest_cpu_max;
    if ceiling > 0.0 && (asked == 0.0 || asked > ceiling) {
        let what = if asked == 0.0 { "no limit".to_string() } else { format!("{asked} CPU") };
        return Err(format!(
            "spec.limits.cpu asks for {what}, above the host's ceiling of {ceiling} CPU (--max-guest-cpu): ask for less, or raise the ceiling on the host"
        ));
    }
    Ok(asked)
}

/// `500ms`, `2s`.
fn parse_duration(text: &str) -> Option<Duration> {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    text.strip_suffix('s')?.parse().ok().map(Duration::from_secs)
}

/// `64Mi`, `1Gi`, `512Ki`, `1048576`.
fn parse_quantity(text: &str) -> Option<u64> {
    let (digits, shift) = match text {
        t if t.ends_with("Ki") => (&t[..t.len() - 2], 10),
        t if t.ends_with("Mi") => (&t[..t.len() - 2], 20),
        t if t.ends_with("Gi") => (&t[..t.len() - 2], 30),
        t => (t, 0),
    };
    digits.parse::<u64>().ok()?.checked_shl(shift)
}

/// What the running controller depends on besides the module: a change
/// rebuilds the controller.
fn fingerprint(spec: &PluginSpec, placement: &Placement) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let text = serde_json::to_string(&(
        &spec.grants,
        &spec.limits,
        &spec.rollback,
        &spec.service_account_name,
        &spec.selector,
    ))
    .unwrap_or_default();
    text.hash(&mut h);
    format!("{placement:?}").hash(&mut h);
    h.finish()
}

/// A Kubernetes `LabelSelector` as the contract's [`Selector`](crate::contract::Selector).
///
/// # Errors
/// An operator the selector syntax does not know.
pub fn label_selector(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Result<crate::contract::Selector, String> {
    let mut parts: Vec<String> = s.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => return Err(format!("unknown selector operator {other:?}")),
        });
    }
    crate::contract::Selector::parse(&parts.join(",")).map_err(|e| e.to_string())
}

/// The webhook plugin name of a Reconciler: `r.<namespace>.<name>`, or
/// `c.<name>` for a ClusterReconciler (namespaces hold no dots, so the two
/// never collide).
fn webhook_name(key: &PluginKey) -> String {
    match (&key.key.namespace, key.cluster) {
        (Some(ns), false) => format!("r.{ns}.{}", key.key.name),
        _ => format!("c.{}", key.key.name),
    }
}

/// The webhook plugin for `spec.admission`: a Reconciler's webhooks see its
/// own namespace only; a ClusterReconciler's, its granted namespaces (when
/// the grants name some), on top of the selectors the spec asks for.
fn webhook_plugin(
    key: &PluginKey,
    admission: &crd::Admission,
    placement: &Placement,
    grants: &crd::Grants,
    controller: Controller,
) -> crate::webhook::Plugin {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    let mut plugin = crate::webhook::Plugin::new(webhook_name(key), controller);
    plugin.failure_policy = match admission.failure_policy {
        crd::FailurePolicy::Fail => crate::webhook::FailurePolicy::Fail,
        crd::FailurePolicy::Ignore => crate::webhook::FailurePolicy::Ignore,
    };
    if let Some(t) = admission.timeout_seconds {
        plugin.timeout = Duration::from_secs(t.clamp(1, 30) as u64);
    }
    plugin.object_selector = admission.object_selector.clone();
    plugin.namespace_selector = admission.namespace_selector.clone();
    match placement {
        Placement::Namespaced(ns) => plugin.scope_namespace = Some(ns.clone()),
        Placement::Cluster if !grants.namespaces.is_empty() => {
            let mut selector = plugin.namespace_selector.take().unwrap_or_default();
            selector.match_expressions.get_or_insert_with(Vec::new).push(LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(grants.namespaces.clone()),
            });
            plugin.namespace_selector = Some(selector);
        }
        Placement::Cluster => {}
    }
    plugin
}

/// The first 12 hex digits of a digest.
pub fn short(digest: &str) -> String {
    digest.trim_start_matches("sha256:").chars().take(12).collect()
}

fn load_message(e: &LoadError) -> String {
    let hint = match e {
        LoadError::WitVersion { .. } => "",
        LoadError::NotAComponent(_) | LoadError::WrongWorld(_) => "; build it with `operon build`",
        _ => "",
    };
    format!("the new module was not loaded: {e}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_should_parse_the_spec_and_pool_large_modules() {
        let mut spec = PluginSpec::default();
        spec.limits.timeout = Some("250ms".into());
        spec.limits.memory = Some("128Mi".into());
        let l = limits(&spec, 10_000);
        assert_eq!(
            (l.timeout, l.memory, l.instance_policy),
            (Duration::from_millis(250), 128 << 20, InstancePolicy::Fresh)
        );
        assert_eq!(limits(&spec, 18 << 20).instance_policy, InstancePolicy::Pooled, "language runtimes are pooled");
        spec.limits.instance_policy = Some(crd::InstancePolicy::Fresh);
        assert_eq!(limits(&spec, 18 << 20).instance_policy, InstancePolicy::Fresh, "unless the spec says");
        spec.limits.timeout = Some("600s".into());
        assert_eq!(limits(&spec, 1).timeout, Duration::from_secs(60), "capped");
    }

    #[test]
    fn the_cpu_budget_should_come_from_the_spec_within_the_hosts_ceiling() {
        let mut spec = PluginSpec::default();
        let host = controller::Config { guest_cpu: 0.25, guest_cpu_max: 2.0, ..Default::default() };
        assert_eq!(guest_cpu(&spec, &host), Ok(0.25));
        spec.limits.cpu = Some("100m".into());
        assert_eq!(guest_cpu(&spec, &host), Ok(0.1));
        spec.limits.cpu = Some("2".into());
        assert_eq!(guest_cpu(&spec, &host), Ok(2.0), "up to the ceiling");
        for above in ["2001m", "0"] {
            spec.limits.cpu = Some(above.into());
            let refused = guest_cpu(&spec, &host).unwrap_err();
            assert!(refused.contains("above the host's ceiling of 2 CPU (--max-guest-cpu)"), "{refused}");
        }
        let unbounded = controller::Config { guest_cpu_max: 0.0, ..host };
        assert_eq!(guest_cpu(&spec, &unbounded), Ok(0.0), "0: no limit, where the host has no ceiling");
    }

    #[test]
    fn degraded_should_name_failures_first_and_say_the_throttling_too() {
        let failing =
            |errors, e: &str| controller::StatsSnapshot { reconciles: 10, errors, last_error: Some(e.into()) };
        let throttled = health(failing(1, "x"), Some(0.01));
        assert_eq!((throttled.status, throttled.reason), (true, Reason::CpuThrottled));
        assert!(throttled.message.contains("CPU budget of 10m"), "{}", throttled.message);
        let both = health(failing(9, "timed out after 1s"), Some(0.01));
        assert_eq!(both.reason, Reason::ReconcileErrors);
        assert!(
            both.message.contains("timed out after 1s") && both.message.contains("CPU budget of 10m"),
            "{}",
            both.message
        );
        assert_eq!(health(failing(9, "apply: (403 Forbidden)"), None).reason, Reason::ApiForbidden);
        let fine = health(failing(1, "x"), None);
        assert_eq!((fine.status, fine.reason), (false, Reason::Loaded));
    }

    #[test]
    fn controller_names_should_be_unique_per_namespace() {
        let a = PluginKey { cluster: false, key: ObjectKey::new(Some("a"), "webapp") };
        let b = PluginKey { cluster: false, key: ObjectKey::new(Some("b"), "webapp") };
        let c = PluginKey { cluster: true, key: ObjectKey::new(None, "webapp") };
        assert_eq!(a.controller_name(), "a/webapp");
        assert_ne!(a.controller_name(), b.controller_name());
        assert_eq!(c.controller_name(), "webapp");
    }
}
