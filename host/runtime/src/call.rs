//! The one way into a guest: a [`Pass`] of the host's gate (a call slot and
//! the instance's memory, reserved up front) → take an instance (a pooled
//! one, or a fresh one from the pre-linked template) → arm the deadline →
//! call → flush its output → record its memory → classify what went wrong
//! → give a clean instance back, keeping the reservation of the memory it
//! holds. `reconcile`, `manifest`, `validate` and `mutate` all go through
//! [`Slot::call`], so every call is bounded the same way.

use super::error::CallError;
use super::gate::{Gate, Pass};
use super::guest::{CallScope, State};
use super::limits::{InstancePolicy, Limits};
use super::pool::Pool;
use super::stdio::GuestLog;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wasmtime::Store;

/// The bindings of one world of the contract (the reconciler world, or the
/// one with admission), instantiable from its pre-linked template.
pub(crate) trait World: Sized + Send + 'static {
    /// The pre-linked template.
    type Pre: Send + Sync;
    /// A new instance in `store`.
    fn instantiate(pre: &Self::Pre, store: &mut Store<State>) -> wasmtime::Result<Self>;
}

/// An instance ready for calls, with the store that owns it.
pub(crate) struct Instance<W> {
    store: Store<State>,
    bindings: W,
}

/// What every call of one module shares.
pub(crate) struct Calls {
    pub engine: wasmtime::Engine,
    pub epoch_tick: Duration,
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

    /// Call `f` on an instance, with `scope` as what the guest may read,
    /// under the module's limits and at most `deadline` (`None`: the
    /// module's timeout), admitted by `pass` (at least the module's memory
    /// limit reserved).
    ///
    /// Blocks the calling thread for at most the deadline.
    ///
    /// # Errors
    /// [`CallError`] when the instance cannot be created, or the guest
    /// traps, runs out of time or memory.
    pub fn call<R>(
        &self,
        calls: &Calls,
        pass: &mut Pass,
        scope: Option<CallScope>,
        deadline: Option<Duration>,
        f: impl FnOnce(&W, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let limits = match deadline {
            Some(d) if d < calls.limits.timeout => Limits { timeout: d, ..calls.limits.clone() },
            _ => calls.limits.clone(),
        };
        let scope = scope.map(|mut s| {
            s.deadline = Some(std::time::Instant::now() + limits.timeout);
            s
        });
        let mut instance = match self.pool.as_ref().and_then(Pool::take) {
            Some(mut i) => {
                i.store.data_mut().scope = scope;
                i
            }
            None => self.instantiate(calls, scope, &limits)?,
        };
        arm_deadline(&mut instance.store, calls.epoch_tick, limits.timeout);
        instance.store.data_mut().begin_call();
        // The pass rides with the store during the call, so a guest waiting
        // on the host can lend it back (`State::guest_fetch`).
        instance.store.data_mut().gate = Some((std::mem::replace(pass, Pass::empty()), calls.gate.clone()));
        let result = f(&instance.bindings, &mut instance.store);
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

    fn instantiate(&self, calls: &Calls, scope: Option<CallScope>, limits: &Limits) -> Result<Instance<W>, CallError> {
        let state = State::new(limits.memory, scope, &calls.stdio, calls.uses_wasi);
        let mut store = Store::new(&calls.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(limits.max_output.saturating_add(CROSSING_MARGIN));
        // Instantiation runs guest start functions: bound it like a call.
        arm_deadline(&mut store, calls.epoch_tick, limits.timeout);
        let bindings = W::instantiate(&self.pre, &mut store).map_err(|e| super::module::classify(e, &store, limits))?;
        Ok(Instance { store, bindings })
    }
}

/// Interrupt the store's guest once `timeout` has passed (epoch ticks).
fn arm_deadline(store: &mut Store<State>, tick: Duration, timeout: Duration) {
    let ticks = timeout.as_nanos().div_ceil(tick.as_nanos().max(1)) as u64;
    store.set_epoch_deadline(ticks.max(1) + 1);
    store.epoch_deadline_trap();
}
