//! A slow egress endpoint beside a neighbour (`cargo xtask bench egress`):
//! does a Reconciler whose every reconcile waits 30 s on an outside API
//! move another Reconciler's reconcile latency? It prints figures; it
//! asserts nothing about time.
//!
//! One control plane (operon-envtest) and, in this process, the host as
//! `operon run` builds it: a [`Manager`] with the Reconciler controller,
//! `operon run`'s defaults (`--max-concurrent-reconciles 1`, `--guest-cpu
//! 250m`, `--max-guest-cpu-total 2`, `--max-guest-memory-mib 512`, a tokio
//! runtime of one worker per CPU) except for the gate, which each scenario
//! sets. Two HTTP servers on 127.0.0.1, also in this process: the *fast*
//! API answers `/fast?TAG` at once with `TAG` as its body; the *slow* API
//! answers `/slow` after 30 s (or at once when the bench releases it) and
//! counts the requests it holds. Two Reconcilers of the `egress-probe` test
//! guest over `Thing`s, split by label:
//!
//! - **the neighbour** (`who=neighbour`, 10 Things, `operon run`'s
//!   defaults: one worker, a 1 s deadline): each reconcile makes one call
//!   to the fast API;
//! - **the slow one** (`who=slow`, `--slow` Things, 20;
//!   `spec.limits.timeout: 35s`, `maxConcurrentReconciles` per scenario):
//!   each reconcile calls the slow API with `timeoutMs: 32000`, so the call
//!   really waits the 30 s. While it is on, the bench patches every slow
//!   Thing every 5 s, so each one is queued again before its reconcile ends
//!   and its calls follow each other without a gap.
//!
//! **A neighbour reconcile's latency** is from just before the merge patch
//! that sets a Thing's `spec.calls` to `/fast?TAG` (a fresh tag each time)
//! to the moment the bench's watch of the neighbour's Things sees
//! `status.results[0].body == TAG`: the API server's write, the watch event
//! to the host, the queue, the host's limits, the guest call and its
//! egress call, the status write, and the watch event back. The bench
//! makes them one after another (the next one starts when the previous one
//! is seen), rotating over the 10 Things.
//!
//! **Phases**, interleaved in `--rounds` rounds (10), in the order ABBA so
//! that drift weighs on both: (a) *alone*, the slow Things idle; (b)
//! *beside the slow one*, its calls in flight (turned on and waited for
//! until the number in flight is steady for 2 s; after the round, the slow
//! API answers every held call at once and the slow Reconciler goes idle
//! again). `--reconciles` (1000) per phase, split over the rounds. Phase
//! (b) stops once its rounds have taken `--beside-limit` seconds (150):
//! where the neighbour waits behind the slow calls, each of its reconciles
//! takes up to 30 s. Before the rounds: 20 reconciles alone and a round of
//! 10 beside the slow one, thrown away. The slow Things were first
//! reconciled with the slow API answering at once, one Thing before the
//! others, so the slow Reconciler's CPU budget knows its calls are cheap:
//! until a call has returned, it charges each admission the deadline (35
//! s), and the workers it turns away sleep the whole debt.
//!
//! **Scenarios** (`--scenarios`, all three by default), each with its own
//! host and namespace:
//!
//! - `default`: `operon run`'s gate (`--max-guest-calls 16`,
//!   `--max-guest-memory-total 768Mi`), the slow Reconciler with
//!   `maxConcurrentReconciles` = its Things (20);
//! - `sized`: the same gate, the slow Reconciler with
//!   `maxConcurrentReconciles` `--sized-workers` (8);
//! - `open`: no gate (`--max-guest-calls 0 --max-guest-memory-total 0`),
//!   `maxConcurrentReconciles` 20;
//! - `slots` (only when asked for): 16 call slots and no memory limit,
//!   `maxConcurrentReconciles` 20.
//!
//! For each: p50, p99 and max of both phases, the ratios (b)/(a) (the
//! target: p99 ratio ≤ 1.10), the slow calls in flight while (b) ran (as
//! the slow API counts them), the gate's calls in flight and the process's
//! threads, and where the neighbour's time went (its waits for the host's
//! limits and its own CPU budget, its guest call, its egress call: the
//! host's metrics). Writes `target/bench/egress.json`.

#[path = "common/support.rs"]
mod support;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use operon::manager::{self, Manager};
use operon::metrics::Metrics;
use operon::reconciler;
use operon::runtime::{self, Runtime};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{arg, list, ms, quantile};

/// How long the slow API takes to answer.
const SLOW_FOR: Duration = Duration::from_secs(30);
/// The neighbour's Things.
const NEIGHBOURS: usize = 10;
/// A neighbour reconcile not seen within this is counted at this.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(90);
/// The p99 ratio the issue asks for.
const TARGET: f64 = 1.10;

// ------------------------------------------------------------ the two APIs

/// The slow API's state.
struct SlowApi {
    /// Requests held now.
    held: AtomicUsize,
    /// Requests received.
    received: AtomicU64,
    /// Whether requests wait [`SLOW_FOR`] (otherwise answered at once).
    slow: AtomicBool,
    /// Bumped to answer every held request now.
    release: tokio::sync::watch::Sender<u64>,
}

/// One held request; counted until dropped (answered or abandoned).
struct Held(Arc<SlowApi>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Apis {
    fast: u16,
    slow: u16,
    state: Arc<SlowApi>,
}

impl Apis {
    async fn start() -> Apis {
        use axum::extract::{RawQuery, State};
        async fn fast(RawQuery(q): RawQuery) -> String {
            q.unwrap_or_default()
        }
        async fn slow(State(api): State<Arc<SlowApi>>) -> &'static str {
            api.received.fetch_add(1, Ordering::SeqCst);
            api.held.fetch_add(1, Ordering::SeqCst);
            let _held = Held(api.clone());
            // Listening before looking: a release in between is not missed.
            let mut release = api.release.subscribe();
            release.borrow_and_update();
            if !api.slow.load(Ordering::SeqCst) {
                return "quick";
            }
            tokio::select! {
                () = tokio::time::sleep(SLOW_FOR) => "late",
                _ = release.changed() => "released",
            }
        }
        let state = Arc::new(SlowApi {
            held: 0.into(),
            received: 0.into(),
            slow: false.into(),
            release: tokio::sync::watch::channel(0).0,
        });
        let serve = |app: axum::Router| async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            port
        };
        let fast = serve(axum::Router::new().route("/fast", axum::routing::get(fast))).await;
        let slow = serve(axum::Router::new().route("/slow", axum::routing::get(slow)).with_state(state.clone())).await;
        Apis { fast, slow, state }
    }
}

// ------------------------------------------------------------ the host

/// The gate and the slow Reconciler's workers of one scenario.
#[derive(Clone, Debug)]
struct Scenario {
    name: String,
    /// `--max-guest-calls` (0: no limit).
    calls: usize,
    /// `--max-guest-memory-total` in bytes (0: no limit).
    memory: u64,
    /// The slow Reconciler's `maxConcurrentReconciles`.
    slow_workers: usize,
}

impl Scenario {
    fn of(name: &str, slow: usize) -> Scenario {
        let (calls, memory, slow_workers) = match name {
            "default" => (16, 768 << 20, slow),
            "sized" => (16, 768 << 20, arg("--sized-workers", 8)),
            "open" => (0, 0, slow),
            "slots" => (16, 0, slow),
            other => panic!("unknown scenario {other:?}: default, sized, open or slots"),
        };
        Scenario { name: name.into(), calls, memory, slow_workers }
    }

    fn describe(&self) -> String {
        let calls = if self.calls == 0 { "0 (no limit)".to_string() } else { self.calls.to_string() };
        let memory = if self.memory == 0 { "0 (no limit)".to_string() } else { format!("{}Mi", self.memory >> 20) };
        let gate = format!("--max-guest-calls {calls} --max-guest-memory-total {memory}");
        format!("{gate}; the slow Reconciler's maxConcurrentReconciles {}", self.slow_workers)
    }
}

/// The host, in-process, as `operon run` builds it.
struct Host {
    manager: Manager,
    runtime: Runtime,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Host {
    async fn start(plane: &operon_envtest::ControlPlane, client: &kube::Client, ns: &str, s: &Scenario) -> Host {
        let gate = runtime::GateLimits {
            memory: if s.memory == 0 { u64::MAX } else { s.memory },
            calls: if s.calls == 0 { usize::MAX } else { s.calls },
        };
        let runtime =
            Runtime::new(runtime::Config { artifact_dir: None, max_memory: 512 << 20, gate, ..Default::default() })
                .unwrap();
        // `operon run`'s host-wide CPU budget: 2 CPUs, a 2 s burst, calls
        // of up to `--guest-timeout` (1 s) until calibrated.
        let host_cpu = operon::pipeline::Budget::new(2.0, Duration::from_secs(2), Duration::from_secs(1)).map(Arc::new);
        let pipeline = operon::pipeline::Config {
            controller: operon::controller::Config { max_concurrent_reconciles: 1, ..Default::default() },
            host_cpu,
            // The operator opens loopback, where the bench's servers listen:
            // a Reconciler's grant of 127.0.0.1 alone reaches nothing.
            egress_allowed: operon::egress::grants::Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap(),
            ..Default::default()
        };
        let manager = Manager::builder(client.clone())
            .config(manager::Config { pipeline, server_addr: None, ..Default::default() })
            .runtime(runtime.clone())
            .add(reconciler::Reconcilers::component(
                reconciler::Config {
                    kube_config: Some(plane.config()),
                    selector: Some(format!("operon.dev/bench={ns}")),
                    status_period: Duration::from_secs(1),
                    instance: "egress-bench".into(),
                    ..Default::default()
                },
                Vec::new(),
            ))
            .build()
            .await
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mgr = manager.clone();
        let task = tokio::spawn(async move {
            mgr.run(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Host { manager, runtime, stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(60), self.task).await;
    }
}

fn things(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn apply<K>(api: &Api<K>, name: &str, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.patch(name, &PatchParams::apply("egress-bench").force(), &Patch::Apply(&object))
        .await
        .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}

// ------------------------------------------------------------ what the neighbour shows

/// When each `(Thing, result body)` was first seen by the bench's watch.
#[derive(Clone, Default)]
struct Seen {
    at: Arc<Mutex<HashMap<(String, String), Instant>>>,
    changed: Arc<tokio::sync::Notify>,
    watch: Option<Arc<tokio::task::JoinHandle<()>>>,
}

impl Seen {
    /// Watch the neighbour's Things.
    fn watch(api: Api<DynamicObject>) -> Seen {
        let mut seen = Seen::default();
        let s = seen.clone();
        let watch = tokio::spawn(async move {
            let config = watcher::Config::default().labels("who=neighbour");
            let mut stream = watcher::watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                let (Ok(watcher::Event::Apply(t)) | Ok(watcher::Event::InitApply(t))) = event else { continue };
                let now = Instant::now();
                let (Some(name), Some(body)) = (
                    t.metadata.name.clone(),
                    t.data.pointer("/status/results/0/body").and_then(Value::as_str).map(str::to_string),
                ) else {
                    continue;
                };
                s.at.lock().unwrap().entry((name, body)).or_insert(now);
                s.changed.notify_waiters();
            }
        });
        seen.watch = Some(Arc::new(watch));
        seen
    }

    fn stop(&self) {
        if let Some(w) = &self.watch {
            w.abort();
        }
    }

    /// When `(name, body)` was seen, waiting until `deadline`.
    async fn wait(&self, name: &str, body: &str, deadline: Instant) -> Option<Instant> {
        let key = (name.to_string(), body.to_string());
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(at) = self.at.lock().unwrap().get(&key) {
                return Some(*at);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            let _ = tokio::time::timeout(left, changed).await;
        }
    }
}

/// The neighbour's side of one scenario.
struct Neighbour {
    things: Api<DynamicObject>,
    seen: Seen,
    fast: u16,
    next: u64,
}

impl Neighbour {
    fn spec(&self, tag: &str) -> Value {
        json!({"calls": [{"url": format!("http://127.0.0.1:{}/fast?{tag}", self.fast)}]})
    }

    /// One reconcile: its latency, or `None` when not seen within
    /// [`SAMPLE_TIMEOUT`].
    async fn reconcile(&mut self) -> Option<Duration> {
        self.next += 1;
        let name = format!("n-{}", self.next % NEIGHBOURS as u64);
        let tag = format!("t{}", self.next);
        let patch = json!({"spec": self.spec(&tag)});
        let started = Instant::now();
        self.things.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let seen = self.seen.wait(&name, &tag, started + SAMPLE_TIMEOUT).await?;
        Some(seen.saturating_duration_since(started))
    }
}

// ------------------------------------------------------------ the slow Reconciler

struct Slow {
    things: Api<DynamicObject>,
    count: usize,
    url: String,
    api: Arc<SlowApi>,
    /// The last `spec.nonce` written.
    nonce: Arc<AtomicU64>,
    keeper: Option<tokio::task::JoinHandle<()>>,
}

impl Slow {
    fn spec_of(url: &str, nonce: u64) -> Value {
        json!({"calls": [{"url": url, "timeoutMs": 32000}], "nonce": nonce})
    }

    /// Turn the slow calls on; wait until the number in flight is steady.
    async fn on(&mut self) {
        self.api.slow.store(true, Ordering::SeqCst);
        let (things, count, url, nonce) = (self.things.clone(), self.count, self.url.clone(), self.nonce.clone());
        self.keeper = Some(tokio::spawn(async move {
            // Every slow Thing patched every 5 s: each is queued again
            // before its 30 s reconcile ends.
            loop {
                let spec = Slow::spec_of(&url, nonce.fetch_add(1, Ordering::SeqCst) + 1);
                for i in 0..count {
                    let patch = json!({"spec": spec});
                    let _ = things.patch(&format!("s-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await;
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }));
        let started = Instant::now();
        let (mut last, mut since) = (0, Instant::now());
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.api.held.load(Ordering::SeqCst);
            if now != last {
                (last, since) = (now, Instant::now());
            }
            if (now > 0 && since.elapsed() >= Duration::from_secs(2)) || started.elapsed() > Duration::from_secs(45) {
                return;
            }
        }
    }

    /// Turn them off: every held call answered now, and the slow
    /// Reconciler idle (nothing held, no request for 1.5 s).
    async fn off(&mut self) {
        if let Some(k) = self.keeper.take() {
            k.abort();
        }
        self.api.slow.store(false, Ordering::SeqCst);
        self.api.release.send_modify(|n| *n += 1);
        let started = Instant::now();
        let (mut last, mut since) = (u64::MAX, Instant::now());
        while started.elapsed() < Duration::from_secs(90) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let received = self.api.received.load(Ordering::SeqCst);
            if received != last {
                (last, since) = (received, Instant::now());
            }
            if self.api.held.load(Ordering::SeqCst) == 0 && since.elapsed() >= Duration::from_millis(1500) {
                return;
            }
        }
        eprintln!("bench: the slow Reconciler did not go idle within 90 s");
    }
}

// ------------------------------------------------------------ rounds and phases

/// What one phase gathered.
#[derive(Default)]
struct Phase {
    latencies: Vec<Duration>,
    /// Reconciles not seen within [`SAMPLE_TIMEOUT`] (counted at it).
    unseen: usize,
    /// Samples, every 100 ms: slow calls the slow API held.
    held: Vec<usize>,
    /// The gate's calls in flight.
    gate: Vec<usize>,
    /// The process's threads.
    threads: Vec<usize>,
    /// Per round: (reconciles, p99).
    rounds: Vec<(usize, Duration)>,
    /// Deltas of the neighbour's metrics (see [`Waits`]).
    waits: Waits,
    /// Time the phase's rounds took.
    spent: Duration,
    /// Whether rounds were skipped or cut short by `--beside-limit`.
    stopped: bool,
}

impl Phase {
    fn p(&self, q: f64) -> Duration {
        quantile(&self.latencies, q)
    }

    fn spread(v: &[usize]) -> (usize, f64, usize) {
        if v.is_empty() {
            return (0, 0.0, 0);
        }
        let min = *v.iter().min().unwrap();
        let max = *v.iter().max().unwrap();
        (min, v.iter().sum::<usize>() as f64 / v.len() as f64, max)
    }
}

/// Where the neighbour's time went, from the host's metrics: seconds
/// waited per host limit, on its own CPU budget, and the guest calls' and
/// egress calls' totals and counts.
#[derive(Default, Clone, Debug)]
struct Waits {
    host_calls: f64,
    host_memory: f64,
    host_cpu: f64,
    own_cpu: f64,
    guest_sum: f64,
    guest_count: f64,
    egress_sum: f64,
    egress_count: f64,
}

impl Waits {
    fn of(metrics: &Metrics, controller: &str) -> Waits {
        let text = metrics.encode().unwrap_or_default();
        let label = format!("controller=\"{controller}\"");
        let sum = |metric: &str, extra: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&label) && l.contains(extra))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        Waits {
            host_calls: sum("operon_host_limited_seconds_total", "limit=\"calls\""),
            host_memory: sum("operon_host_limited_seconds_total", "limit=\"memory\""),
            host_cpu: sum("operon_host_limited_seconds_total", "limit=\"cpu\""),
            own_cpu: sum("operon_guest_throttled_seconds_total", ""),
            guest_sum: sum("operon_guest_call_seconds_sum", ""),
            guest_count: sum("operon_guest_call_seconds_count", ""),
            egress_sum: sum("operon_egress_request_seconds_sum", ""),
            egress_count: sum("operon_egress_request_seconds_count", ""),
        }
    }

    fn add_delta(&mut self, before: &Waits, after: &Waits) {
        self.host_calls += after.host_calls - before.host_calls;
        self.host_memory += after.host_memory - before.host_memory;
        self.host_cpu += after.host_cpu - before.host_cpu;
        self.own_cpu += after.own_cpu - before.own_cpu;
        self.guest_sum += after.guest_sum - before.guest_sum;
        self.guest_count += after.guest_count - before.guest_count;
        self.egress_sum += after.egress_sum - before.egress_sum;
        self.egress_count += after.egress_count - before.egress_count;
    }
}

/// `n` neighbour reconciles one after another (fewer if `limit` passes),
/// sampling the slow calls held, the gate and the threads meanwhile.
async fn round(
    neighbour: &mut Neighbour,
    n: usize,
    limit: Duration,
    api: &Arc<SlowApi>,
    host: &Host,
    controller: &str,
    phase: &mut Phase,
) {
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (sampling, api, gate) = (sampling.clone(), api.clone(), host.runtime.gate().clone());
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while sampling.load(Ordering::SeqCst) {
                samples.push((api.held.load(Ordering::SeqCst), gate.usage().calls_in_flight, support::threads()));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            samples
        })
    };
    let before = Waits::of(host.manager.metrics(), controller);
    let started = Instant::now();
    let mut here = Vec::new();
    for _ in 0..n {
        if started.elapsed() > limit {
            phase.stopped = true;
            break;
        }
        match neighbour.reconcile().await {
            Some(d) => here.push(d),
            None => {
                phase.unseen += 1;
                here.push(SAMPLE_TIMEOUT);
            }
        }
    }
    let after = Waits::of(host.manager.metrics(), controller);
    sampling.store(false, Ordering::SeqCst);
    for (held, gate, threads) in sampler.await.unwrap() {
        phase.held.push(held);
        phase.gate.push(gate);
        phase.threads.push(threads);
    }
    phase.waits.add_delta(&before, &after);
    phase.rounds.push((here.len(), quantile(&here, 0.99)));
    phase.latencies.extend(here);
}

/// One scenario: its host, its Reconcilers and Things, warm-up, rounds.
async fn scenario(
    plane: &operon_envtest::ControlPlane,
    client: &kube::Client,
    apis: &Apis,
    s: &Scenario,
    slow_count: usize,
) -> (Phase, Phase) {
    let ns = format!("egress-{}", s.name);
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let host = Host::start(plane, client, &ns, s).await;

    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some("egress-probe".into()), ..Default::default() },
        binary_data: Some([("module.wasm".to_string(), ByteString(support::guest("egress-probe")))].into()),
        ..Default::default()
    };
    apply(&Api::<ConfigMap>::namespaced(client.clone(), &ns), "egress-probe", serde_json::to_value(&cm).unwrap()).await;
    let reconcilers: Api<reconciler::crd::Reconciler> = Api::namespaced(client.clone(), &ns);
    let reconciler = |name: &str, who: &str, port: u16, limits: Value| {
        json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name, "labels": {"operon.dev/bench": ns}},
            "spec": {"module": {"configMap": {"name": "egress-probe"}},
                "grants": {"for": [{"group": "example.operon.dev", "kind": "Thing"}],
                    "egress": [{"scheme": "http", "host": "127.0.0.1", "port": port}]},
                "selector": {"matchLabels": {"who": who}},
                "limits": limits}})
    };
    apply(&reconcilers, "neighbour", reconciler("neighbour", "neighbour", apis.fast, json!({}))).await;
    apply(
        &reconcilers,
        "slow",
        reconciler("slow", "slow", apis.slow, json!({"timeout": "35s", "maxConcurrentReconciles": s.slow_workers})),
    )
    .await;

    let api = things(client, &ns);
    let seen = Seen::watch(api.clone());
    let mut neighbour = Neighbour { things: api.clone(), seen, fast: apis.fast, next: 0 };
    let mut slow = Slow {
        things: api.clone(),
        count: slow_count,
        url: format!("http://127.0.0.1:{}/slow", apis.slow),
        api: apis.state.clone(),
        nonce: Arc::default(),
        keeper: None,
    };
    // The slow API answers at once while the slow Things are first
    // reconciled: the slow Reconciler's budget learns its calls' cost.
    apis.state.slow.store(false, Ordering::SeqCst);
    let thing = |name: String, who: &str, spec: Value| {
        json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": name, "labels": {"who": who}}, "spec": spec})
    };
    for i in 0..NEIGHBOURS {
        apply(&api, &format!("n-{i}"), thing(format!("n-{i}"), "neighbour", neighbour.spec("init"))).await;
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    for i in 0..NEIGHBOURS {
        neighbour.seen.wait(&format!("n-{i}"), "init", deadline).await.expect("the neighbour's first reconciles");
    }
    // One slow Thing first, then the others: until one call has returned,
    // the slow Reconciler's budget charges each admission its deadline
    // (35 s), and the workers it turns away sleep the whole debt (132 s at
    // 250m), cut short only by the reconcile's 60 s timeout.
    let slow_done = |n: usize| {
        let api = api.clone();
        async move {
            loop {
                let list = api.list(&ListParams::default().labels("who=slow")).await.unwrap();
                let done = list.items.iter().filter(|t| t.data.pointer("/status/count").is_some()).count();
                if done >= n {
                    return;
                }
                assert!(Instant::now() < deadline, "the slow Things' first reconciles: {done} of {n}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    for (from, to) in [(0, 1), (1, slow_count)] {
        for i in from..to {
            apply(&api, &format!("s-{i}"), thing(format!("s-{i}"), "slow", Slow::spec_of(&slow.url, 0))).await;
        }
        slow_done(to).await;
    }
    slow.off().await;

    let controller = format!("{ns}/neighbour");
    let rounds = arg("--rounds", 10).max(1);
    let per_round = (arg("--reconciles", 1000) / rounds).max(1);
    let beside_limit = Duration::from_secs(arg("--beside-limit", 150) as u64);
    let unlimited = Duration::from_secs(3600);
    // Warm-up: thrown away.
    let mut waste = Phase::default();
    round(&mut neighbour, 20, unlimited, &apis.state, &host, &controller, &mut waste).await;
    slow.on().await;
    round(&mut neighbour, 10, Duration::from_secs(35), &apis.state, &host, &controller, &mut waste).await;
    slow.off().await;

    let (mut alone, mut beside) = (Phase::default(), Phase::default());
    for r in 0..rounds {
        // ABBA: alone, beside, beside, alone, ...
        let order = if r % 2 == 0 { [false, true] } else { [true, false] };
        for with_slow in order {
            if with_slow {
                // The rest of the phase's time: once spent, the phase stops
                // (the neighbour waits behind the slow calls).
                let Some(left) = beside_limit.checked_sub(beside.spent).filter(|l| !l.is_zero()) else {
                    beside.stopped = true;
                    continue;
                };
                slow.on().await;
                let started = Instant::now();
                round(&mut neighbour, per_round, left, &apis.state, &host, &controller, &mut beside).await;
                beside.spent += started.elapsed();
                slow.off().await;
            } else {
                round(&mut neighbour, per_round, unlimited, &apis.state, &host, &controller, &mut alone).await;
            }
        }
        eprintln!(
            "bench: {} round {}/{rounds}: alone p99 {:.1} ms, beside p99 {:.1} ms",
            s.name,
            r + 1,
            ms(alone.rounds.last().map_or(Duration::ZERO, |r| r.1)),
            ms(beside.rounds.last().map_or(Duration::ZERO, |r| r.1))
        );
    }
    neighbour.seen.stop();
    host.stop().await;
    (alone, beside)
}

fn print(s: &Scenario, slow_count: usize, alone: &Phase, beside: &Phase) -> Value {
    println!();
    println!("scenario `{}`: {}; {slow_count} slow Things", s.name, s.describe());
    println!(
        "  {:<26} {:>10} {:>9} {:>9} {:>9}   {:<22} {:>10} {:>8}",
        "phase", "reconciles", "p50 ms", "p99 ms", "max ms", "slow calls held", "gate calls", "threads"
    );
    let row = |name: &str, p: &Phase| {
        let (hmin, hmean, hmax) = Phase::spread(&p.held);
        let (_, gmean, gmax) = Phase::spread(&p.gate);
        let (_, _, tmax) = Phase::spread(&p.threads);
        let mut unseen = if p.unseen > 0 { format!(" ({} unseen)", p.unseen) } else { String::new() };
        if p.stopped {
            unseen.push('*');
        }
        let gate = if s.calls == 0 { "-".to_string() } else { format!("{gmean:.1}/{gmax}") };
        println!(
            "  {:<26} {:>10} {:>9.1} {:>9.1} {:>9.1}   {:<22} {:>10} {:>8}",
            name,
            format!("{}{unseen}", p.latencies.len()),
            ms(p.p(0.5)),
            ms(p.p(0.99)),
            ms(p.p(1.0)),
            format!("{hmin}/{hmean:.1}/{hmax}"),
            gate,
            tmax
        );
    };
    row("(a) alone", alone);
    row("(b) beside the slow calls", beside);
    let r50 = beside.p(0.5).as_secs_f64() / alone.p(0.5).as_secs_f64();
    let r99 = beside.p(0.99).as_secs_f64() / alone.p(0.99).as_secs_f64();
    let verdict = if r99 <= TARGET { "PASS" } else { "MISS" };
    println!(
        "  {:<26} {:>10} {:>8.2}x {:>8.2}x {:>9}   target: p99 ratio <= {TARGET:.2}x: {verdict}",
        "(b)/(a)", "", r50, r99, ""
    );
    println!("  slow calls held: min/mean/max of samples every 100 ms; gate calls: mean/max in flight; threads: max");
    if beside.stopped {
        println!("  * stopped by --beside-limit after {:.0} s of (b)", beside.spent.as_secs_f64());
    }
    let per_round =
        |p: &Phase| p.rounds.iter().map(|(n, d)| format!("{:.1} ({n})", ms(*d))).collect::<Vec<_>>().join(", ");
    println!("  p99 ms per round (reconciles): alone {}; beside {}", per_round(alone), per_round(beside));
    for (name, p) in [("alone", alone), ("beside", beside)] {
        let w = &p.waits;
        let mean = |sum: f64, count: f64| if count > 0.0 { sum / count * 1e3 } else { 0.0 };
        println!(
            "  the neighbour {name}: waited {:.1} s for host call slots, {:.1} s for host memory, {:.1} s for host CPU, \
             {:.1} s for its CPU budget; guest call mean {:.2} ms ({} calls), egress call mean {:.2} ms",
            w.host_calls,
            w.host_memory,
            w.host_cpu,
            w.own_cpu,
            mean(w.guest_sum, w.guest_count),
            w.guest_count,
            mean(w.egress_sum, w.egress_count),
        );
    }
    let phase = |p: &Phase| {
        let (hmin, hmean, hmax) = Phase::spread(&p.held);
        json!({"reconciles": p.latencies.len(), "unseen": p.unseen,
            "p50Ms": ms(p.p(0.5)), "p99Ms": ms(p.p(0.99)), "maxMs": ms(p.p(1.0)),
            "slowHeld": {"min": hmin, "mean": hmean, "max": hmax},
            "gateCallsMean": Phase::spread(&p.gate).1, "threadsMax": Phase::spread(&p.threads).2,
            "roundsP99Ms": p.rounds.iter().map(|(_, d)| ms(*d)).collect::<Vec<_>>(),
            "stopped": p.stopped, "spentS": p.spent.as_secs_f64(),
            "waits": {"hostCallsS": p.waits.host_calls, "hostMemoryS": p.waits.host_memory,
                "hostCpuS": p.waits.host_cpu, "ownCpuS": p.waits.own_cpu,
                "guestCallMeanMs": if p.waits.guest_count > 0.0 { p.waits.guest_sum / p.waits.guest_count * 1e3 } else { 0.0 },
                "egressCallMeanMs": if p.waits.egress_count > 0.0 { p.waits.egress_sum / p.waits.egress_count * 1e3 } else { 0.0 }}})
    };
    json!({"scenario": s.name, "maxGuestCalls": s.calls, "maxGuestMemoryTotal": s.memory,
        "slowWorkers": s.slow_workers, "slowThings": slow_count,
        "alone": phase(alone), "beside": phase(beside), "p50Ratio": r50, "p99Ratio": r99, "target": TARGET})
}

#[tokio::main]
async fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let slow_count = arg("--slow", 20);
    let scenarios: Vec<Scenario> =
        list("--scenarios", &["default", "sized", "open"]).iter().map(|n| Scenario::of(n, slow_count)).collect();
    let load_before = support::load();
    let plane = operon_envtest::ControlPlane::start(
        operon_envtest::Options::default()
            .crd(support::kind_crd("example.operon.dev", "Thing", "things"))
            .crd(<reconciler::crd::Reconciler as kube::CustomResourceExt>::crd())
            .crd(<reconciler::crd::ClusterReconciler as kube::CustomResourceExt>::crd()),
    )
    .expect("control plane");
    let client = plane.client().await;
    let apis = Apis::start().await;
    println!(
        "egress: a neighbour's reconcile latency alone and beside {slow_count} reconciles each waiting {} s on an \
         outside API; {} reconciles per phase in {} rounds (ABBA), (b) at most {} s; {}",
        SLOW_FOR.as_secs(),
        arg("--reconciles", 1000),
        arg("--rounds", 10),
        arg("--beside-limit", 150),
        load_before
    );
    let mut rows = Vec::new();
    for s in &scenarios {
        let started = Instant::now();
        let (alone, beside) = scenario(&plane, &client, &apis, s, slow_count).await;
        rows.push(print(s, slow_count, &alone, &beside));
        println!("  ({:.0} s)", started.elapsed().as_secs_f64());
    }
    println!();
    println!("{} at the end", support::load());
    let dir = support::root().join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("egress.json"), serde_json::to_string_pretty(&rows).unwrap()).unwrap();
    println!("written: target/bench/egress.json");
    drop(plane);
    std::process::exit(0);
}
