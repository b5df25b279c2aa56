//! Manager benchmark: Operon's in-process `Manager` running the WebApp wasm
//! guest, beside the same logic as a native kube-rs controller, against one
//! real control plane (etcd, kube-apiserver, and kube-controller-manager's
//! garbage collector; no deployment controller, no kubelet) in the same run.
//!
//! Run with `cargo xtask bench manager` (builds the guest and checks the
//! control plane binaries first), or `cargo bench -p operon --bench manager`.
//! Options after `--`: `--parents N` (default 1000), `--workers N` (4),
//! `--samples N` (200), `--rounds N` (2: the order is operon, native,
//! native, operon, so that drift over the run weighs on both alike). Prints figures; asserts nothing about time.
//!
//! # What is measured
//!
//! 1. **Convergence.** N WebApps (about 4 KB of JSON each) are created at
//!    once, 32 creates in flight, in a namespace of their own. The clock runs
//!    from the first create until the benchmark's own watches have seen every
//!    parent with a Deployment, a Service and a status whose
//!    `observedGeneration` equals its `generation` and whose `Ready`
//!    condition was computed with the Deployment present (False: nothing
//!    makes the Deployments ready): the steady state. Both
//!    controllers run with the same number of workers and do the same API
//!    writes per parent: the finalizer (server-side apply, its own field
//!    manager), the two children (server-side apply, skipped when the last
//!    apply is known to be current, as Operon's applier does), the status
//!    (server-side apply on the status subresource, skipped when the cached
//!    status already holds it) and the guest's events (events.k8s.io). The
//!    native controller is `kube::runtime::Controller` with reflector stores
//!    for the WebApps and the three owned kinds (managedFields stripped, as
//!    Operon's cache does), the same parent predicate as Operon's (generation,
//!    labels, annotations, finalizers, deletionTimestamp), and calls
//!    `operon_sdk::run::reconcile::<WebAppReconciler>` inline with a
//!    `FakeCluster` seeded with the cached children.
//! 2. **Event → reconcile start**, on an idle system: one WebApp's
//!    `spec.replicas` is patched at a time. Timestamps: the patch's response
//!    arriving; the benchmark's own watch on WebApps seeing the new
//!    generation (a second watch connection, served by the same API server
//!    at about the moment the controller's is); the reconcile starting for
//!    that object, observed by a `tracing` layer at the creation of the
//!    controller's per-reconcile span (Operon's `reconcile` span, opened when
//!    a worker takes the key; kube-rs's `reconciling object` span); the
//!    Deployment with the new replicas seen by the benchmark's watch.
//!    Operon's `workqueue_queue_duration_seconds` histogram (queue add →
//!    worker get) is reported too, as bucket bounds.
//! 3. **Memory**: VmRSS/VmHWM of this process (from `/proc/self/status`)
//!    before Operon's manager starts and once its cache holds the N parents
//!    and their 2N children. The process also holds the benchmark's own
//!    client and watches (which keep names only), so the per-object figure
//!    is an upper bound for the host.

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, watcher};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Module, Runtime};
use operon_envtest::{ControlPlane, Options};
use operon_sdk::raw;
use operon_sdk::testing::FakeCluster;
use rust_webapp::WebAppReconciler;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

const GROUP: &str = "example.operon.dev";
const VERSION: &str = "v1alpha1";
const FINALIZER: &str = rust_webapp::FINALIZER;
/// Creates in flight while the parents are created.
const CREATE_CONCURRENCY: usize = 32;
/// Targets from the design.
const TARGET_RATIO: f64 = 1.2;
const TARGET_P99: Duration = Duration::from_millis(5);

struct Args {
    parents: usize,
    workers: usize,
    samples: usize,
    rounds: usize,
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let started = Instant::now();
    eprintln!("bench: starting a control plane (etcd, kube-apiserver, kube-controller-manager)");
    let plane = ControlPlane::start(Options::with_controller_manager().crd(webapp_crd()?))?;
    eprintln!("bench: control plane up in {:.1?}", started.elapsed());

    let starts = ReconcileStarts::install();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = rt.block_on(run(&plane, &args, starts));
    if result.is_err() {
        eprintln!("{}", plane.logs(20));
    }
    drop(rt);
    drop(plane);
    result?;
    println!("total time {:.0?}", started.elapsed());
    Ok(())
}

fn parse_args() -> Result<Args> {
    let mut args = Args { parents: 1000, workers: 4, samples: 200, rounds: 2 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name}: not a number"))
        };
        match arg.as_str() {
            "--parents" => args.parents = value("--parents")?,
            "--workers" => args.workers = value("--workers")?,
            "--samples" => args.samples = value("--samples")?,
            "--rounds" => args.rounds = value("--rounds")?.max(1),
            // cargo bench passes `--bench` to every bench program.
            "--bench" => {}
            other => bail!("unknown argument {other}; use --parents N --workers N --samples N --rounds N"),
        }
    }
    args.samples = args.samples.min(args.parents);
    Ok(args)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Operon,
    Native,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Operon => "operon (wasm guest)",
            Kind::Native => "native kube-rs",
        }
    }
}

/// What one convergence run measured.
struct Convergence {
    kind: Kind,
    created: Duration,
    converged: Duration,
    reconciles: u64,
    writes: Writes,
}

#[derive(Default, Debug, Clone)]
struct Writes {
    finalizer: u64,
    apply: u64,
    status: u64,
    events: u64,
}

async fn run(plane: &ControlPlane, args: &Args, starts: Arc<ReconcileStarts>) -> Result<()> {
    let client = plane.client().await;
    let bytes = std::fs::read(guests_dir().join("rust-webapp.wasm"))
        .context("target/guests/rust-webapp.wasm; build it with `cargo xtask guests rust-webapp`")?;
    let wasm = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() })?;
    let module = wasm.load(&bytes, Limits::default())?;

    warm_up(&client, (args.parents / 10).max(20)).await?;

    let order: Vec<Kind> = (0..args.rounds)
        .flat_map(|r| if r % 2 == 0 { [Kind::Operon, Kind::Native] } else { [Kind::Native, Kind::Operon] })
        .collect();
    let mut convergences = Vec::new();
    let mut latencies = Vec::new();
    let mut memory = None;
    for (i, &kind) in order.iter().enumerate() {
        let first_of_kind = !order[..i].contains(&kind);
        let namespace = operon_envtest::create_namespace(
            &client,
            &format!("bench-{}", if kind == Kind::Operon { "operon" } else { "native" }),
        )
        .await?;
        let tracker = Tracker::start(client.clone(), &namespace).await;
        let rss_before = first_of_kind.then(rss);
        eprintln!("bench: {} in namespace {namespace}", kind.label());
        let running = Running::start(kind, plane.client().await, &namespace, module.clone(), args.workers).await?;

        let mut convergence = converge(&client, &namespace, args.parents, &tracker).await?;
        convergence.kind = kind;
        convergence.reconciles = running.reconciles();
        convergence.writes = running.writes(&client, &namespace).await?;
        eprintln!(
            "bench: {} converged in {:.1?} ({} reconciles, writes {:?})",
            kind.label(),
            convergence.converged,
            convergence.reconciles,
            convergence.writes
        );
        convergences.push(convergence);
        if kind == Kind::Operon && first_of_kind {
            memory = Some((rss_before.unwrap_or_default(), rss()));
        }
        if first_of_kind {
            // Let trailing events (children's watch events, status writes) settle.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let queue_before = running.queue_histogram();
            let samples = latency(&client, &namespace, args.samples, &tracker, &starts).await?;
            let queue =
                running.queue_histogram().map(|after| histogram_delta(&after, &queue_before.unwrap_or_default()));
            latencies.push((kind, samples, queue));
        }
        running.stop().await?;
        tracker.stop();
    }

    report(args, &convergences, &latencies, memory);
    Ok(())
}

// ---------------------------------------------------------------------------
// 1. Convergence

async fn converge(client: &kube::Client, namespace: &str, n: usize, tracker: &Tracker) -> Result<Convergence> {
    let api = webapps(client, namespace);
    let started = Instant::now();
    create_webapps(&api, n).await?;
    let created = started.elapsed();
    let deadline = Duration::from_secs(600);
    tracker
        .wait(deadline, |s| {
            (s.deployments.len() >= n && s.services.len() >= n && s.webapps.values().filter(|w| w.done()).count() >= n)
                .then_some(())
        })
        .await
        .context("waiting for every WebApp to have children and a status")?;
    Ok(Convergence {
        kind: Kind::Operon,
        created,
        converged: started.elapsed(),
        reconciles: 0,
        writes: Writes::default(),
    })
}

/// Create WebApps `0..n`, `CREATE_CONCURRENCY` at a time.
async fn create_webapps(api: &Api<DynamicObject>, n: usize) -> Result<()> {
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let parent: DynamicObject = serde_json::from_value(webapp(&name_of(i)))?;
                api.create(&PostParams::default(), &parent).await.map(drop).context("creating a WebApp")
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<()>()
        .await
}

/// Create some WebApps with no controller running, so that the first
/// measured run does not pay for the API server's and etcd's cold paths.
async fn warm_up(client: &kube::Client, n: usize) -> Result<()> {
    let namespace = operon_envtest::create_namespace(client, "bench-warm-up").await?;
    let api = webapps(client, &namespace);
    create_webapps(&api, n).await?;
    api.list(&ListParams::default()).await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. Event → reconcile start

/// One controller's latency samples, and Operon's queue-wait histogram
/// (bucket upper bound, cumulative count) over the same phase.
type Latencies = (Kind, Vec<Sample>, Option<Vec<(f64, u64)>>);

/// One patched WebApp's timestamps, relative to the patch's response.
struct Sample {
    /// Patch sent → its response.
    response: f64,
    /// Patch response → the benchmark's watch sees the new generation.
    watch: f64,
    /// Patch response → the controller starts reconciling it.
    start: f64,
    /// Patch response → the benchmark's watch sees the updated Deployment.
    child: f64,
}

async fn latency(
    client: &kube::Client,
    namespace: &str,
    samples: usize,
    tracker: &Tracker,
    starts: &ReconcileStarts,
) -> Result<Vec<Sample>> {
    let api = webapps(client, namespace);
    let mut out = Vec::with_capacity(samples);
    starts.arm(true);
    for i in 0..samples {
        let name = name_of(i);
        let replicas = 2;
        let sent = Instant::now();
        let patched =
            api.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": replicas}}))).await?;
        let returned = Instant::now();
        let generation = patched.metadata.generation.context("a WebApp without a generation")?;
        let (n, g) = (name.clone(), generation);
        let (watch_seen, child_seen) = tracker
            .wait(Duration::from_secs(30), move |s| {
                let w = s.first_seen.get(&format!("webapp/{n}/{g}"))?;
                let d = s.first_seen.get(&format!("deployment/{n}/{replicas}"))?;
                let settled = s.webapps.get(&n).is_some_and(|w| w.observed_generation == Some(g));
                settled.then_some((*w, *d))
            })
            .await
            .with_context(|| format!("waiting for {name} to follow its patch"))?;
        let start = starts.first_after(&name, sent).context("no reconcile start was recorded")?;
        let ms = |t: Instant| signed_ms(t, returned);
        out.push(Sample {
            response: ms(returned) - ms(sent),
            watch: ms(watch_seen),
            start: ms(start),
            child: ms(child_seen),
        });
        // Idle between samples.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    starts.arm(false);
    Ok(out)
}

fn signed_ms(t: Instant, from: Instant) -> f64 {
    if t >= from { (t - from).as_secs_f64() * 1e3 } else { -((from - t).as_secs_f64() * 1e3) }
}

/// Records when controllers open their per-reconcile span, by object.
#[derive(Default)]
struct ReconcileStarts {
    armed: AtomicBool,
    seen: Mutex<Vec<(String, Instant)>>,
}

impl ReconcileStarts {
    fn install() -> Arc<ReconcileStarts> {
        let starts = Arc::new(ReconcileStarts::default());
        let subscriber = tracing_subscriber::registry().with(StartLayer(starts.clone())).with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
        );
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
        starts
    }

    fn arm(&self, on: bool) {
        self.seen.lock().unwrap().clear();
        self.armed.store(on, Ordering::SeqCst);
    }

    /// The first reconcile start of `name` at or after `after`. Operon's
    /// span names the object `namespace/name`, kube-rs's
    /// `WebApp.v1alpha1.example.operon.dev/name.namespace`.
    fn first_after(&self, name: &str, after: Instant) -> Option<Instant> {
        let needle = format!("/{name}");
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(o, t)| *t >= after && (o.ends_with(&needle) || o.contains(&format!("{needle}."))))
            .map(|(_, t)| *t)
            .min()
    }
}

use tracing_subscriber::Layer as _;

struct StartLayer(Arc<ReconcileStarts>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StartLayer {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if !self.0.armed.load(Ordering::Relaxed) {
            return;
        }
        let field = match attrs.metadata().name() {
            "reconcile" => "object",
            "reconciling object" => "object.ref",
            _ => return,
        };
        let now = Instant::now();
        let mut visitor = FieldValue { field, value: None };
        attrs.record(&mut visitor);
        if let Some(object) = visitor.value {
            self.0.seen.lock().unwrap().push((object, now));
        }
    }
}

struct FieldValue {
    field: &'static str,
    value: Option<String>,
}

impl tracing::field::Visit for FieldValue {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.field {
            self.value = Some(format!("{value:?}"));
        }
    }
}

// ---------------------------------------------------------------------------
// The controllers under test

enum Running {
    Operon {
        metrics: Arc<operon::metrics::Metrics>,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<Result<(), manager::Error>>,
    },
    Native {
        ctx: Arc<Native>,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    },
}

impl Running {
    async fn start(
        kind: Kind,
        client: kube::Client,
        namespace: &str,
        module: Module,
        workers: usize,
    ) -> Result<Running> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = match kind {
            Kind::Operon => {
                let mut mgr = Manager::new(
                    client,
                    manager::Config {
                        controller: operon::controller::Config {
                            namespace: Some(namespace.to_string()),
                            max_concurrent_reconciles: workers,
                            ..Default::default()
                        },
                        server_addr: None,
                        ..Default::default()
                    },
                );
                let controller = mgr.add(module);
                let metrics = mgr.metrics().clone();
                controller.wait_synced(Duration::from_secs(30)).await?;
                let task = tokio::spawn(mgr.run(async move {
                    let _ = stopped.await;
                }));
                Running::Operon { metrics, stop, task }
            }
            Kind::Native => {
                let (ctx, task) = Native::start(client, namespace, workers, async move {
                    let _ = stopped.await;
                })
                .await?;
                Running::Native { ctx, stop, task }
            }
        };
        // Both start from an empty namespace: give the workers a moment to be up.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(running)
    }

    fn reconciles(&self) -> u64 {
        match self {
            Running::Operon { metrics, .. } => ["success", "error", "requeue", "requeue_after"]
                .iter()
                .map(|r| metrics.reconcile_total.with_label_values(&["webapp", r]).get())
                .sum(),
            Running::Native { ctx, .. } => ctx.reconciles.load(Ordering::Relaxed),
        }
    }

    /// Writes made: children and status from the controllers' own counts,
    /// finalizers and events from the API server (finalizer field manager
    /// in managedFields, events listed).
    async fn writes(&self, client: &kube::Client, namespace: &str) -> Result<Writes> {
        let events = Api::<K8sEvent>::namespaced(client.clone(), namespace).list(&ListParams::default()).await?;
        let events: u64 = events.items.iter().map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u64)).sum();
        Ok(match self {
            Running::Operon { metrics, .. } => {
                let apply = |op: &str| metrics.apply_total.with_label_values(&["webapp", op]).get();
                let parents = webapps(client, namespace).list(&ListParams::default()).await?;
                let finalizer = parents
                    .items
                    .iter()
                    .filter(|p| p.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == FINALIZER)))
                    .count() as u64;
                Writes { finalizer, apply: apply("apply"), status: apply("status"), events }
            }
            Running::Native { ctx, .. } => Writes {
                finalizer: ctx.finalizer_writes.load(Ordering::Relaxed),
                apply: ctx.apply_writes.load(Ordering::Relaxed),
                status: ctx.status_writes.load(Ordering::Relaxed),
                events,
            },
        })
    }

    /// Operon's `workqueue_queue_duration_seconds` buckets (upper bound,
    /// cumulative count), from the metrics text.
    fn queue_histogram(&self) -> Option<Vec<(f64, u64)>> {
        let Running::Operon { metrics, .. } = self else { return None };
        let text = metrics.encode().ok()?;
        let buckets = text
            .lines()
            .filter(|l| {
                l.starts_with("workqueue_queue_duration_seconds_bucket{") && l.contains("controller=\"webapp\"")
            })
            .filter_map(|l| {
                let le = l.split("le=\"").nth(1)?.split('"').next()?;
                let count = l.rsplit(' ').next()?.parse().ok()?;
                Some((if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? }, count))
            })
            .collect();
        Some(buckets)
    }

    async fn stop(self) -> Result<()> {
        match self {
            Running::Operon { stop, task, .. } => {
                let _ = stop.send(());
                task.await??;
            }
            Running::Native { stop, task, .. } => {
                let _ = stop.send(());
                task.await?;
            }
        }
        Ok(())
    }
}

/// The native controller's shared state.
struct Native {
    client: kube::Client,
    namespace: String,
    webapp: ApiResource,
    deployment: ApiResource,
    service: ApiResource,
    ingress: ApiResource,
    deployments: Store<DynamicObject>,
    services: Store<DynamicObject>,
    ingresses: Store<DynamicObject>,
    recorder: Recorder,
    /// As Operon's applier: hash of the last applied object and the
    /// resourceVersion the API server answered, per child.
    applied: Mutex<HashMap<(String, String), (u64, String)>>,
    reconciles: AtomicU64,
    finalizer_writes: AtomicU64,
    apply_writes: AtomicU64,
    status_writes: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
enum NativeError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("guest logic: {0}")]
    Guest(String),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

const FIELD_MANAGER: &str = "native/webapp";

impl Native {
    async fn start(
        client: kube::Client,
        namespace: &str,
        workers: usize,
        shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ) -> Result<(Arc<Native>, tokio::task::JoinHandle<()>)> {
        let ar = |group: &str, version: &str, kind: &str| {
            ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
        };
        let (webapp, deployment, service, ingress) = (
            ar(GROUP, VERSION, "WebApp"),
            ar("apps", "v1", "Deployment"),
            ar("", "v1", "Service"),
            ar("networking.k8s.io", "v1", "Ingress"),
        );
        let reflect = |resource: &ApiResource| {
            let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
            let store = writer.as_reader();
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource);
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(|o: &mut DynamicObject| o.metadata.managed_fields = None)
                .reflect(writer)
                .touched_objects();
            (store, stream)
        };
        let (parents, parent_stream) = reflect(&webapp);
        let (deployments, deployment_stream) = reflect(&deployment);
        let (services, service_stream) = reflect(&service);
        let (ingresses, ingress_stream) = reflect(&ingress);
        let ctx = Arc::new(Native {
            recorder: Recorder::new(client.clone(), Reporter { controller: FIELD_MANAGER.into(), instance: None }),
            client,
            namespace: namespace.to_string(),
            webapp: webapp.clone(),
            deployment: deployment.clone(),
            service: service.clone(),
            ingress: ingress.clone(),
            deployments: deployments.clone(),
            services: services.clone(),
            ingresses: ingresses.clone(),
            applied: Mutex::new(HashMap::new()),
            reconciles: AtomicU64::new(0),
            finalizer_writes: AtomicU64::new(0),
            apply_writes: AtomicU64::new(0),
            status_writes: AtomicU64::new(0),
        });
        let controller = Controller::for_stream_with(
            parent_stream.predicate_filter(parent_predicate, PredicateConfig::default()),
            parents.clone(),
            webapp,
        )
        .owns_stream_with(deployment_stream, deployment)
        .owns_stream_with(service_stream, service)
        .owns_stream_with(ingress_stream, ingress)
        .with_config(controller::Config::default().concurrency(workers as u16))
        .graceful_shutdown_on(shutdown);
        let task =
            tokio::spawn(controller.run(native_reconcile, native_error_policy, ctx.clone()).for_each(|_| async {}));
        for store in [&parents, &deployments, &services, &ingresses] {
            tokio::time::timeout(Duration::from_secs(30), store.wait_until_ready()).await??;
        }
        Ok((ctx, task))
    }

    fn owned(
        &self,
        store: &Store<DynamicObject>,
        resource: &ApiResource,
        name: &str,
        uid: &str,
    ) -> Option<Arc<DynamicObject>> {
        store.get(&ObjectRef::new_with(name, resource.clone()).within(&self.namespace)).filter(|c| {
            c.metadata.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid)
        })
    }

    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, resource)
    }
}

/// Operon's default predicate for parents: generation, labels,
/// annotations, finalizers, deletionTimestamp.
fn parent_predicate(o: &DynamicObject) -> Option<u64> {
    let m = &o.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (m.generation, &m.labels, &m.annotations, &m.finalizers, m.deletion_timestamp.as_ref().map(|t| t.0.to_string()))
        .hash(&mut h);
    Some(h.finish())
}

fn native_error_policy(_: Arc<DynamicObject>, error: &NativeError, _: Arc<Native>) -> Action {
    tracing::warn!(%error, "native reconcile failed");
    Action::requeue(Duration::from_millis(50))
}

/// The native reconcile: what Operon's controller does around the guest
/// call, with the guest's logic called directly.
async fn native_reconcile(parent: Arc<DynamicObject>, ctx: Arc<Native>) -> Result<Action, NativeError> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    if parent.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = parent.metadata.name.clone().unwrap_or_default();
    let uid = parent.metadata.uid.clone().unwrap_or_default();
    let parents = ctx.api(&ctx.webapp);

    if !parent.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER) {
        let body = json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "WebApp",
                          "metadata": {"name": name, "namespace": ctx.namespace, "finalizers": [FINALIZER]}});
        parents
            .patch(&name, &PatchParams::apply(&format!("{FIELD_MANAGER}-finalizer")).force(), &Patch::Apply(&body))
            .await?;
        ctx.finalizer_writes.fetch_add(1, Ordering::Relaxed);
    }

    // The request, from the caches, as the host builds it.
    let kinds = [
        (&ctx.deployment, &ctx.deployments, ("apps", "v1", "Deployment")),
        (&ctx.service, &ctx.services, ("", "v1", "Service")),
        (&ctx.ingress, &ctx.ingresses, ("networking.k8s.io", "v1", "Ingress")),
    ];
    let mut cluster = FakeCluster::new();
    let mut children = Vec::new();
    let mut existing = Vec::new();
    for (resource, store, (group, version, kind)) in kinds {
        let child = ctx.owned(store, resource, &name, &uid);
        let objects = child.iter().map(|c| serde_json::to_string(&**c)).collect::<Result<Vec<_>, _>>()?;
        if let Some(c) = child {
            cluster.insert(&*c);
            existing.push((resource, c));
        }
        children.push(raw::Children {
            kind: raw::Gvk { group: group.into(), version: version.into(), kind: kind.into() },
            objects,
        });
    }
    let request = raw::Request {
        object: serde_json::to_string(&*parent)?,
        children,
        related: Vec::new(),
        finalizing: false,
        attempt: 0,
    };
    let outcome = operon_sdk::run::reconcile::<WebAppReconciler>(&cluster, request)
        .map_err(|f| NativeError::Guest(format!("{f:?}")))?;

    // Children: server-side apply, skipped when our last apply is current.
    let owner = json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "WebApp", "name": name, "uid": uid,
                       "controller": true, "blockOwnerDeletion": true});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut wanted = HashSet::new();
    for text in &outcome.desired {
        let mut child: Value = serde_json::from_str(text)?;
        let kind = child["kind"].as_str().unwrap_or_default().to_string();
        let child_name = child["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let resource = [&ctx.deployment, &ctx.service, &ctx.ingress]
            .into_iter()
            .find(|r| r.kind == kind)
            .ok_or_else(|| NativeError::Guest(format!("unexpected child kind {kind}")))?;
        if let Some(meta) = child["metadata"].as_object_mut() {
            for server_owned in ["resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"] {
                meta.remove(server_owned);
            }
            meta.insert("namespace".into(), ctx.namespace.clone().into());
            meta.insert("ownerReferences".into(), json!([owner]));
        }
        wanted.insert((kind.clone(), child_name.clone()));
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            child.to_string().hash(&mut h);
            h.finish()
        };
        let current_rv = existing
            .iter()
            .find(|(r, c)| r.kind == kind && c.metadata.name.as_deref() == Some(&child_name))
            .and_then(|(_, c)| c.metadata.resource_version.clone());
        let memo = (kind.clone(), child_name.clone());
        let last = ctx.applied.lock().unwrap().get(&memo).cloned();
        if let (Some((h, rv)), Some(current)) = (last, current_rv)
            && h == hash
            && rv == current
        {
            continue;
        }
        let written = ctx.api(resource).patch(&child_name, &params, &Patch::Apply(&child)).await?;
        ctx.apply_writes.fetch_add(1, Ordering::Relaxed);
        if let Some(rv) = written.metadata.resource_version {
            ctx.applied.lock().unwrap().insert(memo, (hash, rv));
        }
    }
    // Prune children no longer wanted (never, in this benchmark; kept for equivalence).
    for (resource, child) in &existing {
        let child_name = child.metadata.name.clone().unwrap_or_default();
        if wanted.contains(&(resource.kind.clone(), child_name.clone())) {
            continue;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: child.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::background()
        };
        match ctx.api(resource).delete(&child_name, &params).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }

    // Status: server-side apply on the subresource unless already there.
    if let Some(text) = &outcome.status {
        let status: Value = serde_json::from_str(text)?;
        let current = parent.data.get("status").cloned().unwrap_or(Value::Null);
        if !operon::apply::is_subset(&status, &current) {
            let body = json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "WebApp",
                              "metadata": {"name": name, "namespace": ctx.namespace}, "status": status});
            parents.patch_status(&name, &params, &Patch::Apply(&body)).await?;
            ctx.status_writes.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Events, as Operon's applier records them.
    let reference = ObjectReference {
        api_version: Some(format!("{GROUP}/{VERSION}")),
        kind: Some("WebApp".into()),
        name: Some(name.clone()),
        namespace: Some(ctx.namespace.clone()),
        uid: Some(uid.clone()),
        resource_version: parent.metadata.resource_version.clone(),
        field_path: None,
    };
    for e in &outcome.events {
        let event = KubeEvent {
            type_: if e.warning { EventType::Warning } else { EventType::Normal },
            reason: e.reason.clone(),
            note: Some(e.message.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(error) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, "could not record event");
        }
    }
    Ok(Action::await_change())
}

// ---------------------------------------------------------------------------
// The benchmark's own view of the namespace

#[derive(Default)]
struct TrackedWebApp {
    generation: Option<i64>,
    observed_generation: Option<i64>,
    /// The status has the `Ready` condition, computed with the Deployment
    /// present (the guest's message no longer says it does not exist).
    reflects_children: bool,
}

impl TrackedWebApp {
    /// Converged: the status describes the current generation and the
    /// existing children (the steady state; nothing further changes).
    fn done(&self) -> bool {
        self.reflects_children && self.generation.is_some() && self.observed_generation == self.generation
    }
}

#[derive(Default)]
struct TrackState {
    webapps: HashMap<String, TrackedWebApp>,
    deployments: HashSet<String>,
    services: HashSet<String>,
    /// When a WebApp generation (`webapp/<name>/<generation>`) or a
    /// Deployment's replicas (`deployment/<name>/<replicas>`) was first seen.
    first_seen: HashMap<String, Instant>,
}

/// Watches of WebApps, Deployments and Services in one namespace, keeping
/// what the benchmark checks (names, generations, status) and when changes
/// were seen.
struct Tracker {
    state: Arc<Mutex<TrackState>>,
    changed: tokio::sync::watch::Receiver<u64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Tracker {
    async fn start(client: kube::Client, namespace: &str) -> Tracker {
        let state = Arc::new(Mutex::new(TrackState::default()));
        let (tx, changed) = tokio::sync::watch::channel(0u64);
        let tx = Arc::new(tx);
        let mut tasks = Vec::new();
        let kinds = [(GROUP, VERSION, "WebApp"), ("apps", "v1", "Deployment"), ("", "v1", "Service")];
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(3);
        for (group, version, kind) in kinds {
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource);
            let (state, tx, ready_tx) = (state.clone(), tx.clone(), ready_tx.clone());
            tasks.push(tokio::spawn(async move {
                let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
                while let Some(event) = stream.next().await {
                    let now = Instant::now();
                    let object = match event {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                        Ok(watcher::Event::InitDone) => {
                            let _ = ready_tx.send(()).await;
                            continue;
                        }
                        _ => continue,
                    };
                    let name = object.metadata.name.clone().unwrap_or_default();
                    let mut s = state.lock().unwrap();
                    match kind {
                        "WebApp" => {
                            let status = object.data.get("status");
                            let tracked = TrackedWebApp {
                                generation: object.metadata.generation,
                                observed_generation: status
                                    .and_then(|s| s.get("observedGeneration"))
                                    .and_then(Value::as_i64),
                                reflects_children: status
                                    .and_then(|s| s.get("conditions"))
                                    .and_then(Value::as_array)
                                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                                    .and_then(|c| c["message"].as_str())
                                    .is_some_and(|m| !m.ends_with("does not exist yet")),
                            };
                            if let Some(g) = tracked.generation {
                                s.first_seen.entry(format!("webapp/{name}/{g}")).or_insert(now);
                            }
                            s.webapps.insert(name, tracked);
                        }
                        "Deployment" => {
                            if let Some(r) = object.data.pointer("/spec/replicas").and_then(Value::as_i64) {
                                s.first_seen.entry(format!("deployment/{name}/{r}")).or_insert(now);
                            }
                            s.deployments.insert(name);
                        }
                        _ => {
                            s.services.insert(name);
                        }
                    }
                    drop(s);
                    tx.send_modify(|v| *v += 1);
                }
            }));
        }
        for _ in 0..3 {
            let _ = ready_rx.recv().await;
        }
        Tracker { state, changed, tasks }
    }

    /// Wait until `check` returns `Some` (re-checked after every change).
    async fn wait<T>(&self, timeout: Duration, check: impl Fn(&TrackState) -> Option<T>) -> Result<T> {
        let mut changed = self.changed.clone();
        let wait = async {
            loop {
                changed.borrow_and_update();
                if let Some(v) = check(&self.state.lock().unwrap()) {
                    return v;
                }
                if changed.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.map_err(|_| anyhow::anyhow!("timed out after {timeout:?}"))
    }

    fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

// ---------------------------------------------------------------------------
// Report

fn report(
    args: &Args,
    convergences: &[Convergence],
    latencies: &[Latencies],
    memory: Option<((u64, u64), (u64, u64))>,
) {
    let n = args.parents;
    println!();
    println!(
        "Operon manager benchmark: {n} WebApps, {} workers per controller, {} CPUs, envtest control plane (kube-apiserver {}, etcd {})",
        args.workers,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        operon_envtest::assets::KUBERNETES_VERSION,
        operon_envtest::assets::ETCD_VERSION,
    );
    println!();
    println!(
        "1. {n} WebApps created at once ({CREATE_CONCURRENCY} creates in flight) -> every one has its Deployment, Service and Ready status"
    );
    println!(
        "   {:<22} {:>11} {:>13} {:>11}   writes: finalizer / children / status / events",
        "", "created in", "converged in", "reconciles"
    );
    for c in convergences {
        println!(
            "   {:<22} {:>9.2} s {:>11.2} s {:>11}   {} / {} / {} / {}",
            c.kind.label(),
            c.created.as_secs_f64(),
            c.converged.as_secs_f64(),
            c.reconciles,
            c.writes.finalizer,
            c.writes.apply,
            c.writes.status,
            c.writes.events
        );
    }
    // Mean over runs: with rounds in the order operon, native, native,
    // operon, a drift over the run (etcd growing) weighs on both alike.
    let mean = |kind: Kind| {
        let v: Vec<f64> = convergences.iter().filter(|c| c.kind == kind).map(|c| c.converged.as_secs_f64()).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    if let (Some(o), Some(nat)) = (mean(Kind::Operon), mean(Kind::Native)) {
        let ratio = o / nat;
        println!(
            "   operon / native convergence time (mean of runs): {ratio:.2}x   (target <= {TARGET_RATIO}x: {})",
            if ratio <= TARGET_RATIO { "met" } else { "MISSED" }
        );
    }
    println!();
    println!(
        "2. Event -> reconcile start on an idle system: {} spec patches, one at a time (ms; from the patch's response)",
        args.samples
    );
    println!("   {:<58} {:>8} {:>8} {:>8}", "", "p50", "p99", "max");
    for (kind, samples, queue) in latencies {
        let row = |what: &str, values: Vec<f64>| {
            let mut v = values;
            v.sort_by(f64::total_cmp);
            println!(
                "   {:<58} {:>8.2} {:>8.2} {:>8.2}",
                format!("{}: {what}", short(*kind)),
                pct(&v, 50.0),
                pct(&v, 99.0),
                v.last().copied().unwrap_or(f64::NAN)
            );
            pct(&v, 99.0)
        };
        row("patch sent -> response (API server write)", samples.iter().map(|s| s.response).collect());
        row("watch delivers the new generation (bench's watch)", samples.iter().map(|s| s.watch).collect());
        row("reconcile starts", samples.iter().map(|s| s.start).collect());
        let p99 = row(
            "reconcile start - watch delivery (event -> start)",
            samples.iter().map(|s| s.start - s.watch).collect(),
        );
        row("Deployment updated (bench's watch)", samples.iter().map(|s| s.child).collect());
        if let Some(q) = queue {
            let total = q.last().map_or(0, |b| b.1);
            println!(
                "   {:<58} p50 <= {}, p99 <= {}  ({total} queue gets, workqueue_queue_duration_seconds buckets)",
                format!("{}: queue add -> worker get", short(*kind)),
                bucket_pct(q, 50.0),
                bucket_pct(q, 99.0)
            );
        }
        if *kind == Kind::Operon {
            println!(
                "   operon: event (watch delivery) -> reconcile start p99 {:.2} ms   (target <= {} ms: {})",
                p99,
                TARGET_P99.as_millis(),
                if p99 <= TARGET_P99.as_secs_f64() * 1e3 { "met" } else { "MISSED" }
            );
        }
    }
    println!();
    if let Some(((rss0, _), (rss1, hwm1))) = memory {
        let objects = 3 * n as u64;
        println!("3. Memory of this process (operon manager; VmRSS)");
        println!("   before the manager starts (runtime and module loaded)   {:>8.1} MiB", mib(rss0));
        println!(
            "   {n} WebApps + {n} Deployments + {n} Services cached      {:>8.1} MiB   (VmHWM {:.1} MiB)",
            mib(rss1),
            mib(hwm1)
        );
        println!(
            "   growth per cached object ({objects} objects)                 {:>8.1} KiB",
            rss1.saturating_sub(rss0) as f64 / 1024.0 / objects as f64
        );
    }
    println!();
}

fn short(kind: Kind) -> &'static str {
    match kind {
        Kind::Operon => "operon",
        Kind::Native => "native",
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The upper bound of the bucket holding the p-th percentile.
fn bucket_pct(buckets: &[(f64, u64)], p: f64) -> String {
    let total = buckets.last().map_or(0, |b| b.1);
    if total == 0 {
        return "-".into();
    }
    let rank = ((p / 100.0) * total as f64).ceil() as u64;
    let le = buckets.iter().find(|b| b.1 >= rank).map_or(f64::INFINITY, |b| b.0);
    match le {
        x if x.is_infinite() => "+Inf".into(),
        x if x < 1e-3 => format!("{:.0} µs", x * 1e6),
        x if x < 1.0 => format!("{:.0} ms", x * 1e3),
        x => format!("{x:.0} s"),
    }
}

fn histogram_delta(after: &[(f64, u64)], before: &[(f64, u64)]) -> Vec<(f64, u64)> {
    after.iter().map(|(le, c)| (*le, c - before.iter().find(|b| b.0 == *le).map_or(0, |b| b.1))).collect()
}

/// (VmRSS, VmHWM) in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

// ---------------------------------------------------------------------------
// Fixtures

fn name_of(i: usize) -> String {
    format!("web-{i:05}")
}

fn webapps(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, VERSION, "WebApp")),
    )
}

/// A WebApp of about 4 KB of JSON once the API server has added its
/// metadata: labels, a long description, an environment.
fn webapp(name: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "WebApp",
        "metadata": {
            "name": name,
            "labels": {"team": "shop", "tier": "frontend", "app.kubernetes.io/part-of": "store",
                       "cost-center": "cc-1042", "environment": "production"},
            "annotations": {
                "description": "The storefront of the shop: serves the catalogue, the basket and the checkout pages. ".repeat(30),
                "owner": "platform-team@example.com",
                "runbook": "https://runbooks.example.com/shop/web"
            }
        },
        "spec": {
            "image": "registry.example.com/shop/web:1.4.2",
            "replicas": 1,
            "port": 8080,
            "env": [
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-v3,recommendations-v1"},
                {"name": "DATABASE_URL", "value": "postgres://db.shop.svc:5432/shop?sslmode=require"},
                {"name": "CACHE_URL", "value": "redis://cache.shop.svc:6379/0"},
                {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability.svc:4318"}
            ]
        }
    })
}

fn webapp_crd() -> Result<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/rust-webapp/crd.yaml");
    Ok(serde_yaml::from_str(&std::fs::read_to_string(&path).with_context(|| path.display().to_string())?)?)
}

/// `target/guests`, or `$OPERON_GUESTS_DIR`.
fn guests_dir() -> PathBuf {
    std::env::var_os("OPERON_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/guests"))
}
