//! The one way into a guest: a [`Pass`] of the host's gate (a call slot and
//! the instance's memory, reserved up front) → take an instance (a pooled
//! one, or a fresh one from the pre-linked template) → arm the deadline →
//! call → flush its output → record its memory → classify what went wrong
//! → give a clean instance back, keeping the reservation of the memory it
//! holds. `reconcile`, `manifest`, `validate`, `mutate` and `convert` all go
//! through [`Slot::begin`] and [`Slot::finish`], so every call is bounded the
//! same way.
//!
//! Calls are async (wasmtime's fibers): a guest runs on the task that
//! awaits it and yields to the executor at every epoch tick, so a long
//! guest holds a worker for one tick at a time, and a guest waiting on the
//! host (an outbound HTTP call) holds no thread at all. The deadline is
//! checked at each tick: past it, the guest traps as it did when calls were
//! blocking. Callers without an executor use [`block_on`].

use super::error::CallError;
use super::gate::{Gate, Pass};
use super::guest::{CallScope, State};
use super::limits::{InstancePolicy, Limits};
use super::pool::Pool;
use super::stdio::GuestLog;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use wasmtime::{Store, UpdateDeadline};

/// The bindings of one world of the contract (the reconciler world, or the
/// one with admission), instantiable from its pre-linked template.
pub(crate) trait World: Sized + Send + 'static {
    /// The pre-linked template.
    type Pre: Send + Sync;
    /// A new instance in `store`.
    fn instantiate(pre: &Self::Pre, store: &mut Store<State>) -> impl Future<Output = wasmtime::Result<Self>> + Send;
}

/// An instance ready for calls, with the store that owns it.
pub(crate) struct Instance<W> {
    store: Store<State>,
    bindings: W,
}

/// A call under way ([`Slot::begin`]): its instance, armed with the
/// call's deadline, holding the call's pass. Dropped unfinished (the call
/// cancelled), the instance and the pass go with it.
pub(crate) struct Running<W> {
    instance: Instance<W>,
    limits: Limits,
}

impl<W> Running<W> {
    /// The bindings to call, and their store.
    pub fn parts(&mut self) -> (&W, &mut Store<State>) {
        (&self.instance.bindings, &mut self.instance.store)
    }
}

/// What every call of one module shares.
pub(crate) struct Calls {
    pub engine: wasmtime::Engine,
    pub limits: Limits,
    pub uses_wasi: bool,
    /// Where the guests' WASI stdout and stderr go (rate-limited).
    pub stdio: Arc<GuestLog>,
    /// The most linear memory one instance has had, in bytes.
    pub peak_memory: AtomicU64,
    /// The host's share of memory and call slots.
    pub gate: Gate,
}

/// Data a guest may hand the host in one crossing beyond its outcome cap
/// (the record around the outcome; a log line, the arguments of a read):
/// wasmtime's hostcall fuel is set to the cap plus this, so an outcome over
/// the cap is refused while it is lifted, before the host holds it.
const CROSSING_MARGIN: usize = 64 << 10;

/// The template and the idle instances of one world of a module.
pub(crate) struct Slot<W: World> {
    pre: W::Pre,
    pool: Option<Pool<Instance<W>>>,
}

impl<W: World> Slot<W> {
    /// A slot pooling instances when the module's policy says so.
    pub fn new(pre: W::Pre, limits: &Limits, gate: &Gate) -> Slot<W> {
        let pool = (limits.instance_policy == InstancePolicy::Pooled).then(|| Pool::new(limits.pool_size, gate));
        Slot { pre, pool }
    }

    /// Begin a call: an instance with `scope` as what the guest may read,
    /// under the module's limits and at most `deadline` (`None`: the
    /// module's timeout), admitted by `pass` (at least the module's memory
    /// limit reserved), which rides with the instance until
    /// [`Slot::finish`].
    ///
    /// # Errors
    /// [`CallError`] when the instance cannot be created (its start
    /// functions trap or run out of time or memory).
    pub async fn begin(
        &self,
        calls: &Calls,
        pass: &mut Pass,
        scope: Option<CallScope>,
        deadline: Option<Duration>,
    ) -> Result<Running<W>, CallError> {
        let limits = match deadline {
            Some(d) if d < calls.limits.timeout => Limits { timeout: d, ..calls.limits.clone() },
            _ => calls.limits.clone(),
        };
        let ends = Instant::now() + limits.timeout;
        let scope = scope.map(|mut s| {
            s.deadline = Some(ends);
            s
        });
        let mut instance = match self.pool.as_ref().and_then(Pool::take) {
            Some(mut i) => {
                i.store.data_mut().scope = scope;
                i
            }
            None => self.instantiate(calls, scope, &limits, ends).await?,
        };
        arm_deadline(&mut instance.store, ends);
        instance.store.data_mut().begin_call();
        // The pass rides with the store during the call, so a guest waiting
        // on the host can lend it back (`State::guest_fetch`).
        instance.store.data_mut().gate = Some((std::mem::replace(pass, Pass::empty()), calls.gate.clone()));
        Ok(Running { instance, limits })
    }

    /// End a call begun with [`Slot::begin`]: the pass back in `pass`, the
    /// output flushed, the memory recorded, `result` classified, and a
    /// clean instance back in the pool.
    ///
    /// # Errors
    /// [`CallError`] when the guest trapped, ran out of time or memory.
    pub fn finish<R>(
        &self,
        calls: &Calls,
        pass: &mut Pass,
        running: Running<W>,
        result: wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let Running { mut instance, limits } = running;
        if let Some((held, _)) = instance.store.data_mut().gate.take() {
            *pass = held;
        }
        // A cap lowered while lending ends with the call.
        instance.store.data_mut().limiter.memory = limits.memory;
        if let Some(wasi) = instance.store.data_mut().wasi.as_mut() {
            wasi.flush();
        }
        calls.peak_memory.fetch_max(instance.store.data().limiter.used, Ordering::Relaxed);
        let result = result.map_err(|e| super::module::classify(e, &instance.store, &limits));
        // A trapped instance may be in any state: only clean ones go back,
        // keeping the reservation of what they hold.
        if let (Some(pool), Ok(_)) = (&self.pool, &result) {
            instance.store.data_mut().scope = None;
            let kept = pass.keep(instance.store.data().limiter.used);
            pool.give(instance, kept);
        }
        result
    }

    async fn instantiate(
        &self,
        calls: &Calls,
        scope: Option<CallScope>,
        limits: &Limits,
        ends: Instant,
    ) -> Result<Instance<W>, CallError> {
        let state = State::new(limits.memory, scope, &calls.stdio, calls.uses_wasi);
        let mut store = Store::new(&calls.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(limits.max_output.saturating_add(CROSSING_MARGIN));
        // Instantiation runs guest start functions: bound it like a call.
        arm_deadline(&mut store, ends);
        let bindings =
            W::instantiate(&self.pre, &mut store).await.map_err(|e| super::module::classify(e, &store, limits))?;
        Ok(Instance { store, bindings })
    }
}

/// At every epoch tick, yield to the executor; past `ends`, interrupt the
/// guest (a timeout).
fn arm_deadline(store: &mut Store<State>, ends: Instant) {
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if Instant::now() >= ends { UpdateDeadline::Interrupt } else { UpdateDeadline::Yield(1) })
    });
}

/// Run a guest call to its end on this thread, for callers that are not
/// async (tools, tests, webhooks on their own threads). Polled here, with a
/// tokio runtime entered (the caller's, or wasmtime-wasi's ambient one) so
/// WASI's clocks have their timers; on a worker of a multi-threaded
/// runtime, in place (its other tasks move to another thread meanwhile).
pub fn block_on<F: Future>(f: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| futures::executor::block_on(f))
        }
        Ok(_) => futures::executor::block_on(f),
        Err(_) => wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| futures::executor::block_on(f)),
    }
}
