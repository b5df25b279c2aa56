//! What puts keys on a controller's queue: informer events mapped to keys
//! (controller-runtime's sources with their event handlers), or a timer.

use super::mapping::Enqueue;
use crate::cache::{Informer, Interest, ObjectEvent};
use crate::queue::Queue;
use std::sync::Arc;
use std::time::Duration;

type MapEvent<K> = dyn Fn(&ObjectEvent) -> Vec<Enqueue<K>> + Send + Sync;
type Keys<K> = dyn Fn() -> Vec<K> + Send + Sync;

/// One source of keys for a controller.
#[doc(alias = "source")]
#[doc(alias = "handler")]
pub struct Trigger<K> {
    kind: Kind<K>,
}

enum Kind<K> {
    Events { informer: Arc<Informer>, interest: Interest, map: Arc<MapEvent<K>> },
    Every { period: Duration, keys: Arc<Keys<K>> },
    Channel { rx: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<K>>> },
}

impl<K: super::Key> Trigger<K> {
    /// Every event of `informer`, through `map` (which also filters: an
    /// empty answer queues nothing). The informer's current objects are
    /// replayed when the controller starts, as `initial` events.
    pub fn events(
        informer: Arc<Informer>,
        map: impl Fn(&ObjectEvent) -> Vec<Enqueue<K>> + Send + Sync + 'static,
    ) -> Trigger<K> {
        Trigger::events_of(informer, Interest::all(), map)
    }

    /// As [`Trigger::events`], but only the events of objects `interest`
    /// admits: the informer routes each event to the controllers that can
    /// want it, so sharing an informer with many controllers costs each
    /// event nothing per controller that cannot.
    pub fn events_of(
        informer: Arc<Informer>,
        interest: Interest,
        map: impl Fn(&ObjectEvent) -> Vec<Enqueue<K>> + Send + Sync + 'static,
    ) -> Trigger<K> {
        Trigger { kind: Kind::Events { informer, interest, map: Arc::new(map) } }
    }

    /// Every `period`, the keys `keys` answers (for what no informer can
    /// watch, such as files).
    pub fn every(period: Duration, keys: impl Fn() -> Vec<K> + Send + Sync + 'static) -> Trigger<K> {
        Trigger { kind: Kind::Every { period, keys: Arc::new(keys) } }
    }

    /// Keys sent on a channel (work that finished elsewhere: a download, a
    /// compile, a rollback notice). Keys sent while the controller does not
    /// run wait for its next run.
    pub fn channel(rx: tokio::sync::mpsc::UnboundedReceiver<K>) -> Trigger<K> {
        Trigger { kind: Kind::Channel { rx: Arc::new(tokio::sync::Mutex::new(rx)) } }
    }

    /// The informer it listens to, if any.
    pub fn informer(&self) -> Option<&Arc<Informer>> {
        match &self.kind {
            Kind::Events { informer, .. } => Some(informer),
            Kind::Every { .. } | Kind::Channel { .. } => None,
        }
    }

    pub(super) fn spawn(&self, queue: &Queue<K>, tasks: &mut tokio::task::JoinSet<()>) {
        let queue = queue.clone();
        match &self.kind {
            Kind::Events { informer, interest, map } => {
                let mut rx = informer.subscribe_to(interest.clone());
                let map = map.clone();
                tasks.spawn(async move {
                    while let Some(event) = rx.recv().await {
                        for e in map(&event) {
                            match e {
                                Enqueue::Now(k) => queue.add(k),
                                Enqueue::Initial(k) => queue.add_low_priority(k),
                            }
                        }
                    }
                });
            }
            Kind::Channel { rx } => {
                let rx = rx.clone();
                tasks.spawn(async move {
                    let mut rx = rx.lock().await;
                    while let Some(k) = rx.recv().await {
                        queue.add(k);
                    }
                });
            }
            Kind::Every { period, keys } => {
                let (period, keys) = (*period, keys.clone());
                tasks.spawn(async move {
                    let mut tick = tokio::time::interval(period);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tick.tick().await;
                        for k in keys() {
                            queue.add(k);
                        }
                    }
                });
            }
        }
    }
}
