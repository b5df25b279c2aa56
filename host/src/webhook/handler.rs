//! One admission request: find the plugin, admit the call within the
//! caps and the plugin's CPU budget, call its guest on a webhook thread
//! under the webhook deadline, answer per the guest or per the failure
//! policy, and record controller-runtime's webhook metrics.
//!
//! Refusals come before anything else is done, at once: a call over
//! `--webhook-max-concurrent-per-plugin` or `--webhook-max-concurrent`, or
//! of a plugin whose admission budget is in debt (guest CPU as large as
//! `spec.limits.cpu`, apart from the budget its reconciles spend, so a
//! flood of reviews never makes them wait), is answered 429 with a
//! `Status` naming the knob, counted in
//! `operon_webhook_refused_total{webhook,reason}`; the API server then
//! applies the webhook's failurePolicy. Queueing instead would
//! hold the API server's request (and its goroutine) for nothing: it
//! times out anyway. Guest calls run on webhook threads kept between
//! calls (`threads.rs`), not on tokio's blocking pool, so a flood never takes the threads of the
//! reconciles and module loads; the total cap bounds those threads. A call
//! let in then waits, within its deadline and without a thread, for the
//! host's gate (`--max-guest-calls`, `--max-guest-memory-total`), which it
//! shares with every reconcile.

use super::review::{self, Response};
use super::{FailurePolicy, Hook, Route, Webhooks};
use crate::contract::Review;
use crate::metrics::GuestErrorKind;
use crate::runtime::{Admitted, CallError, ObjectReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the log says, per plugin, that its calls are being refused.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// An HTTP answer: status code and JSON (or plain text for errors) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// HTTP status code: 200 for every AdmissionReview answered (allowed or
    /// not), 4xx for requests the server cannot read.
    pub status: u16,
    /// `application/json` for an AdmissionReview, `text/plain` otherwise.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    fn review(body: Vec<u8>) -> Answer {
        Answer { status: 200, content_type: "application/json", body }
    }

    pub(super) fn error(status: u16, message: impl Into<String>) -> Answer {
        let mut body = message.into().into_bytes();
        body.push(b'\n');
        Answer { status, content_type: "text/plain; charset=utf-8", body }
    }
}

pub(super) async fn answer(webhooks: &Webhooks, hook: Hook, plugin: &str, body: &[u8]) -> Answer {
    let Some(route) = webhooks.route(plugin) else {
        // Not counted: any path can be asked for, and labels must stay bounded.
        return Answer::error(404, format!("no plugin {plugin:?} is registered for admission on this host"));
    };
    let metrics = &webhooks.shared.metrics;
    let path = hook.path(plugin);
    let started = Instant::now();
    let in_flight = metrics.webhook_request_started(&path);
    let plugin = &route.registration;
    let consequence = format!("the webhook's failurePolicy ({}) applies", plugin.failure_policy);
    let caps = Caps {
        plugin: &plugin.name,
        controller: &plugin.controller,
        slots: &route.slots,
        warned: &route.warned,
        consequence: &consequence,
    };
    let answer = match admit(webhooks, &caps, &path) {
        Err(refusal) => {
            // A refusal touches nothing that yields: let a flood of them
            // give the runtime's other tasks their turn.
            tokio::task::coop::consume_budget().await;
            refusal
        }
        Ok(places) => match review::parse(body) {
            Ok(review) => Answer::review(call(webhooks, &route, hook, &path, review, places).await),
            Err(reason) => {
                tracing::warn!(webhook = %path, "refused an unreadable admission request: {reason}");
                Answer::error(400, reason.to_string())
            }
        },
    };
    drop(in_flight);
    metrics.webhook_request_finished(&path, answer.status, started.elapsed());
    answer
}

/// A call let in: its places under both caps, and its CPU budget ticket.
pub(super) struct Places {
    _total: tokio::sync::OwnedSemaphorePermit,
    _plugin: tokio::sync::OwnedSemaphorePermit,
    ticket: Option<crate::pipeline::GuestTicket>,
}

/// Why a call was refused: the `reason` label of
/// `operon_webhook_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    PluginConcurrency,
    TotalConcurrency,
    CpuBudget,
}

impl Refused {
    fn label(self) -> &'static str {
        match self {
            Refused::PluginConcurrency => "plugin_concurrency",
            Refused::TotalConcurrency => "total_concurrency",
            Refused::CpuBudget => "cpu_budget",
        }
    }
}

/// What bounds one plugin's webhook calls (admission and conversion
/// alike): its places, its admission CPU budget, and what the API server
/// does with a refusal.
pub(super) struct Caps<'a> {
    pub plugin: &'a str,
    pub controller: &'a crate::pipeline::ModuleController,
    pub slots: &'a Arc<tokio::sync::Semaphore>,
    pub warned: &'a Warned,
    /// Said after a refusal: "the webhook's failurePolicy (Fail) applies".
    pub consequence: &'a str,
}

/// Let a call in, or refuse it at once (429, counted, logged now and then).
pub(super) fn admit(webhooks: &Webhooks, caps: &Caps<'_>, path: &str) -> Result<Places, Answer> {
    let shared = &webhooks.shared;
    let (plugin, consequence) = (caps.plugin, caps.consequence);
    let refuse = |why: Refused, message: String| {
        shared.metrics.webhook_refused(path, why.label());
        if caps.warned.note(why, Instant::now()) {
            tracing::warn!(plugin = %plugin, reason = why.label(), "webhook calls refused: {message}");
        }
        Err(refusal(&message))
    };
    let Ok(mine) = caps.slots.clone().try_acquire_owned() else {
        return refuse(
            Refused::PluginConcurrency,
            format!(
                "plugin {plugin} is answering {} webhook calls already, its most at once \
                 (--webhook-max-concurrent-per-plugin); this call was refused, and {consequence}",
                shared.max_concurrent_per_plugin
            ),
        );
    };
    let Ok(total) = shared.calls.clone().try_acquire_owned() else {
        return refuse(
            Refused::TotalConcurrency,
            format!(
                "this host is answering {} webhook calls already, its most at once (--webhook-max-concurrent); \
                 plugin {plugin}'s call was refused, and {consequence}",
                shared.max_concurrent
            ),
        );
    };
    let ticket = match caps.controller.admit_guest_call() {
        Ok(ticket) => ticket,
        Err(wait) => {
            let cpu = caps.controller.guest_cpu().unwrap_or_default();
            return refuse(
                Refused::CpuBudget,
                format!(
                    "plugin {plugin}'s webhook calls used more than their CPU budget of {cpu} CPU (spec.limits.cpu, \
                     --guest-cpu; apart from its reconciles'); its webhook calls are refused for {wait:.1?}, and \
                     {consequence}"
                ),
            );
        }
    };
    Ok(Places { _total: total, _plugin: mine, ticket })
}

/// Run `f` (a guest call) on a webhook thread (`threads.rs`), not tokio's
/// blocking pool, so a flood of webhook calls never takes the threads of
/// reconciles and module loads: the total cap bounds these threads. The
/// call's wall time is charged to the plugin's admission budget, and its places
/// go back before its answer does (a caller answered may call again at
/// once).
pub(super) async fn on_own_thread<T: Send + 'static>(
    places: Places,
    span: tracing::Span,
    f: impl FnOnce() -> Result<T, CallError> + Send + 'static,
) -> Result<T, CallError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = super::threads::run(move || {
        let Places { _total, _plugin, ticket } = places;
        let started = Instant::now();
        let outcome = span.in_scope(f);
        if let Some(ticket) = ticket {
            ticket.charge(started.elapsed());
        }
        drop((_total, _plugin));
        let _ = tx.send(outcome);
    });
    match spawned {
        Ok(_) => rx.await.unwrap_or_else(|_| {
            Err(CallError::Trap { trap: "the webhook call did not complete (its thread panicked)".into(), said: None })
        }),
        Err(e) => Err(CallError::Trap { trap: format!("no thread for the webhook call: {e}"), said: None }),
    }
}

/// A refusal as the API server reads one: 429 with a `Status`, whose
/// message it passes on to its client.
fn refusal(message: &str) -> Answer {
    let status = serde_json::json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "reason": "TooManyRequests", "code": 429, "message": message,
    });
    Answer { status: 429, content_type: "application/json", body: status.to_string().into_bytes() }
}

/// When to log a plugin's refusals: the first of a reason, then at most
/// every [`WARN_EVERY`].
#[derive(Debug, Default)]
pub(super) struct Warned(Mutex<Vec<(Refused, Instant)>>);

impl Warned {
    /// Whether a refusal for `why` at `now` is to be logged.
    fn note(&self, why: Refused, now: Instant) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match seen.iter_mut().find(|(w, _)| *w == why) {
            Some((_, at)) if now.duration_since(*at) < WARN_EVERY => false,
            Some((_, at)) => {
                *at = now;
                true
            }
            None => {
                seen.push((why, now));
                true
            }
        }
    }
}

/// Call the guest and turn its answer (or its failure) into a review.
async fn call(webhooks: &Webhooks, route: &Route, hook: Hook, path: &str, review: Review, places: Places) -> Vec<u8> {
    let plugin = &route.registration;
    let module = plugin.controller.module();
    let reader: Arc<dyn ObjectReader> = Arc::new(plugin.controller.reader(review.namespace.clone()));
    let deadline = plugin.guest_deadline();
    let uid = review.uid.clone();
    let span = tracing::debug_span!("admission", webhook = %path, uid = %uid, operation = %review.operation,
        object = %format_args!("{}/{}", review.namespace.as_deref().unwrap_or(""), review.name),
        digest = %module.info().digest);
    // Then the host's gate (call slots and guest memory, shared with every
    // reconcile), awaited without holding a thread, within the deadline.
    let Ok(admitted) = tokio::time::timeout(deadline, module.admit()).await else {
        tracing::warn!(webhook = %path, "the host's guest calls were all busy for the webhook's whole deadline");
        let error = CallError::Timeout { limit: deadline };
        let kind = GuestErrorKind::from(&error);
        webhooks.shared.metrics.webhook_guest_failed(path, kind, plugin.failure_policy.as_str());
        return review::answer(&uid, failed(&plugin.name, hook, plugin.failure_policy, kind, &error));
    };
    let outcome = on_own_thread(places, span, move || run(admitted, hook, &review, reader, deadline)).await;
    let response = match outcome {
        Ok(response) => response,
        Err(error) => {
            let kind = GuestErrorKind::from(&error);
            webhooks.shared.metrics.webhook_guest_failed(path, kind, plugin.failure_policy.as_str());
            failed(&plugin.name, hook, plugin.failure_policy, kind, &error)
        }
    };
    review::answer(&uid, response)
}

/// The guest's answer as a response; `Err` when the sandbox stopped it.
fn run(
    module: Admitted,
    hook: Hook,
    review: &Review,
    reader: Arc<dyn ObjectReader>,
    deadline: std::time::Duration,
) -> Result<Response, CallError> {
    let denied = |denial: crate::contract::Denial| Response {
        allowed: false,
        status: Some((denial.status_code(), denial.message)),
        ..Default::default()
    };
    match hook {
        Hook::Validate => Ok(match module.validate(review, reader, deadline)? {
            Ok(warnings) => Response { allowed: true, warnings, ..Default::default() },
            Err(denial) => denied(denial),
        }),
        Hook::Mutate => Ok(match module.mutate(review, reader, deadline)? {
            Ok(None) => Response { allowed: true, ..Default::default() },
            Ok(Some(object)) => {
                // `mutate` checked that a mutated object has an original.
                let original = review.object.as_deref().unwrap_or("{}");
                let patch = review::patch(original, &object).map_err(|e| CallError::Malformed(e.to_string()))?;
                Response { allowed: true, patch, ..Default::default() }
            }
            Err(denial) => denied(denial),
        }),
    }
}

/// The answer when the guest could not: per the failure policy.
fn failed(plugin: &str, hook: Hook, policy: FailurePolicy, kind: GuestErrorKind, error: &CallError) -> Response {
    let what = format!("plugin {plugin} could not {} this request: {} {error}", hook.as_str(), hook.as_str());
    match policy {
        FailurePolicy::Fail => {
            tracing::warn!(plugin, kind = kind.label(), "admission denied by failurePolicy Fail: {error}");
            Response {
                allowed: false,
                status: Some((500, format!("{what} (failurePolicy: Fail)"))),
                ..Default::default()
            }
        }
        FailurePolicy::Ignore => {
            tracing::warn!(plugin, kind = kind.label(), "admission allowed by failurePolicy Ignore: {error}");
            Response {
                allowed: true,
                warnings: vec![format!("{what}; allowed by failurePolicy Ignore")],
                ..Default::default()
            }
        }
    }
}
