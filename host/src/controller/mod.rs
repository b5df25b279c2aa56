//! Controllers: one per loaded module. A controller maps informer events to
//! parent keys, queues them, and runs the reconcile pipeline on workers:
//! request from the cache → guest call → validate → apply.
//!
//! **Invariant: the queue holds keys, never objects.** Every reconcile reads
//! the newest cached state of its parent when it starts.

mod mapping;
mod reader;

pub use mapping::meaningful_change;
pub use reader::CacheReader;

use crate::apply::{self, Applier};
use crate::cache::{Cache, CachedObject, Informer, ObjectKey, WatchKey};
use crate::metrics::{ApplyOperation, GuestErrorKind, Metrics, ReconcileResult};
use crate::queue::{self, Queue};
use crate::runtime::{CallError, Failure, Gvk, Manifest, Module, Outcome, Request, Watch};
use mapping::Enqueue;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Settings of one controller.
#[derive(Debug, Clone)]
pub struct Config {
    /// Workers: reconciles of different parents running at once.
    pub max_concurrent_reconciles: usize,
    /// Watch and act in this namespace only; `None` for all namespaces.
    pub namespace: Option<String>,
    /// Backoff of the work queue.
    pub backoff_base: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
    /// Reporting instance for events (e.g. the pod name).
    pub instance: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrent_reconciles: 1,
            namespace: None,
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_secs(1000),
            instance: None,
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

/// One controller. Cheap to clone.
#[derive(Clone)]
pub struct Controller {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    module: RwLock<Module>,
    manifest: Arc<Manifest>,
    config: Config,
    parents: Arc<Informer>,
    owned: Vec<(Gvk, Arc<Informer>)>,
    watched: Vec<(Watch, Arc<Informer>)>,
    readable: Arc<HashMap<Gvk, Arc<Informer>>>,
    applier: Applier,
    metrics: Arc<Metrics>,
}

impl Controller {
    /// Build a controller for `module` and start (or join) the informers it
    /// needs, so caches warm up even before this replica leads.
    pub fn new(
        module: Module,
        cache: &Cache,
        client: kube::Client,
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
        let name = manifest.name.clone();
        metrics.controller_started(&name, config.max_concurrent_reconciles);
        Controller {
            shared: Arc::new(Shared {
                applier: Applier::new(client, &name, config.instance.clone()),
                name,
                module: RwLock::new(module),
                manifest,
                config,
                parents,
                owned,
                watched,
                readable: Arc::new(readable),
                metrics,
            }),
        }
    }

    /// The controller's name (the manifest's).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The module version in use.
    pub fn module(&self) -> Module {
        self.shared.module.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every informer this controller reads from.
    pub fn informers(&self) -> Vec<Arc<Informer>> {
        self.shared.readable.values().cloned().collect()
    }

    /// Replace the module. Reconciles in flight finish on the old version;
    /// the queue is untouched.
    ///
    /// # Errors
    /// [`Error::ManifestChanged`] if the new module declares different kinds.
    pub fn swap_module(&self, module: Module) -> Result<(), Error> {
        if **module.manifest() != *self.shared.manifest {
            return Err(Error::ManifestChanged(format!(
                "running {:?}, new {:?}",
                self.shared.manifest,
                module.manifest()
            )));
        }
        *self.shared.module.write().unwrap_or_else(|p| p.into_inner()) = module;
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
    /// what they hold as low-priority work), then run the workers. After
    /// `stop`, no new reconcile starts and the ones in flight finish.
    pub async fn run(&self, stop: impl Future<Output = ()>) {
        let shared = &self.shared;
        let queue = Queue::new(queue::Config {
            base_delay: shared.config.backoff_base,
            max_delay: shared.config.backoff_max,
            metrics: Some(shared.metrics.workqueue(&shared.name)),
        });
        let mut feeders = tokio::task::JoinSet::new();
        self.spawn_feeders(&queue, &mut feeders);
        let workers = {
            let shared = shared.clone();
            let queue = queue.clone();
            tokio::spawn(queue::run_workers(queue.clone(), shared.config.max_concurrent_reconciles, move |key| {
                let shared = shared.clone();
                let queue = queue.clone();
                async move { shared.reconcile(&queue, key).await }
            }))
        };
        stop.await;
        feeders.abort_all();
        // Reconciles in flight finish; waiting keys are dropped (the next
        // leader lists everything again).
        queue.shut_down();
        let _ = workers.await;
        tracing::info!(controller = %shared.name, "controller stopped");
    }

    fn spawn_feeders(&self, queue: &Queue<ObjectKey>, tasks: &mut tokio::task::JoinSet<()>) {
        let enqueue = |queue: &Queue<ObjectKey>, e: Enqueue| match e {
            Enqueue::Now(k) => queue.add(k),
            Enqueue::Initial(k) => queue.add_low_priority(k),
        };
        let shared = &self.shared;
        let mut rx = shared.parents.subscribe();
        let q = queue.clone();
        tasks.spawn(async move {
            while let Some(ev) = rx.recv().await {
                if let Some(e) = mapping::for_event(&ev) {
                    enqueue(&q, e);
                }
            }
        });
        for (_, informer) in &shared.owned {
            let mut rx = informer.subscribe();
            let (q, parent) = (queue.clone(), shared.manifest.for_kind.clone());
            tasks.spawn(async move {
                while let Some(ev) = rx.recv().await {
                    if let Some(e) = mapping::owned_event(&ev, &parent) {
                        enqueue(&q, e);
                    }
                }
            });
        }
        for (watch, informer) in &shared.watched {
            let mut rx = informer.subscribe();
            let (q, mapping, parents) = (queue.clone(), watch.mapping.clone(), shared.parents.clone());
            tasks.spawn(async move {
                while let Some(ev) = rx.recv().await {
                    let parents_in =
                        |ns: Option<&str>| parents.store().in_namespace(ns).iter().map(|p| p.key()).collect();
                    for e in mapping::watched_event(&ev, &mapping, parents_in) {
                        enqueue(&q, e);
                    }
                }
            });
        }
    }
}

/// How one reconcile ended, before metrics and requeueing.
enum Verdict {
    Done(Option<Duration>),
    Retry(String),
    Terminal(String),
}

impl Shared {
    async fn reconcile(self: &Arc<Self>, queue: &Queue<ObjectKey>, key: ObjectKey) {
        let started = Instant::now();
        let _busy = self.metrics.worker_busy(&self.name);
        let attempt = queue.num_requeues(&key);
        let module = self.module.read().unwrap_or_else(|p| p.into_inner()).clone();
        let span = tracing::info_span!("reconcile", controller = %self.name, object = %key, digest = %module.info().digest, attempt);
        let verdict = self.reconcile_inner(&module, &key, attempt).instrument(span.clone()).await;
        let _enter = span.enter();
        let result = match verdict {
            Verdict::Done(None) => {
                queue.forget(&key);
                ReconcileResult::Success
            }
            Verdict::Done(Some(after)) => {
                queue.forget(&key);
                queue.add_after(key, after);
                ReconcileResult::RequeueAfter
            }
            Verdict::Retry(message) => {
                let delay = queue.add_rate_limited(key);
                tracing::warn!(retry_in = ?delay, "reconcile failed: {message}");
                ReconcileResult::Error
            }
            Verdict::Terminal(message) => {
                queue.forget(&key);
                tracing::error!("reconcile failed terminally, not retrying until the object changes: {message}");
                ReconcileResult::TerminalError
            }
        };
        self.metrics.reconcile_finished(&self.name, result, started.elapsed());
    }

    async fn reconcile_inner(&self, module: &Module, key: &ObjectKey, attempt: u32) -> Verdict {
        let Some(parent) = self.parents.store().get(key).cloned() else {
            // Deleted: Kubernetes garbage-collects the children.
            return Verdict::Done(None);
        };
        let deleting = parent.object.metadata.deletion_timestamp.is_some();
        let finalizing = match &self.manifest.finalizer {
            Some(f) if deleting => {
                if !mapping::has_finalizer(&parent, f) {
                    return Verdict::Done(None);
                }
                true
            }
            Some(f) => {
                if !mapping::has_finalizer(&parent, f)
                    && let Err(e) = self.applier.set_finalizer(&parent, f, true).await
                {
                    return Verdict::Retry(e.to_string());
                }
                false
            }
            None if deleting => return Verdict::Done(None),
            None => false,
        };

        let children = self.children(&parent);
        let request = self.request(&parent, &children, finalizing, attempt);
        let reader = Arc::new(CacheReader {
            informers: self.readable.clone(),
            parent_namespace: key.namespace.clone(),
            scope: self.config.namespace.clone(),
        });
        let call_started = Instant::now();
        let call = {
            let module = module.clone();
            let span = tracing::Span::current();
            tokio::task::spawn_blocking(move || span.in_scope(|| module.reconcile(&request, reader))).await
        };
        self.metrics.guest_called(&self.name, call_started.elapsed());
        let outcome = match call {
            Err(join) => return Verdict::Retry(format!("guest call did not complete: {join}")),
            Ok(Err(e)) => {
                self.metrics.guest_failed(&self.name, guest_error_kind(&e));
                let message = format!("reconcile of {key} {e}");
                self.applier.event(&parent, true, "ReconcileError", &message).await;
                return Verdict::Retry(message);
            }
            Ok(Ok(Err(Failure::Transient(m)))) => {
                self.applier.event(&parent, true, "ReconcileFailed", &m).await;
                return Verdict::Retry(format!("guest: {m}"));
            }
            Ok(Ok(Err(Failure::Terminal(m)))) => {
                self.applier.event(&parent, true, "ReconcileTerminal", &m).await;
                return Verdict::Terminal(format!("guest: {m}"));
            }
            Ok(Ok(Ok(outcome))) => outcome,
        };
        match self.write(&parent, &children, &outcome).await {
            Ok(()) => {}
            Err(e) => {
                let message = e.to_string();
                let reason = if matches!(e, apply::Error::Invalid(_)) { "InvalidOutcome" } else { "ApplyFailed" };
                self.applier.event(&parent, true, reason, &message).await;
                return Verdict::Retry(message);
            }
        }
        if finalizing && outcome.finalized {
            if let Some(f) = &self.manifest.finalizer
                && let Err(e) = self.applier.set_finalizer(&parent, f, false).await
            {
                return Verdict::Retry(e.to_string());
            }
            return Verdict::Done(None);
        }
        Verdict::Done(outcome.requeue_after)
    }

    async fn write(
        &self,
        parent: &CachedObject,
        existing: &[(Gvk, Arc<CachedObject>)],
        outcome: &Outcome,
    ) -> Result<(), apply::Error> {
        let scopes = self.applier.scopes(&self.manifest.owns).await?;
        let children = apply::validate(&self.manifest, parent, outcome, |k| scopes.get(k).copied().unwrap_or(true))?;
        let report = self.applier.apply(parent, &children, existing, outcome).await?;
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

    /// Owned children from the cache, per owned kind, in the parent's
    /// namespace.
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
        CallError::Trap(_) => GuestErrorKind::Trap,
        CallError::Malformed(_) => GuestErrorKind::Malformed,
        CallError::OutputTooLarge { .. } => GuestErrorKind::Oversized,
        CallError::Instantiate(_) => GuestErrorKind::Instantiate,
    }
}
