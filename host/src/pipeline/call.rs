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
        let egress = self.egress.call(ctx.fence.clone());
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
            let live_egress = egress.clone() as Arc<dyn crate::runtime::Egress>;
            let live = cpu.timed(admitted.reconcile_async(&request, reader, Some(live_egress))).await;
            // What the live call kept of its exchanges, handed on once and
            // shared: the shadow replays it, the recording writes it.
            let recorded = egress.recorded();
            // The live call's pass went back with it: a task never holds
            // one pass while it waits for another.
            let shadow = match shadow {
                None => None,
                Some(_) if !recorded.complete => {
                    // A replay of calls not kept whole would differ for no
                    // fault of the candidate.
                    tracing::debug!(
                        "the shadow candidate is not compared on this reconcile: its outbound calls were not \
                         all kept (over the host's bounds)"
                    );
                    None
                }
                Some((c, request, reader)) => {
                    // A shadow candidate calls nothing outside: it is
                    // answered from the live version's exchanges.
                    let replay = Arc::new(crate::contract::egress::Replay::shared(recorded.exchanges.clone()))
                        as Arc<dyn crate::runtime::Egress>;
                    let admitted = c.admit().await;
                    let answer = cpu.timed(admitted.reconcile_async(&request, reader, Some(replay))).await;
                    Some((c.info().digest.clone(), answer))
                }
            };
            drop(cpu);
            self.metrics.host_usage(module.gate_usage());
            (live, shadow, recorded)
        };
        self.metrics.guest_called(&self.name, call_started.elapsed());
        let (call, recorded) = {
            let (live, shadow, recorded) = call;
            if let Some((digest, answer)) = shadow {
                self.compare_shadow(key, &digest, &live, &answer);
            }
            (live, recorded)
        };
        if let Some((recorder, request)) = &recording {
            let read = remembered.as_ref().map(|r| r.taken()).unwrap_or_default();
            if recorded.complete {
                // The shadow's replay is over: this copy, bounded by the
                // kept bytes, is the recording's own.
                let exchanges = recorded.exchanges.to_vec();
                match recorder.write(&self.name, &active.module.info().digest, request, read, exchanges, &call) {
                    Ok(path) => tracing::debug!("recorded as {}", path.display()),
                    Err(e) => tracing::warn!("the reconcile was not recorded: {e}"),
                }
            } else {
                tracing::warn!(
                    "the reconcile was not recorded: {} of its outbound calls were not kept whole (refused calls \
                     keep no body; a reconcile keeps at most {} exchanges and the host's bytes)",
                    recorded.dropped.max(1),
                    crate::egress::kept::MAX_EXCHANGES
                );
            }
        }
        if let Some((first, count)) = egress.refused() {
            let more = if count > 1 { format!(" (and {} more)", count - 1) } else { String::new() };
            let message = format!("an outbound call was refused: {first}{more}");
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
