//! The lifecycle of Reconcilers across replicas, restarts and changes, as
//! the cluster sees it. Every test runs real `operon run --reconcilers`
//! processes against the real API server and watches only what a platform
//! team would: status, events, Leases, webhook configurations, finalizers,
//! `/readyz`, `/metrics`.
//!
//! The processes are the binary under test, or `$OPERON_BIN` when set: each
//! test here was first run against the build before the lifecycle was
//! rebuilt as a plan, and failed there (the defects a review found; the
//! issue's numbers are in the test docs).

use crate::common;
use crate::common::serve;

use common::{eventually, free_port, guest, thing_crd, webapp_crd};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use operon::reconciler::crd::{ClusterReconciler, Reconciler};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("lifecycle", || {
        use kube::CustomResourceExt;
        let crds: [CustomResourceDefinition; 4] =
            [thing_crd(), webapp_crd(), Reconciler::crd(), ClusterReconciler::crd()];
        crds.into_iter().fold(operon_envtest::Options::with_controller_manager(), |o, c| o.crd(c))
    })
}

/// The `operon` binary these tests run.
fn operon_bin() -> PathBuf {
    std::env::var_os("OPERON_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_operon")))
}

/// Whether that binary serves /metrics over HTTPS by default (and so takes
/// `--metrics-secure=false`); the builds before that serve plain HTTP.
fn secure_by_default() -> bool {
    static SECURE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SECURE.get_or_init(|| {
        let help = Command::new(operon_bin()).args(["run", "--help"]).output().expect("running operon run --help");
        String::from_utf8_lossy(&help.stdout).contains("--metrics-secure")
    })
}

/// A serving certificate for 127.0.0.1 and its CA, in a directory as a
/// mounted Secret holds them (`tls.crt`, `tls.key`, `ca.crt`): what the
/// replicas of the Helm chart share.
fn cert_dir() -> tempfile::TempDir {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca_cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    dir
}

/// How a replica is started.
#[derive(Clone, Default)]
struct Opts<'a> {
    /// `--leader-elect --lease-per-reconciler`.
    leases: bool,
    /// Serve webhooks with this certificate directory.
    certs: Option<&'a Path>,
}

/// One `operon run --reconcilers` process acting on the Reconcilers
/// labelled for its test, killed when dropped.
struct Replica {
    name: String,
    child: Child,
    metrics: u16,
    webhooks: u16,
    log: PathBuf,
}

impl Replica {
    fn start(name: &str, ns: &str, opts: &Opts<'_>) -> Replica {
        let (metrics, webhooks) = (free_port(), free_port());
        let log = std::env::temp_dir().join(format!("operon-lifecycle-{ns}-{name}.log"));
        let mut cmd = Command::new(operon_bin());
        cmd.args(["run", "--reconcilers", "--reconciler-selector", &format!("operon.dev/test={ns}")])
            // The operator opens loopback, where the tests serve modules.
            .arg("--egress-allow=*,127.0.0.1")
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}"), "--health-probe-bind-address", "0"]);
        if secure_by_default() {
            cmd.arg("--metrics-secure=false");
        }
        if opts.leases {
            // The duration flags in the units every build takes.
            cmd.args(["--leader-elect", "--lease-per-reconciler", "--leader-election-namespace", ns]).args([
                "--lease-duration-secs",
                "4",
                "--renew-deadline-ms",
                "3000",
                "--retry-period-ms",
                "500",
            ]);
        }
        if let Some(dir) = opts.certs {
            cmd.args(["--webhook-bind-address", &format!("127.0.0.1:{webhooks}")])
                .args(["--webhook-cert-dir", dir.to_str().unwrap()]);
        }
        let child = cmd
            .env("KUBECONFIG", plane().kubeconfig_path())
            .env("HOSTNAME", name)
            .env(
                "RUST_LOG",
                std::env::var("OPERON_TEST_LOG")
                    .unwrap_or_else(|_| "info,kube=warn,operon::reconciler::lifecycle=debug".into()),
            )
            .env("OPERON_LOG_FORMAT", "text")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting operon");
        Replica { name: name.into(), child, metrics, webhooks, log }
    }

    /// `/readyz` answered 200; `None` while it cannot be reached.
    async fn ready(&self) -> Option<bool> {
        let r = common::http_get(format!("http://127.0.0.1:{}/readyz", self.metrics)).await.ok()?;
        Some(r.status().is_success())
    }

    /// The sum of a metric family's series matching `filter`; `None` when
    /// the endpoint cannot be scraped.
    async fn metric(&self, family: &str, filter: &str) -> Option<f64> {
        let r = common::http_get(format!("http://127.0.0.1:{}/metrics", self.metrics)).await.ok()?;
        let text = r.text().await.ok()?;
        Some(
            text.lines()
                .filter(|l| l.starts_with(family) && l.contains(filter))
                .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
                .sum(),
        )
    }

    /// Whether a series of `family` matching `filter` is exported (`None`
    /// when the endpoint cannot be scraped).
    async fn has_series(&self, family: &str, filter: &str) -> Option<bool> {
        let r = common::http_get(format!("http://127.0.0.1:{}/metrics", self.metrics)).await.ok()?;
        let text = r.text().await.ok()?;
        Some(text.lines().any(|l| l.starts_with(family) && l.contains(filter)))
    }

    /// SIGTERM, and wait for the process to end (a rolling update's stop).
    fn terminate(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        for _ in 0..600 {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{} did not stop within 60 s after SIGTERM; log: {}", self.name, self.log.display());
    }

    /// SIGKILL: no release of anything.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test shows what each replica said (CI keeps no files).
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!("---- the last {} lines of {}'s log ({}):", tail.len(), self.name, self.log.display());
            for line in tail {
                eprintln!("{}", line.chars().take(600).collect::<String>());
            }
        }
    }
}

/// The test's namespace, API handles and helpers.
struct Cluster {
    client: kube::Client,
    ns: String,
}

impl Cluster {
    async fn new(prefix: &str) -> Cluster {
        let client = plane().client().await;
        let ns = operon_envtest::create_namespace(&client, prefix).await.unwrap();
        Cluster { client, ns }
    }

    fn things(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing"));
        Api::namespaced_with(self.client.clone(), &self.ns, &ar)
    }

    fn webapps(&self, ns: &str) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp"));
        Api::namespaced_with(self.client.clone(), ns, &ar)
    }

    fn reconcilers(&self) -> Api<Reconciler> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Put `bytes` in the ConfigMap `name` (binaryData `module.wasm`).
    async fn module(&self, name: &str, bytes: &[u8]) {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            binary_data: Some([("module.wasm".to_string(), ByteString(bytes.to_vec()))].into()),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(self.client.clone(), &self.ns)
            .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&cm))
            .await
            .unwrap();
    }

    /// Apply the Reconciler `name` with `spec`, labelled for this test.
    async fn reconciler(&self, name: &str, spec: Value) {
        let r = json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name, "labels": {"operon.dev/test": self.ns}}, "spec": spec});
        self.reconcilers().patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&r)).await.unwrap();
    }

    async fn thing(&self, name: &str, spec: Value) {
        let t = json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": name, "labels": {"tier": "a"}}, "spec": spec});
        self.things().patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&t)).await.unwrap();
    }

    /// `(version, value)` the Thing's status was stamped with.
    async fn stamped(&self, name: &str) -> Option<(String, Value)> {
        let t = self.things().get_opt(name).await.ok()??;
        let s = t.data.get("status")?;
        Some((s.get("version")?.as_str()?.to_string(), s.get("value")?.clone()))
    }

    /// Wait until `name` is stamped by `version` with `value`.
    async fn stamped_by(&self, name: &str, version: &str, value: Value) {
        eventually(&format!("{name} stamped by {version} with {value}"), WAIT, || async {
            self.stamped(name).await.filter(|(v, x)| v == version && *x == value)
        })
        .await;
    }

    /// A condition of a Reconciler: `(status, reason, message)`.
    async fn condition(&self, name: &str, type_: &str) -> Option<(String, String, String)> {
        let r = self.reconcilers().get_opt(name).await.ok()??;
        let c = r.status?.conditions.into_iter().find(|c| c.type_ == type_)?;
        Some((c.status, c.reason, c.message))
    }

    async fn digest(&self, name: &str) -> Option<String> {
        self.reconcilers().get_opt(name).await.ok()??.status?.digest
    }

    /// Events on the Reconciler `name`: `reason → how many times`.
    async fn events(&self, name: &str) -> std::collections::BTreeMap<String, i32> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let mut counts = std::collections::BTreeMap::new();
        for e in api.list(&ListParams::default()).await.unwrap().items {
            if e.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(name) {
                continue;
            }
            let n = e.series.as_ref().map_or(1, |s| s.count);
            *counts.entry(e.reason.unwrap_or_default()).or_insert(0) += n;
        }
        counts
    }

    /// The replica whose identity holds the Lease of Reconciler `name`.
    async fn leader(&self, name: &str) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
        let prefix = format!("operon-leader-{}-{name}", self.ns);
        let list = leases.list(&ListParams::default()).await.ok()?;
        let lease =
            list.items.into_iter().find(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with(&prefix)))?;
        let holder = lease.spec?.holder_identity?;
        Some(holder.split('_').next()?.to_string())
    }

    async fn lease_exists(&self, name: &str) -> bool {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
        let prefix = format!("operon-leader-{}-{name}", self.ns);
        let list = leases.list(&ListParams::default()).await.unwrap();
        list.items.iter().any(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with(&prefix)))
    }
}

fn digest(bytes: &[u8]) -> String {
    operon::runtime::digest(bytes)
}

fn stamp_grants() -> Value {
    json!({"for": [{"group": "example.operon.dev", "kind": "Thing"}], "owns": [{"group": "", "kind": "ConfigMap"}],
           "reads": [{"group": "", "kind": "Secret"}]})
}

fn webapp_spec(admission: Value) -> Value {
    json!({"module": {"configMap": {"name": "webapp"}},
           "grants": {"for": [{"group": "example.operon.dev", "kind": "WebApp"}],
                      "owns": [{"group": "apps", "kind": "Deployment"}, {"group": "", "kind": "Service"},
                               {"group": "networking.k8s.io", "kind": "Ingress"}]},
           "admission": admission})
}

/// A dry-run create of a WebApp without a port: `Ok(true)` when the
/// module's `mutate` defaulted it (its webhooks are served), `Ok(false)`
/// when it went through untouched (no webhook), `Err` when denied.
async fn defaulted(api: &Api<DynamicObject>) -> Result<bool, String> {
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "probe"}, "spec": {"image": "nginx:1.27"}}))
        .unwrap();
    match api.create(&PostParams { dry_run: true, ..Default::default() }, &w).await {
        Ok(stored) => Ok(stored.data["spec"]["port"] == 8080),
        Err(e) => Err(e.to_string()),
    }
}

/// Issue #17, defect 1: a replica that shuts down (a rolling update of the
/// two-replica chart) must not take every plugin's webhooks with it.
#[tokio::test]
async fn webhooks_outlive_a_replica_that_shuts_down() {
    let c = Cluster::new("lc-webhooks").await;
    let certs = cert_dir();
    let opts = Opts { leases: true, certs: Some(certs.path()) };
    let mut a = Replica::start("host-a", &c.ns, &opts);
    let b = Replica::start("host-b", &c.ns, &opts);
    c.module("webapp", &guest("rust-webapp")).await;
    c.reconciler("webapp", webapp_spec(json!({"failurePolicy": "Fail", "timeoutSeconds": 5}))).await;
    let webapps = c.webapps(&c.ns);
    eventually("the webhooks to default WebApps", WAIT, || async { defaulted(&webapps).await.ok().filter(|d| *d) })
        .await;
    // Both replicas serve the plugin (a rolling update starts from there).
    let route = format!("webhook=\"/validate/r.{}.webapp\"", c.ns);
    for r in [&a, &b] {
        eventually("both replicas to route the plugin's webhooks", WAIT, || async {
            r.has_series("controller_runtime_webhook_requests_in_flight", &route).await.filter(|h| *h)
        })
        .await;
    }

    // The replica leading the plugin goes (the worst case); the other
    // stays. Its webhooks must keep being served.
    let leader = eventually("a leader", WAIT, || c.leader("webapp")).await;
    let mut survivor = if leader == "host-a" {
        a.terminate();
        b
    } else {
        let mut b = b;
        b.terminate();
        a
    };
    eventually("the surviving replica to serve the webhooks", WAIT, || async {
        defaulted(&webapps).await.ok().filter(|d| *d)
    })
    .await;
    let name = format!("operon-r.{}.webapp", c.ns);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let validating = Api::<ValidatingWebhookConfiguration>::all(c.client.clone());
    let mutating = Api::<MutatingWebhookConfiguration>::all(c.client.clone());
    assert!(validating.get_opt(&name).await.unwrap().is_some() && mutating.get_opt(&name).await.unwrap().is_some());
    assert_eq!(defaulted(&webapps).await, Ok(true), "still served 5 s later");

    // Deleting the Reconciler removes them, as before.
    c.reconcilers().delete("webapp", &DeleteParams::default()).await.unwrap();
    eventually("the configurations gone with the Reconciler", WAIT, || async {
        validating.get_opt(&name).await.unwrap().is_none().then_some(())
    })
    .await;
    survivor.terminate();
}

/// Issue #17, defect 7: a new replica reports Ready (and so gets webhook
/// traffic from its Service) only once it can answer its plugins' webhooks.
#[tokio::test]
async fn a_new_replica_is_ready_only_once_it_can_answer_webhooks() {
    let c = Cluster::new("lc-ready").await;
    let certs = cert_dir();
    // A module source that takes 3 s to answer: the window in which a
    // replica that called itself ready would answer 404.
    let bytes = guest("rust-webapp");
    let url = serve::serve_module_slowly(bytes.clone(), Duration::from_secs(3)).await;
    let spec = json!({"module": {"url": {"href": url, "sha256": digest(&bytes).trim_start_matches("sha256:")}},
        "grants": webapp_spec(json!({}))["grants"], "admission": {"failurePolicy": "Fail"}});
    c.reconciler("webapp", spec).await;
    let opts = Opts { leases: true, certs: Some(certs.path()) };
    let b = Replica::start("host-b", &c.ns, &opts);
    let ready =
        eventually("the new replica to say it is ready", WAIT, || async { b.ready().await.filter(|r| *r) }).await;
    assert!(ready);
    // The moment it says so, its webhook answers.
    operon::install_crypto_provider();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(certs.path().join("ca.crt")).unwrap()).unwrap();
    let http = reqwest::Client::builder().tls_certs_only([ca]).build().unwrap();
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
        "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
        "operation": "CREATE", "name": "w", "namespace": c.ns, "userInfo": {"username": "test"},
        "object": {"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                   "metadata": {"name": "w", "namespace": c.ns}, "spec": {"image": "nginx"}}}});
    let url = format!("https://127.0.0.1:{}/validate/r.{}.webapp", b.webhooks, c.ns);
    let answer =
        http.post(&url).header("content-type", "application/json").body(review.to_string()).send().await.unwrap();
    assert_eq!(
        answer.status().as_u16(),
        200,
        "a ready replica answers its plugins' webhooks: {}",
        answer.text().await.unwrap()
    );
}

/// Issue #17, defect 4: a rolled-back version stays refused on the replica
/// that takes over and after a restart; probation and the last good
/// version are in the status, not in one process's memory.
#[tokio::test]
async fn a_rolled_back_version_stays_refused_after_a_failover_and_a_restart() {
    let c = Cluster::new("lc-rollback").await;
    let opts = Opts { leases: true, certs: None };
    let a = Replica::start("host-a", &c.ns, &opts);
    let b = Replica::start("host-b", &c.ns, &opts);
    c.module("stamp", &guest("stamp-v1")).await;
    c.reconciler(
        "stamp",
        json!({"module": {"configMap": {"name": "stamp"}}, "grants": stamp_grants(),
        "rollback": {"probationCalls": 10, "maxFailures": 2}}),
    )
    .await;
    c.thing("t", json!({"value": 1})).await;
    c.stamped_by("t", "v1", json!(1)).await;
    let v1 = digest(&guest("stamp-v1"));
    c.module("stamp", &guest("stamp-trap")).await;
    eventually("the trapping version active", WAIT, || async {
        (c.digest("stamp").await? == digest(&guest("stamp-trap"))).then_some(())
    })
    .await;
    for i in 0..5 {
        c.thing("t", json!({"value": 10 + i})).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eventually("rolled back to v1", WAIT, || async {
        let d = c.condition("stamp", "Degraded").await?;
        (d.1 == "RolledBack" && c.digest("stamp").await? == v1).then_some(())
    })
    .await;

    // The leader dies; the other replica takes over and never runs the
    // refused version (it had loaded it as a standby).
    let leader = eventually("a leader", WAIT, || c.leader("stamp")).await;
    let (mut dead, survivor) = if leader == "host-a" { (a, b) } else { (b, a) };
    dead.kill9();
    eventually("the other replica to lead", WAIT, || async { c.leader("stamp").await.filter(|l| *l == survivor.name) })
        .await;
    c.thing("t", json!({"value": 100})).await;
    c.stamped_by("t", "v1", json!(100)).await;
    let traps = survivor.metric("operon_guest_errors_total", "kind=\"trap\"").await.unwrap();
    assert_eq!(traps, 0.0, "the replica that took over ran the refused version");

    // Every replica gone; a new one starts from the status alone.
    drop(survivor);
    let fresh = Replica::start("host-c", &c.ns, &opts);
    c.thing("t", json!({"value": 200})).await;
    c.stamped_by("t", "v1", json!(200)).await;
    assert_eq!(c.digest("stamp").await.as_deref(), Some(v1.as_str()));
    let traps = fresh.metric("operon_guest_errors_total", "kind=\"trap\"").await.unwrap();
    assert_eq!(traps, 0.0, "a restarted host loaded the refused version again");
}

/// Issue #17, defect 2: a ClusterReconciler granted every namespace (`*`)
/// validates in every namespace.
#[tokio::test]
async fn a_cluster_reconciler_granted_every_namespace_is_admitted_everywhere() {
    let c = Cluster::new("lc-star").await;
    let other = operon_envtest::create_namespace(&c.client, "lc-star-other").await.unwrap();
    let certs = cert_dir();
    let _host = Replica::start("host-a", &c.ns, &Opts { leases: false, certs: Some(certs.path()) });
    // The module lives in a ConfigMap of the host's namespace... a
    // ClusterReconciler takes a URL.
    let bytes = guest("rust-webapp");
    let url = serve::serve_module(bytes.clone()).await;
    // Only the test's namespaces (tests share the API server): a selector
    // of the spec's own, beside the grants' `*`.
    let selector = json!({"matchLabels": {"operon.dev/lc-star": c.ns}});
    for ns in [&c.ns, &other] {
        let label = json!({"metadata": {"labels": {"operon.dev/lc-star": c.ns}}});
        Api::<k8s_openapi::api::core::v1::Namespace>::all(c.client.clone())
            .patch(ns, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .unwrap();
    }
    let mut spec = webapp_spec(json!({"failurePolicy": "Fail", "timeoutSeconds": 5, "namespaceSelector": selector}));
    spec["module"] = json!({"url": {"href": url, "sha256": digest(&bytes).trim_start_matches("sha256:")}});
    spec["grants"]["namespaces"] = json!(["*"]);
    let name = format!("{}-webapps", c.ns);
    let r = json!({"apiVersion": "operon.dev/v1alpha1", "kind": "ClusterReconciler",
        "metadata": {"name": name, "labels": {"operon.dev/test": c.ns}}, "spec": spec});
    let api: Api<ClusterReconciler> = Api::all(c.client.clone());
    api.patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(&r)).await.unwrap();
    // Validated in a namespace the grants name only by `*`, by this
    // ClusterReconciler's webhook (the denial names it).
    let webapps = c.webapps(&other);
    let too_many: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1",
        "kind": "WebApp", "metadata": {"name": "big"}, "spec": {"image": "nginx:1.27", "replicas": 51}}))
    .unwrap();
    let denial = eventually("this plugin's webhook to deny in the other namespace", WAIT, || async {
        match webapps.create(&PostParams { dry_run: true, ..Default::default() }, &too_many).await {
            Err(kube::Error::Api(status)) if status.message.contains(&format!("validate.c.{name}.operon.dev")) => {
                Some(status.message)
            }
            _ => None,
        }
    })
    .await;
    assert!(denial.contains("spec.replicas must be between 0 and 50"), "{denial}");
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    let validating = Api::<ValidatingWebhookConfiguration>::all(c.client.clone());
    eventually("its configurations gone", WAIT, || async {
        validating.get_opt(&format!("operon-c.{name}")).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// Issue #17, defect 3: while the source holds a refused version, a change
/// of the spec still takes effect — narrowed grants stop the running one.
#[tokio::test]
async fn narrowed_grants_take_effect_while_the_source_is_refused() {
    let c = Cluster::new("lc-refused").await;
    let _host = Replica::start("host-a", &c.ns, &Opts::default());
    c.module("stamp", &guest("stamp-v1")).await;
    c.reconciler("stamp", json!({"module": {"configMap": {"name": "stamp"}}, "grants": stamp_grants()})).await;
    c.thing("t", json!({"value": 1})).await;
    c.stamped_by("t", "v1", json!(1)).await;
    c.module("stamp", b"not a module").await;
    eventually("the garbage refused", WAIT, || async {
        c.condition("stamp", "Degraded").await.filter(|d| d.1 == "InvalidModule")
    })
    .await;
    // Revoke: the module may no longer own ConfigMaps.
    let mut narrowed = stamp_grants();
    narrowed["owns"] = json!([]);
    c.reconciler("stamp", json!({"module": {"configMap": {"name": "stamp"}}, "grants": narrowed})).await;
    let ready = eventually("Ready=False Forbidden", WAIT, || async {
        c.condition("stamp", "Ready").await.filter(|r| r.0 == "False" && r.1 == "Forbidden")
    })
    .await;
    assert!(ready.2.contains("spec.grants.owns"), "{ready:?}");
    // And nothing of it runs any more.
    c.thing("t", json!({"value": 2})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.stamped("t").await, Some(("v1".into(), json!(1))), "a revoked plugin reconciled");
}

/// Issue #17, defect 5: a candidate that changes its manifest is still a
/// candidate: under `rollout: shadow` it shadows, and a swapped-in version
/// with a new manifest is on probation like any other.
#[tokio::test]
async fn a_new_manifest_neither_bypasses_shadow_nor_probation() {
    let c = Cluster::new("lc-manifest").await;
    let _host = Replica::start("host-a", &c.ns, &Opts::default());
    c.module("stamp", &guest("stamp-v1")).await;
    let spec = |rollout: &str| {
        json!({"module": {"configMap": {"name": "stamp"}}, "grants": stamp_grants(), "rollout": rollout,
               "rollback": {"probationCalls": 10, "maxFailures": 2}})
    };
    c.reconciler("stamp", spec("immediate")).await;
    c.thing("t", json!({"value": 1})).await;
    c.stamped_by("t", "v1", json!(1)).await;

    // A hostile version: another manifest (it also reads Secrets, so the
    // controller is rebuilt) and a trap on every call. Still on probation:
    // rolled back.
    // (It may fail its probation on the first reconciles of its new
    // controller, before any status shows it active.)
    c.module("stamp", &guest("stamp-reads-trap")).await;
    for i in 0..5 {
        c.thing("t", json!({"value": 10 + i})).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let hostile = digest(&guest("stamp-reads-trap"));
    eventually("rolled back", WAIT, || async {
        let status = c.reconcilers().get_opt("stamp").await.ok()??.status?;
        status.refused.iter().any(|r| r.digest == hostile && r.reason == "RolledBack").then_some(())
    })
    .await;
    c.stamped_by("t", "v1", json!(14)).await;
    assert_eq!(c.condition("stamp", "Degraded").await.map(|d| d.1).as_deref(), Some("RolledBack"));

    // Shadow: a candidate with another manifest runs beside v1, and only
    // beside it.
    c.reconciler("stamp", spec("shadow")).await;
    c.module("stamp", &guest("stamp-reads")).await;
    eventually("the candidate shadowing", WAIT, || async {
        c.condition("stamp", "Progressing").await.filter(|p| p.0 == "True")
    })
    .await;
    c.thing("t", json!({"value": 20})).await;
    c.stamped_by("t", "v1", json!(20)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(c.stamped("t").await, Some(("v1".into(), json!(20))), "the shadow candidate went live");
    // Promoted, it serves.
    c.reconciler("stamp", spec("immediate")).await;
    c.stamped_by("t", "v3", json!(20)).await;
}

/// Issue #17, defect 6: parents a version refused terminally are tried
/// again when the module is replaced, as the event promises.
#[tokio::test]
async fn terminal_parents_are_retried_after_a_swap() {
    let c = Cluster::new("lc-terminal").await;
    let _host = Replica::start("host-a", &c.ns, &Opts::default());
    c.module("stamp", &guest("stamp-v1")).await;
    c.reconciler("stamp", json!({"module": {"configMap": {"name": "stamp"}}, "grants": stamp_grants()})).await;
    c.thing("hard", json!({"value": 1, "terminalFor": "v1"})).await;
    let events: Api<Event> = Api::namespaced(c.client.clone(), &c.ns);
    eventually("v1 to refuse the Thing terminally", WAIT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.iter().any(|e| e.reason.as_deref() == Some("ReconcileTerminal")).then_some(())
    })
    .await;
    c.module("stamp", &guest("stamp-v2")).await;
    // Nothing touches the Thing: the swap alone brings it back.
    c.stamped_by("hard", "v2", json!(1)).await;
}

/// Issue #17, defect 8: every load, swap and rebuild of a Reconciler is
/// an event on it, also under per-Reconciler Leases.
#[tokio::test]
async fn every_load_swap_and_rebuild_is_an_event() {
    let c = Cluster::new("lc-events").await;
    let _host = Replica::start("host-a", &c.ns, &Opts { leases: true, certs: None });
    c.module("stamp", &guest("stamp-v1")).await;
    let spec = |sa_label: &str| {
        let mut grants = stamp_grants();
        grants["reads"] = json!([{"group": "", "kind": sa_label}]);
        json!({"module": {"configMap": {"name": "stamp"}}, "grants": grants})
    };
    c.reconciler("stamp", spec("Secret")).await;
    c.thing("t", json!({"value": 0})).await;
    c.stamped_by("t", "v1", json!(0)).await;
    // Three swaps, each confirmed before the next.
    for (i, (g, version)) in [("stamp-v2", "v2"), ("stamp-v1", "v1"), ("stamp-v2", "v2")].into_iter().enumerate() {
        c.module("stamp", &guest(g)).await;
        let want = digest(&guest(g));
        eventually(&format!("{version} active"), WAIT, || async { (c.digest("stamp").await? == want).then_some(()) })
            .await;
        c.thing("t", json!({"value": i + 1})).await;
        c.stamped_by("t", version, json!(i + 1)).await;
    }
    // Two rebuilds: the grants change what the controller is built with.
    for kind in ["Service", "Pod"] {
        c.reconciler("stamp", spec(kind)).await;
        let want = if kind == "Service" { 1 } else { 2 };
        eventually(&format!("{want} ControllerReconfigured"), WAIT, || async {
            (c.events("stamp").await.get("ControllerReconfigured").copied().unwrap_or(0) >= want).then_some(())
        })
        .await;
    }
    let events = c.events("stamp").await;
    assert!(events.get("ModuleLoaded").copied().unwrap_or(0) >= 1, "{events:?}");
    assert!(events.get("ModuleSwapped").copied().unwrap_or(0) >= 3, "{events:?}");
}

/// Issue #17, defect 9: what a Reconciler holds is released — its parents'
/// finalizers (when it goes, when its new module renames the finalizer,
/// when its selector no longer matches) and its Lease.
#[tokio::test]
async fn what_a_reconciler_holds_is_released() {
    let c = Cluster::new("lc-release").await;
    let _host = Replica::start("host-a", &c.ns, &Opts { leases: true, certs: None });
    let has = |t: &DynamicObject, f: &str| t.metadata.finalizers.as_ref().is_some_and(|fs| fs.iter().any(|x| x == f));
    c.module("stamp", &guest("stamp-finalizer")).await;
    let spec = |tier: &str| json!({"module": {"configMap": {"name": "stamp"}}, "grants": stamp_grants(), "selector": {"matchLabels": {"tier": tier}}});
    c.reconciler("stamp", spec("a")).await;
    for name in ["one", "two"] {
        c.thing(name, json!({"value": 1})).await;
    }
    c.stamped_by("one", "fin", json!(1)).await;
    eventually("both Things to carry the finalizer", WAIT, || async {
        let list = c.things().list(&ListParams::default()).await.ok()?;
        list.items.iter().all(|t| has(t, "example.operon.dev/stamp")).then_some(())
    })
    .await;
    assert!(c.lease_exists("stamp").await);

    // A new module naming another finalizer: the old one goes.
    c.module("stamp", &guest("stamp-finalizer-renamed")).await;
    eventually("the renamed finalizer on both, the old one released", WAIT, || async {
        let list = c.things().list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|t| has(t, "example.operon.dev/stamp-2") && !has(t, "example.operon.dev/stamp"))
            .then_some(())
    })
    .await;

    // The selector no longer matches them: they are released; matched
    // again, they carry it again.
    c.reconciler("stamp", spec("c")).await;
    eventually("Things outside the new selector released", WAIT, || async {
        let list = c.things().list(&ListParams::default()).await.ok()?;
        list.items.iter().all(|t| !has(t, "example.operon.dev/stamp-2")).then_some(())
    })
    .await;
    c.reconciler("stamp", spec("a")).await;
    eventually("back in the selector, the finalizer again", WAIT, || async {
        let list = c.things().list(&ListParams::default()).await.ok()?;
        list.items.iter().all(|t| has(t, "example.operon.dev/stamp-2")).then_some(())
    })
    .await;

    // The Reconciler goes: every parent released, its Lease deleted, and a
    // Thing can be deleted at once.
    c.reconcilers().delete("stamp", &DeleteParams::default()).await.unwrap();
    eventually("the Reconciler gone", WAIT, || async {
        c.reconcilers().get_opt("stamp").await.unwrap().is_none().then_some(())
    })
    .await;
    let one = c.things().get("one").await.unwrap();
    assert!(!has(&one, "example.operon.dev/stamp-2"), "a parent kept the finalizer of a deleted Reconciler");
    c.things().delete("one", &DeleteParams::default()).await.unwrap();
    eventually("a Thing deleted at once", WAIT, || async {
        c.things().get_opt("one").await.unwrap().is_none().then_some(())
    })
    .await;
    eventually("the Reconciler's Lease deleted", WAIT, || async { (!c.lease_exists("stamp").await).then_some(()) })
        .await;
}
