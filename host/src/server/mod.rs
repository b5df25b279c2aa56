//! The HTTP endpoints a Kubernetes Deployment points at: `/metrics` for
//! Prometheus, `/healthz` for the liveness probe, `/readyz` for the
//! readiness probe.
//!
//! Three ways to serve them ([`Endpoints`]), as controller-runtime's
//! manager does:
//! - [`Endpoints::secure_metrics`]: `/metrics` alone, over HTTPS, to callers
//!   the API server authenticates and authorizes (`authz.rs`; TLS in
//!   `tls.rs`): what `operon run` serves by default, like kubebuilder's
//!   scaffold;
//! - [`Endpoints::probes`]: `/healthz` and `/readyz`, plain HTTP, for the
//!   kubelet (`--health-probe-bind-address`);
//! - [`Endpoints::plain`]: all three over plain HTTP, only when asked
//!   (`--metrics-secure=false`; `operon dev`, tests).
//!
//! Every listener runs the same accept loop (`connections.rs`): a cap on
//! connections, in all and per client address, and timeouts on the TLS
//! handshake, the headers (and idle keep-alive) and the body
//! ([`Limits::ENDPOINTS`]).
//!
//! Liveness means only "the process serves HTTP": restarting an operator
//! because its cache is slow to sync would not make it sync faster.
//! Readiness is the conjunction of named checks ([`Readiness`]) that the
//! manager and its parts set as they start (cache synced, modules loaded);
//! a failing probe names the checks that fail, so `kubectl describe pod`
//! says why.

mod authz;
mod connections;
mod tls;

pub use connections::Limits;
pub(crate) use connections::serve as serve_connections;

use crate::metrics::{self, Metrics};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    /// The metrics serving certificate could not be read or made.
    #[error("metrics TLS: {0}")]
    Tls(String),
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

/// How `operon run` serves `/metrics` (controller-runtime's
/// `metricsserver.Options`: `SecureServing` with the authentication and
/// authorization filter, or plain HTTP).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MetricsServing {
    /// Plain HTTP, no authentication, with `/healthz` and `/readyz` on the
    /// same address ([`Endpoints::plain`]).
    #[default]
    Http,
    /// HTTPS with TokenReview and SubjectAccessReview authorization
    /// ([`Endpoints::secure_metrics`]).
    Https {
        /// A directory holding `tls.crt` and `tls.key`, read again when they
        /// change; `None`: a self-signed certificate made at start.
        cert_dir: Option<PathBuf>,
    },
}

/// What one listener serves: routes, TLS for HTTPS, the limits its
/// clients meet, and where its refusals are counted.
pub struct Endpoints {
    /// `metrics` or `probes`: the `server` label of its metrics.
    name: &'static str,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    counted: Option<Arc<Metrics>>,
}

impl Endpoints {
    /// `/metrics`, `/healthz` and `/readyz` over plain HTTP, to anyone.
    pub fn plain(metrics: Arc<Metrics>, readiness: Readiness) -> Endpoints {
        let router = Router::new()
            .route("/metrics", get(serve_metrics))
            .with_state(metrics.clone())
            .merge(probe_routes(readiness));
        Endpoints { name: "metrics", router, tls: None, limits: Limits::ENDPOINTS, counted: Some(metrics) }
    }

    /// `/healthz` and `/readyz` over plain HTTP: the kubelet's probes.
    pub fn probes(readiness: Readiness) -> Endpoints {
        Endpoints {
            name: "probes",
            router: probe_routes(readiness),
            tls: None,
            limits: Limits::ENDPOINTS,
            counted: None,
        }
    }

    /// Count this listener's refused connections and cut-off requests in
    /// `metrics` (`operon_server_*`).
    pub fn counted_in(mut self, metrics: Arc<Metrics>) -> Endpoints {
        self.counted = Some(metrics);
        self
    }

    /// `/metrics` over HTTPS, for requests whose bearer token `client`'s API
    /// server authenticates (TokenReview) and whose user it allows `get` on
    /// `/metrics` (SubjectAccessReview). The client's identity needs
    /// `create` on `tokenreviews` and `subjectaccessreviews`.
    ///
    /// # Errors
    ///
    /// [`Error::Tls`] if `cert_dir` holds no usable `tls.crt` and `tls.key`.
    pub fn secure_metrics(
        metrics: Arc<Metrics>,
        client: kube::Client,
        cert_dir: Option<&Path>,
    ) -> Result<Endpoints, Error> {
        let tls = tls::server_config(tls::Certificate::load(cert_dir)?)?;
        let router = Router::new()
            .route("/metrics", get(serve_metrics))
            .with_state(metrics.clone())
            .layer(axum::middleware::from_fn_with_state(authz::Reviewer::new(client, metrics.clone()), authz::guard));
        Ok(Endpoints { name: "metrics", router, tls: Some(tls), limits: Limits::ENDPOINTS, counted: Some(metrics) })
    }

    /// The routes, to test them without a socket.
    pub fn router(&self) -> Router {
        self.router.clone()
    }
}

fn probe_routes(readiness: Readiness) -> Router {
    Router::new().route("/healthz", get(|| async { "ok\n" })).route("/readyz", get(serve_readyz)).with_state(readiness)
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
    }
}

async fn serve_readyz(State(readiness): State<Readiness>) -> Response {
    match readiness.check() {
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

    /// Serves `endpoints` until `shutdown` completes, then stops accepting
    /// and lets requests in flight finish.
    ///
    /// # Errors
    ///
    /// None today: a failing accept is logged and retried.
    pub async fn serve(
        self,
        endpoints: Endpoints,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let addr = self.addr;
        let Endpoints { name, router, tls, limits, counted } = endpoints;
        match tls {
            Some(_) => tracing::info!(%addr, "serving /metrics over HTTPS (bearer tokens reviewed by the API server)"),
            None => tracing::info!(%addr, server = name, "serving HTTP"),
        }
        connections::serve(name, self.listener, tls, router, limits, counted, shutdown).await;
        Ok(())
    }
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
        start_endpoints(Endpoints::plain(metrics, readiness)).await
    }

    async fn start_endpoints(endpoints: Endpoints) -> Running {
        let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("binds");
        let scheme = if endpoints.tls.is_some() { "https" } else { "http" };
        let base = format!("{scheme}://{}", server.local_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(endpoints, async move {
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
    async fn probes_should_not_serve_metrics() {
        let server = start_endpoints(Endpoints::probes(Readiness::new())).await;
        assert_eq!(fetch(&format!("{}/healthz", server.base)).await.0, 200);
        assert_eq!(fetch(&format!("{}/metrics", server.base)).await.0, 404);
    }

    #[tokio::test]
    async fn secure_metrics_should_refuse_a_request_without_a_token_over_tls() {
        crate::install_crypto_provider();
        // No API server is asked: a request without a token is refused first.
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let server = start_endpoints(Endpoints::secure_metrics(Arc::new(Metrics::new()), client, None).unwrap()).await;
        assert!(server.base.starts_with("https://"));
        let http = reqwest::Client::builder().tls_danger_accept_invalid_certs(true).build().unwrap();
        let response = http.get(format!("{}/metrics", server.base)).send().await.expect("a TLS answer");
        assert_eq!(response.status().as_u16(), 401);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert!(response.text().await.unwrap().contains("bearer token"));
        // Plain HTTP on the TLS port gets no answer.
        let plain = server.base.replace("https://", "http://");
        assert!(reqwest::get(format!("{plain}/metrics")).await.is_err());
        // The API server is unreachable: refused with 503, never let through.
        let response = http.get(format!("{}/metrics", server.base)).bearer_auth("some-token").send().await.unwrap();
        assert_eq!(response.status().as_u16(), 503);
    }

    #[tokio::test]
    async fn bind_should_fail_on_a_port_in_use() {
        let first = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("binds");
        let error = Server::bind(first.local_addr()).await.expect_err("port in use");
        assert!(matches!(error, Error::Bind { .. }), "{error}");
        assert!(error.to_string().contains(&first.local_addr().to_string()));
    }
}
