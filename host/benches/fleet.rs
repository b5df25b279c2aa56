//! The Reconciler fleet (`cargo xtask bench fleet`): many plugins loaded as
//! resources into one host, against a real control plane (operon-envtest).
//! The host runs in-process as `operon run` builds it: a
//! [`Manager`] with the Reconciler controller ([`Plugins`]). It prints
//! figures; it asserts nothing about time.
//!
//! 1. **Memory per Reconciler.** `--webapps` WebApps (1000) in one
//!    namespace, each labelled with a shard `0..100` (`j % 100`). For each
//!    fleet size N in `--fleet` (1,10,100), a fresh child process (this
//!    program, re-run with `--rss-child`) runs the host with N namespaced
//!    Reconcilers in that namespace, each from its own ConfigMap holding the
//!    `rust-webapp` component with a distinct custom section appended
//!    (distinct digests: N separately compiled modules). Reconciler k has
//!    `spec.selector` `shard in {s : s % N == k}`: the N Reconcilers split
//!    the same WebApps between them, so every WebApp has exactly one
//!    controller (several writing the same children would fight) and the
//!    work is the same for every N. Once converged and idle, the child
//!    samples its VmRSS; RSS per additional Reconciler is the slope between
//!    fleet sizes. The child also holds a kube client (for the host, and a
//!    few calls of its own): its RSS is reported before the host starts
//!    and subtracted. The modules are compiled once by the parent into an
//!    artifact directory the children load from (as a host restarted with a
//!    persistent artifact cache does).
//! 2. **Ring.** For each N in `--rings` (10,100): N namespaces, a `Ring`
//!    (`bench.operon.dev/v1alpha1`) in each, and N ClusterReconcilers of the
//!    `ring` test guest, hop i granted namespaces i and i+1 with a selector
//!    on the Ring of namespace i+1. A guest writes only its parent's status
//!    and children in its parent's namespace, so a hop pulls: the guest
//!    reconciles the downstream Ring and copies the upstream's value (seen
//!    through a watch mapped by the annotation
//!    `ring.operon.dev/downstream`) into its own `status.value`. The value
//!    is set in `spec.value` of the Ring in namespace 0 and travels round
//!    to that Ring's status. A watch of the benchmark's own sees each
//!    status change: per hop = time between the sightings of consecutive
//!    Rings; round trip = from the patch to the value back in namespace 0.
//!    The module comes from a loopback URL (a ClusterReconciler has no
//!    namespace for a ConfigMap source).
//! 3. **Swap.** A Reconciler of the `stamp` test guest over 10 Things that
//!    a writer changes 50 times a second; the module's ConfigMap is
//!    rewritten with the other version (v1 ↔ v2, a unique custom section
//!    each time, so a digest never seen before). Measured: from the write
//!    to the new version active in the controller, and to the first Thing
//!    status stamped by it. *Precompiled*: the bytes were loaded into the
//!    host's runtime beforehand (artifact cache warm); *cold*: never seen,
//!    so compiled on the swap (equivalent to a fresh artifact directory).
//!
//! Flags: `--webapps N`, `--fleet 1,10,100`, `--rings 10,100`, `--laps N`
//! (round trips per ring, 20), `--swaps N` (per mode, 5), `--idle SECS`
//! (10), `--skip rss,ring,swap`. Writes `target/bench/fleet.json`.

#[path = "../tests/all/common/serve.rs"]
mod serve;
#[path = "common/support.rs"]
mod support;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use operon::manager::{self, Manager};
use operon::reconciler;
use operon::runtime::{self, Runtime};
use serde_json::{Value, json};
use serve::serve_module;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{arg, flag, guest, kind_crd, ms, quantile, root};

const SHARDS: usize = 100;
const SHARD: &str = "fleet.operon.dev/shard";
const HOST_LABEL: &str = "fleet.operon.dev/host";

fn list(name: &str, default: &[usize]) -> Vec<usize> {
    match flag(name) {
        Some(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        None => default.to_vec(),
    }
}

fn skipped(what: &str) -> bool {
    flag("--skip").is_some_and(|s| s.split(',').any(|x| x == what))
}

/// `bytes` with a custom section `operon-bench` holding `tag` appended:
/// another digest, the same behaviour.
fn variant(bytes: &[u8], tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    let name = b"operon-bench";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(tag.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// `(VmRSS, RssAnon, RssFile)` of this process, bytes.
fn rss() -> (u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

fn mib(b: f64) -> f64 {
    b / (1024.0 * 1024.0)
}

fn ring_crd() -> CustomResourceDefinition {
    kind_crd("bench.operon.dev", "Ring", "rings")
}

fn thing_crd() -> CustomResourceDefinition {
    kind_crd("example.operon.dev", "Thing", "things")
}

fn webapp_crd() -> CustomResourceDefinition {
    let text = std::fs::read_to_string(root().join("guest-examples/webapp/crd.yaml")).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

fn dynamic(client: &kube::Client, ns: Option<&str>, group: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1alpha1", kind));
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn apply<K>(api: &Api<K>, name: &str, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.patch(name, &PatchParams::apply("fleet-bench").force(), &Patch::Apply(&object))
        .await
        .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}

async fn module_config_map(client: &kube::Client, ns: &str, name: &str, bytes: &[u8]) {
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        binary_data: Some([("module.wasm".to_string(), ByteString(bytes.to_vec()))].into()),
        ..Default::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.patch(name, &PatchParams::apply("fleet-bench").force(), &Patch::Apply(&cm)).await.unwrap();
}

/// Poll `check` every `every` until it answers, or panic after `timeout`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, every: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(every).await;
    }
}

/// The host, in-process, as `operon run` builds it: a manager and the
/// Reconciler controller, acting on the Reconcilers labelled
/// `fleet.operon.dev/host=<label>`.
struct Host {
    manager: Manager,
    runtime: Runtime,
    _task: tokio::task::JoinHandle<()>,
}

impl Host {
    async fn start(client: &kube::Client, kube_config: kube::Config, label: &str, artifacts: &Path) -> Host {
        let runtime =
            Runtime::new(runtime::Config { artifact_dir: Some(artifacts.to_path_buf()), ..Default::default() })
                .unwrap();
        let pipeline = operon::pipeline::Config {
            controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
            // The operator opens loopback, where the bench serves modules.
            egress_allowed: operon::egress::grants::Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap(),
            ..Default::default()
        };
        let manager = Manager::builder(client.clone())
            .config(manager::Config { pipeline, server_addr: None, ..Default::default() })
            .runtime(runtime.clone())
            .add(reconciler::Reconcilers::component(
                reconciler::Config {
                    kube_config: Some(kube_config),
                    selector: Some(format!("{HOST_LABEL}={label}")),
                    status_period: Duration::from_secs(1),
                    path_poll: Duration::from_secs(1),
                    instance: "fleet-bench".into(),
                    ..Default::default()
                },
                Vec::new(),
            ))
            .build()
            .await
            .unwrap();
        let mgr = manager.clone();
        let task = tokio::spawn(async move {
            mgr.run(std::future::pending()).await.unwrap();
        });
        Host { manager, runtime, _task: task }
    }
}

// ---------------------------------------------------------------- 1. RSS

fn webapp_grants() -> Value {
    json!({"for": [{"group": "example.operon.dev", "kind": "WebApp"}],
        "owns": [{"group": "apps", "kind": "Deployment"}, {"group": "", "kind": "Service"},
                 {"group": "networking.k8s.io", "kind": "Ingress"}]})
}

/// The child: the host with N Reconcilers; prints `CONVERGED {...}` and
/// then `RSS {...}` on stdout.
async fn rss_child() {
    let n = arg("--rss-child", 1);
    let webapps = arg("--webapps", 1000);
    let idle = arg("--idle", 10);
    let ns = flag("--namespace").unwrap();
    let artifacts = PathBuf::from(flag("--artifacts").unwrap());
    let kubeconfig = kube::config::Kubeconfig::read_from(flag("--kubeconfig").unwrap()).unwrap();
    let before_client = rss();
    operon::install_crypto_provider();
    let kube_config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await.unwrap();
    let client = kube::Client::try_from(kube_config.clone()).unwrap();
    // One call, so the client's connection and TLS state exist before the baseline.
    let _ = Api::<ConfigMap>::namespaced(client.clone(), &ns).get_opt("fleet-0").await.unwrap();
    let baseline = rss();
    let label = format!("c{n}");
    let started = Instant::now();
    let host = Host::start(&client, kube_config, &label, &artifacts).await;
    let reconcilers: Api<reconciler::crd::Reconciler> = Api::namespaced(client.clone(), &ns);
    let mut share = vec![0usize; n];
    for j in 0..webapps {
        share[(j % SHARDS) % n] += 1;
    }
    for k in 0..n {
        let shards: Vec<String> = (0..SHARDS).filter(|s| s % n == k).map(|s| s.to_string()).collect();
        let name = format!("c{n}-{k}");
        apply(
            &reconcilers,
            &name,
            json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
                "metadata": {"name": name, "labels": {HOST_LABEL: label}},
                "spec": {"module": {"configMap": {"name": format!("fleet-{k}")}}, "grants": webapp_grants(),
                    "selector": {"matchExpressions": [{"key": SHARD, "operator": "In", "values": shards}]}}}),
        )
        .await;
    }
    let names: Vec<String> = (0..n).map(|k| format!("{ns}/c{n}-{k}")).collect();
    eventually(
        "every controller has reconciled its WebApps",
        Duration::from_secs(1800),
        Duration::from_millis(200),
        || async {
            names
                .iter()
                .zip(&share)
                .all(|(c, want)| host.manager.controller(c).is_some_and(|c| c.stats().reconciles as usize >= *want))
                .then_some(())
        },
    )
    .await;
    let total = || -> (u64, u64) {
        names.iter().filter_map(|c| host.manager.controller(c)).fold((0, 0), |(r, e), c| {
            let s = c.stats();
            (r + s.reconciles, e + s.errors)
        })
    };
    // Idle: no reconcile for 5 s in a row.
    let mut last = total().0;
    let mut quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = total().0;
        if now != last {
            last = now;
            quiet = Instant::now();
        }
    }
    let converged = started.elapsed();
    let (reconciles, errors) = total();
    let from_cache =
        names.iter().filter_map(|c| host.manager.controller(c)).filter(|c| c.module().info().from_cache).count();
    println!(
        "CONVERGED {}",
        json!({"seconds": converged.as_secs_f64(), "reconciles": reconciles, "errors": errors, "fromCache": from_cache})
    );
    // Idle: sample, keep the last (steady) one and the highest.
    let mut samples = Vec::new();
    for _ in 0..idle.max(1) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(rss());
    }
    let (vm, anon, file) = *samples.last().unwrap();
    let max = samples.iter().map(|s| s.0).max().unwrap();
    let (after_idle, _) = total();
    println!(
        "RSS {}",
        json!({"n": n, "vmRss": vm, "rssAnon": anon, "rssFile": file, "maxVmRss": max,
            "baseline": baseline.0, "beforeClient": before_client.0, "reconcilesWhileIdle": after_idle - reconciles})
    );
    // Idle unload (issue #21): every module gives back its code and
    // instances; RSS again; then one WebApp of each controller changes, and
    // its first reconcile loads the module again from the artifact cache.
    let unloaded = host.runtime.unload_idle(Duration::ZERO);
    let mut samples = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(rss());
    }
    let (u_vm, u_anon, u_file) = *samples.last().unwrap();
    let api = dynamic(&client, Some(&ns), "example.operon.dev", "WebApp");
    let before: Vec<u64> =
        names.iter().map(|c| host.manager.controller(c).map_or(0, |c| c.stats().reconciles)).collect();
    let touched = Instant::now();
    for k in 0..n.min(SHARDS) {
        // web-k carries shard k, which controller k % n reconciles.
        let patch = json!({"metadata": {"annotations": {"fleet.operon.dev/touched": "1"}}});
        api.patch(&format!("web-{k}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }
    // Controllers beyond the shards reconcile nothing: only the touched ones.
    let mut first = vec![None; n.min(SHARDS)];
    while first.iter().any(Option::is_none) && touched.elapsed() < Duration::from_secs(300) {
        for (k, c) in names.iter().enumerate().take(first.len()) {
            if first[k].is_none() && host.manager.controller(c).is_some_and(|c| c.stats().reconciles > before[k]) {
                first[k] = Some(touched.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reloads: Vec<Duration> = names
        .iter()
        .filter_map(|c| host.manager.controller(c))
        .filter(|c| c.module().unload_stats().1 > 0)
        .map(|c| c.module().unload_stats().2)
        .collect();
    let firsts: Vec<Duration> = first.iter().flatten().copied().collect();
    println!(
        "UNLOAD {}",
        json!({"unloaded": unloaded, "vmRss": u_vm, "rssAnon": u_anon, "rssFile": u_file,
            "reloaded": reloads.len(), "reloadP50Ms": ms(quantile(&reloads, 0.5)), "reloadP99Ms": ms(quantile(&reloads, 0.99)),
            "firstReconcileP50Ms": ms(quantile(&firsts, 0.5)), "firstReconcileP99Ms": ms(quantile(&firsts, 0.99))})
    );
    for k in 0..n {
        let _ = reconcilers.delete(&format!("c{n}-{k}"), &Default::default()).await;
    }
    std::process::exit(0);
}

struct RssRow {
    n: usize,
    vm: u64,
    anon: u64,
    file: u64,
    baseline: u64,
    converge_s: f64,
    reconciles: u64,
    errors: u64,
    /// After every module was unloaded, and the reload on the first event.
    unload: Value,
}

async fn rss_phase(plane: &operon_envtest::ControlPlane, client: &kube::Client, webapps: usize) -> Vec<RssRow> {
    let fleet = list("--fleet", &[1, 10, 100]);
    let most = fleet.iter().copied().max().unwrap_or(1);
    let ns = operon_envtest::create_namespace(client, "fleet").await.unwrap();
    // The modules: the rust-webapp component, one distinct digest each,
    // compiled once here into the artifact directory the children use.
    let base = guest("rust-webapp");
    let artifacts = root().join("target/bench/fleet-artifacts");
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts).unwrap();
    let compile_started = Instant::now();
    {
        let rt = Runtime::new(runtime::Config { artifact_dir: Some(artifacts.clone()), ..Default::default() }).unwrap();
        for k in 0..most {
            let bytes = variant(&base, &format!("fleet-{k}"));
            rt.load(&bytes, runtime::Limits::default()).unwrap();
            module_config_map(client, &ns, &format!("fleet-{k}"), &bytes).await;
        }
    }
    let compile = compile_started.elapsed();
    eprintln!("fleet: {most} modules of {} bytes compiled in {compile:?}", base.len() + 20);
    let api = dynamic(client, Some(&ns), "example.operon.dev", "WebApp");
    let created = Instant::now();
    for j in 0..webapps {
        let name = format!("web-{j}");
        let obj: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": name, "labels": {SHARD: (j % SHARDS).to_string()}},
            "spec": {"image": "nginx:1.27", "replicas": 1}}))
            .unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
    }
    eprintln!("fleet: {webapps} WebApps created in {:?}", created.elapsed());
    let exe = std::env::current_exe().unwrap();
    let mut rows = Vec::new();
    for &n in &fleet {
        eprintln!("fleet: {n} Reconcilers (child process)");
        let mut child = std::process::Command::new(&exe)
            .args(["--rss-child", &n.to_string(), "--webapps", &webapps.to_string(), "--namespace", &ns])
            .args(["--idle", &arg("--idle", 10).to_string(), "--artifacts", artifacts.to_str().unwrap()])
            .args(["--kubeconfig", plane.kubeconfig_path().to_str().unwrap()])
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<String>>()
        });
        // Verify convergence through the API while the child idles: every
        // WebApp's Deployment written by the controller of this fleet size.
        let manager_prefix = format!("operon/{ns}/c{n}-");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let verified = eventually(
            "every Deployment written by this fleet",
            Duration::from_secs(1800),
            Duration::from_secs(2),
            || async {
                let list = deployments.list(&ListParams::default()).await.ok()?;
                let ours = list
                    .items
                    .iter()
                    .filter(|d| {
                        d.metadata
                            .managed_fields
                            .iter()
                            .flatten()
                            .any(|m| m.manager.as_deref().is_some_and(|x| x.starts_with(&manager_prefix)))
                    })
                    .count();
                (ours >= webapps).then_some(ours)
            },
        )
        .await;
        let lines = lines.await.unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "the child for {n} Reconcilers failed: {status}");
        let get = |prefix: &str| -> Value {
            let line = lines
                .iter()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or_else(|| panic!("no {prefix} line: {lines:?}"));
            serde_json::from_str(line).unwrap()
        };
        let (c, r, unload) = (get("CONVERGED "), get("RSS "), get("UNLOAD "));
        let u = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
        eprintln!("fleet: {n}: {verified} Deployments verified; {c} {r}");
        rows.push(RssRow {
            n,
            vm: u(&r, "vmRss"),
            anon: u(&r, "rssAnon"),
            file: u(&r, "rssFile"),
            baseline: u(&r, "baseline"),
            converge_s: c["seconds"].as_f64().unwrap_or(0.0),
            reconciles: u(&c, "reconciles"),
            errors: u(&c, "errors"),
            unload,
        });
    }
    rows
}

// ---------------------------------------------------------------- 2. ring

/// When each `(namespace, field, value)` of a Ring was first seen.
type Seen = Arc<Mutex<HashMap<(String, &'static str, String), Instant>>>;

struct RingRow {
    n: usize,
    laps: usize,
    setup_s: f64,
    round_trip: Vec<Duration>,
    hops: Vec<Duration>,
}

async fn ring_phase(client: &kube::Client, host: &Host, n: usize, laps: usize, href: &str, sha: &str) -> RingRow {
    let setup = Instant::now();
    let tag = format!("ring{n}");
    let mut namespaces = Vec::new();
    for i in 0..n {
        namespaces.push(operon_envtest::create_namespace(client, &format!("ring{n}-{i}")).await.unwrap());
    }
    let seen: Seen = Arc::default();
    {
        let (seen, api) = (seen.clone(), dynamic(client, None, "bench.operon.dev", "Ring"));
        let config = watcher::Config::default().labels(&format!("fleet.operon.dev/ring={tag}"));
        tokio::spawn(async move {
            let mut stream = watcher::watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event else { continue };
                let now = Instant::now();
                let ns = o.metadata.namespace.clone().unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                for (field, pointer) in [("spec", "/spec/value"), ("status", "/status/value")] {
                    if let Some(v) = o.data.pointer(pointer).and_then(Value::as_str) {
                        seen.entry((ns.clone(), field, v.to_string())).or_insert(now);
                    }
                }
            }
        });
    }
    let crs: Api<reconciler::crd::ClusterReconciler> = Api::all(client.clone());
    for i in 0..n {
        let next = (i + 1) % n;
        let name = format!("ring{n}-hop{i}");
        apply(
            &crs,
            &name,
            json!({"apiVersion": "operon.dev/v1alpha1", "kind": "ClusterReconciler",
                "metadata": {"name": name, "labels": {HOST_LABEL: "main"}},
                "spec": {"module": {"url": {"href": href, "sha256": sha}},
                    "grants": {"for": [{"group": "bench.operon.dev", "kind": "Ring"}], "namespaces": [namespaces[i], namespaces[next]]},
                    "selector": {"matchLabels": {"fleet.operon.dev/position": format!("{tag}-{next}")}}}}),
        )
        .await;
    }
    for i in 0..n {
        let next = (i + 1) % n;
        let api = dynamic(client, Some(&namespaces[i]), "bench.operon.dev", "Ring");
        let mut spec = json!({});
        if i == 0 {
            spec["value"] = json!(format!("{tag}-lap0"));
        }
        apply(
            &api,
            "r",
            json!({"apiVersion": "bench.operon.dev/v1alpha1", "kind": "Ring",
                "metadata": {"name": "r", "labels": {"fleet.operon.dev/ring": tag, "fleet.operon.dev/position": format!("{tag}-{i}")},
                    "annotations": {"ring.operon.dev/downstream": format!("{}/r", namespaces[next]),
                        "ring.operon.dev/upstream": format!("{}/r", namespaces[(i + n - 1) % n])}},
                "spec": spec}),
        )
        .await;
    }
    let controllers: Vec<String> = (0..n).map(|i| format!("ring{n}-hop{i}")).collect();
    eventually("every ring controller running", Duration::from_secs(600), Duration::from_millis(100), || async {
        controllers.iter().all(|c| host.manager.controller(c).is_some()).then_some(())
    })
    .await;
    let lap0 = format!("{tag}-lap0");
    eventually("the first value round the ring", Duration::from_secs(600), Duration::from_millis(50), || async {
        seen.lock().unwrap().contains_key(&(namespaces[0].clone(), "status", lap0.clone())).then_some(())
    })
    .await;
    let setup_s = setup.elapsed().as_secs_f64();
    let origin = dynamic(client, Some(&namespaces[0]), "bench.operon.dev", "Ring");
    let (mut round_trip, mut hops) = (Vec::new(), Vec::new());
    // Lap 1 is a warm-up (instance pools, connections): not counted.
    for lap in 1..=laps + 1 {
        let value = format!("{tag}-lap{lap}");
        let started = Instant::now();
        origin.patch("r", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"value": value}}))).await.unwrap();
        let back = (namespaces[0].clone(), "status", value.clone());
        let done =
            eventually("the value round the ring", Duration::from_secs(300), Duration::from_millis(2), || async {
                seen.lock().unwrap().get(&back).copied()
            })
            .await;
        if lap == 1 {
            continue;
        }
        round_trip.push(done - started);
        let seen = seen.lock().unwrap();
        let mut previous = seen[&(namespaces[0].clone(), "spec", value.clone())];
        for k in 1..=n {
            let at = seen[&(namespaces[k % n].clone(), "status", value.clone())];
            hops.push(at.saturating_duration_since(previous));
            previous = at;
        }
    }
    // Stop the ring's controllers (the next ring starts on a quiet host).
    for c in &controllers {
        let _ = crs.delete(c, &Default::default()).await;
    }
    eventually("the ring's controllers stopped", Duration::from_secs(300), Duration::from_millis(100), || async {
        controllers.iter().all(|c| host.manager.controller(c).is_none()).then_some(())
    })
    .await;
    RingRow { n, laps, setup_s, round_trip, hops }
}

// ---------------------------------------------------------------- 3. swap

struct SwapRow {
    mode: &'static str,
    active: Vec<Duration>,
    first: Vec<Duration>,
}

async fn swap_phase(client: &kube::Client, host: &Host, swaps: usize) -> Vec<SwapRow> {
    let ns = operon_envtest::create_namespace(client, "swap").await.unwrap();
    let things = dynamic(client, Some(&ns), "example.operon.dev", "Thing");
    let names: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    for n in &names {
        apply(&things, n, json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "metadata": {"name": n}, "spec": {"value": 0}}))
            .await;
    }
    // Every status version a watch sees, with when.
    let events: Arc<Mutex<Vec<(Instant, String, String)>>> = Arc::default();
    {
        let (events, api) = (events.clone(), things.clone());
        tokio::spawn(async move {
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event else { continue };
                if let Some(v) = o.data.pointer("/status/version").and_then(Value::as_str) {
                    events.lock().unwrap().push((
                        Instant::now(),
                        o.metadata.name.clone().unwrap_or_default(),
                        v.to_string(),
                    ));
                }
            }
        });
    }
    let latest = |events: &Arc<Mutex<Vec<(Instant, String, String)>>>| -> HashMap<String, String> {
        let mut m = HashMap::new();
        for (_, n, v) in events.lock().unwrap().iter() {
            m.insert(n.clone(), v.clone());
        }
        m
    };
    let versions = [("v1", guest("stamp-v1")), ("v2", guest("stamp-v2"))];
    module_config_map(client, &ns, "stamp", &variant(&versions[0].1, "swap-initial")).await;
    let rec: Api<reconciler::crd::Reconciler> = Api::namespaced(client.clone(), &ns);
    apply(
        &rec,
        "stamp",
        json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": "stamp", "labels": {HOST_LABEL: "main"}},
            "spec": {"module": {"configMap": {"name": "stamp"}},
                "grants": {"for": [{"group": "example.operon.dev", "kind": "Thing"}], "owns": [{"group": "", "kind": "ConfigMap"}]}}}),
    )
    .await;
    let all_at = |version: &'static str| {
        let events = events.clone();
        let names = names.clone();
        move || {
            let latest = latest(&events);
            let ok = names.iter().all(|n| latest.get(n).map(String::as_str) == Some(version));
            async move { ok.then_some(()) }
        }
    };
    eventually("every Thing stamped by v1", Duration::from_secs(300), Duration::from_millis(50), all_at("v1")).await;
    // A steady stream of changes: one Thing patched every 20 ms (50/s).
    let writer = {
        let (things, names) = (things.clone(), names.clone());
        tokio::spawn(async move {
            let mut i = 0usize;
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            loop {
                tick.tick().await;
                i += 1;
                let patch = json!({"spec": {"value": i}});
                let _ = things.patch(&names[i % names.len()], &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
        })
    };
    let controller = format!("{ns}/stamp");
    let mut rows = Vec::new();
    let mut current = 0usize;
    let mut trial = 0usize;
    for mode in ["precompiled", "cold"] {
        let (mut active, mut first) = (Vec::new(), Vec::new());
        for _ in 0..swaps {
            trial += 1;
            let next = 1 - current;
            let (version, base) = (&versions[next].0, &versions[next].1);
            let bytes = variant(base, &format!("swap-{trial}-{}", std::process::id()));
            let digest = reconciler::source::digest(&bytes);
            if mode == "precompiled" {
                host.runtime.load(&bytes, runtime::Limits::default()).unwrap();
            }
            let written = Instant::now();
            module_config_map(client, &ns, "stamp", &bytes).await;
            let at_active =
                eventually("the new version active", Duration::from_secs(300), Duration::from_millis(1), || async {
                    let c = host.manager.controller(&controller)?;
                    (c.module().info().digest == digest).then(Instant::now)
                })
                .await;
            let at_first = eventually(
                "a Thing stamped by the new version",
                Duration::from_secs(300),
                Duration::from_millis(2),
                || async {
                    events.lock().unwrap().iter().find(|(t, _, v)| *t > written && v == version).map(|(t, _, _)| *t)
                },
            )
            .await;
            active.push(at_active - written);
            first.push(at_first - written);
            eventually(
                "every Thing on the new version",
                Duration::from_secs(300),
                Duration::from_millis(20),
                all_at(version),
            )
            .await;
            current = next;
        }
        rows.push(SwapRow { mode, active, first });
    }
    writer.abort();
    let stats = host.manager.controller(&controller).unwrap().stats();
    eprintln!("swap: stamp controller {stats:?}");
    rows
}

// ---------------------------------------------------------------- main

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if flag("--rss-child").is_some() {
        rss_child().await;
        return;
    }
    let webapps = arg("--webapps", 1000);
    let laps = arg("--laps", 20);
    let swaps = arg("--swaps", 5);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .try_init();
    operon::install_crypto_provider();
    let mut options = operon_envtest::Options::default().crd(webapp_crd()).crd(ring_crd()).crd(thing_crd());
    {
        use kube::CustomResourceExt;
        options = options.crd(reconciler::crd::Reconciler::crd()).crd(reconciler::crd::ClusterReconciler::crd());
    }
    let plane = operon_envtest::ControlPlane::start(options).expect("control plane");
    let client = plane.client().await;
    let command = format!(
        "cargo xtask bench fleet {}",
        std::env::args().collect::<Vec<_>>()[1..]
            .iter()
            .filter(|a| *a != "--bench")
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut report = json!({"command": command.trim()});

    let rss_rows = if skipped("rss") { Vec::new() } else { rss_phase(&plane, &client, webapps).await };

    let artifacts = tempfile::tempdir().unwrap();
    let host = Host::start(&client, plane.config(), "main", artifacts.path()).await;
    let mut ring_rows = Vec::new();
    if !skipped("ring") {
        let module = guest("ring");
        let sha = reconciler::source::digest(&module).trim_start_matches("sha256:").to_string();
        let href = serve_module(module).await;
        for n in list("--rings", &[10, 100]) {
            eprintln!("ring: {n} Reconcilers");
            ring_rows.push(ring_phase(&client, &host, n, laps, &href, &sha).await);
        }
    }
    let swap_rows = if skipped("swap") { Vec::new() } else { swap_phase(&client, &host, swaps).await };

    println!();
    println!("{}", report["command"].as_str().unwrap());
    println!("2 cores shared with the control plane (etcd, kube-apiserver) and with other jobs");
    if !rss_rows.is_empty() {
        println!();
        println!(
            "1. Host RSS, {webapps} WebApps split between N Reconcilers (distinct digests), idle after convergence"
        );
        println!(
            "{:>5} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>7}",
            "N", "VmRSS", "RssAnon", "RssFile", "- client", "converge", "reconciles", "errors"
        );
        for r in &rss_rows {
            println!(
                "{:>5} {:>7.1}MiB {:>7.1}MiB {:>7.1}MiB {:>7.1}MiB {:>11.1}s {:>10} {:>7}",
                r.n,
                mib(r.vm as f64),
                mib(r.anon as f64),
                mib(r.file as f64),
                mib(r.vm.saturating_sub(r.baseline) as f64),
                r.converge_s,
                r.reconciles,
                r.errors
            );
        }
        let mut slopes = Vec::new();
        for w in rss_rows.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let per = (b.vm as f64 - a.vm as f64) / (b.n as f64 - a.n as f64);
            let anon = (b.anon as f64 - a.anon as f64) / (b.n as f64 - a.n as f64);
            let file = (b.file as f64 - a.file as f64) / (b.n as f64 - a.n as f64);
            println!(
                "  {} -> {}: {:.2} MiB per additional Reconciler (anon {:.2}, file {:.2}); target <= 1 MiB: {}",
                a.n,
                b.n,
                mib(per),
                mib(anon),
                mib(file),
                if per <= 1024.0 * 1024.0 { "met" } else { "missed" }
            );
            slopes.push(json!({"from": a.n, "to": b.n, "bytesPerReconciler": per, "anonPerReconciler": anon, "filePerReconciler": file}));
        }
        println!();
        println!(
            "1b. The same hosts after every module was unloaded for being idle (--unload-idle-after), then one event per Reconciler"
        );
        println!(
            "{:>5} {:>10} {:>10} {:>10} {:>14} {:>14} {:>16} {:>16}",
            "N", "VmRSS", "RssAnon", "RssFile", "reload p50", "reload p99", "1st reconcile p50", "1st reconcile p99"
        );
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        for r in &rss_rows {
            let u = &r.unload;
            println!(
                "{:>5} {:>7.1}MiB {:>7.1}MiB {:>7.1}MiB {:>12.1}ms {:>12.1}ms {:>15.1}ms {:>15.1}ms",
                r.n,
                mib(f(u, "vmRss")),
                mib(f(u, "rssAnon")),
                mib(f(u, "rssFile")),
                f(u, "reloadP50Ms"),
                f(u, "reloadP99Ms"),
                f(u, "firstReconcileP50Ms"),
                f(u, "firstReconcileP99Ms")
            );
        }
        for w in rss_rows.windows(2) {
            let (a, b) = (&w[0].unload, &w[1].unload);
            let per = (f(b, "vmRss") - f(a, "vmRss")) / (w[1].n as f64 - w[0].n as f64);
            println!(
                "  {} -> {}: {:.0} KiB per additional idle Reconciler; target <= 256 KiB: {}",
                w[0].n,
                w[1].n,
                per / 1024.0,
                if per <= 256.0 * 1024.0 { "met" } else { "missed" }
            );
        }
        report["rss"] = json!({"webapps": webapps, "rows": rss_rows.iter().map(|r| json!({"n": r.n, "vmRss": r.vm, "rssAnon": r.anon,
            "rssFile": r.file, "baseline": r.baseline, "convergeSeconds": r.converge_s, "reconciles": r.reconciles, "errors": r.errors,
            "unloaded": r.unload})).collect::<Vec<_>>(),
            "slopes": slopes});
    }
    if !ring_rows.is_empty() {
        println!();
        println!(
            "2. Ring: each hop copies a value from namespace i to namespace i+1 (watch -> reconcile -> status write)"
        );
        println!(
            "{:>5} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
            "N", "laps", "trip p50", "trip p99", "hop p50", "hop p99", "hop max", "setup"
        );
        let mut rows = Vec::new();
        for r in &ring_rows {
            println!(
                "{:>5} {:>5} {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>7.1}s",
                r.n,
                r.laps,
                ms(quantile(&r.round_trip, 0.5)),
                ms(quantile(&r.round_trip, 0.99)),
                ms(quantile(&r.hops, 0.5)),
                ms(quantile(&r.hops, 0.99)),
                ms(quantile(&r.hops, 1.0)),
                r.setup_s
            );
            let p99 = quantile(&r.hops, 0.99);
            println!(
                "  N={}: per-hop p99 {:.1} ms; target <= 20 ms: {}",
                r.n,
                ms(p99),
                if p99 <= Duration::from_millis(20) { "met" } else { "missed" }
            );
            rows.push(json!({"n": r.n, "laps": r.laps, "hops": r.hops.len(), "roundTripP50Ms": ms(quantile(&r.round_trip, 0.5)),
                "roundTripP99Ms": ms(quantile(&r.round_trip, 0.99)), "hopP50Ms": ms(quantile(&r.hops, 0.5)),
                "hopP99Ms": ms(p99), "hopMaxMs": ms(quantile(&r.hops, 1.0)), "setupSeconds": r.setup_s}));
        }
        report["ring"] = json!(rows);
    }
    if !swap_rows.is_empty() {
        println!();
        println!("3. Swap: ConfigMap written -> new version active / first reconcile on it (10 Things changed 50/s)");
        println!(
            "{:>12} {:>6} {:>12} {:>12} {:>12} {:>12}",
            "mode", "swaps", "active p50", "active max", "first p50", "first max"
        );
        let mut rows = Vec::new();
        for r in &swap_rows {
            println!(
                "{:>12} {:>6} {:>10.1}ms {:>10.1}ms {:>10.1}ms {:>10.1}ms",
                r.mode,
                r.active.len(),
                ms(quantile(&r.active, 0.5)),
                ms(quantile(&r.active, 1.0)),
                ms(quantile(&r.first, 0.5)),
                ms(quantile(&r.first, 1.0))
            );
            rows.push(json!({"mode": r.mode, "swaps": r.active.len(), "activeMs": r.active.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
                "firstReconcileMs": r.first.iter().map(|d| ms(*d)).collect::<Vec<_>>()}));
        }
        report["swap"] = json!(rows);
    }
    let dir = root().join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fleet.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!();
    println!("written: target/bench/fleet.json");
    drop(plane);
    std::process::exit(0);
}
