// Shared by the egress-probe test guests (each sets URL_SUFFIX, then
// includes this file). A guest of contract 0.2's `egress`, built with
// wit-bindgen directly so the tests see exactly what crosses:
//
// - `spec.calls`: `[{method, url, credential?, body?, headers?: {k: v},
//   timeoutMs?}]`, made in order; `status.results[i]` is `{status,
//   headers, body}` (the body as text) or `{error, message}`;
// - `spec.needles`: `[{name, len, hash}]`: after the calls, the guest scans
//   all of its linear memory for byte strings of length `len` whose
//   polynomial hash (base 257, wrapping u64) is `hash`, and reports
//   `status.memoryHits[name]` — a hostile guest's search for a credential
//   the host should never have handed it (the test gives a control needle
//   too, so a scan that cannot see fails);
// - `spec.flood`: `{url, times, bodyBytes}`: after the calls, POSTs a body
//   of `bodyBytes` to `url` `times` times whatever each answer is (a guest
//   looping on refused calls); `status.flood` is `{kinds: {kind: n},
//   last: message}` (the last error's message);
// - `status.count`: the cached count + 1.
//
// A body that is not UTF-8 is reported as `bytes` (its bytes), so a test
// can read what a compressed answer carried.
//
// - URL_SUFFIX: appended to every URL (`egress-probe-v2`: a version of
//   the module that makes other calls than a recording holds).
//
// Reconciles `example.operon.dev/v1alpha1 Thing`; owns nothing.

wit_bindgen::generate!({ path: "../../../../wit/reconciler.wit", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::egress::{HttpError, HttpRequest, fetch};
use operon::reconciler::types::{Failure, Gvk, Outcome, ReconcilerManifest, Request};
use serde_json::{Map, Value, json};

struct Component;
export!(Component);

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "egress-probe".into(),
            for_: Gvk { group: "example.operon.dev".into(), version: "v1alpha1".into(), kind: "Thing".into() },
            owns: vec![],
            updates: vec![],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: Value = serde_json::from_str(&request.object).unwrap_or(Value::Null);
        let spec = &parent["spec"];
        let mut results = Vec::new();
        for call in spec["calls"].as_array().cloned().unwrap_or_default() {
            let text = |k: &str| call[k].as_str().map(str::to_string);
            let headers = call["headers"]
                .as_object()
                .map(|h| h.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                .unwrap_or_default();
            let asked = HttpRequest {
                method: text("method").unwrap_or_else(|| "GET".into()),
                url: text("url").unwrap_or_default() + URL_SUFFIX,
                headers,
                body: text("body").map(String::into_bytes),
                credential: text("credential"),
                timeout_ms: call["timeoutMs"].as_u64().map(|t| t as u32),
            };
            results.push(match fetch(&asked) {
                Ok(r) => {
                    let headers: Map<String, Value> =
                        r.headers.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
                    match String::from_utf8(r.body) {
                        Ok(text) => json!({"status": r.status, "headers": headers, "body": text}),
                        Err(e) => json!({"status": r.status, "headers": headers, "bytes": e.into_bytes()}),
                    }
                }
                Err(e) => {
                    let (kind, message) = match e {
                        HttpError::Denied(m) => ("denied", m),
                        HttpError::Invalid(m) => ("invalid", m),
                        HttpError::Timeout(m) => ("timeout", m),
                        HttpError::Unreachable(m) => ("unreachable", m),
                        HttpError::TooLarge(m) => ("tooLarge", m),
                        HttpError::Budget(m) => ("budget", m),
                        HttpError::NotRecorded(m) => ("notRecorded", m),
                    };
                    json!({"error": kind, "message": message})
                }
            });
        }
        let mut flood = Value::Null;
        if let Some(f) = spec["flood"].as_object() {
            let asked = HttpRequest {
                method: "POST".into(),
                url: f.get("url").and_then(Value::as_str).unwrap_or_default().to_string() + URL_SUFFIX,
                headers: vec![],
                body: Some(vec![b'x'; f.get("bodyBytes").and_then(Value::as_u64).unwrap_or(0) as usize]),
                credential: None,
                timeout_ms: None,
            };
            let mut kinds = Map::new();
            let mut last = String::new();
            for _ in 0..f.get("times").and_then(Value::as_u64).unwrap_or(0) {
                let (kind, message) = match fetch(&asked) {
                    Ok(_) => ("ok", String::new()),
                    Err(HttpError::Denied(m)) => ("denied", m),
                    Err(HttpError::Invalid(m)) => ("invalid", m),
                    Err(HttpError::Timeout(m)) => ("timeout", m),
                    Err(HttpError::Unreachable(m)) => ("unreachable", m),
                    Err(HttpError::TooLarge(m)) => ("tooLarge", m),
                    Err(HttpError::Budget(m)) => ("budget", m),
                    Err(HttpError::NotRecorded(m)) => ("notRecorded", m),
                };
                let n = kinds.get(kind).and_then(Value::as_u64).unwrap_or(0) + 1;
                kinds.insert(kind.to_string(), json!(n));
                if !message.is_empty() {
                    last = message;
                }
            }
            flood = json!({"kinds": kinds, "last": last});
        }
        let mut hits = Map::new();
        for needle in spec["needles"].as_array().cloned().unwrap_or_default() {
            let name = needle["name"].as_str().unwrap_or_default().to_string();
            let len = needle["len"].as_u64().unwrap_or(0) as usize;
            let hash = needle["hash"].as_str().and_then(|h| h.parse::<u64>().ok()).unwrap_or(0);
            hits.insert(name, json!(scan(len, hash)));
        }
        let count = parent["status"]["count"].as_u64().unwrap_or(0) + 1;
        let status = json!({"count": count, "results": results, "memoryHits": hits, "flood": flood});
        Ok(Outcome {
            desired: vec![],
            status: Some(status.to_string()),
            events: vec![],
            requeue_after_ms: None,
            requeue_at: None,
            finalized: false,
            needs_finalizer: false,
            parent_metadata: None,
        })
    }
}

/// How many windows of `len` bytes of this instance's linear memory hash
/// to `hash` (a rolling polynomial hash, base 257).
fn scan(len: usize, hash: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    #[cfg(target_arch = "wasm32")]
    let size = core::arch::wasm32::memory_size(0) * 65536;
    #[cfg(not(target_arch = "wasm32"))]
    let size = 0usize;
    const BASE: u64 = 257;
    let top = (0..len - 1).fold(1u64, |p, _| p.wrapping_mul(BASE));
    // Every byte of the instance's own memory but address 0 (never a
    // credential), as a hostile guest would read it.
    let byte = |i: usize| -> u64 {
        #[allow(unsafe_code)]
        unsafe {
            core::ptr::read_volatile((i + 1) as *const u8) as u64
        }
    };
    let size = size.saturating_sub(1);
    if size < len {
        return 0;
    }
    let mut h = 0u64;
    for i in 0..len {
        h = h.wrapping_mul(BASE).wrapping_add(byte(i));
    }
    let mut found = u64::from(h == hash);
    for i in len..size {
        h = h.wrapping_sub(byte(i - len).wrapping_mul(top)).wrapping_mul(BASE).wrapping_add(byte(i));
        found += u64::from(h == hash);
    }
    found
}
