//! The host-wide limits a reconcile may wait for, beside its controller's
//! own: the host's guest CPU budget (`--max-guest-cpu-total`) and the
//! runtime's gate of call slots and guest memory (`--max-guest-calls`,
//! `--max-guest-memory-total`). Waiting is counted per controller and
//! limit, and said once per episode.

use super::{Pipeline, budget};
use crate::runtime::Module;
use std::time::{Duration, Instant};

impl Pipeline {
    /// Wait while the host's guest CPU budget (every controller's calls
    /// together, `--max-guest-cpu-total`) is in debt.
    pub(super) async fn within_host_budget(&self) -> Option<budget::Ticket> {
        let budget = self.config.host_cpu.as_ref()?;
        loop {
            let wait = match budget.admit() {
                Ok(ticket) => return Some(ticket),
                Err(wait) => wait,
            };
            self.host_waited(HostLimit::Cpu, wait);
            budget.wait(wait).await;
        }
    }

    /// Wait for the host's gate to admit a call of `module`: a call slot and
    /// its memory (`--max-guest-calls`, `--max-guest-memory-total`).
    pub(super) async fn admit(&self, module: &Module) -> crate::runtime::Admitted {
        let _turn = self.at_gate.lock().await;
        match module.admissible() {
            Ok(()) => module.admit().await,
            Err(short) => {
                let started = Instant::now();
                let admitted = module.admit().await;
                let limit = match short {
                    crate::runtime::Shortage::Calls => HostLimit::Calls,
                    crate::runtime::Shortage::Memory => HostLimit::Memory,
                };
                self.host_waited(limit, started.elapsed());
                admitted
            }
        }
    }

    /// A reconcile waited `wait` for a host-wide limit: counted, and said
    /// once per episode (the Reconciler's Degraded condition says it too).
    fn host_waited(&self, limit: HostLimit, wait: Duration) {
        self.metrics.host_limited(&self.name, limit.as_str(), wait);
        let mut last = self.host_limited.lock().unwrap_or_else(|p| p.into_inner());
        let quiet = last.is_none_or(|(at, _)| at.elapsed() > Duration::from_secs(60));
        *last = Some((Instant::now(), limit));
        if quiet {
            tracing::warn!(
                controller = %self.name,
                limit = limit.as_str(),
                "guest calls wait for the host's shared {} ({}), which every plugin on this host shares; reconciles \
                 are late, nothing is lost",
                limit.describe(),
                limit.flag()
            );
        }
    }
}

/// A host-wide limit a reconcile may wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostLimit {
    /// Guest CPU, every controller together.
    Cpu,
    /// Guest calls in flight.
    Calls,
    /// Guest memory reserved.
    Memory,
}

impl HostLimit {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            HostLimit::Cpu => "cpu",
            HostLimit::Calls => "calls",
            HostLimit::Memory => "memory",
        }
    }

    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            HostLimit::Cpu => "--max-guest-cpu-total",
            HostLimit::Calls => "--max-guest-calls",
            HostLimit::Memory => "--max-guest-memory-total",
        }
    }

    /// What it bounds, in words.
    pub fn describe(self) -> &'static str {
        match self {
            HostLimit::Cpu => "guest CPU",
            HostLimit::Calls => "guest call slots",
            HostLimit::Memory => "guest memory",
        }
    }
}
