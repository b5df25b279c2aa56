//! Runtime benchmark: one WebApp reconcile through the wasm guest, beside the
//! same logic compiled natively, in the same process and the same run.
//!
//! Run with `cargo xtask bench runtime` (which builds
//! `target/guests/rust-webapp.wasm` first), or `cargo bench -p operon --bench
//! runtime` once the guest exists. Prints figures; asserts nothing about time.
//!
//! # What is measured
//!
//! The request is a steady-state reconcile of a realistic WebApp: a parent of
//! about 4 KB of JSON (metadata with labels and annotations, a spec with
//! environment variables, the status of the previous reconcile) and its two
//! existing children as the API server returns them (a Deployment and a
//! Service, server-filled fields included, `managedFields` stripped as the
//! host's cache does). The guest computes the status from the Deployment.
//!
//! - **wasm, fresh**: `Module::reconcile` with the `fresh` instance policy,
//!   as the controller calls it: request copied into WIT values, a new
//!   instance from the `InstancePre` (pooling allocator), the guest call
//!   (parse → logic → serialize inside the guest), and the host's check of
//!   the outcome (`convert_outcome`: every desired object and the status
//!   parsed as JSON), instance dropped.
//! - **wasm, pooled**: the same call with the `pooled` policy (one reused
//!   instance; no instantiation).
//! - **native**: `operon_sdk::run::reconcile::<WebAppReconciler>` on the
//!   identical request, with an empty `FakeCluster` (the WebApp reads
//!   nothing): parse → logic → serialize, the code path the component
//!   export runs. The request is cloned outside the timed region (the wasm
//!   call copies it inside `Module::reconcile`, which is counted there).
//! - **instantiate**: derived as p50(fresh) − p50(pooled) per round: the
//!   cost of a fresh instance (create, first touch of its memory, drop).
//!
//! Each call is timed on its own (`Instant` around it). The variants run in
//! rounds, interleaved and in rotating order, so that noise from the shared
//! machine hits all of them alike; every figure is the median across rounds
//! of that round's statistic, and ratios are per-round ratios, then the
//! median. Calls/s/core is calls divided by the batch's wall time on one
//! thread, sequentially.

use operon::runtime::{self, Gvk, InstancePolicy, Limits, Module, NoObjects, Request, Runtime};
use operon_sdk::raw;
use operon_sdk::testing::{self, FakeCluster};
use rust_webapp::WebAppReconciler;
use serde_json::{Value, json};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rounds whose statistics are reported (after one warm-up round).
const ROUNDS: usize = 25;
/// Calls per variant per round.
const CALLS: usize = 2000;

/// Targets from the design: a fresh-instance reconcile within 30 µs (p50)
/// and at most twice the native cost.
const TARGET_FRESH_P50: Duration = Duration::from_micros(30);
const TARGET_RATIO: f64 = 2.0;

fn main() {
    let wasm_path = guests_dir().join("rust-webapp.wasm");
    let bytes = std::fs::read(&wasm_path)
        .unwrap_or_else(|e| panic!("{}: {e}; build it with `cargo xtask guests rust-webapp`", wasm_path.display()));
    let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).expect("engine");
    let fresh = rt.load(&bytes, Limits::default()).expect("load (fresh)");
    let pooled = rt
        .load(&bytes, Limits { instance_policy: InstancePolicy::Pooled, pool_size: 1, ..Limits::default() })
        .expect("load (pooled)");

    let native_request = webapp_request();
    let host_request = to_host(&native_request);
    let reader: Arc<dyn runtime::ObjectReader> = Arc::new(NoObjects);

    // The three paths must compute the same thing, or the comparison means nothing.
    let native_outcome = native_call(&native_request).expect("native reconcile");
    let wasm_outcome = fresh.reconcile(&host_request, reader.clone()).expect("wasm call").expect("wasm reconcile");
    let pooled_outcome = pooled.reconcile(&host_request, reader.clone()).expect("wasm call").expect("wasm reconcile");
    let native_desired: Vec<Value> = native_outcome.desired.iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let native_status: Option<Value> = native_outcome.status.as_deref().map(|s| serde_json::from_str(s).unwrap());
    assert_eq!(wasm_outcome.desired, native_desired, "wasm and native disagree on desired objects");
    assert_eq!(wasm_outcome.status, native_status, "wasm and native disagree on the status");
    assert_eq!(wasm_outcome, pooled_outcome);

    let mut variants = [
        Variant::new("native (same logic)", Box::new(|| native_timed(&native_request))),
        Variant::new("wasm, pooled instance", Box::new(|| wasm_timed(&pooled, &host_request, &reader))),
        Variant::new("wasm, fresh instance", Box::new(|| wasm_timed(&fresh, &host_request, &reader))),
    ];
    // Phases of the native call and the host's outcome check, for the analysis.
    let mut phases = Phases::default();

    let started = Instant::now();
    for round in 0..=ROUNDS {
        let warm_up = round == 0;
        // Rotate the order so no variant always runs first (after a pause).
        for i in 0..variants.len() {
            let v = &mut variants[(round + i) % 3];
            v.round(CALLS, warm_up);
        }
        phases.round(&native_request, &native_outcome, CALLS / 4, warm_up);
    }
    let elapsed = started.elapsed();

    let [native, pooled_v, fresh_v] = &variants;
    let ratio =
        |v: &Variant| median_f64(v.p50s.iter().zip(&native.p50s).map(|(w, n)| w.as_secs_f64() / n.as_secs_f64()));
    let instantiate = median_dur(fresh_v.p50s.iter().zip(&pooled_v.p50s).map(|(f, p)| f.saturating_sub(*p)));

    let outcome_bytes: usize = native_outcome.desired.iter().map(String::len).sum::<usize>()
        + native_outcome.status.as_ref().map_or(0, String::len);
    println!();
    println!("Operon runtime benchmark: WebApp reconcile, wasm guest vs the same logic native");
    println!(
        "guest {} ({:.0} KB), {} CPUs, {ROUNDS} rounds x {CALLS} calls per variant (+1 warm-up round), {:.1} s",
        wasm_path.display(),
        bytes.len() as f64 / 1024.0,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        elapsed.as_secs_f64()
    );
    println!(
        "request: parent {:.1} KB, children {} ({:.1} KB); outcome {:.1} KB ({} desired, status, {} events); wasm == native outcome: yes",
        host_request.object.len() as f64 / 1024.0,
        host_request.children.iter().map(|(k, o)| format!("{}x{}", o.len(), k.kind)).collect::<Vec<_>>().join(" "),
        host_request.children.iter().flat_map(|(_, o)| o).map(String::len).sum::<usize>() as f64 / 1024.0,
        outcome_bytes as f64 / 1024.0,
        native_outcome.desired.len(),
        native_outcome.events.len(),
    );
    println!("medians across rounds:");
    println!();
    println!("  {:<24} {:>10} {:>10} {:>14} {:>12}", "", "p50", "p99", "calls/s/core", "p50 / native");
    for v in &variants {
        println!(
            "  {:<24} {:>10} {:>10} {:>14.0} {:>11.2}x",
            v.name,
            us(median_dur(v.p50s.iter().copied())),
            us(median_dur(v.p99s.iter().copied())),
            median_f64(v.rates.iter().copied()),
            ratio(v)
        );
    }
    println!("  {:<24} {:>10}   (p50 fresh - p50 pooled, per round)", "instantiate (derived)", us(instantiate));
    println!();

    let fresh_p50 = median_dur(fresh_v.p50s.iter().copied());
    let fresh_ratio = ratio(fresh_v);
    println!("targets:");
    println!(
        "  fresh-instance reconcile p50 <= {}: {:>10}  {}",
        us(TARGET_FRESH_P50),
        us(fresh_p50),
        verdict(fresh_p50 <= TARGET_FRESH_P50)
    );
    println!(
        "  fresh-instance / native (p50) <= {TARGET_RATIO:.0}x:  {:>9.2}x  {}",
        fresh_ratio,
        verdict(fresh_ratio <= TARGET_RATIO)
    );
    println!("  (pooled / native: {:.2}x)", ratio(pooled_v));
    println!();
    println!("where the time goes (native phases, p50; the guest runs the same three inside wasm):");
    let p = |d: &Vec<Duration>| us(median_dur(d.iter().copied()));
    println!("  parse request (JSON -> WebApp, children)  {:>10}", p(&phases.parse));
    println!("  reconcile logic                           {:>10}", p(&phases.logic));
    println!("  serialize outcome (-> JSON)               {:>10}", p(&phases.serialize));
    println!(
        "  host check of the outcome (JSON parse)    {:>10}   (convert_outcome's work, on the host in both wasm variants)",
        p(&phases.check)
    );
    println!();
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// One way of running the reconcile, and its statistics per round.
struct Variant<'a> {
    name: &'static str,
    call: Box<dyn FnMut() -> Duration + 'a>,
    p50s: Vec<Duration>,
    p99s: Vec<Duration>,
    rates: Vec<f64>,
}

impl<'a> Variant<'a> {
    fn new(name: &'static str, call: Box<dyn FnMut() -> Duration + 'a>) -> Self {
        Variant { name, call, p50s: Vec::new(), p99s: Vec::new(), rates: Vec::new() }
    }

    fn round(&mut self, calls: usize, warm_up: bool) {
        let mut times = Vec::with_capacity(calls);
        let started = Instant::now();
        for _ in 0..calls {
            times.push((self.call)());
        }
        let wall = started.elapsed();
        if warm_up {
            return;
        }
        times.sort_unstable();
        self.p50s.push(percentile(&times, 50.0));
        self.p99s.push(percentile(&times, 99.0));
        self.rates.push(calls as f64 / wall.as_secs_f64());
    }
}

fn native_call(request: &raw::Request) -> Result<raw::Outcome, raw::Failure> {
    operon_sdk::run::reconcile::<WebAppReconciler>(&FakeCluster::new(), request.clone())
}

fn native_timed(request: &raw::Request) -> Duration {
    let cluster = FakeCluster::new();
    let request = request.clone();
    let started = Instant::now();
    let outcome = operon_sdk::run::reconcile::<WebAppReconciler>(&cluster, black_box(request));
    drop(black_box(outcome));
    started.elapsed()
}

fn wasm_timed(module: &Module, request: &Request, reader: &Arc<dyn runtime::ObjectReader>) -> Duration {
    let reader = reader.clone();
    let started = Instant::now();
    let outcome = module.reconcile(black_box(request), reader);
    let elapsed = started.elapsed();
    assert!(matches!(outcome, Ok(Ok(_))), "the guest call failed: {outcome:?}");
    elapsed
}

/// The native call split into its three steps, plus the host's outcome check.
#[derive(Default)]
struct Phases {
    parse: Vec<Duration>,
    logic: Vec<Duration>,
    serialize: Vec<Duration>,
    check: Vec<Duration>,
}

impl Phases {
    fn round(&mut self, request: &raw::Request, outcome: &raw::Outcome, calls: usize, warm_up: bool) {
        let cluster = FakeCluster::new();
        let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..calls {
            let request = request.clone();
            let t0 = Instant::now();
            let parsed = operon_sdk::Request::<rust_webapp::WebApp>::from_raw(black_box(request)).unwrap();
            let t1 = Instant::now();
            let context = operon_sdk::Context::new(&cluster);
            let out = <WebAppReconciler as operon_sdk::Reconciler>::reconcile(parsed, &context).unwrap();
            let t2 = Instant::now();
            let serialized = out.into_raw().unwrap();
            let t3 = Instant::now();
            drop(black_box(serialized));
            // What `convert_outcome` does with the guest's answer.
            let t4 = Instant::now();
            let desired: Vec<Value> = outcome.desired.iter().map(|d| serde_json::from_str(d).unwrap()).collect();
            let status: Option<Value> = outcome.status.as_deref().map(|s| serde_json::from_str(s).unwrap());
            black_box((desired, status));
            let t5 = Instant::now();
            for (v, d) in t.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2, t5 - t4]) {
                v.push(d);
            }
        }
        if warm_up {
            return;
        }
        for (out, mut v) in [&mut self.parse, &mut self.logic, &mut self.serialize, &mut self.check].into_iter().zip(t)
        {
            v.sort_unstable();
            out.push(percentile(&v, 50.0));
        }
    }
}

/// A steady-state request: the parent carries the status of the previous
/// reconcile, and its Deployment and Service exist as the API server returns
/// them. Built from the guest's own desired objects, so it stays in step with
/// the example.
fn webapp_request() -> raw::Request {
    let mut parent = webapp_parent();
    // First reconcile (no children) yields the desired children.
    let first = native_call(&testing::request(&parent).build::<WebAppReconciler>()).expect("first reconcile");
    let mut deployment: Value = serde_json::from_str(&first.desired[0]).unwrap();
    let mut service: Value = serde_json::from_str(&first.desired[1]).unwrap();
    as_served(&mut deployment, "apps/v1", "Deployment");
    as_served(&mut service, "v1", "Service");
    let replicas = deployment["spec"]["replicas"].clone();
    let d = &mut deployment;
    d["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1"});
    d["spec"]["progressDeadlineSeconds"] = json!(600);
    d["spec"]["revisionHistoryLimit"] = json!(10);
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}});
    let pod = &mut d["spec"]["template"]["spec"];
    pod["dnsPolicy"] = json!("ClusterFirst");
    pod["restartPolicy"] = json!("Always");
    pod["schedulerName"] = json!("default-scheduler");
    pod["securityContext"] = json!({});
    pod["terminationGracePeriodSeconds"] = json!(30);
    let container = &mut pod["containers"][0];
    container["imagePullPolicy"] = json!("IfNotPresent");
    container["resources"] = json!({});
    container["terminationMessagePath"] = json!("/dev/termination-log");
    container["terminationMessagePolicy"] = json!("File");
    container["ports"][0]["protocol"] = json!("TCP");
    d["status"] = json!({
        "observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas,
        "conditions": [
            {"type": "Available", "status": "True", "lastUpdateTime": "2026-01-01T00:00:20Z",
             "lastTransitionTime": "2026-01-01T00:00:20Z", "reason": "MinimumReplicasAvailable",
             "message": "Deployment has minimum availability."},
            {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-01-01T00:00:20Z",
             "lastTransitionTime": "2026-01-01T00:00:02Z", "reason": "NewReplicaSetAvailable",
             "message": "ReplicaSet \"web-7d9f8c6b5\" has successfully progressed."}
        ]
    });
    let s = &mut service["spec"];
    s["clusterIP"] = json!("10.0.0.42");
    s["clusterIPs"] = json!(["10.0.0.42"]);
    s["internalTrafficPolicy"] = json!("Cluster");
    s["ipFamilies"] = json!(["IPv4"]);
    s["ipFamilyPolicy"] = json!("SingleStack");
    s["sessionAffinity"] = json!("None");
    s["type"] = json!("ClusterIP");
    service["status"] = json!({"loadBalancer": {}});

    // Second reconcile with the children: its status is what the parent
    // would now carry, making this request a steady state (no events).
    let with_children =
        |parent: &Value| testing::request(parent).child(&deployment).child(&service).build::<WebAppReconciler>();
    let second = native_call(&with_children(&parent)).expect("second reconcile");
    parent["status"] = serde_json::from_str(second.status.as_deref().unwrap()).unwrap();
    with_children(&parent)
}

/// Server-filled metadata, as a child looks in the informer cache.
fn as_served(object: &mut Value, api_version: &str, kind: &str) {
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    let meta = &mut object["metadata"];
    meta["namespace"] = json!("shop");
    meta["uid"] = json!(format!("2f0c6a3e-5b1d-4c7e-9a2f-{:012x}", kind.len()));
    meta["resourceVersion"] = json!("48213");
    meta["generation"] = json!(1);
    meta["creationTimestamp"] = json!("2026-01-01T00:00:01Z");
    meta["ownerReferences"] = json!([{
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp", "name": "web",
        "uid": "7c1e2a90-3d4b-4f6a-8e21-5a9b0c3d2e1f", "controller": true, "blockOwnerDeletion": true
    }]);
}

/// A WebApp of about 4 KB of JSON, as the API server returns it (the
/// client-side-apply annotation is the usual bulk of a real object).
fn webapp_parent() -> Value {
    let spec = json!({
        "image": "registry.example.com/shop/web:1.4.2",
        "replicas": 3,
        "port": 8080,
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-v3,recommendations-v1"},
            {"name": "DATABASE_URL", "value": "postgres://db.shop.svc:5432/shop?sslmode=require"},
            {"name": "CACHE_URL", "value": "redis://cache.shop.svc:6379/0"},
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability.svc:4318"}
        ]
    });
    let last_applied = json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "web", "namespace": "shop",
                     "labels": {"team": "shop", "tier": "frontend", "app.kubernetes.io/part-of": "store"}},
        "spec": spec,
    });
    json!({
        "apiVersion": "example.operon.dev/v1alpha1",
        "kind": "WebApp",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": "7c1e2a90-3d4b-4f6a-8e21-5a9b0c3d2e1f",
            "generation": 4,
            "resourceVersion": "48377",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["example.operon.dev/cleanup"],
            "labels": {"team": "shop", "tier": "frontend", "app.kubernetes.io/part-of": "store",
                       "cost-center": "cc-1042", "environment": "production"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied.to_string(),
                "description": "The storefront of the shop: serves the catalogue, the basket and the checkout pages. ".repeat(20),
                "owner": "platform-team@example.com",
                "runbook": "https://runbooks.example.com/shop/web"
            }
        },
        "spec": spec,
    })
}

/// The same request in the host's form (identical JSON texts).
fn to_host(r: &raw::Request) -> Request {
    Request {
        object: r.object.clone(),
        children: r
            .children
            .iter()
            .map(|c| (Gvk::new(&c.kind.group, &c.kind.version, &c.kind.kind), c.objects.clone()))
            .collect(),
        related: r.related.clone(),
        finalizing: r.finalizing,
        attempt: r.attempt,
    }
}

/// `target/guests`, or `$OPERON_GUESTS_DIR`.
fn guests_dir() -> PathBuf {
    std::env::var_os("OPERON_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/guests"))
}

/// Nearest-rank percentile of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median_dur(values: impl Iterator<Item = Duration>) -> Duration {
    let mut v: Vec<Duration> = values.collect();
    v.sort_unstable();
    v[v.len() / 2]
}

fn median_f64(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_unstable_by(f64::total_cmp);
    v[v.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}
