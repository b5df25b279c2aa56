//! Outbound HTTP for guests (contract 0.2's `egress` import): the host
//! makes each call a guest asks for, within the Reconciler's grants.
//!
//! One [`Policy`] per controller (its grants, credentials and bounds), one
//! [`Call`] per reconcile (its budget of calls, the
//! exchanges it made — for a recording and for a shadow candidate's
//! replay). The order of checks, before anything is sent: the call budget,
//! the method and URL, the grants ([`grants::Rules`]), the credential and
//! its hosts, then the addresses the name resolves to (names reach only
//! public addresses; [`grants::may_connect`]) — and the connection itself
//! resolves through [`PublicOnly`], so a name that changes its answer
//! between the check and the connection (DNS rebinding) still reaches
//! nothing private. Redirects are followed by the host, each one checked
//! again as a new call. Answers are read up to a size cap and have any
//! credential's value blanked out before the guest sees them.
//!
//! **Invariant: a credential's value never leaves this module** except in
//! the request header sent to a host the credential is for.
//!
//! Why an Operon import and not `wasi:http/outgoing-handler`: a credential
//! by reference has no place in `wasi:http`'s request (it would be a magic
//! header); each SDK's offline runner replays a plain function from a
//! fixture, where `wasi:http`'s resources and streams cannot be faked
//! natively; and a bounded, fully-read answer is what a reconciler needs
//! (docs/egress.md).

pub mod credentials;
pub mod grants;

use crate::contract::egress::{Exchange, HttpError, HttpRequest, HttpResponse};
use crate::metrics::Metrics;
use credentials::Credentials;
use grants::{Rules, Target};
use reqwest::Url;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Headers only the host sets.
pub const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
    "expect",
];

/// What an egress call leaves of the guest call's deadline, for the guest
/// to answer after a call that timed out.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(200);

/// The bounds of every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// A call's deadline when the guest gives none (never past the
    /// reconcile's).
    pub call_timeout: Duration,
    /// The largest answer body taken.
    pub max_response: usize,
    /// The largest request body sent.
    pub max_request: usize,
    /// Calls one reconcile may make.
    pub max_calls: u32,
    /// Redirects followed per call.
    pub max_redirects: u32,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            call_timeout: Duration::from_secs(10),
            max_response: 1 << 20,
            max_request: 1 << 20,
            max_calls: 16,
            max_redirects: 5,
        }
    }
}

/// Resolves names for the egress client, keeping only public addresses:
/// whatever a name answers when the connection is made, nothing private is
/// reached through it.
#[derive(Debug, Clone, Copy, Default)]
pub struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<std::net::SocketAddr> =
                found.iter().copied().filter(|a| grants::special(a.ip()).is_none()).collect();
            if public.is_empty() {
                let shown: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                return Err(Box::new(Refused(format!(
                    "{host} resolves only to addresses a name may not reach ({})",
                    shown.join(", ")
                ))) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A connection the resolver refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

/// The client every egress call goes through: no redirects of its own
/// (the host follows them, checking each), no proxy from the environment,
/// names resolved by [`PublicOnly`].
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(PublicOnly))
        .connect_timeout(Duration::from_secs(5))
        .user_agent(concat!("operon/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// What a Reconciler's spec says of egress, compiled: the controller's
/// [`Policy`] is made of it.
pub struct Settings {
    /// `spec.grants.egress`.
    pub rules: Rules,
    /// `spec.credentials`.
    pub credentials: Credentials,
    /// The host's bounds.
    pub bounds: Bounds,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("egress::Settings")
            .field("rules", &self.rules)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

/// The client of every controller's egress (connections are pooled per
/// host across them).
pub fn shared_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(client).clone()
}

/// A controller's egress: its grants, credentials and bounds.
pub struct Policy {
    /// The controller's name (metrics, events).
    pub controller: String,
    settings: Arc<Settings>,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
}

impl Policy {
    /// A controller's policy.
    pub fn new(controller: String, settings: Arc<Settings>, metrics: Arc<Metrics>) -> Policy {
        Policy { controller, settings, client: shared_client(), metrics }
    }

    /// One reconcile's egress, sending only while `fence` is open: a
    /// replica that lost its lease writes nothing outside either.
    pub fn call(self: &Arc<Self>, fence: crate::leader::Fence) -> Arc<Call> {
        Arc::new(Call {
            policy: self.clone(),
            fence,
            made: AtomicU32::new(0),
            exchanges: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
        })
    }
}

/// One reconcile's egress: the calls it made and their answers.
pub struct Call {
    policy: Arc<Policy>,
    fence: crate::leader::Fence,
    made: AtomicU32,
    exchanges: Mutex<Vec<Exchange>>,
    refused: Mutex<Vec<String>>,
}

impl Call {
    /// The calls made and their answers (credentials never in them).
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Why calls were refused (for a warning event).
    pub fn refused(&self) -> Vec<String> {
        self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    async fn answer(&self, request: HttpRequest, deadline: Instant) -> (String, Result<HttpResponse, HttpError>) {
        let p = &self.policy;
        let made = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        if made > p.settings.bounds.max_calls {
            return (
                String::new(),
                Err(HttpError::Budget(format!(
                    "more than {} calls in one reconcile (the host's limit); requeue and go on in the next one",
                    p.settings.bounds.max_calls
                ))),
            );
        }
        let method = request.method.to_ascii_uppercase();
        if !grants::METHODS.contains(&method.as_str()) {
            return (
                String::new(),
                Err(HttpError::Invalid(format!("method {method:?} is not one of {}", grants::METHODS.join(", ")))),
            );
        }
        let url = match Url::parse(&request.url) {
            Ok(u) => u,
            Err(e) => return (String::new(), Err(HttpError::Invalid(format!("url {:?}: {e}", request.url)))),
        };
        // The metric's host: the grant's (as many as grants), once a
        // grant allows the call; `-` for calls refused before.
        let mut shown = String::from("-");
        if let Some(body) = &request.body
            && body.len() > p.settings.bounds.max_request
        {
            return (
                shown,
                Err(HttpError::Invalid(format!(
                    "a body of {} bytes is over the host's {} bytes",
                    body.len(),
                    p.settings.bounds.max_request
                ))),
            );
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &request.headers {
            let lower = name.to_ascii_lowercase();
            if FORBIDDEN_HEADERS.contains(&lower.as_str()) {
                continue;
            }
            let (Ok(n), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(lower.as_bytes()),
                reqwest::header::HeaderValue::from_str(value),
            ) else {
                return (shown, Err(HttpError::Invalid(format!("header {name:?} is not a valid header"))));
            };
            headers.append(n, v);
        }
        // The guest keeps a moment of its deadline to answer with the
        // error (a status saying the server is slow), instead of being
        // stopped by the sandbox's own timeout.
        let deadline = deadline.checked_sub(ANSWER_MARGIN).unwrap_or(deadline);
        let timeout = request
            .timeout_ms
            .map_or(p.settings.bounds.call_timeout, |ms| {
                Duration::from_millis(u64::from(ms)).min(p.settings.bounds.call_timeout * 6)
            })
            .min(deadline.saturating_duration_since(Instant::now()));
        let end = Instant::now() + timeout;
        let mut method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::GET);
        let mut body = request.body.clone();
        let mut url = url;
        let mut credential = request.credential.clone();
        for hop in 0..=p.settings.bounds.max_redirects {
            match self.check(&method, &url, credential.as_deref(), hop == 0).await {
                Ok(grant) if hop == 0 => shown = grant,
                Ok(_) => {}
                Err(e) => return (shown, Err(e)),
            }
            let applied = match &credential {
                Some(name) => match p.settings.credentials.apply(name).await {
                    Ok(a) => Some(a),
                    Err(why) => return (shown, Err(HttpError::Denied(why))),
                },
                None => None,
            };
            let mut sent = headers.clone();
            if let Some(a) = &applied {
                sent.remove(a.header.as_str());
                if let (Ok(n), Ok(v)) = (
                    reqwest::header::HeaderName::from_bytes(a.header.as_bytes()),
                    reqwest::header::HeaderValue::from_str(&a.value),
                ) {
                    let mut v = v;
                    v.set_sensitive(true);
                    sent.insert(n, v);
                }
            }
            // Checked last, just before sending: a call is an outside
            // write, and a replica whose lease lapsed makes none.
            if let Err(e) = self.fence.check() {
                return (shown, Err(HttpError::Denied(format!("{e}; nothing was sent"))));
            }
            let secrets = applied.map(|a| a.secrets).unwrap_or_default();
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (shown, Err(HttpError::Timeout("no time left in the reconcile's deadline".into())));
            }
            let answer =
                send(&p.client, method.clone(), url.clone(), sent, body.clone(), left, p.settings.bounds.max_response)
                    .await;
            let response = match answer {
                Ok(r) => r,
                Err(e) => return (shown, Err(redact_error(e, &secrets))),
            };
            let location = response.header("location").map(str::to_string);
            let redirect = matches!(response.status, 301 | 302 | 303 | 307 | 308);
            match (redirect, location) {
                (true, Some(location)) if hop < p.settings.bounds.max_redirects => {
                    let Ok(next) = url.join(&location) else {
                        return (
                            shown,
                            Err(HttpError::Invalid(format!("a redirect to {location:?}, which is not a URL"))),
                        );
                    };
                    if response.status == 303
                        || (matches!(response.status, 301 | 302) && method == reqwest::Method::POST)
                    {
                        method = reqwest::Method::GET;
                        body = None;
                    }
                    // A credential goes only where it is for; the guest's
                    // own headers do not cross to another host either.
                    let next_target = grants::target(&next);
                    if next.host_str() != url.host_str() || next.port_or_known_default() != url.port_or_known_default()
                    {
                        headers.remove(reqwest::header::AUTHORIZATION);
                        headers.remove(reqwest::header::COOKIE);
                        if let (Some(name), Some(t)) = (&credential, &next_target)
                            && !p.settings.credentials.goes_to(name, t)
                        {
                            credential = None;
                        }
                    }
                    url = next;
                }
                (true, Some(_)) => {
                    return (
                        shown,
                        Err(HttpError::Unreachable(format!("more than {} redirects", p.settings.bounds.max_redirects))),
                    );
                }
                _ => {
                    let response = HttpResponse {
                        status: response.status,
                        headers: response
                            .headers
                            .into_iter()
                            .map(|(n, v)| (n, String::from_utf8_lossy(&credentials::redact(&v, &secrets)).into_owned()))
                            .collect(),
                        body: credentials::redact(&response.body, &secrets),
                    };
                    return (shown, Ok(response));
                }
            }
        }
        (shown, Err(HttpError::Unreachable("too many redirects".into())))
    }

    /// The checks before anything is sent to `url`.
    async fn check(
        &self,
        method: &reqwest::Method,
        url: &Url,
        credential: Option<&str>,
        first: bool,
    ) -> Result<String, HttpError> {
        let p = &self.policy;
        let redirect = if first { "" } else { "a redirect: " };
        let grant = p
            .settings
            .rules
            .allows(method.as_str(), url)
            .map_err(|why| HttpError::Denied(format!("{redirect}{why}")))?;
        let target = grants::target(url).ok_or_else(|| HttpError::Invalid(format!("{url} has no host")))?;
        if let Some(name) = credential {
            p.settings.credentials.check(name, &target).map_err(|why| HttpError::Denied(format!("{redirect}{why}")))?;
        }
        if let Target::Name(name) = &target {
            // The answer the connection will get is checked again by
            // `PublicOnly`; this one gives the guest a clear refusal.
            let port = url.port_or_known_default().unwrap_or(443);
            let lookup =
                tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host((name.as_str(), port))).await;
            match lookup {
                Ok(Ok(addresses)) => {
                    let addresses: Vec<_> = addresses.collect();
                    if let Some(refusal) = addresses.iter().find_map(|a| grants::may_connect(&target, a.ip()).err())
                        && addresses.iter().all(|a| grants::may_connect(&target, a.ip()).is_err())
                    {
                        return Err(HttpError::Denied(format!("{redirect}{refusal}")));
                    }
                }
                Ok(Err(e)) => return Err(HttpError::Unreachable(format!("{name}: {e}"))),
                Err(_) => return Err(HttpError::Unreachable(format!("{name}: not resolved within 5 s"))),
            }
        }
        Ok(grant)
    }
}

impl crate::runtime::Egress for Call {
    fn fetch(
        &self,
        request: HttpRequest,
        deadline: Instant,
    ) -> futures::future::BoxFuture<'_, Result<HttpResponse, HttpError>> {
        let span =
            tracing::info_span!("egress", method = %request.method, url = %request.url, status = tracing::field::Empty);
        Box::pin(self.fetch_in(request, deadline, span.clone()).instrument(span))
    }
}

impl Call {
    async fn fetch_in(
        &self,
        request: HttpRequest,
        deadline: Instant,
        span: tracing::Span,
    ) -> Result<HttpResponse, HttpError> {
        let started = Instant::now();
        let (host, answer) = self.answer(request.clone(), deadline).await;
        let elapsed = started.elapsed();
        let code = match &answer {
            Ok(r) => r.status.to_string(),
            Err(e) => e.kind().to_string(),
        };
        span.record("status", code.as_str());
        let host_label = if host.is_empty() { "-".to_string() } else { host };
        self.policy.metrics.egress_called(&self.policy.controller, &host_label, &code, elapsed);
        if let Err(HttpError::Denied(why)) = &answer {
            tracing::info!("egress refused: {why}");
            self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(why.clone());
        }
        self.exchanges.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Exchange::of(request, &answer));
        answer
    }
}

/// An answer as read.
struct Answer {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: Url,
    headers: reqwest::header::HeaderMap,
    body: Option<Vec<u8>>,
    timeout: Duration,
    max: usize,
) -> Result<Answer, HttpError> {
    let shown = format!("{method} {url}");
    let work = async {
        let mut request = client.request(method, url).headers(headers);
        if let Some(body) = body {
            request = request.body(body);
        }
        let mut response = request.send().await.map_err(|e| transport(&e))?;
        let status = response.status().as_u16();
        let headers = response.headers().iter().map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec())).collect();
        if response.content_length().is_some_and(|n| n as usize > max) {
            return Err(HttpError::TooLarge(format!(
                "the answer says {} bytes; the host takes {max}",
                response.content_length().unwrap_or(0)
            )));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
            if body.len() + chunk.len() > max {
                return Err(HttpError::TooLarge(format!("the answer is over the {max} bytes the host takes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer { status, headers, body })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(answer) => answer,
        Err(_) => Err(HttpError::Timeout(format!("{shown}: no answer within {} ms", timeout.as_millis()))),
    }
}

/// A transport error as the guest sees it; a connection the resolver
/// refused is a refusal, not an outage.
fn transport(e: &reqwest::Error) -> HttpError {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let mut text = e.to_string();
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<Refused>() {
            return HttpError::Denied(r.0.clone());
        }
        text = s.to_string();
        source = s.source();
    }
    if e.is_timeout() {
        return HttpError::Timeout(text);
    }
    HttpError::Unreachable(text)
}

fn redact_error(e: HttpError, secrets: &[Vec<u8>]) -> HttpError {
    let clean = |m: String| String::from_utf8_lossy(&credentials::redact(m.as_bytes(), secrets)).into_owned();
    match e {
        HttpError::Denied(m) => HttpError::Denied(clean(m)),
        HttpError::Invalid(m) => HttpError::Invalid(clean(m)),
        HttpError::Timeout(m) => HttpError::Timeout(clean(m)),
        HttpError::Unreachable(m) => HttpError::Unreachable(clean(m)),
        HttpError::TooLarge(m) => HttpError::TooLarge(clean(m)),
        HttpError::Budget(m) => HttpError::Budget(clean(m)),
        HttpError::NotRecorded(m) => HttpError::NotRecorded(clean(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::Resolve as _;

    /// A replica that lost its lease sends nothing outside: the call is
    /// refused before a byte leaves, naming the lease.
    #[tokio::test]
    async fn a_replica_that_lost_its_lease_should_send_nothing() {
        use crate::runtime::Egress as _;
        crate::install_crypto_provider();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let grant = grants::EgressGrant {
            scheme: Some("http".into()),
            host: "127.0.0.1".into(),
            port: Some(port),
            ..Default::default()
        };
        let settings = Settings {
            rules: Rules::compile(&[grant]).unwrap(),
            credentials: Credentials::compile(&[], Some("ns"), None).unwrap(),
            bounds: Bounds::default(),
        };
        let policy = Arc::new(Policy::new("c".into(), Arc::new(settings), Arc::new(Metrics::new())));
        let (leading, rx) = tokio::sync::watch::channel(true);
        let call = policy.call(crate::leader::Fence::new(rx, "ns/c"));
        leading.send(false).unwrap();
        let request = HttpRequest::get(format!("http://127.0.0.1:{port}/"));
        let deadline = Instant::now() + Duration::from_secs(2);
        let answer = call.fetch(request, deadline).await;
        assert!(matches!(&answer, Err(HttpError::Denied(m)) if m.contains("not leading ns/c")), "{answer:?}");
        assert!(listener.accept().is_err(), "a connection was made");
    }

    /// The resolver the connection uses refuses a name whose every address
    /// is private, whatever answered an earlier lookup (rebinding).
    #[tokio::test]
    async fn the_connection_resolver_should_refuse_names_of_private_addresses() {
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let refused = match PublicOnly.resolve(name).await {
            Err(e) => e.to_string(),
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
        };
        assert!(refused.contains("localhost resolves only to addresses a name may not reach"), "{refused}");
    }
}
