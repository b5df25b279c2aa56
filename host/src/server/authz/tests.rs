//! The filter in front of `/metrics` against a fake API server that counts
//! the reviews it is asked: a flood of random bearer tokens, a valid
//! scraper beside it.

use crate::metrics::Metrics;
use crate::server::Endpoints;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tower::ServiceExt;

/// The valid scraper's token.
const GOOD: &str = "good-token";

/// A kube client whose API server authenticates only [`GOOD`] (as
/// `system:serviceaccount:monitoring:prometheus`) and allows it `get
/// /metrics`; every TokenReview and SubjectAccessReview is counted.
fn fake_api() -> (kube::Client, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (tokens, accesses) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (t, a) = (tokens.clone(), accesses.clone());
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let (t, a) = (t.clone(), a.clone());
        async move {
            let path = request.uri().path().to_string();
            let body = http_body_util::BodyExt::collect(request.into_body()).await.unwrap().to_bytes();
            let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let answer = if path.ends_with("/tokenreviews") {
                t.fetch_add(1, Ordering::SeqCst);
                let good = sent["spec"]["token"] == GOOD;
                let mut review = sent.clone();
                review["status"] = if good {
                    serde_json::json!({"authenticated": true,
                        "user": {"username": "system:serviceaccount:monitoring:prometheus"}})
                } else {
                    serde_json::json!({"authenticated": false, "error": "invalid bearer token"})
                };
                review
            } else {
                a.fetch_add(1, Ordering::SeqCst);
                let mut review = sent.clone();
                review["status"] = serde_json::json!({"allowed": true});
                review
            };
            let response = http::Response::builder()
                .status(201)
                .header(header::CONTENT_TYPE, "application/json")
                .body(kube::client::Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    (kube::Client::new(service, "default"), tokens, accesses)
}

async fn scrape(router: &axum::Router, token: &str) -> StatusCode {
    let request = Request::get("/metrics").header(header::AUTHORIZATION, format!("Bearer {token}")).body(Body::empty());
    router.clone().oneshot(request.unwrap()).await.unwrap().status()
}

#[tokio::test]
async fn a_flood_of_random_tokens_makes_at_most_the_rate_of_reviews_and_the_scrapers_verdict_stays_cached() {
    crate::install_crypto_provider();
    let (client, tokens, accesses) = fake_api();
    let router = Endpoints::secure_metrics(Arc::new(Metrics::new()), client, None).unwrap().router();
    assert_eq!(scrape(&router, GOOD).await, StatusCode::OK);
    assert_eq!((tokens.load(Ordering::SeqCst), accesses.load(Ordering::SeqCst)), (1, 1));

    let started = Instant::now();
    let mut refused = 0;
    for i in 0..3000 {
        let status = scrape(&router, &format!("random-{i}-{}", i * 7919)).await;
        assert_ne!(status, StatusCode::OK, "a random token was let through");
        refused += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let asked = tokens.load(Ordering::SeqCst) - 1;
    // A bucket of 20, refilled at 5 reviews a second.
    let allowed = 20.0 + 5.0 * elapsed + 1.0;
    assert!(
        asked as f64 <= allowed,
        "{refused} random tokens in {elapsed:.2}s made {asked} TokenReviews; the rate allows {allowed:.0}"
    );

    // The scraper's verdict was not evicted by the flood: no new review.
    let before = (tokens.load(Ordering::SeqCst), accesses.load(Ordering::SeqCst));
    assert_eq!(scrape(&router, GOOD).await, StatusCode::OK);
    assert_eq!(
        (tokens.load(Ordering::SeqCst), accesses.load(Ordering::SeqCst)),
        before,
        "the verdict was reviewed again"
    );
}

#[tokio::test]
async fn a_refused_token_asked_again_is_answered_from_the_cache() {
    crate::install_crypto_provider();
    let (client, tokens, _) = fake_api();
    let router = Endpoints::secure_metrics(Arc::new(Metrics::new()), client, None).unwrap().router();
    for _ in 0..100 {
        assert_eq!(scrape(&router, "stolen-and-revoked").await, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(tokens.load(Ordering::SeqCst), 1, "one review for a hundred tries of one refused token");
}
