//! Faults against the real control plane. Each runs a workload of parents
//! whose spec keeps changing (the `echo` guest: two ConfigMap children, one
//! of which alternates, so pruning is exercised; a status and an event per
//! version), injects one fault mid-run, and ends with every parent
//! converged: exactly its desired children at the last version (nothing
//! lost, nothing left over or doubled), its status at the last version, and
//! the event of the last version recorded.
//!
//! - the API server killed and restarted mid-run;
//! - watches expired: etcd compacted and the API server's watch cache
//!   restarted while the host was cut off, so its watches resume from a
//!   revision that is gone (410 Gone) and must re-list;
//! - the connection between host and API server cut and restored (a TCP
//!   proxy on loopback that the test controls);
//! - `kill -9` of the leader under load, with two and with three `operon
//!   run` replicas (never two leaders at once);
//! - status writes racing another writer of the same status.

use crate::common;

use common::{eventually, free_port, guest, thing_crd};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CONVERGE: Duration = Duration::from_secs(120);
/// Most versions a churn moves the parents through (see `Workload::churn`).
const MAX_CHURN_VERSIONS: u64 = 12;
const PARENTS: usize = 20;

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("faults", || operon_envtest::Options::default().crd(thing_crd()))
}

fn own_plane() -> operon_envtest::ControlPlane {
    tokio::task::block_in_place(|| {
        operon_envtest::ControlPlane::start(operon_envtest::Options::default().crd(thing_crd()))
    })
    .expect("control plane")
}

fn init_logs() {
    crate::common::logs::init();
}

// ---------------------------------------------------------------------------
// The workload

/// Parents whose spec the test keeps changing, through its own (admin)
/// client, never through the host's connection.
struct Workload {
    client: kube::Client,
    namespace: String,
    version: AtomicU64,
}

fn things(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing"));
    Api::namespaced_with(client.clone(), namespace, &ar)
}

fn parent_name(i: usize) -> String {
    format!("p-{i}")
}

/// The children a parent wants at `version`: `-a` always, then `-b` at even
/// versions and `-c` at odd ones (so every change also prunes one).
fn children(parent: &str, version: u64) -> BTreeSet<String> {
    let second = if version % 2 == 0 { "b" } else { "c" };
    [format!("{parent}-a"), format!("{parent}-{second}")].into()
}

fn spec(parent: &str, version: u64) -> Value {
    let desired: Vec<Value> = children(parent, version)
        .into_iter()
        .map(|name| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {"parent": parent}}, "data": {"version": version.to_string()}})
        })
        .collect();
    json!({
        "desired": desired,
        "status": {"version": version},
        "events": [{"reason": "Version", "message": format!("version {version}")}],
        "eventsOnChange": true,
    })
}

impl Workload {
    async fn create(client: kube::Client, namespace: &str) -> Arc<Workload> {
        let w = Arc::new(Workload { client, namespace: namespace.to_string(), version: AtomicU64::new(1) });
        let api = things(&w.client, namespace);
        for i in 0..PARENTS {
            let name = parent_name(i);
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
                "metadata": {"name": name}, "spec": spec(&name, 1)
            }))
            .unwrap();
            api.create(&PostParams::default(), &obj).await.unwrap();
        }
        w
    }

    /// Moves every parent to the next version; returns it. Failures (the API
    /// server may be down) are retried until each patch lands.
    async fn bump(&self) -> u64 {
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        let api = things(&self.client, &self.namespace);
        for i in 0..PARENTS {
            let name = parent_name(i);
            let patch = json!({"spec": spec(&name, version)});
            loop {
                match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
        version
    }

    /// Keeps bumping every `every` until `stop` is set, up to
    /// [`MAX_CHURN_VERSIONS`]: each version is an event of the guest per
    /// parent (once, or twice when a reconcile runs before the cache holds
    /// the new status), and the host's recorder, like client-go's, throttles
    /// an object after a burst of 25 events (one more every 10 s). Beyond
    /// that the last version's event would be dropped by design, not lost to
    /// the fault, and the check that it was recorded would mean nothing.
    fn churn(self: &Arc<Self>, every: Duration) -> (Arc<AtomicBool>, tokio::task::JoinHandle<()>) {
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (self.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::SeqCst) {
                if w.version.load(Ordering::SeqCst) < MAX_CHURN_VERSIONS {
                    w.bump().await;
                }
                tokio::time::sleep(every).await;
            }
        });
        (stop, task)
    }

    /// `None` once every parent is at `version`, else what is not yet.
    async fn lagging(&self, client: &kube::Client, version: u64) -> Option<String> {
        let api = things(client, &self.namespace);
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &self.namespace);
        let events: Api<Event> = Api::namespaced(client.clone(), &self.namespace);
        let all_cms = match cms.list(&ListParams::default().labels("parent")).await {
            Ok(l) => l.items,
            Err(e) => return Some(format!("listing ConfigMaps: {e}")),
        };
        let all_events = match events.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(e) => return Some(format!("listing events: {e}")),
        };
        for i in 0..PARENTS {
            let name = parent_name(i);
            let parent = match api.get(&name).await {
                Ok(p) => p,
                Err(e) => return Some(format!("{name}: {e}")),
            };
            let uid = parent.metadata.uid.clone().unwrap_or_default();
            let status = parent.data.pointer("/status/version").and_then(Value::as_u64);
            if status != Some(version) {
                return Some(format!("{name}: status.version {status:?}, want {version}"));
            }
            let mine: Vec<&ConfigMap> = all_cms
                .iter()
                .filter(|c| c.metadata.labels.as_ref().and_then(|l| l.get("parent")) == Some(&name))
                .collect();
            let names: BTreeSet<String> = mine.iter().filter_map(|c| c.metadata.name.clone()).collect();
            if names != children(&name, version) {
                return Some(format!("{name}: children {names:?}, want {:?}", children(&name, version)));
            }
            for c in &mine {
                let owner = c.metadata.owner_references.as_ref().and_then(|o| o.first()).map(|o| o.uid.clone());
                if owner.as_deref() != Some(uid.as_str()) {
                    return Some(format!("{name}: child {:?} owned by {owner:?}", c.metadata.name));
                }
                let v = c.data.as_ref().and_then(|d| d.get("version")).cloned();
                if v != Some(version.to_string()) {
                    return Some(format!("{name}: child {:?} at version {v:?}", c.metadata.name));
                }
            }
            let note = format!("version {version}");
            let recorded = all_events.iter().any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                    && e.note.as_deref() == Some(note.as_str())
            });
            if !recorded {
                return Some(format!("{name}: no event {note:?}"));
            }
        }
        None
    }

    /// Waits until every parent is at the current version; panics with what
    /// lags behind after [`CONVERGE`].
    async fn converged(&self, client: &kube::Client) -> Duration {
        let version = self.version.load(Ordering::SeqCst);
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < CONVERGE {
            match self.lagging(client, version).await {
                None => return started.elapsed(),
                Some(why) => last = why,
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("not converged to version {version} after {CONVERGE:?}: {last}");
    }
}

// ---------------------------------------------------------------------------
// The host, in process

/// What the host's client sent: every request line, with when.
#[derive(Clone, Default)]
struct Requests(Arc<Mutex<Vec<(Instant, String, String)>>>);

impl Requests {
    fn client(&self, config: kube::Config) -> kube::Client {
        let seen = self.clone();
        let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            let line = format!("{}", req.uri().path_and_query().map(|p| p.as_str()).unwrap_or_default());
            seen.0.lock().unwrap().push((Instant::now(), req.method().to_string(), line));
            req
        });
        kube::client::ClientBuilder::try_from(config).unwrap().with_layer(&layer).build()
    }

    /// Lists (not watches) of Things sent after `t`: re-lists.
    fn thing_lists_since(&self, t: Instant) -> usize {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|(at, method, line)| {
                *at > t && method == "GET" && line.contains("/things") && !line.contains("watch=true")
            })
            .count()
    }
}

struct Host {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), manager::Error>>,
}

impl Host {
    async fn start(client: kube::Client, namespace: &str) -> Host {
        init_logs();
        let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
        let mgr = Manager::builder(client)
            .config(manager::Config {
                pipeline: operon::pipeline::Config {
                    namespace: Some(namespace.to_string()),
                    controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
                    ..Default::default()
                },
                server_addr: None,
                ..Default::default()
            })
            .build()
            .await
            .unwrap();
        mgr.add(rt.load(&guest("echo"), Limits::default()).unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(mgr.run(async move {
            let _ = stopped.await;
        }));
        Host { stop: Some(stop), task }
    }

    async fn stop(mut self) {
        assert!(!self.task.is_finished(), "the manager stopped by itself");
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

// ---------------------------------------------------------------------------
// A TCP proxy the test controls

/// Forwards loopback connections to the API server until cut. Cutting
/// closes every open connection (the host sees its watches and requests
/// die mid-stream) and refuses new ones until restored.
struct Proxy {
    port: u16,
    open: Arc<AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        let is_open = open.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { return };
                if !is_open.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let mut cuts = cuts.clone();
                // Only cuts from now on end this connection.
                cuts.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Proxy { port, open, cut, task }
    }

    /// A client configuration for the API server, through this proxy.
    fn config(&self, plane: &operon_envtest::ControlPlane) -> kube::Config {
        let mut config = plane.config();
        config.cluster_url = format!("https://127.0.0.1:{}", self.port).parse().unwrap();
        config
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn apiserver_addr(plane: &operon_envtest::ControlPlane) -> std::net::SocketAddr {
    let url: http::Uri = plane.server().parse().unwrap();
    std::net::SocketAddr::from(([127, 0, 0, 1], url.port_u16().unwrap()))
}

// ---------------------------------------------------------------------------
// etcd, for compaction

/// etcd's client URL, from the running kube-apiserver's `--etcd-servers`.
fn etcd_url(plane: &operon_envtest::ControlPlane) -> String {
    let pid = plane.pids()[1];
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("kube-apiserver's command line");
    cmdline
        .split(|b| *b == 0)
        .filter_map(|a| std::str::from_utf8(a).ok())
        .find_map(|a| a.strip_prefix("--etcd-servers="))
        .expect("--etcd-servers")
        .split(',')
        .next()
        .unwrap()
        .to_string()
}

/// Compacts etcd's whole history up to its current revision (etcd's JSON
/// gateway); returns that revision.
async fn compact_etcd(url: &str) -> u64 {
    let http = reqwest::Client::new();
    let range = http.post(format!("{url}/v3/kv/range")).body(json!({"key": "Lw=="}).to_string()).send().await.unwrap();
    let range: Value = serde_json::from_str(&range.text().await.unwrap()).unwrap();
    let revision: u64 = range["header"]["revision"].as_str().and_then(|r| r.parse().ok()).expect("etcd revision");
    let resp = http
        .post(format!("{url}/v3/kv/compaction"))
        .body(json!({"revision": revision.to_string(), "physical": true}).to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "compaction: {}", resp.text().await.unwrap_or_default());
    revision
}

// ---------------------------------------------------------------------------
// The faults

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_killed_and_restarted_mid_run_loses_no_write() {
    let mut plane = own_plane();
    let admin = plane.client().await;
    let ns = operon_envtest::create_namespace(&admin, "fault-restart").await.unwrap();
    let host = Host::start(plane.client().await, &ns).await;
    let w = Workload::create(admin.clone(), &ns).await;
    w.converged(&admin).await;

    let (stop, churn) = w.churn(Duration::from_millis(300));
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| plane.restart_apiserver(Duration::from_secs(3), Duration::from_secs(60)))
        .expect("the API server comes back");
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    churn.await.unwrap();
    let admin = plane.client().await;
    w.bump().await;
    let took = w.converged(&admin).await;
    eprintln!("fault restart: converged {took:?} after the last change");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_expire_are_re_listed_and_lose_no_write() {
    let mut plane = own_plane();
    let admin = plane.client().await;
    let ns = operon_envtest::create_namespace(&admin, "fault-410").await.unwrap();
    let proxy = Proxy::start(apiserver_addr(&plane)).await;
    let requests = Requests::default();
    let host = Host::start(requests.client(proxy.config(&plane)), &ns).await;
    let w = Workload::create(admin.clone(), &ns).await;
    w.converged(&admin).await;
    let etcd = etcd_url(&plane);

    // Cut off, the host's watches stop at some resourceVersion. Meanwhile
    // the parents change, etcd forgets the history, and the API server's
    // watch cache starts over after a restart: that resourceVersion is gone.
    proxy.cut();
    let cut_at = Instant::now();
    w.bump().await;
    w.bump().await;
    let revision = compact_etcd(&etcd).await;
    tokio::task::block_in_place(|| plane.restart_apiserver(Duration::from_secs(1), Duration::from_secs(60)))
        .expect("the API server comes back");
    let admin = plane.client().await;
    w.bump().await;
    proxy.restore();
    let took = w.converged(&admin).await;
    let relists = requests.thing_lists_since(cut_at);
    eprintln!("fault 410: compacted at revision {revision}; {relists} re-lists of Things; converged in {took:?}");
    assert!(relists >= 1, "the host never re-listed Things after its watch expired");
    host.stop().await;
}

#[tokio::test]
async fn a_connection_cut_and_restored_loses_no_write() {
    let admin = plane().client().await;
    let ns = operon_envtest::create_namespace(&admin, "fault-cut").await.unwrap();
    let proxy = Proxy::start(apiserver_addr(plane())).await;
    let host = Host::start(kube::Client::try_from(proxy.config(plane())).unwrap(), &ns).await;
    let w = Workload::create(admin.clone(), &ns).await;
    w.converged(&admin).await;

    let (stop, churn) = w.churn(Duration::from_millis(1000));
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.cut();
        tokio::time::sleep(Duration::from_secs(5)).await;
        proxy.restore();
    }
    stop.store(true, Ordering::SeqCst);
    churn.await.unwrap();
    w.bump().await;
    let took = w.converged(&admin).await;
    eprintln!("fault cut: three 5 s cuts; converged {took:?} after the last change");
    host.stop().await;
}

#[tokio::test]
async fn status_writes_racing_another_writer_lose_nothing() {
    let admin = plane().client().await;
    let ns = operon_envtest::create_namespace(&admin, "fault-status").await.unwrap();
    let host = Host::start(plane().client().await, &ns).await;
    let w = Workload::create(admin.clone(), &ns).await;
    w.converged(&admin).await;

    // Another writer updates the same parents' status, with optimistic
    // concurrency (the resourceVersion it read): it meets conflicts when the
    // host wrote in between; the host's server-side applies must not.
    let (stop, churn) = w.churn(Duration::from_millis(400));
    let api = things(&admin, &ns);
    let mut conflicts = 0;
    let mut written = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(8) {
        for i in 0..PARENTS {
            let name = parent_name(i);
            let Ok(mut p) = api.get_status(&name).await else { continue };
            let status = p.data.get_mut("status").and_then(Value::as_object_mut);
            let Some(status) = status else { continue };
            status.insert("external".into(), json!({"by": "other-writer", "n": written}));
            match api.replace_status(&name, &PostParams::default(), &p).await {
                Ok(_) => written += 1,
                Err(kube::Error::Api(s)) if s.code == 409 => conflicts += 1,
                Err(e) => panic!("the other writer failed: {e}"),
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    churn.await.unwrap();
    w.bump().await;
    let took = w.converged(&admin).await;
    eprintln!(
        "fault status: the other writer wrote {written} statuses and met {conflicts} conflicts; converged in {took:?}"
    );
    assert!(written > 0, "the other writer never wrote");
    // Nothing the host did failed because of the other writer.
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    let failed: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ApplyFailed"))
        .map(|e| e.note.unwrap_or_default())
        .collect();
    assert!(failed.is_empty(), "the host's writes failed: {failed:?}");
    host.stop().await;
}

// ---------------------------------------------------------------------------
// Leader kill -9 under load, with `operon run` processes

/// An `operon run --leader-elect` process running `echo`, killed when dropped.
struct Replica {
    child: std::process::Child,
    metrics: String,
}

impl Replica {
    fn start(namespace: &str) -> Replica {
        let port = free_port();
        let module = common::guests_dir().join("echo.wasm");
        let log = std::fs::File::create(std::env::temp_dir().join(format!("operon-fault-{port}.log"))).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_operon"))
            .args(["run", "--module", module.to_str().unwrap(), "--namespace", namespace, "--leader-elect"])
            .args(["--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s"])
            .args(["--leader-elect-retry-period", "500ms", "--max-concurrent-reconciles", "4"])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}"), "--metrics-secure=false"])
            .args(["--health-probe-bind-address", "0"])
            .env("KUBECONFIG", plane().kubeconfig_path())
            .env("RUST_LOG", "info")
            .env("XDG_CACHE_HOME", std::env::temp_dir().join(format!("operon-fault-cache-{port}")))
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting operon");
        Replica { child, metrics: format!("http://127.0.0.1:{port}/metrics") }
    }

    /// `Some(true)` if it says it leads; `None` if it cannot be scraped.
    async fn leads(&self) -> Option<bool> {
        let text = reqwest::get(&self.metrics).await.ok()?.text().await.ok()?;
        let line = text.lines().find(|l| l.starts_with("leader_election_master_status{"))?;
        Some(line.ends_with(" 1"))
    }

    fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one replica that leads, waiting for there to be one; panics if two
/// ever say so at once.
async fn the_leader(replicas: &[Replica]) -> usize {
    eventually("one leader", Duration::from_secs(60), || async {
        let mut leaders = Vec::new();
        for (i, r) in replicas.iter().enumerate() {
            if r.leads().await == Some(true) {
                leaders.push(i);
            }
        }
        assert!(leaders.len() <= 1, "replicas {leaders:?} lead at once");
        leaders.first().copied()
    })
    .await
}

async fn kill_the_leader_under_load(count: usize) {
    init_logs();
    let admin = plane().client().await;
    let ns = operon_envtest::create_namespace(&admin, &format!("fault-kill{count}")).await.unwrap();
    let mut replicas: Vec<Replica> = (0..count).map(|_| Replica::start(&ns)).collect();
    let first = the_leader(&replicas).await;
    let w = Workload::create(admin.clone(), &ns).await;
    w.converged(&admin).await;

    let (stop, churn) = w.churn(Duration::from_millis(300));
    tokio::time::sleep(Duration::from_secs(2)).await;
    replicas[first].kill9();
    let killed = Instant::now();
    // Watch for two leaders at once among the survivors while they take over.
    let survivors: Vec<Replica> = replicas.drain(..).enumerate().filter(|(i, _)| *i != first).map(|(_, r)| r).collect();
    let next = the_leader(&survivors).await;
    let takeover = killed.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(the_leader(&survivors).await, next, "leadership moved again without a fault");
    stop.store(true, Ordering::SeqCst);
    churn.await.unwrap();
    w.bump().await;
    let took = w.converged(&admin).await;
    eprintln!(
        "fault kill -9 with {count} replicas: takeover after {takeover:?}; converged {took:?} after the last change"
    );
}

#[tokio::test]
async fn a_leader_killed_under_load_with_two_replicas_loses_no_write() {
    kill_the_leader_under_load(2).await;
}

#[tokio::test]
async fn a_leader_killed_under_load_with_three_replicas_loses_no_write() {
    kill_the_leader_under_load(3).await;
}
