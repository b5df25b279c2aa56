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
//! minute when allowed and ten seconds when refused, so a Prometheus
//! scraping every few seconds costs the API server two reviews a minute.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long an allowed answer is reused.
const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refusal is reused.
const REFUSED_FOR: Duration = Duration::from_secs(10);
/// Entries kept at most; expired ones are dropped first.
const CACHE_SIZE: usize = 1024;

/// Verdicts by the hash of (token, verb, path), with when they expire.
type Cache = HashMap<[u8; 32], (Instant, Verdict)>;

/// Reviews requests with the API server; cheap to clone.
#[derive(Clone)]
pub(super) struct Reviewer {
    client: kube::Client,
    cache: Arc<Mutex<Cache>>,
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
    pub(super) fn new(client: kube::Client) -> Reviewer {
        Reviewer { client, cache: Arc::default() }
    }

    async fn review(&self, token: &str, verb: &str, path: &str) -> Result<Verdict, kube::Error> {
        let key: [u8; 32] =
            Sha256::new().chain_update(token).chain_update([0]).chain_update(verb).chain_update(path).finalize().into();
        if let Some((until, verdict)) = self.lock().get(&key)
            && Instant::now() < *until
        {
            return Ok(verdict.clone());
        }
        let verdict = self.ask(token, verb, path).await?;
        let ttl = if verdict == Verdict::Allowed { ALLOWED_FOR } else { REFUSED_FOR };
        let mut cache = self.lock();
        if cache.len() >= CACHE_SIZE {
            let now = Instant::now();
            cache.retain(|_, (until, _)| *until > now);
            if cache.len() >= CACHE_SIZE {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now() + ttl, verdict.clone()));
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // Single inserts and lookups: the map is consistent after a panic.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
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
        Err(e) => {
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
