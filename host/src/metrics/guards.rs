//! Guards that keep a gauge right for as long as they live (busy workers,
//! requests in flight), and the workqueue's handles.

use prometheus::{Gauge, Histogram, IntCounter, IntGauge};

/// Counts one busy worker in `controller_runtime_active_workers` while it lives.
#[derive(Debug)]
pub struct ActiveWorker {
    pub(super) gauge: IntGauge,
}

impl Drop for ActiveWorker {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Counts one admission request in
/// `controller_runtime_webhook_requests_in_flight` while it lives.
#[derive(Debug)]
pub struct InFlight {
    pub(super) gauge: IntGauge,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// One queue's `workqueue_*` series, recorded by [`crate::queue::Queue`]
/// itself. Cheap to clone.
#[doc(alias = "MetricsProvider")]
#[derive(Clone)]
pub struct Workqueue {
    pub(crate) depth: IntGauge,
    pub(crate) adds: IntCounter,
    pub(crate) queue_duration: Histogram,
    pub(crate) work_duration: Histogram,
    pub(crate) retries: IntCounter,
    pub(crate) unfinished_work: Gauge,
    pub(crate) longest_running_processor: Gauge,
}

impl std::fmt::Debug for Workqueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workqueue").finish_non_exhaustive()
    }
}
