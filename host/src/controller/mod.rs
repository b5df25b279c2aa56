//! Controllers: one per loaded module. A controller maps informer events to
//! parent keys, queues them, and runs the reconcile pipeline on workers:
//! request from the cache → guest call → validate → apply.
//!
//! **Invariant: the queue holds keys, never objects.** Every reconcile reads
//! the newest cached state of its parent when it starts.
//!
//! **Invariant: a controller writes only through its run's [`Fence`].** When
//! the run stops (or its task is aborted), its workers stop with it: they are
//! owned by the run, never detached.

mod budget;
mod mapping;
mod reader;
mod shadow;

pub use budget::parse_cpu;
pub use mapping::meaningful_change;
pub use reader::CacheReader;

use crate::apply::{self, Applier, Namespaces, Policy};
use crate::cache::{Cache, CachedObject, Informer, ObjectKey, WatchKey};
use crate::contract::{Failure, Gvk, Manifest, Outcome, Request, Watch};
use crate::leader::Fence;
use crate::metrics::{ApplyOperation, GuestErrorKind, Metrics, ReconcileResult};
use crate::queue::{self, Queue};
use crate::runtime::{CallError, Module};
use mapping::Enqueue;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tracing::Instrument;

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

/// Which parents a controller reconciles (and whose objects it may read):
/// informers are shared per kind, each controller sees its part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// These namespaces, or `None` for every namespace.
    pub namespaces: Option<Vec<String>>,
    /// Whether cluster-scoped objects are in scope.
    pub cluster: bool,
}

impl Default for Scope {
    fn default() -> Self {
        Scope::all()
    }
}

impl Scope {
    /// Every namespace and cluster-scoped objects.
    pub fn all() -> Scope {
        Scope { namespaces: None, cluster: true }
    }

    /// One namespace only (a namespaced Reconciler).
    pub fn namespace(ns: &str) -> Scope {
        Scope { namespaces: Some(vec![ns.to_string()]), cluster: false }
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

/// When a new module version counts as failed and is rolled back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probation {
    /// How many of the new version's first reconciles are watched.
    pub calls: u32,
    /// How many of those may fail before it is rolled back.
    pub max_failures: u32,
}

impl Default for Probation {
    fn default() -> Self {
        Probation { calls: 10, max_failures: 3 }
    }
}

/// What a controller tells its owner (the Reconciler controller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A new version failed its probation; the previous one is back.
    RolledBack {
        /// The digest that failed.
        from: String,
        /// The digest running again.
        to: String,
        /// The failures that decided it.
        reason: String,
    },
    /// A shadow candidate answered differently from the live version.
    ShadowDiffers {
        /// The object, and where the answers differ.
        sample: String,
    },
}

/// Settings of one controller.
#[derive(Debug, Clone)]
pub struct Config {
    /// The controller's name (metrics, logs, field manager `operon/<name>`);
    /// by default the module manifest's.
    pub name: Option<String>,
    /// Workers: reconciles of different parents running at once.
    pub max_concurrent_reconciles: usize,
    /// The namespace informers watch; `None` for all namespaces. Informers
    /// are shared by every controller with the same kind and namespace.
    pub namespace: Option<String>,
    /// The parents this controller reconciles, within what is watched.
    pub scope: Scope,
    /// Only parents whose labels match this selector.
    pub parent_selector: Option<crate::contract::Selector>,
    /// When a swapped-in version is rolled back.
    pub probation: Probation,
    /// The first retry delay of a failing parent.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Retries per second across all parents (controller-runtime's overall
    /// bucket); `0` for no limit.
    pub retry_qps: f64,
    /// Burst of that bucket.
    pub retry_burst: u32,
    /// Shortest requeue-after honoured; a guest asking for less gets this.
    pub requeue_floor: Duration,
    /// Requeue-afters per second across all parents (the requeue budget,
    /// a bucket of its own beside the retries'); `0` for no limit. Parents
    /// asking to run again faster than this are spread out.
    pub requeue_qps: f64,
    /// Burst of that bucket.
    pub requeue_burst: u32,
    /// Deadline of one whole reconcile: reads, guest call, writes.
    pub reconcile_timeout: Duration,
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: None,
            max_concurrent_reconciles: 1,
            namespace: None,
            scope: Scope::all(),
            parent_selector: None,
            probation: Probation::default(),
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_secs(1000),
            retry_qps: 10.0,
            retry_burst: 100,
            requeue_floor: Duration::from_millis(100),
            requeue_qps: 10.0,
            requeue_burst: 100,
            reconcile_timeout: Duration::from_secs(60),
            guest_cpu: 0.25,
            guest_cpu_burst: Duration::from_secs(2),
            guest_cpu_max: 2.0,
            instance: None,
            grants: Grants::default(),
            max_desired: Policy::DEFAULT_MAX_DESIRED,
            max_events: Policy::DEFAULT_MAX_EVENTS,
        }
    }
}

/// Errors of changing a running controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A swapped-in module must declare the same kinds.
    #[error(
        "the new module's manifest differs from the running one ({0}); restart the controller to change what it watches"
    )]
    ManifestChanged(String),
}

/// Counters a controller keeps for its owner (a Reconciler's status).
#[derive(Debug, Default)]
pub struct Stats {
    reconciles: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Reconciles finished.
    pub reconciles: u64,
    /// Of which failed.
    pub errors: u64,
    /// The last error's message.
    pub last_error: Option<String>,
}

impl Stats {
    fn record(&self, error: Option<&str>) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = error {
            self.errors.fetch_add(1, Ordering::Relaxed);
            *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            reconciles: self.reconciles.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            last_error: self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// One controller. Cheap to clone.
#[derive(Clone)]
pub struct Controller {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    versions: RwLock<Versions>,
    manifest: Arc<Manifest>,
    config: Config,
    policy: Policy,
    parents: Arc<Informer>,
    owned: Vec<(Gvk, Arc<Informer>)>,
    watched: Vec<(Watch, Arc<Informer>)>,
    readable: Arc<HashMap<Gvk, Arc<Informer>>>,
    applier: Applier,
    metrics: Arc<Metrics>,
    stats: Stats,
    /// What the guest calls may still spend (`None`: no limit).
    budget: Option<Arc<budget::Budget>>,
    /// Parents already warned about a requeue-after below the floor (one
    /// event per parent, not one per reconcile).
    warned_requeue: Mutex<HashSet<ObjectKey>>,
    notices: tokio::sync::broadcast::Sender<Notice>,
    shadow: shadow::Counters,
}

/// The module versions of a controller.
struct Versions {
    /// What reconciles and writes.
    active: Module,
    /// The version `active` replaced, kept while `active` is on probation.
    previous: Option<Module>,
    /// Calls and failures of `active` since it was swapped in, while they
    /// are watched.
    probation: Option<(u32, u32)>,
    /// A shadow candidate: called beside `active`, never applied.
    candidate: Option<Module>,
}

impl Controller {
    /// Build a controller for `module` and start (or join) the informers it
    /// needs, so caches warm up even before this replica leads. `client`
    /// makes its writes; `events` records its events.
    pub fn new(
        module: Module,
        cache: &Cache,
        client: kube::Client,
        events: kube::Client,
        metrics: Arc<Metrics>,
        config: Config,
    ) -> Controller {
        let manifest = module.manifest().clone();
        let informer = |kind: &Gvk| {
            cache.informer(WatchKey { kind: kind.clone(), namespace: config.namespace.clone(), selector: None })
        };
        let parents = informer(&manifest.for_kind);
        let owned: Vec<_> = manifest.owns.iter().map(|k| (k.clone(), informer(k))).collect();
        let watched: Vec<_> = manifest.watches.iter().map(|w| (w.clone(), informer(&w.kind))).collect();
        let mut readable: HashMap<Gvk, Arc<Informer>> = HashMap::new();
        readable.insert(manifest.for_kind.clone(), parents.clone());
        for (k, i) in &owned {
            readable.insert(k.clone(), i.clone());
        }
        for (w, i) in &watched {
            readable.insert(w.kind.clone(), i.clone());
        }
        for k in &manifest.reads {
            readable.entry(k.clone()).or_insert_with(|| informer(k));
        }
        let name = config.name.clone().unwrap_or_else(|| manifest.name.clone());
        metrics.controller_started(&name, config.max_concurrent_reconciles);
        let policy = Policy {
            controller: name.clone(),
            owns: manifest.owns.clone(),
            namespaces: config.grants.namespaces.clone(),
            cluster_scoped: config.grants.cluster_scoped,
            max_desired: config.max_desired,
            max_events: config.max_events,
        };
        let budget = budget::Budget::new(config.guest_cpu, config.guest_cpu_burst).map(Arc::new);
        Controller {
            shared: Arc::new(Shared {
                applier: Applier::new(client, events, &name, config.instance.clone()),
                name,
                versions: RwLock::new(Versions { active: module, previous: None, probation: None, candidate: None }),
                manifest,
                config,
                policy,
                parents,
                owned,
                watched,
                readable: Arc::new(readable),
                metrics,
                stats: Stats::default(),
                budget,
                warned_requeue: Mutex::new(HashSet::new()),
                notices: tokio::sync::broadcast::channel(64).0,
                shadow: shadow::Counters::default(),
            }),
        }
    }

    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The manifest every version of this controller shares.
    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.shared.manifest
    }

    /// The settings it was built with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The module version in use.
    pub fn module(&self) -> Module {
        self.shared.versions().active.clone()
    }

    /// The shadow candidate, if one runs.
    pub fn candidate(&self) -> Option<Module> {
        self.shared.versions().candidate.clone()
    }

    /// Rollbacks and shadow differences, as they happen.
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<Notice> {
        self.shared.notices.subscribe()
    }

    /// How the shadow candidate compared so far: (compared, differing).
    pub fn shadow_counts(&self) -> (u64, u64) {
        self.shared.shadow.get()
    }

    /// A reader over this controller's informers, within its namespace
    /// scope, for guest calls outside a reconcile (admission webhooks): the
    /// same read grants as a reconcile of a parent in `parent_namespace`.
    pub fn reader(&self, parent_namespace: Option<String>) -> CacheReader {
        CacheReader {
            informers: self.shared.readable.clone(),
            parent_namespace,
            scope: self.shared.config.scope.clone(),
        }
    }

    /// Counters of finished reconciles.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Whether a reconcile waited for the guest CPU budget within `window`,
    /// and the budget (in CPUs).
    pub fn throttled(&self, window: Duration) -> Option<f64> {
        self.shared.budget.as_ref().filter(|b| b.throttled_within(window)).map(|b| b.cpu())
    }

    /// Every informer this controller reads from.
    pub fn informers(&self) -> Vec<Arc<Informer>> {
        self.shared.readable.values().cloned().collect()
    }

    /// Replace the module, atomically. Reconciles in flight finish on the
    /// old version; the queue is untouched. The new version is on probation
    /// for its first calls ([`Config::probation`]): if too many fail, the old
    /// one comes back by itself ([`Notice::RolledBack`]). Any shadow
    /// candidate is dropped.
    ///
    /// # Errors
    /// [`Error::ManifestChanged`] if the new module declares different kinds
    /// (build a new controller for it instead).
    pub fn swap_module(&self, module: Module) -> Result<(), Error> {
        self.check_manifest(&module)?;
        let mut v = self.shared.versions_mut();
        let old = std::mem::replace(&mut v.active, module);
        if old.info().digest != v.active.info().digest {
            v.previous = Some(old);
            v.probation = Some((0, 0));
        }
        v.candidate = None;
        drop(v);
        self.shared.metrics.module_loaded(
            &self.shared.name,
            &self.module().info().digest,
            self.module().info().compile_time,
        );
        self.shared.metrics.module_swap(&self.shared.name, "swapped");
        Ok(())
    }

    /// Run `candidate` beside the active version on every reconcile without
    /// applying anything of it, and compare ([`Controller::shadow_counts`],
    /// [`Notice::ShadowDiffers`]); `None` stops. Counts restart.
    ///
    /// # Errors
    /// [`Error::ManifestChanged`] if the candidate declares different kinds.
    pub fn set_candidate(&self, candidate: Option<Module>) -> Result<(), Error> {
        if let Some(c) = &candidate {
            self.check_manifest(c)?;
        }
        self.shared.versions_mut().candidate = candidate;
        self.shared.shadow.reset();
        Ok(())
    }

    fn check_manifest(&self, module: &Module) -> Result<(), Error> {
        if **module.manifest() != *self.shared.manifest {
            return Err(Error::ManifestChanged(format!(
                "running {:?}, new {:?}",
                self.shared.manifest,
                module.manifest()
            )));
        }
        Ok(())
    }

    /// Wait until every informer has listed once.
    ///
    /// # Errors
    /// The first informer that did not sync in time, with its last error.
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), crate::cache::Error> {
        let deadline = Instant::now() + timeout;
        for informer in self.informers() {
            informer.wait_synced(deadline.saturating_duration_since(Instant::now())).await?;
        }
        Ok(())
    }

    /// Reconcile until `stop` completes: subscribe to the informers (replaying
    /// what they hold as low-priority work), then run the workers, writing
    /// only while `fence` is open. After `stop`, no new reconcile starts and
    /// the ones in flight finish. Dropping the returned future stops
    /// everything at once (workers included).
    pub async fn run(&self, stop: impl Future<Output = ()>, fence: Fence) {
        let shared = &self.shared;
        let queue = Queue::new(queue::Config {
            base_delay: shared.config.backoff_base,
            max_delay: shared.config.backoff_max,
            qps: shared.config.retry_qps,
            burst: shared.config.retry_burst,
            requeue_qps: shared.config.requeue_qps,
            requeue_burst: shared.config.requeue_burst,
            metrics: Some(shared.metrics.workqueue(&shared.name)),
        });
        let mut feeders = tokio::task::JoinSet::new();
        self.spawn_feeders(&queue, &mut feeders);
        let workers = {
            let shared = shared.clone();
            let queue = queue.clone();
            queue::run_workers(queue.clone(), shared.config.max_concurrent_reconciles, move |key| {
                let shared = shared.clone();
                let queue = queue.clone();
                let fence = fence.clone();
                async move { shared.reconcile(&queue, key, &fence).await }
            })
        };
        // Owned, not spawned: if this future is dropped, so are the workers
        // (their JoinSet aborts them).
        let mut workers = std::pin::pin!(workers);
        tokio::select! {
            () = stop => {}
            () = &mut workers => {}
        }
        feeders.abort_all();
        // Reconciles in flight finish; waiting keys are dropped (the next
        // leader lists everything again).
        queue.shut_down();
        workers.await;
        tracing::info!(controller = %shared.name, "controller stopped");
    }

    fn spawn_feeders(&self, queue: &Queue<ObjectKey>, tasks: &mut tokio::task::JoinSet<()>) {
        let enqueue = |queue: &Queue<ObjectKey>, e: Enqueue| match e {
            Enqueue::Now(k) => queue.add(k),
            Enqueue::Initial(k) => queue.add_low_priority(k),
        };
        let shared = &self.shared;
        // Keys outside the scope are dropped here (and checked again when
        // reconciled): informers are shared, each controller sees its part.
        let enqueue = {
            let scope = shared.config.scope.clone();
            let (parents, selector) = (shared.parents.clone(), shared.config.parent_selector.clone());
            move |queue: &Queue<ObjectKey>, e: Enqueue| {
                let key = match &e {
                    Enqueue::Now(k) | Enqueue::Initial(k) => k,
                };
                if !scope.contains(key.namespace.as_deref()) {
                    return;
                }
                // A child's or a watched object's event may name a parent
                // outside this controller's selector (another Reconciler's
                // share of the kind): drop it here rather than as a no-op
                // reconcile, or every sharer would reconcile every parent.
                if let Some(s) = &selector
                    && parents.store().get(key).is_some_and(|p| !s.matches_with(|k| p.label(k)))
                {
                    return;
                }
                enqueue(queue, e);
            }
        };
        let mut rx = shared.parents.subscribe();
        let (q, enq, selector) = (queue.clone(), enqueue.clone(), shared.config.parent_selector.clone());
        tasks.spawn(async move {
            while let Some(ev) = rx.recv().await {
                let object = match &ev {
                    crate::cache::ObjectEvent::Applied { new: o, .. }
                    | crate::cache::ObjectEvent::Deleted(o)
                    | crate::cache::ObjectEvent::Resync(o) => o,
                };
                if selector.as_ref().is_some_and(|s| !s.matches_with(|k| object.label(k))) {
                    continue;
                }
                if let Some(e) = mapping::for_event(&ev) {
                    enq(&q, e);
                }
            }
        });
        for (_, informer) in &shared.owned {
            let mut rx = informer.subscribe();
            let (q, kind, parents, enq) =
                (queue.clone(), shared.manifest.for_kind.clone(), shared.parents.clone(), enqueue.clone());
            tasks.spawn(async move {
                while let Some(ev) = rx.recv().await {
                    // Unknown until discovery answered: namespaced is the common case.
                    let namespaced = parents.namespaced().unwrap_or(true);
                    if let Some(e) = mapping::owned_event(&ev, &kind, namespaced) {
                        enq(&q, e);
                    }
                }
            });
        }
        for (watch, informer) in &shared.watched {
            let mut rx = informer.subscribe();
            let (q, mapping, parents, enq) =
                (queue.clone(), watch.mapping.clone(), shared.parents.clone(), enqueue.clone());
            tasks.spawn(async move {
                while let Some(ev) = rx.recv().await {
                    let parents_in =
                        |ns: Option<&str>| parents.store().in_namespace(ns).iter().map(|p| p.key()).collect();
                    for e in mapping::watched_event(&ev, &mapping, parents_in) {
                        enq(&q, e);
                    }
                }
            });
        }
    }
}

/// The first retry delay after the sandbox stopped a guest; it doubles per
/// failure of the parent, like any retry.
const SANDBOX_BACKOFF_BASE: Duration = Duration::from_secs(1);

/// How one reconcile ended, before metrics and requeueing.
enum Verdict {
    Done(Option<Duration>),
    /// Retry with backoff.
    Retry(String),
    /// The sandbox stopped the guest (deadline, memory cap): retry with a
    /// backoff from [`SANDBOX_BACKOFF_BASE`] — an attempt that burned a
    /// whole deadline or filled its memory will most likely do it again,
    /// and retrying in milliseconds only burns more of the node.
    Stopped(String),
    /// Not retried until the parent changes (or the module is swapped): the
    /// guest said so, or its outcome was refused (a deterministic guest would
    /// answer the same again).
    Terminal(String),
}

impl Shared {
    async fn reconcile(self: &Arc<Self>, queue: &Queue<ObjectKey>, key: ObjectKey, fence: &Fence) {
        let ticket = self.within_budget().await;
        let started = Instant::now();
        let _busy = self.metrics.worker_busy(&self.name);
        let attempt = queue.num_requeues(&key);
        let (module, candidate) = {
            let v = self.versions();
            (v.active.clone(), v.candidate.clone())
        };
        let span = tracing::info_span!("reconcile", controller = %self.name, object = %key, digest = %module.info().digest, attempt);
        let deadline = self.config.reconcile_timeout;
        let verdict = match tokio::time::timeout(
            deadline,
            self.reconcile_inner(&module, candidate, &key, attempt, fence, ticket),
        )
        .instrument(span.clone())
        .await
        {
            Ok(v) => v,
            Err(_) => {
                self.metrics.reconcile_timed_out(&self.name);
                Verdict::Retry(format!(
                    "reconcile of {key} did not finish within {deadline:?} (reads, guest call and writes together)"
                ))
            }
        };
        let _enter = span.enter();
        let (result, error) = match verdict {
            Verdict::Done(None) => {
                queue.forget(&key);
                (ReconcileResult::Success, None)
            }
            Verdict::Done(Some(after)) => {
                queue.forget(&key);
                if queue.add_after_limited(key, after) > after {
                    self.metrics.requeue_throttled(&self.name);
                    tracing::debug!(asked = ?after, "requeue delayed by the controller's requeue budget");
                }
                (ReconcileResult::RequeueAfter, None)
            }
            Verdict::Retry(message) => {
                let delay = queue.add_rate_limited(key);
                tracing::warn!(retry_in = ?delay, "reconcile failed: {message}");
                (ReconcileResult::Error, Some(message))
            }
            Verdict::Stopped(message) => {
                let delay = queue.add_rate_limited_from(key, SANDBOX_BACKOFF_BASE);
                tracing::warn!(retry_in = ?delay, "reconcile stopped by the sandbox: {message}");
                (ReconcileResult::Error, Some(message))
            }
            Verdict::Terminal(message) => {
                queue.forget(&key);
                tracing::error!("reconcile failed terminally, not retrying until the object changes: {message}");
                (ReconcileResult::TerminalError, Some(message))
            }
        };
        self.stats.record(error.as_deref());
        self.metrics.reconcile_finished(&self.name, result, started.elapsed());
    }

    /// Wait while the guest calls' CPU budget is in debt; the admission
    /// to charge the call to (`None`: no budget).
    async fn within_budget(&self) -> Option<budget::Ticket> {
        let budget = self.budget.as_ref()?;
        loop {
            let quiet = !budget.throttled_within(Duration::from_secs(60));
            let wait = match budget.admit() {
                Ok(ticket) => return Some(ticket),
                Err(wait) => wait,
            };
            self.metrics.guest_throttled(&self.name, wait);
            if quiet {
                // Once per episode: a throttled controller is a slow or
                // looping guest, which its author needs to hear about, but
                // not on every reconcile.
                tracing::warn!(
                    controller = %self.name,
                    cpu = budget.cpu(),
                    "the guest's calls used more than their CPU budget of {} CPU; reconciles wait {wait:?}. \
                     Find the slow path (`operon test`, the guest call histogram) or raise the budget (spec.limits.cpu, --guest-cpu)",
                    budget.cpu()
                );
            }
            tokio::time::sleep(wait).await;
        }
    }

    async fn reconcile_inner(
        &self,
        module: &Module,
        candidate: Option<Module>,
        key: &ObjectKey,
        attempt: u32,
        fence: &Fence,
        ticket: Option<budget::Ticket>,
    ) -> Verdict {
        if !self.config.scope.contains(key.namespace.as_deref()) {
            return Verdict::Done(None);
        }
        let Some(parent) = self.parents.store().get(key).cloned() else {
            // Deleted: Kubernetes garbage-collects the children.
            return Verdict::Done(None);
        };
        if let Some(selector) = &self.config.parent_selector
            && !selector.matches_with(|k| parent.label(k))
        {
            // Another plugin's parent (or no longer ours): not touched.
            return Verdict::Done(None);
        }
        let finalizing = match &self.manifest.finalizer {
            Some(f) if parent.is_deleting() => {
                if !parent.has_finalizer(f) {
                    return Verdict::Done(None);
                }
                true
            }
            Some(f) => {
                if !parent.has_finalizer(f)
                    && let Err(e) = self.applier.set_finalizer(&parent, f, true, fence).await
                {
                    return Verdict::Retry(e.to_string());
                }
                false
            }
            None if parent.is_deleting() => return Verdict::Done(None),
            None => false,
        };

        let children = self.children(&parent);
        let request = self.request(&parent, &children, finalizing, attempt);
        let reader: Arc<dyn crate::runtime::ObjectReader> = Arc::new(CacheReader {
            informers: self.readable.clone(),
            parent_namespace: key.namespace.clone(),
            scope: self.config.scope.clone(),
        });
        let call_started = Instant::now();
        let call = {
            let module = module.clone();
            let span = tracing::Span::current();
            tokio::task::spawn_blocking(move || {
                span.in_scope(|| {
                    let started = Instant::now();
                    let live = module.reconcile(&request, reader.clone());
                    // The shadow candidate answers the same request, with
                    // the same reads; its answer is compared, never applied.
                    let shadow = candidate.map(|c| (c.info().digest.clone(), c.reconcile(&request, reader)));
                    // Charged here, not by the caller: a call outliving the
                    // reconcile's deadline still pays.
                    if let Some(t) = ticket {
                        t.charge(started.elapsed());
                    }
                    (live, shadow)
                })
            })
            .await
        };
        self.metrics.guest_called(&self.name, call_started.elapsed());
        let call = match call {
            Err(join) => return Verdict::Retry(format!("guest call did not complete: {join}")),
            Ok((live, shadow)) => {
                if let Some((digest, answer)) = shadow {
                    self.compare_shadow(key, &digest, &live, &answer);
                }
                live
            }
        };
        let outcome = match call {
            Err(e) => {
                self.on_probation(module, Some(&e.to_string()));
                return self.guest_error(&parent, key, &e, fence).await;
            }
            Ok(Err(Failure::Transient(m))) => {
                self.applier.event(&parent, true, "ReconcileFailed", &m, fence).await;
                return Verdict::Retry(format!("guest: {m}"));
            }
            Ok(Err(Failure::Terminal(m))) => {
                self.applier.event(&parent, true, "ReconcileTerminal", &m, fence).await;
                return Verdict::Terminal(format!("guest: {m}"));
            }
            Ok(Ok(outcome)) => outcome,
        };
        if let Err(e) = self.write(&parent, &children, &outcome, fence).await {
            let message = e.to_string();
            if matches!(e, apply::Error::NotLeading(_)) {
                // Not an error of the parent: the next leader reconciles it.
                tracing::info!("stopped writing: {message}");
                return Verdict::Done(None);
            }
            if e.is_permanent() {
                let reason = if matches!(e, apply::Error::Invalid(_)) { "InvalidOutcome" } else { "ApplyRefused" };
                if matches!(e, apply::Error::Invalid(_)) {
                    self.on_probation(module, Some(&message));
                }
                self.metrics.outcome_refused(&self.name);
                let note = format!("{message}; not retried until the object changes or the module is replaced");
                self.applier.event(&parent, true, reason, &note, fence).await;
                return Verdict::Terminal(message);
            }
            self.applier.event(&parent, true, "ApplyFailed", &message, fence).await;
            return Verdict::Retry(message);
        }
        self.on_probation(module, None);
        if finalizing && outcome.finalized {
            if let Some(f) = &self.manifest.finalizer
                && let Err(e) = self.applier.set_finalizer(&parent, f, false, fence).await
            {
                return Verdict::Retry(e.to_string());
            }
            return Verdict::Done(None);
        }
        match outcome.requeue_after {
            Some(after) => Verdict::Done(Some(self.requeue_delay(&parent, key, after, fence).await)),
            None => Verdict::Done(None),
        }
    }

    fn versions(&self) -> std::sync::RwLockReadGuard<'_, Versions> {
        self.versions.read().unwrap_or_else(|p| p.into_inner())
    }

    fn versions_mut(&self) -> std::sync::RwLockWriteGuard<'_, Versions> {
        self.versions.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Count a call of `module` against its probation (`failure`: why it
    /// failed), and roll it back when it failed too often.
    fn on_probation(&self, module: &Module, failure: Option<&str>) {
        let Probation { calls: watched, max_failures } = self.config.probation;
        let mut v = self.versions_mut();
        if v.active.info().digest != module.info().digest {
            return; // swapped meanwhile: this call does not count for the new version
        }
        let Some((calls, failures)) = v.probation.as_mut() else { return };
        *calls += 1;
        if failure.is_some() {
            *failures += 1;
        }
        let (calls, failures) = (*calls, *failures);
        if failures > max_failures {
            if let Some(previous) = v.previous.take() {
                let from = std::mem::replace(&mut v.active, previous);
                v.probation = None;
                let to = v.active.info().digest.clone();
                drop(v);
                let reason = format!(
                    "{failures} of its first {calls} reconciles failed (more than the {max_failures} allowed); last: {}",
                    failure.unwrap_or_default()
                );
                tracing::error!(controller = %self.name, from = %from.info().digest, %to, "rolled back: {reason}");
                self.metrics.module_swap(&self.name, "rolled_back");
                let to_module = self.versions().active.clone();
                self.metrics.module_loaded(&self.name, &to, to_module.info().compile_time);
                let _ = self.notices.send(Notice::RolledBack { from: from.info().digest.clone(), to, reason });
            }
        } else if calls >= watched {
            // Passed: the old version is no longer needed.
            v.probation = None;
            v.previous = None;
        }
    }

    /// Compare the candidate's answer with the live one's.
    fn compare_shadow(
        &self,
        key: &ObjectKey,
        digest: &str,
        live: &Result<Result<Outcome, Failure>, CallError>,
        candidate: &Result<Result<Outcome, Failure>, CallError>,
    ) {
        let diff = shadow::differences(&shadow::answer(live), &shadow::answer(candidate), 6);
        let differing = self.shadow.record(diff.is_some());
        self.metrics.shadow_compared(&self.name, if diff.is_some() { "differ" } else { "same" });
        if let Some(diff) = diff {
            // The first difference, then one in a hundred: a sample, not a flood.
            if differing == 1 || differing.is_multiple_of(100) {
                let sample = format!("{key} (candidate {digest}): {diff}");
                tracing::info!(controller = %self.name, "shadow candidate differs: {sample}");
                let _ = self.notices.send(Notice::ShadowDiffers { sample });
            }
        }
    }

    /// The sandbox stopped the guest: count it, tell the parent, decide.
    async fn guest_error(&self, parent: &CachedObject, key: &ObjectKey, e: &CallError, fence: &Fence) -> Verdict {
        let kind = guest_error_kind(e);
        self.metrics.guest_failed(&self.name, kind);
        match kind {
            GuestErrorKind::Trap => self.metrics.reconcile_panicked(&self.name),
            GuestErrorKind::Timeout => self.metrics.reconcile_timed_out(&self.name),
            _ => {}
        }
        let message = format!("reconcile of {key} {e}");
        // A malformed or oversized answer is what this guest says for this
        // input: retrying the same input cannot help.
        if matches!(kind, GuestErrorKind::Malformed | GuestErrorKind::Oversized) {
            self.metrics.outcome_refused(&self.name);
            let note = format!("{message}; not retried until the object changes or the module is replaced");
            self.applier.event(parent, true, "InvalidOutcome", &note, fence).await;
            return Verdict::Terminal(message);
        }
        self.applier.event(parent, true, "ReconcileError", &message, fence).await;
        match kind {
            GuestErrorKind::Timeout | GuestErrorKind::Memory => Verdict::Stopped(message),
            _ => Verdict::Retry(message),
        }
    }

    /// The requeue-after to honour: at least the floor. A guest asking for
    /// less is told once per parent.
    async fn requeue_delay(&self, parent: &CachedObject, key: &ObjectKey, asked: Duration, fence: &Fence) -> Duration {
        let floor = self.config.requeue_floor;
        if asked >= floor {
            return asked;
        }
        self.metrics.requeue_raised(&self.name);
        let first = {
            let mut warned = self.warned_requeue.lock().unwrap_or_else(|p| p.into_inner());
            if warned.len() > 10_000 {
                warned.clear();
            }
            warned.insert(key.clone())
        };
        if first {
            let message = format!(
                "the guest asked to requeue after {}ms; raised to the host's floor of {}ms (a shorter delay is a hot loop)",
                asked.as_millis(),
                floor.as_millis()
            );
            tracing::warn!(object = %key, "{message}");
            self.applier.event(parent, true, "RequeueTooSoon", &message, fence).await;
        }
        floor
    }

    async fn write(
        &self,
        parent: &CachedObject,
        existing: &[(Gvk, Arc<CachedObject>)],
        outcome: &Outcome,
        fence: &Fence,
    ) -> Result<(), apply::Error> {
        let scopes = self.applier.scopes(&self.manifest.owns).await?;
        let children = apply::validate(&self.policy, parent, outcome, |k| scopes.get(k).copied().unwrap_or(true))?;
        apply::check_ownership(parent, &children, self.config.grants.adopt, |kind, key| {
            self.owned.iter().find(|(k, _)| k == kind).and_then(|(_, i)| i.store().get(key).cloned())
        })?;
        let report = self.applier.apply(parent, &children, existing, outcome, fence).await?;
        for _ in 0..report.applied {
            self.metrics.applied(&self.name, ApplyOperation::Apply);
        }
        for _ in 0..report.deleted {
            self.metrics.applied(&self.name, ApplyOperation::Delete);
        }
        if report.status_written {
            self.metrics.applied(&self.name, ApplyOperation::Status);
        }
        tracing::debug!(
            applied = report.applied,
            unchanged = report.unchanged,
            deleted = report.deleted,
            status = report.status_written,
            "reconciled"
        );
        Ok(())
    }

    /// Owned children from the cache, per owned kind.
    fn children(&self, parent: &CachedObject) -> Vec<(Gvk, Arc<CachedObject>)> {
        let Some(uid) = parent.uid() else { return Vec::new() };
        let mut out = Vec::new();
        for (kind, informer) in &self.owned {
            for child in informer.store().owned_by(uid) {
                out.push((kind.clone(), child));
            }
        }
        out
    }

    /// The request for one parent, built from the cache only.
    fn request(
        &self,
        parent: &CachedObject,
        children: &[(Gvk, Arc<CachedObject>)],
        finalizing: bool,
        attempt: u32,
    ) -> Request {
        let children = self
            .owned
            .iter()
            .map(|(kind, _)| {
                let objects = children.iter().filter(|(k, _)| k == kind).map(|(_, c)| c.json().to_string()).collect();
                (kind.clone(), objects)
            })
            .collect();
        let key = parent.key();
        let mut related = Vec::new();
        for (watch, informer) in &self.watched {
            let store = informer.store();
            for o in store.in_namespace(key.namespace.as_deref()) {
                if mapping::relates_to(&o, &watch.mapping, &key) {
                    related.push(o.json().to_string());
                }
            }
        }
        Request { object: parent.json().to_string(), children, related, finalizing, attempt }
    }
}

fn guest_error_kind(e: &CallError) -> GuestErrorKind {
    match e {
        CallError::Timeout { .. } => GuestErrorKind::Timeout,
        CallError::MemoryExceeded { .. } => GuestErrorKind::Memory,
        CallError::Trap { .. } => GuestErrorKind::Trap,
        CallError::Malformed(_) => GuestErrorKind::Malformed,
        CallError::OutputTooLarge { .. } => GuestErrorKind::Oversized,
        CallError::Instantiate(_) => GuestErrorKind::Instantiate,
    }
}
