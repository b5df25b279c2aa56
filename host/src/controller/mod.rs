//! The controller machinery, generic over what one reconcile is: informer
//! events become keys ([`Trigger`]), keys wait in a [`Queue`], bounded
//! workers hand each key to a [`Reconcile`], and its answer decides what
//! happens next (done, requeue after a delay, retry with backoff, never).
//!
//! As with kube-runtime's `Controller::run(reconcile, error_policy, ctx)`,
//! every controller of the host is a user of this one loop: the wasm
//! pipeline of a module ([`crate::pipeline`]) and the controller of the
//! `Reconciler` resource ([`crate::reconciler`]). Nothing else in the host
//! runs a queue of its own.
//!
//! **Invariant: the queue holds keys, never objects.** Every reconcile reads
//! the newest cached state when it starts.
//!
//! **Invariant: a controller writes only through its run's [`Fence`].** When
//! the run stops (or its future is dropped), its workers stop with it: they
//! are owned by the run, never detached.

pub mod index;
pub mod mapping;
mod trigger;

pub use mapping::{Enqueue, meaningful_change};
pub use trigger::Trigger;

use crate::cache::Informer;
use crate::leader::Fence;
use crate::metrics::{Metrics, ReconcileResult};
use crate::queue::{self, Queue};
use std::fmt::{Debug, Display};
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// What a key is: cheap to clone, comparable, printable.
pub trait Key: Clone + Eq + Hash + Debug + Display + Send + Sync + 'static {}
impl<K: Clone + Eq + Hash + Debug + Display + Send + Sync + 'static> Key for K {}

/// One reconcile: bring the world named by `key` to what it should be.
///
/// Reconciliation is level-based: it must read the current state (from the
/// cache) and be idempotent, because a key is reconciled again after any
/// change, after a failure and after a restart, with no memory of why.
pub trait Reconcile: Send + Sync + 'static {
    /// What the queue holds.
    type Key: Key;
    /// Why a reconcile failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Reconcile `key`. `Ok` says when to come back, if ever; `Err` is
    /// retried as [`Reconcile::error_policy`] says.
    fn reconcile(&self, key: &Self::Key, ctx: &Context) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// Informers the reconcile reads besides those of its triggers: the
    /// controller starts only once they have synced.
    fn informers(&self) -> Vec<Arc<Informer>> {
        Vec::new()
    }

    /// What to do after `error` (by default: retry with backoff).
    fn error_policy(&self, error: &Self::Error) -> Retry {
        let _ = error;
        Retry::Backoff
    }
}

/// What one reconcile is given beside its key.
#[derive(Debug, Clone)]
pub struct Context {
    /// How many times in a row this key failed before (0 the first time).
    pub attempt: u32,
    /// Writes are made only while it is open.
    pub fence: Fence,
}

/// When to reconcile a key again after a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// When something changes.
    Done,
    /// After this delay (drawn from the controller's requeue budget, so
    /// many keys asking to come back soon are spread out).
    RequeueAfter(Duration),
}

/// When to reconcile a key again after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// With per-key exponential backoff from [`Config::backoff_base`]
    /// (under the controller's overall retry bucket).
    Backoff,
    /// With backoff starting from this delay: for attempts that burned a
    /// whole deadline, which will most likely do it again.
    BackoffFrom(Duration),
    /// Not until the key changes (a terminal error), or
    /// [`Controller::retry_terminal`] is called.
    Never,
}

/// Why a reconcile did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum Error<E: std::error::Error + 'static> {
    /// The reconcile said so.
    #[error(transparent)]
    Reconcile(E),
    /// The whole reconcile took longer than [`Config::reconcile_timeout`].
    #[error("reconcile of {key} did not finish within {limit:?} (reads, guest call and writes together)")]
    Timeout {
        /// The key.
        key: String,
        /// The limit.
        limit: Duration,
    },
}

/// Settings of the machinery itself (what to reconcile is the
/// [`Reconcile`]'s business).
#[derive(Debug, Clone)]
pub struct Config {
    /// Workers: reconciles of different keys running at once.
    pub max_concurrent_reconciles: usize,
    /// The first retry delay of a failing key.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Retries per second across all keys (controller-runtime's overall
    /// bucket); `0` for no limit.
    pub retry_qps: f64,
    /// Burst of that bucket.
    pub retry_burst: u32,
    /// Requeue-afters per second across all keys (the requeue budget, a
    /// bucket of its own beside the retries'); `0` for no limit.
    pub requeue_qps: f64,
    /// Burst of that bucket.
    pub requeue_burst: u32,
    /// Deadline of one whole reconcile.
    pub reconcile_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrent_reconciles: 1,
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_secs(1000),
            retry_qps: 10.0,
            retry_burst: 100,
            requeue_qps: 10.0,
            requeue_burst: 100,
            reconcile_timeout: Duration::from_secs(60),
        }
    }
}

/// Counters of finished reconciles, for whoever reports on the controller.
pub struct Stats<E: std::error::Error + 'static> {
    reconciles: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<Arc<Error<E>>>>,
}

impl<E: std::error::Error + 'static> Default for Stats<E> {
    fn default() -> Self {
        Stats { reconciles: AtomicU64::new(0), errors: AtomicU64::new(0), last_error: Mutex::new(None) }
    }
}

/// A copy of [`Stats`] at one moment.
pub struct StatsSnapshot<E: std::error::Error + 'static> {
    /// Reconciles finished.
    pub reconciles: u64,
    /// Of which failed.
    pub errors: u64,
    /// The last error.
    pub last_error: Option<Arc<Error<E>>>,
}

impl<E: std::error::Error + 'static> Clone for StatsSnapshot<E> {
    fn clone(&self) -> Self {
        StatsSnapshot { reconciles: self.reconciles, errors: self.errors, last_error: self.last_error.clone() }
    }
}

impl<E: std::error::Error + 'static> Default for StatsSnapshot<E> {
    fn default() -> Self {
        StatsSnapshot { reconciles: 0, errors: 0, last_error: None }
    }
}

impl<E: std::error::Error + 'static> Debug for StatsSnapshot<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsSnapshot")
            .field("reconciles", &self.reconciles)
            .field("errors", &self.errors)
            .field("last_error", &self.last_error.as_ref().map(|e| e.to_string()))
            .finish()
    }
}

impl<E: std::error::Error + 'static> Stats<E> {
    fn record(&self, error: Option<Arc<Error<E>>>) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = error {
            self.errors.fetch_add(1, Ordering::Relaxed);
            *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot<E> {
        StatsSnapshot {
            reconciles: self.reconciles.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            last_error: self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// A controller: triggers, a queue and workers around one [`Reconcile`].
/// Cheap to clone (clones are handles to the same controller).
pub struct Controller<R: Reconcile> {
    shared: Arc<Shared<R>>,
}

impl<R: Reconcile> Clone for Controller<R> {
    fn clone(&self) -> Self {
        Controller { shared: self.shared.clone() }
    }
}

/// Keys kept for [`Controller::retry_terminal`] at most.
const TERMINAL_KEPT: std::num::NonZeroUsize = std::num::NonZeroUsize::new(100_000).expect("not zero");

struct Shared<R: Reconcile> {
    name: String,
    reconciler: Arc<R>,
    config: Config,
    triggers: Vec<Trigger<R::Key>>,
    metrics: Arc<Metrics>,
    stats: Stats<R::Error>,
    /// The queue of the current run, if one runs.
    queue: Mutex<Option<Queue<R::Key>>>,
    /// Keys whose last reconcile failed for good, the most recent last;
    /// at most [`TERMINAL_KEPT`] (the oldest are forgotten).
    terminal: Mutex<lru::LruCache<R::Key, ()>>,
}

impl<R: Reconcile> Controller<R> {
    /// A controller named `name` (metrics, logs) around `reconciler`, fed by
    /// `triggers`. Nothing runs until [`Controller::run`].
    pub fn new(
        name: impl Into<String>,
        reconciler: Arc<R>,
        triggers: Vec<Trigger<R::Key>>,
        config: Config,
        metrics: Arc<Metrics>,
    ) -> Controller<R> {
        Controller {
            shared: Arc::new(Shared {
                name: name.into(),
                reconciler,
                config,
                triggers,
                metrics,
                stats: Stats::default(),
                queue: Mutex::new(None),
                terminal: Mutex::new(lru::LruCache::new(TERMINAL_KEPT)),
            }),
        }
    }

    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// What it reconciles with.
    pub fn reconciler(&self) -> &Arc<R> {
        &self.shared.reconciler
    }

    /// Its settings.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Counters of finished reconciles.
    pub fn stats(&self) -> StatsSnapshot<R::Error> {
        self.shared.stats.snapshot()
    }

    /// Queue `key` now, if the controller runs (otherwise its next run
    /// lists everything anyway).
    pub fn enqueue(&self, key: R::Key) {
        if let Some(queue) = self.queue() {
            queue.add(key);
        }
    }

    /// Queue every key whose last reconcile failed terminally: what changed
    /// may answer differently now (a new module version, new grants).
    pub fn retry_terminal(&self) {
        let keys: Vec<R::Key> = {
            let mut terminal = self.shared.terminal.lock().unwrap_or_else(|p| p.into_inner());
            let keys = terminal.iter().map(|(k, ())| k.clone()).collect();
            terminal.clear();
            keys
        };
        if let Some(queue) = self.queue() {
            for key in keys {
                queue.add(key);
            }
        }
    }

    /// Keys waiting or in flight in the current run (0 when not running).
    pub fn queued(&self) -> usize {
        self.queue().map_or(0, |q| q.len())
    }

    /// Wait until every informer it reads has listed once.
    ///
    /// # Errors
    /// The first informer that did not sync in time, with its last error.
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), crate::cache::Error> {
        let deadline = Instant::now() + timeout;
        let mut informers: Vec<Arc<Informer>> =
            self.shared.triggers.iter().filter_map(|t| t.informer().cloned()).collect();
        informers.extend(self.shared.reconciler.informers());
        for informer in informers {
            informer.wait_synced(deadline.saturating_duration_since(Instant::now())).await?;
        }
        Ok(())
    }

    fn queue(&self) -> Option<Queue<R::Key>> {
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reconcile until `stop` completes: start the triggers (replaying what
    /// their informers hold as low-priority work), then run the workers,
    /// writing only while `fence` is open. After `stop`, no new reconcile
    /// starts and the ones in flight finish; waiting keys are dropped (the
    /// next run lists everything again). Dropping the returned future stops
    /// everything at once, workers included.
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
        *shared.queue.lock().unwrap_or_else(|p| p.into_inner()) = Some(queue.clone());
        let mut triggers = tokio::task::JoinSet::new();
        for trigger in &shared.triggers {
            trigger.spawn(&queue, &mut triggers);
        }
        let workers = {
            let shared = shared.clone();
            let queue = queue.clone();
            queue::run_workers(queue.clone(), shared.config.max_concurrent_reconciles, move |key| {
                let shared = shared.clone();
                let queue = queue.clone();
                let fence = fence.clone();
                async move { shared.reconcile(&queue, key, fence).await }
            })
        };
        // Owned, not spawned: if this future is dropped, so are the workers
        // (their JoinSet aborts them).
        let mut workers = std::pin::pin!(workers);
        tokio::select! {
            () = stop => {}
            () = &mut workers => {}
        }
        triggers.abort_all();
        queue.shut_down();
        workers.await;
        *shared.queue.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::info!(controller = %shared.name, "controller stopped");
    }
}

impl<R: Reconcile> Shared<R> {
    async fn reconcile(&self, queue: &Queue<R::Key>, key: R::Key, fence: Fence) {
        let started = Instant::now();
        let _busy = self.metrics.worker_busy(&self.name);
        let ctx = Context { attempt: queue.num_requeues(&key), fence };
        let span = tracing::info_span!("reconcile", controller = %self.name, object = %key, attempt = ctx.attempt);
        let limit = self.config.reconcile_timeout;
        let result =
            match tokio::time::timeout(limit, self.reconciler.reconcile(&key, &ctx)).instrument(span.clone()).await {
                Ok(Ok(action)) => Ok(action),
                Ok(Err(e)) => {
                    let retry = self.reconciler.error_policy(&e);
                    Err((Error::Reconcile(e), retry))
                }
                Err(_) => {
                    self.metrics.reconcile_timed_out(&self.name);
                    Err((Error::Timeout { key: key.to_string(), limit }, Retry::Backoff))
                }
            };
        let _enter = span.enter();
        let (label, error) = match result {
            Ok(action) => {
                queue.forget(&key);
                self.terminal.lock().unwrap_or_else(|p| p.into_inner()).pop(&key);
                match action {
                    Action::Done => (ReconcileResult::Success, None),
                    Action::RequeueAfter(after) => {
                        if queue.add_after_limited(key, after) > after {
                            self.metrics.requeue_throttled(&self.name);
                            tracing::debug!(asked = ?after, "requeue delayed by the controller's requeue budget");
                        }
                        (ReconcileResult::RequeueAfter, None)
                    }
                }
            }
            Err((error, retry)) => {
                let label = match retry {
                    Retry::Backoff => {
                        let delay = queue.add_rate_limited(key);
                        tracing::warn!(retry_in = ?delay, "reconcile failed: {error}");
                        ReconcileResult::Error
                    }
                    Retry::BackoffFrom(base) => {
                        let delay = queue.add_rate_limited_from(key, base);
                        tracing::warn!(retry_in = ?delay, "reconcile stopped: {error}");
                        ReconcileResult::Error
                    }
                    Retry::Never => {
                        queue.forget(&key);
                        // Bounded: a controller that refuses everything
                        // forgets its oldest failures, not its memory.
                        self.terminal.lock().unwrap_or_else(|p| p.into_inner()).put(key, ());
                        tracing::error!("reconcile failed terminally, not retrying until the object changes: {error}");
                        ReconcileResult::TerminalError
                    }
                };
                (label, Some(Arc::new(error)))
            }
        };
        self.stats.record(error);
        self.metrics.reconcile_finished(&self.name, label, started.elapsed());
    }
}

#[cfg(test)]
mod tests;
