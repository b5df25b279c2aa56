//! The recorder's names, budgets and drops.

use super::*;

fn reference(name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("WebApp".into()),
        name: Some(name.into()),
        namespace: Some("shop".into()),
        uid: Some("u1".into()),
        ..ObjectReference::default()
    }
}

#[test]
fn distinct_messages_should_get_distinct_names_and_repeats_the_same() {
    let r = reference("web");
    let a = event_name(&r, EventType::Normal, "Scaled", "Reconcile", "scaled to 2", "operon/webapp");
    let b = event_name(&r, EventType::Normal, "Scaled", "Reconcile", "scaled to 3", "operon/webapp");
    let again = event_name(&r, EventType::Normal, "Scaled", "Reconcile", "scaled to 2", "operon/webapp");
    assert_ne!(a, b, "same reason, different message: two events");
    assert_eq!(a, again, "a true repeat: one event, its series counts");
    assert!(a.starts_with("web."));
    let warning = event_name(&r, EventType::Warning, "Scaled", "Reconcile", "scaled to 2", "operon/webapp");
    assert_ne!(a, warning);
}

#[test]
fn reporting_controllers_should_be_qualified_names() {
    assert_eq!(reporting_controller("webapp"), "operon.dev/webapp");
    assert_eq!(reporting_controller("team-a/webapp"), "operon.dev/team-a.webapp");
    let long = reporting_controller(&format!("{}/{}", "n".repeat(60), "x".repeat(60)));
    let name = long.strip_prefix("operon.dev/").unwrap();
    assert!(name.len() <= 63 && name.ends_with(|c: char| c.is_ascii_alphanumeric()), "{long}");
}

#[test]
fn drops_should_be_reported_at_once_then_at_most_every_30s_with_the_count() {
    let mut drops = Drops::default();
    let t0 = Instant::now();
    assert_eq!(drops.note(Dropped::ControllerBudget, t0), Some(1), "the first drop is said at once");
    for i in 1..=9 {
        assert_eq!(drops.note(Dropped::ControllerBudget, t0 + Duration::from_secs(i)), None);
    }
    assert_eq!(drops.note(Dropped::Forbidden, t0), Some(1), "each reason on its own");
    assert_eq!(drops.note(Dropped::ControllerBudget, t0 + REPORT_EVERY), Some(10), "then the count since");
}

#[test]
fn a_module_controllers_objects_should_each_hold_a_whole_outcome() {
    let budget = Budget::for_controller(50, Budget::DEFAULT_QPS, Budget::DEFAULT_BURST);
    assert!(budget.object_burst >= 50.0 + Budget::HOST_EVENTS as f64, "{budget:?}");
    assert!(budget.burst >= budget.object_burst, "one object's outcome fits the controller's burst");
}

#[tokio::test]
async fn a_controllers_bucket_should_refuse_past_its_burst_and_refill_at_its_rate() {
    crate::install_crypto_provider();
    let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let budget = Budget { object_burst: 25.0, qps: 1000.0, burst: 3.0 };
    let recorder = Recorder::new(client, "c", "i").with_budget(budget, Arc::new(Metrics::new()), "c");
    assert!((0..3).all(|_| recorder.take_controller_token()));
    assert!(!recorder.take_controller_token(), "past its burst");
    std::thread::sleep(Duration::from_millis(5));
    assert!(recorder.take_controller_token(), "refilled at 1000/s");
    let unbounded = Recorder::new(
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap(),
        "c",
        "i",
    );
    assert!((0..1000).all(|_| unbounded.take_controller_token()), "no controller budget by default");
}

#[test]
fn long_names_and_messages_should_be_cut_to_what_the_api_server_takes() {
    let r = reference(&"x".repeat(253));
    assert!(event_name(&r, EventType::Normal, "R", "A", "m", "c").len() <= 253);
    let note = truncate(&"é".repeat(800), MAX_NOTE);
    assert!(note.len() <= MAX_NOTE + '…'.len_utf8());
}
