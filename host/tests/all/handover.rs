//! Hand-overs between replicas as a rolling update makes them, seen as the
//! cluster sees them: several `operon run --reconcilers --leader-elect
//! --lease-per-reconciler` processes against the real API server, stopped
//! with SIGTERM (a rolling update) or SIGKILL (a node lost), while a
//! plugin's admission webhooks (failurePolicy `Fail`) answer creates.
//!
//! Each test states a guarantee of a graceful hand-over: every Lease a
//! stopping replica holds is handed over before it exits; admission calls
//! in flight are answered; a warm standby, not a replica still loading,
//! takes what is handed over; a replica never answers 404 for a plugin it
//! is still loading; the webhooks of a killed replica move as fast as its
//! death is seen; the status and events tell what happened; and a killed
//! replica's membership is cleaned up. The last test is the rolling update
//! itself, with its figures (docs/RELIABILITY.md).
//!
//! The processes are the binary under test, or `$OPERON_BIN` when set (to
//! run these scenarios against another build).

use crate::common;
use crate::common::replica::{Replica, cert_dir};
use crate::common::serve;

use common::{eventually, guest, thing_crd, webapp_crd};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use operon::reconciler::crd::{ClusterReconciler, Reconciler};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
const LEASE_SECS: u64 = 4;
const RETRY: Duration = Duration::from_millis(500);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("handover", || {
        use kube::CustomResourceExt;
        [thing_crd(), webapp_crd(), Reconciler::crd(), ClusterReconciler::crd()]
            .into_iter()
            .fold(operon_envtest::Options::default(), |o, c| o.crd(c))
    })
}

/// A replica of these tests: `operon run --reconcilers --leader-elect
/// --lease-per-reconciler` (lease 4 s, retry 500 ms), serving webhooks with
/// the certificates in `certs` when given.
fn replica(name: &str, ns: &str, certs: Option<&Path>) -> Replica {
    replica_with(name, ns, certs, LEASE_SECS, &[])
}

fn replica_with(name: &str, ns: &str, certs: Option<&Path>, lease_secs: u64, extra: &[&str]) -> Replica {
    Replica::options(plane(), "handover", name, ns)
        .leases(Duration::from_secs(lease_secs), RETRY)
        .webhooks(certs)
        .args(extra)
        .start()
}

/// The test's namespace (Reconcilers, Leases, WebApps) and helpers.
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

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn reconcilers(&self, ns: &str) -> Api<Reconciler> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn webapps(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp"));
        Api::namespaced_with(self.client.clone(), &self.ns, &ar)
    }

    /// A ConfigMap `name` in `ns` holding `bytes` as `module.wasm`.
    async fn module(&self, ns: &str, name: &str, bytes: &[u8]) {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            binary_data: Some([("module.wasm".to_string(), ByteString(bytes.to_vec()))].into()),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&cm))
            .await
            .unwrap();
    }

    /// Apply the Reconciler `ns/name` with `spec`, labelled for this test.
    async fn reconciler(&self, ns: &str, name: &str, spec: Value) {
        let r = json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name, "labels": {"operon.dev/test": self.ns}}, "spec": spec});
        self.reconcilers(ns).patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&r)).await.unwrap();
    }

    /// `n` stamp Reconcilers, each in a namespace of its own (so their
    /// parents do not overlap), from a ConfigMap.
    async fn stamps(&self, n: usize) -> Vec<String> {
        let mut namespaces = Vec::new();
        for i in 0..n {
            let ns = operon_envtest::create_namespace(&self.client, &format!("{}-s{i}", self.ns)).await.unwrap();
            self.module(&ns, "stamp", &guest("stamp-v1")).await;
            self.reconciler(
                &ns,
                "stamp",
                json!({"module": {"configMap": {"name": "stamp"}}, "grants": stamp_grants()}),
            )
            .await;
            namespaces.push(ns);
        }
        namespaces
    }

    /// Holder of every unit Lease (membership Leases left out), `""` for a
    /// released one.
    async fn holders(&self) -> BTreeMap<String, String> {
        let list = self.leases().list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|l| l.metadata.labels.as_ref().is_none_or(|m| !m.contains_key(operon::leader::MEMBER_LABEL)))
            .filter_map(|l| Some((l.metadata.name?, l.spec?.holder_identity.unwrap_or_default())))
            .collect()
    }

    /// Membership Leases: name → holder.
    async fn members(&self) -> BTreeMap<String, String> {
        let list = self.leases().list(&ListParams::default().labels(operon::leader::MEMBER_LABEL)).await.unwrap();
        list.items
            .into_iter()
            .filter_map(|l| Some((l.metadata.name?, l.spec?.holder_identity.unwrap_or_default())))
            .collect()
    }

    /// Wait until `n` unit Leases are held, each by a replica whose name is
    /// in `by`; returns name → holder.
    async fn held_by(&self, n: usize, by: &[&str]) -> BTreeMap<String, String> {
        eventually(&format!("{n} Leases held by {by:?}"), WAIT, || async {
            let h = self.holders().await;
            (h.len() == n && h.values().all(|holder| by.contains(&replica_of(holder)))).then_some(h)
        })
        .await
    }

    /// The replica (HOSTNAME) holding the Lease of Reconciler `ns/name`.
    async fn leader(&self, ns: &str, name: &str) -> Option<String> {
        let lease = operon::leader::lease_name("operon-leader", &format!("{ns}/{name}"));
        let holder = self.leases().get_opt(&lease).await.ok()??.spec?.holder_identity?;
        Some(replica_of(&holder).to_string()).filter(|h| !h.is_empty())
    }

    /// Events on the Reconciler `ns/name`: `(reason, message)`.
    async fn events(&self, ns: &str, name: &str) -> Vec<(String, String)> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), ns);
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }
}

/// The replica a holder identity names (`HOSTNAME_<random>`).
fn replica_of(holder: &str) -> &str {
    holder.split('_').next().unwrap_or_default()
}

fn stamp_grants() -> Value {
    json!({"for": [{"group": "example.operon.dev", "kind": "Thing"}], "owns": [{"group": "", "kind": "ConfigMap"}]})
}

fn webapp_grants() -> Value {
    json!({"for": [{"group": "example.operon.dev", "kind": "WebApp"}],
           "owns": [{"group": "apps", "kind": "Deployment"}, {"group": "", "kind": "Service"},
                    {"group": "networking.k8s.io", "kind": "Ingress"}]})
}

/// The webapp plugin, its webhooks with failurePolicy `Fail`, from the
/// ConfigMap `webapp` of the test's namespace.
async fn webapp_plugin(c: &Cluster) {
    c.module(&c.ns, "webapp", &guest("rust-webapp")).await;
    let spec = json!({"module": {"configMap": {"name": "webapp"}}, "grants": webapp_grants(),
                      "admission": {"failurePolicy": "Fail", "timeoutSeconds": 10}});
    c.reconciler(&c.ns, "webapp", spec).await;
}

/// What became of one create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// Stored, as admission should have it.
    Admitted,
    /// Denied by the plugin's `validate`, as it should be.
    Denied,
    /// Refused because the webhook could not be called (failurePolicy
    /// `Fail` applied by the API server, or the host's failure policy).
    Refused,
    /// Stored although `validate` would have denied it: admission bypassed.
    Bypassed,
}

/// Create a WebApp named `name`; `valid: false` asks for 51 replicas,
/// which the plugin's `validate` denies.
async fn create(c: &Cluster, name: &str, valid: bool) -> (Admission, String) {
    let replicas = if valid { 1 } else { 51 };
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1",
        "kind": "WebApp", "metadata": {"name": name}, "spec": {"image": "nginx:1.27", "replicas": replicas}}))
    .unwrap();
    match c.webapps().create(&PostParams::default(), &w).await {
        Ok(_) if valid => (Admission::Admitted, String::new()),
        Ok(_) => (Admission::Bypassed, String::new()),
        Err(kube::Error::Api(s)) if s.message.contains("spec.replicas must be between 0 and 50") => {
            (Admission::Denied, s.message)
        }
        Err(e) => (Admission::Refused, e.to_string()),
    }
}

/// A dry-run create of a valid WebApp: whether admission answered it.
async fn admits(c: &Cluster) -> bool {
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1",
        "kind": "WebApp", "metadata": {"name": "probe"}, "spec": {"image": "nginx:1.27"}}))
    .unwrap();
    c.webapps().create(&PostParams { dry_run: true, ..Default::default() }, &w).await.is_ok()
}

/// Whether the plugin's webhooks are configured and answer (with no
/// configuration yet, a create is admitted by nobody).
async fn answers(c: &Cluster) -> bool {
    configured_port(c).await.is_some() && admits(c).await
}

/// The port the plugin's validating configuration sends calls to.
async fn configured_port(c: &Cluster) -> Option<u16> {
    let api = Api::<ValidatingWebhookConfiguration>::all(c.client.clone());
    let config = api.get_opt(&format!("operon-r.{}.webapp", c.ns)).await.ok()??;
    let url = config.webhooks?.into_iter().next()?.client_config.url?;
    url.split("://").nth(1)?.split('/').next()?.rsplit(':').next()?.parse().ok()
}

/// An AdmissionReview of a valid WebApp create in `ns`.
fn review(ns: &str) -> String {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
        "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
        "operation": "CREATE", "name": "w", "namespace": ns, "userInfo": {"username": "test"},
        "object": {"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                   "metadata": {"name": "w", "namespace": ns}, "spec": {"image": "nginx"}}}})
    .to_string()
}

/// A TLS connection to a replica's webhook port, trusting `certs`' CA,
/// speaking HTTP/1.1 by hand (so a request can be sent in pieces).
async fn connect(port: u16, certs: &Path) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    operon::install_crypto_provider();
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(certs.join("ca.crt")).unwrap();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap()
}

/// The head of a POST of `length` body bytes to `path`.
fn head(path: &str, length: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// Read one HTTP/1.1 answer: its status code and body.
async fn answer(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> std::io::Result<(u16, String)> {
    use tokio::io::AsyncReadExt;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::other("no answer within 30 s"))??;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes).to_string();
    let status =
        text.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("no HTTP answer: {text:?}"))
        })?;
    Ok((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

/// A replica that receives SIGTERM hands every Lease it holds over before
/// it exits — released, so the others take them at their next retry rather
/// than a lease duration later — and deletes its membership.
#[tokio::test]
async fn a_replica_stopped_with_sigterm_hands_over_every_lease_before_it_exits() {
    let c = Cluster::new("ho-release").await;
    const RECONCILERS: usize = 8;
    c.stamps(RECONCILERS).await;
    let mut a = replica("host-a", &c.ns, None);
    let held = c.held_by(RECONCILERS, &["host-a"]).await;
    eprintln!("handover: host-a leads {} Reconcilers", held.len());
    let status = a.terminate().await;
    assert!(status.success(), "exit status after SIGTERM: {status}");
    let holders = c.holders().await;
    let still: Vec<&String> = holders.iter().filter(|(_, h)| !h.is_empty()).map(|(l, _)| l).collect();
    assert!(still.is_empty(), "Leases still held after a clean shutdown: {still:?}");
    let members = c.members().await;
    assert!(members.is_empty(), "the membership Lease outlived a clean shutdown: {members:?}");
}

/// A standby whose module is loaded, not a new replica still loading its
/// own, takes the Leases a stopping replica hands over; the newcomer takes
/// its share only once it can serve.
#[tokio::test]
async fn a_warm_standby_takes_what_is_handed_over_before_a_replica_still_loading() {
    let c = Cluster::new("ho-warm").await;
    // The module from a slow source: loading takes 4 s on every replica.
    let bytes = guest("stamp-v1");
    let url = serve::serve_module_slowly(bytes.clone(), Duration::from_secs(4)).await;
    let sha = operon::runtime::digest(&bytes).trim_start_matches("sha256:").to_string();
    const RECONCILERS: usize = 4;
    for i in 0..RECONCILERS {
        let ns = operon_envtest::create_namespace(&c.client, &format!("{}-s{i}", c.ns)).await.unwrap();
        let spec = json!({"module": {"url": {"href": url, "sha256": sha}}, "grants": stamp_grants()});
        c.reconciler(&ns, "stamp", spec).await;
    }
    let mut a = replica("host-a", &c.ns, None);
    let b = replica("host-b", &c.ns, None);
    a.wait_ready().await;
    b.wait_ready().await;
    c.held_by(RECONCILERS, &["host-a", "host-b"]).await;

    // A new replica starts (a rolling update's surge); while it loads, the
    // first one stops.
    let fresh = replica("host-c", &c.ns, None);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stopped = Instant::now();
    a.terminate().await;
    // Until the newcomer could have loaded its modules, what host-a held
    // goes to host-b, and nothing to host-c.
    let mut all_b = None;
    while stopped.elapsed() < Duration::from_secs(2) {
        let h = c.holders().await;
        let by_fresh: Vec<&String> = h.iter().filter(|(_, x)| replica_of(x) == "host-c").map(|(l, _)| l).collect();
        assert!(by_fresh.is_empty(), "a replica still loading took {by_fresh:?} ahead of the warm standby");
        if all_b.is_none() && h.values().all(|x| replica_of(x) == "host-b") {
            all_b = Some(stopped.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let taken = all_b.expect("the warm standby took every Lease handed over");
    eprintln!("handover: the warm standby held every Lease {taken:?} after the SIGTERM'd replica exited");
    // Once ready, the newcomer gets its share.
    fresh.wait_ready().await;
    c.held_by(RECONCILERS, &["host-b", "host-c"]).await;
    eventually("host-c to lead its share", WAIT, || async {
        c.holders().await.values().any(|h| replica_of(h) == "host-c").then_some(())
    })
    .await;
}

/// A replica that receives SIGTERM answers the admission calls it is
/// reading, and keeps answering new ones for a grace while its endpoints
/// are removed (or, with `--webhook-url-host`, while the configurations
/// still name it).
#[tokio::test]
async fn admission_calls_in_flight_are_answered_across_a_graceful_stop() {
    use tokio::io::AsyncWriteExt;
    let c = Cluster::new("ho-drain").await;
    let certs = cert_dir();
    webapp_plugin(&c).await;
    let mut a = replica("host-a", &c.ns, Some(certs.path()));
    eventually("the webhooks to answer", WAIT, || async { answers(&c).await.then_some(()) }).await;
    let path = format!("/validate/r.{}.webapp", c.ns);
    let body = review(&c.ns);
    let (first, rest) = body.as_bytes().split_at(body.len() / 2);

    // A call whose body is still arriving when the signal comes.
    let mut in_flight = connect(a.webhooks, certs.path()).await;
    in_flight.write_all(head(&path, body.len()).as_bytes()).await.unwrap();
    in_flight.write_all(first).await.unwrap();
    in_flight.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.signal_term();
    tokio::time::sleep(Duration::from_millis(500)).await;
    in_flight.write_all(rest).await.unwrap();
    in_flight.flush().await.unwrap();
    let (status, text) = answer(&mut in_flight).await.expect("the call in flight was answered");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"allowed\":true"), "{text}");

    // A new call during the grace.
    let mut late = connect(a.webhooks, certs.path()).await;
    late.write_all(format!("{}{body}", head(&path, body.len())).as_bytes()).await.unwrap();
    let (status, text) = answer(&mut late).await.expect("a call during the grace was answered");
    assert_eq!(status, 200, "{text}");
    let status = a.exited().await;
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

/// A replica that has bound its webhook port but not loaded a plugin yet
/// never answers 404 for it: it waits (bounded) for the plugin, then
/// answers it, or answers as the plugin's failure policy says.
#[tokio::test]
async fn a_replica_still_loading_a_plugin_does_not_answer_404_for_it() {
    use tokio::io::AsyncWriteExt;
    let c = Cluster::new("ho-404").await;
    let certs = cert_dir();
    // Served slowly: a replica takes 3 s to load it.
    let bytes = guest("rust-webapp");
    let url = serve::serve_module_slowly(bytes.clone(), Duration::from_secs(3)).await;
    let sha = operon::runtime::digest(&bytes).trim_start_matches("sha256:").to_string();
    let spec = json!({"module": {"url": {"href": url, "sha256": sha}}, "grants": webapp_grants(),
                      "admission": {"failurePolicy": "Fail", "timeoutSeconds": 10}});
    c.reconciler(&c.ns, "webapp", spec).await;
    let _a = replica("host-a", &c.ns, Some(certs.path()));
    eventually("the webhooks to answer", WAIT, || async { answers(&c).await.then_some(()) }).await;

    // Another replica starts; as soon as its port takes connections, the
    // plugin is asked there (as a Service or a re-pointed URL would).
    let b = replica("host-b", &c.ns, Some(certs.path()));
    let started = Instant::now();
    let path = format!("/validate/r.{}.webapp", c.ns);
    let body = review(&c.ns);
    let mut stream = eventually("host-b's webhook port", WAIT, || async {
        tokio::net::TcpStream::connect(("127.0.0.1", b.webhooks)).await.ok()
    })
    .await;
    drop(stream.shutdown().await);
    let mut call = connect(b.webhooks, certs.path()).await;
    let asked = started.elapsed();
    call.write_all(format!("{}{body}", head(&path, body.len())).as_bytes()).await.unwrap();
    let (status, text) = answer(&mut call).await.expect("an answer");
    eprintln!("handover: asked {asked:?} after start; answered {status} after {:?}", started.elapsed());
    assert_ne!(status, 404, "a plugin still loading was answered 'not registered': {text}");
    assert_eq!(status, 200, "an AdmissionReview answer: {text}");
    assert!(text.contains("\"uid\":\"u1\""), "{text}");
}

/// When the replica whose address the plugin's configurations name (the
/// default `--webhook-url-host`) is killed, another replica that serves the
/// plugin points them at itself as soon as the address stops answering —
/// not a lease duration later, when it leads the plugin.
#[tokio::test]
async fn the_webhooks_of_a_killed_replica_move_before_its_lease_expires() {
    let c = Cluster::new("ho-url").await;
    let certs = cert_dir();
    webapp_plugin(&c).await;
    // A long lease: the webhooks must not wait for it.
    const LONG_LEASE: u64 = 15;
    let mut replicas = [
        replica_with("host-a", &c.ns, Some(certs.path()), LONG_LEASE, &[]),
        replica_with("host-b", &c.ns, Some(certs.path()), LONG_LEASE, &[]),
    ];
    eventually("the webhooks to answer", WAIT, || async { answers(&c).await.then_some(()) }).await;
    let route = format!("webhook=\"/validate/r.{}.webapp\"", c.ns);
    for r in &replicas {
        eventually("both replicas to route the plugin", WAIT, || async {
            r.has_series("controller_runtime_webhook_requests_in_flight", &route).await.filter(|h| *h)
        })
        .await;
    }
    let port = eventually("the configured address", WAIT, || configured_port(&c)).await;
    let named = replicas.iter().position(|r| r.webhooks == port).expect("a replica's own port");
    replicas[named].kill9();
    let killed = Instant::now();
    let (mut refused, mut answered_at) = (0, None);
    for i in 0.. {
        match create(&c, &format!("w{i}"), true).await.0 {
            Admission::Admitted => {
                answered_at = Some(killed.elapsed());
                break;
            }
            Admission::Refused => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
        if killed.elapsed() > Duration::from_secs(LONG_LEASE + 10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let outage = answered_at.expect("admission came back");
    eprintln!("handover: admission back {outage:?} after kill -9 ({refused} creates refused; lease {LONG_LEASE}s)");
    assert!(
        outage < Duration::from_secs(LONG_LEASE / 2),
        "admission came back {outage:?} after the kill, as late as a lease duration ({LONG_LEASE}s)"
    );
    let other = &replicas[1 - named];
    assert_eq!(configured_port(&c).await, Some(other.webhooks), "pointed at the surviving replica");
}

/// A hand-over leaves the record of the last swap and of Ready's last
/// transition as they were, and tells itself in an event.
#[tokio::test]
async fn a_hand_over_keeps_the_status_history_and_says_so_in_an_event() {
    let c = Cluster::new("ho-status").await;
    let ns = c.stamps(1).await.remove(0);
    let mut a = replica("host-a", &c.ns, None);
    eventually("Ready", WAIT, || async {
        let r = c.reconcilers(&ns).get("stamp").await.ok()?;
        r.status?.conditions.into_iter().find(|x| x.type_ == "Ready" && x.status == "True").map(|_| ())
    })
    .await;
    // The standby loads the module seconds later than the leader did.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b = replica("host-b", &c.ns, None);
    b.wait_ready().await;
    let before = c.reconcilers(&ns).get("stamp").await.unwrap().status.unwrap();
    let ready_since = |s: &operon::reconciler::crd::ReconcilerStatus| {
        s.conditions.iter().find(|x| x.type_ == "Ready").map(|x| x.last_transition_time.clone())
    };
    assert_eq!(c.leader(&ns, "stamp").await.as_deref(), Some("host-a"));
    a.terminate().await;
    let after = eventually("host-b to lead and say so in the status", WAIT, || async {
        let s = c.reconcilers(&ns).get("stamp").await.ok()?.status?;
        s.leader.as_deref().is_some_and(|l| replica_of(l) == "host-b").then_some(s)
    })
    .await;
    assert_eq!(after.last_swap_time, before.last_swap_time, "lastSwapTime moved though nothing was swapped");
    assert_eq!(ready_since(&after), ready_since(&before), "Ready's lastTransitionTime moved, Ready did not");
    assert_eq!(after.digest, before.digest);
    let events = eventually("an event telling the hand-over", WAIT, || async {
        let events = c.events(&ns, "stamp").await;
        // host-a's own, when it came to lead first, says its Lease was new.
        events.iter().find(|(reason, m)| reason == "LeaderElected" && m.starts_with("host-b")).cloned()
    })
    .await;
    assert!(events.1.contains("host-a") && events.1.contains("handed its Lease"), "{events:?}");
}

/// The membership Lease of a killed replica (which never deleted its own)
/// is deleted by the others.
#[tokio::test]
async fn a_killed_replicas_membership_is_cleaned_up_by_the_others() {
    let c = Cluster::new("ho-members").await;
    c.stamps(1).await;
    let _a = replica("host-a", &c.ns, None);
    let mut b = replica("host-b", &c.ns, None);
    eventually("two members", WAIT, || async { (c.members().await.len() == 2).then_some(()) }).await;
    b.kill9();
    let killed = Instant::now();
    eventually("the killed replica's membership deleted", WAIT, || async {
        let members = c.members().await;
        (members.len() == 1 && members.values().all(|h| replica_of(h) == "host-a")).then_some(())
    })
    .await;
    eprintln!("handover: a killed replica's membership deleted {:?} after the kill", killed.elapsed());
}

/// What a load of creates saw: each create's time, name and outcome.
#[derive(Default)]
struct Load {
    creates: Vec<(Instant, String, bool, Admission)>,
}

impl Load {
    /// Creates every 200 ms (every fifth asking for what `validate`
    /// denies) until `stop` turns true.
    async fn run(c: Arc<Cluster>, stop: tokio::sync::watch::Receiver<bool>) -> Load {
        let mut load = Load::default();
        for i in 0.. {
            if *stop.borrow() {
                break;
            }
            let (name, valid) = (format!("roll-{i}"), i % 5 != 4);
            let at = Instant::now();
            let (outcome, message) = create(&c, &name, valid).await;
            if outcome == Admission::Refused {
                eprintln!("handover: create {name} refused: {message}");
            }
            load.creates.push((at, name, valid, outcome));
            tokio::time::sleep(Duration::from_millis(200).saturating_sub(at.elapsed())).await;
        }
        load
    }
}

/// When each Deployment (named after its WebApp) was first seen.
async fn watch_deployments(c: Arc<Cluster>, stop: tokio::sync::watch::Receiver<bool>) -> BTreeMap<String, Instant> {
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), &c.ns);
    let mut seen = BTreeMap::new();
    while !*stop.borrow() {
        if let Ok(list) = api.list(&ListParams::default()).await {
            for d in list.items {
                if let Some(name) = d.metadata.name {
                    seen.entry(name).or_insert_with(Instant::now);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

/// Samples of the plugin's Lease holder (`""` when free), every 100 ms.
async fn watch_leader(c: Arc<Cluster>, stop: tokio::sync::watch::Receiver<bool>) -> Vec<(Instant, String)> {
    let lease = operon::leader::lease_name("operon-leader", &format!("{}/webapp", c.ns));
    let mut samples = Vec::new();
    while !*stop.borrow() {
        if let Ok(Some(l)) = c.leases().get_opt(&lease).await {
            let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            samples.push((Instant::now(), replica_of(&holder).to_string()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    samples
}

/// One hand-over of the rolling update: what it was, when, and who went.
struct HandOver {
    what: &'static str,
    at: Instant,
    gone: String,
}

/// A rolling update as an SRE would run it, with a plugin serving
/// admission (failurePolicy `Fail`) under creates every 200 ms: three
/// rolling restarts (a new replica started and ready, then the oldest
/// stopped with SIGTERM) and a `kill -9` of the replica the webhooks name.
/// For each hand-over it counts refused creates, creates that bypassed
/// admission, how long the plugin had no live leader and how late its
/// reconciles came. Graceful hand-overs refuse nothing and leave the plugin
/// without a leader for no longer than a retry period; nothing ever
/// bypasses admission.
#[tokio::test]
async fn a_rolling_update_under_load_refuses_nothing_and_bypasses_nothing() {
    let c = Arc::new(Cluster::new("ho-roll").await);
    let certs = cert_dir();
    webapp_plugin(&c).await;
    c.stamps(2).await;
    let mut replicas: std::collections::VecDeque<Replica> =
        (0..2).map(|i| replica(&format!("host-{i}"), &c.ns, Some(certs.path()))).collect();
    for r in &replicas {
        r.wait_ready().await;
    }
    eventually("the webhooks to answer", WAIT, || async { answers(&c).await.then_some(()) }).await;
    c.held_by(3, &["host-0", "host-1"]).await;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = tokio::spawn(Load::run(c.clone(), stopped.clone()));
    let deployments = tokio::spawn(watch_deployments(c.clone(), stopped.clone()));
    let leader = tokio::spawn(watch_leader(c.clone(), stopped.clone()));
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut hand_overs = Vec::new();
    let mut next = 2;
    for _ in 0..3 {
        let fresh = replica(&format!("host-{next}"), &c.ns, Some(certs.path()));
        next += 1;
        fresh.wait_ready().await;
        replicas.push_back(fresh);
        let mut old = replicas.pop_front().unwrap();
        hand_overs.push(HandOver { what: "rolling restart", at: Instant::now(), gone: old.name.clone() });
        let status = old.terminate().await;
        assert!(status.success(), "{} exited with {status}", old.name);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // A node lost: the replica the webhooks name dies, a new one replaces it.
    let port = eventually("the configured address", WAIT, || configured_port(&c)).await;
    let named = replicas.iter().position(|r| r.webhooks == port).expect("a replica's own port");
    let mut dead = replicas.remove(named).unwrap();
    hand_overs.push(HandOver { what: "kill -9", at: Instant::now(), gone: dead.name.clone() });
    dead.kill9();
    let fresh = replica(&format!("host-{next}"), &c.ns, Some(certs.path()));
    fresh.wait_ready().await;
    replicas.push_back(fresh);
    tokio::time::sleep(Duration::from_secs(LEASE_SECS + 2)).await;
    stop.send_replace(true);
    let (load, leader) = (load.await.unwrap(), leader.await.unwrap());
    // When each Deployment appeared, as the live watch saw it; the last
    // creates get theirs after the load stops, seen by a last watch (their
    // delays then read longer than they were, never shorter).
    let mut late = deployments.await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (stop_d, stopped_d) = tokio::sync::watch::channel(false);
    let seen = tokio::spawn(watch_deployments(c.clone(), stopped_d));
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_d.send_replace(true);
    for (name, at) in seen.await.unwrap() {
        late.entry(name).or_insert(at);
    }
    let elapsed = started.elapsed();

    // Per hand-over: from it to the next one (or the end).
    let mut figures = Vec::new();
    for (i, h) in hand_overs.iter().enumerate() {
        let end = hand_overs.get(i + 1).map_or(Instant::now(), |n| n.at);
        let during: Vec<_> = load.creates.iter().filter(|(at, ..)| *at >= h.at && *at < end).collect();
        let refused = during.iter().filter(|(.., o)| *o == Admission::Refused).count();
        let bypassed = during.iter().filter(|(.., o)| *o == Admission::Bypassed).count();
        let delays: Vec<Duration> = during
            .iter()
            .filter(|(_, _, valid, o)| *valid && *o == Admission::Admitted)
            .filter_map(|(at, name, ..)| late.get(name).map(|seen| seen.saturating_duration_since(*at)))
            .collect();
        let max_delay = delays.iter().max().copied().unwrap_or_default();
        // The plugin without a live leader: free, or held by the replica
        // that went, from the hand-over on.
        let leaderless = leader
            .iter()
            .filter(|(at, _)| *at >= h.at && *at < end)
            .take_while(|(_, holder)| holder.is_empty() || *holder == h.gone)
            .last()
            .map_or(Duration::ZERO, |(at, _)| at.saturating_duration_since(h.at) + Duration::from_millis(100));
        eprintln!(
            "handover: {:<15} of {}: {} creates, {refused} refused, {bypassed} bypassed, plugin leaderless {leaderless:?}, \
             reconcile delay max {max_delay:?} over {} parents",
            h.what,
            h.gone,
            during.len(),
            delays.len()
        );
        figures.push((h.what, refused, bypassed, leaderless, max_delay));
    }
    let total = load.creates.len();
    let bypassed = load.creates.iter().filter(|(.., o)| *o == Admission::Bypassed).count();
    let unreconciled: Vec<&String> = load
        .creates
        .iter()
        .filter(|(_, name, valid, o)| *valid && *o == Admission::Admitted && !late.contains_key(name))
        .map(|(_, name, ..)| name)
        .collect();
    eprintln!(
        "handover: {total} creates over {elapsed:?} (lease {LEASE_SECS}s, retry {RETRY:?}); measured on a shared machine"
    );
    assert_eq!(bypassed, 0, "creates admitted that validate denies");
    assert!(unreconciled.is_empty(), "admitted WebApps never reconciled: {unreconciled:?}");
    for (what, refused, _, leaderless, _) in &figures {
        if *what == "rolling restart" {
            assert_eq!(*refused, 0, "a rolling restart refused creates");
            assert!(
                *leaderless <= RETRY + Duration::from_secs(1),
                "the plugin had no live leader for {leaderless:?} in a rolling restart"
            );
        }
    }
}
