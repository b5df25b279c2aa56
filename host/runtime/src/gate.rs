//! The host's share of guest memory and call slots, across every module.
//!
//! Per-call limits bound one call; they do not bound the product. Sixty-four
//! workers of one module, each allowed 400 MiB, would take 25 GiB: the
//! replica dies, its Leases move, and the next replica dies the same way.
//! So every guest call — reconcile, validate, mutate, the smoke call of a
//! load — is first admitted here ([`Gate::admit`]), and holds its
//! [`Pass`] until it returns:
//!
//! - **a call slot** out of `calls`, however many modules and workers
//!   there are;
//! - **its instance's whole memory limit**, reserved up front out of
//!   `memory`: an instance may grow to its limit during the call, and
//!   memory cannot be taken back from a guest mid-call.
//!
//! An idle pooled instance keeps a reservation of the memory it has grown
//! to (it stays mapped). When a call cannot be admitted for memory, idle
//! pooled instances of every module are dropped first ([`Idle`]); then the
//! call waits — asynchronously for the host's workers, blocking for a
//! caller already on a blocking thread. Waiting loses nothing: the key
//! stays queued, the API server's webhook timeout bounds an admission
//! request.
//!
//! Memory is **not first come, first served**: a call whose memory fits
//! goes in even while a larger one waits. A queue would hand every
//! released MiB to the large request at its head, so one tenant asking
//! 400 MiB a call would make a neighbour asking 64 MiB wait behind each of
//! its calls (measured: the neighbour's p99 forty times its calm p99). The
//! tenant asking more waits longer; that is its share.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

/// How often a call waiting for memory looks again without being woken
/// (an idle instance's reservation dropped outside the gate wakes no one).
const RECHECK: Duration = Duration::from_millis(100);

/// Memory is reserved in MiB (a semaphore's permits are counted in `u32`).
const MIB: u64 = 1 << 20;

/// The host-wide limits. `Default`: no limit (tools, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateLimits {
    /// Bytes of guest linear memory reserved at once, across every
    /// instance (calls in flight at their limit, idle pooled instances at
    /// their size).
    pub memory: u64,
    /// Guest calls in flight at once.
    pub calls: usize,
}

impl Default for GateLimits {
    fn default() -> Self {
        GateLimits { memory: u64::MAX, calls: usize::MAX }
    }
}

/// Something holding idle instances (a pool) that can give their memory
/// back.
pub(crate) trait Idle: Send + Sync {
    /// Drop every idle instance.
    fn drain(&self);
}

/// The host's gate. Cheap to clone: clones share the budget.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

struct Inner {
    limits: GateLimits,
    /// Permits are MiB; `None` when memory is not limited.
    memory: Option<Arc<Semaphore>>,
    /// `None` when calls are not limited.
    calls: Option<Arc<Semaphore>>,
    /// Total MiB, for the usage report.
    memory_mib: u32,
    pools: Mutex<Vec<Weak<dyn Idle>>>,
    /// Woken when a pass gives memory back.
    released: Arc<Notify>,
    /// Calls coming back from egress, waiting for a slot.
    returning: Arc<Returning>,
}

/// Calls coming back from egress ([`Gate::take_back`]) waiting for a call
/// slot. **A freed slot goes to them before the semaphore's queue of new
/// arrivals**: the semaphore hands a released permit to its first waiter,
/// so under load a returning call polling for one would never get it and
/// would wait out its deadline.
#[derive(Debug, Default)]
struct Returning {
    waiters: Mutex<VecDeque<oneshot::Sender<OwnedSemaphorePermit>>>,
}

impl Returning {
    /// Give a freed slot to the first returning call still waiting, else
    /// back to the semaphore.
    fn hand(&self, permit: OwnedSemaphorePermit) {
        let mut permit = permit;
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(waiter) = waiters.pop_front() {
            match waiter.send(permit) {
                Ok(()) => return,
                Err(back) => permit = back,
            }
        }
    }

    /// Wait in line for a freed slot.
    fn wait(&self) -> oneshot::Receiver<OwnedSemaphorePermit> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().unwrap_or_else(|p| p.into_inner()).push_back(tx);
        rx
    }
}

/// What one call holds while it runs: its slot and its memory. Dropped,
/// both go back.
#[derive(Debug)]
pub struct Pass {
    memory: Option<OwnedSemaphorePermit>,
    call: Option<OwnedSemaphorePermit>,
    /// The bytes this pass reserved (what the call may grow to).
    reserved: u64,
    /// Told when the pass gives its memory back.
    released: Option<Arc<Notify>>,
    /// Where a freed call slot goes first.
    returning: Option<Arc<Returning>>,
}

impl Drop for Pass {
    fn drop(&mut self) {
        // Give back first, then wake the waiters to look again.
        let gave = self.memory.take().is_some();
        self.give_slot();
        if let (true, Some(released)) = (gave, &self.released) {
            released.notify_waiters();
        }
    }
}

/// How much of the gate is in use, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Bytes reserved now (calls in flight and idle pooled instances).
    pub memory_reserved: u64,
    /// Bytes that may be reserved (`u64::MAX`: no limit).
    pub memory_limit: u64,
    /// Calls in flight.
    pub calls_in_flight: usize,
    /// Calls that may be in flight (`usize::MAX`: no limit).
    pub calls_limit: usize,
}

impl Gate {
    /// A gate with these limits.
    pub fn new(limits: GateLimits) -> Gate {
        let memory_mib = u32::try_from(limits.memory / MIB).unwrap_or(u32::MAX).min(Semaphore::MAX_PERMITS as u32);
        let limited_memory = limits.memory != u64::MAX;
        let limited_calls = limits.calls != usize::MAX;
        Gate {
            inner: Arc::new(Inner {
                limits,
                memory: limited_memory.then(|| Arc::new(Semaphore::new(memory_mib.max(1) as usize))),
                calls: limited_calls.then(|| Arc::new(Semaphore::new(limits.calls.clamp(1, Semaphore::MAX_PERMITS)))),
                memory_mib: memory_mib.max(1),
                pools: Mutex::new(Vec::new()),
                released: Arc::new(Notify::new()),
                returning: Arc::default(),
            }),
        }
    }

    /// The limits.
    pub fn limits(&self) -> GateLimits {
        self.inner.limits
    }

    /// Whether a call reserving `memory` bytes would be admitted now.
    pub fn would_admit(&self, memory: u64) -> bool {
        let mib = self.mib(memory);
        self.inner.memory.as_ref().is_none_or(|m| m.available_permits() >= mib as usize)
            && self.inner.calls.as_ref().is_none_or(|c| c.available_permits() > 0)
    }

    /// Admit a call that may grow its instance to `memory` bytes: waits for
    /// a call slot and for the memory (dropping idle pooled instances
    /// first when memory is short). A call asking more than the whole
    /// budget reserves the whole budget.
    pub async fn admit(&self, memory: u64) -> Pass {
        let mib = self.mib(memory);
        // The call slot first: a call waiting for memory holds no memory.
        let call = match &self.inner.calls {
            Some(c) => Some(c.clone().acquire_owned().await.expect("the gate's semaphores are never closed")),
            None => None,
        };
        let memory_permit = match &self.inner.memory {
            None => None,
            Some(m) => Some(self.memory(m, mib).await),
        };
        Pass {
            memory: memory_permit,
            call,
            reserved: u64::from(mib) * MIB,
            released: Some(self.inner.released.clone()),
            returning: Some(self.inner.returning.clone()),
        }
    }

    /// `mib` of memory as soon as that much is free, whoever else waits
    /// (see the module's doc): idle pooled instances are dropped first.
    async fn memory(&self, m: &Arc<Semaphore>, mib: u32) -> OwnedSemaphorePermit {
        loop {
            // Listening before looking: a pass given back in between wakes us.
            let released = self.inner.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Ok(p) = m.clone().try_acquire_many_owned(mib) {
                return p;
            }
            self.drain_idle();
            if let Ok(p) = m.clone().try_acquire_many_owned(mib) {
                return p;
            }
            if tokio::runtime::Handle::try_current().is_ok() {
                let _ = tokio::time::timeout(RECHECK, released).await;
            } else {
                released.await;
            }
        }
    }

    /// Take back what a pass lent ([`Pass::lend`]), waiting at most
    /// `within` (what is left of the call's deadline) and never for ever.
    /// The call slot is served before new arrivals: a call that waits for
    /// one stands in the gate's line of returning calls, which a freed
    /// slot reaches before the semaphore's queue ([`Returning`]). What
    /// cannot be had by then stays given back, and the pass then
    /// reserves less — the caller caps the guest's growth at
    /// [`Pass::reserved`], so the host's budget always holds.
    ///
    /// Awaited by the guest's call: a tokio timer between tries where there
    /// is a runtime, else a sleep on this thread.
    pub(crate) async fn take_back(&self, pass: &mut Pass, lent: Lent, within: Duration) {
        let until = std::time::Instant::now() + within;
        let wait = || async {
            let pause = Duration::from_millis(5).min(until.saturating_duration_since(std::time::Instant::now()));
            if tokio::runtime::Handle::try_current().is_ok() {
                tokio::time::sleep(pause).await;
            } else {
                std::thread::sleep(pause);
            }
        };
        if lent.slot
            && let Some(calls) = &self.inner.calls
        {
            pass.call = match calls.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    // In line ahead of new arrivals; a slot freed between
                    // the try and the line is taken as well.
                    let mut line = self.inner.returning.wait();
                    match calls.clone().try_acquire_owned() {
                        Ok(p) => Some(p),
                        Err(_) if tokio::runtime::Handle::try_current().is_ok() => {
                            let left = until.saturating_duration_since(std::time::Instant::now());
                            tokio::time::timeout(left, &mut line).await.ok().and_then(Result::ok)
                        }
                        Err(_) => loop {
                            match line.try_recv() {
                                Ok(p) => break Some(p),
                                Err(oneshot::error::TryRecvError::Closed) => break None,
                                Err(oneshot::error::TryRecvError::Empty) => {
                                    if std::time::Instant::now() >= until {
                                        break None;
                                    }
                                    wait().await;
                                }
                            }
                        },
                    }
                }
            };
        }
        if lent.mib > 0
            && let Some(memory) = &self.inner.memory
        {
            loop {
                if let Ok(p) = memory.clone().try_acquire_many_owned(lent.mib) {
                    match pass.memory.as_mut() {
                        Some(held) => held.merge(p),
                        None => pass.memory = Some(p),
                    }
                    pass.reserved = pass.reserved.saturating_add(u64::from(lent.mib) * MIB);
                    break;
                }
                if std::time::Instant::now() >= until {
                    break;
                }
                wait().await;
            }
        }
    }

    /// [`Gate::admit`] on a thread that may block (a blocking-pool thread,
    /// a tool): waits there.
    pub fn admit_blocking(&self, memory: u64) -> Pass {
        futures::executor::block_on(self.admit(memory))
    }

    /// How much is in use.
    pub fn usage(&self) -> Usage {
        let inner = &self.inner;
        let memory_reserved = inner
            .memory
            .as_ref()
            .map_or(0, |m| u64::from(inner.memory_mib).saturating_sub(m.available_permits() as u64) * MIB);
        let calls_in_flight =
            inner.calls.as_ref().map_or(0, |c| inner.limits.calls.saturating_sub(c.available_permits()));
        Usage { memory_reserved, memory_limit: inner.limits.memory, calls_in_flight, calls_limit: inner.limits.calls }
    }

    /// Register a pool whose idle instances are dropped when memory is short.
    pub(crate) fn register(&self, pool: Weak<dyn Idle>) {
        let mut pools = self.inner.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools.retain(|p| p.strong_count() > 0);
        pools.push(pool);
    }

    /// Drop the idle instances of every pool.
    fn drain_idle(&self) {
        let pools: Vec<Arc<dyn Idle>> =
            self.inner.pools.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect();
        for pool in pools {
            pool.drain();
        }
    }

    /// `memory` in MiB, rounded up, at most the whole budget.
    fn mib(&self, memory: u64) -> u32 {
        let mib = memory.div_ceil(MIB).max(1);
        u32::try_from(mib).unwrap_or(u32::MAX).min(self.inner.memory_mib)
    }
}

/// What a call gave back while it waits on the host ([`Pass::lend`]), to
/// take back when it goes on ([`Gate::take_back`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lent {
    /// The call slot.
    slot: bool,
    /// MiB of memory beyond what the instance has grown to.
    mib: u32,
}

impl Pass {
    /// The bytes this call may grow its instance to.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// A pass holding nothing (where a pass is moved out for a while).
    pub(crate) fn empty() -> Pass {
        Pass { memory: None, call: None, reserved: 0, released: None, returning: None }
    }

    /// Give the call slot back: to a call returning from egress first.
    fn give_slot(&mut self) -> bool {
        let Some(slot) = self.call.take() else { return false };
        if let Some(returning) = &self.returning {
            returning.hand(slot);
        }
        true
    }

    /// While the guest waits on the host (an egress call), give back its
    /// call slot and the memory reserved beyond the `used` bytes its
    /// instance has grown to: a waiting guest runs nothing and cannot
    /// grow, so a Reconciler waiting on a slow API does not hold the
    /// host's gate against its neighbours.
    pub(crate) fn lend(&mut self, used: u64) -> Lent {
        let slot = self.give_slot();
        let mut mib = 0;
        if let Some(permit) = self.memory.as_mut() {
            let keep = usize::try_from(used.div_ceil(MIB).max(1)).unwrap_or(usize::MAX).min(permit.num_permits());
            let spare = permit.num_permits() - keep;
            if spare > 0 && permit.split(spare).is_some() {
                mib = u32::try_from(spare).unwrap_or(u32::MAX);
                self.reserved = self.reserved.saturating_sub(u64::from(mib) * MIB);
            }
        }
        if mib > 0
            && let Some(released) = &self.released
        {
            released.notify_waiters();
        }
        Lent { slot, mib }
    }

    /// Keep `bytes` of this pass's memory reservation for an instance that
    /// stays (a pooled one going back idle); the rest goes back with the
    /// pass. `None` when memory is not limited.
    pub(crate) fn keep(&mut self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let permit = self.memory.as_mut()?;
        let mib = usize::try_from(bytes.div_ceil(MIB).max(1)).unwrap_or(usize::MAX).min(permit.num_permits());
        if mib >= permit.num_permits() { self.memory.take() } else { permit.split(mib) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn memory_should_be_reserved_up_front_and_given_back_with_the_pass() {
        let gate = Gate::new(GateLimits { memory: 100 * MIB, calls: 10 });
        let a = gate.admit_blocking(60 * MIB);
        assert_eq!(gate.usage().memory_reserved, 60 * MIB);
        assert!(!gate.would_admit(60 * MIB), "60 + 60 > 100");
        assert!(gate.would_admit(40 * MIB));
        drop(a);
        assert!(gate.would_admit(60 * MIB));
        assert_eq!(
            gate.usage(),
            Usage { memory_reserved: 0, memory_limit: 100 * MIB, calls_in_flight: 0, calls_limit: 10 }
        );
    }

    #[tokio::test]
    async fn a_call_over_the_limit_should_wait_until_memory_comes_back() {
        let gate = Gate::new(GateLimits { memory: 100 * MIB, calls: 10 });
        let first = gate.admit(80 * MIB).await;
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.admit(80 * MIB).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "admitted beyond the budget");
        drop(first);
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.unwrap().unwrap();
        assert_eq!(second.reserved(), 80 * MIB);
    }

    #[tokio::test]
    async fn a_call_whose_memory_fits_should_not_wait_behind_a_larger_one() {
        let gate = Gate::new(GateLimits { memory: 100 * MIB, calls: 10 });
        let running = gate.admit(60 * MIB).await;
        let large = tokio::spawn({
            let gate = gate.clone();
            async move { gate.admit(60 * MIB).await }
        });
        tokio::task::yield_now().await;
        assert!(!large.is_finished(), "admitted beyond the budget");
        let small = tokio::time::timeout(std::time::Duration::from_secs(2), gate.admit(30 * MIB))
            .await
            .expect("a call whose 30 MiB fit waited behind one asking 60 MiB");
        drop((small, running));
        let large = tokio::time::timeout(std::time::Duration::from_secs(5), large).await.unwrap().unwrap();
        assert_eq!(large.reserved(), 60 * MIB);
    }

    #[test]
    fn a_call_waiting_on_the_host_should_lend_its_slot_and_spare_memory_and_take_them_back() {
        let gate = Gate::new(GateLimits { memory: 100 * MIB, calls: 1 });
        let mut waiting = gate.admit_blocking(64 * MIB);
        let lent = waiting.lend(3 * MIB);
        assert_eq!(waiting.reserved(), 3 * MIB);
        assert_eq!(gate.usage().memory_reserved, 3 * MIB);
        assert_eq!(gate.usage().calls_in_flight, 0);
        // A neighbour goes in meanwhile.
        let neighbour = gate.admit_blocking(64 * MIB);
        assert!(!gate.would_admit(64 * MIB));
        // Taking back while the neighbour holds the slot and the memory:
        // bounded, and what could not be had stays given back.
        futures::executor::block_on(gate.take_back(&mut waiting, lent, Duration::from_millis(30)));
        assert_eq!(waiting.reserved(), 3 * MIB, "no memory to take back while the neighbour runs");
        drop((neighbour, waiting));
        let mut again = gate.admit_blocking(64 * MIB);
        let lent = again.lend(MIB);
        futures::executor::block_on(gate.take_back(&mut again, lent, Duration::from_secs(1)));
        assert_eq!(again.reserved(), 64 * MIB, "all taken back when free");
        let usage = Usage { memory_reserved: 64 * MIB, memory_limit: 100 * MIB, calls_in_flight: 1, calls_limit: 1 };
        assert_eq!(gate.usage(), usage);
    }

    #[test]
    fn calls_should_be_capped_whatever_their_memory() {
        let gate = Gate::new(GateLimits { memory: u64::MAX, calls: 2 });
        let (_a, _b) = (gate.admit_blocking(MIB), gate.admit_blocking(MIB));
        assert!(!gate.would_admit(MIB));
        assert_eq!(gate.usage().calls_in_flight, 2);
    }

    #[test]
    fn a_call_asking_more_than_everything_should_get_everything_not_wait_for_ever() {
        let gate = Gate::new(GateLimits { memory: 100 * MIB, calls: 10 });
        assert_eq!(gate.admit_blocking(4096 * MIB).reserved(), 100 * MIB);
    }

    #[test]
    fn idle_pools_should_be_drained_when_memory_is_short() {
        struct Held(Mutex<Option<OwnedSemaphorePermit>>, AtomicUsize);
        impl Idle for Held {
            fn drain(&self) {
                self.1.fetch_add(1, Ordering::Relaxed);
                self.0.lock().unwrap().take();
            }
        }
        let gate = Gate::new(GateLimits { memory: 100 * MIB, calls: 10 });
        let mut pass = gate.admit_blocking(90 * MIB);
        let kept = pass.keep(70 * MIB);
        drop(pass);
        assert_eq!(gate.usage().memory_reserved, 70 * MIB, "the idle instance keeps what it grew to");
        let pool = Arc::new(Held(Mutex::new(kept), AtomicUsize::new(0)));
        gate.register(Arc::downgrade(&(pool.clone() as Arc<dyn Idle>)));
        let _big = gate.admit_blocking(50 * MIB);
        assert_eq!(pool.1.load(Ordering::Relaxed), 1, "drained once");
        assert_eq!(gate.usage().memory_reserved, 50 * MIB);
    }

    #[test]
    fn no_limits_should_admit_everything() {
        let gate = Gate::new(GateLimits::default());
        let passes: Vec<Pass> = (0..1000).map(|_| gate.admit_blocking(512 * MIB)).collect();
        assert_eq!(passes.len(), 1000);
        assert_eq!(gate.usage().memory_reserved, 0);
    }

    /// Under load a call coming back from egress gets its slot before calls
    /// that arrived while it waited: otherwise every freed slot goes to the
    /// queue of new arrivals and the returning call waits out its deadline.
    #[tokio::test]
    async fn a_call_coming_back_from_egress_should_get_its_slot_before_new_arrivals() {
        let gate = Gate::new(GateLimits { memory: u64::MAX, calls: 1 });
        let mut waiting = gate.admit(MIB).await;
        let lent = waiting.lend(MIB);
        let neighbour = gate.admit(MIB).await;
        let arrival = tokio::spawn({
            let gate = gate.clone();
            async move { gate.admit(MIB).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!arrival.is_finished(), "admitted beyond the slots");
        let back = tokio::spawn({
            let gate = gate.clone();
            async move {
                gate.take_back(&mut waiting, lent, Duration::from_secs(2)).await;
                waiting
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(neighbour);
        let waiting = tokio::time::timeout(Duration::from_secs(5), back).await.unwrap().unwrap();
        assert!(waiting.call.is_some(), "the returning call did not get its slot back: a new arrival took it");
        assert!(!arrival.is_finished(), "the new arrival went before the returning call");
        drop(waiting);
        let admitted = tokio::time::timeout(Duration::from_secs(2), arrival).await.unwrap().unwrap();
        assert!(admitted.call.is_some());
    }
}
