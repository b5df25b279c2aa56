//! The work queue: which key a worker reconciles next, and when.
//!
//! [`Queue`] has client-go's workqueue semantics (the rate-limiting,
//! delaying queue controller-runtime builds on), because reconcilers are
//! written against them:
//!
//! - **Dedup.** A key is queued once however often it is added while it
//!   waits. The queue holds keys, never objects: the worker reads the latest
//!   object from the cache when it gets the key, so coalescing is safe.
//! - **One worker per key.** A key being processed is never handed out
//!   again; adding it marks it dirty, and [`Queue::done`] queues it again.
//! - **Priorities.** Keys from a controller's initial list are added with
//!   [`Queue::add_low_priority`] and served after every normal key that is
//!   waiting, so a restart over thousands of objects does not delay the
//!   changes that happen meanwhile.
//! - **Delays and backoff.** [`Queue::add_after`] for requeue-after,
//!   [`Queue::add_rate_limited`] for retries: the larger of per-key
//!   exponential backoff (reset by [`Queue::forget`] on success) and an
//!   overall token bucket (10 retries/s, burst 100), as controller-runtime's
//!   default rate limiter does, so a storm of failing keys cannot turn into
//!   a storm of API calls.
//! - **Requeue budget.** [`Queue::add_after_limited`] is requeue-after
//!   drawn from a second bucket of its own ([`Config::requeue_qps`], off
//!   by default as in client-go; controllers turn it on): the delay is the
//!   larger of the one asked and the wait for a token, so parents that all
//!   ask to run again soon are spread out instead of run as fast as asked.
//!
//! Time is tokio's, so tests run with `tokio::time::pause` and take no
//! wall-clock time.
//!
//! # Example
//!
//! ```
//! use operon::queue::{self, Queue};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let queue: Queue<String> = Queue::new(queue::Config::default());
//! queue.add("default/web".to_owned());
//! queue.add("default/web".to_owned()); // still one key
//!
//! let key = queue.get().await.expect("not shut down");
//! // … reconcile `key` …; then one of:
//! queue.forget(&key); // success: reset its backoff
//! queue.add_after(key.clone(), Duration::from_secs(30)); // requeue-after
//! // or, on a transient error: queue.add_rate_limited(key.clone());
//! queue.done(&key); // always
//! # }
//! ```

mod state;

use crate::metrics;
use futures::FutureExt as _;
use state::*;
use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often the `workqueue_unfinished_work_seconds` and
/// `workqueue_longest_running_processor_seconds` gauges are recomputed
/// (controller-runtime: every 500 ms).
const UNFINISHED_WORK_PERIOD: Duration = Duration::from_millis(500);

/// Settings of one queue.
#[derive(Debug, Clone)]
pub struct Config {
    /// The first retry delay of a key; each further failure doubles it.
    pub base_delay: Duration,
    /// The longest retry delay.
    pub max_delay: Duration,
    /// Rate of the overall token bucket that retries draw from, per second;
    /// `0` turns it off.
    pub qps: f64,
    /// How many retries the bucket lets through at once.
    pub burst: u32,
    /// Rate of the bucket that [`Queue::add_after_limited`] draws from, per
    /// second; `0` (the default) turns it off.
    pub requeue_qps: f64,
    /// How many requeues that bucket lets through at once.
    pub requeue_burst: u32,
    /// Where the queue records its `workqueue_*` series, if anywhere
    /// (`Metrics::workqueue(controller)`).
    pub metrics: Option<metrics::Workqueue>,
}

impl Default for Config {
    /// client-go's defaults (`DefaultControllerRateLimiter`): 5 ms doubling
    /// to 1000 s per key, and a bucket of 10 per second, burst 100.
    fn default() -> Self {
        Self {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100,
            requeue_qps: 0.0,
            requeue_burst: 100,
            metrics: None,
        }
    }
}

/// A deduplicating, rate-limited work queue of keys. Cheap to clone: clones
/// share one queue.
///
/// # Guarantees
///
/// - A key is handed out by [`Queue::get`] at most once between two
///   [`Queue::done`] calls for it, whatever the number of workers.
/// - A key added while waiting is not queued twice; a key added while being
///   processed is handed out again, once, after `done`.
/// - Among keys of one priority, the order is first added, first served.
///
/// # Caveats
///
/// Every key handed out must be given back with [`Queue::done`], also when
/// its processing failed: until then the key is never handed out again.
/// Dropping a worker's future between `get` and `done` loses the key in this
/// way; stop workers with [`Queue::shut_down`] instead.
#[doc(alias = "workqueue")]
#[doc(alias = "RateLimitingQueue")]
#[doc(alias = "TypedRateLimitingInterface")]
pub struct Queue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Queue<K> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<K> Debug for Queue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").finish_non_exhaustive()
    }
}

struct Inner<K> {
    state: Mutex<State<K>>,
    /// Woken on every change a waiting `get` or drain might care about.
    changed: Notify,
    base_delay: Duration,
    max_delay: Duration,
    /// Retries ([`Queue::add_rate_limited`]).
    bucket: Option<Mutex<TokenBucket>>,
    /// Requeue-after ([`Queue::add_after_limited`]).
    requeue_bucket: Option<Mutex<TokenBucket>>,
    metrics: Option<metrics::Workqueue>,
}

impl<K> Queue<K>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    /// Creates an empty queue.
    ///
    /// With metrics configured and a tokio runtime current, a small task
    /// refreshes the unfinished-work gauges every 500 ms; it ends when the
    /// queue is shut down or dropped.
    pub fn new(config: Config) -> Self {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                normal: VecDeque::new(),
                low: VecDeque::new(),
                waiting: HashMap::new(),
                processing: HashMap::new(),
                dirty: HashMap::new(),
                delayed: HashMap::new(),
                timers: BinaryHeap::new(),
                failures: HashMap::new(),
                seq: 0,
                shutdown: Shutdown::No,
            }),
            changed: Notify::new(),
            base_delay: config.base_delay,
            max_delay: config.max_delay,
            bucket: (config.qps > 0.0).then(|| Mutex::new(TokenBucket::new(config.qps, config.burst))),
            requeue_bucket: (config.requeue_qps > 0.0)
                .then(|| Mutex::new(TokenBucket::new(config.requeue_qps, config.requeue_burst))),
            metrics: config.metrics,
        });
        if inner.metrics.is_some()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(refresh_unfinished_work(Arc::downgrade(&inner)));
        }
        Self { inner }
    }

    /// Queues `key` unless it is already waiting; if it is being processed,
    /// it is queued again when that ends. Ignored after shutdown.
    pub fn add(&self, key: K) {
        self.add_with(key, Priority::Normal);
    }

    /// Queues `key` behind every normal-priority key that is waiting — for
    /// the keys of a controller's initial list. Low keys are served first in,
    /// first out among themselves whenever no normal key waits, so they are
    /// never starved by an idle queue. A later [`Queue::add`] of a waiting
    /// low key promotes it to the back of the normal keys; a low add never
    /// demotes.
    pub fn add_low_priority(&self, key: K) {
        self.add_with(key, Priority::Low);
    }

    /// Queues `key` once `delay` has passed (at once for a zero delay). If a
    /// delayed add of the key is already pending, the earlier deadline wins.
    /// Counts in `workqueue_retries_total`, as client-go counts every
    /// delayed add.
    pub fn add_after(&self, key: K, delay: Duration) {
        if let Some(m) = &self.inner.metrics
            && !self.inner.is_shut_down()
        {
            m.retries.inc();
        }
        if delay.is_zero() {
            return self.add(key);
        }
        let mut state = self.inner.lock();
        if state.shutdown != Shutdown::No {
            return;
        }
        let now = Instant::now();
        // A delay too long to represent means "not in this process's life".
        let at = now.checked_add(delay).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        if state.delayed.get(&key).is_some_and(|&(pending, _)| pending <= at) {
            return;
        }
        let seq = state.next_seq();
        state.delayed.insert(key.clone(), (at, seq));
        state.timers.push(Timer { at, seq, key });
        drop(state);
        // A waiting `get` may sleep until a later deadline: let it look again.
        self.inner.changed.notify_waiters();
    }

    /// Queues `key` after its backoff — the larger of `base_delay ×
    /// 2^failures` (at most `max_delay`) and the wait for a token of the
    /// overall bucket — and counts one more failure. Returns the delay.
    #[doc(alias = "AddRateLimited")]
    pub fn add_rate_limited(&self, key: K) -> Duration {
        self.add_rate_limited_from(key, self.inner.base_delay)
    }

    /// [`Queue::add_rate_limited`] with a backoff that starts at `base`
    /// (or the queue's own base, if larger): for failures that retrying
    /// within milliseconds cannot help, such as a guest the sandbox stopped.
    /// Counts in the same per-key failures and the same overall bucket.
    pub fn add_rate_limited_from(&self, key: K, base: Duration) -> Duration {
        let delay = {
            let mut state = self.inner.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            let exponent = *failures;
            *failures = failures.saturating_add(1);
            backoff(base.max(self.inner.base_delay), self.inner.max_delay, exponent)
        };
        let delay = delay.max(reserve(self.inner.bucket.as_ref()));
        self.add_after(key, delay);
        delay
    }

    /// Requeue-after within the requeue budget: queues `key` after the
    /// larger of `delay` and the wait for a token of the requeue bucket
    /// (just `delay` when that bucket is off). Returns the delay used. A
    /// guest that asks every parent to run again at once thus costs at most
    /// `requeue_qps` reconciles a second once its burst is spent, and
    /// cannot crowd out the API server its neighbours share.
    pub fn add_after_limited(&self, key: K, delay: Duration) -> Duration {
        let delay = delay.max(reserve(self.inner.requeue_bucket.as_ref()));
        self.add_after(key, delay);
        delay
    }

    /// Resets the backoff of `key` — call it when the key was processed
    /// successfully. Does not remove the key from the queue.
    pub fn forget(&self, key: &K) {
        self.inner.lock().failures.remove(key);
    }

    /// How many times `key` was added with [`Queue::add_rate_limited`] since
    /// it was last forgotten.
    #[doc(alias = "NumRequeues")]
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Waits for the next key to process. Give it back with
    /// [`Queue::done`].
    ///
    /// Returns `None` once the queue is shut down: at once after
    /// [`Queue::shut_down`] (waiting keys are dropped), or when no key is
    /// left to hand out after [`Queue::shut_down_with_drain`].
    ///
    /// Cancel-safe: a `get` dropped before it returns takes no key.
    pub async fn get(&self) -> Option<K> {
        loop {
            let changed = self.inner.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before the state is read, so no change is missed.
            changed.as_mut().enable();
            let next_deadline = {
                let mut state = self.inner.lock();
                let now = Instant::now();
                if state.shutdown == Shutdown::Now {
                    return None;
                }
                state.fire_due_timers(now, &self.inner.metrics);
                if let Some((key, since)) = state.pop() {
                    state.processing.insert(key.clone(), now);
                    if let Some(m) = &self.inner.metrics {
                        m.queue_duration.observe(now.saturating_duration_since(since).as_secs_f64());
                    }
                    self.inner.update_depth(&state);
                    return Some(key);
                }
                // While draining, a dirty key still comes back on `done`.
                if state.shutdown == Shutdown::Draining && state.dirty.is_empty() {
                    return None;
                }
                state.timers.peek().map(|t| t.at)
            };
            match next_deadline {
                Some(at) => {
                    tokio::select! {
                        () = changed => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// Marks `key` as processed. If it was added meanwhile, it is queued
    /// again now. A key that is not being processed is ignored.
    pub fn done(&self, key: &K) {
        let mut state = self.inner.lock();
        let Some(started) = state.processing.remove(key) else {
            tracing::debug!(?key, "queue: done for a key that is not being processed; ignored");
            return;
        };
        let now = Instant::now();
        if let Some(m) = &self.inner.metrics {
            m.work_duration.observe(now.saturating_duration_since(started).as_secs_f64());
        }
        if let Some(dirty) = state.dirty.remove(key) {
            state.enqueue(key.clone(), dirty.since, dirty.priority);
        }
        self.inner.update_depth(&state);
        drop(state);
        self.inner.changed.notify_waiters();
    }

    /// The number of keys waiting to be handed out (not those being
    /// processed, not pending delayed adds).
    pub fn len(&self) -> usize {
        let mut state = self.inner.lock();
        state.fire_due_timers(Instant::now(), &self.inner.metrics);
        self.inner.update_depth(&state);
        state.waiting.len()
    }

    /// Whether no key is waiting to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue now: adds are ignored from here on, waiting and
    /// delayed keys are dropped, and every `get` returns `None`. Keys being
    /// processed may still be given back with [`Queue::done`]. Reconciles
    /// are level-based, so a dropped key is picked up again by the next
    /// start's initial list.
    pub fn shut_down(&self) {
        let mut state = self.inner.lock();
        state.shutdown = Shutdown::Now;
        state.normal.clear();
        state.low.clear();
        state.waiting.clear();
        state.dirty.clear();
        state.delayed.clear();
        state.timers.clear();
        self.inner.update_depth(&state);
        drop(state);
        self.inner.changed.notify_waiters();
    }

    /// Stops taking keys but lets workers finish: adds are ignored and
    /// delayed keys dropped, while `get` keeps handing out the keys that
    /// wait (and the dirty ones that come back on `done`). Resolves when no
    /// key is waiting or being processed; `get` returns `None` from then on.
    #[doc(alias = "ShutDownWithDrain")]
    pub async fn shut_down_with_drain(&self) {
        {
            let mut state = self.inner.lock();
            if state.shutdown == Shutdown::No {
                state.shutdown = Shutdown::Draining;
            }
            state.delayed.clear();
            state.timers.clear();
        }
        self.inner.changed.notify_waiters();
        loop {
            let changed = self.inner.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            {
                let state = self.inner.lock();
                if state.waiting.is_empty() && state.processing.is_empty() {
                    return;
                }
            }
            changed.await;
        }
    }

    /// Whether [`Queue::shut_down`] or [`Queue::shut_down_with_drain`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.is_shut_down()
    }

    fn add_with(&self, key: K, priority: Priority) {
        let mut state = self.inner.lock();
        if state.shutdown != Shutdown::No {
            return;
        }
        let now = Instant::now();
        let added = state.add(key, priority, now);
        if added && let Some(m) = &self.inner.metrics {
            m.adds.inc();
        }
        self.inner.update_depth(&state);
        drop(state);
        self.inner.changed.notify_waiters();
    }
}

impl<K: Clone + Eq + Hash> Inner<K> {
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // Every critical section leaves the state consistent before it can
        // panic (no user code runs under the lock), so poison is harmless.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_shut_down(&self) -> bool {
        self.lock().shutdown != Shutdown::No
    }

    fn update_depth(&self, state: &State<K>) {
        if let Some(m) = &self.metrics {
            m.depth.set(i64::try_from(state.waiting.len() + state.dirty.len()).unwrap_or(i64::MAX));
        }
    }

    /// Recomputes the unfinished-work gauges; false once the queue is shut
    /// down and nothing is left in flight.
    fn refresh_unfinished_work(&self) -> bool {
        let state = self.lock();
        let now = Instant::now();
        let (mut total, mut longest) = (0.0, 0.0f64);
        for started in state.processing.values() {
            let secs = now.saturating_duration_since(*started).as_secs_f64();
            total += secs;
            longest = longest.max(secs);
        }
        if let Some(m) = &self.metrics {
            m.unfinished_work.set(total);
            m.longest_running_processor.set(longest);
        }
        state.shutdown == Shutdown::No || !state.processing.is_empty()
    }
}

async fn refresh_unfinished_work<K: Clone + Eq + Hash>(queue: Weak<Inner<K>>) {
    let mut tick = tokio::time::interval(UNFINISHED_WORK_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = queue.upgrade() else { return };
        if !inner.refresh_unfinished_work() {
            return;
        }
    }
}

/// Runs `workers` workers on `queue` until it is shut down: each takes a
/// key, awaits `handler(key)`, and gives the key back with
/// [`Queue::done`]. The handler decides what happens next through its own
/// clone of the queue (`forget`, `add_after`, `add_rate_limited`).
///
/// Workers are tokio tasks, so reconciles of different keys run in
/// parallel. A handler that panics is logged, and its key is retried with
/// backoff rather than lost.
pub async fn run_workers<K, F, Fut>(queue: Queue<K>, workers: usize, handler: F)
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
    F: Fn(K) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        let queue = queue.clone();
        let handler = handler.clone();
        set.spawn(async move {
            while let Some(key) = queue.get().await {
                let result = AssertUnwindSafe(handler(key.clone())).catch_unwind().await;
                queue.done(&key);
                if result.is_err() {
                    let delay = queue.add_rate_limited(key.clone());
                    tracing::error!(?key, ?delay, "queue: handler panicked; retrying the key with backoff");
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests;
