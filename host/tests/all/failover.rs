//! Two `operon run` processes with leader election against a real API
//! server: only one reconciles; after `kill -9` of the leader the other takes
//! over within lease duration + retry period and reconciles the backlog.

use crate::common;

use common::{eventually, free_port, webapp_crd};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LEASE_SECS: u64 = 4;
const RETRY_MS: u64 = 1000;

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("failover", || operon_envtest::Options::default().crd(webapp_crd()))
}

/// An `operon run` process, killed when dropped.
struct Operon {
    child: Child,
    metrics: String,
}

impl Operon {
    fn start(namespace: &str) -> Operon {
        let port = free_port();
        let module = common::guests_dir().join("rust-webapp.wasm");
        let log = std::fs::File::create(std::env::temp_dir().join(format!("operon-failover-{port}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_operon"))
            .args(["run", "--module", module.to_str().unwrap(), "--namespace", namespace, "--leader-elect"])
            .args(["--leader-elect-lease-duration", &format!("{LEASE_SECS}s"), "--leader-elect-renew-deadline", "3s"])
            .args(["--leader-elect-retry-period", &format!("{RETRY_MS}ms")])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}"), "--metrics-secure=false"])
            .args(["--health-probe-bind-address", "0"])
            .env("KUBECONFIG", plane().kubeconfig_path())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting operon");
        Operon { child, metrics: format!("http://127.0.0.1:{port}/metrics") }
    }

    /// The metrics text, or `None` if the process cannot be scraped (not up
    /// yet, or gone): never mistaken for "not leading" or "no reconciles".
    async fn scrape(&self) -> Option<String> {
        let resp = common::http_get(&self.metrics).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.text().await.ok()
    }

    /// Whether this process says it leads (`leader_election_master_status`,
    /// which a standby reports as 0); `None` when that cannot be observed.
    async fn leads(&self) -> Option<bool> {
        let text = self.scrape().await?;
        let line = text.lines().find(|l| l.starts_with("leader_election_master_status{"))?;
        Some(line.ends_with(" 1"))
    }

    /// How many reconciles of parents (the `webapp` module's controller)
    /// this process finished; `None` when that cannot be observed (no
    /// scrape, or no reconcile series yet). The host's own controller of
    /// Reconcilers and module files runs on every replica and is not counted.
    async fn reconciles(&self) -> Option<u64> {
        let text = self.scrape().await?;
        let values: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with("controller_runtime_reconcile_total{controller=\"webapp\""))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() as u64)
    }

    fn kill9(&mut self) {
        // SIGKILL: no release of the Lease, no draining.
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Operon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn create_webapp(client: &kube::Client, namespace: &str, name: &str) {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp"));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": name}, "spec": {"image": "nginx:1.27"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

async fn has_deployment(client: &kube::Client, namespace: &str, name: &str) -> bool {
    Api::<Deployment>::namespaced(client.clone(), namespace).get_opt(name).await.unwrap().is_some()
}

#[tokio::test]
async fn only_the_leader_reconciles_and_a_killed_leader_is_replaced() {
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "failover").await.unwrap();
    let mut a = Operon::start(&ns);
    let mut b = Operon::start(&ns);

    let first = eventually("a leader", Duration::from_secs(60), || async {
        match (a.leads().await?, b.leads().await?) {
            (true, false) => Some('a'),
            (false, true) => Some('b'),
            (true, true) => panic!("both replicas lead"),
            (false, false) => None,
        }
    })
    .await;
    create_webapp(&client, &ns, "before").await;
    eventually("the leader reconciles", Duration::from_secs(30), || async {
        has_deployment(&client, &ns, "before").await.then_some(())
    })
    .await;
    let (leader, standby) = if first == 'a' { (&mut a, &mut b) } else { (&mut b, &mut a) };
    assert_eq!(standby.leads().await, Some(false), "the standby must be observed not leading");
    assert_eq!(standby.reconciles().await, Some(0), "the standby must be observed not reconciling");

    leader.kill9();
    let killed = Instant::now();
    // The backlog: parents created while nobody leads.
    for i in 0..5 {
        create_webapp(&client, &ns, &format!("backlog-{i}")).await;
    }
    eventually("the standby takes over", Duration::from_secs(60), || async {
        standby.leads().await.filter(|l| *l).map(|_| ())
    })
    .await;
    let takeover = killed.elapsed();
    // The standby may have seen the last renewal up to one retry late, and
    // our polling adds up to 100 ms plus a scrape.
    let bound = Duration::from_secs(LEASE_SECS) + 2 * Duration::from_millis(RETRY_MS) + Duration::from_secs(1);
    assert!(takeover <= bound, "takeover took {takeover:?}, more than lease + retry ({bound:?})");
    eventually("the backlog reconciled", Duration::from_secs(30), || async {
        for i in 0..5 {
            if !has_deployment(&client, &ns, &format!("backlog-{i}")).await {
                return None;
            }
        }
        Some(())
    })
    .await;
    eprintln!("failover: takeover after {takeover:?}");
}

#[tokio::test]
async fn sigterm_exits_cleanly_and_releases_the_lease() {
    use k8s_openapi::api::coordination::v1::Lease;
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "sigterm").await.unwrap();
    let mut operon = Operon::start(&ns);
    eventually("leading", Duration::from_secs(60), || async { operon.leads().await.filter(|l| *l).map(|_| ()) }).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let held = leases.get("operon-leader").await.unwrap();
    assert!(held.spec.unwrap().holder_identity.is_some_and(|h| !h.is_empty()));

    let pid = operon.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = operon.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "operon did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit status after SIGTERM: {status}");
    let released = leases.get("operon-leader").await.unwrap();
    let holder = released.spec.unwrap().holder_identity.unwrap_or_default();
    assert!(holder.is_empty(), "the Lease is still held by {holder:?} after a clean shutdown");
    eprintln!("sigterm: exited in {:?}", started.elapsed());
}
