//! The HTTP endpoints a Kubernetes Deployment points at: `/metrics` for
//! Prometheus, `/healthz` for the liveness probe, `/readyz` for the
//! readiness probe.
//!
//! Liveness means only "the process serves HTTP": restarting an operator
//! because its cache is slow to sync would not make it sync faster.
//! Readiness is the conjunction of named checks ([`Readiness`]) that the
//! manager and its parts set as they start (cache synced, modules loaded);
//! a failing probe names the checks that fail, so `kubectl describe pod`
//! says why.

use crate::metrics::{self, Metrics};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr} (is another process using the port? pick another with the bind address flag)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed after the socket was opened.
    #[error("serving HTTP on {addr}")]
    Serve {
        /// The address served.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Named readiness checks, shared by everything that can make the process
/// unready. Cheap to clone: clones share the checks.
///
/// With no check registered the process is ready; the manager registers its
/// checks (failing) before it starts serving, so a pod is never ready by
/// accident.
#[doc(alias = "healthz")]
#[doc(alias = "readyz")]
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    /// Each check: `None` when it passes, else why not.
    checks: Arc<Mutex<BTreeMap<String, Option<String>>>>,
}

impl Readiness {
    /// No checks yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers or updates the check `name`: `None` passes, `Some(why)`
    /// fails with `why` shown in the `/readyz` body
    /// (e.g. `set("cache", Some("not synced: apps/v1 Deployment".into()))`).
    pub fn set(&self, name: impl Into<String>, not_ready: Option<String>) {
        self.lock().insert(name.into(), not_ready);
    }

    /// Removes the check `name` (a controller that was removed).
    pub fn remove(&self, name: &str) {
        self.lock().remove(name);
    }

    /// `Ok` if every check passes; otherwise the failing checks as
    /// `name: why`, in name order.
    pub fn check(&self) -> Result<(), Vec<String>> {
        let failing: Vec<String> =
            self.lock().iter().filter_map(|(name, why)| why.as_ref().map(|why| format!("{name}: {why}"))).collect();
        if failing.is_empty() { Ok(()) } else { Err(failing) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Option<String>>> {
        // Single inserts and removes: the map is consistent even after a panic.
        self.checks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// The routes, to serve them yourself or to test them without a socket.
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(serve_readyz))
        .with_state(AppState { metrics, readiness })
}

async fn serve_metrics(State(state): State<AppState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
    }
}

async fn serve_readyz(State(state): State<AppState>) -> Response {
    match state.readiness.check() {
        Ok(()) => "ok\n".into_response(),
        Err(failing) => {
            let mut body = failing.join("\n");
            body.push('\n');
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
    }
}

/// A bound, not yet serving, listener: bind to port 0 and read
/// [`Server::local_addr`] to learn the port (tests).
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
}

impl Server {
    /// Opens the listening socket.
    ///
    /// # Errors
    ///
    /// [`Error::Bind`] if the address cannot be bound.
    pub async fn bind(addr: SocketAddr) -> Result<Self, Error> {
        let bind_error = |source| Error::Bind { addr, source };
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        Ok(Self { listener, addr })
    }

    /// The address actually bound (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes, then stops accepting and lets
    /// requests in flight finish.
    ///
    /// # Errors
    ///
    /// [`Error::Serve`] if the listener fails.
    pub async fn serve(
        self,
        metrics: Arc<Metrics>,
        readiness: Readiness,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let addr = self.addr;
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
        axum::serve(self.listener, router(metrics, readiness))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| Error::Serve { addr, source })
    }
}

/// Binds `addr` and serves until `shutdown` completes.
///
/// # Errors
///
/// [`Error::Bind`] or [`Error::Serve`].
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    Server::bind(addr).await?.serve(metrics, readiness, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::ReconcileResult;
    use std::time::Duration;

    struct Running {
        base: String,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<Result<(), Error>>,
    }

    async fn start(metrics: Arc<Metrics>, readiness: Readiness) -> Running {
        let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("binds");
        let base = format!("http://{}", server.local_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(metrics, readiness, async move {
            let _ = stopped.await;
        }));
        Running { base, stop: Some(stop), task }
    }

    async fn fetch(url: &str) -> (u16, String, String) {
        crate::install_crypto_provider();
        let response = reqwest::get(url).await.expect("request succeeds");
        let status = response.status().as_u16();
        let content_type =
            response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        (status, content_type, response.text().await.expect("body"))
    }

    #[tokio::test]
    async fn metrics_should_be_served_in_the_text_format() {
        let metrics = Arc::new(Metrics::new());
        metrics.reconcile_finished("shop", ReconcileResult::Success, Duration::from_millis(5));
        let server = start(metrics, Readiness::new()).await;
        let (status, content_type, body) = fetch(&format!("{}/metrics", server.base)).await;
        assert_eq!(status, 200);
        assert_eq!(content_type, "text/plain; version=0.0.4");
        assert!(body.contains(r#"controller_runtime_reconcile_total{controller="shop",result="success"} 1"#), "{body}");
    }

    #[tokio::test]
    async fn healthz_should_answer_while_the_process_runs() {
        let readiness = Readiness::new();
        readiness.set("cache", Some("not synced".into()));
        let server = start(Arc::new(Metrics::new()), readiness).await;
        let (status, _, body) = fetch(&format!("{}/healthz", server.base)).await;
        assert_eq!((status, body.as_str()), (200, "ok\n"), "liveness ignores readiness");
    }

    #[tokio::test]
    async fn readyz_should_name_the_failing_checks_until_all_pass() {
        let readiness = Readiness::new();
        readiness.set("leader", None);
        readiness.set("cache", Some("not synced: apps/v1 Deployment".into()));
        readiness.set("modules", Some("shop: compiling".into()));
        let server = start(Arc::new(Metrics::new()), readiness.clone()).await;
        let url = format!("{}/readyz", server.base);

        let (status, _, body) = fetch(&url).await;
        assert_eq!(status, 503);
        assert_eq!(body, "cache: not synced: apps/v1 Deployment\nmodules: shop: compiling\n");

        readiness.set("cache", None);
        let (status, _, body) = fetch(&url).await;
        assert_eq!((status, body.as_str()), (503, "modules: shop: compiling\n"));

        readiness.remove("modules");
        let (status, _, body) = fetch(&url).await;
        assert_eq!((status, body.as_str()), (200, "ok\n"));
    }

    #[tokio::test]
    async fn serve_should_stop_when_shutdown_completes() {
        let mut server = start(Arc::new(Metrics::new()), Readiness::new()).await;
        fetch(&format!("{}/healthz", server.base)).await;
        server.stop.take().expect("once").send(()).expect("server listens for shutdown");
        let result = tokio::time::timeout(Duration::from_secs(10), server.task).await;
        assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
    }

    #[tokio::test]
    async fn bind_should_fail_on_a_port_in_use() {
        let first = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("binds");
        let error = Server::bind(first.local_addr()).await.expect_err("port in use");
        assert!(matches!(error, Error::Bind { .. }), "{error}");
        assert!(error.to_string().contains(&first.local_addr().to_string()));
    }
}
