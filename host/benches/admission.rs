//! What an admission webhook costs a write (`cargo xtask bench admission`):
//! the WebApp guest's `validate` and `mutate` served by the host's HTTPS
//! server to a real kube-apiserver, beside the same two webhooks written
//! with controller-runtime's webhook package (the Go peer,
//! `host/benches/peers/go-webapp webhook`), and the same creates without a
//! webhook, in one run against one API server.
//!
//! Three namespaces of one control plane: `operon-hooked`, which Operon's
//! webhook configurations select; `go-hooked`, which the Go peer's select
//! (copied from Operon's as the API server stored them: same rules,
//! failure policy, timeout, side effects, review versions, match and
//! reinvocation policy, and a namespace selector of the same shape); and
//! `plain`, which neither selects. Creates (valid WebApps, ~300 bytes each,
//! no port) rotate one at a time through the three in all six orders, so
//! drift weighs on all alike; each create's round trip is timed from the
//! request to the response, and each stored object is checked (a port
//! where a webhook defaulted it, none in `plain`).
//!
//! Then where the time goes, without the API server: the same
//! AdmissionReview posted over HTTPS (HTTP/1.1, a kept-alive connection) to
//! each server's mutating and validating path; Operon's handler answering
//! in-process (`Webhooks::answer`: routing, JSON, the guest call under its
//! sandbox; no TLS); and a bare thread spawn, the hop that handler makes
//! per guest call. Each back to back, then all interleaved one call at a
//! time (as behind the API server, where other work runs between two calls
//! of one webhook). The Go handlers in-process are `go test -bench Webhook`
//! in the peer's directory.
//!
//! Options: `--creates N` (per namespace, default 300), `--calls N` (direct
//! and in-process answers per hook, default 2000). Needs the Go peer built
//! into `target/peers/go-webapp` (`cargo xtask bench admission` builds it).

#[path = "common/go_peer.rs"]
mod go_peer;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use operon::webhook::{self, FailurePolicy, Hook, Registration};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Operon's plugin: routes `/mutate/bench`, `/validate/bench`,
/// configurations `operon-bench`.
const PLUGIN: &str = "bench";
/// The Go peer's configurations.
const GO_CONFIG: &str = "go-webapp-bench";
/// The Go peer's paths (kubebuilder's, `webhook.go`).
const GO_MUTATE: &str = "/mutate-example-operon-dev-v1alpha1-webapp";
const GO_VALIDATE: &str = "/validate-example-operon-dev-v1alpha1-webapp";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

fn arg(name: &str, default: usize) -> usize {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter().position(|a| a == name).and_then(|i| argv.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// p50, p99 and max, in milliseconds.
type Quantiles = (f64, f64, f64);

/// p50, p99 and max of `samples`, in milliseconds.
fn percentiles(samples: &mut [Duration]) -> Quantiles {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).saturating_sub(1).min(samples.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(at(0.50)), ms(at(0.99)), ms(samples[samples.len() - 1]))
}

/// The 1-minute load average (`/proc/loadavg`): how shared the machine was.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

fn webapp(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": name},
        "spec": {"image": "nginx:1.27", "replicas": 3, "env": [{"name": "MODE", "value": "production"}]}
    }))
    .unwrap()
}

/// The AdmissionReview the API server sends for a create of `webapp("app")`
/// in `namespace`.
fn review(uid: usize, namespace: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("00000000-0000-0000-0000-{uid:012}"),
            "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
            "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
            "requestKind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
            "name": "app", "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                "metadata": {"name": "app", "namespace": namespace},
                "spec": webapp("app").data["spec"]
            },
            "dryRun": false
        }
    }))
    .unwrap()
}

/// A CA and a serving certificate for 127.0.0.1, written as the Go peer
/// reads them (`tls.crt`, `tls.key`); returns the CA's PEM.
fn write_certs(dir: &Path) -> Vec<u8> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "go-webapp-bench-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut serving = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    serving.distinguished_name.push(DnType::CommonName, "go-webapp-bench");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = serving.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca_cert.pem().into_bytes()
}

/// The Go peer's webhook server, stopped when dropped.
struct GoPeer {
    child: Child,
    port: u16,
    ca: Vec<u8>,
    _certs: tempfile::TempDir,
}

impl GoPeer {
    fn start() -> GoPeer {
        let bin = go_peer::build(&target_dir()).expect("building the Go peer");
        let certs = tempfile::tempdir().unwrap();
        let ca = write_certs(certs.path());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let logs = target_dir().join("bench");
        std::fs::create_dir_all(&logs).unwrap();
        let log = std::fs::File::create(logs.join("admission-go-webhook.log")).unwrap();
        let child = Command::new(&bin)
            .args(["webhook", "--host", "127.0.0.1", "--port", &port.to_string(), "--cert-dir"])
            .arg(certs.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        GoPeer { child, port, ca, _certs: certs }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for GoPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Only `namespace`, as the host narrows a scoped plugin's selector.
fn only(namespace: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![namespace.to_string()]),
        }]),
        match_labels: None,
    })
}

/// The Go peer's configurations: Operon's, as the API server stored them,
/// pointed at the Go server and at `namespace`.
async fn register_go(client: &kube::Client, peer: &GoPeer, namespace: &str) {
    let operon = format!("operon-{PLUGIN}");
    let metadata = ObjectMeta { name: Some(GO_CONFIG.into()), ..Default::default() };
    let ca = Some(ByteString(peer.ca.clone()));
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut hooks = validating.get(&operon).await.unwrap().webhooks.expect("Operon's validating webhook");
    for hook in &mut hooks {
        hook.name = "validate.go-webapp.example.operon.dev".into();
        hook.client_config.url = Some(peer.url(GO_VALIDATE));
        hook.client_config.ca_bundle = ca.clone();
        hook.namespace_selector = only(namespace);
    }
    let config = ValidatingWebhookConfiguration { metadata: metadata.clone(), webhooks: Some(hooks) };
    validating.create(&PostParams::default(), &config).await.unwrap();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut hooks = mutating.get(&operon).await.unwrap().webhooks.expect("Operon's mutating webhook");
    for hook in &mut hooks {
        hook.name = "mutate.go-webapp.example.operon.dev".into();
        hook.client_config.url = Some(peer.url(GO_MUTATE));
        hook.client_config.ca_bundle = ca.clone();
        hook.namespace_selector = only(namespace);
    }
    mutating
        .create(&PostParams::default(), &MutatingWebhookConfiguration { metadata, webhooks: Some(hooks) })
        .await
        .unwrap();
}

/// Wait until the API server calls the webhooks of `api`'s namespace: a
/// WebApp without a port is stored with the default only then.
async fn wait_for_webhooks(api: &Api<DynamicObject>, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dry_run = PostParams { dry_run: true, ..Default::default() };
        if let Ok(probe) = api.create(&dry_run, &webapp("probe")).await
            && probe.data["spec"]["port"] == 8080
        {
            return;
        }
        assert!(Instant::now() < deadline, "the API server did not call {who}'s webhooks within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn main() {
    operon::install_crypto_provider();
    let creates = arg("--creates", 300);
    let calls = arg("--calls", 2000);
    let crd_text = std::fs::read_to_string(root().join("guest-examples/webapp/crd.yaml")).unwrap();
    // Without the schema's default for `spec.port`: a stored port then shows
    // that a webhook's `mutate` ran (and only where the webhook applies).
    let mut crd: serde_json::Value = serde_saphyr::from_str(&crd_text).expect("guest-examples/webapp/crd.yaml is YAML");
    crd.pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/port")
        .and_then(serde_json::Value::as_object_mut)
        .and_then(|port| port.remove("default"))
        .expect("the WebApp CRD defaults spec.port");
    let crd = serde_json::from_value(crd).expect("guest-examples/webapp/crd.yaml is a CRD");
    let peer = GoPeer::start();
    let started = Instant::now();
    let plane = operon_envtest::ControlPlane::start(operon_envtest::Options::default().crd(crd))
        .expect("starting the control plane (cargo xtask envtest, or KUBEBUILDER_ASSETS)");
    eprintln!("bench: control plane up in {:.1?}", started.elapsed());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run(&plane, &peer, creates, calls));
}

/// The sides of the comparison, in table order.
const SIDES: [&str; 3] = ["Operon", "controller-runtime", "no webhook"];
/// Every order of the three sides: each goes first, second and last, and
/// after each other side, equally often.
const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]];

async fn run(plane: &operon_envtest::ControlPlane, peer: &GoPeer, creates: usize, calls: usize) {
    let load_before = load_average();
    let client = plane.client().await;
    let namespaces = [
        operon_envtest::create_namespace(&client, "operon-hooked").await.unwrap(),
        operon_envtest::create_namespace(&client, "go-hooked").await.unwrap(),
        operon_envtest::create_namespace(&client, "plain").await.unwrap(),
    ];

    let runtime = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    let bytes = std::fs::read(root().join("target/guests/rust-webapp.wasm"))
        .expect("target/guests/rust-webapp.wasm: run `cargo xtask guests rust-webapp`");
    let module = runtime.load(&bytes, Limits::default()).unwrap();
    // The webhooks call the controller's module; the controller itself need
    // not run (nothing reconciles, so only the creates load the API server).
    let config = webhook::Config {
        bind: ([127, 0, 0, 1], 0).into(),
        cert_dir: None,
        endpoint: webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
        ..Default::default()
    };
    let mgr = Manager::builder(client.clone())
        .config(manager::Config { server_addr: None, ..Default::default() })
        .webhooks(config)
        .build()
        .await
        .unwrap();
    let controller = mgr.add(module);
    let webhooks = mgr.webhooks().unwrap().clone();
    let mut plugin = Registration::new(PLUGIN, controller, mgr.leadership(PLUGIN));
    plugin.failure_policy = FailurePolicy::Fail;
    plugin.scope_namespace = Some(namespaces[0].clone());
    webhooks.register(plugin).await.unwrap();

    let gvk = GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp");
    let ar = ApiResource::from_gvk(&gvk);
    let apis: Vec<Api<DynamicObject>> =
        namespaces.iter().map(|ns| Api::namespaced_with(client.clone(), ns, &ar)).collect();
    wait_for_webhooks(&apis[0], "Operon").await;
    register_go(&client, peer, &namespaces[1]).await;
    wait_for_webhooks(&apis[1], "the Go peer").await;

    // Warm every path (connections, the API server's caches, the guest).
    for i in 0..20 {
        for api in &apis {
            api.create(&PostParams::default(), &webapp(&format!("warm-{i}"))).await.unwrap();
        }
    }

    let mut samples: [Vec<Duration>; 3] = std::array::from_fn(|_| Vec::with_capacity(creates));
    for i in 0..creates {
        for side in ORDERS[i % ORDERS.len()] {
            let t = Instant::now();
            let stored = apis[side].create(&PostParams::default(), &webapp(&format!("app-{i}"))).await.unwrap();
            samples[side].push(t.elapsed());
            let port = &stored.data["spec"]["port"];
            if side == 2 {
                assert!(port.is_null(), "no webhook may default the port in {}", namespaces[2]);
            } else {
                assert_eq!(*port, 8080, "{}'s webhook did not default the port in {}", SIDES[side], namespaces[side]);
            }
        }
    }
    let figures: Vec<Quantiles> = samples.iter_mut().map(|s| percentiles(s)).collect();

    let alone = calls_alone(&webhooks, peer, &namespaces, calls).await;

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("machine: {cpus} CPUs, 1-minute load average {load_before} before, {} after", load_average());
    report(creates, calls, &figures, &alone);
}

/// One webhook call without the API server.
enum Call {
    /// An AdmissionReview posted over HTTPS (HTTP/1.1, a kept-alive
    /// connection of its own), as the API server posts it.
    Https { side: usize, http: reqwest::Client, url: String, hook: Hook },
    /// Operon's handler answering in-process (`Webhooks::answer`: routing,
    /// JSON, the guest call in its sandbox; no TLS, no HTTP).
    InProcess(Hook),
    /// The hop Operon's handler makes per guest call (`on_own_thread`): an
    /// OS thread spawned, its answer awaited on a oneshot channel.
    Spawn,
}

impl Call {
    fn label(&self) -> String {
        match self {
            Call::Https { side, hook, .. } => format!("{} `{}` over HTTPS", SIDES[*side], hook.as_str()),
            Call::InProcess(hook) => format!("Operon `{}` in-process", hook.as_str()),
            Call::Spawn => {
                "a bare thread spawn and its answer (what the handler did before its threads were kept)".into()
            }
        }
    }

    async fn time(&self, webhooks: &webhook::Webhooks, namespaces: &[String; 3], i: usize) -> Duration {
        match self {
            Call::Https { side, http, url, hook } => {
                let body = review(i, &namespaces[*side]);
                let t = Instant::now();
                let response =
                    http.post(url).header("content-type", "application/json").body(body).send().await.unwrap();
                let status = response.status();
                let answer: serde_json::Value = response.json().await.unwrap();
                let took = t.elapsed();
                assert!(status.is_success() && answer["response"]["allowed"] == true, "{url}: {status} {answer}");
                assert_eq!(answer["response"]["patchType"].is_string(), *hook == Hook::Mutate, "{url}: {answer}");
                took
            }
            Call::InProcess(hook) => {
                let body = review(i, &namespaces[0]);
                let t = Instant::now();
                let answer = webhooks.answer(*hook, PLUGIN, &body).await;
                let took = t.elapsed();
                assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
                took
            }
            Call::Spawn => {
                let t = Instant::now();
                let (tx, rx) = tokio::sync::oneshot::channel();
                std::thread::spawn(move || tx.send(()).unwrap());
                rx.await.unwrap();
                t.elapsed()
            }
        }
    }
}

/// Webhook calls without the API server, each kind `calls` times after 20
/// to warm up: back to back (one kind after the other), then interleaved
/// (one of each in turn, rotating, so each call follows other work as it
/// does behind the API server). Per kind: its label, then p50/p99/max back
/// to back and interleaved.
async fn calls_alone(
    webhooks: &webhook::Webhooks,
    peer: &GoPeer,
    namespaces: &[String; 3],
    calls: usize,
) -> Vec<(String, Quantiles, Quantiles)> {
    let operon_ca = webhooks.ca_bundle().expect("a generated CA");
    let https = |ca: &[u8]| {
        reqwest::Client::builder()
            .http1_only()
            .tls_certs_only([reqwest::Certificate::from_pem(ca).unwrap()])
            .build()
            .unwrap()
    };
    let operon = format!("https://{}", webhooks.local_addr());
    let kinds = [
        Call::Https {
            side: 0,
            http: https(&operon_ca),
            url: format!("{operon}{}", Hook::Mutate.path(PLUGIN)),
            hook: Hook::Mutate,
        },
        Call::Https {
            side: 0,
            http: https(&operon_ca),
            url: format!("{operon}{}", Hook::Validate.path(PLUGIN)),
            hook: Hook::Validate,
        },
        Call::Https { side: 1, http: https(&peer.ca), url: peer.url(GO_MUTATE), hook: Hook::Mutate },
        Call::Https { side: 1, http: https(&peer.ca), url: peer.url(GO_VALIDATE), hook: Hook::Validate },
        Call::InProcess(Hook::Mutate),
        Call::InProcess(Hook::Validate),
        Call::Spawn,
    ];
    let mut in_turn: Vec<Vec<Duration>> = kinds.iter().map(|_| Vec::with_capacity(calls)).collect();
    let mut back_to_back = in_turn.clone();
    for (kind, samples) in kinds.iter().zip(&mut back_to_back) {
        for i in 0..calls + 20 {
            let took = kind.time(webhooks, namespaces, i).await;
            if i >= 20 {
                samples.push(took);
            }
        }
    }
    for i in 0..calls + 20 {
        for k in 0..kinds.len() {
            let at = (i + k) % kinds.len();
            let took = kinds[at].time(webhooks, namespaces, i).await;
            if i >= 20 {
                in_turn[at].push(took);
            }
        }
    }
    kinds
        .iter()
        .zip(back_to_back.iter_mut().zip(&mut in_turn))
        .map(|(kind, (b, t))| (kind.label(), percentiles(b), percentiles(t)))
        .collect()
}

fn report(creates: usize, calls: usize, figures: &[Quantiles], alone: &[(String, Quantiles, Quantiles)]) {
    let (plain50, plain99, _) = figures[2];
    let added = |side: usize| (figures[side].0 - plain50, figures[side].1 - plain99);
    let ((op50, op99), (go50, go99)) = (added(0), added(1));
    let ratio = |operon: f64, go: f64| if go > 0.0 { format!("{:.2}x", operon / go) } else { "n/a".into() };
    println!(
        "admission: {creates} creates per namespace, one at a time, rotating through the three; {calls} calls per hook"
    );
    println!("| create round trip | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|");
    for (side, (p50, p99, max)) in figures.iter().enumerate() {
        let what = if side == 2 { String::new() } else { " (mutate + validate)".into() };
        println!("| {}{what} | {p50:.2} | {p99:.2} | {max:.2} |", SIDES[side]);
    }
    println!("| added by Operon's webhooks | {op50:+.2} | {op99:+.2} | |");
    println!("| added by controller-runtime's webhooks | {go50:+.2} | {go99:+.2} | |");
    println!("| Operon's added / Go's added | {} | {} | |", ratio(op50, go50), ratio(op99, go99));
    println!();
    println!("| one webhook call, no API server | back to back p50 ms | p99 ms | interleaved p50 ms | p99 ms |");
    println!("|---|---:|---:|---:|---:|");
    for (what, (b50, b99, _), (t50, t99, _)) in alone {
        println!("| {what} | {b50:.3} | {b99:.3} | {t50:.3} | {t99:.3} |");
    }
    println!();
    let verdict = |met: bool| if met { "PASS" } else { "MISS" };
    println!(
        "target: Operon's added latency <= the Go peer's (<= 1.00x): p50 {} ({op50:+.2} vs {go50:+.2} ms), p99 {} ({op99:+.2} vs {go99:+.2} ms)",
        verdict(op50 <= go50),
        verdict(op99 <= go99)
    );
    println!("target: Operon's webhooks add <= 2 ms p99 to a create: {}", verdict(op99 <= 2.0));
}
