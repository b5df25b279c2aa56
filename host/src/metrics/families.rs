//! Every metric family the host exports, registered once: the names and
//! labels of controller-runtime's (so its dashboards work) and `operon_*`.

use super::*;

impl Metrics {
    /// Creates every family in a fresh registry.
    ///
    /// # Panics
    ///
    /// Never in practice: only if this file defines two families with one
    /// name, which the tests would show.
    pub fn new() -> Self {
        let r = Registry::new();
        let f = std::cell::RefCell::new(Vec::new());
        let counter = |name: &str, help: &str, labels: &[&str]| {
            register(&r, &f, "counter", IntCounterVec::new(Opts::new(name, help), labels))
        };
        let int_gauge = |name: &str, help: &str, labels: &[&str]| {
            register(&r, &f, "gauge", IntGaugeVec::new(Opts::new(name, help), labels))
        };
        let float_counter = |name: &str, help: &str, labels: &[&str]| {
            register(&r, &f, "counter", CounterVec::new(Opts::new(name, help), labels))
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            register(&r, &f, "gauge", GaugeVec::new(Opts::new(name, help), labels))
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            register(&r, &f, "histogram", HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels))
        };
        const C: &[&str] = &["controller"];
        const CN: &[&str] = &["controller", "name"];
        let mut metrics = Self {
            reconcile_total: counter(
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
                &["controller", "result"],
            ),
            reconcile_errors_total: counter(
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
                C,
            ),
            terminal_reconcile_errors_total: counter(
                "controller_runtime_terminal_reconcile_errors_total",
                "Total number of terminal reconciliation errors per controller",
                C,
            ),
            reconcile_panics_total: counter(
                "controller_runtime_reconcile_panics_total",
                "Total number of reconciliation panics per controller (for Operon: guest traps)",
                C,
            ),
            reconcile_timeouts_total: counter(
                "controller_runtime_reconcile_timeouts_total",
                "Total number of reconciliation timeouts per controller",
                C,
            ),
            outcomes_refused_total: counter(
                "operon_outcomes_refused_total",
                "Total number of guest outcomes refused before any write, per controller",
                C,
            ),
            requeue_raised_total: counter(
                "operon_requeue_raised_total",
                "Total number of requeue-after values below the floor that were raised to it, per controller",
                C,
            ),
            requeue_throttled_total: counter(
                "operon_requeue_throttled_total",
                "Total number of requeue-after values lengthened by the controller's requeue budget, per controller",
                C,
            ),
            guest_throttled_seconds_total: float_counter(
                "operon_guest_throttled_seconds_total",
                "Total seconds reconciles waited because the controller's guest calls used their CPU budget, per controller",
                C,
            ),
            host_limited_seconds_total: float_counter(
                "operon_host_limited_seconds_total",
                "Total seconds guest calls waited for a limit the whole host shares, per controller and limit (cpu, calls, memory)",
                &["controller", "limit"],
            ),
            host_guest_memory_bytes: gauge(
                "operon_host_guest_memory_bytes",
                "Guest linear memory the host has reserved for calls in flight and idle pooled instances (reserved), and may reserve (limit)",
                &["state"],
            ),
            host_guest_calls: gauge(
                "operon_host_guest_calls",
                "Guest calls in flight across every module (in_flight), and the most there may be (limit)",
                &["state"],
            ),
            module_swaps_total: counter(
                "operon_module_swaps_total",
                "Total number of module version changes per controller and result (swapped, refused, rolled_back)",
                &["controller", "result"],
            ),
            module_fetches_total: counter(
                "operon_module_fetches_total",
                "Total number of module sources read per source kind (configmap, path, url, oci) and result (ok, failed); a source is read again only when it changes",
                &["source", "result"],
            ),
            shadow_comparisons_total: counter(
                "operon_shadow_comparisons_total",
                "Total number of shadow comparisons of a candidate module per controller and result (same, differ, error)",
                &["controller", "result"],
            ),
            reconcile_time_seconds: histogram(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                C,
                RECONCILE_BUCKETS.to_vec(),
            ),
            max_concurrent_reconciles: int_gauge(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                C,
            ),
            active_workers: int_gauge(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                C,
            ),
            workqueue_depth: int_gauge("workqueue_depth", "Current depth of workqueue", CN),
            workqueue_adds_total: counter("workqueue_adds_total", "Total number of adds handled by workqueue", CN),
            workqueue_queue_duration_seconds: histogram(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                CN,
                workqueue_buckets(),
            ),
            workqueue_work_duration_seconds: histogram(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes.",
                CN,
                workqueue_buckets(),
            ),
            workqueue_retries_total: counter(
                "workqueue_retries_total",
                "Total number of retries handled by workqueue",
                CN,
            ),
            workqueue_unfinished_work_seconds: gauge(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by \
                 work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads \
                 by observing the rate at which this increases.",
                CN,
            ),
            workqueue_longest_running_processor_seconds: gauge(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                CN,
            ),
            leader_election_master_status: int_gauge(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates \
                 master. 'name' is the string used to identify the lease. Please make sure to group by name.",
                &["name"],
            ),
            guest_call_seconds: histogram(
                "operon_guest_call_seconds",
                "Duration of one call into a guest module (instantiation included) per controller",
                C,
                GUEST_CALL_BUCKETS.to_vec(),
            ),
            egress_requests_total: counter(
                "operon_egress_requests_total",
                "Total number of outbound HTTP calls of guests per controller, host (the host of the grant that \
                 allowed the call, as spec.grants.egress names it; - for a call no grant allowed) and code (the \
                 HTTP status's class, 1xx to 5xx or other, or why none came: denied, invalid, timeout, \
                 unreachable, tooLarge, budget)",
                &["controller", "host", "code"],
            ),
            egress_request_seconds: histogram(
                "operon_egress_request_seconds",
                "Duration of one outbound HTTP call of a guest per controller and host (the grant's; redirects included)",
                &["controller", "host"],
                RECONCILE_BUCKETS.to_vec(),
            ),
            egress_series: Mutex::default(),
            guest_errors_total: counter(
                "operon_guest_errors_total",
                "Total number of failed guest calls per controller and kind \
                 (timeout, memory, trap, malformed, oversized, instantiate)",
                &["controller", "kind"],
            ),
            module_load_seconds: histogram(
                "operon_module_load_seconds",
                "Time to load a module (compile or read the precompiled cache, type-check, link) per controller",
                C,
                MODULE_LOAD_BUCKETS.to_vec(),
            ),
            module_info: int_gauge(
                "operon_module_info",
                "The module each controller runs, by digest; always 1",
                &["controller", "digest"],
            ),
            cache_objects: int_gauge(
                "operon_cache_objects",
                "Number of objects in the shared cache per kind",
                &["kind"],
            ),
            apply_total: counter(
                "operon_apply_total",
                "Total number of writes by the applier per controller and operation (apply, delete, status)",
                &["controller", "operation"],
            ),
            webhook_requests_total: counter(
                "controller_runtime_webhook_requests_total",
                "Total number of admission requests by HTTP status code.",
                &["webhook", "code"],
            ),
            webhook_latency_seconds: histogram(
                "controller_runtime_webhook_latency_seconds",
                "Histogram of the latency of processing admission requests",
                &["webhook"],
                WEBHOOK_LATENCY_BUCKETS.to_vec(),
            ),
            webhook_requests_in_flight: int_gauge(
                "controller_runtime_webhook_requests_in_flight",
                "Current number of admission requests being served.",
                &["webhook"],
            ),
            webhook_guest_failures_total: counter(
                "operon_webhook_guest_failures_total",
                "Total number of admission calls a guest could not answer, per webhook, kind \
                 (timeout, memory, trap, malformed, oversized, instantiate) and the failure policy that answered",
                &["webhook", "kind", "failure_policy"],
            ),
            webhook_refused_total: counter(
                "operon_webhook_refused_total",
                "Total number of admission calls refused before the guest ran, per webhook and reason \
                 (plugin_concurrency, total_concurrency, cpu_budget); the API server applies the failure policy",
                &["webhook", "reason"],
            ),
            events_dropped_total: counter(
                "operon_events_dropped_total",
                "Total number of events not recorded, per controller and reason (object_budget, \
                 controller_budget, forbidden, refused, unreachable)",
                &["controller", "reason"],
            ),
            server_connections: int_gauge(
                "operon_server_connections",
                "Current number of connections open on each listener (webhook, metrics, probes)",
                &["server"],
            ),
            server_connections_refused_total: counter(
                "operon_server_connections_refused_total",
                "Total number of connections closed as they came because the listener was full, per server and \
                 reason (total, per_client)",
                &["server", "reason"],
            ),
            server_cut_total: counter(
                "operon_server_cut_total",
                "Total number of clients cut off, per server and reason (handshake_timeout, header_timeout, \
                 body_timeout, body_too_large)",
                &["server", "reason"],
            ),
            metrics_reviews_total: counter(
                "operon_metrics_reviews_total",
                "Total number of bearer tokens judged on /metrics, per outcome (reviewed: asked of the API \
                 server; cached; rate_limited: refused without asking; failed: the API server could not answer)",
                &["outcome"],
            ),
            module_digests: Mutex::new(HashMap::new()),
            families: Vec::new(),
            registry: r,
        };
        metrics.families = f.into_inner();
        metrics
    }
}
