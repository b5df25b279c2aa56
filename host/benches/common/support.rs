//! What a benchmark program needs besides its measurement: where the built
//! guests are, its flags, quantiles, a schemaless test kind, the machine's
//! load. Included with `#[path]` by `egress.rs` and `fleet.rs` (the older
//! programs keep their own copies of these few lines).

#![allow(dead_code, reason = "each benchmark uses a subset")]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::path::PathBuf;
use std::time::Duration;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The bytes of `target/guests/NAME.wasm`; panics naming what to run.
pub fn guest(name: &str) -> Vec<u8> {
    let path = root().join("target/guests").join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask guests {name}`", path.display()))
}

/// The value after `name` on the command line.
pub fn flag(name: &str) -> Option<String> {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter().position(|a| a == name).and_then(|i| argv.get(i + 1)).cloned()
}

/// A number flag, or `default`.
pub fn arg(name: &str, default: usize) -> usize {
    flag(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A comma-separated flag, or `default`.
pub fn list(name: &str, default: &[&str]) -> Vec<String> {
    match flag(name) {
        Some(v) => v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        None => default.iter().map(|s| (*s).to_string()).collect(),
    }
}

/// The `q` quantile of `samples` (nearest rank); zero when there are none.
pub fn quantile(samples: &[Duration], q: f64) -> Duration {
    let mut s = samples.to_vec();
    s.sort();
    if s.is_empty() {
        return Duration::ZERO;
    }
    s[((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1]
}

/// Milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The machine's load averages (1, 5, 15 minutes) and its CPUs, as
/// `/proc/loadavg` and the scheduler say them.
pub fn load() -> String {
    let avg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let avg: Vec<&str> = avg.split_whitespace().take(3).collect();
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!("load average {} on {cpus} CPUs", avg.join(" "))
}

/// This process's threads (`Threads:` of `/proc/self/status`).
pub fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A schemaless namespaced kind `KIND` of `GROUP/v1alpha1` with a status
/// subresource (the test guests' `Thing`).
pub fn kind_crd(group: &str, kind: &str, plural: &str) -> CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    }))
    .expect("a CRD")
}
