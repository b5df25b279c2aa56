//! The generic machinery with a scripted reconcile, under virtual time.

use super::*;
use std::collections::HashMap;
use tokio::sync::mpsc;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(&'static str);

/// What the scripted reconcile answers for a key, and what it saw.
#[derive(Default)]
struct Script {
    answers: Mutex<HashMap<String, Vec<Result<Action, (Retry, &'static str)>>>>,
    calls: Mutex<Vec<(String, u32)>>,
    /// Reconciles of this key take this long.
    slow: Mutex<Option<(String, Duration)>>,
    /// Every key without an answer of its own fails terminally.
    all_terminal: std::sync::atomic::AtomicBool,
}

impl Reconcile for Script {
    type Key = String;
    type Error = Failed;

    async fn reconcile(&self, key: &String, ctx: &Context) -> Result<Action, Failed> {
        self.calls.lock().unwrap().push((key.clone(), ctx.attempt));
        let slow = self.slow.lock().unwrap().clone();
        if let Some((k, d)) = slow
            && k == *key
        {
            tokio::time::sleep(d).await;
        }
        let next = {
            let mut answers = self.answers.lock().unwrap();
            let queue = answers.entry(key.clone()).or_default();
            if !queue.is_empty() {
                queue.remove(0)
            } else if self.all_terminal.load(std::sync::atomic::Ordering::Relaxed) {
                Err((Retry::Never, "terminal"))
            } else {
                Ok(Action::Done)
            }
        };
        next.map_err(|(_, why)| Failed(why))
    }

    fn error_policy(&self, error: &Failed) -> Retry {
        match error.0 {
            "terminal" => Retry::Never,
            "stopped" => Retry::BackoffFrom(Duration::from_secs(1)),
            _ => Retry::Backoff,
        }
    }
}

impl Script {
    fn answer(&self, key: &str, answers: Vec<Result<Action, (Retry, &'static str)>>) {
        self.answers.lock().unwrap().insert(key.into(), answers);
    }

    fn calls(&self, key: &str) -> Vec<u32> {
        self.calls.lock().unwrap().iter().filter(|(k, _)| k == key).map(|(_, a)| *a).collect()
    }
}

/// A running controller fed by a channel.
fn start(config: Config) -> (Controller<Script>, mpsc::UnboundedSender<String>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let controller = Controller::new(
        "test",
        Arc::new(Script::default()),
        vec![Trigger::channel(rx)],
        config,
        Arc::new(Metrics::new()),
    );
    let c = controller.clone();
    let task = tokio::spawn(async move { c.run(std::future::pending(), Fence::open()).await });
    (controller, tx, task)
}

async fn settle() {
    // Let spawned tasks run; virtual time does not move by itself.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_sent_many_times_while_waiting_should_be_reconciled_once() {
    let (c, tx, task) = start(Config::default());
    for _ in 0..5 {
        tx.send("a".into()).unwrap();
    }
    settle().await;
    assert_eq!(c.reconciler().calls("a"), vec![0]);
    assert_eq!(c.stats().reconciles, 1);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_failure_should_come_back_with_backoff_and_count_attempts() {
    let (c, tx, task) = start(Config { backoff_base: Duration::from_millis(100), ..Config::default() });
    c.reconciler().answer("a", vec![Err((Retry::Backoff, "boom")), Err((Retry::Backoff, "boom"))]);
    tx.send("a".into()).unwrap();
    settle().await;
    assert_eq!(c.reconciler().calls("a"), vec![0], "not retried before the backoff");
    tokio::time::advance(Duration::from_millis(101)).await;
    settle().await;
    assert_eq!(c.reconciler().calls("a"), vec![0, 1]);
    tokio::time::advance(Duration::from_millis(201)).await;
    settle().await;
    assert_eq!(c.reconciler().calls("a"), vec![0, 1, 2], "the second retry waits twice as long");
    let stats = c.stats();
    assert_eq!((stats.reconciles, stats.errors), (3, 2));
    assert_eq!(stats.last_error.map(|e| e.to_string()).as_deref(), Some("boom"));
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_terminal_failure_should_wait_for_a_change_or_retry_terminal() {
    let (c, tx, task) = start(Config::default());
    c.reconciler().answer("a", vec![Err((Retry::Never, "terminal"))]);
    tx.send("a".into()).unwrap();
    settle().await;
    tokio::time::advance(Duration::from_secs(3600)).await;
    settle().await;
    assert_eq!(c.reconciler().calls("a"), vec![0], "never retried by itself");
    // What the reconcile depends on changed (a new module version).
    c.retry_terminal();
    settle().await;
    assert_eq!(c.reconciler().calls("a"), vec![0, 0], "retried, as a new attempt");
    c.retry_terminal();
    settle().await;
    assert_eq!(c.reconciler().calls("a").len(), 2, "it succeeded: nothing left to retry");
    task.abort();
}

/// The keys kept for `retry_terminal` are bounded; past the bound the
/// oldest failures are forgotten, and the newest kept.
#[tokio::test(start_paused = true)]
async fn past_the_bound_the_oldest_terminal_failures_should_be_forgotten_not_the_newest() {
    let (c, tx, task) = start(Config::default());
    c.reconciler().all_terminal.store(true, std::sync::atomic::Ordering::Relaxed);
    let keys = 100_001;
    for i in 0..keys {
        tx.send(format!("k{i}")).unwrap();
        // One by one, so the failures come in this order.
        while c.stats().reconciles <= i as u64 {
            tokio::task::yield_now().await;
        }
    }
    c.reconciler().all_terminal.store(false, std::sync::atomic::Ordering::Relaxed);
    c.retry_terminal();
    while c.queued() > 0 {
        tokio::task::yield_now().await;
    }
    settle().await;
    assert_eq!(c.reconciler().calls(&format!("k{}", keys - 1)).len(), 2, "the newest failure is retried");
    assert_eq!(c.reconciler().calls("k0").len(), 1, "the oldest failure is forgotten");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_stopped_call_should_back_off_from_its_own_base() {
    let (c, tx, task) = start(Config { backoff_base: Duration::from_millis(5), ..Config::default() });
    c.reconciler().answer("a", vec![Err((Retry::BackoffFrom(Duration::from_secs(1)), "stopped"))]);
    tx.send("a".into()).unwrap();
    settle().await;
    tokio::time::advance(Duration::from_millis(500)).await;
    settle().await;
    assert_eq!(c.reconciler().calls("a").len(), 1, "not after 5 ms: a second at least");
    tokio::time::advance(Duration::from_millis(501)).await;
    settle().await;
    assert_eq!(c.reconciler().calls("a").len(), 2);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn requeue_after_should_bring_the_key_back() {
    let (c, tx, task) = start(Config { requeue_qps: 0.0, ..Config::default() });
    c.reconciler().answer("a", vec![Ok(Action::RequeueAfter(Duration::from_secs(30)))]);
    tx.send("a".into()).unwrap();
    settle().await;
    tokio::time::advance(Duration::from_secs(29)).await;
    settle().await;
    assert_eq!(c.reconciler().calls("a").len(), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(c.reconciler().calls("a"), vec![0, 0], "a requeue is not a retry");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_past_its_deadline_should_fail_as_a_timeout_and_be_retried() {
    let (c, tx, task) = start(Config {
        reconcile_timeout: Duration::from_secs(1),
        backoff_base: Duration::from_millis(10),
        ..Config::default()
    });
    *c.reconciler().slow.lock().unwrap() = Some(("a".into(), Duration::from_secs(5)));
    tx.send("a".into()).unwrap();
    settle().await;
    tokio::time::advance(Duration::from_millis(1001)).await;
    settle().await;
    let stats = c.stats();
    assert_eq!(stats.errors, 1);
    assert!(matches!(stats.last_error.as_deref(), Some(Error::Timeout { .. })), "{stats:?}");
    tokio::time::advance(Duration::from_millis(20)).await;
    settle().await;
    assert_eq!(c.reconciler().calls("a"), vec![0, 1], "retried with backoff");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn keys_enqueued_while_not_running_should_wait_for_the_next_run() {
    let (tx, rx) = mpsc::unbounded_channel();
    let c = Controller::new(
        "test",
        Arc::new(Script::default()),
        vec![Trigger::channel(rx)],
        Config::default(),
        Arc::new(Metrics::new()),
    );
    tx.send("a".to_string()).unwrap();
    c.enqueue("ignored".into()); // not running: nothing to add to
    let run = c.clone();
    let task = tokio::spawn(async move { run.run(std::future::pending(), Fence::open()).await });
    settle().await;
    assert_eq!(c.reconciler().calls("a").len(), 1);
    assert!(c.reconciler().calls("ignored").is_empty());
    task.abort();
}
