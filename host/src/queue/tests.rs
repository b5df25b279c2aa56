//! The queue's rules, one test each, in virtual time.

use super::*;
use crate::metrics::Metrics;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use tokio::time::{advance, timeout};

fn queue() -> Queue<&'static str> {
    Queue::new(Config::default())
}

/// A `get` that must not return anything within a (virtual) minute.
async fn assert_nothing(q: &Queue<&'static str>) {
    let got = timeout(Duration::from_secs(60), q.get()).await;
    assert!(got.is_err(), "expected no key, got {got:?}");
}

/// Awaits a spawned task, failing (instead of hanging) if it never ends.
async fn join<T: Debug>(task: tokio::task::JoinHandle<T>) -> T {
    timeout(Duration::from_secs(3600), task).await.expect("task ends within an hour").expect("task joins")
}

async fn next(q: &Queue<&'static str>) -> &'static str {
    timeout(Duration::from_secs(3600), q.get()).await.expect("a key within an hour").expect("queue not shut down")
}

#[tokio::test(start_paused = true)]
async fn queue_should_hand_out_a_key_once_however_often_it_is_added() {
    let q = queue();
    q.add("a");
    q.add("a");
    q.add("a");
    assert_eq!(q.len(), 1);
    assert_eq!(next(&q).await, "a");
    assert_nothing(&q).await;
}

#[tokio::test(start_paused = true)]
async fn queue_should_not_hand_out_a_key_twice() {
    let q = queue();
    q.add("a");
    assert_eq!(next(&q).await, "a");
    q.add("a");
    assert_eq!(q.len(), 0, "a key being processed is not waiting");
    assert_nothing(&q).await;
}

#[tokio::test(start_paused = true)]
async fn done_should_requeue_a_key_added_while_it_was_processed_once() {
    let q = queue();
    q.add("a");
    assert_eq!(next(&q).await, "a");
    q.add("a");
    q.add("a");
    q.done(&"a");
    assert_eq!(q.len(), 1);
    assert_eq!(next(&q).await, "a");
    q.done(&"a");
    assert_nothing(&q).await;
}

#[tokio::test(start_paused = true)]
async fn done_should_not_requeue_a_clean_key() {
    let q = queue();
    q.add("a");
    assert_eq!(next(&q).await, "a");
    q.done(&"a");
    q.done(&"a"); // a second done is ignored
    assert_nothing(&q).await;
    q.add("a");
    assert_eq!(next(&q).await, "a", "a done key can be added again");
}

#[tokio::test(start_paused = true)]
async fn queue_should_serve_keys_first_in_first_out() {
    let q = queue();
    for k in ["a", "b", "c"] {
        q.add(k);
    }
    q.add("a");
    assert_eq!([next(&q).await, next(&q).await, next(&q).await], ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn get_should_wake_when_a_key_is_added() {
    let q = queue();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    advance(Duration::from_secs(5)).await;
    q.add("a");
    assert_eq!(join(waiter).await, Some("a"));
}

#[tokio::test(start_paused = true)]
async fn two_workers_should_never_process_one_key_at_once() {
    let q = queue();
    q.add("a");
    let first = next(&q).await;
    let second = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    q.add("a");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!second.is_finished(), "the second worker must wait while the first holds the key");
    q.done(&first);
    assert_eq!(join(second).await, Some("a"));
}

#[tokio::test(start_paused = true)]
async fn low_priority_keys_should_be_served_after_normal_ones() {
    let q = queue();
    q.add_low_priority("x");
    q.add_low_priority("y");
    q.add("a");
    q.add("b");
    let order = [next(&q).await, next(&q).await, next(&q).await, next(&q).await];
    assert_eq!(order, ["a", "b", "x", "y"]);
}

#[tokio::test(start_paused = true)]
async fn low_priority_keys_should_be_served_when_no_normal_key_waits() {
    let q = queue();
    q.add_low_priority("x");
    assert_eq!(next(&q).await, "x");
    q.add("a");
    q.add_low_priority("y");
    q.add_low_priority("z");
    assert_eq!([next(&q).await, next(&q).await, next(&q).await], ["a", "y", "z"]);
}

#[tokio::test(start_paused = true)]
async fn a_normal_add_should_promote_a_waiting_low_key() {
    let q = queue();
    q.add_low_priority("x");
    q.add_low_priority("y");
    q.add_low_priority("z");
    q.add("a");
    q.add("y");
    assert_eq!(q.len(), 4, "promotion does not duplicate");
    let order = [next(&q).await, next(&q).await, next(&q).await, next(&q).await];
    assert_eq!(order, ["a", "y", "x", "z"]);
    assert_nothing(&q).await;
}

#[tokio::test(start_paused = true)]
async fn a_low_add_should_not_demote_a_waiting_normal_key() {
    let q = queue();
    q.add_low_priority("x");
    q.add("a");
    q.add_low_priority("a");
    assert_eq!([next(&q).await, next(&q).await], ["a", "x"]);
}

#[tokio::test(start_paused = true)]
async fn a_key_dirtied_at_normal_priority_should_come_back_at_normal_priority() {
    let q = queue();
    q.add_low_priority("x");
    assert_eq!(next(&q).await, "x");
    q.add_low_priority("x");
    q.add("x");
    q.add_low_priority("y");
    q.done(&"x");
    assert_eq!([next(&q).await, next(&q).await], ["x", "y"]);
}

#[tokio::test(start_paused = true)]
async fn add_after_should_hand_out_the_key_when_the_delay_has_passed() {
    let q = queue();
    let start = Instant::now();
    q.add_after("a", Duration::from_secs(10));
    assert_eq!(q.len(), 0);
    advance(Duration::from_secs(9)).await;
    assert_eq!(q.len(), 0, "not yet");
    assert_eq!(next(&q).await, "a");
    assert_eq!(start.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn add_after_should_wake_a_get_that_is_already_waiting() {
    let q = queue();
    let start = Instant::now();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    q.add_after("a", Duration::from_secs(3));
    assert_eq!(join(waiter).await, Some("a"));
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn add_after_should_keep_the_earlier_deadline() {
    let q = queue();
    let start = Instant::now();
    q.add_after("a", Duration::from_secs(10));
    q.add_after("a", Duration::from_secs(2));
    q.add_after("a", Duration::from_secs(5));
    assert_eq!(next(&q).await, "a");
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    q.done(&"a");
    assert_nothing(&q).await; // the 10 s and 5 s adds were superseded
}

#[tokio::test(start_paused = true)]
async fn add_after_should_dedup_with_a_waiting_key() {
    let q = queue();
    q.add("a");
    q.add_after("a", Duration::from_secs(1));
    advance(Duration::from_secs(2)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(next(&q).await, "a");
    assert_nothing(&q).await;
}

#[tokio::test(start_paused = true)]
async fn add_after_with_zero_delay_should_add_at_once() {
    let q = queue();
    q.add_after("a", Duration::ZERO);
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_should_back_off_exponentially_per_key() {
    let q = queue();
    let delays: Vec<_> = (0..4).map(|_| q.add_rate_limited("a")).collect();
    let ms = Duration::from_millis;
    assert_eq!(delays, [ms(5), ms(10), ms(20), ms(40)]);
    assert_eq!(q.num_requeues(&"a"), 4);
    assert_eq!(q.add_rate_limited("b"), ms(5), "backoff is per key");
    assert_eq!(q.num_requeues(&"b"), 1);
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_should_delay_the_key_by_its_backoff() {
    let q = queue();
    let start = Instant::now();
    let delay = q.add_rate_limited("a");
    assert_eq!(next(&q).await, "a");
    assert_eq!(start.elapsed(), delay);
}

#[tokio::test(start_paused = true)]
async fn backoff_should_be_capped() {
    let q = Queue::new(Config { max_delay: Duration::from_secs(1), ..Config::default() });
    let delays: Vec<_> = (0..12).map(|_| q.add_rate_limited("a")).collect();
    assert_eq!(delays[7], Duration::from_millis(640));
    assert_eq!(delays[8], Duration::from_secs(1), "5 ms × 2^8 = 1.28 s, capped");
    assert_eq!(delays[11], Duration::from_secs(1));

    let q = queue();
    let mut last = Duration::ZERO;
    for _ in 0..200 {
        last = q.add_rate_limited("a");
    }
    assert_eq!(last, Duration::from_secs(1000), "default cap, no overflow after many failures");
}

#[tokio::test(start_paused = true)]
async fn retries_should_draw_from_an_overall_bucket_of_10_per_second_burst_100() {
    let q = queue();
    // 100 distinct keys failing at once: the burst lets them through with
    // only their own backoff.
    let first: Vec<Duration> = (0..100).map(|i| q.add_rate_limited(format!("k{i}").leak() as &str)).collect();
    assert!(first.iter().all(|d| *d == Duration::from_millis(5)), "{first:?}");
    // The next ones wait for tokens at 10 per second, whatever their own backoff.
    assert_eq!(q.add_rate_limited("k100"), Duration::from_millis(100));
    assert_eq!(q.add_rate_limited("k101"), Duration::from_millis(200));
    // The bucket refills with time.
    advance(Duration::from_secs(60)).await;
    assert_eq!(q.add_rate_limited("k102"), Duration::from_millis(5));
}

#[tokio::test(start_paused = true)]
async fn a_zero_qps_should_turn_the_bucket_off() {
    let q = Queue::new(Config { qps: 0.0, ..Config::default() });
    for i in 0..500 {
        assert_eq!(q.add_rate_limited(format!("k{i}").leak() as &str), Duration::from_millis(5));
    }
}

#[tokio::test(start_paused = true)]
async fn requeue_after_should_be_unlimited_unless_a_requeue_bucket_is_set() {
    let q = queue();
    for i in 0..500 {
        assert_eq!(q.add_after_limited(format!("k{i}").leak() as &str, Duration::ZERO), Duration::ZERO);
    }
}

#[tokio::test(start_paused = true)]
async fn requeues_should_draw_from_their_own_bucket() {
    let q = Queue::new(Config { requeue_qps: 10.0, requeue_burst: 20, ..Config::default() });
    // The burst passes with the delays asked.
    for i in 0..20 {
        assert_eq!(
            q.add_after_limited(format!("k{i}").leak() as &str, Duration::from_millis(1)),
            Duration::from_millis(1)
        );
    }
    // Then one requeue per 100 ms, whatever was asked; a longer ask wins.
    assert_eq!(q.add_after_limited("k20", Duration::ZERO), Duration::from_millis(100));
    assert_eq!(q.add_after_limited("k21", Duration::ZERO), Duration::from_millis(200));
    assert_eq!(q.add_after_limited("k22", Duration::from_secs(5)), Duration::from_secs(5));
    // Retries have a bucket of their own: still at their backoff.
    assert_eq!(q.add_rate_limited("r"), Duration::from_millis(5));
    // And the requeued keys really wait that long.
    advance(Duration::from_millis(150)).await;
    let mut got = Vec::new();
    while let Some(k) = q.get().now_or_never().flatten() {
        got.push(k);
        q.done(&k);
    }
    assert!(got.contains(&"k20") && !got.contains(&"k21"), "{got:?}");
}

#[tokio::test(start_paused = true)]
async fn forget_should_reset_the_backoff() {
    let q = queue();
    q.add_rate_limited("a");
    q.add_rate_limited("a");
    q.forget(&"a");
    assert_eq!(q.num_requeues(&"a"), 0);
    assert_eq!(q.add_rate_limited("a"), Duration::from_millis(5));
}

#[tokio::test(start_paused = true)]
async fn shut_down_should_end_get_at_once() {
    let q = queue();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    q.add("a");
    q.add("b");
    q.add_after("c", Duration::from_secs(1));
    // The waiter may or may not have taken "a" already; "b" must be dropped.
    let taken = join(waiter).await;
    q.shut_down();
    assert!(q.is_shutting_down());
    assert_eq!(q.get().await, None);
    assert_eq!(q.len(), 0);
    q.add("d");
    assert_eq!(q.get().await, None, "adds after shutdown are ignored");
    if let Some(key) = taken {
        q.done(&key); // still accepted
    }
}

#[tokio::test(start_paused = true)]
async fn shut_down_should_wake_a_waiting_get() {
    let q = queue();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    q.shut_down();
    assert_eq!(join(waiter).await, None);
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_should_hand_out_waiting_keys_and_wait_for_done() {
    let q = queue();
    q.add("a");
    q.add("b");
    assert_eq!(next(&q).await, "a");
    q.add("a"); // dirty: comes back after done, even while draining
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    tokio::task::yield_now().await;
    q.add("c");
    assert_eq!(next(&q).await, "b");
    q.done(&"a");
    assert_eq!(next(&q).await, "a");
    q.done(&"b");
    assert!(!drain.is_finished(), "a is still being processed");
    q.done(&"a");
    join(drain).await;
    assert_eq!(q.get().await, None, "c was added after shutdown");
}

#[tokio::test(start_paused = true)]
async fn queue_should_record_its_metrics() {
    let metrics = Metrics::new();
    let q = Queue::new(Config { metrics: Some(metrics.workqueue("shop")), ..Config::default() });
    let wq = metrics.workqueue("shop");
    q.add("a");
    q.add("a");
    q.add("b");
    assert_eq!(wq.adds.get(), 2);
    assert_eq!(wq.depth.get(), 2);
    advance(Duration::from_secs(2)).await;
    assert_eq!(next(&q).await, "a");
    assert_eq!(wq.depth.get(), 1);
    assert_eq!(wq.queue_duration.get_sample_count(), 1);
    assert!((wq.queue_duration.get_sample_sum() - 2.0).abs() < 1e-6);

    advance(Duration::from_secs(10)).await;
    tokio::time::sleep(UNFINISHED_WORK_PERIOD).await; // let the refresher run
    let unfinished = wq.unfinished_work.get();
    assert!((10.0..=11.0).contains(&unfinished), "unfinished work {unfinished}");
    assert!((10.0..=11.0).contains(&wq.longest_running_processor.get()));

    q.done(&"a");
    assert_eq!(wq.work_duration.get_sample_count(), 1);
    assert!(wq.work_duration.get_sample_sum() >= 10.0);
    tokio::time::sleep(UNFINISHED_WORK_PERIOD).await;
    assert_eq!(wq.unfinished_work.get(), 0.0);

    q.add_rate_limited("c");
    q.add_after("d", Duration::from_secs(1));
    assert_eq!(wq.retries.get(), 2, "every delayed add counts, as in client-go");
}

#[tokio::test(start_paused = true)]
async fn run_workers_should_process_keys_in_parallel_but_each_key_alone() {
    let q: Queue<u32> = Queue::new(Config::default());
    let busy = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let (max_parallel, handled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (q, busy, max_parallel, handled) = (q.clone(), busy.clone(), max_parallel.clone(), handled.clone());
        move |key: u32| {
            let (q, busy, max_parallel, handled) = (q.clone(), busy.clone(), max_parallel.clone(), handled.clone());
            async move {
                {
                    let mut busy = busy.lock().expect("lock");
                    assert!(busy.insert(key), "key {key} handed to two workers at once");
                    max_parallel.fetch_max(busy.len(), AtomicOrdering::SeqCst);
                }
                q.add(key); // re-added while processing: must wait for done
                tokio::time::sleep(Duration::from_millis(10)).await;
                busy.lock().expect("lock").remove(&key);
                if handled.fetch_add(1, AtomicOrdering::SeqCst) + 1 >= 40 {
                    q.shut_down();
                }
            }
        }
    };
    for key in 0..4 {
        q.add(key);
    }
    let run = tokio::spawn(run_workers(q.clone(), 3, handler));
    timeout(Duration::from_secs(60), run).await.expect("workers stop on shutdown").expect("joins");
    assert_eq!(max_parallel.load(AtomicOrdering::SeqCst), 3);
    assert!(handled.load(AtomicOrdering::SeqCst) >= 40);
}

#[tokio::test(start_paused = true)]
async fn run_workers_should_retry_a_key_whose_handler_panicked() {
    let q: Queue<&'static str> = queue();
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (q, calls) = (q.clone(), calls.clone());
        move |key: &'static str| {
            let (q, calls) = (q.clone(), calls.clone());
            async move {
                if calls.fetch_add(1, AtomicOrdering::SeqCst) == 0 {
                    panic!("guest bug on {key}");
                }
                q.forget(&key);
                q.shut_down();
            }
        }
    };
    q.add("a");
    let start = Instant::now();
    timeout(Duration::from_secs(60), run_workers(q.clone(), 1, handler)).await.expect("workers stop");
    assert_eq!(calls.load(AtomicOrdering::SeqCst), 2);
    assert_eq!(start.elapsed(), Duration::from_millis(5), "retried after the first backoff step");
}

#[tokio::test(start_paused = true)]
async fn done_after_shut_down_should_not_requeue_a_dirty_key() {
    let q = queue();
    q.add("a");
    assert_eq!(next(&q).await, "a");
    q.add("a");
    q.shut_down();
    q.done(&"a");
    assert_eq!(q.len(), 0);
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_from_a_larger_base_should_double_from_it_and_share_the_failures() {
    let ms = Duration::from_millis;
    let q: Queue<&str> = Queue::new(Config { base_delay: ms(5), max_delay: ms(10_000), qps: 0.0, ..Config::default() });
    assert_eq!(q.add_rate_limited("a"), ms(5));
    assert_eq!(q.add_rate_limited_from("a", ms(1000)), ms(2000), "the second failure of the key");
    assert_eq!(q.add_rate_limited_from("a", ms(1000)), ms(4000));
    assert_eq!(q.add_rate_limited_from("b", ms(1)), ms(5), "never below the queue's own base");
    assert_eq!(q.num_requeues(&"a"), 3);
}
