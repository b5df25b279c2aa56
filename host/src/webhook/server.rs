//! The HTTPS server's routes, served by the accept loop every listener of
//! the host shares (`server::connections`: rustls, HTTP/1.1 by hyper, the
//! connection caps and the handshake, header, idle and body timeouts).
//!
//! `POST /validate/<plugin>` and `POST /mutate/<plugin>` take an
//! AdmissionReview of at most [`MAX_BODY`] bytes (413 beyond, as
//! controller-runtime refuses oversized reviews); `GET /healthz` answers
//! `ok`. On shutdown the server stops accepting and lets requests in flight
//! finish for a few seconds.

use super::{Hook, Webhooks};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::future::Future;
use std::sync::Arc;

/// Largest AdmissionReview accepted: an object and its old version at the
/// API server's own limit (controller-runtime's figure).
pub(super) const MAX_BODY: usize = crate::server::Limits::WEBHOOKS.max_body;

pub(super) fn router(webhooks: Webhooks) -> Router {
    Router::new()
        .route("/validate/{plugin}", post(validate))
        .route("/mutate/{plugin}", post(mutate))
        .route("/convert/{plugin}", post(convert))
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(webhooks)
}

async fn validate(state: State<Webhooks>, plugin: Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    review(state, plugin, headers, body, Hook::Validate).await
}

async fn mutate(state: State<Webhooks>, plugin: Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    review(state, plugin, headers, body, Hook::Mutate).await
}

async fn convert(State(webhooks): State<Webhooks>, Path(plugin): Path<String>, body: Bytes) -> Response {
    match webhooks.answer_conversion(&plugin, &body).await {
        Ok(answer) => ([(header::CONTENT_TYPE, "application/json")], answer.to_string()).into_response(),
        Err(answer) => {
            let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, [(header::CONTENT_TYPE, answer.content_type)], answer.body).into_response()
        }
    }
}

async fn review(
    State(webhooks): State<Webhooks>,
    Path(plugin): Path<String>,
    headers: HeaderMap,
    body: Bytes,
    hook: Hook,
) -> Response {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !content_type.starts_with("application/json") {
        let message = format!("content type {content_type:?} is not application/json: send an AdmissionReview");
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, message).into_response();
    }
    let answer = webhooks.answer(hook, &plugin, &body).await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, answer.content_type)], answer.body).into_response()
}

/// Accept TLS connections within `limits` until `shutdown` completes.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    webhooks: Webhooks,
    limits: crate::server::Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let metrics = webhooks.shared.metrics.clone();
    let app = router(webhooks);
    crate::server::serve_connections("webhook", listener, Some(tls), app, limits, Some(metrics), shutdown).await;
}
