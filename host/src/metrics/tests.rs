use super::*;

/// A registry with a sample of every family.
pub(crate) fn populated() -> Metrics {
    let m = Metrics::new();
    m.controller_started("shop", 4);
    m.reconcile_finished("shop", ReconcileResult::Success, Duration::from_millis(12));
    m.reconcile_finished("shop", ReconcileResult::TerminalError, Duration::from_millis(3));
    m.reconcile_finished("shop", ReconcileResult::RequeueAfter, Duration::from_millis(7));
    let busy = m.worker_busy("shop");
    let q = m.workqueue("shop");
    q.depth.set(2);
    q.adds.inc();
    q.queue_duration.observe(0.001);
    q.work_duration.observe(0.02);
    q.retries.inc();
    q.unfinished_work.set(1.5);
    q.longest_running_processor.set(1.0);
    m.leader_status("operon-leader", true);
    m.guest_called("shop", Duration::from_micros(40));
    m.guest_failed("shop", GuestErrorKind::Timeout);
    m.module_loaded("shop", "sha256:abc", Duration::from_millis(300));
    m.cache_objects("apps/v1 Deployment", 17);
    m.applied("shop", ApplyOperation::Apply);
    m.webhook_added("/validate/shop", "Fail");
    let in_flight = m.webhook_request_started("/validate/shop");
    m.webhook_request_finished("/validate/shop", 200, Duration::from_micros(300));
    m.webhook_guest_failed("/validate/shop", GuestErrorKind::Trap, "Fail");
    drop(in_flight);
    drop(busy);
    m
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn metrics_should_use_controller_runtime_names_and_labels() {
    let text = populated().encode().expect("encodes");
    for series in [
        r#"controller_runtime_reconcile_total{controller="shop",result="success"}"#,
        r#"controller_runtime_reconcile_total{controller="shop",result="error"}"#,
        r#"controller_runtime_reconcile_total{controller="shop",result="requeue"}"#,
        r#"controller_runtime_reconcile_total{controller="shop",result="requeue_after"}"#,
        r#"controller_runtime_reconcile_errors_total{controller="shop"}"#,
        r#"controller_runtime_terminal_reconcile_errors_total{controller="shop"}"#,
        r#"controller_runtime_reconcile_time_seconds_count{controller="shop"}"#,
        r#"controller_runtime_reconcile_time_seconds_bucket{controller="shop",le="0.005"}"#,
        r#"controller_runtime_reconcile_time_seconds_bucket{controller="shop",le="60"}"#,
        r#"controller_runtime_max_concurrent_reconciles{controller="shop"}"#,
        r#"controller_runtime_active_workers{controller="shop"}"#,
        r#"workqueue_depth{controller="shop",name="shop"}"#,
        r#"workqueue_adds_total{controller="shop",name="shop"}"#,
        r#"workqueue_queue_duration_seconds_bucket{controller="shop",name="shop",le="0.00000001"}"#,
        r#"workqueue_work_duration_seconds_count{controller="shop",name="shop"}"#,
        r#"workqueue_retries_total{controller="shop",name="shop"}"#,
        r#"workqueue_unfinished_work_seconds{controller="shop",name="shop"}"#,
        r#"workqueue_longest_running_processor_seconds{controller="shop",name="shop"}"#,
        r#"leader_election_master_status{name="operon-leader"}"#,
        r#"operon_guest_call_seconds_bucket{controller="shop",le="0.00001"}"#,
        r#"operon_guest_errors_total{controller="shop",kind="timeout"}"#,
        r#"operon_guest_errors_total{controller="shop",kind="instantiate"}"#,
        r#"operon_module_load_seconds_count{controller="shop"}"#,
        r#"operon_module_info{controller="shop",digest="sha256:abc"}"#,
        r#"operon_cache_objects{kind="apps/v1 Deployment"}"#,
        r#"operon_apply_total{controller="shop",operation="apply"}"#,
        r#"operon_apply_total{controller="shop",operation="status"}"#,
        r#"controller_runtime_webhook_requests_total{code="200",webhook="/validate/shop"}"#,
        r#"controller_runtime_webhook_latency_seconds_bucket{webhook="/validate/shop",le="0.005"}"#,
        r#"controller_runtime_webhook_latency_seconds_bucket{webhook="/validate/shop",le="10"}"#,
        r#"controller_runtime_webhook_requests_in_flight{webhook="/validate/shop"}"#,
        r#"operon_webhook_guest_failures_total{failure_policy="Fail",kind="trap",webhook="/validate/shop"}"#,
    ] {
        assert!(sample(&text, series).is_some(), "missing {series} in:\n{text}");
    }
    assert!(text.contains("# TYPE controller_runtime_reconcile_time_seconds histogram"));
    assert!(text.contains("# TYPE workqueue_depth gauge"));
    assert!(text.contains("# TYPE controller_runtime_reconcile_total counter"));
    assert!(!text.contains("# EOF"), "0.0.4 text format, not OpenMetrics");
}

#[test]
fn reconcile_finished_should_count_terminal_errors_as_errors_too() {
    let text = populated().encode().expect("encodes");
    let get = |s: &str| sample(&text, s).unwrap_or(f64::NAN);
    assert_eq!(get(r#"controller_runtime_reconcile_total{controller="shop",result="error"}"#), 1.0);
    assert_eq!(get(r#"controller_runtime_reconcile_errors_total{controller="shop"}"#), 1.0);
    assert_eq!(get(r#"controller_runtime_terminal_reconcile_errors_total{controller="shop"}"#), 1.0);
    assert_eq!(get(r#"controller_runtime_reconcile_total{controller="shop",result="requeue"}"#), 0.0);
    assert_eq!(get(r#"controller_runtime_reconcile_time_seconds_count{controller="shop"}"#), 3.0);
    assert_eq!(get(r#"controller_runtime_active_workers{controller="shop"}"#), 0.0, "guard dropped");
    assert_eq!(get(r#"controller_runtime_max_concurrent_reconciles{controller="shop"}"#), 4.0);
}

#[test]
fn module_loaded_should_keep_one_info_series_per_controller() {
    let m = Metrics::new();
    m.module_loaded("shop", "sha256:old", Duration::from_millis(1));
    m.module_loaded("shop", "sha256:new", Duration::from_millis(1));
    let text = m.encode().expect("encodes");
    assert!(!text.contains("sha256:old"), "{text}");
    assert_eq!(sample(&text, r#"operon_module_info{controller="shop",digest="sha256:new"}"#), Some(1.0));
}

#[test]
fn controller_removed_should_drop_its_series() {
    let m = populated();
    m.controller_removed("shop");
    let text = m.encode().expect("encodes");
    assert!(!text.contains(r#"controller="shop""#), "{text}");
    assert!(text.contains("operon_cache_objects"), "series of other labels stay");
}

#[test]
fn webhook_series_should_count_requests_and_drop_with_the_webhook() {
    let text = populated().encode().expect("encodes");
    let get = |s: &str| sample(&text, s).unwrap_or(f64::NAN);
    assert_eq!(get(r#"controller_runtime_webhook_requests_total{code="200",webhook="/validate/shop"}"#), 1.0);
    assert_eq!(get(r#"controller_runtime_webhook_requests_in_flight{webhook="/validate/shop"}"#), 0.0, "guard dropped");
    assert_eq!(get(r#"controller_runtime_webhook_latency_seconds_count{webhook="/validate/shop"}"#), 1.0);
    assert_eq!(
        get(r#"operon_webhook_guest_failures_total{failure_policy="Fail",kind="timeout",webhook="/validate/shop"}"#),
        0.0,
        "zero-initialised"
    );
    let m = populated();
    m.webhook_removed("/validate/shop");
    let text = m.encode().expect("encodes");
    assert!(!text.contains("/validate/shop"), "{text}");
}

#[test]
fn two_registries_should_not_share_series() {
    let a = Metrics::new();
    let b = Metrics::new();
    a.leader_status("lease", true);
    assert!(!b.encode().expect("encodes").contains("lease"));
}

/// promtool must accept the output. Skipped when promtool is not
/// installed, unless `OPERON_REQUIRE_PROMTOOL=1` (CI), where its absence
/// is a failure.
#[test]
fn encode_should_pass_promtool_check_metrics() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let required = std::env::var("OPERON_REQUIRE_PROMTOOL").is_ok_and(|v| v == "1");
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            eprintln!("promtool not on PATH: skipped (set OPERON_REQUIRE_PROMTOOL=1 to fail instead)");
            return;
        }
        Err(e) => panic!("running promtool (OPERON_REQUIRE_PROMTOOL=1): {e}"),
    };
    let text = populated().encode().expect("encodes");
    child.stdin.take().expect("stdin piped").write_all(text.as_bytes()).expect("writes to promtool");
    let out = child.wait_with_output().expect("promtool runs");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool rejected the output:\n{report}\n---\n{text}");
    // promtool exits 0 on lint warnings too; there should be none.
    assert!(report.trim().is_empty(), "promtool lint findings:\n{report}");
}
