//! Module sources a tenant points at, as a hostile tenant would: a URL that
//! redirects into plain HTTP elsewhere, a body or a layer larger than the
//! host accepts, sources that never answer or answer a byte a second, a
//! pinned OCI digest that must not be pulled again, and modules that must
//! be signed (`spec.module.verify`, `--require-signed-modules`) arriving
//! unsigned, signed by another key, with a signature copied from another
//! version, or changed after they were signed. Every test runs real
//! `operon run --reconcilers` processes against the real API server (the
//! binary under test, or `$OPERON_BIN`) and watches what a platform team
//! would: the Reconcilers' status and events, the process's memory, the
//! registry's own log.

use crate::common;

use common::{eventually, free_port, guest, thing_crd};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use operon::reconciler::crd::{ClusterReconciler, Reconciler};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(90);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("sources", || {
        use kube::CustomResourceExt;
        operon_envtest::Options::default().crd(thing_crd()).crd(Reconciler::crd()).crd(ClusterReconciler::crd())
    })
}

/// The `operon` binary these tests run.
fn operon_bin() -> PathBuf {
    std::env::var_os("OPERON_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_operon")))
}

/// Whether that binary's `operon run` takes `flag` (older builds lack the
/// bounds' flags; they run with whatever they had).
fn supports(flag: &str) -> bool {
    static HELP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HELP.get_or_init(|| {
        let out = Command::new(operon_bin()).args(["run", "--help"]).output().expect("running operon run --help");
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .contains(flag)
}

/// One `operon run --reconcilers` process for a test's Reconcilers, killed
/// when dropped.
struct Replica {
    child: Child,
    metrics: u16,
    log: PathBuf,
    _cache: tempfile::TempDir,
}

impl Replica {
    /// `flags`: `(flag, value)` pairs (an empty value: the flag alone),
    /// passed where the binary takes them.
    fn start(ns: &str, flags: &[(&str, &str)]) -> Replica {
        let metrics = free_port();
        let cache = tempfile::tempdir().unwrap();
        let log = std::env::temp_dir().join(format!("operon-sources-{ns}.log"));
        let mut cmd = Command::new(operon_bin());
        cmd.args(["run", "--reconcilers", "--reconciler-selector", &format!("operon.dev/test={ns}")])
            // The operator opens loopback, where the tests serve modules
            // (module URLs reach special addresses only where it does).
            .arg("--egress-allow=*,127.0.0.1")
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}"), "--health-probe-bind-address", "0"]);
        if supports("--metrics-secure") {
            cmd.arg("--metrics-secure=false");
        }
        for (flag, value) in flags {
            if supports(flag) && value.is_empty() {
                cmd.arg(flag);
            } else if supports(flag) {
                cmd.arg(format!("{flag}={value}"));
            } else {
                eprintln!("{} has no {flag}: running without it", operon_bin().display());
            }
        }
        let child = cmd
            .env("KUBECONFIG", plane().kubeconfig_path())
            .env("HOSTNAME", "sources")
            .env("XDG_CACHE_HOME", cache.path())
            .env("RUST_LOG", std::env::var("OPERON_TEST_LOG").unwrap_or_else(|_| "info,kube=warn".into()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting operon");
        Replica { child, metrics, log, _cache: cache }
    }

    async fn ready(&self) {
        eventually("operon to be ready", WAIT, || async {
            let r = common::http_get(format!("http://127.0.0.1:{}/readyz", self.metrics)).await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
    }

    /// The process's peak resident memory so far (`VmHWM`), in bytes.
    fn peak_memory(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("the process runs");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status");
        kib << 10
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("operon's log: {}", self.log.display());
    }
}

/// The test's namespace and what it reads there.
struct Cluster {
    client: kube::Client,
    ns: String,
}

impl Cluster {
    async fn new(prefix: &str) -> Cluster {
        let client = plane().client().await;
        let ns = operon_envtest::create_namespace(&client, prefix).await.unwrap();
        Cluster { client, ns }
    }

    fn reconcilers(&self) -> Api<Reconciler> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn reconciler(&self, name: &str, spec: Value) {
        self.reconciler_with(name, spec, json!({})).await;
    }

    async fn reconciler_with(&self, name: &str, spec: Value, annotations: Value) {
        let r = json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name, "labels": {"operon.dev/test": self.ns}, "annotations": annotations},
            "spec": spec});
        self.reconcilers().patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&r)).await.unwrap();
    }

    async fn module(&self, name: &str, bytes: &[u8]) {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            binary_data: Some([("module.wasm".to_string(), ByteString(bytes.to_vec()))].into()),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(self.client.clone(), &self.ns)
            .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&cm))
            .await
            .unwrap();
    }

    /// The Ready condition: `(status, reason, message)`.
    async fn ready(&self, name: &str) -> Option<(String, String, String)> {
        let r = self.reconcilers().get_opt(name).await.ok()??;
        let c = r.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        Some((c.status, c.reason, c.message))
    }

    /// Wait until the Ready condition of `name` is no longer `Loading`.
    async fn settled(&self, name: &str) -> (String, String, String) {
        eventually(&format!("{name} loaded or refused"), WAIT, || async {
            self.ready(name).await.filter(|c| c.1 != "Loading")
        })
        .await
    }

    /// Everything the Reconciler's status says, as text.
    async fn status_text(&self, name: &str) -> String {
        let r = self.reconcilers().get(name).await.unwrap();
        serde_json::to_string(&r.status).unwrap()
    }
}

fn stamp_grants() -> Value {
    json!({"for": [{"group": "example.operon.dev", "kind": "Thing"}], "owns": [{"group": "", "kind": "ConfigMap"}]})
}

fn sha256(bytes: &[u8]) -> String {
    operon::runtime::digest(bytes).trim_start_matches("sha256:").to_string()
}

/// An address of this machine that is not loopback (where plain HTTP is
/// refused): what an internal service would listen on.
fn outside_address() -> std::net::IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    // A UDP connect sends nothing; it picks the route's source address.
    socket.connect("192.0.2.1:9").expect("a route off this machine, to pick a non-loopback address");
    let ip = socket.local_addr().unwrap().ip();
    assert!(!ip.is_loopback() && !ip.is_unspecified(), "no non-loopback address to test with (got {ip})");
    ip
}

/// Answers every request with `head` and then `body` (or, without a body,
/// holds the connection open and says nothing). Returns the port and a
/// count of the requests it got.
async fn server(bind: std::net::IpAddr, answer: Arc<dyn Fn() -> Answer + Send + Sync>) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind((bind, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let answer = answer();
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                counted.fetch_add(1, Ordering::SeqCst);
                match answer {
                    Answer::Silent => {
                        // Accept, read, and never answer.
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    Answer::Redirect(location) => {
                        let head = format!(
                            "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        );
                        let _ = socket.write_all(head.as_bytes()).await;
                    }
                    Answer::Bytes(bytes) => {
                        let head =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", bytes.len());
                        let _ = socket.write_all(head.as_bytes()).await;
                        let _ = socket.write_all(&bytes).await;
                    }
                    Answer::Endless(total) => {
                        // No content-length: the body ends when the server closes.
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/wasm\r\nconnection: close\r\n\r\n";
                        let _ = socket.write_all(head.as_bytes()).await;
                        let chunk = vec![0u8; 64 << 10];
                        let mut sent = 0;
                        while sent < total {
                            if socket.write_all(&chunk).await.is_err() {
                                return;
                            }
                            sent += chunk.len();
                        }
                    }
                    Answer::Trickle(length) => {
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n");
                        let _ = socket.write_all(head.as_bytes()).await;
                        for _ in 0..length {
                            if socket.write_all(b"\0").await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            });
        }
    });
    (port, requests)
}

/// How a test server answers.
#[derive(Clone)]
enum Answer {
    Silent,
    Redirect(String),
    Bytes(Vec<u8>),
    /// A body of this many bytes, with no length announced.
    Endless(usize),
    /// This many bytes, one a second.
    Trickle(usize),
}

fn answer(a: Answer) -> Arc<dyn Fn() -> Answer + Send + Sync> {
    Arc::new(move || a.clone())
}

/// A URL source that redirects to plain HTTP on
/// another host is refused before anything is fetched from there, with a
/// status that says so — and no digest of whatever that host would have
/// served (the status must not be an oracle on internal addresses).
#[tokio::test]
async fn a_redirect_to_plain_http_elsewhere_is_refused_and_no_digest_shows() {
    let c = Cluster::new("src-redirect").await;
    let replica = Replica::start(&c.ns, &[]);
    replica.ready().await;
    let secret = b"internal metadata: token=s3cr3t".to_vec();
    let (internal, fetched) = server(outside_address(), answer(Answer::Bytes(secret.clone()))).await;
    let target = format!("http://{}:{internal}/latest/meta-data", outside_address());
    let (redirector, _) = server([127, 0, 0, 1].into(), answer(Answer::Redirect(target.clone()))).await;
    let href = format!("http://127.0.0.1:{redirector}/module.wasm");
    c.reconciler(
        "bounced",
        json!({"module": {"url": {"href": href, "sha256": "0".repeat(64)}}, "grants": stamp_grants()}),
    )
    .await;

    let (status, reason, message) = c.settled("bounced").await;
    eprintln!("bounced: {status} {reason}: {message}");
    assert_eq!(status, "False");
    assert!(message.contains("redirect") && message.contains("refused"), "the status says why: {message}");
    assert_eq!(fetched.load(Ordering::SeqCst), 0, "nothing was fetched from the internal address");
    let text = c.status_text("bounced").await;
    assert!(!text.contains(&sha256(&secret)), "the status shows no digest of what the internal host serves: {text}");
    assert!(c.reconcilers().get("bounced").await.unwrap().status.unwrap().digest.is_none(), "no digest");
}

/// A body or a layer larger than `--max-module-size`
/// is refused at the cap, naming the flag, and the host's memory does not
/// grow with what the source would send (a body of 256 MiB, never
/// announced; a registry layer of 9 MiB against a cap of 8 MiB).
#[tokio::test]
async fn an_oversized_module_is_refused_at_the_cap_and_the_host_does_not_grow() {
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    use oci_client::secrets::RegistryAuth;
    let c = Cluster::new("src-large").await;
    let replica = Replica::start(&c.ns, &[("--max-module-size", "8Mi")]);
    replica.ready().await;
    // Settle the process's own memory first (caches, the first status writes).
    c.module("calm", &guest("stamp-v1")).await;
    c.reconciler("calm", json!({"module": {"configMap": {"name": "calm"}}, "grants": stamp_grants()})).await;
    assert_eq!(c.settled("calm").await.0, "True");
    let before = replica.peak_memory();

    let endless = 256 << 20;
    let (port, _) = server([127, 0, 0, 1].into(), answer(Answer::Endless(endless))).await;
    let href = format!("http://127.0.0.1:{port}/module.wasm");
    c.reconciler(
        "endless",
        json!({"module": {"url": {"href": href, "sha256": "0".repeat(64)}}, "grants": stamp_grants()}),
    )
    .await;

    operon::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let registry = operon_envtest::Registry::start(dir.path()).unwrap();
    let reference: oci_client::Reference = format!("{}/operon/large:v1", registry.addr()).parse().unwrap();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![registry.addr().to_string()]),
        ..ClientConfig::default()
    });
    let mut layer = vec![0u8; 9 << 20];
    layer[..8].copy_from_slice(b"\0asm\x0d\0\x01\0");
    let pushed = client
        .push(
            &reference,
            &[ImageLayer::new(layer, "application/wasm".into(), None)],
            Config::new(b"{}".to_vec(), "application/vnd.wasm.config.v0+json".into(), None),
            &RegistryAuth::Anonymous,
            None,
        )
        .await
        .expect("pushing the large layer");
    let (_, manifest_digest) = client.pull_image_manifest(&reference, &RegistryAuth::Anonymous).await.unwrap();
    eprintln!("pushed {}", pushed.manifest_url);
    c.reconciler(
        "large-layer",
        json!({"module": {"oci": {"reference": reference.whole(), "digest": manifest_digest}}, "grants": stamp_grants()}),
    )
    .await;

    for name in ["endless", "large-layer"] {
        let (status, reason, message) = c.settled(name).await;
        eprintln!("{name}: {status} {reason}: {message}");
        assert_eq!(status, "False", "{name}");
        assert!(message.contains("--max-module-size"), "{name}: the refusal names the flag: {message}");
    }
    let grown = replica.peak_memory().saturating_sub(before);
    eprintln!("peak memory grew by {} MiB while refusing", grown >> 20);
    assert!(grown < 64 << 20, "the host buffered what it refused: its peak memory grew by {} MiB", grown >> 20);
}

/// Sources that never answer, or answer a byte a
/// second, stall nobody else — a Reconciler with a ConfigMap source created
/// after them loads while they still wait — and each ends refused, naming
/// the timeout to change.
#[tokio::test]
async fn stalled_sources_time_out_while_another_reconciler_loads() {
    let c = Cluster::new("src-stall").await;
    let replica = Replica::start(&c.ns, &[("--module-fetch-timeout", "20s")]);
    replica.ready().await;
    let (silent, _) = server([127, 0, 0, 1].into(), answer(Answer::Silent)).await;
    let (trickle, _) = server([127, 0, 0, 1].into(), answer(Answer::Trickle(1 << 20))).await;
    let stalled = ["silent-a", "silent-b", "trickle", "silent-oci"];
    for (name, port) in [("silent-a", silent), ("silent-b", silent), ("trickle", trickle)] {
        let href = format!("http://127.0.0.1:{port}/{name}.wasm");
        c.reconciler(
            name,
            json!({"module": {"url": {"href": href, "sha256": "0".repeat(64)}}, "grants": stamp_grants()}),
        )
        .await;
    }
    let oci = format!("127.0.0.1:{silent}/operon/silent:v1");
    let digest = format!("sha256:{}", "1".repeat(64));
    c.reconciler(
        "silent-oci",
        json!({"module": {"oci": {"reference": oci, "digest": digest}}, "grants": stamp_grants()}),
    )
    .await;
    // Give the stalled fetches the lifecycle's workers first.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let started = Instant::now();
    c.module("calm", &guest("stamp-v1")).await;
    c.reconciler("calm", json!({"module": {"configMap": {"name": "calm"}}, "grants": stamp_grants()})).await;
    let (status, _, message) = c.settled("calm").await;
    let loaded_in = started.elapsed();
    assert_eq!(status, "True", "{message}");
    let mut waiting = Vec::new();
    for name in stalled {
        waiting.push((name, c.ready(name).await.map(|c| c.1)));
    }
    eprintln!("calm loaded in {loaded_in:?}; the stalled sources then: {waiting:?}");
    assert!(
        waiting.iter().all(|(_, reason)| reason.as_deref() == Some("Loading")),
        "calm loaded while the stalled sources were still waiting: {waiting:?}"
    );

    for name in stalled {
        let (status, reason, message) = c.settled(name).await;
        eprintln!("{name}: {status} {reason}: {message}");
        assert_eq!(status, "False", "{name}");
        assert!(
            message.contains("--module-fetch-timeout"),
            "{name}: the refusal names the timeout to change: {message}"
        );
    }
}

/// A pinned OCI digest that does not change is pulled
/// once, however often its Reconciler is reconciled (status timer,
/// metadata changes, a limits change that reloads the module).
#[tokio::test]
async fn an_unchanged_pinned_oci_digest_is_pulled_once() {
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    use oci_client::secrets::RegistryAuth;
    let c = Cluster::new("src-oci-once").await;
    let replica = Replica::start(&c.ns, &[]);
    replica.ready().await;
    operon::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let registry = operon_envtest::Registry::start(dir.path()).unwrap();
    let reference: oci_client::Reference = format!("{}/operon/stamp:v1", registry.addr()).parse().unwrap();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![registry.addr().to_string()]),
        ..ClientConfig::default()
    });
    client
        .push(
            &reference,
            &[ImageLayer::new(guest("stamp-v1"), "application/wasm".into(), None)],
            Config::new(b"{}".to_vec(), "application/vnd.wasm.config.v0+json".into(), None),
            &RegistryAuth::Anonymous,
            None,
        )
        .await
        .expect("pushing the module");
    let (_, manifest_digest) = client.pull_image_manifest(&reference, &RegistryAuth::Anonymous).await.unwrap();
    let log = dir.path().join("registry.log");
    // The registry's own access log: every pull of the manifest by digest.
    let pulls = || {
        let text = std::fs::read_to_string(&log).unwrap();
        text.lines().filter(|l| l.contains(&format!("/v2/operon/stamp/manifests/{manifest_digest}"))).count()
    };
    let by_test = pulls();
    let spec = |timeout: &str| {
        json!({"module": {"oci": {"reference": reference.whole(), "digest": manifest_digest}},
               "grants": stamp_grants(), "limits": {"timeout": timeout}})
    };
    c.reconciler("by-oci", spec("1s")).await;
    assert_eq!(c.settled("by-oci").await.0, "True");
    let after_load = pulls();
    assert!(after_load > by_test, "the registry's log shows the host's pull (it has {after_load} lines)");

    // Reconciles of the Reconciler: metadata changes, the status timer, and
    // a limits change (the module loaded again, from what was pulled).
    for i in 0..3 {
        c.reconciler_with("by-oci", spec("1s"), json!({"touched": i.to_string()})).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    c.reconciler("by-oci", spec("2s")).await;
    eventually("the limits change to be served", WAIT, || async {
        let r = c.reconcilers().get("by-oci").await.ok()?;
        let gen_seen = r.status.as_ref()?.observed_generation? == r.metadata.generation?;
        let ready = r.status?.conditions.into_iter().any(|c| c.type_ == "Ready" && c.status == "True");
        (gen_seen && ready).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let pulled = pulls() - by_test;
    eprintln!("manifest pulls by the host: {pulled}");
    assert_eq!(pulled, after_load - by_test, "the pinned digest was pulled again");
}

/// A ConfigMap source is read when its ConfigMap changes, not at every
/// lifecycle step (every 2 s per Reconciler: at a thousand Reconcilers,
/// decoding and hashing each one's megabyte took half of a 2-core host),
/// and the cache holds the ConfigMap's metadata only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_map_source_is_read_once_per_version() {
    let c = Cluster::new("src-cm-once").await;
    let replica = Replica::start(&c.ns, &[]);
    replica.ready().await;
    let reads = || async {
        let text = common::http_get(format!("http://127.0.0.1:{}/metrics", replica.metrics))
            .await
            .expect("scraping the host")
            .text()
            .await
            .unwrap();
        let line = r#"operon_module_fetches_total{result="ok",source="configmap"} "#;
        text.lines().find_map(|l| l.strip_prefix(line)).map_or(0, |v| v.trim().parse::<u64>().unwrap())
    };
    c.module("m", &guest("stamp-v1")).await;
    let spec = json!({"module": {"configMap": {"name": "m"}}, "grants": stamp_grants()});
    c.reconciler("by-cm", spec.clone()).await;
    assert_eq!(c.settled("by-cm").await.0, "True");
    let digest = |bytes: Vec<u8>| format!("sha256:{}", sha256(&bytes));
    assert_eq!(c.reconcilers().get("by-cm").await.unwrap().status.unwrap().digest, Some(digest(guest("stamp-v1"))));
    let first = reads().await;
    assert!(first >= 1, "the host counts its reads of the ConfigMap ({first})");

    // Steps of the Reconciler: its own changes and the status timer.
    for i in 0..3 {
        c.reconciler_with("by-cm", spec.clone(), json!({"touched": i.to_string()})).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    assert_eq!(reads().await, first, "an unchanged ConfigMap was read again");

    // A new version is read (once) and served.
    c.module("m", &guest("stamp-v2")).await;
    let v2 = digest(guest("stamp-v2"));
    eventually("the new version to be served", WAIT, || async {
        let status = c.reconcilers().get("by-cm").await.ok()?.status?;
        (status.digest.as_deref() == Some(v2.as_str())).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(reads().await, first + 1, "the changed ConfigMap was read once");
}

/// A key pair for a test, written where `operon sign`/`operon verify` and
/// `--trusted-module-key` read it: `(private key file, public key file,
/// public key PEM)`.
fn key_pair(dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf, String) {
    let out = Command::new(operon_bin())
        .args(["sign", "--new-key"])
        .arg(dir.join(name))
        .output()
        .expect("running operon sign --new-key");
    assert!(out.status.success(), "operon sign --new-key: {}", String::from_utf8_lossy(&out.stderr));
    let public = dir.join(format!("{name}.pub"));
    let pem = std::fs::read_to_string(&public).unwrap();
    (dir.join(format!("{name}.key")), public, pem)
}

/// `operon sign` or `operon verify` with these arguments: `(success, output)`.
fn operon(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = Command::new(operon_bin()).args(args).output().expect("running operon");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The test's module pushed to the loopback registry as `repository:tag`;
/// returns `registry/repository` and the manifest digest.
async fn push_module(registry: &operon_envtest::Registry, repository: &str, bytes: Vec<u8>) -> (String, String) {
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    use oci_client::secrets::RegistryAuth;
    let reference: oci_client::Reference = format!("{}/{repository}:v1", registry.addr()).parse().unwrap();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![registry.addr().to_string()]),
        ..ClientConfig::default()
    });
    client
        .push(
            &reference,
            &[ImageLayer::new(bytes, "application/wasm".into(), None)],
            Config::new(b"{}".to_vec(), "application/vnd.wasm.config.v0+json".into(), None),
            &RegistryAuth::Anonymous,
            None,
        )
        .await
        .expect("pushing the module");
    let (_, digest) = client.pull_image_manifest(&reference, &RegistryAuth::Anonymous).await.unwrap();
    (format!("{}/{repository}", registry.addr()), digest)
}

/// Copy the cosign signature artifact of `from` (a manifest digest in
/// `repository`) to the tag where a signature of `to` is looked for: the
/// signature of one version presented for another.
async fn copy_signature(registry: &operon_envtest::Registry, repository: &str, from: &str, to: &str) {
    use oci_client::client::{ClientConfig, ClientProtocol};
    use oci_client::secrets::RegistryAuth;
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![registry.addr().to_string()]),
        ..ClientConfig::default()
    });
    let tag = |d: &str| format!("{}/{repository}:{}", registry.addr(), operon::signing::signature_tag(d));
    let source: oci_client::Reference = tag(from).parse().unwrap();
    let target: oci_client::Reference = tag(to).parse().unwrap();
    let media = "application/vnd.oci.image.manifest.v1+json";
    let (raw, _) = client.pull_manifest_raw(&source, &RegistryAuth::Anonymous, &[media]).await.unwrap();
    client.push_manifest_raw(&target, raw, media.parse().unwrap()).await.unwrap();
}

/// A selector of its own for each Reconciler of one test: several serve the
/// same kind in one namespace without overlapping.
fn verified_spec(module: Value, verify: Option<Value>, name: &str) -> Value {
    let mut module = module;
    if let Some(v) = verify {
        module["verify"] = v;
    }
    json!({"module": module, "grants": stamp_grants(), "selector": {"matchLabels": {"reconciler": name}}})
}

/// The Warning events on Reconciler `name` with `reason`.
async fn warnings(c: &Cluster, name: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.client.clone(), &c.ns);
    let list = events.list(&Default::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect()
}

/// An OCI module signed with `operon sign --oci` (a cosign signature
/// beside it in the registry) loads under `spec.module.verify`; one whose
/// signature is another version's copied to its tag, one signed by another
/// key and an unsigned one are refused with `UntrustedModule`, a Warning
/// event, and a message naming the key and the command that signs —
/// nothing of them is loaded — and the unsigned one loads by itself once
/// it is signed. `operon verify --oci` agrees with the host.
#[tokio::test]
async fn a_signed_oci_module_loads_and_a_copied_other_key_or_missing_signature_is_refused() {
    let c = Cluster::new("src-signed-oci").await;
    let replica = Replica::start(&c.ns, &[]);
    operon::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let registry = operon_envtest::Registry::start(dir.path()).unwrap();
    let (key, public, pem) = key_pair(dir.path(), "author");
    let (other_key, other_public, _) = key_pair(dir.path(), "stranger");
    let repository = "operon/signed";
    let (name, signed) = push_module(&registry, repository, guest("stamp-v1")).await;
    let (_, copied) = push_module(&registry, repository, guest("stamp-v2")).await;
    let (_, stranger) = push_module(&registry, repository, guest("stamp-trap")).await;
    let (_, unsigned) = push_module(&registry, repository, guest("stamp-finalizer")).await;
    for (k, digest) in [(&key, &signed), (&other_key, &stranger)] {
        let reference = format!("{name}@{digest}");
        let (ok, out) =
            operon(&["sign".as_ref(), "--key".as_ref(), k.as_os_str(), "--oci".as_ref(), reference.as_ref()]);
        assert!(ok, "operon sign --oci {reference}: {out}");
    }
    copy_signature(&registry, repository, &signed, &copied).await;

    // The CLI checks as the host does.
    let reference = format!("{name}@{signed}");
    let (ok, out) =
        operon(&["verify".as_ref(), "--key".as_ref(), public.as_os_str(), "--oci".as_ref(), reference.as_ref()]);
    assert!(ok, "operon verify of what operon sign pushed: {out}");
    let (ok, out) =
        operon(&["verify".as_ref(), "--key".as_ref(), other_public.as_os_str(), "--oci".as_ref(), reference.as_ref()]);
    assert!(!ok && out.contains("not signed by a key"), "another key does not verify it: {out}");

    replica.ready().await;
    let verify = json!({"keys": [{"pem": pem}]});
    for (r, digest) in [("signed", &signed), ("copied", &copied), ("stranger", &stranger), ("unsigned", &unsigned)] {
        let module = json!({"oci": {"reference": name, "digest": digest}});
        c.reconciler(r, verified_spec(module, Some(verify.clone()), r)).await;
    }
    let (status, reason, message) = c.settled("signed").await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Loaded"), "the signed module loads: {message}");

    let key_id = {
        let text = std::fs::read_to_string(&public).unwrap();
        operon::signing::PublicKey::from_pem(&text).unwrap().id().to_string()
    };
    for (r, says) in [
        ("copied", "a signature of another manifest"),
        ("stranger", "its signatures are by other keys"),
        ("unsigned", "is not signed: no signature at"),
    ] {
        let (status, reason, message) = c.settled(r).await;
        eprintln!("{r}: {status} {reason}: {message}");
        assert_eq!((status.as_str(), reason.as_str()), ("False", "UntrustedModule"), "{r}: {message}");
        assert!(message.contains(says), "{r}: the message says what is wrong ({says}): {message}");
        assert!(message.contains(&key_id), "{r}: the message names the key required: {message}");
        assert!(message.contains("operon sign --key"), "{r}: the message says how to sign: {message}");
        let status = c.reconcilers().get(r).await.unwrap().status.unwrap();
        assert!(status.digest.is_none(), "{r}: nothing of it serves: {status:?}");
        let events = eventually(&format!("{r}'s UntrustedModule event"), WAIT, || async {
            let found = warnings(&c, r, "UntrustedModule").await;
            (!found.is_empty()).then_some(found)
        })
        .await;
        assert!(events[0].contains(says), "{r}: the event says it too: {events:?}");
    }

    // Signed after the fact: the host looks again and loads it.
    let reference = format!("{name}@{unsigned}");
    let (ok, out) = operon(&["sign".as_ref(), "--key".as_ref(), key.as_os_str(), "--oci".as_ref(), reference.as_ref()]);
    assert!(ok, "{out}");
    eventually("the module signed later to load", WAIT, || async {
        c.ready("unsigned").await.filter(|(s, _, _)| s == "True")
    })
    .await;
    drop(replica);
}

/// Serves fixed bodies by path (404 for any other path).
async fn files_server(files: std::collections::HashMap<String, Vec<u8>>) -> u16 {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let files = Arc::new(files);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let files = files.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let n = socket.read(&mut request).await.unwrap_or(0);
                let line = String::from_utf8_lossy(&request[..n]).lines().next().unwrap_or_default().to_string();
                let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                let answer = match files.get(&path) {
                    Some(body) => {
                        let head =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                        [head.into_bytes(), body.clone()].concat()
                    }
                    None => b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec(),
                };
                let _ = socket.write_all(&answer).await;
            });
        }
    });
    port
}

/// A ConfigMap or URL module with its detached signature (`operon sign`
/// writes `module.wasm.sig`; the ConfigMap holds it under that key, the
/// server beside the module) loads under `spec.module.verify` naming the
/// key in a ConfigMap; a module changed after it was signed is refused
/// (`UntrustedModule`) while the verified version keeps serving, and a
/// module without its `.sig` is refused.
#[tokio::test]
async fn config_map_and_url_modules_load_only_with_a_detached_signature_of_their_bytes() {
    let c = Cluster::new("src-signed-detached").await;
    let replica = Replica::start(&c.ns, &[]);
    let dir = tempfile::tempdir().unwrap();
    let (key, public, pem) = key_pair(dir.path(), "author");
    let signed = |name: &str, bytes: &[u8]| -> (Vec<u8>, String) {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let (ok, out) = operon(&["sign".as_ref(), "--key".as_ref(), key.as_os_str(), file.as_os_str()]);
        assert!(ok, "operon sign {name}: {out}");
        let (ok, out) = operon(&["verify".as_ref(), "--key".as_ref(), public.as_os_str(), file.as_os_str()]);
        assert!(ok, "operon verify {name}: {out}");
        (bytes.to_vec(), std::fs::read_to_string(dir.path().join(format!("{name}.sig"))).unwrap())
    };
    let (v1, v1_sig) = signed("v1.wasm", &guest("stamp-v1"));
    let v2 = guest("stamp-v2");
    // The key in a ConfigMap, as a platform team would publish it.
    let keys = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some("module-keys".into()), ..Default::default() },
        data: Some([("cosign.pub".to_string(), pem.clone())].into()),
        ..Default::default()
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(c.client.clone(), &c.ns);
    config_maps.patch("module-keys", &PatchParams::apply("test").force(), &Patch::Apply(&keys)).await.unwrap();
    let verify = json!({"keys": [{"configMap": {"name": "module-keys"}}]});
    let module_cm = |name: &str, bytes: &[u8], sig: Option<&str>| ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        binary_data: Some([("module.wasm".to_string(), ByteString(bytes.to_vec()))].into()),
        data: sig.map(|s| [("module.wasm.sig".to_string(), s.to_string())].into()),
        ..Default::default()
    };
    for (name, bytes, sig) in [("by-cm", &v1, Some(v1_sig.as_str())), ("cm-unsigned", &v1, None)] {
        let cm = module_cm(name, bytes, sig);
        config_maps.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&cm)).await.unwrap();
    }
    let port = files_server(
        [
            ("/v1.wasm".to_string(), v1.clone()),
            ("/v1.wasm.sig".to_string(), v1_sig.clone().into_bytes()),
            // Other bytes under the first version's signature.
            ("/changed.wasm".to_string(), v2.clone()),
            ("/changed.wasm.sig".to_string(), v1_sig.clone().into_bytes()),
        ]
        .into(),
    )
    .await;
    replica.ready().await;
    let url = |path: &str, bytes: &[u8]| json!({"url": {"href": format!("http://127.0.0.1:{port}{path}"), "sha256": sha256(bytes)}});
    for (r, module) in [
        ("by-cm", json!({"configMap": {"name": "by-cm"}})),
        ("cm-unsigned", json!({"configMap": {"name": "cm-unsigned"}})),
        ("by-url", url("/v1.wasm", &v1)),
        ("url-changed", url("/changed.wasm", &v2)),
    ] {
        c.reconciler(r, verified_spec(module, Some(verify.clone()), r)).await;
    }
    for r in ["by-cm", "by-url"] {
        let (status, reason, message) = c.settled(r).await;
        assert_eq!((status.as_str(), reason.as_str()), ("True", "Loaded"), "{r} loads: {message}");
    }
    for (r, says) in [("cm-unsigned", "no signature at key module.wasm.sig"), ("url-changed", "does not verify")] {
        let (status, reason, message) = c.settled(r).await;
        eprintln!("{r}: {status} {reason}: {message}");
        assert_eq!((status.as_str(), reason.as_str()), ("False", "UntrustedModule"), "{r}: {message}");
        assert!(message.contains(says), "{r}: {message}");
        assert!(
            message.contains("ConfigMap") && message.contains("module-keys"),
            "{r}: names where the key is: {message}"
        );
    }

    // The module changed in its ConfigMap, its signature not: the new bytes
    // are refused and the verified version keeps serving.
    let changed = module_cm("by-cm", &v2, Some(&v1_sig));
    config_maps.patch("by-cm", &PatchParams::apply("test").force(), &Patch::Apply(&changed)).await.unwrap();
    let degraded = eventually("by-cm to report the changed module", WAIT, || async {
        let status = c.reconcilers().get("by-cm").await.ok()?.status?;
        status.conditions.into_iter().find(|c| c.type_ == "Degraded" && c.reason == "UntrustedModule")
    })
    .await;
    assert!(degraded.message.contains("does not verify"), "{}", degraded.message);
    let status = c.reconcilers().get("by-cm").await.unwrap().status.unwrap();
    assert_eq!(status.digest, Some(format!("sha256:{}", sha256(&v1))), "the verified version keeps serving");
    drop(replica);
}

/// With `--require-signed-modules`, a Reconciler cannot lift the host's
/// requirement: an unsigned module is refused though its Reconciler asks
/// nothing, and a module signed by a key the Reconciler names (not the
/// host's) is refused too; a module signed by the host's key loads.
#[tokio::test]
async fn a_reconciler_cannot_lift_the_hosts_signature_requirement() {
    let c = Cluster::new("src-signed-host").await;
    let dir = tempfile::tempdir().unwrap();
    let (host_key, host_public, _) = key_pair(dir.path(), "platform");
    let (tenant_key, _, tenant_pem) = key_pair(dir.path(), "tenant");
    let replica = Replica::start(
        &c.ns,
        &[("--require-signed-modules", ""), ("--trusted-module-key", &host_public.display().to_string())],
    );
    let sign = |key: &PathBuf, name: &str| -> String {
        let file = dir.path().join(name);
        std::fs::write(&file, guest("stamp-v1")).unwrap();
        let (ok, out) = operon(&["sign".as_ref(), "--key".as_ref(), key.as_os_str(), file.as_os_str()]);
        assert!(ok, "{out}");
        std::fs::read_to_string(dir.path().join(format!("{name}.sig"))).unwrap()
    };
    let by_host = sign(&host_key, "host.wasm");
    let by_tenant = sign(&tenant_key, "tenant.wasm");
    let config_maps: Api<ConfigMap> = Api::namespaced(c.client.clone(), &c.ns);
    for (name, sig) in [("by-host", Some(by_host)), ("by-tenant", Some(by_tenant)), ("unsigned", None)] {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            binary_data: Some([("module.wasm".to_string(), ByteString(guest("stamp-v1")))].into()),
            data: sig.map(|s| [("module.wasm.sig".to_string(), s)].into()),
            ..Default::default()
        };
        config_maps.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&cm)).await.unwrap();
    }
    replica.ready().await;
    let module = |name: &str| json!({"configMap": {"name": name}});
    c.reconciler("by-host", verified_spec(module("by-host"), None, "by-host")).await;
    c.reconciler("unsigned", verified_spec(module("unsigned"), None, "unsigned")).await;
    let tenant_keys = json!({"keys": [{"pem": tenant_pem}]});
    c.reconciler("by-tenant", verified_spec(module("by-tenant"), Some(tenant_keys), "by-tenant")).await;

    let (status, _, message) = c.settled("by-host").await;
    assert_eq!(status, "True", "signed by the host's key, it loads: {message}");
    for r in ["unsigned", "by-tenant"] {
        let (status, reason, message) = c.settled(r).await;
        eprintln!("{r}: {status} {reason}: {message}");
        assert_eq!((status.as_str(), reason.as_str()), ("False", "UntrustedModule"), "{r}: {message}");
        assert!(message.contains("--require-signed-modules"), "{r}: the host's requirement is named: {message}");
    }
    drop(replica);
}
