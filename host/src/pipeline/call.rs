//! The guest call of one reconcile: the module (and a shadow candidate)
//! called on the reconcile's task (the guest yields at every epoch tick),
//! with the reads, the outbound calls and the
//! CPU budget it is charged; the call recorded when sampled (`--record`),
//! and refused outbound calls told as an `EgressDenied` event.

use super::{Error, Pipeline, Version, budget, parent, record};
use crate::cache::{CachedObject, ObjectKey};
use crate::contract::{Failed, Outcome, Request};
use crate::controller::Context;
use crate::runtime::CallError;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a guest call gave: the sandbox's verdict around the guest's own.
pub(super) type Called = Result<Result<Outcome, Failed>, CallError>;

impl Pipeline {
    #[allow(clippy::too_many_arguments, reason = "one reconcile's inputs, passed once")]
    pub(super) async fn call_guest(
        &self,
        active: &Version,
        candidate: Option<Version>,
        key: &ObjectKey,
        parent: &Arc<CachedObject>,
        request: Request,
        finalizing: bool,
        ctx: &Context,
        tickets: Vec<budget::Ticket>,
    ) -> Result<Called, Error> {
        let fence = &ctx.fence;
        let call_started = Instant::now();
        let egress = self.egress.as_ref().map(|p| p.call(ctx.fence.clone()));
        // A sampled reconcile is recorded as a fixture (`--record`).
        let recording = self.config.record.as_ref().filter(|r| r.sample(parent)).map(|r| (r.clone(), request.clone()));
        let mut remembered: Option<Arc<record::Remembering>> = None;
        let call = {
            let module = active.module.clone();
            let reader: Arc<dyn crate::runtime::ObjectReader> =
                Arc::new(active.reads.reader(key.namespace.clone(), &self.config.scope));
            let reader = match &recording {
                Some(_) => {
                    let r = Arc::new(record::Remembering::new(reader));
                    remembered = Some(r.clone());
                    r
                }
                None => reader,
            };
            // The shadow candidate answers the same parent with its own
            // reads (its manifest may declare other kinds); its answer is
            // compared, never applied.
            let shadow = candidate.map(|c| {
                let request = if Arc::ptr_eq(&c.reads, &active.reads) {
                    request.clone()
                } else {
                    let children = c.reads.children(parent);
                    let rates = !parent::speaks_0_1(&c.module);
                    // A candidate whose reads pass the bound is compared
                    // on nothing: its request is the live one's.
                    c.reads
                        .request(
                            parent,
                            &children,
                            finalizing,
                            ctx.attempt,
                            &self.config.scope,
                            rates,
                            self.config.max_related_bytes,
                        )
                        .unwrap_or_else(|_| request.clone())
                };
                let reader: Arc<dyn crate::runtime::ObjectReader> =
                    Arc::new(c.reads.reader(key.namespace.clone(), &self.config.scope));
                (c.module, request, reader)
            });
            let admitted = self.admit(&module).await;
            self.metrics.host_usage(module.gate_usage());
            // The guest runs on this task, yielding at every epoch tick; its
            // CPU is the time spent in its polls (not its waits for a worker
            // or on egress), charged even when the reconcile is cancelled.
            let cpu = GuestCpu::new(tickets);
            let live_egress = egress.clone().map(|c| c as Arc<dyn crate::runtime::Egress>);
            let live = cpu.timed(admitted.reconcile_async(&request, reader, live_egress)).await;
            // The live call's pass went back with it: a task never holds
            // one pass while it waits for another.
            let shadow = match shadow {
                None => None,
                Some((c, request, reader)) => {
                    // A shadow candidate calls nothing outside: it is
                    // answered from the live version's exchanges.
                    let replay = egress.as_ref().map(|c| {
                        Arc::new(crate::contract::egress::Replay::new(c.exchanges())) as Arc<dyn crate::runtime::Egress>
                    });
                    let admitted = c.admit().await;
                    let answer = cpu.timed(admitted.reconcile_async(&request, reader, replay)).await;
                    Some((c.info().digest.clone(), answer))
                }
            };
            drop(cpu);
            self.metrics.host_usage(module.gate_usage());
            (live, shadow)
        };
        self.metrics.guest_called(&self.name, call_started.elapsed());
        let call = {
            let (live, shadow) = call;
            if let Some((digest, answer)) = shadow {
                self.compare_shadow(key, &digest, &live, &answer);
            }
            live
        };
        if let Some((recorder, request)) = &recording {
            let read = remembered.as_ref().map(|r| r.taken()).unwrap_or_default();
            let exchanges = egress.as_ref().map(|c| c.exchanges()).unwrap_or_default();
            match recorder.write(&self.name, &active.module.info().digest, request, read, exchanges, &call) {
                Ok(path) => tracing::debug!("recorded as {}", path.display()),
                Err(e) => tracing::warn!("the reconcile was not recorded: {e}"),
            }
        }
        if let Some(refused) = egress.as_ref().map(|c| c.refused()).filter(|r| !r.is_empty()) {
            let more = if refused.len() > 1 { format!(" (and {} more)", refused.len() - 1) } else { String::new() };
            let message = format!("an outbound call was refused: {}{more}", refused[0]);
            self.applier.event(parent, true, "EgressDenied", &message, fence).await;
        }
        Ok(call)
    }
}

/// A reconcile's guest CPU: the time spent inside the polls of its guest
/// calls, charged to the budget's tickets when dropped (a cancelled
/// reconcile pays for what its guest ran).
struct GuestCpu {
    tickets: Vec<budget::Ticket>,
    nanos: AtomicU64,
}

impl GuestCpu {
    fn new(tickets: Vec<budget::Ticket>) -> GuestCpu {
        GuestCpu { tickets, nanos: AtomicU64::new(0) }
    }

    /// Await `call`, adding the time of each of its polls.
    async fn timed<F: Future>(&self, call: F) -> F::Output {
        let mut call = std::pin::pin!(call);
        std::future::poll_fn(|cx| {
            let started = Instant::now();
            let polled = call.as_mut().poll(cx);
            self.nanos.fetch_add(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
            polled
        })
        .await
    }
}

impl Drop for GuestCpu {
    fn drop(&mut self) {
        let used = Duration::from_nanos(self.nanos.load(Ordering::Relaxed));
        for t in self.tickets.drain(..) {
            t.charge(used);
        }
    }
}
