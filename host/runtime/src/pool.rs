//! A bounded pool of reused instances for the `pooled` instance policy.

use std::sync::Mutex;

/// Idle instances of one module (of its reconciler world, or of its
/// admission world). Instances are taken for one call and given back only if
/// the call did not trap, so a pooled instance is always one whose last call
/// returned normally.
pub(crate) struct Pool<Instance> {
    idle: Mutex<Vec<Instance>>,
    capacity: usize,
}

impl<Instance> Pool<Instance> {
    pub fn new(capacity: usize) -> Pool<Instance> {
        Pool { idle: Mutex::new(Vec::with_capacity(capacity)), capacity: capacity.max(1) }
    }

    /// An idle instance, or `None` if the caller must create one.
    pub fn take(&self) -> Option<Instance> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    /// Return an instance after a clean call; dropped if the pool is full.
    pub fn give(&self, instance: Instance) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.capacity {
            idle.push(instance);
        }
    }
}
