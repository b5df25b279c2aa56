//! The threads webhook guest calls run on: kept between calls, never more
//! than the calls in flight at once (which `--webhook-max-concurrent`
//! bounds), and never tokio's blocking pool, so a flood of admission or
//! conversion calls cannot take the threads of reconciles and module loads.
//!
//! A thread per call cost 30–60 µs to spawn, and a scheduler tick at p99 on
//! a busy machine (`cargo xtask bench admission`, docs/BENCHMARKS.md): a
//! call now takes an idle thread if there is one, else starts one that
//! stays.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

struct Threads {
    jobs: Mutex<Sender<Job>>,
    queue: Arc<Mutex<Receiver<Job>>>,
    /// Threads waiting for a job and not yet promised one.
    idle: Arc<AtomicUsize>,
    started: AtomicUsize,
}

fn threads() -> &'static Threads {
    static THREADS: OnceLock<Threads> = OnceLock::new();
    THREADS.get_or_init(|| {
        let (tx, rx) = channel();
        Threads {
            jobs: Mutex::new(tx),
            queue: Arc::new(Mutex::new(rx)),
            idle: Arc::new(AtomicUsize::new(0)),
            started: AtomicUsize::new(0),
        }
    })
}

/// Run `job` on a webhook thread: an idle one (promised to this job before
/// it is queued, so no job waits behind another), else a new one that runs
/// it and then stays.
///
/// # Errors
/// When no thread could be started (the job is dropped).
pub(super) fn run(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let t = threads();
    let job: Job = Box::new(job);
    if t.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok() {
        let sent = t.jobs.lock().unwrap_or_else(|p| p.into_inner()).send(job);
        // The receiver lives in the static: sending cannot fail.
        debug_assert!(sent.is_ok());
        return Ok(());
    }
    let (queue, idle) = (t.queue.clone(), t.idle.clone());
    std::thread::Builder::new().name("operon-webhook".into()).spawn(move || {
        let mut job = Some(job);
        loop {
            if let Some(job) = job.take() {
                // A panicking call loses its own answer (its caller hears
                // that it did not complete), not the thread.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
            idle.fetch_add(1, Ordering::AcqRel);
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
            match next {
                Ok(next) => job = Some(next),
                Err(_) => return,
            }
        }
    })?;
    t.started.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// How many webhook threads were started in this process.
#[cfg(test)]
fn started() -> usize {
    threads().started.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::Duration;

    /// Calls one after another reuse threads; calls at once each get one
    /// (none waits behind another: all four must run together to pass the
    /// barrier).
    #[test]
    fn a_call_should_take_an_idle_thread_and_start_one_only_when_none_is() {
        let (tx, rx) = channel();
        let mut sequential = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let tx = tx.clone();
            run(move || tx.send(format!("{:?}", std::thread::current().id())).unwrap()).unwrap();
            sequential.insert(rx.recv_timeout(Duration::from_secs(5)).unwrap());
            // The thread is idle again once it counted itself so.
            while threads().idle.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
        }
        // Other tests of this process may take idle threads meanwhile.
        assert!(sequential.len() < 20, "no thread was reused: {} threads", sequential.len());
        assert!(started() >= 1);

        let together = 4;
        let barrier = Arc::new(Barrier::new(together));
        for _ in 0..together {
            let (barrier, tx) = (barrier.clone(), tx.clone());
            run(move || {
                barrier.wait();
                tx.send(format!("{:?}", std::thread::current().id())).unwrap();
            })
            .unwrap();
        }
        let ids: std::collections::BTreeSet<_> =
            (0..together).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
        assert_eq!(ids.len(), together);
    }
}
