//! The queue's bookkeeping under its lock: what waits, what is in flight,
//! what was added while in flight, the delayed adds and the token buckets.
//! No user code runs here.

use super::*;

/// golang.org/x/time/rate's limiter as client-go's `BucketRateLimiter` uses
/// it: every retry reserves a token, and waits as long as the bucket needs
/// to refill that far (reservations may run the balance negative).
#[derive(Debug)]
pub(super) struct TokenBucket {
    pub(super) qps: f64,
    pub(super) burst: f64,
    pub(super) tokens: f64,
    pub(super) last: Instant,
}

impl TokenBucket {
    pub(super) fn new(qps: f64, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket { qps, burst, tokens: burst, last: Instant::now() }
    }

    /// Take one token; how long until it is really available.
    pub(super) fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-self.tokens / self.qps) }
    }
}

/// One token of `bucket` (if there is one): how long to wait for it.
pub(super) fn reserve(bucket: Option<&Mutex<TokenBucket>>) -> Duration {
    bucket.map_or(Duration::ZERO, |b| b.lock().unwrap_or_else(PoisonError::into_inner).reserve(Instant::now()))
}

/// A key's priority; the derived order is the serving order's reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Priority {
    Low,
    Normal,
}

/// A key that waits to be handed out.
pub(super) struct Waiting {
    /// When it was added (first add since it last left the queue).
    pub(super) since: Instant,
    pub(super) priority: Priority,
    /// Matches the one live entry of this key in `normal` or `low`; entries
    /// with another number are stale (left behind by a promotion) and skipped.
    pub(super) seq: u64,
}

/// A key added while it was being processed.
pub(super) struct Dirty {
    pub(super) since: Instant,
    pub(super) priority: Priority,
}

/// A delayed add, ordered for a min-heap on (deadline, seq).
pub(super) struct Timer<K> {
    pub(super) at: Instant,
    pub(super) seq: u64,
    pub(super) key: K,
}

impl<K> PartialEq for Timer<K> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<K> Eq for Timer<K> {}
impl<K> PartialOrd for Timer<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Timer<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, the earliest deadline must be on top.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Shutdown {
    No,
    /// No more adds; waiting keys are still handed out.
    Draining,
    /// No more adds, nothing handed out.
    Now,
}

pub(super) struct State<K> {
    pub(super) normal: VecDeque<(K, u64)>,
    pub(super) low: VecDeque<(K, u64)>,
    pub(super) waiting: HashMap<K, Waiting>,
    /// Keys handed out and not yet done, with the time they were handed out.
    pub(super) processing: HashMap<K, Instant>,
    pub(super) dirty: HashMap<K, Dirty>,
    /// The one pending delayed add of each key: (deadline, seq of its timer).
    pub(super) delayed: HashMap<K, (Instant, u64)>,
    pub(super) timers: BinaryHeap<Timer<K>>,
    pub(super) failures: HashMap<K, u32>,
    pub(super) seq: u64,
    pub(super) shutdown: Shutdown,
}

impl<K: Clone + Eq + Hash> State<K> {
    pub(super) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Adds under the lock; true if the key was newly added (waiting or
    /// dirty), which is what `workqueue_adds_total` counts.
    pub(super) fn add(&mut self, key: K, priority: Priority, now: Instant) -> bool {
        if self.processing.contains_key(&key) {
            return match self.dirty.entry(key) {
                Entry::Occupied(mut e) => {
                    let dirty = e.get_mut();
                    dirty.priority = dirty.priority.max(priority);
                    false
                }
                Entry::Vacant(e) => {
                    e.insert(Dirty { since: now, priority });
                    true
                }
            };
        }
        if let Some(waiting) = self.waiting.get(&key) {
            if priority > waiting.priority {
                // Promotion: a fresh entry in the normal queue; the low one
                // goes stale.
                let seq = self.next_seq();
                if let Some(waiting) = self.waiting.get_mut(&key) {
                    waiting.priority = priority;
                    waiting.seq = seq;
                }
                self.normal.push_back((key, seq));
            }
            return false;
        }
        self.enqueue(key, now, priority);
        true
    }

    pub(super) fn enqueue(&mut self, key: K, since: Instant, priority: Priority) {
        let seq = self.next_seq();
        self.waiting.insert(key.clone(), Waiting { since, priority, seq });
        match priority {
            Priority::Normal => self.normal.push_back((key, seq)),
            Priority::Low => self.low.push_back((key, seq)),
        }
    }

    /// Takes the next waiting key, normal ones first.
    pub(super) fn pop(&mut self) -> Option<(K, Instant)> {
        for queue in [Priority::Normal, Priority::Low] {
            loop {
                let entry = match queue {
                    Priority::Normal => self.normal.pop_front(),
                    Priority::Low => self.low.pop_front(),
                };
                let Some((key, seq)) = entry else { break };
                if self.waiting.get(&key).is_some_and(|w| w.seq == seq)
                    && let Some(waiting) = self.waiting.remove(&key)
                {
                    return Some((key, waiting.since));
                }
            }
        }
        None
    }

    /// Moves every delayed add whose deadline has passed into the queue.
    pub(super) fn fire_due_timers(&mut self, now: Instant, metrics: &Option<metrics::Workqueue>) {
        while self.timers.peek().is_some_and(|t| t.at <= now) {
            let Some(timer) = self.timers.pop() else { break };
            if self.delayed.get(&timer.key) != Some(&(timer.at, timer.seq)) {
                continue; // superseded by an earlier deadline
            }
            self.delayed.remove(&timer.key);
            if self.add(timer.key, Priority::Normal, timer.at)
                && let Some(m) = metrics
            {
                m.adds.inc();
            }
        }
    }
}

/// `base × 2^exponent`, capped at `max` (and free of overflow for any exponent).
pub(super) fn backoff(base: Duration, max: Duration, exponent: u32) -> Duration {
    let factor = 2f64.powi(i32::try_from(exponent).unwrap_or(i32::MAX));
    Duration::try_from_secs_f64(base.as_secs_f64() * factor).map_or(max, |d| d.min(max))
}
