//! The listeners as a hostile client meets them, over real sockets on
//! loopback: too many connections, headers or a body trickled, a handshake
//! that never comes, an idle connection kept open, a body too large.
//! (Loopback has the whole 127.0.0.0/8: a second client address is
//! 127.0.0.2.)

use crate::metrics::Metrics;
use crate::server::{Endpoints, Readiness, Server};
use crate::webhook::{self, Webhooks};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How long past a limit a cut may come on a loaded machine.
const SLACK: Duration = Duration::from_secs(6);

/// The probes listener (plain HTTP), serving until the test ends.
async fn probes() -> SocketAddr {
    let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let addr = server.local_addr();
    tokio::spawn(server.serve(Endpoints::probes(Readiness::new()), std::future::pending()));
    addr
}

/// The webhook server (HTTPS, a generated CA), with no plugin; its client
/// points nowhere (nothing here asks the API server).
async fn webhooks() -> Webhooks {
    crate::install_crypto_provider();
    let client = kube::Client::try_from(kube::Config::new("https://127.0.0.1:1".parse().unwrap())).unwrap();
    let config = webhook::Config {
        bind: ([127, 0, 0, 1], 0).into(),
        endpoint: webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
        ..Default::default()
    };
    Webhooks::start(client, Arc::new(Metrics::new()), config).await.unwrap()
}

/// A TCP connection to `to` from the loopback address `from`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// A TLS connection to the webhook server, trusting its CA.
async fn tls(webhooks: &Webhooks, tcp: TcpStream) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&webhooks.ca_bundle().unwrap()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await
}

/// Whether the server closed the connection within `within` (EOF or an
/// error on read), reading and dropping whatever it answered.
async fn closed_within(stream: &mut (impl AsyncRead + Unpin), within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let until = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until.into(), stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// The status line of the first answer on `stream`, within `within`.
async fn status_line(stream: &mut (impl AsyncRead + Unpin), within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    let until = Instant::now() + within;
    while !out.windows(2).any(|w| w == b"\r\n") {
        match tokio::time::timeout_at(until.into(), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    String::from_utf8_lossy(&out).lines().next().map(str::to_owned)
}

/// One GET of `/healthz` on a fresh connection from `from`: its status line.
async fn healthz(from: [u8; 4], to: SocketAddr) -> Option<String> {
    let mut tcp = connect_from(from, to).await;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.ok()?;
    status_line(&mut tcp, Duration::from_secs(10)).await
}

/// Write `head` then one byte of `trickle` every `every`, until the server
/// closes the connection or the bytes run out; whether it closed, and when.
async fn trickle<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    head: &[u8],
    trickle: &[u8],
    every: Duration,
    within: Duration,
) -> (bool, Duration) {
    let started = Instant::now();
    let (mut read, mut write) = tokio::io::split(stream);
    write.write_all(head).await.unwrap();
    let bytes = trickle.to_vec();
    let writer = tokio::spawn(async move {
        for b in bytes {
            tokio::time::sleep(every).await;
            if write.write_all(&[b]).await.is_err() || write.flush().await.is_err() {
                return;
            }
        }
        // Out of bytes: hold the connection open without a word.
        std::future::pending::<()>().await;
    });
    let closed = closed_within(&mut read, within).await;
    writer.abort();
    (closed, started.elapsed())
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off_at_the_header_timeout() {
    let addr = probes().await;
    let tcp = connect_from([127, 0, 0, 1], addr).await;
    let header = "X-Slow: ".to_string() + &"a".repeat(200) + "\r\n";
    let (closed, after) = trickle(
        tcp,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
        header.as_bytes(),
        Duration::from_millis(200),
        Duration::from_secs(10) + SLACK,
    )
    .await;
    assert!(closed, "a client sending a header byte every 200 ms kept its connection for {after:?}");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let addr = probes().await;
    let mut tcp = connect_from([127, 0, 0, 1], addr).await;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert!(status_line(&mut tcp, Duration::from_secs(10)).await.is_some_and(|l| l.contains(" 200 ")));
    let started = Instant::now();
    assert!(
        closed_within(&mut tcp, Duration::from_secs(10) + SLACK).await,
        "an idle kept-alive connection was still open after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn connections_over_the_per_client_cap_are_closed_and_other_clients_still_served() {
    let addr = probes().await;
    // The probes' cap per client is 16: hold them, idle.
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(connect_from([127, 0, 0, 1], addr).await);
    }
    // Give the server the time to take them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut over = connect_from([127, 0, 0, 1], addr).await;
    let _ = over.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answered = status_line(&mut over, Duration::from_secs(3)).await;
    assert_eq!(answered, None, "a 17th connection from one client was served");
    let other = healthz([127, 0, 0, 2], addr).await;
    assert!(other.as_deref().is_some_and(|l| l.contains(" 200 ")), "another client is served: {other:?}");
    drop(held);
    // Places come back when connections go.
    let again = async {
        loop {
            if healthz([127, 0, 0, 1], addr).await.is_some_and(|l| l.contains(" 200 ")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), again).await.expect("the client is served again");
}

#[tokio::test]
async fn connections_over_the_total_cap_are_closed() {
    let addr = probes().await;
    // 64 in all, 16 from each of four addresses (the per-client cap).
    let mut held = Vec::new();
    for client in 2..6u8 {
        for _ in 0..16 {
            held.push(connect_from([127, 0, 0, client], addr).await);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered = healthz([127, 0, 0, 9], addr).await;
    assert_eq!(answered, None, "a 65th connection was served");
    drop(held);
}

#[tokio::test]
async fn a_body_trickled_slower_than_the_body_timeout_is_cut_off() {
    let webhooks = webhooks().await;
    let tcp = connect_from([127, 0, 0, 1], webhooks.local_addr()).await;
    let stream = tls(&webhooks, tcp).await.unwrap();
    let head =
        b"POST /validate/nobody HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    let (closed, after) =
        trickle(stream, head, &[b' '; 1000], Duration::from_millis(200), Duration::from_secs(10) + SLACK).await;
    assert!(closed, "a body trickled a byte every 200 ms held its connection for {after:?}");
    webhooks.shut_down();
}

#[tokio::test]
async fn a_body_announced_too_large_is_refused_before_it_is_read() {
    let webhooks = webhooks().await;
    let tcp = connect_from([127, 0, 0, 1], webhooks.local_addr()).await;
    let mut stream = tls(&webhooks, tcp).await.unwrap();
    let head = format!(
        "POST /validate/nobody HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        64 << 20
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let line = status_line(&mut stream, Duration::from_secs(5)).await;
    assert!(line.as_deref().is_some_and(|l| l.contains(" 413 ")), "{line:?}");
    webhooks.shut_down();
}

#[tokio::test]
async fn a_tls_handshake_that_never_comes_is_cut_off() {
    let webhooks = webhooks().await;
    let mut tcp = connect_from([127, 0, 0, 1], webhooks.local_addr()).await;
    let started = Instant::now();
    assert!(
        closed_within(&mut tcp, Duration::from_secs(10) + SLACK).await,
        "a client that never started its handshake held its connection for {:?}",
        started.elapsed()
    );
    webhooks.shut_down();
}

#[tokio::test]
async fn the_webhook_server_closes_connections_over_its_per_client_cap() {
    let webhooks = webhooks().await;
    let addr = webhooks.local_addr();
    let mut held = Vec::new();
    for _ in 0..128 {
        held.push(connect_from([127, 0, 0, 1], addr).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tcp = connect_from([127, 0, 0, 1], addr).await;
    let handshake = tokio::time::timeout(Duration::from_secs(5), tls(&webhooks, tcp)).await;
    assert!(matches!(handshake, Ok(Err(_))), "a 129th connection from one client got a handshake");
    let tcp = connect_from([127, 0, 0, 2], addr).await;
    assert!(tls(&webhooks, tcp).await.is_ok(), "another client gets its handshake");
    drop(held);
    webhooks.shut_down();
}
