//! The HTTPS server: rustls over a tokio listener, HTTP/1.1 by hyper, routes
//! by axum.
//!
//! `POST /validate/<plugin>` and `POST /mutate/<plugin>` take an
//! AdmissionReview of at most [`MAX_BODY`] bytes (413 beyond, as
//! controller-runtime refuses oversized reviews); `GET /healthz` answers
//! `ok`. A connection that does not finish its TLS handshake or send its
//! headers in time is dropped; on shutdown the server stops accepting and
//! lets requests in flight finish for a few seconds.

use super::{Hook, Webhooks};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Largest AdmissionReview accepted: an object and its old version at the
/// API server's own limit (controller-runtime's figure).
pub(super) const MAX_BODY: usize = 7 << 20;
/// Time for a client to finish the TLS handshake, and to send its headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time requests in flight get after shutdown.
const DRAIN: Duration = Duration::from_secs(5);

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

/// Accept TLS connections until `shutdown` completes.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    webhooks: Webhooks,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let app = router(webhooks);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "webhook server could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app, mut stop) = (acceptor.clone(), app.clone(), stop_rx.clone());
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "webhook TLS handshake timed out");
                    return;
                }
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
            tokio::pin!(connection);
            let stopping = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            let result = tokio::select! {
                r = connection.as_mut() => r,
                () = stopping => {
                    connection.as_mut().graceful_shutdown();
                    connection.as_mut().await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        connections.abort_all();
    }
    tracing::info!("webhook server stopped");
}
