//! One admission request: find the plugin, call its guest on a blocking
//! thread under the webhook deadline, answer per the guest or per the
//! failure policy, and record controller-runtime's webhook metrics.

use super::review::{self, Response};
use super::{FailurePolicy, Hook, Route, Webhooks};
use crate::contract::Review;
use crate::metrics::GuestErrorKind;
use crate::runtime::{Admitted, CallError, ObjectReader};
use std::sync::Arc;
use std::time::Instant;

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
    let answer = match review::parse(body) {
        Ok(review) => Answer::review(call(webhooks, &route, hook, &path, review).await),
        Err(reason) => {
            tracing::warn!(webhook = %path, "refused an unreadable admission request: {reason}");
            Answer::error(400, reason.to_string())
        }
    };
    drop(in_flight);
    metrics.webhook_request_finished(&path, answer.status, started.elapsed());
    answer
}

/// Call the guest and turn its answer (or its failure) into a review.
async fn call(webhooks: &Webhooks, route: &Route, hook: Hook, path: &str, review: Review) -> Vec<u8> {
    let plugin = &route.registration;
    let module = plugin.controller.module();
    let reader: Arc<dyn ObjectReader> = Arc::new(plugin.controller.reader(review.namespace.clone()));
    let deadline = plugin.guest_deadline();
    let uid = review.uid.clone();
    let span = tracing::debug_span!("admission", webhook = %path, uid = %uid, operation = %review.operation,
        object = %format_args!("{}/{}", review.namespace.as_deref().unwrap_or(""), review.name),
        digest = %module.info().digest);
    // The host's gate (call slots and guest memory, shared with every
    // reconcile) admits the call without holding a thread, within the
    // webhook's deadline.
    let outcome = match tokio::time::timeout(deadline, module.admit()).await {
        Ok(admitted) => {
            tokio::task::spawn_blocking(move || span.in_scope(|| run(admitted, hook, &review, reader, deadline)))
                .await
                .unwrap_or_else(|join| {
                    Err(CallError::Trap { trap: format!("the admission call did not complete: {join}"), said: None })
                })
        }
        Err(_) => {
            tracing::warn!(webhook = %path, "the host's guest calls were all busy for the webhook's whole deadline");
            Err(CallError::Timeout { limit: deadline })
        }
    };
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
