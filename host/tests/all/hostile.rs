//! Hostile plugins and hostile resources, against a real API server.
//!
//! Every test runs one manager with two controllers: the `hostile` guest
//! (Things; its parent's `spec.mode` names the attack) and its neighbour,
//! the well-behaved `rust-webapp` (WebApps). Each attack must be cut off or
//! refused with its own error and event, must write nothing it may not, and
//! the neighbour must keep converging under load meanwhile. How much the
//! neighbour slows down is measured, not asserted here: `cargo xtask bench
//! hostile` prints it (docs/RELIABILITY.md).
//!
//! Hostile resources: parents with huge specs, names at the length limits,
//! unexpected fields, and a CRD deleted while its controller runs.
//!
//! Outsiders at the host's ports: connections held open and trickled on
//! the metrics port, and bearer tokens of an outsider's invention, each
//! costing the host an API review if nothing bounded them.

use crate::common;
use crate::common::plugins;

use common::{eventually, free_port, guest, thing_crd, webapp_crd};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
/// WebApps the neighbour keeps converging while the attack runs.
const NEIGHBOURS: usize = 10;

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("hostile", || {
        use kube::CustomResourceExt;
        operon_envtest::Options::default()
            .crd(webapp_crd())
            .crd(thing_crd())
            .crd(operon::reconciler::crd::Reconciler::crd())
            .crd(operon::reconciler::crd::ClusterReconciler::crd())
    })
}

/// A manager running `hostile` and `rust-webapp` in one namespace.
struct Host {
    client: kube::Client,
    namespace: String,
    metrics: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), manager::Error>>,
}

impl Host {
    async fn start(prefix: &str) -> Host {
        let client = plane().client().await;
        let namespace = operon_envtest::create_namespace(&client, prefix).await.unwrap();
        Host::start_on(client, namespace).await
    }

    async fn start_on(client: kube::Client, namespace: String) -> Host {
        Host::start_gated(client, namespace, runtime::GateLimits::default(), None).await
    }

    /// [`Host::start_on`] under the host-wide `gate`, with `tenant` (a
    /// namespace) running another `hostile` controller: 64 workers, 400 MiB
    /// per instance, the whole host's CPU budget shared.
    async fn start_gated(
        client: kube::Client,
        namespace: String,
        gate: runtime::GateLimits,
        tenant: Option<&str>,
    ) -> Host {
        crate::common::logs::init();
        let rt = Runtime::new(runtime::Config { artifact_dir: None, gate, ..Default::default() }).unwrap();
        let port = free_port();
        let pipeline = operon::pipeline::Config {
            namespace: Some(namespace.clone()),
            controller: operon::controller::Config { max_concurrent_reconciles: 2, ..Default::default() },
            host_cpu: operon::pipeline::Budget::new(2.0, Duration::from_secs(2), Duration::from_secs(1))
                .filter(|_| tenant.is_some())
                .map(std::sync::Arc::new),
            ..Default::default()
        };
        let mgr = Manager::builder(client.clone())
            .config(manager::Config {
                pipeline: pipeline.clone(),
                server_addr: Some(([127, 0, 0, 1], port).into()),
                ..Default::default()
            })
            .runtime(rt.clone())
            .build()
            .await
            .unwrap();
        mgr.add(rt.load(&guest("hostile"), Limits::default()).unwrap());
        mgr.add(rt.load(&guest("rust-webapp"), Limits::default()).unwrap());
        if let Some(tenant) = tenant {
            let greedy = Limits { memory: 400 << 20, ..Limits::default() };
            let config = operon::pipeline::Config {
                name: Some("tenant-a".into()),
                namespace: Some(tenant.into()),
                scope: operon::pipeline::Scope::namespace(tenant),
                controller: operon::controller::Config { max_concurrent_reconciles: 64, ..Default::default() },
                ..pipeline
            };
            mgr.add_controller(rt.load(&guest("hostile"), greedy).unwrap(), config, None).unwrap();
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(mgr.run(async move {
            let _ = stopped.await;
        }));
        Host { client, namespace, metrics: format!("http://127.0.0.1:{port}"), stop: Some(stop), task }
    }

    fn custom(&self, kind: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("example.operon.dev", "v1alpha1", kind);
        Api::namespaced_with(self.client.clone(), &self.namespace, &ApiResource::from_gvk(&gvk))
    }

    async fn thing(&self, name: &str, spec: Value) {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        self.custom("Thing").create(&PostParams::default(), &obj).await.unwrap();
    }

    /// Warning events about `name`, as `reason: note`.
    async fn warnings(&self, name: &str) -> Vec<String> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let events = events.list(&ListParams::default()).await.unwrap();
        events
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    /// Waits for a Warning event on `name` with `reason` whose note contains
    /// every one of `needles`; returns it.
    async fn warning(&self, name: &str, reason: &str, needles: &[&str]) -> String {
        let what = format!("a {reason} event on {name} saying {needles:?}");
        let event = eventually(&what, WAIT, || async {
            let prefix = format!("{reason}: ");
            self.warnings(name)
                .await
                .into_iter()
                .find(|w| w.starts_with(&prefix) && needles.iter().all(|n| w.contains(n)))
        })
        .await;
        eprintln!("hostile: {name}: {event}");
        event
    }

    async fn status(&self, name: &str) -> Option<Value> {
        self.custom("Thing").get_opt(name).await.ok()??.data.get("status").cloned()
    }

    async fn scrape(&self) -> String {
        let url = format!("{}/metrics", self.metrics);
        let resp = reqwest::get(&url).await.unwrap_or_else(|e| panic!("scraping {url}: {e}"));
        resp.text().await.unwrap()
    }

    /// One series' value; panics when it is missing.
    async fn metric(&self, series: &str) -> f64 {
        let text = self.scrape().await;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no series {series} in the metrics"))
    }

    /// Creates the neighbour's WebApps with `replicas`.
    async fn neighbours(&self, replicas: i64) {
        for i in 0..NEIGHBOURS {
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                "metadata": {"name": format!("web-{i}")}, "spec": {"image": "nginx:1.27", "replicas": replicas}
            }))
            .unwrap();
            self.custom("WebApp").create(&PostParams::default(), &obj).await.unwrap();
        }
        self.neighbours_converge(replicas).await;
    }

    /// Changes every WebApp to `replicas` and waits until the neighbour has
    /// followed: it keeps working while the attack runs.
    async fn neighbours_follow(&self, replicas: i64) {
        for i in 0..NEIGHBOURS {
            let patch = json!({"spec": {"replicas": replicas}});
            self.custom("WebApp")
                .patch(&format!("web-{i}"), &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
        self.neighbours_converge(replicas).await;
    }

    async fn neighbours_converge(&self, replicas: i64) {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        eventually(&format!("the neighbour's {NEIGHBOURS} Deployments at {replicas} replicas"), WAIT, || async {
            for i in 0..NEIGHBOURS {
                let d = deployments.get_opt(&format!("web-{i}")).await.ok()??;
                if d.spec?.replicas != Some(replicas as i32) {
                    return None;
                }
            }
            Some(())
        })
        .await;
    }

    async fn configmaps(&self) -> Vec<String> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = api.list(&ListParams::default()).await.unwrap();
        list.items.into_iter().filter_map(|c| c.metadata.name).filter(|n| n != "kube-root-ca.crt").collect()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Hostile plugins

/// Two tenants on one host under the host-wide limits `operon run` has by
/// default: tenant A's 64 workers each grow a 400 MiB instance (25 GiB if
/// nothing bounded them together) while tenant B's WebApps keep converging.
/// The host stays up, never reserves more guest memory than its limit, and
/// says tenant A waited for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_share_the_host_and_the_greedy_one_waits_for_its_share() {
    let client = plane().client().await;
    let namespace = operon_envtest::create_namespace(&client, "tenant-b").await.unwrap();
    let tenant = operon_envtest::create_namespace(&client, "tenant-a").await.unwrap();
    let gate = runtime::GateLimits { memory: 768 << 20, calls: 16 };
    let h = Host::start_gated(client.clone(), namespace, gate, Some(&tenant)).await;
    h.neighbours(1).await;
    let things = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &tenant,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing")),
    );
    for i in 0..64 {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "metadata": {"name": format!("greedy-{i}")},
            "spec": {"mode": "memory"}
        }))
        .unwrap();
        things.create(&PostParams::default(), &obj).await.unwrap();
    }
    // Sample the gate while tenant A hoards and tenant B works.
    let sampled = {
        let metrics = h.metrics.clone();
        tokio::spawn(async move {
            let mut most = 0.0f64;
            for _ in 0..100 {
                if let Ok(r) = reqwest::get(format!("{metrics}/metrics")).await
                    && let Ok(text) = r.text().await
                {
                    let reserved = text
                        .lines()
                        .find_map(|l| l.strip_prefix("operon_host_guest_memory_bytes{state=\"reserved\"} "))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .unwrap_or(0.0);
                    most = most.max(reserved);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            most
        })
    };
    for replicas in [2, 3] {
        h.neighbours_follow(replicas).await;
    }
    let most = sampled.await.unwrap();
    assert!(most > 0.0, "the gate was never seen holding memory");
    assert!(most <= (768u64 << 20) as f64, "reserved {most} bytes, over the host's 768 MiB");
    let waited = eventually("tenant A counted waiting for the host's memory", WAIT, || async {
        let text = h.scrape().await;
        text.lines()
            .filter(|l| l.starts_with("operon_host_limited_seconds_total{controller=\"tenant-a\""))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .find(|v| *v > 0.0)
    })
    .await;
    eprintln!("tenants: peak reservation {:.0} MiB; tenant A waited {waited:.1} s", most / f64::from(1 << 20));
    h.stop().await;
}

// On a runtime of two workers, as `operon run` has on two cores: guests run
// on the workers (yielding at every epoch tick), so on the test's default
// runtime of one thread the two loops would share a core, each charged
// half of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_is_cut_off_at_its_deadline_while_the_neighbour_keeps_up() {
    let h = Host::start("loop").await;
    h.neighbours(1).await;
    h.thing("spin", json!({"mode": "loop"})).await;
    h.thing("spin-2", json!({"mode": "loop"})).await;
    h.warning("spin", "ReconcileError", &["timed out after 1s", "find the loop"]).await;
    h.neighbours_follow(2).await;
    // Each call burns its whole 1 s deadline. The controller's guest CPU
    // budget (a quarter of a CPU, 2 s saved up) holds the loop to its share:
    // without it both workers would burn a core each, 24 timeouts in 12 s.
    let timeouts = r#"controller_runtime_reconcile_timeouts_total{controller="hostile"}"#;
    let throttled = r#"operon_guest_throttled_seconds_total{controller="hostile"}"#;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while h.metric(throttled).await == 0.0 {
        assert!(std::time::Instant::now() < deadline, "the looping guest was never throttled");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = h.metric(timeouts).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let burned = h.metric(timeouts).await - before;
    assert!(
        (1.0..=8.0).contains(&burned),
        "{burned} timed-out calls in 12 s: a quarter CPU allows 3 plus the calls in flight, and at least one shows the parents are still retried"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_memory_bomb_hits_its_cap_while_the_neighbour_keeps_up() {
    let h = Host::start("memory").await;
    h.neighbours(1).await;
    h.thing("hoard", json!({"mode": "memory"})).await;
    h.warning("hoard", "ReconcileError", &["exceeded its memory limit of 67108864 bytes"]).await;
    h.neighbours_follow(2).await;
    h.stop().await;
}

#[tokio::test]
async fn a_trap_storm_is_counted_and_backed_off_while_the_neighbour_keeps_up() {
    let h = Host::start("traps").await;
    h.neighbours(1).await;
    for i in 0..20 {
        h.thing(&format!("boom-{i}"), json!({"mode": "trap"})).await;
    }
    h.warning("boom-0", "ReconcileError", &["trapped:", "unreachable", "guest stack"]).await;
    h.warning("boom-19", "ReconcileError", &["trapped"]).await;
    h.neighbours_follow(3).await;
    let panics = h.metric(r#"controller_runtime_reconcile_panics_total{controller="hostile"}"#).await;
    assert!(panics >= 20.0, "{panics} traps counted for 20 trapping parents");
    h.stop().await;
}

#[tokio::test]
async fn a_giant_outcome_is_refused_and_nothing_of_it_written() {
    let h = Host::start("giant").await;
    h.neighbours(1).await;
    h.thing("big", json!({"mode": "giant", "bytes": 16 << 20})).await;
    h.warning("big", "InvalidOutcome", &["oversized outcome", "limit: 4194304"]).await;
    h.neighbours_follow(2).await;
    assert!(h.configmaps().await.iter().all(|n| !n.starts_with("giant-")), "part of a refused outcome was written");
    h.stop().await;
}

#[tokio::test]
async fn outcomes_aimed_outside_the_grants_are_refused_whole() {
    let h = Host::start("escape").await;
    h.neighbours(1).await;
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let cases = [
        (
            "kind",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "stolen"}}),
            vec!["v1 Secret stolen", "not among the kinds hostile may write"],
        ),
        (
            "namespace",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}),
            vec!["\"kube-system\"", "children live in their parent's namespace"],
        ),
        (
            "cluster",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "taken"}}),
            vec!["v1 Namespace is cluster-scoped and cannot be owned by a namespaced parent"],
        ),
        (
            "reconciler",
            json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler", "metadata": {"name": "hostile"}}),
            vec!["may never be written by a plugin", "operon.dev kinds belong to the host"],
        ),
        (
            "lease",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "operon-leader"}}),
            vec!["may never be written by a plugin", "Leases carry leader election"],
        ),
        (
            "rbac",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "me"}}),
            vec!["RBAC objects would let a plugin grant itself rights"],
        ),
    ];
    for (name, bad, _) in &cases {
        // A valid ConfigMap first: it must not be written either.
        h.thing(name, json!({"mode": "echo", "desired": [cm(&format!("{name}-ok")), bad]})).await;
    }
    for (name, _, needles) in &cases {
        h.warning(name, "InvalidOutcome", needles).await;
    }
    h.neighbours_follow(2).await;
    let written = h.configmaps().await;
    assert!(written.iter().all(|n| !n.ends_with("-ok")), "part of a refused outcome was written: {written:?}");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(h.client.clone());
    assert!(namespaces.get_opt("taken").await.unwrap().is_none());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(h.client.clone(), &h.namespace);
    assert!(leases.get_opt("operon-leader").await.unwrap().is_none());
    // Refused outcomes are terminal: one error per parent, no retry storm.
    let refused = h.metric(r#"operon_outcomes_refused_total{controller="hostile"}"#).await;
    assert_eq!(refused, cases.len() as f64, "each refused outcome counted once, not retried");
    h.stop().await;
}

#[tokio::test]
async fn reads_of_undeclared_kinds_are_refused_and_no_secret_shows_anywhere() {
    let h = Host::start("reads").await;
    h.neighbours(1).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let secret = serde_json::from_value(
        json!({"metadata": {"name": "admin-token"}, "stringData": {"token": "sup3r-s3cret-t0ken"}}),
    )
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    h.thing("peek", json!({"mode": "read-secret"})).await;
    h.warning("peek", "ReconcileFailed", &["v1 Secret may not be read", "declare it in the manifest's `reads`"]).await;
    h.neighbours_follow(2).await;
    // Neither the Secret, nor the host's credentials, nor the API server's
    // address show in what the host serves or records.
    let readyz = reqwest::get(format!("{}/readyz", h.metrics)).await.unwrap().text().await.unwrap();
    let healthz = reqwest::get(format!("{}/healthz", h.metrics)).await.unwrap().text().await.unwrap();
    let events = h.warnings("peek").await.join("\n");
    let key = std::fs::read_to_string(plane().config().auth_info.client_key.as_deref().unwrap()).unwrap();
    let key_line = key.lines().nth(1).unwrap().to_string();
    for (what, text) in [("/metrics", h.scrape().await), ("/readyz", readyz), ("/healthz", healthz), ("events", events)]
    {
        for secret in ["sup3r-s3cret-t0ken", "c3VwM3ItczNjcmV0LXQwa2Vu", "BEGIN", key_line.as_str(), plane().server()] {
            assert!(!text.contains(secret), "{what} shows {secret:?}:\n{text}");
        }
    }
    h.stop().await;
}

#[tokio::test]
async fn a_flood_of_host_calls_exhausts_its_read_budget() {
    let h = Host::start("flood").await;
    h.neighbours(1).await;
    for i in 0..20 {
        let api: Api<ConfigMap> = Api::namespaced(h.client.clone(), &h.namespace);
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}, "data": {"k": "v".repeat(1000)}}))
                .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    h.thing("flood", json!({"mode": "flood"})).await;
    h.warning("flood", "ReconcileFailed", &["after 1000 host calls", "read budget exhausted", "list once and filter"])
        .await;
    // A reconcile that reads within the budget is not refused.
    h.thing("modest", json!({"mode": "flood", "calls": 200})).await;
    eventually("the modest reader's status", WAIT, || async { h.status("modest").await.filter(|s| s["calls"] == 200) })
        .await;
    h.neighbours_follow(2).await;
    h.stop().await;
}

#[tokio::test]
async fn a_requeue_storm_is_held_to_the_floor_and_the_requeue_budget() {
    let h = Host::start("requeues").await;
    h.neighbours(1).await;
    for i in 0..10 {
        h.thing(&format!("storm-{i}"), json!({"mode": "requeue"})).await;
    }
    h.warning("storm-0", "RequeueTooSoon", &["raised to the host's floor of 100ms"]).await;
    h.neighbours_follow(2).await;
    let raised = h.metric(r#"operon_requeue_raised_total{controller="hostile"}"#).await;
    assert!(raised >= 10.0, "requeues raised: {raised}");
    let warnings = h.warnings("storm-0").await;
    let count = warnings.iter().filter(|w| w.starts_with("RequeueTooSoon")).count();
    assert_eq!(count, 1, "one RequeueTooSoon event per parent, not one per reconcile: {warnings:?}");
    // Ten parents at the 100 ms floor ask for 100 reconciles a second; the
    // controller's requeue budget (10 a second once its burst of 100 is
    // spent) spreads them out.
    let requeues = r#"controller_runtime_reconcile_total{controller="hostile",result="requeue_after"}"#;
    eventually("requeues throttled by the budget", WAIT, || async {
        (h.metric(r#"operon_requeue_throttled_total{controller="hostile"}"#).await >= 1.0).then_some(())
    })
    .await;
    let before = h.metric(requeues).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = h.metric(requeues).await - before;
    assert!(during <= 45.0, "{during} requeued reconciles in 3 s; the budget allows about 30");
    assert!(during >= 10.0, "{during} requeued reconciles in 3 s; the storm should still be served at the budget");
    h.stop().await;
}

// ---------------------------------------------------------------------------
// A hostile tenant's egress: a namespaced Reconciler of the `egress-probe`
// guest, with the narrowest grants that let it try, on a host with the
// default flags (`--egress-allow '*'`).

/// A Thing of the tenant's, for its Reconciler `who`.
async fn tenant_thing(host: &plugins::Host, name: &str, who: &str, spec: Value) {
    let t: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": name, "labels": {"who": who}}, "spec": spec
    }))
    .unwrap();
    host.things().patch(name, &PatchParams::apply("tenant").force(), &Patch::Apply(&t)).await.unwrap();
}

/// The tenant's Reconciler `name`, for its labelled Things, granting `egress`.
async fn tenant_reconciler(host: &plugins::Host, name: &str, egress: Value) {
    host.reconciler(
        name,
        json!({
            "module": plugins::config_map_module("egress-probe"),
            "grants": {"for": [{"group": "example.operon.dev", "kind": "Thing"}], "egress": egress},
            "selector": {"matchLabels": {"who": name}},
            "limits": {"timeout": "10s"},
        }),
    )
    .await;
}

/// The host's neighbourhood is the operator's to open, not the tenant's: a
/// grant of loopback or of the metadata range is refused naming the flag,
/// and nothing reaches the loopback "admin port" beside the host. Within a
/// narrow grant, an encoded traversal of its path prefix and a
/// method-override header are refused; a typo'd grant is pointed at; a
/// Reconciler without grants is told the whole grant to add; and a loop of
/// refused 256 KiB calls is held to its budget, with a clear error.
#[tokio::test]
async fn a_tenant_reaches_nothing_of_the_hosts_neighbourhood_and_exhausts_nothing_through_egress() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let admin = {
        let hits = hits.clone();
        axum::Router::new().fallback(move || {
            hits.fetch_add(1, Ordering::SeqCst);
            async { "admin" }
        })
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, admin).await.unwrap() });
    // The host's default flags: `--egress-allow '*'`, nothing special opened.
    let pipeline = operon::pipeline::Config {
        controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
        ..Default::default()
    };
    let host = plugins::Host::start_configured(plane(), "tenant-egress", false, pipeline).await;
    host.module_config_map("egress-probe", &guest("egress-probe")).await;
    tenant_reconciler(&host, "loopback", json!([{"scheme": "http", "host": "127.0.0.1", "port": port}])).await;
    tenant_reconciler(&host, "metadata", json!([{"scheme": "http", "host": "169.254.0.0/16"}])).await;
    tenant_reconciler(
        &host,
        "narrow",
        json!([{"host": "api.example.com", "methods": ["GET"], "pathPrefix": "/v1/"}, {"host": "api.exmaple.org"}]),
    )
    .await;
    tenant_reconciler(&host, "none", json!([])).await;
    for (name, flag) in [("loopback", "--egress-allow 127.0.0.1"), ("metadata", "--egress-allow 169.254.0.0/16")] {
        let refused = eventually(&format!("{name} refused, naming the flag"), WAIT, || async {
            let (status, _, message) = host.condition(name, "Ready").await?;
            (status == "False" && message.contains(flag)).then_some(message)
        })
        .await;
        eprintln!("hostile: {name}: {refused}");
    }
    let calls = json!([
        {"url": "https://api.example.com/v1/..%2Fadmin"},
        {"url": "https://api.example.com/v1/x", "headers": {"x-http-method-override": "DELETE"}},
        {"url": "https://api.example.org/v1/x"},
        {"url": format!("http://127.0.0.1:{port}/admin")},
        {"url": "http://169.254.169.254/latest/meta-data/"},
    ]);
    let flood = json!({"url": "https://api.example.com/v1/x", "times": 400, "bodyBytes": 256 << 10});
    tenant_thing(&host, "n1", "narrow", json!({"calls": calls, "flood": flood})).await;
    tenant_thing(&host, "z1", "none", json!({"calls": [{"url": format!("http://127.0.0.1:{port}/admin")}]})).await;
    let report = |name: &'static str| {
        let host = &host;
        async move {
            eventually(&format!("{name}'s report"), WAIT, || async {
                let t = host.things().get_opt(name).await.ok()??;
                let status = t.data.get("status")?.clone();
                status["results"].is_array().then_some(status)
            })
            .await
        }
    };
    let n1 = report("n1").await;
    let r = &n1["results"];
    let said =
        |i: usize| format!("{}: {}", r[i]["error"].as_str().unwrap_or("ok"), r[i]["message"].as_str().unwrap_or(""));
    assert!(said(0).starts_with("denied") && said(0).contains("encoded"), "{}", said(0));
    assert!(said(1).starts_with("invalid") && said(1).contains("x-http-method-override"), "{}", said(1));
    assert!(said(2).contains("did you mean grant 1 (api.exmaple.org)"), "{}", said(2));
    assert!(said(3).starts_with("denied") && said(3).contains("127.0.0.1 is not in spec.grants.egress"), "{}", said(3));
    assert!(said(4).starts_with("denied"), "{}", said(4));
    let kinds = &n1["flood"]["kinds"];
    assert!(kinds["budget"].as_u64().unwrap_or(0) >= 380, "{n1}");
    let last = n1["flood"]["last"].as_str().unwrap_or_default();
    assert!(last.contains("refused calls included"), "{last}");
    let z1 = report("z1").await;
    let told = z1["results"][0]["message"].as_str().unwrap_or_default().to_string();
    assert!(
        told.contains(&format!("add {{scheme: http, host: 127.0.0.1, port: {port}}} to spec.grants.egress")),
        "{told}"
    );
    assert!(!told.contains("only reconcile calls"), "{told}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the tenant reached the loopback admin port");
    host.stop().await;
}

// ---------------------------------------------------------------------------
// Hostile resources

#[tokio::test]
async fn a_parent_with_a_huge_spec_is_reconciled() {
    let h = Host::start("huge").await;
    h.neighbours(1).await;
    // 1.2 MB of spec: near etcd's 1.5 MiB limit for one object.
    h.thing("huge", json!({"mode": "calm", "blob": "x".repeat(1_200_000)})).await;
    eventually("the huge parent's status", WAIT, || async { h.status("huge").await.filter(|s| s["calm"] == true) })
        .await;
    h.neighbours_follow(2).await;
    h.stop().await;
}

#[tokio::test]
async fn names_at_the_length_limits_are_reconciled_or_refused_clearly() {
    let h = Host::start("names").await;
    h.neighbours(1).await;
    // A custom object's name may be a 253-character DNS subdomain.
    let long = format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61));
    assert_eq!(long.len(), 253);
    h.thing(&long, json!({"mode": "calm"})).await;
    eventually("the 253-character parent's status", WAIT, || async {
        h.status(&long).await.filter(|s| s["calm"] == true)
    })
    .await;
    // A WebApp named with 63 characters gets children of that name.
    let label = "w".repeat(63);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": label}, "spec": {"image": "nginx:1.27"}
    }))
    .unwrap();
    h.custom("WebApp").create(&PostParams::default(), &obj).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), &h.namespace);
    eventually("the 63-character WebApp's Deployment", WAIT, || async { deployments.get_opt(&label).await.ok()? })
        .await;
    // A 253-character WebApp: its children's names or labels are out of the
    // API server's bounds. Refused with the API server's reason, not retried
    // in a loop, and the host keeps going.
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": long}, "spec": {"image": "nginx:1.27"}
    }))
    .unwrap();
    h.custom("WebApp").create(&PostParams::default(), &obj).await.unwrap();
    let refused = h.warning(&long, "ApplyRefused", &["422"]).await;
    assert!(refused.contains("not retried until the object changes"), "{refused}");
    h.neighbours_follow(2).await;
    h.stop().await;
}

#[tokio::test]
async fn unexpected_fields_are_pruned_or_ignored() {
    let h = Host::start("fields").await;
    h.neighbours(1).await;
    // The WebApp schema is structural: the API server prunes what it does
    // not know, and the guest never sees it.
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "odd", "labels": {"x": "y"}},
        "spec": {"image": "nginx:1.27", "replicas": 2, "surprise": {"nested": [1, 2, 3]}, "sidecar": true},
        "extra": "top-level"
    }))
    .unwrap();
    h.custom("WebApp").create(&PostParams::default(), &obj).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), &h.namespace);
    eventually("the odd WebApp's Deployment", WAIT, || async {
        deployments.get_opt("odd").await.ok()?.filter(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(2))
    })
    .await;
    // Things keep unknown fields: the guest gets them, with types it does
    // not expect, and answers anyway.
    h.thing("odd", json!({"mode": ["not", "a", "string"], "desired": "not-a-list", "calls": -1, "": null})).await;
    eventually("the odd Thing's status", WAIT, || async { h.status("odd").await.filter(|s| s["calm"] == true) }).await;
    h.neighbours_follow(2).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_deleted_while_its_controller_runs_is_reported_and_recovered() {
    // A control plane of its own: the CRD goes away.
    let plane = tokio::task::block_in_place(|| {
        operon_envtest::ControlPlane::start(operon_envtest::Options::default().crd(webapp_crd()).crd(thing_crd()))
    })
    .expect("control plane");
    let client = plane.client().await;
    let namespace = operon_envtest::create_namespace(&client, "crd-gone").await.unwrap();
    let h = Host::start_on(client.clone(), namespace).await;
    h.neighbours(1).await;
    h.thing("before", json!({"mode": "calm"})).await;
    eventually("a reconcile before", WAIT, || async { h.status("before").await.filter(|s| s["calm"] == true) }).await;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("things.example.operon.dev", &DeleteParams::default()).await.unwrap();
    eventually("the CRD gone", WAIT, || async {
        crds.get_opt("things.example.operon.dev").await.ok()?.is_none().then_some(())
    })
    .await;
    // Reported, not fatal: /readyz names the kind, the host keeps running
    // and the neighbour keeps converging.
    let readyz = format!("{}/readyz", h.metrics);
    let why = eventually("/readyz to report the missing kind", WAIT, || async {
        let resp = reqwest::get(&readyz).await.ok()?;
        let status = resp.status();
        let body = resp.text().await.ok()?;
        (status == 503 && body.contains("Thing")).then_some(body)
    })
    .await;
    eprintln!("readyz while the CRD is gone: {why}");
    assert!(!h.task.is_finished(), "a deleted CRD must not stop the manager");
    h.neighbours_follow(2).await;

    // The CRD comes back: the controller picks the kind up again.
    crds.create(&PostParams::default(), &thing_crd()).await.unwrap();
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "metadata": {"name": "after"}, "spec": {"mode": "calm"}
    }))
    .unwrap();
    eventually("the kind served again", WAIT, || async {
        h.custom("Thing").create(&PostParams::default(), &obj).await.ok()
    })
    .await;
    eventually("a reconcile after the CRD returned", Duration::from_secs(90), || async {
        h.status("after").await.filter(|s| s["calm"] == true)
    })
    .await;
    eventually("/readyz ok again", WAIT, || async {
        reqwest::get(&readyz).await.ok()?.status().is_success().then_some(())
    })
    .await;
    h.neighbours_follow(3).await;
    h.stop().await;
    drop(plane);
}

// ---------------------------------------------------------------------------
// Hostile files: the precompiled cache loads only what the host wrote

/// The cached artifacts of a directory (not the probe or temporary files).
fn artifacts(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

fn runtime_with_cache(dir: &std::path::Path) -> Runtime {
    Runtime::new(runtime::Config { artifact_dir: Some(dir.into()), ..Default::default() }).unwrap()
}

#[test]
fn a_cache_directory_others_may_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("artifacts");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let rt = runtime_with_cache(&cache);
    let first = rt.load(&guest("echo"), Limits::default()).unwrap();
    let second = rt.load(&guest("echo"), Limits::default()).unwrap();
    assert!(!first.info().from_cache && !second.info().from_cache, "a world-writable cache must not be used");
    assert!(artifacts(&cache).is_empty(), "nothing is written to a directory others may write");
}

#[test]
fn the_cache_directory_is_created_private_and_its_entries_checked_before_use() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("operon").join("artifacts");
    let rt = runtime_with_cache(&cache);
    assert!(!rt.load(&guest("echo"), Limits::default()).unwrap().info().from_cache);
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the cache directory is private to the host");
    let written = artifacts(&cache);
    assert_eq!(written.len(), 1);
    assert_eq!(std::fs::metadata(&written[0]).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(rt.load(&guest("echo"), Limits::default()).unwrap().info().from_cache, "our own entry is used");

    // An entry others may write is not trusted, even with a valid checksum.
    std::fs::set_permissions(&written[0], std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!rt.load(&guest("echo"), Limits::default()).unwrap().info().from_cache);

    // An artifact planted under another module's name (digest-named files
    // bind the artifact to its module) is recompiled, never run.
    let echo = artifacts(&cache).pop().unwrap();
    assert!(!rt.load(&guest("requeue-counter"), Limits::default()).unwrap().info().from_cache);
    let counter = artifacts(&cache).into_iter().find(|p| *p != echo).unwrap();
    std::fs::copy(&echo, &counter).unwrap();
    std::fs::set_permissions(&counter, std::fs::Permissions::from_mode(0o600)).unwrap();
    let module = rt.load(&guest("requeue-counter"), Limits::default()).unwrap();
    assert!(!module.info().from_cache, "an artifact of another module was loaded");
    assert_eq!(module.manifest().name, "requeue-counter");
}

// ---------------------------------------------------------------------------
// Outsiders at the host's ports

/// Requests the kube client sends, by path, counted by a layer in its stack.
#[derive(Clone, Default)]
struct Sent(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Sent {
    fn client(&self, config: kube::Config) -> kube::Client {
        let sent = self.clone();
        let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            sent.0.lock().unwrap().push(req.uri().path().to_string());
            req
        });
        kube::client::ClientBuilder::try_from(config).unwrap().with_layer(&layer).build()
    }

    fn ending(&self, suffix: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|p| p.ends_with(suffix)).count()
    }
}

/// An outsider who reaches the metrics port sends bearer tokens of its own
/// invention, each one new: the host asks the API server at most at its
/// review rate (a bucket of 20, 5 a second; beyond, 429 without asking),
/// and the verdict of a real scraper — a ServiceAccount allowed `get
/// /metrics` — stays cached through the flood.
#[tokio::test]
async fn random_bearer_tokens_on_the_metrics_port_cost_at_most_the_review_rate() {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    operon::install_crypto_provider();
    let admin = plane().client().await;
    let namespace = operon_envtest::create_namespace(&admin, "scraper").await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &namespace);
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "prometheus"}})).unwrap();
    accounts.create(&PostParams::default(), &account).await.unwrap();
    let role = format!("{namespace}-metrics-reader");
    for doc in [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}]}),
    ] {
        let obj: DynamicObject = serde_json::from_value(doc).unwrap();
        let gvk = GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", obj.types.as_ref().unwrap().kind.as_str());
        Api::<DynamicObject>::all_with(admin.clone(), &ApiResource::from_gvk(&gvk))
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    let token = accounts
        .create_token_request("prometheus", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;

    let sent = Sent::default();
    let client = sent.client(plane().config());
    let endpoints =
        operon::server::Endpoints::secure_metrics(std::sync::Arc::new(operon::metrics::Metrics::new()), client, None)
            .unwrap();
    let server = operon::server::Server::bind(([127, 0, 0, 1], 0).into()).await.unwrap();
    let url = format!("https://{}/metrics", server.local_addr());
    tokio::spawn(server.serve(endpoints, std::future::pending()));
    let http = reqwest::Client::builder().tls_danger_accept_invalid_certs(true).build().unwrap();
    let scrape = |token: String| {
        let (http, url) = (http.clone(), url.clone());
        async move { http.get(&url).bearer_auth(token).send().await.unwrap().status().as_u16() }
    };
    // The scraper is allowed once RBAC has caught up with the binding.
    eventually("the scraper to be allowed", WAIT, || async { (scrape(token.clone()).await == 200).then_some(()) })
        .await;

    let reviews_before = sent.ending("/tokenreviews");
    let started = std::time::Instant::now();
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..1000 {
        *answers.entry(scrape(format!("not-a-token-{i}-{}", i * 7919)).await).or_default() += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let reviews = sent.ending("/tokenreviews") - reviews_before;
    let allowed = 20.0 + 5.0 * elapsed + 1.0;
    eprintln!("hostile: 1000 random tokens in {elapsed:.1}s: answers {answers:?}, {reviews} TokenReviews sent");
    assert!(!answers.contains_key(&200), "a random token was let through: {answers:?}");
    assert!(reviews as f64 <= allowed, "{reviews} TokenReviews for 1000 random tokens; the rate allows {allowed:.0}");
    let before = (sent.ending("/tokenreviews"), sent.ending("/subjectaccessreviews"));
    assert_eq!(scrape(token.clone()).await, 200, "the scraper is still served");
    assert_eq!(
        (sent.ending("/tokenreviews"), sent.ending("/subjectaccessreviews")),
        before,
        "the scraper's verdict was evicted by the flood and asked again"
    );
}

/// An outsider who reaches the host's metrics port holds connections open,
/// sends its headers a byte at a time, and opens more than its share: the
/// host closes what is over the per-client cap as it comes and cuts the
/// slow ones off, while a scraper from another address is still answered
/// and the neighbour keeps converging.
#[tokio::test]
async fn an_outsider_holding_and_trickling_connections_cannot_take_the_metrics_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = Host::start("outsider-conn").await;
    host.neighbours(1).await;
    let addr: std::net::SocketAddr = host.metrics.trim_start_matches("http://").parse().unwrap();
    let connect_from = |from: [u8; 4]| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((from, 0).into()).unwrap();
        socket.connect(addr).await.unwrap()
    };
    // Sixteen connections from one address, each trickling its headers.
    let mut slow = Vec::new();
    for _ in 0..16 {
        let mut tcp = connect_from([127, 0, 0, 1]).await;
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        slow.push(tcp);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // One more from the same address: closed as it comes.
    let mut over = connect_from([127, 0, 0, 1]).await;
    let _ = over.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), over.read_to_end(&mut answer)).await;
    assert!(answer.is_empty(), "a 17th connection from one address was answered: {}", String::from_utf8_lossy(&answer));
    // A scraper from elsewhere is answered meanwhile.
    let mut scraper = connect_from([127, 0, 0, 2]).await;
    scraper.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), scraper.read_to_end(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..answer.len().min(200)]));
    // The slow ones are cut off at the header timeout (10 s), whatever they
    // trickle meanwhile.
    let started = std::time::Instant::now();
    for tcp in &mut slow {
        let mut buf = [0u8; 256];
        let cut = async {
            loop {
                let _ = tcp.write_all(b"X").await;
                match tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => return,
                    _ => {}
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), cut)
            .await
            .unwrap_or_else(|_| panic!("a trickling connection was still open after {:?}", started.elapsed()));
    }
    eprintln!("hostile: 16 trickling connections cut off within {:?}", started.elapsed());
    host.neighbours_follow(2).await;
    host.stop().await;
}
