//! Who may read `/metrics`: every request's bearer token is reviewed by the
//! API server (a `TokenReview`), and the user it names must be allowed the
//! request's verb on its non-resource path (a `SubjectAccessReview`, e.g.
//! `get /metrics`), as controller-runtime's
//! `filters.WithAuthenticationAndAuthorization` does. RBAC grants it with a
//! ClusterRole rule `nonResourceURLs: ["/metrics"], verbs: ["get"]` (the
//! deployment's `operon-metrics-reader`).
//!
//! No token, or one the API server does not authenticate: 401. A user who is
//! not allowed: 403. The API server unreachable: 503 (the scrape fails; it
//! is never let through). Answers are cached per token and path for a
//! minute when allowed and [`REFUSED_FOR`] when refused, so a Prometheus
//! scraping every few seconds costs the API server two reviews a minute.
//!
//! Reviews are the host's API budget, shared with its Lease renewals: anyone
//! who reaches the port could spend it with tokens of their own invention.
//! So reviews are rate-limited — a token bucket for tokens never allowed
//! before ([`STRANGERS`]), another for renewing the verdict of a token that
//! was allowed ([`RENEWALS`]), so a flood of strangers never keeps a real
//! scraper out — and a request over its bucket is answered 429 without a
//! call. The cache keeps [`CACHE_SIZE`] verdicts and drops the least
//! recently used one when full, never all of them. Counted in
//! `operon_metrics_reviews_total{outcome}`.

use crate::metrics::Metrics;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long an allowed answer is reused.
const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refusal is reused.
const REFUSED_FOR: Duration = Duration::from_secs(30);
/// Verdicts kept at most; the least recently used goes first.
const CACHE_SIZE: usize = 1024;
/// Reviews of tokens not allowed before: (per second, burst).
const STRANGERS: (f64, f64) = (5.0, 20.0);
/// Reviews renewing a verdict that allowed its token: (per second, burst).
const RENEWALS: (f64, f64) = (5.0, 20.0);

/// Verdicts by the hash of (token, verb, path), with when they expire;
/// expired ones stay (until evicted) so a renewal is known as one.
type Cache = lru::LruCache<[u8; 32], (Instant, Verdict)>;

/// A token bucket: `rate` reviews a second, at most `burst` at once.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new((rate, burst): (f64, f64)) -> Bucket {
        Bucket { rate, burst, tokens: burst, at: Instant::now() }
    }

    /// Take one token at `now`, if there is one.
    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

/// What the reviewer keeps between requests.
struct Kept {
    cache: Cache,
    strangers: Bucket,
    renewals: Bucket,
}

/// Reviews requests with the API server; cheap to clone.
#[derive(Clone)]
pub(super) struct Reviewer {
    client: kube::Client,
    state: Arc<Mutex<Kept>>,
    metrics: Arc<Metrics>,
}

/// Why a request was not judged.
#[derive(Debug)]
enum Unjudged {
    /// Its bucket was empty: refused without asking.
    RateLimited,
    /// The API server could not answer.
    Api(kube::Error),
}

/// What the API server said about one token on one path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Allowed,
    /// 401, with why.
    Unauthenticated(String),
    /// 403, with who and why.
    Forbidden(String),
}

impl Reviewer {
    pub(super) fn new(client: kube::Client, metrics: Arc<Metrics>) -> Reviewer {
        let cache = lru::LruCache::new(NonZeroUsize::new(CACHE_SIZE).unwrap_or(NonZeroUsize::MIN));
        let state = Kept { cache, strangers: Bucket::new(STRANGERS), renewals: Bucket::new(RENEWALS) };
        Reviewer { client, state: Arc::new(Mutex::new(state)), metrics }
    }

    async fn review(&self, token: &str, verb: &str, path: &str) -> Result<Verdict, Unjudged> {
        let key: [u8; 32] =
            Sha256::new().chain_update(token).chain_update([0]).chain_update(verb).chain_update(path).finalize().into();
        {
            let now = Instant::now();
            let mut state = self.lock();
            let known = match state.cache.get(&key) {
                Some((until, verdict)) if now < *until => {
                    let verdict = verdict.clone();
                    drop(state);
                    self.metrics.metrics_review("cached");
                    return Ok(verdict);
                }
                Some((_, verdict)) => *verdict == Verdict::Allowed,
                None => false,
            };
            let bucket = if known { &mut state.renewals } else { &mut state.strangers };
            if !bucket.take(now) {
                drop(state);
                self.metrics.metrics_review("rate_limited");
                return Err(Unjudged::RateLimited);
            }
        }
        let verdict = match self.ask(token, verb, path).await {
            Ok(verdict) => verdict,
            Err(e) => {
                self.metrics.metrics_review("failed");
                return Err(Unjudged::Api(e));
            }
        };
        self.metrics.metrics_review("reviewed");
        let ttl = if verdict == Verdict::Allowed { ALLOWED_FOR } else { REFUSED_FOR };
        // Full: the least recently used verdict goes, never all of them.
        self.lock().cache.put(key, (Instant::now() + ttl, verdict.clone()));
        Ok(verdict)
    }

    async fn ask(&self, token: &str, verb: &str, path: &str) -> Result<Verdict, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review).await?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                let why = status.error.unwrap_or_else(|| "the token was not authenticated".into());
                return Ok(Verdict::Unauthenticated(why));
            }
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answered =
            Api::<SubjectAccessReview>::all(self.client.clone()).create(&PostParams::default(), &access).await?;
        let status = answered.status.unwrap_or_default();
        Ok(if status.allowed {
            Verdict::Allowed
        } else {
            let reason = status.reason.filter(|r| !r.is_empty()).map(|r| format!(": {r}")).unwrap_or_default();
            Verdict::Forbidden(format!(
                "{name} may not {verb} {path}{reason} (grant it with a ClusterRole rule nonResourceURLs: [\"{path}\"], verbs: [\"{verb}\"], e.g. operon-metrics-reader)"
            ))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        // Single inserts and lookups: the state is consistent after a panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The axum middleware: passes the request on only when the API server
/// authenticates its bearer token and authorizes the user.
pub(super) async fn guard(State(reviewer): State<Reviewer>, request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    let Some(token) = token else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "a bearer token is required (a ServiceAccount token whose user may get this path)",
        );
    };
    let verb = request.method().as_str().to_ascii_lowercase();
    let path = request.uri().path().to_string();
    match reviewer.review(&token, &verb, &path).await {
        Ok(Verdict::Allowed) => next.run(request).await,
        Ok(Verdict::Unauthenticated(why)) => refuse(StatusCode::UNAUTHORIZED, &format!("unauthenticated: {why}")),
        Ok(Verdict::Forbidden(why)) => refuse(StatusCode::FORBIDDEN, &format!("forbidden: {why}")),
        Err(Unjudged::RateLimited) => {
            let mut response = refuse(
                StatusCode::TOO_MANY_REQUESTS,
                "too many new bearer tokens to review at once; try again in a second",
            );
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            response
        }
        Err(Unjudged::Api(e)) => {
            tracing::warn!(error = %e, "cannot review a metrics request with the API server");
            refuse(StatusCode::SERVICE_UNAVAILABLE, "the API server could not review this request; try again")
        }
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let mut response = (status, format!("{message}\n")).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    }
    response
}

#[cfg(test)]
mod tests;
