//! The neighbour's cost of a hostile plugin (`cargo xtask bench hostile`):
//! one manager, two controllers — the well-behaved `rust-webapp` (WebApps)
//! and the `hostile` guest (Things; `spec.mode` picks the attack) — against
//! a real control plane. For each attack, the same neighbour workload runs
//! twice in the same process, once with the hostile parents calm and once
//! with them attacking, and the program prints the ratios of the
//! neighbour's reconcile latency p99 and throughput (attacking / calm). The
//! issue's bar: within 10 %.
//!
//! The neighbour workload: `--webapps` WebApps (50) rescaled all at once,
//! `--rounds` times (4) per phase; a change's latency is from its patch to
//! the Deployment showing it (seen by a watch), throughput is changes
//! converged per second of a round. The attack: `--hostile` Things (10) in
//! the mode, with `max_concurrent_reconciles` 1 as `operon run` has it.
//!
//! The `tenants` scenario is two tenants on one host with the host-wide
//! limits `operon run` has by default (768 MiB of guest memory, 16 guest
//! calls, 2 CPUs of guest time): tenant A's controller has 64 workers and
//! a 400 MiB memory limit, and each of its 64 Things grows its instance
//! until the limit stops it — 25 GiB if nothing bounded the host — while
//! a Reconciler of tenant A waits on a registry that accepts connections
//! and never answers, and 32 callers flood tenant A's admission webhook
//! with reviews its validate loops on. Tenant B is the neighbour. Besides the ratios it
//! prints the process's peak resident memory.
//!
//! The `egress` scenario is a tenant of the `egress-probe` guest in a
//! namespace of its own, granted no egress (as any Reconciler may be),
//! whose Things each loop on 2000 refused 1 MiB calls per reconcile, kept
//! reconciling by a spec change every 100 ms, beside the neighbour. Besides
//! the ratios it prints the process's peak resident memory.

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NAMESPACE: &str = "bench";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn guest(name: &str) -> Vec<u8> {
    let path = root().join("target/guests").join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask guests`", path.display()))
}

fn arg(name: &str, default: usize) -> usize {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter().position(|a| a == name).and_then(|i| argv.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn modes() -> Vec<String> {
    let argv: Vec<String> = std::env::args().collect();
    match argv.iter().position(|a| a == "--modes").and_then(|i| argv.get(i + 1)) {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => ["loop", "memory", "trap", "giant", "flood", "requeue", "read-secret", "escape", "tenants", "egress"]
            .map(String::from)
            .to_vec(),
    }
}

fn api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", kind));
    Api::namespaced_with(client.clone(), NAMESPACE, &ar)
}

fn crd(
    path: Option<&str>,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    match path {
        Some(p) => serde_saphyr::from_str(&std::fs::read_to_string(root().join(p)).unwrap()).unwrap(),
        None => serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.operon.dev"},
            "spec": {"group": "example.operon.dev", "scope": "Namespaced",
                "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
        }))
        .unwrap(),
    }
}

/// The spec of a hostile Thing in `mode`.
fn hostile_spec(mode: &str, i: usize) -> Value {
    match mode {
        "giant" => json!({"mode": "giant", "bytes": 8 << 20}),
        "escape" => json!({"mode": "echo", "desired": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("stolen-{i}")}},
        ]}),
        "calm" => json!({"mode": "calm", "desired": null, "bytes": null}),
        other => json!({"mode": other, "desired": null, "bytes": null}),
    }
}

/// When each (Deployment, replicas) was first seen.
type Seen = Arc<Mutex<HashMap<(String, i32), Instant>>>;

struct Phase {
    latencies: Vec<Duration>,
    throughput: f64,
}

impl Phase {
    fn p(&self, q: f64) -> Duration {
        let mut l = self.latencies.clone();
        l.sort();
        l[((l.len() as f64 * q).ceil() as usize).clamp(1, l.len()) - 1]
    }
}

/// Rescales every WebApp `rounds` times and measures.
async fn neighbour_phase(
    webapps: &Api<DynamicObject>,
    seen: &Seen,
    count: usize,
    rounds: usize,
    next: &mut i32,
) -> Phase {
    let mut latencies = Vec::new();
    let mut rates = Vec::new();
    for _ in 0..rounds {
        *next = if *next >= 5 { 1 } else { *next + 1 };
        let replicas = *next;
        let started = Instant::now();
        let mut patched = Vec::with_capacity(count);
        for i in 0..count {
            let patch = json!({"spec": {"replicas": replicas}});
            webapps.patch(&format!("web-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            patched.push(Instant::now());
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let done: Vec<Option<Instant>> = {
                let seen = seen.lock().unwrap();
                (0..count).map(|i| seen.get(&(format!("web-{i}"), replicas)).copied()).collect()
            };
            if done.iter().all(Option::is_some) {
                let last = done.iter().flatten().max().copied().unwrap();
                for (at, p) in done.iter().flatten().zip(&patched) {
                    latencies.push(at.saturating_duration_since(*p));
                }
                rates.push(count as f64 / (last - started).as_secs_f64());
                break;
            }
            assert!(Instant::now() < deadline, "the neighbour did not converge within 120 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Forget this round's sightings of the other replica counts.
        seen.lock().unwrap().retain(|(_, r), _| *r != (if replicas >= 5 { 1 } else { replicas + 1 }));
    }
    Phase { latencies, throughput: rates.iter().sum::<f64>() / rates.len() as f64 }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count = arg("--webapps", 50);
    let rounds = arg("--rounds", 4);
    let hostile = arg("--hostile", 10);
    let plane = operon_envtest::ControlPlane::start(
        operon_envtest::Options::default().crd(crd(Some("guest-examples/webapp/crd.yaml"))).crd(crd(None)),
    )
    .expect("control plane");
    let client = plane.client().await;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    // The host-wide limits of `operon run`'s defaults.
    let gate = runtime::GateLimits { memory: 768 << 20, calls: 16 };
    let rt = Runtime::new(runtime::Config { artifact_dir: None, max_memory: 512 << 20, gate, ..Default::default() })
        .unwrap();
    let host_cpu = operon::pipeline::Budget::new(2.0, Duration::from_secs(2), Duration::from_secs(1)).map(Arc::new);
    let pipeline = operon::pipeline::Config { namespace: Some(NAMESPACE.into()), host_cpu, ..Default::default() };
    let mgr = Manager::builder(client.clone())
        .config(manager::Config { pipeline: pipeline.clone(), server_addr: None, ..Default::default() })
        .runtime(rt.clone())
        .webhooks(operon::webhook::Config {
            bind: ([127, 0, 0, 1], 0).into(),
            endpoint: operon::webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    mgr.add(rt.load(&guest("rust-webapp"), Limits::default()).unwrap());
    mgr.add(rt.load(&guest("hostile"), Limits::default()).unwrap());
    // Tenant A of the `tenants` scenario: 64 workers, 400 MiB per instance,
    // in its own namespace.
    for ns in [TENANT_A, TENANT_EGRESS] {
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let greedy = Limits { memory: 400 << 20, ..Limits::default() };
    let tenant_a = operon::pipeline::Config {
        name: Some("tenant-a".into()),
        namespace: Some(TENANT_A.into()),
        scope: operon::pipeline::Scope::namespace(TENANT_A),
        controller: operon::controller::Config { max_concurrent_reconciles: 64, ..Default::default() },
        // `operon run`'s default share of a controller (`--guest-cpu`).
        guest_cpu: 0.25,
        ..pipeline
    };
    let tenant_egress = operon::pipeline::Config {
        name: Some("tenant-egress".into()),
        namespace: Some(TENANT_EGRESS.into()),
        scope: operon::pipeline::Scope::namespace(TENANT_EGRESS),
        controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
        guest_cpu: 0.25,
        ..tenant_a.clone()
    };
    mgr.add_controller(rt.load(&guest("hostile"), greedy).unwrap(), tenant_a, None).unwrap();
    let probe = Limits { timeout: Duration::from_secs(10), ..Limits::default() };
    mgr.add_controller(rt.load(&guest("egress-probe"), probe).unwrap(), tenant_egress, None).unwrap();
    // Tenant A's admission plugin, whose validate loops until its deadline
    // on the reviews the flood sends (registered for WebApps of tenant A's
    // namespace: nothing the bench writes goes through it).
    let flooded = {
        let module = rt.load(&guest("admission-misbehave"), Limits::default()).unwrap();
        let settings = operon::pipeline::Config { guest_cpu: 0.25, ..Default::default() };
        let controller = mgr.build_controller(module, settings, None, false);
        let leadership = mgr.leadership(controller.name());
        let mut plugin = operon::webhook::Registration::new("tenant-a-admission", controller, leadership);
        plugin.failure_policy = operon::webhook::FailurePolicy::Ignore;
        plugin.scope_namespace = Some(TENANT_A.into());
        let webhooks = mgr.webhooks().unwrap().clone();
        webhooks.register(plugin.clone()).await.unwrap();
        (webhooks, plugin.name)
    };
    let stalled = stalled_registry().await;
    let metrics = mgr.metrics().clone();
    let _host = tokio::spawn(mgr.run(std::future::pending()));

    // The neighbour's Deployments, as a watch sees them.
    let seen: Seen = Arc::default();
    {
        let seen = seen.clone();
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), NAMESPACE);
        tokio::spawn(async move {
            let mut stream = watcher::watcher(deployments, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let objects = match event {
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => vec![d],
                    _ => continue,
                };
                let now = Instant::now();
                for d in objects {
                    let (Some(name), Some(replicas)) = (d.metadata.name.clone(), d.spec.and_then(|s| s.replicas))
                    else {
                        continue;
                    };
                    seen.lock().unwrap().entry((name, replicas)).or_insert(now);
                }
            }
        });
    }

    let (webapps, things) = (api(&client, "WebApp"), api(&client, "Thing"));
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..20 {
        let cm =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}, "data": {"k": "v".repeat(1000)}}))
                .unwrap();
        configmaps.create(&PostParams::default(), &cm).await.unwrap();
    }
    for i in 0..count {
        let obj = serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": format!("web-{i}")}, "spec": {"image": "nginx:1.27", "replicas": 1}}))
        .unwrap();
        webapps.create(&PostParams::default(), &obj).await.unwrap();
    }
    for i in 0..hostile {
        let obj = serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": format!("hostile-{i}")}, "spec": hostile_spec("calm", i)}))
        .unwrap();
        things.create(&PostParams::default(), &obj).await.unwrap();
    }
    let mut next = 1;
    // Warm-up: caches, connections, compiled code.
    neighbour_phase(&webapps, &seen, count, 2, &mut next).await;

    println!(
        "neighbour: {count} WebApps x {rounds} rounds per phase; hostile: {hostile} Things; 2 cores shared with the control plane"
    );
    println!(
        "{:<12} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8}",
        "attack", "p99 calm", "p99 hostile", "ratio", "thr calm", "thr hostile", "ratio"
    );
    let mut rows = Vec::new();
    let tenant_things = tenant_a_things(&client).await;
    for mode in modes() {
        if mode == "tenants" {
            rows.push(
                tenants(&webapps, &seen, count, rounds, &mut next, &tenant_things, &stalled, &flooded, &metrics).await,
            );
            continue;
        }
        if mode == "egress" {
            rows.push(egress(&client, &webapps, &seen, count, rounds, &mut next).await);
            continue;
        }
        let set = |mode: &str| {
            let things = things.clone();
            let mode = mode.to_string();
            async move {
                for i in 0..hostile {
                    let patch = json!({"spec": hostile_spec(&mode, i)});
                    things
                        .patch(&format!("hostile-{i}"), &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .unwrap();
                }
            }
        };
        set("calm").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let calm = neighbour_phase(&webapps, &seen, count, rounds, &mut next).await;
        set(&mode).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let attacked = neighbour_phase(&webapps, &seen, count, rounds, &mut next).await;
        let p99 = attacked.p(0.99).as_secs_f64() / calm.p(0.99).as_secs_f64();
        let thr = attacked.throughput / calm.throughput;
        println!(
            "{:<12} {:>9.1}ms {:>9.1}ms {:>8.2} {:>9.1}/s {:>9.1}/s {:>8.2}",
            mode,
            calm.p(0.99).as_secs_f64() * 1e3,
            attacked.p(0.99).as_secs_f64() * 1e3,
            p99,
            calm.throughput,
            attacked.throughput,
            thr
        );
        rows.push(json!({"attack": mode, "p99CalmMs": calm.p(0.99).as_secs_f64() * 1e3, "p99HostileMs": attacked.p(0.99).as_secs_f64() * 1e3,
            "p99Ratio": p99, "throughputCalm": calm.throughput, "throughputHostile": attacked.throughput, "throughputRatio": thr,
            "p50CalmMs": calm.p(0.5).as_secs_f64() * 1e3, "p50HostileMs": attacked.p(0.5).as_secs_f64() * 1e3}));
    }
    set_calm(&things, hostile).await;
    let dir = root().join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hostile.json"), serde_json::to_string_pretty(&rows).unwrap()).unwrap();
    println!("written: target/bench/hostile.json");
    drop(plane);
    std::process::exit(0);
}

const TENANT_A: &str = "tenant-a";
/// The namespace of the `egress` scenario's tenant.
const TENANT_EGRESS: &str = "tenant-egress";
/// Its Things.
const EGRESS_THINGS: usize = 8;
/// Tenant A's Things.
const TENANT_THINGS: usize = 64;

async fn tenant_a_things(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing"));
    let things: Api<DynamicObject> = Api::namespaced_with(client.clone(), TENANT_A, &ar);
    for i in 0..TENANT_THINGS {
        let obj = serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": format!("greedy-{i}")}, "spec": hostile_spec("calm", i)}))
        .unwrap();
        things.create(&PostParams::default(), &obj).await.unwrap();
    }
    things
}

/// A registry that accepts connections and never answers: the address.
async fn stalled_registry() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr
}

/// The process's peak resident memory (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The two-tenant scenario: calm, then tenant A attacking; the neighbour's
/// figures and the peak memory.
#[allow(clippy::too_many_arguments)]
async fn tenants(
    webapps: &Api<DynamicObject>,
    seen: &Seen,
    count: usize,
    rounds: usize,
    next: &mut i32,
    things: &Api<DynamicObject>,
    stalled: &str,
    flooded: &(operon::webhook::Webhooks, String),
    metrics: &operon::metrics::Metrics,
) -> Value {
    let set = |mode: &'static str| async move {
        for i in 0..TENANT_THINGS {
            let patch = json!({"spec": hostile_spec(mode, i)});
            things.patch(&format!("greedy-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        }
    };
    set("calm").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calm = neighbour_phase(webapps, seen, count, rounds, next).await;
    let rss_calm = peak_rss_mib();
    // The stalled source: tenant A's plugin pulled from a registry that
    // never answers (fetched by the host's source workers, off the
    // reconcile path).
    let source = operon::reconciler::crd::OciSource {
        reference: format!("{stalled}/tenant-a/plugin:v1"),
        digest: format!("sha256:{}", "0".repeat(64)),
    };
    let pulling = tokio::spawn(async move {
        operon::reconciler::source::from_oci(&source, operon::reconciler::source::Bounds::default()).await
    });
    // The webhook flood: 32 callers sending reviews that make tenant A's
    // validate loop, as fast as they are answered or refused.
    let review = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "operation": "CREATE", "name": "w", "namespace": TENANT_A,
            "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
            "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
            "userInfo": {"username": "flood"},
            "object": {"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                "metadata": {"name": "w", "namespace": TENANT_A, "annotations": {"admission-test": "loop"}},
                "spec": {"image": "nginx"}}
        }
    }))
    .unwrap();
    let flood: Vec<_> = (0..32)
        .map(|_| {
            let (webhooks, name, review) = (flooded.0.clone(), flooded.1.clone(), review.clone());
            tokio::spawn(async move {
                loop {
                    let answer = webhooks.answer(operon::webhook::Hook::Validate, &name, &review).await;
                    if answer.status == 429 {
                        // A refused caller comes back, as the API server
                        // would on the next write, not in a busy loop.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            })
        })
        .collect();
    set("memory").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let attacked = neighbour_phase(webapps, seen, count, rounds, next).await;
    let rss_attacked = peak_rss_mib();
    for f in flood {
        f.abort();
    }
    // Where the neighbours waited: the host's limits and their own budgets.
    for line in metrics.encode().unwrap_or_default().lines() {
        let waits = ["operon_host_limited_seconds_total", "operon_guest_throttled_seconds_total"];
        if waits.iter().any(|w| line.starts_with(w)) && !line.ends_with(" 0") {
            println!("  {line}");
        }
    }
    set("calm").await;
    pulling.abort();
    let p99 = attacked.p(0.99).as_secs_f64() / calm.p(0.99).as_secs_f64();
    let thr = attacked.throughput / calm.throughput;
    println!(
        "{:<12} {:>9.1}ms {:>9.1}ms {:>8.2} {:>9.1}/s {:>9.1}/s {:>8.2}   peak RSS {:.0} MiB calm, {:.0} MiB attacked",
        "tenants",
        calm.p(0.99).as_secs_f64() * 1e3,
        attacked.p(0.99).as_secs_f64() * 1e3,
        p99,
        calm.throughput,
        attacked.throughput,
        thr,
        rss_calm,
        rss_attacked
    );
    json!({"attack": "tenants", "p99CalmMs": calm.p(0.99).as_secs_f64() * 1e3, "p99HostileMs": attacked.p(0.99).as_secs_f64() * 1e3,
        "p99Ratio": p99, "throughputCalm": calm.throughput, "throughputHostile": attacked.throughput, "throughputRatio": thr,
        "peakRssCalmMiB": rss_calm, "peakRssAttackedMiB": rss_attacked})
}

async fn set_calm(things: &Api<DynamicObject>, hostile: usize) {
    for i in 0..hostile {
        let patch = json!({"spec": hostile_spec("calm", i)});
        let _ = things.patch(&format!("hostile-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await;
    }
}

/// The egress scenario: calm, then the tenant's Things looping on refused
/// 1 MiB calls (a spec change every 100 ms keeps them reconciling); the
/// neighbour's figures and the peak memory.
async fn egress(
    client: &kube::Client,
    webapps: &Api<DynamicObject>,
    seen: &Seen,
    count: usize,
    rounds: usize,
    next: &mut i32,
) -> Value {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing"));
    let things: Api<DynamicObject> = Api::namespaced_with(client.clone(), TENANT_EGRESS, &ar);
    let spec = |flood: bool, round: u64| {
        let flood = flood.then(|| json!({"url": "https://api.example.com/x", "times": 2000, "bodyBytes": 1 << 20}));
        json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "spec": {"flood": flood, "round": round}})
    };
    for i in 0..EGRESS_THINGS {
        let mut object = spec(false, 0);
        object["metadata"] = json!({"name": format!("egress-{i}")});
        let _ =
            things.patch(&format!("egress-{i}"), &PatchParams::apply("bench").force(), &Patch::Apply(&object)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calm = neighbour_phase(webapps, seen, count, rounds, next).await;
    let rss_calm = peak_rss_mib();
    let attacking = {
        let things = things.clone();
        tokio::spawn(async move {
            for round in 1u64.. {
                for i in 0..EGRESS_THINGS {
                    let patch = json!({"spec": spec(true, round)["spec"].clone()});
                    let _ = things.patch(&format!("egress-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let attacked = neighbour_phase(webapps, seen, count, rounds, next).await;
    let rss_attacked = peak_rss_mib();
    attacking.abort();
    for i in 0..EGRESS_THINGS {
        let patch = json!({"spec": spec(false, 0)["spec"].clone()});
        let _ = things.patch(&format!("egress-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await;
    }
    let p99 = attacked.p(0.99).as_secs_f64() / calm.p(0.99).as_secs_f64();
    let thr = attacked.throughput / calm.throughput;
    println!(
        "{:<12} {:>9.1}ms {:>9.1}ms {:>8.2} {:>9.1}/s {:>9.1}/s {:>8.2}   peak RSS {:.0} MiB calm, {:.0} MiB attacked",
        "egress",
        calm.p(0.99).as_secs_f64() * 1e3,
        attacked.p(0.99).as_secs_f64() * 1e3,
        p99,
        calm.throughput,
        attacked.throughput,
        thr,
        rss_calm,
        rss_attacked
    );
    json!({"attack": "egress", "p99CalmMs": calm.p(0.99).as_secs_f64() * 1e3, "p99HostileMs": attacked.p(0.99).as_secs_f64() * 1e3,
        "p99Ratio": p99, "throughputCalm": calm.throughput, "throughputHostile": attacked.throughput, "throughputRatio": thr,
        "peakRssCalmMiB": rss_calm, "peakRssAttackedMiB": rss_attacked})
}
