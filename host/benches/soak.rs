//! The soak (`cargo xtask soak --minutes N`): several controllers in one
//! manager under steady churn, with periodic module swaps and a leader
//! `kill -9`, against a real control plane. Prints RSS over time, reconcile
//! errors, and whether everything converged at the end; exits non-zero if it
//! did not converge or if memory grew after warm-up.
//!
//! - Control plane: envtest (etcd, kube-apiserver, kube-controller-manager
//!   for garbage collection) with the WebApp, Thing and Ticker CRDs.
//! - Replicas: two `operon run --leader-elect` processes, each running three
//!   modules: `rust-webapp` (WebApps → Deployment, Service, Ingress), `echo`
//!   (Things → ConfigMaps, status, events) and `ticker` (Tickers, requeued
//!   every second, with a ConfigMap child). Switching to Reconciler
//!   resources means creating three Reconcilers instead of passing three
//!   `--module` flags (`Replica::start`).
//! - Churn, every second: a few WebApps rescaled, a few Things moved to a new
//!   version (one child kept, one replaced), a Ticker's message changed;
//!   every fifth second one WebApp and one Thing deleted and recreated.
//! - Swaps: the echo module file is rewritten every sixth of the run with an
//!   equivalent module of another digest (a custom section appended), so
//!   `operon run` loads and swaps it.
//! - At a quarter of the run (15 s at least) the leader is killed with
//!   SIGKILL and a new replica started in its place.
//! - Memory: VmRSS of every replica every 5 s. "Flat" means the final
//!   leader's RSS at the end is within 8 MiB or 5 % (the larger) of its
//!   lowest sample after warm-up (its first quarter-run as leader, 10 s at
//!   least).
//!
//! Writes `target/soak/`: the replicas' logs and `soak.json`.

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAMESPACE: &str = "soak";

struct Args {
    minutes: f64,
    webapps: usize,
    things: usize,
    tickers: usize,
}

fn args() -> Args {
    let mut a = Args { minutes: 1.0, webapps: 60, things: 60, tickers: 20 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value")).clone();
        match arg.as_str() {
            "--minutes" => a.minutes = value().parse().expect("--minutes N"),
            "--webapps" => a.webapps = value().parse().expect("--webapps N"),
            "--things" => a.things = value().parse().expect("--things N"),
            "--tickers" => a.tickers = value().parse().expect("--tickers N"),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// A tiny deterministic generator: the soak needs variety, not statistics.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn crd(
    kind: &str,
    plural: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.operon.dev")},
        "spec": {
            "group": "example.operon.dev", "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
        }
    }))
    .unwrap()
}

fn webapp_crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_saphyr::from_str(&std::fs::read_to_string(root().join("guest-examples/webapp/crd.yaml")).unwrap()).unwrap()
}

fn api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", kind));
    Api::namespaced_with(client.clone(), NAMESPACE, &ar)
}

/// One `operon run` process.
struct Replica {
    id: usize,
    child: Child,
    metrics: String,
}

impl Replica {
    fn start(id: usize, dir: &Path, kubeconfig: &Path) -> Replica {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.join(format!("replica-{id}.log"))).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_operon"));
        cmd.arg("run");
        for module in ["rust-webapp", "echo", "ticker"] {
            cmd.arg("--module").arg(dir.join(format!("{module}.wasm")));
        }
        cmd.args(["--namespace", NAMESPACE, "--leader-elect", "--leader-election-namespace", NAMESPACE])
            .args(["--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s"])
            .args(["--leader-elect-retry-period", "500ms", "--max-concurrent-reconciles", "4"])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}"), "--metrics-secure=false"])
            .args(["--health-probe-bind-address", "0"])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "warn,operon=info")
            .env("XDG_CACHE_HOME", dir.join(format!("cache-{id}")))
            .stdout(Stdio::null())
            .stderr(log);
        let child = cmd.spawn().expect("starting operon run");
        Replica { id, child, metrics: format!("http://127.0.0.1:{port}/metrics") }
    }

    fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kb: f64 =
            status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb / 1024.0)
    }

    async fn scrape(&self) -> Option<String> {
        reqwest::get(&self.metrics).await.ok()?.text().await.ok()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sum of the series whose name is `name` (any labels).
fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum::<f64>()
        + 0.0
}

fn leads(text: &str) -> bool {
    text.lines().any(|l| l.starts_with("leader_election_master_status{") && l.ends_with(" 1"))
}

/// `bytes` with a custom section appended: the same component, another digest.
fn with_custom_section(bytes: &[u8], tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"operon-soak";
    let mut payload = Vec::new();
    leb(name.len(), &mut payload);
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0);
    leb(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

fn thing_spec(name: &str, version: u64) -> Value {
    let second = if version % 2 == 0 { "b" } else { "c" };
    let desired: Vec<Value> = ["a", second]
        .iter()
        .map(|s| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-{s}")}, "data": {"version": version.to_string()}}))
        .collect();
    json!({"desired": desired, "status": {"version": version}, "events": [{"reason": "Version", "message": format!("version {version}")}]})
}

async fn create(api: &Api<DynamicObject>, kind: &str, name: &str, spec: Value) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    let _ = api.create(&PostParams::default(), &obj).await;
}

/// What is not converged yet, or `None`.
async fn lagging(client: &kube::Client, webapps: usize, things: usize) -> Option<String> {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let deployments = deployments.list(&ListParams::default()).await.ok()?.items;
    for w in api(client, "WebApp").list(&ListParams::default()).await.ok()?.items {
        let name = w.metadata.name.clone().unwrap_or_default();
        let want = w.data.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1) as i32;
        let have = deployments
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(&name))
            .and_then(|d| d.spec.as_ref()?.replicas);
        if have != Some(want) {
            return Some(format!("WebApp {name}: Deployment replicas {have:?}, want {want}"));
        }
    }
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let cms = cms.list(&ListParams::default()).await.ok()?.items;
    let all_things = api(client, "Thing").list(&ListParams::default()).await.ok()?.items;
    if all_things.len() != things {
        return Some(format!("{} Things, want {things}", all_things.len()));
    }
    for t in all_things {
        let name = t.metadata.name.clone().unwrap_or_default();
        let uid = t.metadata.uid.clone().unwrap_or_default();
        let want = t.data.pointer("/spec/status/version").and_then(Value::as_u64);
        let have = t.data.pointer("/status/version").and_then(Value::as_u64);
        if want != have {
            return Some(format!("Thing {name}: status.version {have:?}, want {want:?}"));
        }
        let children: Vec<_> = cms
            .iter()
            .filter(|c| c.metadata.owner_references.iter().flatten().any(|o| o.uid == uid))
            .filter_map(|c| Some((c.metadata.name.clone()?, c.data.as_ref()?.get("version")?.clone())))
            .collect();
        let version = want.unwrap_or_default().to_string();
        if children.len() != 2 || children.iter().any(|(_, v)| *v != version) {
            return Some(format!("Thing {name}: children {children:?}, want two at version {version}"));
        }
    }
    let _ = webapps;
    for t in api(client, "Ticker").list(&ListParams::default()).await.ok()?.items {
        let name = t.metadata.name.clone().unwrap_or_default();
        let want = t.data.pointer("/spec/message").cloned();
        let have = t.data.pointer("/status/message").cloned();
        let child = cms.iter().find(|c| c.metadata.name.as_deref() == Some(&format!("{name}-tick")));
        let child_message = child.and_then(|c| c.data.as_ref()?.get("message").cloned()).map(Value::String);
        if want != have || child_message != want {
            return Some(format!("Ticker {name}: status {have:?}, child {child_message:?}, want {want:?}"));
        }
    }
    None
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let dir = root().join("target/soak");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let guests = root().join("target/guests");
    for module in ["rust-webapp", "echo", "ticker"] {
        std::fs::copy(guests.join(format!("{module}.wasm")), dir.join(format!("{module}.wasm")))
            .unwrap_or_else(|e| panic!("{module}.wasm: {e}; run `cargo xtask guests`"));
    }
    let echo = std::fs::read(dir.join("echo.wasm")).unwrap();

    eprintln!("soak: starting the control plane");
    let plane = operon_envtest::ControlPlane::start(
        operon_envtest::Options::with_controller_manager()
            .crd(webapp_crd())
            .crd(crd("Thing", "things"))
            .crd(crd("Ticker", "tickers")),
    )
    .expect("control plane");
    let client = plane.client().await;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    let (webapps, things, tickers) = (api(&client, "WebApp"), api(&client, "Thing"), api(&client, "Ticker"));
    let mut versions = vec![1u64; args.things];
    for i in 0..args.webapps {
        create(&webapps, "WebApp", &format!("web-{i}"), json!({"image": "nginx:1.27", "replicas": 1})).await;
    }
    for i in 0..args.things {
        let name = format!("thing-{i}");
        create(&things, "Thing", &name, thing_spec(&name, 1)).await;
    }
    for i in 0..args.tickers {
        create(&tickers, "Ticker", &format!("tick-{i}"), json!({"everyMs": 1000, "message": "m0"})).await;
    }

    let mut replicas =
        vec![Replica::start(0, &dir, plane.kubeconfig_path()), Replica::start(1, &dir, plane.kubeconfig_path())];
    let mut next_id = 2;
    let started = Instant::now();
    let kill_at = (total / 4).max(Duration::from_secs(15));
    let swap_every = (total / 6).max(Duration::from_secs(10));
    let mut killed: Option<(usize, Duration)> = None;
    let mut swaps = 0;
    let mut next_swap = swap_every;
    let mut next_sample = Duration::ZERO;
    // (seconds, replica, rss MiB, leads, reconciles, errors)
    let mut samples: Vec<(f64, usize, f64, bool, f64, f64)> = Vec::new();
    let mut leader_since: Vec<(usize, f64)> = Vec::new();
    let mut rng = Lcg(42);
    let mut tick = 0u64;
    let mut errors_of_killed = 0.0;
    eprintln!(
        "soak: {:.1} min, {} WebApps, {} Things, {} Tickers, 3 controllers per replica",
        args.minutes, args.webapps, args.things, args.tickers
    );
    while started.elapsed() < total {
        let now = started.elapsed();
        tick += 1;
        // Churn.
        for _ in 0..3 {
            let i = rng.below(args.webapps);
            let patch = json!({"spec": {"replicas": 1 + rng.below(5)}});
            let _ = webapps.patch(&format!("web-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await;
            let i = rng.below(args.things);
            versions[i] += 1;
            let name = format!("thing-{i}");
            let _ = things
                .patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": thing_spec(&name, versions[i])})))
                .await;
        }
        let i = rng.below(args.tickers);
        let patch = json!({"spec": {"message": format!("m{tick}")}});
        let _ = tickers.patch(&format!("tick-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await;
        if tick % 5 == 0 {
            let i = rng.below(args.webapps);
            let name = format!("web-{i}");
            let _ = webapps.delete(&name, &DeleteParams::default()).await;
            wait_gone(&webapps, &name).await;
            create(&webapps, "WebApp", &name, json!({"image": "nginx:1.27", "replicas": 2})).await;
            let i = rng.below(args.things);
            let name = format!("thing-{i}");
            let _ = things.delete(&name, &DeleteParams::default()).await;
            wait_gone(&things, &name).await;
            versions[i] += 1;
            create(&things, "Thing", &name, thing_spec(&name, versions[i])).await;
        }
        // Swap.
        if now >= next_swap {
            swaps += 1;
            let bytes =
                if swaps % 2 == 1 { with_custom_section(&echo, &format!("swap-{swaps}")) } else { echo.clone() };
            let tmp = dir.join("echo.wasm.tmp");
            std::fs::write(&tmp, bytes).unwrap();
            std::fs::rename(&tmp, dir.join("echo.wasm")).unwrap();
            eprintln!("soak: {:>5.1}s swap {swaps} of the echo module", now.as_secs_f64());
            next_swap += swap_every;
        }
        // Kill the leader.
        if killed.is_none() && now >= kill_at {
            let mut leader = None;
            for (i, r) in replicas.iter().enumerate() {
                if r.scrape().await.is_some_and(|t| leads(&t)) {
                    leader = Some(i);
                }
            }
            if let Some(i) = leader {
                let mut r = replicas.remove(i);
                errors_of_killed =
                    r.scrape().await.map_or(0.0, |t| sum(&t, "controller_runtime_reconcile_errors_total"));
                r.child.kill().unwrap();
                r.child.wait().unwrap();
                eprintln!("soak: {:>5.1}s kill -9 of the leader (replica {})", now.as_secs_f64(), r.id);
                killed = Some((r.id, now));
                replicas.push(Replica::start(next_id, &dir, plane.kubeconfig_path()));
                next_id += 1;
            }
        }
        // Sample.
        if now >= next_sample {
            for r in &replicas {
                let text = r.scrape().await.unwrap_or_default();
                let l = leads(&text);
                if l && leader_since.last().map(|(id, _)| *id) != Some(r.id) {
                    leader_since.push((r.id, now.as_secs_f64()));
                }
                let sample = (
                    now.as_secs_f64(),
                    r.id,
                    r.rss_mib().unwrap_or(0.0),
                    l,
                    sum(&text, "controller_runtime_reconcile_total"),
                    sum(&text, "controller_runtime_reconcile_errors_total"),
                );
                eprintln!(
                    "soak: {:>5.1}s replica {} rss {:>6.1} MiB {} reconciles {:>7} errors {:>4}",
                    sample.0,
                    sample.1,
                    sample.2,
                    if sample.3 { "leader " } else { "standby" },
                    sample.4,
                    sample.5
                );
                samples.push(sample);
            }
            next_sample += Duration::from_secs(5);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    eprintln!("soak: churn stopped; waiting for convergence");
    let settle = Instant::now();
    let mut last = String::new();
    let converged = loop {
        match lagging(&client, args.webapps, args.things).await {
            None => break true,
            Some(why) => last = why,
        }
        if settle.elapsed() > Duration::from_secs(180) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let converge_time = settle.elapsed();

    // The final leader's memory after its warm-up.
    let mut final_leader = None;
    let mut errors = errors_of_killed;
    let mut reconciles = 0.0;
    for r in &replicas {
        if let Some(text) = r.scrape().await {
            errors += sum(&text, "controller_runtime_reconcile_errors_total");
            reconciles += sum(&text, "controller_runtime_reconcile_total");
            if leads(&text) {
                final_leader = Some(r.id);
            }
        }
    }
    let leader = final_leader.expect("a leader at the end");
    let since = leader_since.iter().rev().find(|(id, _)| *id == leader).map_or(0.0, |(_, t)| *t);
    let warmup = (total.as_secs_f64() / 4.0).max(10.0);
    let after: Vec<f64> = samples.iter().filter(|s| s.1 == leader && s.0 >= since + warmup).map(|s| s.2).collect();
    let end_rss = replicas.iter().find(|r| r.id == leader).and_then(Replica::rss_mib).unwrap_or(0.0);
    let low = after.iter().copied().fold(f64::INFINITY, f64::min).min(end_rss);
    let growth = end_rss - low;
    let allowed = (low * 0.05).max(8.0);
    let flat = growth <= allowed;

    println!(
        "soak: {:.1} min, {} swaps, leader killed at {:?}",
        args.minutes,
        swaps,
        killed.map(|(id, at)| (id, at.as_secs_f64()))
    );
    println!("RSS over time (MiB):");
    println!("  t(s)  replica  role     rss    reconciles  errors");
    for s in &samples {
        println!(
            "  {:>5.0}  {:>7}  {:<7}  {:>5.1}  {:>10}  {:>6}",
            s.0,
            s.1,
            if s.3 { "leader" } else { "standby" },
            s.2,
            s.4,
            s.5
        );
    }
    println!(
        "final leader: replica {leader}, leading since {since:.0}s; RSS after warm-up: lowest {low:.1} MiB, end {end_rss:.1} MiB, growth {growth:+.1} MiB (allowed {allowed:.1}): {}",
        if flat { "flat" } else { "GROWING" }
    );
    println!(
        "reconciles (live replicas): {reconciles}; reconcile errors (all replicas, incl. the killed one): {errors}"
    );
    println!(
        "converged: {} ({:.1?} after the churn stopped){}",
        if converged { "yes" } else { "NO" },
        converge_time,
        if converged { String::new() } else { format!("; still: {last}") }
    );
    let record = json!({
        "minutes": args.minutes, "swaps": swaps, "killed": killed.map(|(id, at)| json!({"replica": id, "at": at.as_secs_f64()})),
        "samples": samples.iter().map(|s| json!({"t": s.0, "replica": s.1, "rssMiB": s.2, "leader": s.3, "reconciles": s.4, "errors": s.5})).collect::<Vec<_>>(),
        "finalLeader": leader, "rssLowAfterWarmupMiB": low, "rssEndMiB": end_rss, "flat": flat,
        "reconcileErrors": errors, "converged": converged, "convergeSeconds": converge_time.as_secs_f64(),
    });
    std::fs::write(dir.join("soak.json"), serde_json::to_string_pretty(&record).unwrap()).unwrap();
    drop(replicas);
    drop(plane);
    if !converged || !flat {
        std::process::exit(1);
    }
}

async fn wait_gone(api: &Api<DynamicObject>, name: &str) {
    for _ in 0..100 {
        if matches!(api.get_opt(name).await, Ok(None)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
