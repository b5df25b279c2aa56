//! A bounded pool of reused instances for the `pooled` instance policy.

use super::gate::{Gate, Idle};
use std::sync::{Arc, Mutex};
use tokio::sync::OwnedSemaphorePermit;

/// Idle instances of one module (of its reconciler world, or of its
/// admission world). Instances are taken for one call and given back only if
/// the call did not trap, so a pooled instance is always one whose last call
/// returned normally. Each idle instance keeps the host gate's reservation
/// of the memory it has grown to; the gate drops them all when memory is
/// short.
pub(crate) struct Pool<Instance> {
    shared: Arc<Shared<Instance>>,
}

struct Shared<Instance> {
    idle: Mutex<Vec<(Instance, Option<OwnedSemaphorePermit>)>>,
    capacity: usize,
}

impl<Instance: Send + 'static> Pool<Instance> {
    pub fn new(capacity: usize, gate: &Gate) -> Pool<Instance> {
        let shared = Arc::new(Shared { idle: Mutex::new(Vec::with_capacity(capacity)), capacity: capacity.max(1) });
        let weak = Arc::downgrade(&shared);
        gate.register(weak);
        Pool { shared }
    }

    /// An idle instance, or `None` if the caller must create one. Its
    /// reservation goes back: the call's own pass covers it now.
    pub fn take(&self) -> Option<Instance> {
        self.shared.lock().pop().map(|(instance, _kept)| instance)
    }

    /// Return an instance after a clean call, with the reservation of the
    /// memory it holds; dropped if the pool is full.
    pub fn give(&self, instance: Instance, kept: Option<OwnedSemaphorePermit>) {
        let mut idle = self.shared.lock();
        if idle.len() < self.shared.capacity {
            idle.push((instance, kept));
        }
    }
}

impl<Instance> Shared<Instance> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Instance, Option<OwnedSemaphorePermit>)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<Instance: Send> Idle for Shared<Instance> {
    fn drain(&self) {
        let drained = std::mem::take(&mut *self.lock());
        drop(drained);
    }
}
