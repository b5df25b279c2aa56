//! Reconcilers spread over replicas, Kubernetes as the only coordinator:
//! three `operon run` processes with one Lease per Reconciler share 30
//! Reconcilers; every Reconciler is led by exactly one replica; when one is
//! killed (`kill -9`), the others take its Reconcilers within a lease
//! duration and a retry period, and reconcile what changed meanwhile.
//!
//! The in-process test beside it proves the fence per Reconciler: a replica
//! whose Lease of one Reconciler is taken stops writing for that one and
//! keeps writing for the others.
//!
//! And a replica that cannot serve a Reconciler (it cannot get the module)
//! hands its Lease to one that can.

use crate::common;

use common::{eventually, free_port, guest, thing_crd};
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use operon::reconciler;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LEASE_SECS: u64 = 4;
const RETRY_MS: u64 = 500;
const RECONCILERS: usize = 30;

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("scaleout", || {
        use kube::CustomResourceExt;
        operon_envtest::Options::default()
            .crd(thing_crd())
            .crd(reconciler::crd::Reconciler::crd())
            .crd(reconciler::crd::ClusterReconciler::crd())
    })
}

struct Replica {
    child: Child,
}

impl Replica {
    fn start(lease_ns: &str, label: &str, artifacts: &std::path::Path, extra: &[&str]) -> Replica {
        let port = free_port();
        let log =
            std::fs::File::create(std::env::temp_dir().join(format!("operon-scaleout-{label}-{port}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_operon"))
            .args(["run", "--reconcilers", "--leader-elect", "--lease-per-reconciler"])
            .args(["--leader-election-namespace", lease_ns, "--leader-election-id", "operon"])
            .args(["--leader-elect-lease-duration", &format!("{LEASE_SECS}s")])
            .args(["--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", &format!("{RETRY_MS}ms")])
            .args(["--reconciler-selector", &format!("operon.dev/test={label}")])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}"), "--metrics-secure=false"])
            .args(["--health-probe-bind-address", "0"])
            .args(extra)
            .env("KUBECONFIG", plane().kubeconfig_path())
            .env("XDG_CACHE_HOME", artifacts)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting operon");
        Replica { child }
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

/// Holder of each Reconciler's Lease (membership Leases left out).
async fn holders(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let list = leases.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|l| l.metadata.labels.as_ref().is_none_or(|m| !m.contains_key(operon::leader::MEMBER_LABEL)))
        .filter_map(|l| {
            let spec = l.spec?;
            let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
            Some((l.metadata.name?, holder))
        })
        .collect()
}

fn things(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing")),
    )
}

async fn stamped_value(client: &kube::Client, ns: &str) -> Option<Value> {
    things(client, ns).get("t").await.ok()?.data.pointer("/status/value").cloned()
}

#[tokio::test]
async fn three_replicas_share_thirty_reconcilers_and_take_over_a_killed_ones() {
    let client = plane().client().await;
    let lease_ns = operon_envtest::create_namespace(&client, "scaleout").await.unwrap();
    let label = lease_ns.clone();
    let module = guest("stamp-v1");
    let mut namespaces = Vec::new();
    for i in 0..RECONCILERS {
        let ns = operon_envtest::create_namespace(&client, &format!("so{i}")).await.unwrap();
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some("stamp".into()), ..Default::default() },
            binary_data: Some([("module.wasm".to_string(), ByteString(module.clone()))].into()),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();
        let r: reconciler::crd::Reconciler = serde_json::from_value(json!({
            "apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": "stamp", "labels": {"operon.dev/test": label}},
            "spec": {"module": {"configMap": {"name": "stamp"}}, "grants": {
                "for": [{"group": "example.operon.dev", "kind": "Thing"}], "owns": [{"group": "", "kind": "ConfigMap"}]}}
        }))
        .unwrap();
        Api::<reconciler::crd::Reconciler>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &r)
            .await
            .unwrap();
        let t: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": "t"}, "spec": {"value": 1}}))
            .unwrap();
        things(&client, &ns).create(&PostParams::default(), &t).await.unwrap();
        namespaces.push(ns);
    }
    let artifacts = tempfile::tempdir().unwrap();
    let mut replicas: Vec<Replica> = (0..3).map(|_| Replica::start(&lease_ns, &label, artifacts.path(), &[])).collect();

    // Every Reconciler led by exactly one replica (a Lease has one holder),
    // all three replicas leading some, and every Thing reconciled.
    let shared = eventually("30 Leases held by 3 replicas", Duration::from_secs(120), || async {
        let h = holders(&client, &lease_ns).await;
        let mut per: BTreeMap<String, usize> = BTreeMap::new();
        for holder in h.values() {
            *per.entry(holder.clone()).or_default() += 1;
        }
        (h.len() == RECONCILERS && per.len() == 3).then_some((h, per))
    })
    .await;
    eprintln!("scale-out: leases per replica {:?}", shared.1.values().collect::<Vec<_>>());
    assert!(shared.1.values().all(|n| *n <= RECONCILERS / 3 + 1), "spread, not taken by one: {:?}", shared.1);
    eventually("every Thing reconciled", Duration::from_secs(120), || async {
        for ns in &namespaces {
            stamped_value(&client, ns).await?;
        }
        Some(())
    })
    .await;

    // kill -9 one replica (which identity it had shows once its Leases move).
    replicas[0].kill9();
    let killed = Instant::now();
    for ns in &namespaces {
        let patch = json!({"spec": {"value": 2}});
        things(&client, ns).patch("t", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }
    let after = eventually("every Lease held by the two survivors", Duration::from_secs(120), || async {
        let h = holders(&client, &lease_ns).await;
        let live: std::collections::BTreeSet<&String> = h.values().collect();
        (h.len() == RECONCILERS && live.len() == 2).then_some(h)
    })
    .await;
    let moved = killed.elapsed();
    let gone: Vec<&String> = shared.1.keys().filter(|id| !after.values().any(|h| h == *id)).collect();
    assert_eq!(gone.len(), 1, "exactly the killed replica's identity is gone");
    let orphans = shared.0.values().filter(|h| h == &gone[0]).count();
    eprintln!(
        "scale-out: {orphans} Reconcilers of the killed replica led elsewhere {moved:?} after kill -9 (lease {LEASE_SECS}s, retry {RETRY_MS}ms)"
    );
    // Bound: a survivor may have seen the last renewal up to one retry late,
    // then takes the expired Lease at its next retry; our polling adds up to
    // 100 ms plus a list.
    let bound = Duration::from_secs(LEASE_SECS) + 2 * Duration::from_millis(RETRY_MS) + Duration::from_secs(1);
    assert!(moved <= bound, "takeover took {moved:?}, more than {bound:?}");
    eventually("every Thing reconciled after the takeover", Duration::from_secs(120), || async {
        for ns in &namespaces {
            if stamped_value(&client, ns).await? != json!(2) {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// A replica that cannot get a Reconciler's module (here: a `path` source,
/// refused by a replica started without `--allow-module-paths`) reports it
/// while it is alone, and hands the Reconciler's Lease to a replica that can
/// serve it once one is live. Without the hand-over the first replica would
/// hold the Lease for ever and nobody would reconcile.
#[tokio::test]
async fn a_replica_that_cannot_get_the_module_hands_the_reconciler_to_one_that_can() {
    let client = plane().client().await;
    let lease_ns = operon_envtest::create_namespace(&client, "handover").await.unwrap();
    let label = lease_ns.clone();
    let ns = operon_envtest::create_namespace(&client, "handover-work").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stamp.wasm");
    std::fs::write(&file, guest("stamp-v1")).unwrap();
    let r: reconciler::crd::Reconciler = serde_json::from_value(json!({
        "apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
        "metadata": {"name": "stamp", "labels": {"operon.dev/test": label}},
        "spec": {"module": {"path": file.to_str().unwrap()}, "grants": {
            "for": [{"group": "example.operon.dev", "kind": "Thing"}], "owns": [{"group": "", "kind": "ConfigMap"}]}}
    }))
    .unwrap();
    let reconcilers = Api::<reconciler::crd::Reconciler>::namespaced(client.clone(), &ns);
    reconcilers.create(&PostParams::default(), &r).await.unwrap();
    let t: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "t"}, "spec": {"value": 1}}))
    .unwrap();
    things(&client, &ns).create(&PostParams::default(), &t).await.unwrap();
    let artifacts = tempfile::tempdir().unwrap();

    // Alone, the replica that cannot serve still leads, and says why.
    let _refusing = Replica::start(&lease_ns, &label, artifacts.path(), &[]);
    let first = eventually("the refusing replica leads and reports", Duration::from_secs(60), || async {
        let r = reconcilers.get("stamp").await.ok()?;
        let ready = r.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        let holder = holders(&client, &lease_ns).await.into_values().next()?;
        (ready.status == "False" && ready.message.contains("--allow-module-paths")).then_some(holder)
    })
    .await;

    // A replica that can serve it joins: the Reconciler moves to it.
    let _serving = Replica::start(&lease_ns, &label, artifacts.path(), &["--allow-module-paths"]);
    eventually("the Thing reconciled by the replica that can serve", Duration::from_secs(90), || async {
        stamped_value(&client, &ns).await.filter(|v| *v == json!(1))
    })
    .await;
    let now = holders(&client, &lease_ns).await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now.values().next(), Some(&first), "the Lease moved");
    eventually("Ready", Duration::from_secs(30), || async {
        let r = reconcilers.get("stamp").await.ok()?;
        r.status?.conditions.into_iter().find(|c| c.type_ == "Ready" && c.status == "True").map(|_| ())
    })
    .await;
}

/// Requests (anything but GET) the client sends, per namespace in the path,
/// excluding Leases.
#[derive(Clone, Default)]
struct Writes(std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>);

impl Writes {
    fn client(&self, config: kube::Config) -> kube::Client {
        let writes = self.clone();
        let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            let path = req.uri().path().to_string();
            if req.method() != http::Method::GET && !path.contains("/leases") {
                writes.0.lock().unwrap().push((Instant::now(), path));
            }
            req
        });
        kube::client::ClientBuilder::try_from(config).unwrap().with_layer(&layer).build()
    }

    fn in_namespace_since(&self, ns: &str, t: Instant) -> usize {
        let needle = format!("/namespaces/{ns}/");
        self.0.lock().unwrap().iter().filter(|(at, p)| *at > t && p.contains(&needle)).count()
    }
}

#[tokio::test]
async fn a_replica_that_loses_one_reconcilers_lease_stops_writing_for_it_only() {
    use operon::manager::{self, Manager};
    use operon::runtime::{self, Limits, Runtime};
    let admin = plane().client().await;
    let lease_ns = operon_envtest::create_namespace(&admin, "fence").await.unwrap();
    let (ns1, ns2) = (
        operon_envtest::create_namespace(&admin, "fence-a").await.unwrap(),
        operon_envtest::create_namespace(&admin, "fence-b").await.unwrap(),
    );
    let writes = Writes::default();
    let mut leader = operon::leader::Config::new(lease_ns.clone(), "operon");
    leader.lease_duration = Duration::from_secs(4);
    leader.renew_deadline = Duration::from_secs(3);
    leader.retry_period = Duration::from_millis(500);
    let mgr = Manager::builder(writes.client(plane().config()))
        .config(manager::Config {
            leader: Some(leader),
            lease_per_controller: true,
            server_addr: None,
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    for (name, ns) in [("one", &ns1), ("two", &ns2)] {
        let config = operon::pipeline::Config {
            name: Some(name.into()),
            scope: operon::pipeline::Scope::namespace(ns),
            ..Default::default()
        };
        mgr.add_controller(rt.load(&guest("echo"), Limits::default()).unwrap(), config, None).unwrap();
        let t: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": "busy"}, "spec": {"count": true, "requeueAfterMs": 100}}))
            .unwrap();
        things(&admin, ns).create(&PostParams::default(), &t).await.unwrap();
    }
    let running = mgr.clone();
    let task = tokio::spawn(running.run(std::future::pending()));
    eventually("both controllers lead and write", Duration::from_secs(60), || async {
        let t0 = Instant::now() - Duration::from_secs(1);
        (mgr.leads("one")
            && mgr.leads("two")
            && writes.in_namespace_since(&ns1, t0) > 0
            && writes.in_namespace_since(&ns2, t0) > 0)
            .then_some(())
    })
    .await;

    // Another holder takes controller one's Lease.
    let lease_name = operon::leader::lease_name("operon", "one");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &lease_ns);
    eventually("controller one's Lease taken", Duration::from_secs(30), || async {
        let mut lease = leases.get(&lease_name).await.ok()?;
        let spec = lease.spec.as_mut()?;
        spec.holder_identity = Some("another-replica".into());
        spec.lease_duration_seconds = Some(3600);
        leases.replace(&lease_name, &PostParams::default(), &lease).await.ok().map(|_| ())
    })
    .await;
    eventually("controller one stepped down", Duration::from_secs(10), || async { (!mgr.leads("one")).then_some(()) })
        .await;
    let stepped_down = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(writes.in_namespace_since(&ns1, stepped_down), 0, "no write for the Reconciler whose Lease was lost");
    assert!(writes.in_namespace_since(&ns2, stepped_down) >= 5, "the other Reconciler keeps writing");
    assert!(mgr.leads("two"));
    task.abort();
}
