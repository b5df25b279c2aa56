//! Manager benchmark: Operon (the real `operon run` binary with the WebApp
//! wasm guest) beside the same logic as a native kube-rs controller and as an
//! ordinary controller-runtime controller in Go, each its own process,
//! against one real control plane (etcd, kube-apiserver, and
//! kube-controller-manager's garbage collector and namespace controller; no
//! deployment controller, no kubelet) in the same run, at one or more
//! numbers of parents.
//!
//! Run with `cargo xtask bench manager` (builds the guest and checks the
//! control plane binaries first), or `cargo bench -p operon --bench manager`.
//! Options after `--`: `--parents N[,N...]` (default 1000), `--workers N`
//! (4), `--samples N` (200), `--rounds N` (3: the ratios compare medians), `--contenders
//! operon,native,go` (all three), `--out DIR` (`target/bench`: the plot
//! `manager.svg`, the figures `manager.json` and each process's log). Prints
//! figures; asserts nothing about time.
//!
//! # The contenders
//!
//! - **operon**: `operon run --module target/guests/rust-webapp.wasm
//!   --namespace NS --max-concurrent-reconciles W` (fresh instances, default
//!   limits), built by cargo for this bench (`CARGO_BIN_EXE_operon`).
//! - **native**: this program re-executed with `__native-controller` (see
//!   `manager/native.rs`): `kube::runtime::Controller` calling the guest's
//!   Rust code natively, with the writes Operon's applier makes.
//! - **go**: `host/benches/peers/go-webapp`, controller-runtime v0.22 with
//!   Kubernetes 1.34 client libraries, built here with `go build` into
//!   `target/peers/go-webapp`: typed WebApp, `For(WebApp, predicate)`,
//!   `Owns` Deployment/Service/Ingress, finalizer by Update, children by
//!   `CreateOrUpdate`, `Status().Update`, events by the manager's recorder.
//!
//! # What is measured, per number of parents N
//!
//! A fresh control plane per N. The contenders run one at a time, each in a
//! fresh namespace, in the order a, b, c, c, b, a (for two rounds) so that
//! drift weighs on all alike; after each run the contender is stopped, the
//! finalizers are removed and the namespace is deleted, and the next run
//! waits until it is gone.
//!
//! 1. **Convergence.** N WebApps (about 4 KB of JSON each) are created at
//!    once, 32 creates in flight. The clock runs from the first create until
//!    the benchmark's own watches have seen every parent with a Deployment, a
//!    Service and a status whose `observedGeneration` equals its `generation`
//!    and whose `Ready` condition was computed with the Deployment present:
//!    the steady state.
//! 2. **Event → reconcile start**, on an idle system, in the first run of
//!    each contender: one WebApp's `spec.replicas` is patched at a time.
//!    Wall-clock timestamps (all processes share the clock): the patch's
//!    response; the benchmark's own watch seeing the new generation; the
//!    reconcile starting, as the contender reports it: Operon's `reconcile`
//!    span start (opened when a worker takes the key; exported over OTLP to a
//!    receiver in this program), kube-rs's `reconciling object` span
//!    (printed by the native process), the Go controller's first line in
//!    `Reconcile` (a debug log line with a nanosecond timestamp); and the
//!    Deployment with the new replicas seen by the benchmark's watch. That
//!    instrumentation is on only in these runs.
//! 3. **Resources** of each contender's process, from `/proc/<pid>`: VmRSS
//!    once its caches synced on the empty namespace and again at
//!    convergence (growth per cached object: the difference over 3N), VmHWM,
//!    and utime+stime over the convergence divided by the reconciles it
//!    reports (`controller_runtime_reconcile_total` on its `/metrics`, or the
//!    native process's count). Taken from each contender's last run (without
//!    instrumentation when there are two rounds or more). The API server's
//!    and etcd's CPU over the same interval are printed too.

#[path = "common/go_peer.rs"]
mod go_peer;
#[path = "manager/native.rs"]
mod native;
#[path = "manager/plot.rs"]
mod plot;
#[path = "manager/procs.rs"]
mod procs;

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use operon_envtest::{ControlPlane, Options};
use procs::{Bins, Contender, Launch, ProcStats, Starts, Watchdog, now_ns, proc_stats};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GROUP: &str = "example.operon.dev";
const VERSION: &str = "v1alpha1";
const FINALIZER: &str = rust_webapp::FINALIZER;
/// The hidden first argument that turns this program into the native
/// controller.
const NATIVE_MODE: &str = "__native-controller";
/// Creates in flight while the parents are created.
const CREATE_CONCURRENCY: usize = 32;
/// Targets: convergence time against the faster peer, event → reconcile
/// start p99.
const TARGET_RATIO: f64 = 1.0;
const TARGET_P99: Duration = Duration::from_millis(5);

struct Args {
    parents: Vec<usize>,
    workers: usize,
    samples: usize,
    rounds: usize,
    contenders: Vec<Kind>,
    out: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Operon,
    Native,
    Go,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Operon, Kind::Native, Kind::Go];

    fn label(self) -> &'static str {
        match self {
            Kind::Operon => "operon (wasm guest)",
            Kind::Native => "kube-rs (native)",
            Kind::Go => "controller-runtime (Go)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Kind::Operon => "operon",
            Kind::Native => "native",
            Kind::Go => "go",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Kind::Operon => "#7b3fbf",
            Kind::Native => "#d9822b",
            Kind::Go => "#00a0c8",
        }
    }
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(NATIVE_MODE) {
        return native::main(&argv[2..]);
    }
    let args = parse_args()?;
    let started = Instant::now();
    std::fs::create_dir_all(args.out.join("manager-logs"))?;
    let bins = prepare()?;
    let starts = Arc::new(Starts::default());
    let otlp = procs::otlp_receiver(starts.clone())?;
    let mut watchdog = Watchdog::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let machine = machine();
    eprintln!("bench: {machine}");

    let mut sizes = Vec::new();
    for &n in &args.parents {
        let mut size = SizeResult { parents: n, ..SizeResult::default() };
        let size_started = Instant::now();
        eprintln!("bench: {n} parents: starting a control plane (etcd, kube-apiserver, kube-controller-manager)");
        match ControlPlane::start(Options::with_controller_manager().crd(webapp_crd()?)) {
            Ok(plane) => {
                size.plane_start = size_started.elapsed().as_secs_f64();
                let ctx = Ctx { args: &args, bins: &bins, starts: &starts, otlp: &otlp };
                let result = rt.block_on(run_size(&plane, &ctx, &mut watchdog, &mut size));
                if let Err(e) = result {
                    eprintln!("bench: {n} parents FAILED: {e:#}\n{}", plane.logs(30));
                    size.error = Some(format!("{e:#}"));
                }
            }
            Err(e) => size.error = Some(format!("starting the control plane: {e:#}")),
        }
        size.total = size_started.elapsed().as_secs_f64();
        report_size(&args, &size);
        sizes.push(size);
        write_results(&args, &machine, &sizes)?;
    }
    report_scale(&sizes);
    let plot = args.out.join("manager.svg");
    std::fs::write(&plot, plot_svg(&args, &sizes, &machine))?;
    println!("wrote {} and {}", plot.display(), args.out.join("manager.json").display());
    println!("total time {:.0?}", started.elapsed());
    drop(rt);
    drop(watchdog);
    if sizes.iter().any(|s| s.error.is_some()) {
        bail!("some sizes failed; see above");
    }
    Ok(())
}

fn parse_args() -> Result<Args> {
    let target = target_dir();
    let mut args = Args {
        parents: vec![1000],
        workers: 4,
        samples: 200,
        rounds: 3,
        contenders: Kind::ALL.to_vec(),
        out: target.join("bench"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        let number = |name: &str, v: String| v.parse::<usize>().with_context(|| format!("{name}: not a number"));
        match arg.as_str() {
            "--parents" => {
                let v = value("--parents")?;
                args.parents = v.split(',').map(|p| number("--parents", p.trim().into())).collect::<Result<_>>()?;
            }
            "--workers" => args.workers = number("--workers", value("--workers")?)?,
            "--samples" => args.samples = number("--samples", value("--samples")?)?,
            "--rounds" => args.rounds = number("--rounds", value("--rounds")?)?.max(1),
            "--contenders" => {
                let v = value("--contenders")?;
                args.contenders = v
                    .split(',')
                    .map(|c| {
                        Kind::ALL
                            .into_iter()
                            .find(|k| k.short() == c.trim())
                            .with_context(|| format!("unknown contender {c}"))
                    })
                    .collect::<Result<_>>()?;
            }
            "--out" => args.out = PathBuf::from(value("--out")?),
            // cargo bench passes `--bench` to every bench program.
            "--bench" => {}
            other => bail!(
                "unknown argument {other}; use --parents N[,N...] --workers N --samples N --rounds N \
                 --contenders operon,native,go --out DIR"
            ),
        }
    }
    if args.parents.is_empty() || args.contenders.is_empty() {
        bail!("--parents and --contenders need at least one value");
    }
    Ok(args)
}

/// `$CARGO_TARGET_DIR`, or the workspace's `target/`.
fn target_dir() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    dir.canonicalize().unwrap_or(dir)
}

/// The programs: the guest (built by `cargo xtask guests`), `operon` (built
/// by cargo with this bench), this executable, and the Go controller (built
/// here when its sources are newer than the binary).
fn prepare() -> Result<Bins> {
    let wasm = guests_dir().join("rust-webapp.wasm");
    if !wasm.exists() {
        bail!("{} is missing; build it with `cargo xtask guests rust-webapp`", wasm.display());
    }
    // Private copies: other builds in the workspace may replace cargo's
    // outputs while a long run is going on.
    let bin = target_dir().join("bench/bin");
    std::fs::create_dir_all(&bin)?;
    let copy = |from: PathBuf, name: &str| -> Result<PathBuf> {
        let to = bin.join(name);
        std::fs::copy(&from, &to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        Ok(to)
    };
    Ok(Bins {
        operon: copy(PathBuf::from(env!("CARGO_BIN_EXE_operon")), "operon")?,
        wasm: copy(wasm, "rust-webapp.wasm")?,
        native: copy(std::env::current_exe()?, "bench-manager")?,
        go: go_peer::build(&target_dir())?,
    })
}

/// CPUs, memory, kernel; versions of the peers.
fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("?".into(), |(_, m)| m.trim().to_string());
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let go_version = std::process::Command::new("go")
        .arg("version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().trim_start_matches("go version ").to_string())
        .unwrap_or_default();
    let runtime_version = std::fs::read_to_string(go_peer::source().join("go.mod"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.trim().strip_prefix("sigs.k8s.io/controller-runtime ").map(str::to_string))
        .unwrap_or_default();
    format!(
        "{} CPUs ({model}), {:.1} GiB RAM, Linux {}; kube-apiserver {}, etcd {}; controller-runtime {runtime_version}, {go_version}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        mem_kib as f64 / 1024.0 / 1024.0,
        read("/proc/sys/kernel/osrelease").trim(),
        operon_envtest::assets::KUBERNETES_VERSION,
        operon_envtest::assets::ETCD_VERSION,
    )
}

// ---------------------------------------------------------------------------
// Results

#[derive(Default)]
struct SizeResult {
    parents: usize,
    runs: Vec<RunResult>,
    latencies: Vec<(Kind, Vec<Sample>)>,
    /// Seconds to start the control plane, and for the whole size.
    plane_start: f64,
    total: f64,
    error: Option<String>,
}

/// One convergence run.
struct RunResult {
    kind: Kind,
    instrumented: bool,
    created: f64,
    converged: f64,
    reconciles: u64,
    errors: u64,
    finalizer: u64,
    apply: u64,
    status: u64,
    events: u64,
    /// The contender once ready on the empty namespace, and at convergence.
    before: ProcStats,
    after: ProcStats,
    /// kube-apiserver and etcd CPU seconds over the convergence.
    apiserver_cpu: f64,
    etcd_cpu: f64,
    /// CPU seconds over the convergence of everything else on the machine
    /// (this program, kube-controller-manager, other jobs), and the 1-minute
    /// load average at its end.
    other_cpu: f64,
    load: f64,
    /// Namespace deletion after the run, seconds.
    cleanup: f64,
}

impl RunResult {
    fn cpu(&self) -> f64 {
        self.after.cpu - self.before.cpu
    }

    /// RSS growth per cached object (the parents and their two children).
    fn per_object(&self, n: usize) -> f64 {
        self.after.rss.saturating_sub(self.before.rss) as f64 / (3 * n) as f64
    }
}

impl SizeResult {
    /// The convergence times of `kind`'s runs, sorted.
    fn converged(&self, kind: Kind) -> Vec<f64> {
        let mut v: Vec<f64> = self.runs.iter().filter(|r| r.kind == kind).map(|r| r.converged).collect();
        v.sort_by(f64::total_cmp);
        v
    }

    /// The median convergence of `kind` (the mean of the middle two for an
    /// even count): what the ratios compare, so one slow round moves
    /// nothing.
    fn median_converged(&self, kind: Kind) -> Option<f64> {
        let v = self.converged(kind);
        let n = v.len();
        (n > 0).then(|| if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
    }

    /// The run whose resources are reported: the last of its kind.
    fn resource_run(&self, kind: Kind) -> Option<&RunResult> {
        self.runs.iter().rev().find(|r| r.kind == kind)
    }
}

/// One patched WebApp's wall-clock timestamps (ns).
struct Sample {
    name: String,
    sent: i128,
    returned: i128,
    watch: i128,
    start: Option<i128>,
    child: i128,
}

// ---------------------------------------------------------------------------
// One size

struct Ctx<'a> {
    args: &'a Args,
    bins: &'a Bins,
    starts: &'a Arc<Starts>,
    otlp: &'a str,
}

async fn run_size(plane: &ControlPlane, ctx: &Ctx<'_>, watchdog: &mut Watchdog, size: &mut SizeResult) -> Result<()> {
    let (args, n) = (ctx.args, size.parents);
    let client = plane.client().await;
    warm_up(&client, (n / 10).clamp(20, 500)).await?;
    // kube-apiserver and etcd, by name from the control plane's start order.
    let pids = plane.pids();
    let (etcd, apiserver) = (pids.first().copied().unwrap_or(0), pids.get(1).copied().unwrap_or(0));

    let order: Vec<Kind> = (0..args.rounds)
        .flat_map(|r| {
            let mut round = args.contenders.clone();
            if r % 2 == 1 {
                round.reverse();
            }
            round
        })
        .collect();
    eprintln!("bench: {n} parents, order {:?}", order.iter().map(|k| k.short()).collect::<Vec<_>>());
    for (i, &kind) in order.iter().enumerate() {
        let instrumented = !order[..i].contains(&kind) && args.samples > 0;
        let namespace = operon_envtest::create_namespace(&client, &format!("bench-{}", kind.short())).await?;
        let tracker = Tracker::start(client.clone(), &namespace).await;
        eprintln!("bench: run {}/{}: {} in namespace {namespace}", i + 1, order.len(), kind.label());
        let launch = Launch {
            kind,
            namespace: &namespace,
            workers: args.workers,
            kubeconfig: plane.kubeconfig_path(),
            instrumented,
            log: args.out.join("manager-logs").join(format!("{n}-{}-{}.log", i + 1, kind.short())),
            starts: ctx.starts.clone(),
            otlp: ctx.otlp,
        };
        let mut contender = Contender::spawn(launch, ctx.bins, watchdog)?;
        tokio::task::block_in_place(|| contender.wait_ready(Duration::from_secs(120)))?;
        tokio::time::sleep(Duration::from_secs(1)).await;

        let before = contender.stats();
        let (api0, etcd0, busy0) = (proc_stats(apiserver).cpu, proc_stats(etcd).cpu, procs::machine_busy());
        let (created, converged) = converge(&client, &namespace, n, &tracker).await?;
        let after = contender.stats();
        let (api1, etcd1, busy1) = (proc_stats(apiserver).cpu, proc_stats(etcd).cpu, procs::machine_busy());
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(f64::NAN);
        let counts = tokio::task::block_in_place(|| contender.counts())?;
        let finalizer = match counts.finalizer {
            Some(f) => f,
            None => tracker.state.lock().unwrap().webapps.values().filter(|w| w.has_finalizer).count() as u64,
        };
        let mut run = RunResult {
            kind,
            instrumented,
            created,
            converged,
            reconciles: counts.reconciles,
            errors: counts.errors,
            finalizer,
            apply: counts.apply,
            status: counts.status,
            events: count_events(&client, &namespace).await?,
            before,
            after,
            apiserver_cpu: api1 - api0,
            etcd_cpu: etcd1 - etcd0,
            other_cpu: (busy1 - busy0) - (api1 - api0) - (etcd1 - etcd0) - (after.cpu - before.cpu),
            load,
            cleanup: 0.0,
        };
        eprintln!(
            "bench: {} converged in {converged:.1} s ({} reconciles, {} errors; writes {} / {} / {} / {}; \
             RSS {:.1} -> {:.1} MiB; CPU {:.1} s)",
            kind.label(),
            run.reconciles,
            run.errors,
            run.finalizer,
            run.apply,
            run.status,
            run.events,
            mib(before.rss),
            mib(after.rss),
            run.cpu()
        );
        if instrumented {
            // Let trailing events (children's watch events, status writes) settle.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let samples = latency(&client, &namespace, args.samples.min(n), &tracker, ctx.starts).await?;
            size.latencies.push((kind, samples));
        }
        tokio::task::block_in_place(|| contender.stop())?;
        tracker.stop();
        let cleanup_started = Instant::now();
        cleanup(&client, &namespace, n).await?;
        run.cleanup = cleanup_started.elapsed().as_secs_f64();
        eprintln!("bench: namespace {namespace} deleted in {:.1} s", run.cleanup);
        size.runs.push(run);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 1. Convergence

/// (seconds to create the N parents, seconds to the steady state).
async fn converge(client: &kube::Client, namespace: &str, n: usize, tracker: &Tracker) -> Result<(f64, f64)> {
    let api = webapps(client, namespace);
    let started = Instant::now();
    create_webapps(&api, n).await?;
    let created = started.elapsed().as_secs_f64();
    let deadline = Duration::from_secs(600).max(Duration::from_millis(200 * n as u64));
    tracker
        .wait(deadline, |s| {
            (s.deployments.len() >= n && s.services.len() >= n && s.done >= n).then_some(())
        })
        .await
        .with_context(|| {
            let s = tracker.state.lock().unwrap();
            format!(
                "waiting for every WebApp to have children and a status (seen: {} Deployments, {} Services, {} WebApps done of {n})",
                s.deployments.len(),
                s.services.len(),
                s.done
            )
        })?;
    Ok((created, started.elapsed().as_secs_f64()))
}

/// Create WebApps `0..n`, `CREATE_CONCURRENCY` at a time.
async fn create_webapps(api: &Api<DynamicObject>, n: usize) -> Result<()> {
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let parent: DynamicObject = serde_json::from_value(webapp(&name_of(i)))?;
                api.create(&kube::api::PostParams::default(), &parent).await.map(drop).context("creating a WebApp")
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

/// Events in the namespace (a series counts its occurrences).
async fn count_events(client: &kube::Client, namespace: &str) -> Result<u64> {
    let events = Api::<K8sEvent>::namespaced(client.clone(), namespace).list(&ListParams::default()).await?;
    Ok(events.items.iter().map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u64)).sum())
}

/// Remove the finalizers (the contender is stopped), delete the namespace
/// and wait until it is gone, so that the next run starts on a quiet
/// control plane and the Service IP range is free again.
async fn cleanup(client: &kube::Client, namespace: &str, n: usize) -> Result<()> {
    let api = webapps(client, namespace);
    let patch = json!({"metadata": {"finalizers": null}});
    futures::stream::iter(0..n)
        .map(|i| {
            let (api, patch) = (api.clone(), patch.clone());
            async move {
                match api.patch(&name_of(i), &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<()>()
        .await
        .context("removing the finalizers")?;
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces.delete(namespace, &DeleteParams::default()).await.context("deleting the namespace")?;
    let deadline = Instant::now() + Duration::from_secs(1800);
    while namespaces.get_opt(namespace).await?.is_some() {
        if Instant::now() > deadline {
            bail!("namespace {namespace} still exists 30 minutes after its deletion");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. Event → reconcile start

async fn latency(
    client: &kube::Client,
    namespace: &str,
    samples: usize,
    tracker: &Tracker,
    starts: &Starts,
) -> Result<Vec<Sample>> {
    let api = webapps(client, namespace);
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let name = name_of(i);
        let replicas = 2;
        let sent = now_ns();
        let patched =
            api.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": replicas}}))).await?;
        let returned = now_ns();
        let generation = patched.metadata.generation.context("a WebApp without a generation")?;
        let (n, g) = (name.clone(), generation);
        let (watch, child) = tracker
            .wait(Duration::from_secs(30), move |s| {
                let w = s.first_seen.get(&format!("webapp/{n}/{g}"))?;
                let d = s.first_seen.get(&format!("deployment/{n}/{replicas}"))?;
                let settled = s.webapps.get(&n).is_some_and(|w| w.observed_generation == Some(g));
                settled.then_some((*w, *d))
            })
            .await
            .with_context(|| format!("waiting for {name} to follow its patch"))?;
        out.push(Sample { name, sent, returned, watch, start: None, child });
        // Idle between samples.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Operon's spans arrive in batches once they end: wait for them.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        for s in out.iter_mut().filter(|s| s.start.is_none()) {
            s.start = starts.first_after(&s.name, s.sent);
        }
        if out.iter().all(|s| s.start.is_some()) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let missing = out.iter().filter(|s| s.start.is_none()).count();
    if missing > 0 {
        eprintln!(
            "bench: no reconcile start recorded for {missing} of {samples} samples ({} starts seen)",
            starts.len()
        );
    }
    Ok(out)
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
    has_finalizer: bool,
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
    /// WebApps that are `done()`, kept as they change (a scan per event
    /// would cost O(N) at every one of the run's O(N) events).
    done: usize,
    deployments: HashSet<String>,
    services: HashSet<String>,
    /// When a WebApp generation (`webapp/<name>/<generation>`) or a
    /// Deployment's replicas (`deployment/<name>/<replicas>`) was first seen
    /// (wall clock, ns).
    first_seen: HashMap<String, i128>,
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
                    let now = now_ns();
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
                                has_finalizer: object.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER),
                            };
                            if let Some(g) = tracked.generation {
                                s.first_seen.entry(format!("webapp/{name}/{g}")).or_insert(now);
                            }
                            let now_done = tracked.done();
                            let was_done = s.webapps.insert(name, tracked).is_some_and(|w| w.done());
                            s.done = s.done + usize::from(now_done) - usize::from(was_done);
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

fn report_size(args: &Args, size: &SizeResult) {
    let n = size.parents;
    println!();
    println!(
        "== {n} WebApps ({} objects with their Deployments and Services), {} workers per controller; control plane up in {:.1} s; {:.0} s in all ==",
        3 * n,
        args.workers,
        size.plane_start,
        size.total
    );
    if let Some(e) = &size.error {
        println!("   FAILED: {e}");
    }
    if size.runs.is_empty() {
        return;
    }
    println!();
    println!(
        "1. Convergence: {n} WebApps created at once ({CREATE_CONCURRENCY} creates in flight) -> every one has its Deployment, Service and Ready status"
    );
    println!(
        "   {:<3} {:<25} {:>9} {:>10} {:>10} {:>7}  {:<30} {:>9} {:>9} {:>9} {:>9} {:>5} {:>8}",
        "#",
        "",
        "created",
        "converged",
        "reconciles",
        "errors",
        "writes: fin./children/status/events",
        "ctrl CPU",
        "apiserver",
        "etcd CPU",
        "other CPU",
        "load",
        "cleanup"
    );
    for (i, r) in size.runs.iter().enumerate() {
        println!(
            "   {:<3} {:<25} {:>7.2} s {:>8.2} s {:>10} {:>7}  {:<35} {:>7.1} s {:>7.1} s {:>7.1} s {:>7.1} s {:>5.1} {:>6.0} s",
            i + 1,
            format!("{}{}", r.kind.label(), if r.instrumented { "*" } else { "" }),
            r.created,
            r.converged,
            r.reconciles,
            r.errors,
            format!("{} / {} / {} / {}", r.finalizer, r.apply, r.status, r.events),
            r.cpu(),
            r.apiserver_cpu,
            r.etcd_cpu,
            r.other_cpu,
            r.load,
            r.cleanup
        );
    }
    println!("   (* instrumented run: reconcile starts reported, see 2.)");
    println!(
        "   (CPU seconds over the convergence; other: the rest of the machine, this program included; load: 1-min load average at the end)"
    );
    let means: Vec<(Kind, f64)> = Kind::ALL.iter().filter_map(|&k| Some((k, size.median_converged(k)?))).collect();
    println!(
        "   median convergence [range] over {} round(s): {}",
        args.rounds,
        means
            .iter()
            .map(|(k, m)| {
                let v = size.converged(*k);
                format!("{} {m:.2} s [{:.2}-{:.2}]", k.short(), v[0], v[v.len() - 1])
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(o) = size.median_converged(Kind::Operon) {
        for (k, m) in means.iter().filter(|(k, _)| *k != Kind::Operon) {
            println!("   operon / {}: {:.2}x", k.short(), o / m);
        }
        let faster = means.iter().filter(|(k, _)| *k != Kind::Operon).min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((k, m)) = faster {
            let ratio = o / m;
            println!(
                "   operon / faster peer ({}): {ratio:.2}x   (target <= {TARGET_RATIO:.1}x: {})",
                k.short(),
                if ratio <= TARGET_RATIO { "met" } else { "MISSED" }
            );
        }
    }

    if !size.latencies.is_empty() {
        println!();
        println!(
            "2. Event -> reconcile start on an idle system: {} spec patches, one at a time (ms, relative to the patch's response)",
            size.latencies.first().map_or(0, |l| l.1.len())
        );
        println!("   {:<60} {:>8} {:>8} {:>8}", "", "p50", "p99", "max");
        for (kind, samples) in &size.latencies {
            let ms = |t: i128, from: i128| (t - from) as f64 / 1e6;
            let row = |what: &str, values: Vec<f64>| {
                let mut v = values;
                v.sort_by(f64::total_cmp);
                println!(
                    "   {:<60} {:>8.2} {:>8.2} {:>8.2}",
                    format!("{}: {what}", kind.short()),
                    pct(&v, 50.0),
                    pct(&v, 99.0),
                    v.last().copied().unwrap_or(f64::NAN)
                );
                pct(&v, 99.0)
            };
            row("patch sent -> response (API server write)", samples.iter().map(|s| ms(s.returned, s.sent)).collect());
            row(
                "watch delivers the new generation (bench's watch)",
                samples.iter().map(|s| ms(s.watch, s.returned)).collect(),
            );
            row(
                "reconcile starts (as the controller reports it)",
                samples.iter().filter_map(|s| Some(ms(s.start?, s.returned))).collect(),
            );
            let p99 = row(
                "reconcile start - watch delivery (event -> start)",
                samples.iter().filter_map(|s| Some(ms(s.start?, s.watch))).collect(),
            );
            row("Deployment updated (bench's watch)", samples.iter().map(|s| ms(s.child, s.returned)).collect());
            if *kind == Kind::Operon {
                println!(
                    "   operon: event (watch delivery) -> reconcile start p99 {p99:.2} ms   (target <= {} ms: {})",
                    TARGET_P99.as_millis(),
                    if p99 <= TARGET_P99.as_secs_f64() * 1e3 { "met" } else { "MISSED" }
                );
            }
        }
    }

    println!();
    println!("3. Resources of each controller process (/proc/<pid>; each one's last run)");
    println!(
        "   {:<25} {:>13} {:>15} {:>11} {:>14} {:>10} {:>14}",
        "", "RSS synced", "RSS converged", "VmHWM", "per object", "CPU", "CPU/reconcile"
    );
    let mut per_object = Vec::new();
    for kind in Kind::ALL {
        let Some(r) = size.resource_run(kind) else { continue };
        let cpu_per = r.cpu() / r.reconciles.max(1) as f64 * 1e3;
        per_object.push((kind, r.per_object(n), cpu_per));
        println!(
            "   {:<25} {:>9.1} MiB {:>11.1} MiB {:>7.1} MiB {:>10.1} KiB {:>8.2} s {:>11.3} ms{}",
            kind.label(),
            mib(r.before.rss),
            mib(r.after.rss),
            mib(r.after.hwm),
            r.per_object(n) / 1024.0,
            r.cpu(),
            cpu_per,
            if r.instrumented { "  (instrumented run)" } else { "" }
        );
    }
    if let Some(&(_, o_mem, o_cpu)) = per_object.iter().find(|p| p.0 == Kind::Operon) {
        for (k, mem, cpu) in per_object.iter().filter(|p| p.0 != Kind::Operon) {
            println!(
                "   operon / {}: memory per cached object {:.2}x, CPU per reconcile {:.2}x",
                k.short(),
                o_mem / mem,
                o_cpu / cpu
            );
        }
        let lower = per_object.iter().filter(|p| p.0 != Kind::Operon).all(|p| o_mem < p.1);
        println!(
            "   operon memory per cached object lower than every peer's: {}",
            if lower { "met" } else { "MISSED" }
        );
    }
    println!();
}

fn report_scale(sizes: &[SizeResult]) {
    let done: Vec<&SizeResult> = sizes.iter().filter(|s| !s.runs.is_empty()).collect();
    if done.len() < 2 {
        return;
    }
    println!("== Scale: how convergence time and memory grow with the number of parents ==");
    println!(
        "   {:<25} {:>8} {:>11} {:>13} {:>14} {:>16} {:>18}",
        "", "parents", "converged", "s per 1000", "RSS converged", "RSS growth/1000", "marginal s / MiB"
    );
    for kind in Kind::ALL {
        let mut previous: Option<(usize, f64, f64)> = None;
        for s in &done {
            let (Some(t), Some(r)) = (s.median_converged(kind), s.resource_run(kind)) else { continue };
            let k = s.parents as f64 / 1000.0;
            let rss = mib(r.after.rss);
            let growth = mib(r.after.rss.saturating_sub(r.before.rss)) / k;
            let marginal = previous.map_or(String::new(), |(pn, pt, prss)| {
                let dk = (s.parents - pn) as f64 / 1000.0;
                format!("{:.2} s, {:.1} MiB", (t - pt) / dk, (rss - prss) / dk)
            });
            println!(
                "   {:<25} {:>8} {:>9.1} s {:>11.2} s {:>10.1} MiB {:>12.1} MiB {:>18}",
                kind.label(),
                s.parents,
                t,
                t / k,
                rss,
                growth,
                marginal
            );
            previous = Some((s.parents, t, rss));
        }
    }
    println!("   (marginal: growth per 1000 more parents between this size and the previous one)");
    println!();
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Every figure, as JSON, to `OUT/manager.json` (rewritten after each size).
fn write_results(args: &Args, machine: &str, sizes: &[SizeResult]) -> Result<()> {
    let sizes: Vec<Value> = sizes
        .iter()
        .map(|s| {
            let runs: Vec<Value> = s
                .runs
                .iter()
                .map(|r| {
                    json!({
                        "controller": r.kind.short(), "instrumented": r.instrumented,
                        "created_s": r.created, "converged_s": r.converged,
                        "reconciles": r.reconciles, "reconcile_errors": r.errors,
                        "writes": {"finalizer": r.finalizer, "children": r.apply, "status": r.status, "events": r.events},
                        "rss_synced_bytes": r.before.rss, "rss_converged_bytes": r.after.rss, "hwm_bytes": r.after.hwm,
                        "rss_per_object_bytes": r.per_object(s.parents),
                        "cpu_s": r.cpu(), "apiserver_cpu_s": r.apiserver_cpu, "etcd_cpu_s": r.etcd_cpu,
                        "other_cpu_s": r.other_cpu, "load_1m": r.load,
                        "cleanup_s": r.cleanup,
                    })
                })
                .collect();
            let latencies: Vec<Value> = s
                .latencies
                .iter()
                .map(|(k, samples)| {
                    let mut v: Vec<f64> =
                        samples.iter().filter_map(|x| Some((x.start? - x.watch) as f64 / 1e6)).collect();
                    v.sort_by(f64::total_cmp);
                    json!({"controller": k.short(), "samples": samples.len(), "recorded": v.len(),
                           "event_to_start_ms": {"p50": pct(&v, 50.0), "p99": pct(&v, 99.0), "max": v.last()}})
                })
                .collect();
            json!({"parents": s.parents, "control_plane_start_s": s.plane_start, "total_s": s.total,
                   "error": s.error, "runs": runs, "latency": latencies})
        })
        .collect();
    let doc = json!({
        "machine": machine, "workers": args.workers, "rounds": args.rounds,
        "command": std::env::args().collect::<Vec<_>>().join(" "), "sizes": sizes,
    });
    std::fs::write(args.out.join("manager.json"), serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

/// Convergence time and RSS at convergence against the number of parents.
fn plot_svg(args: &Args, sizes: &[SizeResult], machine: &str) -> String {
    let series = |f: &dyn Fn(&SizeResult, Kind) -> Option<f64>| -> Vec<plot::Series> {
        args.contenders
            .iter()
            .map(|&k| plot::Series {
                label: k.label().to_string(),
                color: k.color(),
                points: sizes.iter().filter_map(|s| Some((s.parents as f64, f(s, k)?))).collect(),
            })
            .collect()
    };
    let panels = [
        plot::Panel {
            title: "Convergence time (mean of runs)".into(),
            y_label: "seconds".into(),
            series: series(&|s, k| s.median_converged(k)),
        },
        plot::Panel {
            title: "RSS of the controller at convergence".into(),
            y_label: "MiB".into(),
            series: series(&|s, k| Some(mib(s.resource_run(k)?.after.rss))),
        },
    ];
    plot::svg(
        &format!("WebApp controllers, {} workers each, one envtest control plane per size", args.workers),
        "WebApps (each with a Deployment and a Service)",
        &panels,
        machine,
    )
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
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/webapp/crd.yaml");
    Ok(serde_saphyr::from_str(&std::fs::read_to_string(&path).with_context(|| path.display().to_string())?)?)
}

/// `target/guests`, or `$OPERON_GUESTS_DIR`.
fn guests_dir() -> PathBuf {
    std::env::var_os("OPERON_GUESTS_DIR").map(PathBuf::from).unwrap_or_else(|| target_dir().join("guests"))
}
