//! Outbound HTTP for guests (contract 0.2's `egress` import): the host
//! makes each call a guest asks for, within the Reconciler's grants.
//!
//! One [`Policy`] per controller (its grants, credentials and bounds), one
//! [`Call`] per reconcile (its budget of calls — every crossing counts,
//! refused ones too — and what it keeps of the exchanges, bounded
//! ([`kept`]), for a recording and for a shadow candidate's replay). The
//! order of checks, before anything is sent: the call budget, the method,
//! URL, headers and body, the grants ([`grants::Rules`]), the credential
//! (its hosts, https), then the addresses: a name reaches only public
//! addresses, an address a special one only where the operator opened it
//! ([`grants::Allowed::may_connect`]) — and the connection itself resolves
//! through [`resolve::PublicOnly`], so a name that changes its answer
//! between the check and the connection (DNS rebinding) still reaches
//! nothing special. Every step ends with the call (the DNS check, the
//! credential's read, the connection). Redirects are followed by the host,
//! each one checked again as a new call. Answers are read up to a size cap
//! and have any credential's value blanked out before the guest sees them;
//! on a request carrying a credential the host chooses the encoding
//! (identity, whole answers), so what comes back is what redaction reads.
//!
//! **Invariant: a credential's value never leaves this module** except in
//! the request header sent over https (or to a loopback address the
//! operator opened) to a host the credential is for.
//!
//! Why an Operon import and not `wasi:http/outgoing-handler`: a credential
//! by reference has no place in `wasi:http`'s request (it would be a magic
//! header); each SDK's offline runner replays a plain function from a
//! fixture, where `wasi:http`'s resources and streams cannot be faked
//! natively; and a bounded, fully-read answer is what a reconciler needs
//! (docs/egress.md).

pub mod credentials;
pub mod grants;
pub mod kept;
pub mod resolve;
mod send;
pub mod special;

use crate::contract::egress::{HttpError, HttpRequest, HttpResponse};
use crate::metrics::Metrics;
use credentials::Credentials;
use grants::{Allowed, Rules, Target};
use kept::{Kept, Recorded};
use reqwest::Url;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Headers only the host sets (a guest's value is dropped).
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

/// Headers that would have a server act on another method or path than
/// the grant allowed: a call carrying one is refused.
pub const OVERRIDE_HEADERS: &[&str] =
    &["x-http-method-override", "x-http-method", "x-method-override", "x-original-url", "x-rewrite-url"];

/// Headers a guest may not set on a request carrying a credential: they
/// would have the answer come back in a form redaction does not read
/// (compressed, a slice, another charset). The host asks for `identity`.
pub const CREDENTIAL_STRIPPED: &[&str] = &["accept-encoding", "range", "if-range", "accept-charset"];

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
    /// Calls one reconcile may make (every crossing counts, refused ones
    /// too).
    pub max_calls: u32,
    /// Redirects followed per call.
    pub max_redirects: u32,
    /// The longest URL.
    pub max_url: usize,
    /// The most bytes of request headers.
    pub max_headers: usize,
    /// The most bytes one reconcile keeps of its exchanges (for a recording
    /// and a shadow replay).
    pub max_kept: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            call_timeout: Duration::from_secs(10),
            max_response: 1 << 20,
            max_request: 1 << 20,
            max_calls: 16,
            max_redirects: 5,
            max_url: 8 << 10,
            max_headers: 64 << 10,
            max_kept: 4 << 20,
        }
    }
}

/// The client every egress call of a host goes through: no redirects of
/// its own (the host follows them, checking each), no proxy from the
/// environment, names resolved by [`resolve::PublicOnly`] with what is
/// special on this host. One per distinct `allowed` (one per process in
/// practice), so connections are pooled across controllers.
pub fn client(allowed: &Allowed) -> reqwest::Client {
    static CLIENTS: Mutex<Vec<(Allowed, reqwest::Client)>> = Mutex::new(Vec::new());
    let mut clients = CLIENTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, c)) = clients.iter().find(|(a, _)| a == allowed) {
        return c.clone();
    }
    let built = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(resolve::PublicOnly { allowed: Arc::new(allowed.clone()) }))
        .connect_timeout(Duration::from_secs(5))
        .user_agent(concat!("operon/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default();
    clients.push((allowed.clone(), built.clone()));
    built
}

/// What a Reconciler's spec says of egress, compiled, with what the host
/// allows: the controller's [`Policy`] is made of it.
pub struct Settings {
    /// `spec.grants.egress`.
    pub rules: Rules,
    /// `spec.credentials`.
    pub credentials: Credentials,
    /// The host's bounds.
    pub bounds: Bounds,
    /// What the operator opened (`--egress-allow`, `--cluster-cidrs`).
    pub allowed: Allowed,
}

impl Settings {
    /// No grants, no credentials: every call is refused, saying which
    /// grant to add.
    pub fn none(allowed: Allowed) -> Settings {
        Settings { rules: Rules::default(), credentials: Credentials::none(), bounds: Bounds::default(), allowed }
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("egress::Settings")
            .field("rules", &self.rules)
            .field("bounds", &self.bounds)
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
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
        let client = client(&settings.allowed);
        Policy { controller, settings, client, metrics }
    }

    /// One reconcile's egress, sending only while `fence` is open: a
    /// replica that lost its lease writes nothing outside either.
    pub fn call(self: &Arc<Self>, fence: crate::leader::Fence) -> Arc<Call> {
        Arc::new(Call {
            policy: self.clone(),
            fence,
            made: AtomicU32::new(0),
            kept: Mutex::new(Kept::new()),
            refused: Mutex::new(Refusals::default()),
        })
    }
}

/// The refusals of one reconcile: the first, and how many (for one
/// warning event).
#[derive(Debug, Default)]
struct Refusals {
    first: Option<String>,
    count: u64,
}

/// One reconcile's egress: the calls it made and what it keeps of them.
pub struct Call {
    policy: Arc<Policy>,
    fence: crate::leader::Fence,
    /// Crossings so far, refused ones included.
    made: AtomicU32,
    kept: Mutex<Kept>,
    refused: Mutex<Refusals>,
}

impl Call {
    /// What was kept of the calls (credentials never in them), handed on
    /// once the guest call is over.
    pub fn recorded(&self) -> Recorded {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    /// Bytes kept so far.
    pub fn kept_bytes(&self) -> usize {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).bytes()
    }

    /// Why calls were refused: the first refusal and how many there were
    /// (for a warning event).
    pub fn refused(&self) -> Option<(String, u64)> {
        let r = self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        r.first.clone().map(|first| (first, r.count))
    }

    async fn answer(&self, request: &HttpRequest, deadline: Instant) -> (String, Result<HttpResponse, HttpError>) {
        let p = &self.policy;
        let bounds = &p.settings.bounds;
        let method = request.method.to_ascii_uppercase();
        if !grants::METHODS.contains(&method.as_str()) {
            let shown: String = method.chars().take(32).collect();
            return (
                String::new(),
                Err(HttpError::Invalid(format!("method {shown:?} is not one of {}", grants::METHODS.join(", ")))),
            );
        }
        if request.url.len() > bounds.max_url {
            return (
                String::new(),
                Err(HttpError::Invalid(format!(
                    "a URL of {} bytes is over the host's {} bytes",
                    request.url.len(),
                    bounds.max_url
                ))),
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
            && body.len() > bounds.max_request
        {
            return (
                shown,
                Err(HttpError::Invalid(format!(
                    "a body of {} bytes is over the host's {} bytes",
                    body.len(),
                    bounds.max_request
                ))),
            );
        }
        let headers = match send::headers(&request.headers, bounds.max_headers) {
            Ok(h) => h,
            Err(e) => return (shown, Err(e)),
        };
        // The guest keeps a moment of its deadline to answer with the
        // error (a status saying the server is slow), instead of being
        // stopped by the sandbox's own timeout.
        let deadline = deadline.checked_sub(ANSWER_MARGIN).unwrap_or(deadline);
        let timeout = request
            .timeout_ms
            .map_or(bounds.call_timeout, |ms| Duration::from_millis(u64::from(ms)).min(bounds.call_timeout * 6))
            .min(deadline.saturating_duration_since(Instant::now()));
        let end = Instant::now() + timeout;
        let mut hop = send::Hop {
            method: reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::GET),
            url,
            headers,
            body: request.body.clone(),
            credential: request.credential.clone(),
        };
        for n in 0..=bounds.max_redirects {
            match self.check(&hop, n == 0, end).await {
                Ok(grant) if n == 0 => shown = grant,
                Ok(_) => {}
                Err(e) => return (shown, Err(e)),
            }
            let applied = match &hop.credential {
                Some(name) => match p.settings.credentials.apply(name, end).await {
                    Ok(a) => Some(a),
                    Err(e) => return (shown, Err(HttpError::Denied(e.to_string()))),
                },
                None => None,
            };
            // Checked last, just before sending: a call is an outside
            // write, and a replica whose lease lapsed makes none.
            if let Err(e) = self.fence.check() {
                return (shown, Err(HttpError::Denied(format!("{e}; nothing was sent"))));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (shown, Err(HttpError::Timeout("no time left in the reconcile's deadline".into())));
            }
            let answer = send::send(&p.client, &hop, applied.as_ref(), left, bounds.max_response).await;
            let secrets = applied.map(|a| a.secrets).unwrap_or_default();
            let response = match answer {
                Ok(r) => r,
                Err(e) => return (shown, Err(send::redact_error(e, &secrets))),
            };
            match send::redirect(&response, &hop.url) {
                Some(Ok(next)) if n < bounds.max_redirects => {
                    hop.follow(response.status, next, &p.settings.credentials);
                }
                Some(Ok(_)) => {
                    return (
                        shown,
                        Err(HttpError::Unreachable(format!("more than {} redirects", bounds.max_redirects))),
                    );
                }
                Some(Err(e)) => return (shown, Err(e)),
                None => return (shown, Ok(response.into_guest(&secrets))),
            }
        }
        (shown, Err(HttpError::Unreachable("too many redirects".into())))
    }

    /// The checks before anything is sent to `hop.url`, all by `end`.
    async fn check(&self, hop: &send::Hop, first: bool, end: Instant) -> Result<String, HttpError> {
        let p = &self.policy;
        let allowed = &p.settings.allowed;
        let redirect = if first { "" } else { "a redirect: " };
        let denied = |why: String| HttpError::Denied(format!("{redirect}{why}"));
        let url = &hop.url;
        let grant = p.settings.rules.allows(hop.method.as_str(), url).map_err(|e| denied(e.to_string()))?;
        let target = grants::target(url).ok_or_else(|| HttpError::Invalid(format!("{url} has no host")))?;
        if let Some(name) = &hop.credential {
            let opened = matches!(&target, Target::Address(a) if allowed.opens(*a));
            p.settings.credentials.check(name, url, &target, opened).map_err(|e| denied(e.to_string()))?;
        }
        match &target {
            Target::Address(a) => allowed.may_connect(&target, *a).map_err(|e| denied(e.to_string()))?,
            Target::Name(name) => {
                // The answer the connection will get is checked again by
                // `PublicOnly`; this one gives the guest a clear refusal.
                let port = url.port_or_known_default().unwrap_or(443);
                let found = resolve::Lookups::system().resolve(name, port, end).await.map_err(|e| match e {
                    resolve::Error::Late(_) => HttpError::Timeout(e.to_string()),
                    other => HttpError::Unreachable(other.to_string()),
                })?;
                let refusals: Vec<grants::Error> =
                    found.iter().filter_map(|a| allowed.may_connect(&target, a.ip()).err()).collect();
                if !found.is_empty()
                    && refusals.len() == found.len()
                    && let Some(refusal) = refusals.into_iter().next()
                {
                    return Err(denied(refusal.to_string()));
                }
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
        // Bounded: a guest's URL may be as long as its output cap.
        let url: String = request.url.chars().take(256).collect();
        let method: String = request.method.chars().take(16).collect();
        let span = tracing::info_span!("egress", method = %method, url = %url, status = tracing::field::Empty);
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
        let p = &self.policy;
        // Every crossing counts, refused ones too.
        let made = self.made.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        let (host, answer) = if made > p.settings.bounds.max_calls {
            let spent = HttpError::Budget(format!(
                "more than {} calls in one reconcile (the host's limit, refused calls included); requeue and go \
                 on in the next one",
                p.settings.bounds.max_calls
            ));
            (String::new(), Err(spent))
        } else {
            self.answer(&request, deadline).await
        };
        let elapsed = started.elapsed();
        let code = match &answer {
            Ok(r) => status_class(r.status),
            Err(e) => e.kind(),
        };
        span.record("status", code);
        let host_label = if host.is_empty() { "-".to_string() } else { host };
        p.metrics.egress_called(&p.controller, &host_label, code, elapsed);
        if let Err(HttpError::Denied(why)) = &answer {
            tracing::info!("egress refused: {why}");
            let mut refused = self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            refused.count += 1;
            refused.first.get_or_insert_with(|| why.clone());
        }
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keep(
            request,
            &answer,
            p.settings.bounds.max_kept,
        );
        answer
    }
}

/// A status as a metric label: its class (`2xx` … `5xx`), so a server
/// cannot mint series with made-up codes.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Egress as _;

    fn policy(rules: Rules, allowed: Allowed) -> Arc<Policy> {
        let settings = Settings { rules, credentials: Credentials::none(), bounds: Bounds::default(), allowed };
        Arc::new(Policy::new("c".into(), Arc::new(settings), Arc::new(Metrics::new())))
    }

    fn fence() -> crate::leader::Fence {
        crate::leader::Fence::open()
    }

    /// A replica that lost its lease sends nothing outside: the call is
    /// refused before a byte leaves, naming the lease.
    #[tokio::test]
    async fn a_replica_that_lost_its_lease_should_send_nothing() {
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
        // The operator opened loopback (as the tests' hosts do).
        let allowed = Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap();
        let policy = policy(Rules::compile(&[grant]).unwrap(), allowed);
        let (leading, rx) = tokio::sync::watch::channel(true);
        let call = policy.call(crate::leader::Fence::new(rx, "ns/c"));
        leading.send(false).unwrap();
        let request = HttpRequest::get(format!("http://127.0.0.1:{port}/"));
        let deadline = Instant::now() + Duration::from_secs(2);
        let answer = call.fetch(request, deadline).await;
        assert!(matches!(&answer, Err(HttpError::Denied(m)) if m.contains("not leading ns/c")), "{answer:?}");
        assert!(listener.accept().is_err(), "a connection was made");
    }

    /// A tenant granting itself loopback gets nothing from it: without the
    /// operator's entry the call is refused before connecting, naming the
    /// flag (the server sees no connection).
    #[tokio::test]
    async fn a_grant_of_loopback_alone_should_connect_to_nothing() {
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
        let call = policy(Rules::compile(&[grant]).unwrap(), Allowed::public()).call(fence());
        let answer = call
            .fetch(HttpRequest::get(format!("http://127.0.0.1:{port}/")), Instant::now() + Duration::from_secs(2))
            .await;
        assert!(matches!(&answer, Err(HttpError::Denied(m)) if m.contains("--egress-allow 127.0.0.1")), "{answer:?}");
        assert!(listener.accept().is_err(), "a connection was made");
    }

    /// A guest looping on refused 256 KiB calls: every crossing counts
    /// against the reconcile's budget, the budget error says so, and what
    /// the reconcile keeps stays small (a refused call keeps no body).
    #[tokio::test]
    async fn a_guest_looping_on_refused_large_calls_should_keep_little_and_be_told_its_budget_is_spent() {
        let call = policy(Rules::default(), Allowed::public()).call(fence());
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut answers = Vec::new();
        for _ in 0..300 {
            let request = HttpRequest::post("https://api.example.com/x").body(vec![b'x'; 256 << 10]);
            answers.push(call.fetch(request, deadline).await);
        }
        assert!(call.kept_bytes() < 64 << 10, "kept {} bytes", call.kept_bytes());
        assert!(matches!(&answers[0], Err(HttpError::Denied(m)) if m.contains("grants no egress")), "{:?}", answers[0]);
        let last = answers.last().unwrap();
        assert!(
            matches!(last, Err(HttpError::Budget(m)) if m.contains("more than 16 calls") && m.contains("refused calls included")),
            "{last:?}"
        );
        let recorded = call.recorded();
        assert!(!recorded.complete, "refused bodies were dropped: the record is not whole");
        assert!(recorded.exchanges.len() <= kept::MAX_EXCHANGES);
        let (first, count) = call.refused().unwrap();
        assert!(first.contains("grants no egress") && count == 16, "{first} ({count})");
    }

    /// Method-override headers would have a server act on another method
    /// than the grant allows: the call is refused, nothing sent.
    #[tokio::test]
    async fn a_method_override_header_should_be_refused() {
        let grant =
            grants::EgressGrant { host: "api.example.com".into(), methods: vec!["GET".into()], ..Default::default() };
        let call = policy(Rules::compile(&[grant]).unwrap(), Allowed::public()).call(fence());
        for header in ["X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "X-Original-URL"] {
            let request = HttpRequest::get("https://api.example.com/x").header(header, "DELETE");
            let answer = call.fetch(request, Instant::now() + Duration::from_secs(2)).await;
            assert!(
                matches!(&answer, Err(HttpError::Invalid(m)) if m.contains("is not allowed")),
                "{header}: {answer:?}"
            );
        }
    }

    #[test]
    fn status_labels_should_be_a_fixed_set() {
        let labels: std::collections::BTreeSet<&str> = (0..=u16::MAX).map(status_class).collect();
        assert_eq!(labels.into_iter().collect::<Vec<_>>(), ["1xx", "2xx", "3xx", "4xx", "5xx", "other"]);
    }
}
