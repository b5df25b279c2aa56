//! The guest-time budget of one controller: how much of a CPU its guest
//! calls may use, over time.
//!
//! A call's deadline bounds one call, the queue's buckets bound how often a
//! parent comes back; neither bounds the product. A guest that loops until
//! its deadline on every parent (or takes 900 ms on each of 10 000 parents)
//! would keep a core busy for as long as it has parents, taken from the
//! neighbours and the API server on the same node. So each controller
//! spends from a budget of guest seconds, refilled at `cpu` seconds per
//! second and holding at most `burst` (a token bucket in seconds): a call
//! starts only when the budget is not in debt, and its time is charged when
//! it returns. A controller in debt waits — its keys stay queued, nothing
//! is lost — until the debt is repaid.
//!
//! Workers of one controller are admitted one by one: each admission
//! charges an estimate of the call (the recent average) at once, and the
//! call's real time replaces it when it returns. Without that, every worker
//! waiting for the same debt would start together once it is repaid, and
//! overshoot by a call each. Before any call has returned, the estimate is
//! the worst case a call may take (its deadline): a new controller with 64
//! workers starts a few calls, not 64 at once — and the workers it turned
//! away look again as soon as a call settles ([`Budget::wait`]).
//!
//! The host's own budget (`--max-guest-cpu-total`) is one more [`Budget`],
//! shared by every controller: a call waits for both. A plugin's admission
//! and conversion calls spend a [`Budget`] of their own, of the same size,
//! so that reviews anyone may send never put its reconciles in debt.
//!
//! The charge is the call's wall time on its blocking thread (the shadow
//! candidate's included): on a busy node a little more than its CPU time,
//! never less.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A controller's guest-time budget. `Sync`: its workers share it.
#[derive(Debug)]
pub struct Budget {
    /// Guest seconds per second (a share of one CPU).
    cpu: f64,
    /// Most seconds saved up.
    burst: f64,
    state: Mutex<State>,
    /// Told when a call settles: workers waiting on an estimate (the worst
    /// case, before the first call returned) look again at once.
    settled: tokio::sync::Notify,
}

#[derive(Debug)]
struct State {
    /// Seconds available (negative: in debt).
    balance: f64,
    at: Instant,
    /// Recent average of a call, charged on admission (until a call has
    /// returned: the worst case).
    estimate: f64,
    /// Whether `estimate` comes from calls that returned.
    calibrated: bool,
    /// When a call last had to wait.
    last_wait: Option<Instant>,
}

impl Budget {
    /// A budget of `cpu` guest seconds per second, saving up to `burst`,
    /// whose calls may each take up to `longest` (charged on admission until
    /// calls have returned); `None` when `cpu` is not positive (no limit).
    pub fn new(cpu: f64, burst: Duration, longest: Duration) -> Option<Budget> {
        (cpu > 0.0 && cpu.is_finite()).then(|| Budget {
            cpu,
            burst: burst.as_secs_f64(),
            state: Mutex::new(State {
                balance: burst.as_secs_f64(),
                at: Instant::now(),
                estimate: longest.as_secs_f64(),
                calibrated: false,
                last_wait: None,
            }),
            settled: tokio::sync::Notify::new(),
        })
    }

    /// Wait out `wait`, or less: until a call settles, when the balance
    /// may have come back (a first call charged its deadline up front and
    /// returned in milliseconds), and at most a second (a settling missed
    /// between the refusal and this wait costs no more).
    pub async fn wait(&self, wait: Duration) {
        tokio::select! {
            () = tokio::time::sleep(wait.min(Duration::from_secs(1))) => {}
            () = self.settled.notified() => {}
        }
    }

    /// Admit a call at `now` when the budget is not in debt, charging the
    /// estimate of a call; otherwise, how long to wait before asking again.
    pub fn admit_at(self: &Arc<Self>, now: Instant) -> Result<Ticket, Duration> {
        let mut s = self.lock();
        self.refill(&mut s, now);
        if s.balance < 0.0 {
            s.last_wait = Some(now);
            return Err(Duration::from_secs_f64(-s.balance / self.cpu));
        }
        let estimate = s.estimate;
        s.balance -= estimate;
        Ok(Ticket { budget: self.clone(), estimate, settled: false })
    }

    /// Admit a call now (see [`Budget::admit_at`]).
    pub fn admit(self: &Arc<Self>) -> Result<Ticket, Duration> {
        self.admit_at(Instant::now())
    }

    fn settle(&self, estimate: f64, used: Option<Duration>, now: Instant) {
        let mut s = self.lock();
        self.refill(&mut s, now);
        s.balance += estimate;
        if let Some(used) = used {
            let used = used.as_secs_f64();
            s.balance -= used;
            s.estimate = if s.calibrated { 0.8 * s.estimate + 0.2 * used } else { used };
            s.calibrated = true;
        }
        drop(s);
        self.settled.notify_waiters();
    }

    /// Whether a call had to wait within `window` before now.
    pub fn throttled_within(&self, window: Duration) -> bool {
        self.lock().last_wait.is_some_and(|at| at.elapsed() <= window)
    }

    /// The share of a CPU this budget allows.
    pub fn cpu(&self) -> f64 {
        self.cpu
    }

    fn refill(&self, s: &mut State, now: Instant) {
        let elapsed = now.saturating_duration_since(s.at).as_secs_f64();
        s.balance = (s.balance + elapsed * self.cpu).min(self.burst);
        s.at = s.at.max(now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A CPU quantity as Kubernetes writes it: `250m`, `0.5`, `1`. `0` means
/// no limit.
pub fn parse_cpu(text: &str) -> Option<f64> {
    let cores = match text.strip_suffix('m') {
        Some(milli) => milli.parse::<u32>().ok()? as f64 / 1000.0,
        None => text.parse::<f64>().ok()?,
    };
    (cores.is_finite() && cores >= 0.0).then_some(cores)
}

/// An admitted call. [`Ticket::charge`] it with the call's time; dropped
/// uncharged (the reconcile ended before calling the guest), its estimate
/// is given back.
#[derive(Debug)]
#[must_use = "an admitted call is charged with its time"]
pub struct Ticket {
    budget: Arc<Budget>,
    estimate: f64,
    settled: bool,
}

impl Ticket {
    /// Charge the call's time `used`, at `now`.
    pub fn charge_at(mut self, used: Duration, now: Instant) {
        self.settled = true;
        self.budget.settle(self.estimate, Some(used), now);
    }

    /// Charge the call's time `used`.
    pub fn charge(self, used: Duration) {
        self.charge_at(used, Instant::now());
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.settled {
            self.budget.settle(self.estimate, None, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn budget(cpu: f64, burst: Duration) -> Arc<Budget> {
        Arc::new(Budget::new(cpu, burst, Duration::ZERO).unwrap())
    }

    #[test]
    fn calls_should_not_wait_while_the_burst_lasts() {
        let b = budget(0.25, 2000 * MS);
        let t0 = Instant::now();
        b.admit_at(t0).unwrap().charge_at(1000 * MS, t0);
        b.admit_at(t0).unwrap().charge_at(1000 * MS, t0);
        assert!(b.admit_at(t0).is_ok(), "exactly spent is not debt");
        assert!(!b.throttled_within(Duration::from_secs(60)));
    }

    #[test]
    fn a_controller_in_debt_should_wait_until_it_is_repaid() {
        let b = budget(0.25, 1000 * MS);
        let t0 = Instant::now();
        b.admit_at(t0).unwrap().charge_at(2000 * MS, t0); // a 2 s call on a 1 s burst: 1 s in debt
        assert_eq!(b.admit_at(t0).unwrap_err(), 4000 * MS, "1 s of debt at a quarter CPU");
        assert_eq!(b.admit_at(t0 + 3000 * MS).unwrap_err(), 1000 * MS);
        assert!(b.admit_at(t0 + 4000 * MS).is_ok());
        assert!(b.throttled_within(Duration::from_secs(60)));
    }

    #[test]
    fn waiting_workers_should_be_admitted_one_by_one() {
        let b = budget(0.25, 1000 * MS);
        let t0 = Instant::now();
        b.admit_at(t0).unwrap().charge_at(1500 * MS, t0); // 0.5 s in debt; a call costs ~1.5 s
        let repaid = t0 + 2000 * MS;
        let first = b.admit_at(repaid).expect("the first waiting worker goes");
        assert!(b.admit_at(repaid).is_err(), "the others wait for the estimate of the first");
        drop(first); // the reconcile ended before calling the guest: estimate given back
        assert!(b.admit_at(repaid).is_ok());
    }

    #[test]
    fn a_looping_guest_should_get_its_share_and_no_more() {
        // Four workers; each call burns a 1 s deadline; a quarter CPU.
        let b = budget(0.25, 2000 * MS);
        let start = Instant::now();
        let mut workers = [start; 4];
        let mut burned = Duration::ZERO;
        while workers.iter().min().unwrap() < &(start + Duration::from_secs(200)) {
            let w = workers.iter_mut().min().unwrap();
            match b.admit_at(*w) {
                Ok(ticket) => {
                    *w += 1000 * MS;
                    ticket.charge_at(1000 * MS, *w);
                    burned += 1000 * MS;
                }
                Err(wait) => *w += wait,
            }
        }
        let share = burned.as_secs_f64() / 200.0;
        assert!((0.24..=0.29).contains(&share), "share of a CPU: {share}");
    }

    #[test]
    fn a_new_controller_should_start_a_few_calls_not_every_worker() {
        // 64 workers, a quarter CPU saving 2 s, calls that may take 1 s.
        let b = Arc::new(Budget::new(0.25, 2000 * MS, 1000 * MS).unwrap());
        let t0 = Instant::now();
        let admitted: Vec<Ticket> = (0..64).map_while(|_| b.admit_at(t0).ok()).collect();
        assert_eq!(admitted.len(), 3, "2 s saved, 1 s charged per call until one returns (the third goes at 0)");
        // They return in 5 ms each: the estimate is the real cost from then on.
        for t in admitted {
            t.charge_at(5 * MS, t0);
        }
        let more: Vec<Ticket> = (0..64).map_while(|_| b.admit_at(t0).ok()).collect();
        assert_eq!(more.len(), 64, "calibrated: cheap calls all go");
    }

    /// Found by `cargo xtask bench egress`: a new controller with a 35 s
    /// deadline charges its first call 35 s up front; the workers it turned
    /// away slept the whole computed wait (140 s at 250m) although the first
    /// call returned in milliseconds.
    #[tokio::test]
    async fn waiting_workers_should_look_again_when_a_call_settles() {
        let b = Arc::new(Budget::new(0.25, Duration::from_secs(2), Duration::from_secs(35)).unwrap());
        let first = b.admit().unwrap();
        let wait = b.admit().unwrap_err();
        assert!(wait > Duration::from_secs(100), "{wait:?}");
        let waiting = tokio::spawn({
            let b = b.clone();
            async move {
                let started = Instant::now();
                loop {
                    match b.admit() {
                        Ok(_) => return started.elapsed(),
                        Err(wait) => b.wait(wait).await,
                    }
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        first.charge(Duration::from_millis(5));
        let waited = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
        assert!(waited < Duration::from_secs(2), "the worker slept {waited:?} after the first call settled");
    }

    #[test]
    fn savings_should_be_capped_at_the_burst() {
        let b = budget(0.5, 1000 * MS);
        let later = Instant::now() + Duration::from_secs(3600);
        b.admit_at(later).unwrap().charge_at(1500 * MS, later);
        assert_eq!(b.admit_at(later).unwrap_err(), 1000 * MS, "an idle hour saves 1 s, not 1800");
    }

    #[test]
    fn cpu_quantities_should_parse_as_kubernetes_writes_them() {
        assert_eq!(parse_cpu("250m"), Some(0.25));
        assert_eq!(parse_cpu("1"), Some(1.0));
        assert_eq!(parse_cpu("0.5"), Some(0.5));
        assert_eq!(parse_cpu("0"), Some(0.0));
        for bad in ["", "m", "-1", "1.5m", "inf", "NaN", "two"] {
            assert_eq!(parse_cpu(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn no_budget_should_mean_no_limit() {
        assert!(Budget::new(0.0, Duration::from_secs(1), MS).is_none());
        assert!(Budget::new(f64::NAN, Duration::from_secs(1), MS).is_none());
    }
}
