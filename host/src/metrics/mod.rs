//! Prometheus metrics: controller-runtime's families, plus Operon's own.
//!
//! The names, types, labels and histogram buckets of the
//! `controller_runtime_*`, `workqueue_*` and `leader_election_*` families are
//! those of controller-runtime (and client-go's workqueue), so dashboards and
//! alerts written for Go operators work unchanged. The `operon_*` families
//! describe what only a WebAssembly host has: guest calls, guest failures,
//! module loads.
//!
//! One [`Metrics`] is made per process by the manager and shared as
//! `Arc<Metrics>`. It owns its registry — there is no global one — so tests
//! make their own and see only what they recorded.
//!
//! Recording is done through methods named after what happened
//! ([`Metrics::reconcile_finished`], [`Metrics::guest_failed`], …); the
//! work queue records its own families through a [`Workqueue`] handle that
//! [`Metrics::workqueue`] hands out.

use prometheus::{
    CounterVec, Encoder as _, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder, core::Collector,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The `Content-Type` of [`Metrics::encode`]'s output: Prometheus text
/// format 0.0.4 (not OpenMetrics, so no `# EOF` line is expected or written).
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
    1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Guest calls take microseconds (a reused instance) to a timeout (seconds):
/// 1-2.5-5 steps from 10 µs to 30 s.
const GUEST_CALL_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
];

/// Module loads: a precompiled hit is a millisecond, a Python guest compiles
/// for seconds.
const MODULE_LOAD_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Prometheus' default buckets (`prometheus.DefBuckets`), which
/// controller-runtime's `controller_runtime_webhook_latency_seconds` uses.
const WEBHOOK_LATENCY_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// client-go's workqueue buckets: `ExponentialBuckets(10e-9, 10, 12)`, 10 ns to 1000 s.
fn workqueue_buckets() -> Vec<f64> {
    (0..12).map(|i| 1e-8 * 10f64.powi(i)).collect()
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The registry could not be written in the text format.
    #[error("encoding metrics in the Prometheus text format")]
    Encode(#[source] prometheus::Error),
}

const RESULTS: [ReconcileResult; 4] =
    [ReconcileResult::Success, ReconcileResult::Error, ReconcileResult::Requeue, ReconcileResult::RequeueAfter];

/// Every metric family of the process, in one registry.
///
/// Families are public for reading in tests and for the rare case a method
/// does not cover; prefer the methods, which keep label values consistent.
pub struct Metrics {
    registry: Registry,
    /// Every family this file defines, in definition order: the metrics
    /// reference (`docs/reference/metrics.md`) is generated from it.
    families: Vec<Family>,
    /// `controller_runtime_reconcile_total{controller,result}`.
    pub reconcile_total: IntCounterVec,
    /// `controller_runtime_reconcile_errors_total{controller}`.
    pub reconcile_errors_total: IntCounterVec,
    /// `controller_runtime_terminal_reconcile_errors_total{controller}`.
    pub terminal_reconcile_errors_total: IntCounterVec,
    /// `controller_runtime_reconcile_panics_total{controller}`: guest traps
    /// (a guest's panic is a trap).
    pub reconcile_panics_total: IntCounterVec,
    /// `controller_runtime_reconcile_timeouts_total{controller}`: reconciles
    /// that ran past their deadline (the guest call's, or the whole
    /// pipeline's).
    pub reconcile_timeouts_total: IntCounterVec,
    /// `operon_outcomes_refused_total{controller}`: outcomes refused before
    /// any write (not granted, too large, malformed).
    pub outcomes_refused_total: IntCounterVec,
    /// `operon_requeue_raised_total{controller}`: requeue-after values below
    /// the floor, raised to it.
    pub requeue_raised_total: IntCounterVec,
    /// `operon_requeue_throttled_total{controller}`: requeue-after values
    /// lengthened by the controller's requeue budget (`--requeue-qps`).
    pub requeue_throttled_total: IntCounterVec,
    /// `operon_guest_throttled_seconds_total{controller}`: time reconciles
    /// waited because the controller's guest calls used their CPU budget.
    pub guest_throttled_seconds_total: CounterVec,
    /// `operon_host_limited_seconds_total{controller,limit}`: time guest calls
    /// waited for a limit the whole host shares (`cpu`, `calls`, `memory`).
    pub host_limited_seconds_total: CounterVec,
    /// `operon_host_guest_memory_bytes{state}`: guest memory the host's gate
    /// has reserved (`reserved`) and may reserve (`limit`).
    pub host_guest_memory_bytes: GaugeVec,
    /// `operon_host_guest_calls{state}`: guest calls in flight
    /// (`in_flight`) and the most there may be (`limit`).
    pub host_guest_calls: GaugeVec,
    /// `operon_module_swaps_total{controller,result}`: swapped, refused,
    /// rolled_back.
    pub module_swaps_total: IntCounterVec,
    /// `operon_module_fetches_total{source,result}`: module sources read.
    pub module_fetches_total: IntCounterVec,
    /// `operon_shadow_comparisons_total{controller,result}`: same, differ,
    /// error.
    pub shadow_comparisons_total: IntCounterVec,
    /// `controller_runtime_reconcile_time_seconds{controller}`.
    pub reconcile_time_seconds: HistogramVec,
    /// `controller_runtime_max_concurrent_reconciles{controller}`.
    pub max_concurrent_reconciles: IntGaugeVec,
    /// `controller_runtime_active_workers{controller}`.
    pub active_workers: IntGaugeVec,
    /// `workqueue_depth{controller,name}`.
    pub workqueue_depth: IntGaugeVec,
    /// `workqueue_adds_total{controller,name}`.
    pub workqueue_adds_total: IntCounterVec,
    /// `workqueue_queue_duration_seconds{controller,name}`.
    pub workqueue_queue_duration_seconds: HistogramVec,
    /// `workqueue_work_duration_seconds{controller,name}`.
    pub workqueue_work_duration_seconds: HistogramVec,
    /// `workqueue_retries_total{controller,name}`.
    pub workqueue_retries_total: IntCounterVec,
    /// `workqueue_unfinished_work_seconds{controller,name}`.
    pub workqueue_unfinished_work_seconds: GaugeVec,
    /// `workqueue_longest_running_processor_seconds{controller,name}`.
    pub workqueue_longest_running_processor_seconds: GaugeVec,
    /// `leader_election_master_status{name}`.
    pub leader_election_master_status: IntGaugeVec,
    /// `operon_guest_call_seconds{controller}`.
    pub guest_call_seconds: HistogramVec,
    /// `operon_guest_errors_total{controller,kind}`.
    pub guest_errors_total: IntCounterVec,
    /// `operon_egress_requests_total{controller,host,code}`.
    pub egress_requests_total: IntCounterVec,
    /// `operon_egress_request_seconds{controller,host}`.
    pub egress_request_seconds: HistogramVec,
    /// The egress series of each controller (`host`, `code`), dropped with it.
    egress_series: Mutex<HashMap<String, std::collections::BTreeSet<(String, String)>>>,
    /// `operon_module_load_seconds{controller}`.
    pub module_load_seconds: HistogramVec,
    /// `operon_module_info{controller,digest}`, always 1.
    pub module_info: IntGaugeVec,
    /// `operon_cache_objects{kind}`.
    pub cache_objects: IntGaugeVec,
    /// `operon_apply_total{controller,operation}`.
    pub apply_total: IntCounterVec,
    /// `controller_runtime_webhook_requests_total{webhook,code}`: admission
    /// requests by HTTP status code (a denial is a 200 whose review says
    /// `allowed: false`). `webhook` is the path, as controller-runtime labels
    /// it (`/validate/<plugin>`).
    pub webhook_requests_total: IntCounterVec,
    /// `controller_runtime_webhook_latency_seconds{webhook}`.
    pub webhook_latency_seconds: HistogramVec,
    /// `controller_runtime_webhook_requests_in_flight{webhook}`.
    pub webhook_requests_in_flight: IntGaugeVec,
    /// `operon_webhook_guest_failures_total{webhook,kind,failure_policy}`:
    /// admission calls the guest could not answer (`kind` as in
    /// `operon_guest_errors_total`), answered by the failure policy: `Fail`
    /// denied them, `Ignore` allowed them.
    pub webhook_guest_failures_total: IntCounterVec,
    /// `operon_webhook_refused_total{webhook,reason}`: admission calls
    /// refused before the guest ran (`plugin_concurrency`,
    /// `total_concurrency`, `cpu_budget`), answered with HTTP 429 so the
    /// API server applies the webhook's failure policy.
    pub webhook_refused_total: IntCounterVec,
    /// `operon_events_dropped_total{controller,reason}`: events not
    /// recorded (`object_budget`, `controller_budget`, `forbidden`,
    /// `refused`, `unreachable`).
    pub events_dropped_total: IntCounterVec,
    /// `operon_server_connections{server}`: connections open on each
    /// listener (`webhook`, `metrics`, `probes`).
    pub server_connections: IntGaugeVec,
    /// `operon_server_connections_refused_total{server,reason}`: connections
    /// closed as they came, over the cap (`total`, `per_client`).
    pub server_connections_refused_total: IntCounterVec,
    /// `operon_server_cut_total{server,reason}`: clients cut off
    /// (`handshake_timeout`, `header_timeout`, `body_timeout`,
    /// `body_too_large`).
    pub server_cut_total: IntCounterVec,
    /// `operon_metrics_reviews_total{outcome}`: how bearer tokens on
    /// `/metrics` were judged (`reviewed`: asked of the API server;
    /// `cached`; `rate_limited`: refused without asking; `failed`: the API
    /// server could not answer).
    pub metrics_reviews_total: IntCounterVec,
    /// The digest each controller's `operon_module_info` series carries, so a
    /// swap replaces the series instead of adding one.
    module_digests: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Builds and registers one family. Names, help texts and labels are
/// constants of this file, so a failure is a bug in it (a duplicate or an
/// invalid name), caught by every test that makes a `Metrics`.
fn register<C: Collector + Clone + 'static>(
    registry: &Registry,
    families: &std::cell::RefCell<Vec<Family>>,
    kind: &'static str,
    collector: Result<C, prometheus::Error>,
) -> C {
    let collector = collector.expect("metric definition is valid");
    registry.register(Box::new(collector.clone())).expect("metric names are unique");
    families.borrow_mut().extend(collector.desc().into_iter().map(|d| Family {
        name: d.fq_name.clone(),
        kind,
        help: d.help.clone(),
        labels: d.variable_labels.clone(),
    }));
    collector
}

/// One metric family as defined here: what the reference documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// The full name.
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// The help text.
    pub help: String,
    /// The label names.
    pub labels: Vec<String>,
}

impl Metrics {
    /// Every family defined here, in definition order (not the
    /// process-specific collectors added through [`Metrics::registry`]).
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The registry, to add process-specific collectors.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Every family in the Prometheus text format 0.0.4 (see [`CONTENT_TYPE`]).
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if the encoder rejects a family; with the families
    /// of this module that does not happen.
    pub fn encode(&self) -> Result<String, Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).map_err(Error::Encode)?;
        String::from_utf8(out).map_err(|e| Error::Encode(prometheus::Error::Msg(e.to_string())))
    }

    /// A controller was started with this many workers. Sets
    /// `max_concurrent_reconciles` and creates its series at zero, as
    /// controller-runtime does, so rates and alerts work before the first
    /// error.
    pub fn controller_started(&self, controller: &str, max_concurrent_reconciles: usize) {
        self.max_concurrent_reconciles
            .with_label_values(&[controller])
            .set(i64::try_from(max_concurrent_reconciles).unwrap_or(i64::MAX));
        self.active_workers.with_label_values(&[controller]).set(0);
        for result in RESULTS {
            self.reconcile_total.with_label_values(&[controller, result.label()]);
        }
        for vec in [
            &self.reconcile_errors_total,
            &self.terminal_reconcile_errors_total,
            &self.reconcile_panics_total,
            &self.reconcile_timeouts_total,
            &self.outcomes_refused_total,
            &self.requeue_raised_total,
            &self.requeue_throttled_total,
        ] {
            vec.with_label_values(&[controller]);
        }
        self.guest_throttled_seconds_total.with_label_values(&[controller]);
        for reason in EVENT_DROPS {
            self.events_dropped_total.with_label_values(&[controller, reason]);
        }
        for kind in GuestErrorKind::ALL {
            self.guest_errors_total.with_label_values(&[controller, kind.label()]);
        }
        for op in ApplyOperation::ALL {
            self.apply_total.with_label_values(&[controller, op.label()]);
        }
        // Swaps and rollbacks are rare: without a zero series, a dashboard
        // or an alert on them has nothing to show until the first one.
        for result in ["swapped", "refused", "rolled_back"] {
            self.module_swaps_total.with_label_values(&[controller, result]);
        }
    }

    /// A controller was removed (its Reconciler deleted): drops every series
    /// labelled with it, so a dashboard does not show it forever.
    pub fn controller_removed(&self, controller: &str) {
        // Removing a series that does not exist is not an error here.
        for result in RESULTS {
            let _ = self.reconcile_total.remove_label_values(&[controller, result.label()]);
        }
        for vec in [
            &self.reconcile_errors_total,
            &self.terminal_reconcile_errors_total,
            &self.reconcile_panics_total,
            &self.reconcile_timeouts_total,
            &self.outcomes_refused_total,
            &self.requeue_raised_total,
            &self.requeue_throttled_total,
        ] {
            let _ = vec.remove_label_values(&[controller]);
        }
        let _ = self.guest_throttled_seconds_total.remove_label_values(&[controller]);
        for limit in ["cpu", "calls", "memory"] {
            let _ = self.host_limited_seconds_total.remove_label_values(&[controller, limit]);
        }
        for reason in EVENT_DROPS {
            let _ = self.events_dropped_total.remove_label_values(&[controller, reason]);
        }
        for result in ["swapped", "refused", "rolled_back"] {
            let _ = self.module_swaps_total.remove_label_values(&[controller, result]);
        }
        for result in ["same", "differ", "error"] {
            let _ = self.shadow_comparisons_total.remove_label_values(&[controller, result]);
        }
        for vec in [&self.reconcile_time_seconds, &self.guest_call_seconds, &self.module_load_seconds] {
            let _ = vec.remove_label_values(&[controller]);
        }
        for vec in [&self.max_concurrent_reconciles, &self.active_workers] {
            let _ = vec.remove_label_values(&[controller]);
        }
        let _ = self.workqueue_depth.remove_label_values(&[controller, controller]);
        for vec in [&self.workqueue_adds_total, &self.workqueue_retries_total] {
            let _ = vec.remove_label_values(&[controller, controller]);
        }
        for vec in [&self.workqueue_queue_duration_seconds, &self.workqueue_work_duration_seconds] {
            let _ = vec.remove_label_values(&[controller, controller]);
        }
        for vec in [&self.workqueue_unfinished_work_seconds, &self.workqueue_longest_running_processor_seconds] {
            let _ = vec.remove_label_values(&[controller, controller]);
        }
        for kind in GuestErrorKind::ALL {
            let _ = self.guest_errors_total.remove_label_values(&[controller, kind.label()]);
        }
        for op in ApplyOperation::ALL {
            let _ = self.apply_total.remove_label_values(&[controller, op.label()]);
        }
        if let Some(digest) = self.digests().remove(controller) {
            let _ = self.module_info.remove_label_values(&[controller, &digest]);
        }
        let series = self.egress_series.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(controller);
        for (host, code) in series.unwrap_or_default() {
            let _ = self.egress_requests_total.remove_label_values(&[controller, &host, &code]);
            let _ = self.egress_request_seconds.remove_label_values(&[controller, &host]);
        }
    }

    /// One reconcile ended. Records `reconcile_total`, `reconcile_time_seconds`
    /// and, for errors, `reconcile_errors_total` (and
    /// `terminal_reconcile_errors_total`), exactly as controller-runtime does.
    pub fn reconcile_finished(&self, controller: &str, result: ReconcileResult, elapsed: Duration) {
        self.reconcile_total.with_label_values(&[controller, result.label()]).inc();
        self.reconcile_time_seconds.with_label_values(&[controller]).observe(elapsed.as_secs_f64());
        match result {
            ReconcileResult::Error => self.reconcile_errors_total.with_label_values(&[controller]).inc(),
            ReconcileResult::TerminalError => {
                self.reconcile_errors_total.with_label_values(&[controller]).inc();
                self.terminal_reconcile_errors_total.with_label_values(&[controller]).inc();
            }
            ReconcileResult::Success | ReconcileResult::Requeue | ReconcileResult::RequeueAfter => {}
        }
    }

    /// A worker of `controller` took a key; `controller_runtime_active_workers`
    /// counts it until the returned guard is dropped (so a panic or an early
    /// return cannot leave the gauge high).
    #[must_use = "the worker counts as active only while the guard lives"]
    pub fn worker_busy(&self, controller: &str) -> ActiveWorker {
        let gauge = self.active_workers.with_label_values(&[controller]);
        gauge.inc();
        ActiveWorker { gauge }
    }

    /// The workqueue handle for the controller named `controller`. Its
    /// series carry `controller` and `name` both set to it, as
    /// controller-runtime names a controller's queue after the controller.
    pub fn workqueue(&self, controller: &str) -> Workqueue {
        let labels = &[controller, controller];
        Workqueue {
            depth: self.workqueue_depth.with_label_values(labels),
            adds: self.workqueue_adds_total.with_label_values(labels),
            queue_duration: self.workqueue_queue_duration_seconds.with_label_values(labels),
            work_duration: self.workqueue_work_duration_seconds.with_label_values(labels),
            retries: self.workqueue_retries_total.with_label_values(labels),
            unfinished_work: self.workqueue_unfinished_work_seconds.with_label_values(labels),
            longest_running_processor: self.workqueue_longest_running_processor_seconds.with_label_values(labels),
        }
    }

    /// A guest trapped (`controller_runtime_reconcile_panics_total`).
    pub fn reconcile_panicked(&self, controller: &str) {
        self.reconcile_panics_total.with_label_values(&[controller]).inc();
    }

    /// A reconcile ran past its deadline.
    pub fn reconcile_timed_out(&self, controller: &str) {
        self.reconcile_timeouts_total.with_label_values(&[controller]).inc();
    }

    /// An outcome was refused before any write.
    pub fn outcome_refused(&self, controller: &str) {
        self.outcomes_refused_total.with_label_values(&[controller]).inc();
    }

    /// A requeue-after below the floor was raised to it.
    pub fn requeue_raised(&self, controller: &str) {
        self.requeue_raised_total.with_label_values(&[controller]).inc();
    }

    /// A reconcile waited `wait` for the controller's guest CPU budget.
    pub fn guest_throttled(&self, controller: &str, wait: Duration) {
        self.guest_throttled_seconds_total.with_label_values(&[controller]).inc_by(wait.as_secs_f64());
    }

    /// A guest call waited `wait` for the host-wide `limit` (`cpu`, `calls`,
    /// `memory`).
    pub fn host_limited(&self, controller: &str, limit: &str, wait: Duration) {
        self.host_limited_seconds_total.with_label_values(&[controller, limit]).inc_by(wait.as_secs_f64());
    }

    /// How much of the host's guest gate is in use.
    pub fn host_usage(&self, usage: crate::runtime::Usage) {
        let bytes = |b: u64| if b == u64::MAX { f64::INFINITY } else { b as f64 };
        let calls = |c: usize| if c == usize::MAX { f64::INFINITY } else { c as f64 };
        self.host_guest_memory_bytes.with_label_values(&["reserved"]).set(bytes(usage.memory_reserved));
        self.host_guest_memory_bytes.with_label_values(&["limit"]).set(bytes(usage.memory_limit));
        self.host_guest_calls.with_label_values(&["in_flight"]).set(calls(usage.calls_in_flight));
        self.host_guest_calls.with_label_values(&["limit"]).set(calls(usage.calls_limit));
    }

    /// A requeue-after was lengthened by the requeue budget.
    pub fn requeue_throttled(&self, controller: &str) {
        self.requeue_throttled_total.with_label_values(&[controller]).inc();
    }

    /// A module version change: `swapped`, `refused` or `rolled_back`.
    pub fn module_swap(&self, controller: &str, result: &str) {
        self.module_swaps_total.with_label_values(&[controller, result]).inc();
    }

    /// A module source (`configmap`, `path`, `url`, `oci`) was read.
    pub fn module_fetched(&self, source: &str, ok: bool) {
        self.module_fetches_total.with_label_values(&[source, if ok { "ok" } else { "failed" }]).inc();
    }

    /// A shadow comparison: `same`, `differ` or `error`.
    pub fn shadow_compared(&self, controller: &str, result: &str) {
        self.shadow_comparisons_total.with_label_values(&[controller, result]).inc();
    }

    /// Whether this process holds the lease `name`.
    pub fn leader_status(&self, name: &str, leading: bool) {
        self.leader_election_master_status.with_label_values(&[name]).set(i64::from(leading));
    }

    /// A guest call returned (successfully or not) after `elapsed`.
    pub fn guest_called(&self, controller: &str, elapsed: Duration) {
        self.guest_call_seconds.with_label_values(&[controller]).observe(elapsed.as_secs_f64());
    }

    /// A guest's outbound call to `host` ended with `code` (the status, or
    /// the error's kind) after `elapsed`.
    pub fn egress_called(&self, controller: &str, host: &str, code: &str, elapsed: Duration) {
        self.egress_requests_total.with_label_values(&[controller, host, code]).inc();
        self.egress_request_seconds.with_label_values(&[controller, host]).observe(elapsed.as_secs_f64());
        self.egress_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(controller.to_string())
            .or_default()
            .insert((host.to_string(), code.to_string()));
    }

    /// A guest call failed this way.
    pub fn guest_failed(&self, controller: &str, kind: GuestErrorKind) {
        self.guest_errors_total.with_label_values(&[controller, kind.label()]).inc();
    }

    /// A module was loaded for `controller` in `elapsed` and is now the one
    /// it runs: `operon_module_info` moves to the new digest.
    pub fn module_loaded(&self, controller: &str, digest: &str, elapsed: Duration) {
        self.module_load_seconds.with_label_values(&[controller]).observe(elapsed.as_secs_f64());
        let mut digests = self.digests();
        if let Some(old) = digests.insert(controller.to_owned(), digest.to_owned())
            && old != digest
        {
            let _ = self.module_info.remove_label_values(&[controller, &old]);
        }
        self.module_info.with_label_values(&[controller, digest]).set(1);
    }

    /// The shared cache holds `count` objects of `kind` (e.g. `apps/v1 Deployment`).
    pub fn cache_objects(&self, kind: &str, count: usize) {
        self.cache_objects.with_label_values(&[kind]).set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// The applier wrote to the cluster for `controller`.
    pub fn applied(&self, controller: &str, operation: ApplyOperation) {
        self.apply_total.with_label_values(&[controller, operation.label()]).inc();
    }

    /// An admission request arrived at `webhook` (its path): counted in
    /// `controller_runtime_webhook_requests_in_flight` until the returned
    /// guard is dropped.
    #[must_use = "the request counts as in flight only while the guard lives"]
    pub fn webhook_request_started(&self, webhook: &str) -> InFlight {
        let gauge = self.webhook_requests_in_flight.with_label_values(&[webhook]);
        gauge.inc();
        InFlight { gauge }
    }

    /// An admission request to `webhook` was answered with HTTP `code` after
    /// `elapsed`.
    pub fn webhook_request_finished(&self, webhook: &str, code: u16, elapsed: Duration) {
        self.webhook_requests_total.with_label_values(&[webhook, &code.to_string()]).inc();
        self.webhook_latency_seconds.with_label_values(&[webhook]).observe(elapsed.as_secs_f64());
    }

    /// The guest behind `webhook` could not answer; `failure_policy`
    /// (`Fail` or `Ignore`) answered instead.
    pub fn webhook_guest_failed(&self, webhook: &str, kind: GuestErrorKind, failure_policy: &str) {
        self.webhook_guest_failures_total.with_label_values(&[webhook, kind.label(), failure_policy]).inc();
    }

    /// An admission call to `webhook` was refused before its guest ran.
    pub fn webhook_refused(&self, webhook: &str, reason: &str) {
        self.webhook_refused_total.with_label_values(&[webhook, reason]).inc();
    }

    /// A connection opened on `server`; counted while the guard lives.
    pub fn server_connection_opened(&self, server: &str) -> InFlight {
        let gauge = self.server_connections.with_label_values(&[server]);
        gauge.inc();
        InFlight { gauge }
    }

    /// A connection to `server` was closed as it came (`reason`: `total`,
    /// `per_client`).
    pub fn server_connection_refused(&self, server: &str, reason: &str) {
        self.server_connections_refused_total.with_label_values(&[server, reason]).inc();
    }

    /// A client of `server` was cut off (`reason`: which timeout or limit).
    pub fn server_cut(&self, server: &str, reason: &str) {
        self.server_cut_total.with_label_values(&[server, reason]).inc();
    }

    /// A bearer token on `/metrics` was judged (`outcome`: `reviewed`,
    /// `cached`, `rate_limited`, `failed`).
    pub fn metrics_review(&self, outcome: &str) {
        self.metrics_reviews_total.with_label_values(&[outcome]).inc();
    }

    /// An event of `controller` was not recorded.
    pub fn event_dropped(&self, controller: &str, reason: &str) {
        self.events_dropped_total.with_label_values(&[controller, reason]).inc();
    }

    /// A webhook was registered: creates its series at zero, so rates and
    /// alerts work before its first request.
    pub fn webhook_added(&self, webhook: &str, failure_policy: &str) {
        self.webhook_requests_in_flight.with_label_values(&[webhook]).set(0);
        for reason in WEBHOOK_REFUSALS {
            self.webhook_refused_total.with_label_values(&[webhook, reason]);
        }
        for kind in GuestErrorKind::ALL {
            self.webhook_guest_failures_total.with_label_values(&[webhook, kind.label(), failure_policy]);
        }
    }

    /// A webhook was removed (its plugin unregistered): drops its series.
    pub fn webhook_removed(&self, webhook: &str) {
        let _ = self.webhook_latency_seconds.remove_label_values(&[webhook]);
        let _ = self.webhook_requests_in_flight.remove_label_values(&[webhook]);
        for reason in WEBHOOK_REFUSALS {
            let _ = self.webhook_refused_total.remove_label_values(&[webhook, reason]);
        }
        for code in [200, 400, 404, 405, 413, 415, 429, 500] {
            let _ = self.webhook_requests_total.remove_label_values(&[webhook, &code.to_string()]);
        }
        for kind in GuestErrorKind::ALL {
            for policy in ["Fail", "Ignore"] {
                let _ = self.webhook_guest_failures_total.remove_label_values(&[webhook, kind.label(), policy]);
            }
        }
    }

    fn digests(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // The map is always consistent (single inserts/removes), so a panic
        // elsewhere while it was held does not make it unusable.
        self.module_digests.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The `reason` labels of `operon_webhook_refused_total`.
const WEBHOOK_REFUSALS: [&str; 3] = ["plugin_concurrency", "total_concurrency", "cpu_budget"];
/// The `reason` labels of `operon_events_dropped_total`.
const EVENT_DROPS: [&str; 5] = ["object_budget", "controller_budget", "forbidden", "refused", "unreachable"];

mod families;
mod guards;
mod labels;

pub use guards::{ActiveWorker, InFlight, Workqueue};
pub use labels::{ApplyOperation, GuestErrorKind, ReconcileResult};

#[cfg(test)]
mod tests;
