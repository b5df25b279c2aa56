//! Outbound HTTP through the host (contract 0.2's `egress`), against a real
//! PowerDNS server (`common::pdns`; skipped without one unless
//! `OPERON_REQUIRE_PDNS=1`, as in CI).

use crate::common;
use crate::common::plugins;

use common::pdns::Pdns;
use common::{dnsrecord_crd, eventually, guest, thing_crd};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use operon::reconciler::crd::{ClusterReconciler, Reconciler};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

/// What the operator of these tests' hosts opens: every public host, and
/// loopback, where the tests' servers listen (`--egress-allow
/// '*,127.0.0.1'`). A Reconciler's grant alone never would.
fn operator_allows_loopback() -> operon::egress::grants::Allowed {
    operon::egress::grants::Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap()
}

/// A host whose operator opened loopback (see above).
async fn loopback_host(prefix: &str) -> plugins::Host {
    let pipeline = operon::pipeline::Config {
        controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
        egress_allowed: operator_allows_loopback(),
        ..Default::default()
    };
    plugins::Host::start_configured(plane(), prefix, false, pipeline).await
}

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("egress", || {
        use kube::CustomResourceExt;
        operon_envtest::Options::default()
            .crd(thing_crd())
            .crd(dnsrecord_crd())
            .crd(Reconciler::crd())
            .crd(ClusterReconciler::crd())
    })
}

// ---------------------------------------------------------------------------
// The PowerDNS harness itself (common/pdns.rs): a zone, an rrset written
// straight through the API with a plain HTTP client and read back, an
// outage and a restart on the same ports with the same data.

#[tokio::test]
async fn the_pdns_harness_should_serve_its_api_keep_its_data_across_a_restart_and_refuse_a_wrong_key() {
    let Some(mut pdns) = Pdns::start().await else { return };
    pdns.create_zone("example.org.").await;
    assert_eq!(pdns.rrset("example.org.", "www.example.org.", "A").await, None, "a new zone has no www");
    assert_eq!(
        pdns.rrset("example.org.", "example.org.", "NS").await,
        Some(vec!["ns1.example.org.".to_string()]),
        "the zone's apex"
    );

    // A PATCH as a reconciler sends it, with reqwest rather than the harness.
    operon::install_crypto_provider();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let zone_url = format!("{}/api/v1/servers/localhost/zones/example.org.", pdns.api());
    let patch = json!({"rrsets": [{
        "name": "www.example.org.", "type": "A", "ttl": 300, "changetype": "REPLACE",
        "records": [{"content": "192.0.2.1", "disabled": false}, {"content": "192.0.2.2", "disabled": false}]
    }]});
    let answer = client
        .patch(&zone_url)
        .header("X-API-Key", pdns.key())
        .header("content-type", "application/json")
        .body(patch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 204, "{}", answer.text().await.unwrap_or_default());
    assert_eq!(
        pdns.rrset_with_ttl("example.org.", "www.example.org", "A").await,
        Some((300, vec!["192.0.2.1".to_string(), "192.0.2.2".to_string()]))
    );

    // The key is required: what a credential adds.
    let refused = client.get(&zone_url).header("X-API-Key", "not-the-key").send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let (status, _) = pdns.call("GET", "/api/v1/servers/localhost/zones/missing.org.", None).await;
    assert_eq!(status, 404, "a zone that does not exist");

    // An outage: connections are refused, then the same server comes back.
    let port = pdns.api_port();
    pdns.stop();
    let down = client.get(&zone_url).header("X-API-Key", pdns.key()).send().await;
    assert!(down.as_ref().is_err_and(reqwest::Error::is_connect), "stopped, yet: {down:?}");
    pdns.restart().await;
    assert_eq!(pdns.api_port(), port);
    assert_eq!(
        pdns.rrset("example.org.", "www.example.org.", "A").await,
        Some(vec!["192.0.2.1".to_string(), "192.0.2.2".to_string()]),
        "the data outlives the restart"
    );
}

// ---------------------------------------------------------------------------
// Egress through the host: the `egress-probe` guest makes the calls a
// Thing's `spec.calls` lists and reports every answer in its status, so the
// tests see exactly what the guest was given.

/// A plain HTTP server on 127.0.0.1 the probe calls: `/echo` answers the
/// request (method, headers, body) as JSON and remembers its headers;
/// `/redirect?to=URL` redirects; `/slow` answers after 30 s; `/big` sends
/// 2 MiB.
struct Echo {
    port: u16,
    seen: Seen,
}

/// The headers of each request `/echo` was sent.
type Seen = Arc<Mutex<Vec<Vec<(String, String)>>>>;

impl Echo {
    async fn start() -> Echo {
        use axum::extract::{RawQuery, State};
        use axum::http::{HeaderMap, Method, StatusCode};
        use axum::response::IntoResponse;
        async fn echo(State(seen): State<Seen>, method: Method, headers: HeaderMap, body: String) -> impl IntoResponse {
            let headers: Vec<(String, String)> =
                headers.iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string())).collect();
            seen.lock().unwrap().push(headers.clone());
            let shown: serde_json::Map<String, Value> =
                headers.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
            let echoed = shown.values().filter_map(Value::as_str).collect::<Vec<_>>().join(" ");
            // The headers twice: as JSON, and back as an answer header.
            let answer = json!({"method": method.to_string(), "headers": shown, "body": body}).to_string();
            ([("x-echo", echoed), ("content-type", "application/json".to_string())], answer)
        }
        async fn redirect(RawQuery(q): RawQuery) -> impl IntoResponse {
            let to = q.unwrap_or_default().strip_prefix("to=").unwrap_or_default().to_string();
            (StatusCode::FOUND, [("location", to)])
        }
        async fn slow() -> &'static str {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "late"
        }
        async fn big() -> Vec<u8> {
            vec![b'x'; 2 << 20]
        }
        /// An API that echoes the key it was sent in an error message, and
        /// answers in whatever form the request asks: gzip, a byte range, a
        /// UTF-16 charset (`?force=gzip|utf16`: whatever it asks).
        async fn mirror(
            State(seen): State<Seen>,
            headers: HeaderMap,
            RawQuery(q): RawQuery,
        ) -> axum::response::Response {
            use std::io::Write as _;
            let lines: Vec<(String, String)> =
                headers.iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string())).collect();
            seen.lock().unwrap().push(lines);
            let asks = |h: &str, what: &str| {
                headers.get(h).and_then(|v| v.to_str().ok()).is_some_and(|v| v.to_ascii_lowercase().contains(what))
            };
            let q = q.unwrap_or_default();
            let key = headers.get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or_default();
            let mut body = format!("invalid key: {key}").into_bytes();
            let mut answer = axum::http::Response::builder();
            if asks("accept-charset", "utf-16") || q.contains("force=utf16") {
                body = String::from_utf8(body).unwrap().encode_utf16().flat_map(u16::to_le_bytes).collect();
                answer = answer.header("content-type", "text/plain; charset=utf-16le");
            } else {
                answer = answer.header("content-type", "text/plain; charset=utf-8");
            }
            let mut status = 200;
            if let Some((a, b)) = headers
                .get("range")
                .and_then(|v| v.to_str().ok())
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.split_once('-'))
            {
                let total = body.len();
                let a: usize = a.parse().unwrap_or(0).min(total - 1);
                let b: usize = b.parse().unwrap_or(total - 1).min(total - 1);
                body = body[a..=b].to_vec();
                status = 206;
                answer = answer.header("content-range", format!("bytes {a}-{b}/{total}"));
            }
            if asks("accept-encoding", "gzip") || q.contains("force=gzip") {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                gz.write_all(&body).unwrap();
                body = gz.finish().unwrap();
                answer = answer.header("content-encoding", "gzip");
            }
            answer.status(status).body(axum::body::Body::from(body)).unwrap()
        }
        let seen: Seen = Arc::default();
        let app = axum::Router::new()
            .route("/echo", axum::routing::any(echo))
            .route("/redirect", axum::routing::get(redirect))
            .route("/slow", axum::routing::get(slow))
            .route("/big", axum::routing::get(big))
            .route("/mirror", axum::routing::get(mirror))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Echo { port, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every header the server was sent, as `name: value` lines.
    fn headers_seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().flatten().map(|(k, v)| format!("{k}: {v}")).collect()
    }
}

/// The probe's hash of a needle (base 257, wrapping): it finds byte
/// strings of its memory by this, never holding the needle itself.
fn needle(name: &str, text: &str) -> Value {
    let hash = text.bytes().fold(0u64, |h, b| h.wrapping_mul(257).wrapping_add(u64::from(b)));
    json!({"name": name, "len": text.len(), "hash": hash.to_string()})
}

async fn probe(host: &plugins::Host, name: &str, extra: Value) {
    host.module_config_map("egress-probe", &guest("egress-probe")).await;
    let mut spec = json!({
        "module": plugins::config_map_module("egress-probe"),
        "grants": {"for": [{"group": "example.operon.dev", "kind": "Thing"}]},
    });
    for (k, v) in extra.as_object().unwrap() {
        if k == "grants" {
            for (g, gv) in v.as_object().unwrap() {
                spec["grants"][g] = gv.clone();
            }
        } else {
            spec[k] = v.clone();
        }
    }
    host.reconciler(name, spec).await;
}

async fn thing(host: &plugins::Host, name: &str, spec: Value) {
    let t: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    host.things().patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&t)).await.unwrap();
}

/// The status of a Thing once its `results` has `n` entries.
async fn results(host: &plugins::Host, name: &str, n: usize) -> Value {
    eventually(&format!("{name} reports {n} results"), WAIT, || async {
        let t = host.things().get_opt(name).await.ok()??;
        let status = t.data.get("status")?.clone();
        (status["results"].as_array()?.len() == n).then_some(status)
    })
    .await
}

/// What a grant allows goes out; everything else is refused before
/// anything is sent — an ungranted port, the cloud metadata address, a
/// redirect to a private address, a name that resolves to loopback — each
/// with a message the guest sees, and a warning event on the parent.
#[tokio::test]
async fn a_granted_call_should_go_out_and_every_other_be_refused_with_a_reason_and_an_event() {
    let echo = Echo::start().await;
    let host = loopback_host("eg-grants").await;
    let grant =
        json!({"egress": [{"scheme": "http", "host": "127.0.0.1", "port": echo.port, "methods": ["GET", "POST"]}]});
    probe(&host, "probe", json!({"grants": grant})).await;
    let calls = json!([
        {"url": echo.url("/echo")},
        {"url": format!("http://127.0.0.1:{}/echo", echo.port + 1)},
        {"url": "http://169.254.169.254/latest/meta-data/iam/"},
        {"url": echo.url("/redirect?to=http://10.0.0.1/admin")},
        {"url": format!("http://localhost:{}/echo", echo.port)},
        {"method": "DELETE", "url": echo.url("/echo")},
        {"method": "POST", "url": echo.url("/echo"), "body": "hello", "headers": {"x-test": "1", "host": "evil.example"}},
        {"url": echo.url("/big")},
        {"url": "file:///etc/passwd"},
    ]);
    thing(&host, "t1", json!({"calls": calls})).await;
    let status = results(&host, "t1", 9).await;
    let r = &status["results"];
    assert_eq!(r[0]["status"], 200, "{r}");
    assert_eq!(r[0]["headers"]["content-type"], "application/json");
    let kinds: Vec<&str> = (1..=5).chain([7, 8]).map(|i| r[i]["error"].as_str().unwrap_or("ok")).collect();
    assert_eq!(kinds, ["denied", "denied", "denied", "denied", "denied", "tooLarge", "denied"], "{r}");
    let message = |i: usize| r[i]["message"].as_str().unwrap_or_default().to_string();
    assert!(message(1).contains("port"), "{}", message(1));
    assert!(message(2).contains("169.254.169.254 is not in spec.grants.egress"), "{}", message(2));
    assert!(message(3).contains("a redirect") && message(3).contains("10.0.0.1"), "{}", message(3));
    assert!(
        message(4).contains("names reach only public addresses") || message(4).contains("localhost is not in"),
        "{}",
        message(4)
    );
    assert!(message(5).contains("method DELETE"), "{}", message(5));
    let echoed = &r[6]["body"].as_str().map(|b| serde_json::from_str::<Value>(b).unwrap()).unwrap();
    assert_eq!(echoed["body"], "hello");
    assert_eq!(echoed["headers"]["x-test"], "1");
    assert_eq!(echoed["headers"]["host"], format!("127.0.0.1:{}", echo.port), "the host sets Host, not the guest");
    // Nothing refused reached a server: only the two granted calls to /echo did.
    assert_eq!(echo.headers_seen().iter().filter(|h| h.starts_with("host:")).count(), 2);
    // A flood of calls: the reconcile's budget (16) ends it.
    let flood: Vec<Value> = (0..18).map(|_| json!({"url": echo.url("/echo")})).collect();
    thing(&host, "t2", json!({"calls": flood})).await;
    let status = results(&host, "t2", 18).await;
    let kinds: Vec<&str> =
        status["results"].as_array().unwrap().iter().map(|r| r["error"].as_str().unwrap_or("ok")).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "ok").count(), 16, "{kinds:?}");
    assert_eq!(&kinds[16..], ["budget", "budget"]);
    eventually("a warning event naming the refusal", WAIT, || async {
        let events = host.events("t1").await;
        events.into_iter().find(|(reason, note)| reason == "EgressDenied" && note.contains("spec.grants.egress"))
    })
    .await;
    host.stop().await;
}

/// A credential by reference: the host reads the Secret as the plugin's
/// ServiceAccount and adds it to a call to a host it is for; the guest
/// never holds it — not in the answer of a server that echoes it back (in
/// the body and in a header), not anywhere in its memory (it scans all of
/// it; a control needle it was sent proves the scan sees) — and a rotated
/// Secret is used without a restart. A credential named for another host,
/// or a name not in the spec, is refused.
#[tokio::test]
async fn a_credential_should_reach_its_host_and_never_the_guest_and_rotate_without_a_restart() {
    let echo = Echo::start().await;
    let host = loopback_host("eg-cred").await;
    let key = "k3y-7f1c2e9a-only-the-host-sees-this";
    let secrets: Api<Secret> = Api::namespaced(host.client.clone(), &host.ns);
    let secret = |value: &str| {
        serde_json::from_value::<Secret>(json!({"metadata": {"name": "api"}, "stringData": {"key": value}})).unwrap()
    };
    secrets.patch("api", &PatchParams::apply("test").force(), &Patch::Apply(&secret(key))).await.unwrap();
    service_account(&host, "prober", true).await;
    let spec = json!({
        "serviceAccountName": "prober",
        "grants": {"egress": [{"scheme": "http", "host": "127.0.0.1", "port": echo.port}]},
        "credentials": [
            {"name": "api", "secretRef": {"name": "api", "key": "key"}, "use": "header", "header": "X-API-Key", "hosts": ["127.0.0.1"]},
            {"name": "elsewhere", "secretRef": {"name": "api", "key": "key"}, "use": "bearer", "hosts": ["api.example.com"]},
        ],
    });
    probe(&host, "probe", spec).await;
    let calls = json!([
        {"url": echo.url("/echo"), "credential": "api", "headers": {"x-api-key": "guest-tried-to-set-it"}},
        {"url": echo.url("/echo"), "credential": "elsewhere"},
        {"url": echo.url("/echo"), "credential": "unknown"},
    ]);
    let control = format!("127.0.0.1:{}", echo.port);
    thing(&host, "t1", json!({"calls": calls, "needles": [needle("secret", key), needle("control", &control)]})).await;
    let status = results(&host, "t1", 3).await;
    let r = &status["results"];
    assert_eq!(r[0]["status"], 200, "{r}");
    assert!(echo.headers_seen().contains(&format!("x-api-key: {key}")), "the server got the key");
    assert!(!echo.headers_seen().iter().any(|h| h.contains("guest-tried-to-set-it")), "the guest's header is replaced");
    let everything = status.to_string();
    assert!(!everything.contains(key), "the guest saw the key: {everything}");
    assert!(everything.contains("[redacted]"), "the echoed key is blanked out: {everything}");
    assert_eq!(status["memoryHits"]["secret"], 0, "the key is in the guest's memory");
    assert!(status["memoryHits"]["control"].as_u64().unwrap_or(0) >= 1, "the scan sees nothing: {status}");
    assert_eq!(r[1]["error"], "denied");
    assert!(r[1]["message"].as_str().unwrap().contains("not for 127.0.0.1"), "{r}");
    assert_eq!(r[2]["error"], "denied");
    assert!(r[2]["message"].as_str().unwrap().contains("no credential \"unknown\""), "{r}");

    // Rotation: the new value goes out once the host's copy expires (5 s).
    let rotated = "r0tated-4b8d-only-the-host-sees-this";
    secrets.patch("api", &PatchParams::apply("test").force(), &Patch::Apply(&secret(rotated))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    thing(
        &host,
        "t2",
        json!({"calls": [{"url": echo.url("/echo"), "credential": "api"}], "needles": [needle("secret", rotated)]}),
    )
    .await;
    let status = results(&host, "t2", 1).await;
    assert!(echo.headers_seen().contains(&format!("x-api-key: {rotated}")), "the rotated key went out");
    assert!(!status.to_string().contains(rotated));
    assert_eq!(status["memoryHits"]["secret"], 0);
    host.stop().await;
}

/// A server that echoes the key cannot hand it to the guest in a form
/// redaction does not read: on a call carrying a credential the host asks
/// for the identity encoding and drops the guest's `Accept-Encoding`,
/// `Range` and `Accept-Charset`, and withholds an answer that comes back
/// compressed, sliced or in another charset anyway. Whatever the guest got,
/// decoded every way it could (gunzipped, as UTF-16, its slices joined),
/// holds no key; nor does its memory.
#[tokio::test]
async fn a_credential_should_not_come_back_compressed_sliced_or_re_encoded() {
    let echo = Echo::start().await;
    let host = loopback_host("eg-encode").await;
    let key = "k3y-5e1a7c0d-only-the-host-sees-this";
    let secrets: Api<Secret> = Api::namespaced(host.client.clone(), &host.ns);
    let secret =
        serde_json::from_value::<Secret>(json!({"metadata": {"name": "api"}, "stringData": {"key": key}})).unwrap();
    secrets.patch("api", &PatchParams::apply("test").force(), &Patch::Apply(&secret)).await.unwrap();
    service_account(&host, "prober", true).await;
    probe(
        &host,
        "probe",
        json!({
            "serviceAccountName": "prober",
            "grants": {"egress": [{"scheme": "http", "host": "127.0.0.1", "port": echo.port}]},
            "credentials": [{"name": "api", "secretRef": {"name": "api", "key": "key"}, "use": "header",
                             "header": "X-API-Key", "hosts": ["127.0.0.1"]}],
        }),
    )
    .await;
    let mirror = echo.url("/mirror");
    let calls = json!([
        {"url": mirror, "credential": "api", "headers": {"accept-encoding": "gzip"}},
        {"url": mirror, "credential": "api", "headers": {"range": "bytes=0-24"}},
        {"url": mirror, "credential": "api", "headers": {"range": "bytes=25-"}},
        {"url": mirror, "credential": "api", "headers": {"accept-charset": "utf-16"}},
        {"url": format!("{mirror}?force=gzip"), "credential": "api"},
        {"url": format!("{mirror}?force=utf16"), "credential": "api"},
    ]);
    let utf16: String = key.encode_utf16().flat_map(u16::to_le_bytes).map(char::from).collect();
    let needles = json!([needle("secret", key), needle("secretUtf16", &utf16), needle("control", &mirror[7..])]);
    thing(&host, "t1", json!({"calls": calls, "needles": needles})).await;
    let status = results(&host, "t1", 6).await;
    let r = status["results"].as_array().unwrap().clone();
    // Every reading of what came back.
    let mut readings = Vec::new();
    let mut joined = Vec::new();
    for answer in &r {
        let bytes: Vec<u8> = match (&answer["body"], &answer["bytes"]) {
            (Value::String(text), _) => text.clone().into_bytes(),
            (_, Value::Array(b)) => b.iter().map(|x| x.as_u64().unwrap() as u8).collect(),
            _ => Vec::new(),
        };
        joined.extend_from_slice(&bytes);
        let mut forms = vec![bytes.clone()];
        let mut gunzipped = Vec::new();
        if std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut gunzipped).is_ok() {
            forms.push(gunzipped);
        }
        for form in forms {
            readings.push(String::from_utf8_lossy(&form).into_owned());
            let pairs: Vec<u16> = form.chunks_exact(2).map(|p| u16::from_le_bytes([p[0], p[1]])).collect();
            readings.push(String::from_utf16_lossy(&pairs));
        }
    }
    readings.push(String::from_utf8_lossy(&joined).into_owned());
    readings.push(status.to_string());
    for reading in &readings {
        assert!(!reading.contains(key), "the guest could read the key: {reading}");
    }
    assert_eq!(r[0]["status"], 200, "{r:?}");
    assert!(r[0]["body"].as_str().is_some_and(|b| b.contains("[redacted]")), "{r:?}");
    for withheld in [4, 5] {
        assert_eq!(r[withheld]["error"], "denied", "{r:?}");
        assert!(r[withheld]["message"].as_str().unwrap().contains("withheld"), "{r:?}");
    }
    assert_eq!(status["memoryHits"]["secret"], 0, "the key is in the guest's memory");
    assert_eq!(status["memoryHits"]["secretUtf16"], 0, "the key, in UTF-16, is in the guest's memory");
    assert!(status["memoryHits"]["control"].as_u64().unwrap_or(0) >= 1, "the scan sees nothing: {status}");
    // What the server was sent: the host's choice of encoding, whole answers.
    let sent = echo.headers_seen();
    assert!(
        sent.iter().filter(|h| h.starts_with("accept-encoding:")).all(|h| h == "accept-encoding: identity"),
        "{sent:?}"
    );
    assert!(!sent.iter().any(|h| h.starts_with("range:") || h.starts_with("accept-charset:")), "{sent:?}");
    host.stop().await;
}

/// A guest looping on large calls that are refused at once (here: no
/// grant) holds nothing of them: every crossing counts against the
/// reconcile's budget and the host-call budget, a refused call keeps no
/// body, and the guest is told its budget is spent. The host's memory
/// stays put (the same loop once held every body it sent).
#[tokio::test]
async fn a_guest_looping_on_refused_large_calls_should_not_grow_the_hosts_memory() {
    let host = loopback_host("eg-flood").await;
    probe(&host, "probe", json!({"limits": {"timeout": "60s"}})).await;
    let rss = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().to_string();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() << 10
    };
    let before = rss();
    let most = Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampler = {
        let most = most.clone();
        tokio::spawn(async move {
            loop {
                most.fetch_max(rss(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // Past the host-call budget (1000), 256 KiB each: 262 MiB if each were kept.
    let flood = json!({"url": "https://api.example.com/x", "times": 1050, "bodyBytes": 256 << 10});
    thing(&host, "t1", json!({"flood": flood})).await;
    let status = eventually("the flood's report", WAIT, || async {
        let t = host.things().get_opt("t1").await.ok()??;
        let status = t.data.get("status")?.clone();
        status["flood"].is_object().then_some(status)
    })
    .await;
    sampler.abort();
    let grew = most.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(before);
    eprintln!("flood: the test process grew by {} MiB at most", grew >> 20);
    let kinds = &status["flood"]["kinds"];
    assert_eq!(kinds["denied"], 16, "{status}");
    assert_eq!(kinds["budget"], 1050 - 16, "{status}");
    let last = status["flood"]["last"].as_str().unwrap();
    assert!(last.contains("more than 1000 host calls"), "{last}");
    assert!(grew < 128 << 20, "the host grew by {} MiB on 1050 refused 256 KiB calls", grew >> 20);
    eventually("a warning event with a complete grant", WAIT, || async {
        let events = host.events("t1").await;
        events.into_iter().find(|(reason, note)| {
            reason == "EgressDenied"
                && note.contains("grants no egress: add {scheme: https, host: api.example.com, port: 443}")
        })
    })
    .await;
    host.stop().await;
}

/// Credentials need a ServiceAccount to be read as: without one, the
/// Reconciler is refused with a condition saying so.
#[tokio::test]
async fn credentials_without_a_service_account_should_be_refused_naming_the_field() {
    let host = plugins::Host::start_on(plane(), "eg-nosa", false).await;
    let spec = json!({
        "grants": {"egress": [{"host": "api.example.com"}]},
        "credentials": [{"name": "api", "secretRef": {"name": "api", "key": "key"}, "use": "bearer", "hosts": ["api.example.com"]}],
    });
    probe(&host, "probe", spec).await;
    eventually("a condition naming spec.serviceAccountName", WAIT, || async {
        let (status, _, message) = host.condition("probe", "Ready").await?;
        (status == "False" && message.contains("spec.credentials needs spec.serviceAccountName")).then_some(())
    })
    .await;
    host.stop().await;
}

/// The host's `--egress-allow` bounds what any Reconciler may grant: a
/// grant outside it is refused with a condition naming the flag.
#[tokio::test]
async fn a_grant_outside_the_hosts_allow_list_should_be_refused_naming_the_flag() {
    let pipeline = operon::pipeline::Config {
        egress_allowed: operon::egress::grants::Allowed::parse(&["*.example.com".into()]).unwrap(),
        ..Default::default()
    };
    let host = plugins::Host::start_configured(plane(), "eg-allow", false, pipeline).await;
    probe(&host, "inside", json!({"grants": {"egress": [{"host": "api.example.com"}]}})).await;
    probe(&host, "outside", json!({"grants": {"egress": [{"scheme": "http", "host": "127.0.0.1", "port": 80}]}})).await;
    eventually("outside refused, naming --egress-allow", WAIT, || async {
        let (status, _, message) = host.condition("outside", "Ready").await?;
        (status == "False" && message.contains("--egress-allow")).then_some(())
    })
    .await;
    eventually("inside running", WAIT, || async {
        let (status, _, _) = host.condition("inside", "Ready").await?;
        (status == "True").then_some(())
    })
    .await;
    host.stop().await;
}

/// A ServiceAccount for the probe, with a Role to write Things' status
/// and, with `secrets`, to read the Secret `api`.
async fn service_account(host: &plugins::Host, name: &str, secrets: bool) {
    let sas: Api<ServiceAccount> = Api::namespaced(host.client.clone(), &host.ns);
    sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap())
        .await
        .unwrap();
    let mut rules = vec![
        json!({"apiGroups": ["example.operon.dev"], "resources": ["things", "things/status"],
        "verbs": ["get", "list", "watch", "patch", "update"]}),
        json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}),
    ];
    if secrets {
        rules.push(json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["api"], "verbs": ["get"]}));
    }
    let role = serde_json::from_value::<Role>(json!({"metadata": {"name": name}, "rules": rules})).unwrap();
    let roles: Api<Role> = Api::namespaced(host.client.clone(), &host.ns);
    roles.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&role)).await.unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(host.client.clone(), &host.ns);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": host.ns}]}))
            .unwrap(),
        )
        .await
        .unwrap();
}

/// A slow endpoint is bounded by the reconcile's deadline (the call times
/// out with what is left of it, and the guest still answers), and while
/// one plugin waits on it, a neighbour keeps reconciling.
#[tokio::test]
async fn a_slow_endpoint_should_time_out_within_the_deadline_and_leave_a_neighbour_alone() {
    let echo = Echo::start().await;
    let host = loopback_host("eg-slow").await;
    let grant = json!({"egress": [{"scheme": "http", "host": "127.0.0.1", "port": echo.port}]});
    probe(
        &host,
        "slow",
        json!({"grants": grant, "limits": {"timeout": "3s"}, "selector": {"matchLabels": {"who": "slow"}}}),
    )
    .await;
    probe(&host, "quick", json!({"grants": grant, "selector": {"matchLabels": {"who": "quick"}}})).await;
    let slow = labelled_thing("s1", "slow", json!({"calls": [{"url": echo.url("/slow")}, {"url": echo.url("/echo")}]}));
    host.things().patch("s1", &PatchParams::apply("test").force(), &Patch::Apply(&slow)).await.unwrap();
    let started = std::time::Instant::now();
    // The neighbour: ten Things, each reconciled once, while s1 waits.
    for i in 0..10 {
        let quick = labelled_thing(&format!("q{i}"), "quick", json!({"calls": [{"url": echo.url("/echo")}]}));
        host.things()
            .patch(&format!("q{i}"), &PatchParams::apply("test").force(), &Patch::Apply(&quick))
            .await
            .unwrap();
    }
    for i in 0..10 {
        let status = results(&host, &format!("q{i}"), 1).await;
        assert_eq!(status["results"][0]["status"], 200);
    }
    let neighbour_done = started.elapsed();
    let status = results(&host, "s1", 2).await;
    let r = &status["results"];
    assert_eq!(r[0]["error"], "timeout", "{r}");
    assert_eq!(r[1]["error"], "timeout", "no time left for the second call: {r}");
    assert!(
        neighbour_done < Duration::from_secs(25),
        "the neighbour's ten reconciles took {neighbour_done:?}, as long as the slow endpoint"
    );
    host.stop().await;
}

/// Guests waiting on egress do not hold the host's gate: with room for
/// only four calls' memory and slots, twelve calls waiting on a slow
/// endpoint still leave a neighbour's reconciles going (a waiting call
/// lends its slot and the memory it has not grown to).
#[tokio::test]
async fn calls_waiting_on_egress_should_not_hold_the_hosts_gate_against_a_neighbour() {
    let echo = Echo::start().await;
    let gate = operon::runtime::GateLimits { memory: (4 * 64) << 20, calls: 4 };
    // No CPU budget in the way (it would let the slow calls in one by one:
    // until a call returned, each is charged its whole deadline).
    let pipeline = operon::pipeline::Config {
        controller: operon::controller::Config { max_concurrent_reconciles: 12, ..Default::default() },
        guest_cpu: 0.0,
        guest_cpu_max: 0.0,
        egress_allowed: operator_allows_loopback(),
        ..Default::default()
    };
    let host = plugins::Host::start_gated(plane(), "eg-gate", pipeline, gate).await;
    let grant = json!({"egress": [{"scheme": "http", "host": "127.0.0.1", "port": echo.port}]});
    let slow = json!({"grants": grant, "limits": {"timeout": "20s"}, "selector": {"matchLabels": {"who": "slow"}}});
    probe(&host, "slow", slow).await;
    probe(&host, "quick", json!({"grants": grant, "selector": {"matchLabels": {"who": "quick"}}})).await;
    let pp = PatchParams::apply("test").force();
    for i in 0..12 {
        let slow = labelled_thing(
            &format!("s{i}"),
            "slow",
            json!({"calls": [{"url": echo.url("/slow"), "timeoutMs": 15000}]}),
        );
        host.things().patch(&format!("s{i}"), &pp, &Patch::Apply(&slow)).await.unwrap();
    }
    // Give the slow calls time to be admitted and start waiting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = std::time::Instant::now();
    for i in 0..5 {
        let quick = labelled_thing(&format!("q{i}"), "quick", json!({"calls": [{"url": echo.url("/echo")}]}));
        host.things().patch(&format!("q{i}"), &pp, &Patch::Apply(&quick)).await.unwrap();
    }
    for i in 0..5 {
        let status = results(&host, &format!("q{i}"), 1).await;
        assert_eq!(status["results"][0]["status"], 200);
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "the neighbour waited {took:?}: the slow calls held the gate");
    host.stop().await;
}

/// A live reconcile recorded (`--record`) replays green offline with
/// `operon test`'s runner, `operon explain` shows it, and a version of the
/// module that makes another call fails the replay, naming the call.
#[tokio::test]
async fn a_recorded_reconcile_should_replay_offline_and_fail_on_a_call_it_does_not_hold() {
    let echo = Echo::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pipeline = operon::pipeline::Config {
        record: Some(Arc::new(operon::pipeline::record::Recorder::new(dir.path().to_path_buf(), 1))),
        egress_allowed: operator_allows_loopback(),
        ..Default::default()
    };
    let host = plugins::Host::start_configured(plane(), "eg-record", false, pipeline).await;
    let key = "rec0rd-9a7b-only-the-host-sees-this";
    let secrets: Api<Secret> = Api::namespaced(host.client.clone(), &host.ns);
    let secret =
        serde_json::from_value::<Secret>(json!({"metadata": {"name": "api"}, "stringData": {"key": key}})).unwrap();
    secrets.patch("api", &PatchParams::apply("test").force(), &Patch::Apply(&secret)).await.unwrap();
    service_account(&host, "prober", true).await;
    probe(&host, "probe", json!({
        "serviceAccountName": "prober",
        "grants": {"egress": [{"scheme": "http", "host": "127.0.0.1", "port": echo.port}]},
        "credentials": [{"name": "api", "secretRef": {"name": "api", "key": "key"}, "use": "bearer", "hosts": ["127.0.0.1"]}],
    }))
    .await;
    thing(
        &host,
        "t1",
        json!({"calls": [{"method": "POST", "url": echo.url("/echo"), "body": "{}", "credential": "api"}]}),
    )
    .await;
    results(&host, "t1", 1).await;
    let recorded = eventually("a recording of t1", WAIT, || async {
        // One directory per controller: `NAMESPACE_probe`.
        let dir = dir.path().join(format!("{}_probe", host.ns));
        let files: Vec<_> = std::fs::read_dir(&dir).ok()?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        let case = files.iter().find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.contains(".t1-")
                && !name.contains(".expected.")
                && std::fs::read_to_string(p).is_ok_and(|t| t.contains("egress:"))
        })?;
        Some(case.clone())
    })
    .await;
    let ns = host.ns.clone();
    host.stop().await;
    // `operon explain` reads the recordings back: the module, the call.
    let explained = std::process::Command::new(env!("CARGO_BIN_EXE_operon"))
        .args(["explain", "thing/t1", "-n", &ns, "--recordings"])
        .arg(dir.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&explained.stdout).into_owned();
    assert!(explained.status.success(), "{shown}{}", String::from_utf8_lossy(&explained.stderr));
    let digest = operon::reconciler::source::digest(&guest("egress-probe"));
    assert!(shown.contains(&format!("controller {ns}/probe, module {digest}")), "{shown}");
    assert!(
        shown.contains(&format!("call: POST {} (2 bytes of body) with credential \"api\" → 200", echo.url("/echo"))),
        "{shown}"
    );
    assert!(!shown.contains(key), "{shown}");
    // Only the case: the other recordings (status echoes) are not this test's.
    let offline = tempfile::tempdir().unwrap();
    let name = recorded.file_name().unwrap().to_string_lossy().into_owned();
    let expected = name.replace(".yaml", ".expected.yaml");
    std::fs::copy(&recorded, offline.path().join(&name)).unwrap();
    std::fs::copy(recorded.with_file_name(&expected), offline.path().join(&expected)).unwrap();
    let text = std::fs::read_to_string(offline.path().join(&name)).unwrap();
    assert!(!text.contains(key), "the key is in the recording:\n{text}");
    assert!(text.contains("credential: api"), "{text}");
    let runtime =
        operon::runtime::Runtime::new(operon::runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    let module = runtime.load(&guest("egress-probe"), operon::runtime::Limits::default()).unwrap();
    let mut out = Vec::new();
    let report = operon::fixtures::run_dir(&module, offline.path(), false, &mut out).unwrap();
    let shown = String::from_utf8_lossy(&out).into_owned();
    assert_eq!((report.passed, report.failed.len()), (1, 0), "{shown}");
    // A version of the module that makes another call fails the replay,
    // naming the call.
    let v2 = runtime.load(&guest("egress-probe-v2"), operon::runtime::Limits::default()).unwrap();
    let mut out = Vec::new();
    let report = operon::fixtures::run_dir(&v2, offline.path(), false, &mut out).unwrap();
    let shown = String::from_utf8_lossy(&out).into_owned();
    assert_eq!(report.failed.len(), 1, "{shown}");
    let call = format!("does not hold: POST {} (2 bytes of body) with credential \"api\"", echo.url("/echo?v2"));
    assert!(shown.contains(&call), "{shown}");
}

/// A shadow candidate calls nothing outside: it is answered from the live
/// version's exchanges of the same reconcile, so an identical candidate
/// compares equal while the server sees each call once.
#[tokio::test]
async fn a_shadow_candidate_should_be_answered_from_the_live_calls_and_send_none() {
    let echo = Echo::start().await;
    let host = loopback_host("eg-shadow").await;
    let grant = json!({"egress": [{"scheme": "http", "host": "127.0.0.1", "port": echo.port}]});
    probe(&host, "probe", json!({"grants": grant, "rollout": "shadow"})).await;
    thing(&host, "t1", json!({"calls": [{"url": echo.url("/echo")}], "round": 0})).await;
    results(&host, "t1", 1).await;
    // The same behaviour in other bytes: a candidate to compare.
    let mut same = guest("egress-probe");
    same.extend_from_slice(&[0, 5, 4, b't', b'e', b's', b't']);
    host.module_config_map("egress-probe", &same).await;
    let shadow = eventually("the candidate compared", WAIT, || async {
        let round = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        thing(&host, "t1", json!({"calls": [{"url": echo.url("/echo")}], "round": round})).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s = host.reconcilers().get("probe").await.ok()?.status?.shadow?;
        (s.candidate_digest == operon::reconciler::source::digest(&same) && s.compared >= 2).then_some(s)
    })
    .await;
    assert_eq!(shadow.differing, 0, "the candidate got the live answers: {shadow:?}");
    let count = host.things().get("t1").await.unwrap().data["status"]["count"].as_u64().unwrap();
    let calls = echo.headers_seen().iter().filter(|h| h.starts_with("host:")).count() as u64;
    assert_eq!(calls, count, "{calls} calls reached the server for {count} live reconciles: the candidate called out");
    host.stop().await;
}

// ---------------------------------------------------------------------------
// The DnsRecord examples (guest-examples/dnsrecord) against a real
// PowerDNS: records follow their DnsRecords, an outage is a transient
// failure with a status that says so and converges when the server is
// back, and a deleted DnsRecord's record goes before its finalizer.

#[tokio::test]
async fn the_rust_dnsrecord_should_keep_records_in_powerdns() {
    dnsrecord_lifecycle("rust-dnsrecord").await;
}

#[tokio::test]
async fn the_python_dnsrecord_should_keep_records_in_powerdns() {
    dnsrecord_lifecycle("python-dnsrecord").await;
}

async fn dnsrecord_lifecycle(module: &str) {
    let Some(mut pdns) = Pdns::start().await else { return };
    let zone = format!("{}.example.", module.split('-').next().unwrap());
    pdns.create_zone(&zone).await;
    // From a file (a Python module is larger than a ConfigMap holds), with
    // every reconcile recorded.
    let recordings = tempfile::tempdir().unwrap();
    let pipeline = operon::pipeline::Config {
        controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
        record: Some(Arc::new(operon::pipeline::record::Recorder::new(recordings.path().to_path_buf(), 1))),
        egress_allowed: operator_allows_loopback(),
        ..Default::default()
    };
    let host = plugins::Host::start_configured(plane(), &format!("eg-{module}"), true, pipeline).await;
    let ns = host.ns.clone();
    let secrets: Api<Secret> = Api::namespaced(host.client.clone(), &ns);
    let secret = json!({"metadata": {"name": "pdns-api"}, "stringData": {"api-key": pdns.key()}});
    secrets
        .patch(
            "pdns-api",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&serde_json::from_value::<Secret>(secret).unwrap()),
        )
        .await
        .unwrap();
    // The example's own ServiceAccount and Role (reconciler.yaml).
    let sas: Api<ServiceAccount> = Api::namespaced(host.client.clone(), &ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "dnsrecord-plugin"}})).unwrap(),
    )
    .await
    .unwrap();
    let role = json!({"metadata": {"name": "dnsrecord-plugin"}, "rules": [
        {"apiGroups": ["dns.example.operon.dev"], "resources": ["dnsrecords", "dnsrecords/status"], "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["pdns-api"], "verbs": ["get"]},
    ]});
    let roles: Api<Role> = Api::namespaced(host.client.clone(), &ns);
    roles.create(&PostParams::default(), &serde_json::from_value(role).unwrap()).await.unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(host.client.clone(), &ns);
    let binding = json!({"metadata": {"name": "dnsrecord-plugin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dnsrecord-plugin"},
        "subjects": [{"kind": "ServiceAccount", "name": "dnsrecord-plugin", "namespace": ns}]});
    bindings.create(&PostParams::default(), &serde_json::from_value(binding).unwrap()).await.unwrap();
    let path = common::guests_dir().join(format!("{module}.wasm"));
    assert!(path.is_file(), "{} is missing: build it with `cargo xtask guests {module}`", path.display());
    let path = std::fs::canonicalize(path).unwrap();
    host.reconciler(
        "dnsrecord",
        json!({
            "module": {"path": path},
            "grants": {
                "for": [{"group": "dns.example.operon.dev", "kind": "DnsRecord"}],
                "egress": [{"scheme": "http", "host": "127.0.0.1", "port": pdns.api_port(), "methods": ["GET", "PATCH"],
                            "pathPrefix": "/api/v1/servers/localhost/zones/"}],
            },
            "credentials": [{"name": "pdns", "secretRef": {"name": "pdns-api", "key": "api-key"}, "use": "header",
                             "header": "X-API-Key", "hosts": ["127.0.0.1"]}],
            "serviceAccountName": "dnsrecord-plugin",
            "limits": {"timeout": "5s"},
        }),
    )
    .await;
    let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "dns.example.operon.dev",
        "v1alpha1",
        "DnsRecord",
    ));
    let records: Api<kube::api::DynamicObject> = Api::namespaced_with(host.client.clone(), &ns, &ar);
    let server = pdns.api();
    let apply = |values: Vec<&str>| {
        serde_json::from_value::<kube::api::DynamicObject>(json!({
            "apiVersion": "dns.example.operon.dev/v1alpha1", "kind": "DnsRecord", "metadata": {"name": "www"},
            "spec": {"server": server, "zone": zone, "name": "www", "type": "A", "ttl": 300, "records": values}
        }))
        .unwrap()
    };
    let fqdn = format!("www.{zone}");
    let ready = |want: &'static str| {
        let records = records.clone();
        async move {
            let r = records.get_opt("www").await.ok()??;
            let conditions = r.data["status"]["conditions"].as_array()?.clone();
            let c = conditions.into_iter().find(|c| c["type"] == "Ready")?;
            (c["reason"] == want).then_some(c)
        }
    };
    let pp = PatchParams::apply("test").force();

    // Create, then update.
    records.patch("www", &pp, &Patch::Apply(&apply(vec!["192.0.2.1"]))).await.unwrap();
    eventually("the record in PowerDNS", WAIT, || async {
        (pdns.rrset(&zone, &fqdn, "A").await == Some(vec!["192.0.2.1".to_string()])).then_some(())
    })
    .await;
    eventually("Ready: Synced", WAIT, || ready("Synced")).await;
    records.patch("www", &pp, &Patch::Apply(&apply(vec!["192.0.2.9", "192.0.2.1"]))).await.unwrap();
    eventually("the record updated", WAIT, || async {
        let want = vec!["192.0.2.1".to_string(), "192.0.2.9".to_string()];
        (pdns.rrset(&zone, &fqdn, "A").await == Some(want)).then_some(())
    })
    .await;

    // An outage: the change waits with a status that says why, then lands.
    pdns.stop();
    records.patch("www", &pp, &Patch::Apply(&apply(vec!["192.0.2.7"]))).await.unwrap();
    let down = eventually("Ready: ServerUnavailable", WAIT, || ready("ServerUnavailable")).await;
    assert_eq!(down["status"], "False", "{down}");
    pdns.restart().await;
    eventually("the record after the outage", WAIT, || async {
        (pdns.rrset(&zone, &fqdn, "A").await == Some(vec!["192.0.2.7".to_string()])).then_some(())
    })
    .await;
    eventually("Ready: Synced again", WAIT, || ready("Synced")).await;

    // Delete: the record goes before the finalizer is released.
    records.delete("www", &Default::default()).await.unwrap();
    eventually("the DnsRecord gone", WAIT, || async { records.get_opt("www").await.ok()?.is_none().then_some(()) })
        .await;
    assert_eq!(pdns.rrset(&zone, &fqdn, "A").await, None, "the record outlived its DnsRecord");
    let egress_in_events = host.events("www").await;
    assert!(!egress_in_events.iter().any(|(_, note)| note.contains(pdns.key())), "the key is in an event");
    host.stop().await;

    // The live run, recorded, replays green offline — through both
    // languages' modules, which make the same calls. (With
    // OPERON_KEEP_RECORDINGS=DIR the recordings are kept there: how
    // guest-examples/dnsrecord/fixtures/recorded was made.)
    let dir = recordings.path().join(format!("{ns}_dnsrecord"));
    if let Some(keep) = std::env::var_os("OPERON_KEEP_RECORDINGS") {
        let keep = std::path::PathBuf::from(keep).join(module);
        std::fs::create_dir_all(&keep).unwrap();
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), keep.join(e.file_name())).unwrap();
        }
    }
    let text: String =
        std::fs::read_dir(&dir).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    assert!(text.contains("egress:") && !text.contains(pdns.key()), "the recordings hold the calls and never the key");
    let runtime =
        operon::runtime::Runtime::new(operon::runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    for language in ["rust-dnsrecord", "python-dnsrecord"] {
        let limits = operon::runtime::Limits { timeout: Duration::from_secs(10), ..Default::default() };
        let replaying = runtime.load(&guest(language), limits).unwrap();
        let mut out = Vec::new();
        let report = operon::fixtures::run_dir(&replaying, &dir, false, &mut out).unwrap();
        let shown = String::from_utf8_lossy(&out).into_owned();
        assert!(report.failed.is_empty() && report.passed >= 5, "{module}'s recording through {language}:\n{shown}");
    }
}

/// A Thing named `name` with the label `who` (which probe Reconciler
/// reconciles it) and `spec`.
fn labelled_thing(name: &str, who: &str, spec: Value) -> kube::api::DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": name, "labels": {"who": who}}, "spec": spec
    }))
    .unwrap()
}

/// `operon run --record DIR --record-selector SEL`, through the command
/// line: reconciles of the parents the selector selects are recorded as
/// fixtures under DIR, those of the others are not, and `--record-every`
/// and `--record-selector` are refused without `--record`.
#[tokio::test]
async fn operon_run_should_record_only_the_parents_its_record_selector_selects() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::DynamicObject;
    let client = plane().client().await;
    let ns = "run-record";
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value::<Namespace>(json!({"metadata": {"name": ns}})).unwrap();
    namespaces.patch(ns, &PatchParams::apply("test").force(), &Patch::Apply(&namespace)).await.unwrap();

    let without = std::process::Command::new(env!("CARGO_BIN_EXE_operon"))
        .args(["run", "--module", "x.wasm", "--record-selector", "app=picked"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&without.stderr);
    assert!(!without.status.success() && said.contains("--record"), "{said}");

    let dir = tempfile::tempdir().unwrap();
    let module = common::guests_dir().join("clockwork.wasm");
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_operon"))
        .args(["run", "--module", module.to_str().unwrap(), "--namespace", ns, "--record"])
        .arg(dir.path())
        .args(["--record-selector", "app=picked", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"])
        .env("KUBECONFIG", plane().kubeconfig_path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(&mut run);

    let gvk = kube::api::GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing");
    let things: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kube::api::ApiResource::from_gvk_with_plural(&gvk, "things"));
    for (name, labels) in [("picked", json!({"app": "picked"})), ("passed", json!({"app": "other"}))] {
        let thing = json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {}});
        let thing: DynamicObject = serde_json::from_value(thing).unwrap();
        things.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&thing)).await.unwrap();
    }
    // Both are reconciled (clockwork counts its reconciles in the status) ...
    for name in ["picked", "passed"] {
        eventually(&format!("{name} reconciled"), WAIT, || async {
            let thing = things.get(name).await.ok()?;
            (thing.data["status"]["count"].as_u64()? >= 1).then_some(())
        })
        .await;
    }
    // ... and only the selected one is recorded, as a fixture and its outcome.
    let files = || {
        let mut found = Vec::new();
        let mut dirs = vec![dir.path().to_path_buf()];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    found.push((path.clone(), std::fs::read_to_string(&path).unwrap_or_default()));
                }
            }
        }
        found
    };
    eventually("a recording of picked, with its expected outcome", WAIT, || async {
        let files = files();
        let case = files.iter().any(|(p, t)| !p.to_string_lossy().contains(".expected.") && t.contains("name: picked"));
        let expected = files.iter().any(|(p, _)| p.to_string_lossy().contains(".expected."));
        (case && expected).then_some(())
    })
    .await;
    let recorded_passed: Vec<_> =
        files().into_iter().filter(|(_, t)| t.contains("name: passed")).map(|(p, _)| p).collect();
    assert!(recorded_passed.is_empty(), "a parent the selector does not select was recorded: {recorded_passed:?}");
}
