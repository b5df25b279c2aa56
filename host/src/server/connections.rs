//! The accept loop every listener of the host runs — the webhook server,
//! `/metrics` and the probes — bounded in connections, bytes and time, so a
//! client that reaches a port (another tenant's pod as much as the API
//! server) can hold neither the host's memory nor its sockets.
//!
//! - At most [`Limits::max_connections`] at once, and
//!   [`Limits::max_connections_per_client`] from one address: a connection
//!   over either is closed as it is accepted (the API server then applies a
//!   webhook's failure policy, as for a refusal), and counted in
//!   `operon_server_connections_refused_total{server,reason}`.
//! - The TLS handshake within [`Limits::handshake_timeout`]; a request's
//!   headers within [`Limits::header_timeout`], counted from when the
//!   connection waits for a request, so this is also how long a kept-alive
//!   connection may stay idle (hyper counts both with one timer); the whole
//!   body within [`Limits::body_timeout`]. A slow client is cut off
//!   (`operon_server_cut_total{server,reason}`), whatever it sends meanwhile.
//! - A body of at most [`Limits::max_body`] bytes (413 at once when its
//!   `Content-Length` says more, as soon as more arrives otherwise), and at
//!   most [`Limits::max_body_in_flight`] bytes of bodies read at once across
//!   the listener: a request waits for room for its body within the body
//!   timeout (then 408, as a slow body).
//! - On shutdown: no more accepting; requests in flight get a few seconds.
//!
//! A request cut off or refused is answered with `Connection: close`.

use crate::metrics::Metrics;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

/// Time requests in flight get after shutdown.
const DRAIN: Duration = Duration::from_secs(5);
/// The unit of [`Limits::max_body_in_flight`]'s semaphore.
const KIB: usize = 1024;

/// What one listener allows its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one IP address.
    pub max_connections_per_client: usize,
    /// Time to finish the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time to send a request's headers, counted from when the connection
    /// waits for one: also how long a kept-alive connection may stay idle.
    pub header_timeout: Duration,
    /// Time to send a request's whole body, once its headers are in.
    pub body_timeout: Duration,
    /// Largest body accepted.
    pub max_body: usize,
    /// Bytes of request bodies read at once, across the listener.
    pub max_body_in_flight: usize,
}

impl Limits {
    /// The webhook server's: the API server keeps a few connections per
    /// replica of its own, and an AdmissionReview holds an object and its
    /// old version at the API server's limit (controller-runtime's 7 MiB).
    pub const WEBHOOKS: Limits = Limits {
        max_connections: 512,
        max_connections_per_client: 128,
        handshake_timeout: Duration::from_secs(10),
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(10),
        max_body: 7 << 20,
        max_body_in_flight: 64 << 20,
    };

    /// `/metrics` and the probes: a few scrapers and the kubelet, GETs
    /// without a body.
    pub const ENDPOINTS: Limits = Limits {
        max_connections: 64,
        max_connections_per_client: 16,
        handshake_timeout: Duration::from_secs(10),
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(10),
        max_body: 64 << 10,
        max_body_in_flight: 1 << 20,
    };
}

/// One listener's clients, as the accept loop counts them.
struct Clients {
    limits: Limits,
    total: Arc<Semaphore>,
    per_client: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place: given back when the connection ends.
struct Place {
    clients: Arc<Clients>,
    ip: IpAddr,
    _total: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut per_client = self.clients.per_client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = per_client.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per_client.remove(&self.ip);
            }
        }
    }
}

/// Why a connection was not taken: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    Total,
    PerClient,
}

impl Full {
    fn label(self) -> &'static str {
        match self {
            Full::Total => "total",
            Full::PerClient => "per_client",
        }
    }
}

impl Clients {
    fn new(limits: Limits) -> Arc<Clients> {
        Arc::new(Clients {
            limits,
            total: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            per_client: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a connection from `ip`, or why there is none.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Place, Full> {
        let ip = ip.to_canonical();
        let mut per_client = self.per_client.lock().unwrap_or_else(PoisonError::into_inner);
        let n = per_client.get(&ip).copied().unwrap_or(0);
        if n >= self.limits.max_connections_per_client.max(1) {
            return Err(Full::PerClient);
        }
        let total = self.total.clone().try_acquire_owned().map_err(|_| Full::Total)?;
        per_client.insert(ip, n + 1);
        Ok(Place { clients: self.clone(), ip, _total: total })
    }
}

/// What the body layer needs.
#[derive(Clone)]
struct Bodies {
    limits: Limits,
    /// Room for bodies being read, in KiB.
    room: Arc<Semaphore>,
    counted: Counted,
}

/// Where cut-offs and refusals are counted, under which `server` label.
#[derive(Clone)]
struct Counted {
    server: &'static str,
    metrics: Option<Arc<Metrics>>,
}

impl Counted {
    fn cut(&self, reason: &'static str) {
        if let Some(m) = &self.metrics {
            m.server_cut(self.server, reason);
        }
    }
}

/// Serve `router` on `listener` (over TLS with `tls`) within `limits` until
/// `shutdown` completes; `server` names it in the logs and metrics
/// (`webhook`, `metrics`, `probes`).
pub(crate) async fn serve(
    server: &'static str,
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let counted = Counted { server, metrics };
    let bodies = Bodies {
        limits,
        room: Arc::new(Semaphore::new((limits.max_body_in_flight / KIB).clamp(1, Semaphore::MAX_PERMITS))),
        counted: counted.clone(),
    };
    let app = router.layer(axum::middleware::from_fn_with_state(bodies, read_body));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let clients = Clients::new(limits);
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
                    tracing::warn!(server, error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let place = match clients.take(peer.ip()) {
            Ok(place) => place,
            Err(full) => {
                // Closed as it came: a full server answers nothing.
                drop(tcp);
                if let Some(m) = &counted.metrics {
                    m.server_connection_refused(server, full.label());
                }
                tracing::debug!(server, %peer, reason = full.label(), "connection refused: too many open");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app, stop, counted) = (acceptor.clone(), app.clone(), stop_rx.clone(), counted.clone());
        connections.spawn(async move {
            let _open = counted.metrics.as_ref().map(|m| m.server_connection_opened(server));
            match acceptor {
                None => connection(tcp, peer, app, limits, stop, &counted).await,
                Some(acceptor) => match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => connection(tls, peer, app, limits, stop, &counted).await,
                    Ok(Err(e)) => tracing::debug!(server, %peer, error = %e, "TLS handshake failed"),
                    Err(_) => {
                        counted.cut("handshake_timeout");
                        tracing::debug!(server, %peer, "TLS handshake timed out");
                    }
                },
            }
            drop(place);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        connections.abort_all();
    }
    tracing::info!(server, "stopped serving");
}

/// One connection: HTTP/1.1 until the client goes, a timeout cuts it, or
/// the server stops (then after the request in flight).
async fn connection<IO>(
    io: IO,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    counted: &Counted,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
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
        if e.is_timeout() {
            counted.cut("header_timeout");
        }
        tracing::debug!(server = counted.server, %peer, error = %e, "connection ended with an error");
    }
}

/// Read the whole body within the limits before the routes see it: 413
/// when it is too large, 408 when it (or room for it) comes too slowly.
async fn read_body(State(bodies): State<Bodies>, request: Request, next: Next) -> Response {
    let Bodies { limits, room, counted } = bodies;
    let (parts, body) = request.into_parts();
    let announced =
        parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if announced.is_some_and(|n| n > limits.max_body) {
        counted.cut("body_too_large");
        return cut(StatusCode::PAYLOAD_TOO_LARGE, format!("a body of at most {} bytes is accepted", limits.max_body));
    }
    let read = async {
        let mut held = Vec::new();
        let mut bytes = Vec::with_capacity(announced.unwrap_or(0).min(limits.max_body));
        let mut body = body;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return Err(Unread::Broken) };
            let Ok(data) = frame.into_data() else { continue };
            if bytes.len() + data.len() > limits.max_body {
                return Err(Unread::TooLarge);
            }
            let kib = u32::try_from(data.len().div_ceil(KIB)).unwrap_or(u32::MAX);
            if kib > 0 {
                held.push(room.clone().acquire_many_owned(kib).await.map_err(|_| Unread::Broken)?);
            }
            bytes.extend_from_slice(&data);
        }
        Ok((bytes, held))
    };
    let (bytes, held) = match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(Unread::TooLarge)) => {
            counted.cut("body_too_large");
            return cut(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("a body of at most {} bytes is accepted", limits.max_body),
            );
        }
        Ok(Err(Unread::Broken)) => return cut(StatusCode::BAD_REQUEST, "the request's body could not be read".into()),
        Err(_) => {
            counted.cut("body_timeout");
            return cut(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request's body did not arrive within {:?}", limits.body_timeout),
            );
        }
    };
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    drop(held);
    response
}

/// Why a body was not read.
enum Unread {
    TooLarge,
    Broken,
}

/// An answer that ends the connection.
fn cut(status: StatusCode, message: String) -> Response {
    let mut response = (status, format!("{message}\n")).into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests;
