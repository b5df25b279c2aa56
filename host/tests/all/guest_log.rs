//! What a guest says through `host.log` reaches the host's log bounded and
//! plain (issue 18, finding 9): at most a budget of lines per call, within
//! the module's log rate (the one its stdout and stderr share), each line
//! cut at a length, and no control character that could start a forged
//! line of its own or repaint a terminal. The `chatty` guest floods it.

use crate::common;

use common::guest;
use operon::runtime::{self, Limits, NoObjects, Request, Runtime};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The forged line the guest writes after a newline in every message.
const FORGED: &str = "FORGED-LINE";

/// The host's log, captured as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Run one reconcile of a Thing with `spec` under `limits`, capturing the
/// host's log; `(log, call duration, lines dropped by the module)`.
fn reconcile(spec: serde_json::Value, limits: Limits) -> (String, std::time::Duration, u64) {
    let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    let module = rt.load(&guest("chatty"), limits).unwrap();
    let request = Request {
        object: serde_json::json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": "t", "namespace": "default", "uid": "u"}, "spec": spec})
        .to_string(),
        ..Request::default()
    };
    let log = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(log.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let started = Instant::now();
    let outcome = tracing::subscriber::with_default(subscriber, || module.reconcile(&request, Arc::new(NoObjects)));
    let took = started.elapsed();
    let outcome = outcome.expect("a guest's words never fail its call").expect("the guest answers");
    assert!(outcome.status.is_some(), "the guest finished its loop");
    let text = String::from_utf8(log.0.lock().unwrap().clone()).expect("the log is UTF-8");
    (text, took, module.dropped_log_lines())
}

/// The lines the guest's messages became.
fn guest_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("operon::guest") && l.contains("chatty")).collect()
}

#[test]
fn a_flood_of_host_log_is_held_to_the_modules_rate_cut_and_cannot_forge_lines() {
    let limits = Limits::default();
    let (log, took, dropped) =
        reconcile(serde_json::json!({"mode": "log", "lines": 20000, "size": 65536}), limits.clone());
    let lines = guest_lines(&log);
    eprintln!("20000 messages of 64 KiB: {} lines logged, {dropped} dropped, in {took:?}", lines.len());
    let allowed = f64::from(limits.log_burst) + f64::from(limits.log_lines_per_second) * took.as_secs_f64() + 1.0;
    assert!((lines.len() as f64) <= allowed, "{} lines logged; the module's rate allows {allowed:.0}", lines.len());
    assert!(dropped >= 20000 - lines.len() as u64, "what was not logged is counted as dropped ({dropped})");
    assert!(log.contains("dropping"), "the log says that lines are being dropped");
    for line in log.lines() {
        assert!(!line.starts_with(FORGED), "a guest forged a log line of its own: {line:.200}");
        assert!(!line.contains('\u{1b}') && !line.contains('\r'), "a control character reached the log: {line:.200}");
        assert!(line.len() <= 8192, "a line of {} bytes reached the log", line.len());
    }
    assert!(lines.iter().any(|l| l.contains(FORGED)), "the guest's text is kept, made harmless");
}

#[test]
fn one_call_logs_at_most_its_budget_of_lines_whatever_the_rate() {
    // A module allowed any rate: the per-call budget still holds.
    let limits = Limits { log_lines_per_second: 1_000_000, log_burst: 1_000_000, ..Limits::default() };
    let (log, _, dropped) = reconcile(serde_json::json!({"mode": "log", "lines": 5000, "size": 10}), limits);
    let lines = guest_lines(&log);
    eprintln!("5000 short messages in one call: {} logged, {dropped} dropped", lines.len());
    assert!(lines.len() <= 1000, "{} lines from one call; the budget is 1000", lines.len());
    assert_eq!(dropped, 5000 - lines.len() as u64, "every line over the budget is counted");
}
