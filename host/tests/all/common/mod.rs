//! Shared by the integration tests: where built guests are.

pub mod author;
pub mod logs;
pub mod pdns;
pub mod plugins;
pub mod running;
pub mod serve;
pub mod skip;

use std::path::PathBuf;

/// `target/guests`, or `$OPERON_GUESTS_DIR`.
pub fn guests_dir() -> PathBuf {
    std::env::var_os("OPERON_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/guests"))
}

/// The bytes of a built guest. Panics with what to run if it is missing:
/// these tests must not pass by skipping.
pub fn guest(name: &str) -> Vec<u8> {
    let path = guests_dir().join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; build the guests first with `cargo xtask guests`", path.display()))
}

/// A realistic WebApp parent (about 4 KB of JSON with its annotations).
pub fn webapp(name: &str, replicas: i64, ingress: bool) -> serde_json::Value {
    let mut v = serde_json::json!({
        "apiVersion": "example.operon.dev/v1alpha1",
        "kind": "WebApp",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": format!("00000000-0000-0000-0000-{:012}", name.len()),
            "generation": 3,
            "resourceVersion": "12345",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"team": "shop", "tier": "frontend", "app.kubernetes.io/part-of": "store"},
            "annotations": {
                "description": "x".repeat(2500),
                "owner": "platform-team@example.com"
            }
        },
        "spec": {
            "image": "registry.example.com/shop/web:1.4.2",
            "replicas": replicas,
            "port": 8080,
            "env": [
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-v3"},
                {"name": "DATABASE_URL", "value": "postgres://db.shop.svc:5432/shop"}
            ]
        }
    });
    if ingress {
        v["spec"]["ingress"] = serde_json::json!({"host": "shop.example.com", "path": "/"});
    }
    v
}

/// Poll `check` every 100 ms until it returns `Some`, or panic after
/// `timeout` with `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `GET url` with reqwest, after installing the process's TLS provider (the
/// workspace's reqwest has TLS without a built-in provider).
pub async fn http_get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    operon::install_crypto_provider();
    reqwest::get(url).await
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The WebApp CRD shipped with the example.
pub fn webapp_crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/webapp/crd.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The ScheduledScale CRD shipped with the time-driven example.
pub fn scheduledscale_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/scheduledscale/crd.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The DnsRecord example's CRD (`guest-examples/dnsrecord/crd.yaml`).
pub fn dnsrecord_crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/dnsrecord/crd.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// `Thing`: a schemaless kind with a status subresource, for test guests.
pub fn thing_crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.operon.dev"},
        "spec": {
            "group": "example.operon.dev",
            "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    }))
    .unwrap()
}
