//! The admission server as a tenant's flood, a stranger's or a rotated
//! Secret meets it, against a real kube-apiserver: calls over the
//! per-plugin or total cap are refused at once (and the API server applies
//! the webhook's failure policy), a plugin past its admission budget is
//! refused until it is repaid, a flood leaves a neighbour's reconciles and
//! the plugin's own alone, a stranger without the API server's client
//! certificate is cut off at the handshake while legitimate creates go
//! through, and a rotated CA reaches the webhook configurations while the
//! server serves the new certificate.
//!
//! The plugin is `admission-misbehave` (its `validate` loops when the
//! object says `admission-test: loop`, and traps otherwise); the neighbour
//! is the `rust-webapp` guest reconciling WebApps in another namespace.

use crate::common;

use common::{eventually, guest, webapp_crd};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use operon::manager::{self, Manager};
use operon::metrics::Metrics;
use operon::runtime::{self, Limits, Runtime};
use operon::webhook::{self, FailurePolicy, Hook, Registration, Webhooks};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("webhooks", || operon_envtest::Options::default().crd(webapp_crd()))
}

fn runtime() -> Runtime {
    Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap()
}

fn init_logs() {
    crate::common::logs::init();
}

/// A manager serving one plugin's webhooks in its own namespace.
struct Plugin {
    client: kube::Client,
    namespace: String,
    webhooks: Webhooks,
    metrics: Arc<Metrics>,
    plugin: Registration,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), manager::Error>>,
}

impl Plugin {
    /// `module` with webhooks served per `config` (bind and endpoint are
    /// filled in), the API server's timeout `timeout` (the guest's deadline
    /// is half of it, and at most the module's 1 s), and a guest CPU budget
    /// of `guest_cpu` (`0`: none).
    async fn start(prefix: &str, module: &str, config: webhook::Config, timeout: Duration, guest_cpu: f64) -> Plugin {
        Plugin::start_with(prefix, module, config, timeout, guest_cpu, FailurePolicy::Fail, &[]).await
    }

    /// [`Plugin::start`], answering per `policy`; with `parents`, the
    /// plugin's controller runs too, and these WebApps exist before its
    /// webhooks do.
    async fn start_with(
        prefix: &str,
        module: &str,
        config: webhook::Config,
        timeout: Duration,
        guest_cpu: f64,
        policy: FailurePolicy,
        parents: &[&str],
    ) -> Plugin {
        init_logs();
        let client = plane().client().await;
        let namespace = operon_envtest::create_namespace(&client, prefix).await.unwrap();
        let runtime = runtime();
        let module = runtime.load(&guest(module), Limits::default()).unwrap();
        let config = webhook::Config {
            bind: ([127, 0, 0, 1], 0).into(),
            endpoint: webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
            ..config
        };
        let mgr = Manager::builder(client.clone())
            .config(manager::Config {
                pipeline: operon::pipeline::Config { namespace: Some(namespace.clone()), ..Default::default() },
                server_addr: None,
                ..Default::default()
            })
            .runtime(runtime)
            .webhooks(config)
            .build()
            .await
            .unwrap();
        // Registered, not run: the plugin answers admission only (its
        // reconcile would fail on every WebApp).
        let settings = operon::pipeline::Config { guest_cpu, ..Default::default() };
        let controller = mgr.build_controller(module, settings, None, false);
        let metrics = mgr.metrics().clone();
        let webhooks = mgr.webhooks().unwrap().clone();
        let leadership = mgr.leadership(controller.name());
        for name in parents {
            webapps(&client, &namespace).create(&PostParams::default(), &webapp(name, json!({}))).await.unwrap();
        }
        if !parents.is_empty() {
            mgr.start(controller.clone(), leadership.clone()).unwrap();
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(mgr.run(async move {
            let _ = stopped.await;
        }));
        let mut plugin = Registration::new(format!("flood-{namespace}"), controller, leadership);
        plugin.failure_policy = policy;
        plugin.timeout = timeout;
        plugin.scope_namespace = Some(namespace.clone());
        webhooks.register(plugin.clone()).await.unwrap();
        Plugin { client, namespace, webhooks, metrics, plugin, stop: Some(stop), task }
    }

    fn webapps(&self) -> Api<DynamicObject> {
        webapps(&self.client, &self.namespace)
    }

    /// An AdmissionReview of a WebApp; `looping` makes the guest spin.
    fn review(&self, looping: bool) -> Vec<u8> {
        let annotations = if looping { json!({"admission-test": "loop"}) } else { json!({}) };
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "operation": "CREATE", "name": "w", "namespace": self.namespace,
                "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
                "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
                "userInfo": {"username": "tester"},
                "object": {"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                    "metadata": {"name": "w", "namespace": self.namespace, "annotations": annotations},
                    "spec": {"image": "nginx"}}
            }
        }))
        .unwrap()
    }

    /// One call as the HTTPS server makes it: `(status, body)`.
    async fn call(&self, looping: bool) -> (u16, String) {
        let answer = self.webhooks.answer(Hook::Validate, &self.plugin.name, &self.review(looping)).await;
        (answer.status, String::from_utf8_lossy(&answer.body).into_owned())
    }

    /// The sum of a metric family's series whose labels contain `filter`.
    fn metric(&self, family: &str, filter: &str) -> f64 {
        let text = self.metrics.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with(family) && l.contains(filter))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    }

    /// Wait until the API server calls the webhook.
    async fn wait_active(&self) {
        let path = Hook::Validate.path(&self.plugin.name);
        eventually("the API server to call the webhook", WAIT, || async {
            let before = self.metric("controller_runtime_webhook_requests_total", &path);
            let _ = dry_run(&self.webapps(), "probe", json!({})).await;
            (self.metric("controller_runtime_webhook_requests_total", &path) > before).then_some(())
        })
        .await;
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(60), &mut self.task).await;
        self.webhooks.shut_down();
    }
}

fn webapps(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

fn webapp(name: &str, annotations: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"image": "nginx:1.27", "port": 8080, "replicas": 1}
    }))
    .unwrap()
}

async fn dry_run(api: &Api<DynamicObject>, name: &str, annotations: Value) -> Result<DynamicObject, kube::Error> {
    api.create(&PostParams { dry_run: true, ..Default::default() }, &webapp(name, annotations)).await
}

/// Calls beyond the per-plugin cap are refused at once — not queued behind
/// the guest — with an error naming the flag, counted; the API server turns
/// the refusal into the webhook's failure policy.
#[tokio::test]
async fn calls_over_the_plugins_cap_are_refused_at_once_and_counted() {
    let p =
        Plugin::start("wh-cap", "admission-misbehave", webhook::Config::default(), Duration::from_secs(4), 0.0).await;
    p.wait_active().await;
    let started = Instant::now();
    let calls: Vec<_> = (0..10).map(|_| p.call(true)).collect();
    let answers = futures::future::join_all(calls).await;
    let refused: Vec<&(u16, String)> = answers.iter().filter(|(code, _)| *code == 429).collect();
    let ran = answers.iter().filter(|(code, _)| *code == 200).count();
    eprintln!("10 looping calls at once: {ran} ran, {} refused, in {:?}", refused.len(), started.elapsed());
    assert!(!refused.is_empty(), "ten calls at once, none refused: {answers:?}");
    assert!(ran <= 4, "at most the per-plugin cap (4 by default) runs at once: {ran} ran");
    assert!(
        refused.iter().all(|(_, body)| body.contains("--webhook-max-concurrent-per-plugin")),
        "a refusal names the flag: {refused:?}"
    );
    let counted = p.metric("operon_webhook_refused_total", r#"reason="plugin_concurrency""#);
    assert_eq!(counted, refused.len() as f64, "every refusal is counted");

    // While the cap is full, the API server gets the refusal and applies
    // failurePolicy Fail: the request is denied with the reason.
    let looping: Vec<_> = (0..4).map(|_| p.call(true)).collect();
    let (results, denied) = tokio::join!(futures::future::join_all(looping), async {
        // Once all four hold their places (a fixed pause loses the race on
        // a loaded machine: the dry run would take a place itself).
        let started = Instant::now();
        while p.metric("controller_runtime_webhook_requests_in_flight", "") < 4.0 {
            assert!(started.elapsed() < WAIT, "the four looping calls never were in flight together");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        dry_run(&p.webapps(), "over-cap", json!({})).await
    });
    eprintln!("in flight: {:?}", results.iter().map(|r| r.0).collect::<Vec<_>>());
    match denied {
        Err(kube::Error::Api(status)) => {
            eprintln!("the API server said: {}", status.message);
            assert!(status.message.contains("--webhook-max-concurrent-per-plugin"), "{status:?}");
        }
        other => panic!("expected the API server to deny per failurePolicy Fail, got {other:?}"),
    }
    p.stop().await;
}

/// Webhook calls spend the plugin's guest CPU budget (`spec.limits.cpu`,
/// the same budget its reconciles spend): past it, calls are refused at
/// once until the debt is repaid.
#[tokio::test]
async fn a_plugin_past_its_cpu_budget_is_refused_until_repaid() {
    // Each looping call burns its 1 s deadline, of a budget of a quarter
    // CPU with 2 s saved up (the defaults).
    let p =
        Plugin::start("wh-cpu", "admission-misbehave", webhook::Config::default(), Duration::from_secs(4), 0.25).await;
    p.wait_active().await;
    let mut refusal = None;
    for i in 0..8 {
        let (code, body) = p.call(true).await;
        eprintln!("looping call {i}: {code}");
        if code == 429 {
            refusal = Some(body);
            break;
        }
    }
    let refusal = refusal.expect("a plugin looping on every call was never refused by its CPU budget");
    assert!(refusal.contains("spec.limits.cpu"), "the refusal names the budget: {refusal}");
    assert!(p.metric("operon_webhook_refused_total", r#"reason="cpu_budget""#) >= 1.0);
    let started = Instant::now();
    let (code, _) = p.call(false).await;
    assert_eq!(code, 429, "in debt, a quick call is refused too, at once");
    assert!(started.elapsed() < Duration::from_millis(500), "refused at once: {:?}", started.elapsed());
    // Repaid, calls run again (the trapping call is answered per the
    // failure policy: a 200 with a denial).
    eventually("the debt to be repaid", WAIT, || async { (p.call(false).await.0 == 200).then_some(()) }).await;
    p.stop().await;
}

/// A flood of valid AdmissionReviews from a client nobody authenticated
/// (any pod that reaches the port) spends the plugin's admission budget
/// only: past it, admission calls are refused fast (429) and counted, and
/// the plugin's own reconciles neither wait for guest CPU nor slow down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_flood_leaves_the_plugins_own_reconciles_unthrottled() {
    let p = Plugin::start_with(
        "wh-own",
        "admission-misbehave",
        webhook::Config::default(),
        Duration::from_secs(4),
        0.25,
        FailurePolicy::Ignore,
        &["before-0", "before-1"],
    )
    .await;
    let controller = p.plugin.name.clone();
    let name = p.plugin.controller.name().to_string();
    let reconciles = || p.metric("controller_runtime_reconcile_total", &format!("controller=\"{name}\""));
    eventually("the plugin's first reconciles", WAIT, || async { (reconciles() >= 2.0).then_some(()) }).await;
    // The flood: looping reviews (each burns the guest's 1 s deadline), four
    // at once, until the budget refuses them.
    let mut refused = 0;
    let started = Instant::now();
    while refused < 20 && started.elapsed() < WAIT {
        let calls: Vec<_> = (0..4).map(|_| p.call(true)).collect();
        refused += futures::future::join_all(calls).await.iter().filter(|(code, _)| *code == 429).count();
    }
    assert!(refused >= 20, "the flood of {controller} was never refused");
    assert!(p.metric("operon_webhook_refused_total", r#"reason="cpu_budget""#) >= 1.0, "refusals are counted");
    // A new parent: the API server admits it (Ignore), the plugin reconciles it.
    let before = reconciles();
    p.webapps().create(&PostParams::default(), &webapp("after", json!({}))).await.unwrap();
    let waited = Instant::now();
    eventually("the plugin to reconcile the new WebApp", WAIT, || async { (reconciles() > before).then_some(()) })
        .await;
    eprintln!("after the flood ({refused} refused), the new WebApp was reconciled in {:?}", waited.elapsed());
    let throttled = p.metric("operon_guest_throttled_seconds_total", &format!("controller=\"{name}\""));
    assert_eq!(throttled, 0.0, "the plugin's reconciles waited {throttled}s for guest CPU the flood spent");
    p.stop().await;
}

/// A flood of webhook calls to one plugin leaves a neighbour's reconciles
/// alone: its WebApps converge under the flood, and the flood's guest time
/// is held to the plugin's budget. (How much the neighbour slows down is
/// printed, not asserted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_flood_leaves_a_neighbours_reconciles_alone() {
    let p = Plugin::start("wh-flood", "admission-misbehave", webhook::Config::default(), Duration::from_secs(4), 0.25)
        .await;
    // The neighbour: rust-webapp reconciling WebApps in its own namespace.
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "wh-neighbour").await.unwrap();
    let mgr = Manager::builder(client.clone())
        .config(manager::Config {
            pipeline: operon::pipeline::Config {
                namespace: Some(ns.clone()),
                controller: operon::controller::Config { max_concurrent_reconciles: 2, ..Default::default() },
                ..Default::default()
            },
            server_addr: None,
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    mgr.add(runtime().load(&guest("rust-webapp"), Limits::default()).unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let neighbour = tokio::spawn(mgr.run(async move {
        let _ = stopped.await;
    }));
    let converge = |batch: &'static str| {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            let started = Instant::now();
            let api = webapps(&client, &ns);
            for i in 0..10 {
                api.create(&PostParams::default(), &webapp(&format!("{batch}-{i}"), json!({}))).await.unwrap();
            }
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
            eventually(&format!("the neighbour's {batch} WebApps to converge"), WAIT, || async {
                let list = deployments.list(&Default::default()).await.ok()?;
                let n =
                    list.items.iter().filter(|d| d.metadata.name.as_deref().unwrap_or("").starts_with(batch)).count();
                (n == 10).then_some(())
            })
            .await;
            started.elapsed()
        }
    };
    let calm = converge("calm").await;

    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (ran, refused) =
        (Arc::new(std::sync::atomic::AtomicUsize::new(0)), Arc::new(std::sync::atomic::AtomicUsize::new(0)));
    let p = Arc::new(p);
    let flood_started = Instant::now();
    let flood: Vec<_> = (0..32)
        .map(|_| {
            let (p, flooding, ran, refused) = (p.clone(), flooding.clone(), ran.clone(), refused.clone());
            tokio::spawn(async move {
                while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                    match p.call(true).await.0 {
                        200 => ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                        _ => refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let flooded = converge("flooded").await;
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let lasted = flood_started.elapsed();
    let (ran, refused) =
        (ran.load(std::sync::atomic::Ordering::Relaxed), refused.load(std::sync::atomic::Ordering::Relaxed));
    eprintln!(
        "neighbour: 10 WebApps converged in {calm:?} calm, {flooded:?} under the flood ({:.2}x); the flood: \
         {ran} calls ran the guest, {refused} were refused, over {lasted:?}",
        flooded.as_secs_f64() / calm.as_secs_f64()
    );
    // Guest time the plugin may spend: its 2 s saved up, a quarter CPU
    // since, and the calls in flight when the debt came (each up to its
    // 1 s deadline), with a tenth for the deadline's granularity.
    let allowed = (2.0 + 0.25 * lasted.as_secs_f64() + 4.0) * 1.1 + 1.0;
    assert!((ran as f64) <= allowed.ceil(), "the flood ran {ran} guest calls, its budget allows {allowed:.0}");
    assert!(refused > 0, "a flood past the budget and the caps is refused");
    let _ = stop.send(());
    let _ = tokio::time::timeout(WAIT, neighbour).await;
    if let Ok(p) = Arc::try_unwrap(p) {
        p.stop().await;
    }
}

/// A serving certificate and its CA for 127.0.0.1, written into `dir` as a
/// mounted Secret holds them (`tls.crt`, `tls.key`, `ca.crt`); the CA's PEM.
fn write_certs(dir: &Path) -> String {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "operon-test-ca");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
    // As the kubelet updates a Secret volume: each file replaced whole.
    for (name, text) in [("ca.crt", ca_cert.pem()), ("tls.crt", cert.pem()), ("tls.key", key.serialize_pem())] {
        let tmp = dir.join(format!(".{name}.new"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
    ca_cert.pem()
}

/// Suspected in issue 18: a CA rotated in the cert directory (cert-manager
/// renewing the Secret) must reach the webhook configurations' caBundle,
/// and the server must serve the new certificate, so the API server keeps
/// calling the webhooks.
#[tokio::test]
async fn a_rotated_ca_reaches_the_configurations_and_the_new_certificate_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_certs(dir.path());
    let config = webhook::Config { cert_dir: Some(dir.path().to_path_buf()), ..Default::default() };
    let p = Plugin::start("wh-rotate", "rust-webapp", config, Duration::from_secs(5), 0.25).await;
    p.wait_active().await;
    let name = format!("operon-{}", p.plugin.name);
    let validating = Api::<ValidatingWebhookConfiguration>::all(p.client.clone());
    let mutating = Api::<MutatingWebhookConfiguration>::all(p.client.clone());
    let bundles = || async {
        let v = validating.get(&name).await.ok()?;
        let m = mutating.get(&name).await.ok()?;
        let of = |c: Option<&k8s_openapi::ByteString>| c.map(|b| String::from_utf8_lossy(&b.0).into_owned());
        Some((
            of(v.webhooks?.first()?.client_config.ca_bundle.as_ref())?,
            of(m.webhooks?.first()?.client_config.ca_bundle.as_ref())?,
        ))
    };
    assert_eq!(bundles().await, Some((first.clone(), first.clone())), "the first CA is in both configurations");

    let second = write_certs(dir.path());
    assert_ne!(first, second);
    let (validating_ca, mutating_ca) = eventually("the new CA in both configurations", WAIT, || async {
        bundles().await.filter(|(v, m)| *v == second && *m == second)
    })
    .await;
    assert_eq!((validating_ca, mutating_ca), (second.clone(), second.clone()));

    // The server serves a certificate of the new CA, and the API server
    // (which now trusts only that) calls it again.
    operon::install_crypto_provider();
    let trusting = |pem: &str| {
        let ca = reqwest::Certificate::from_pem(pem.as_bytes()).unwrap();
        reqwest::Client::builder().tls_certs_only([ca]).build().unwrap()
    };
    let healthz = format!("https://127.0.0.1:{}/healthz", p.webhooks.local_addr().port());
    eventually("the new certificate served", WAIT, || async {
        trusting(&second).get(&healthz).send().await.ok().filter(|r| r.status().is_success())
    })
    .await;
    assert!(trusting(&first).get(&healthz).send().await.is_err(), "the old certificate is no longer served");
    p.wait_active().await;
    p.stop().await;
}

/// With `--webhook-client-ca-file`, only a client presenting a certificate
/// that CA signed (the API server, given one by its AdmissionConfiguration)
/// gets an answer; any other pod that reaches the port fails the handshake
/// before a byte of its review is read (issue 18, finding 2).
#[tokio::test]
async fn with_a_client_ca_only_clients_it_signed_are_served() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    init_logs();
    operon::install_crypto_provider();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "apiserver-webhook-client-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let client_key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client.signed_by(&client_key, &issuer).unwrap();
    // A stranger's certificate, from a CA the server does not know.
    let stranger_key = KeyPair::generate().unwrap();
    let stranger = CertificateParams::new(Vec::<String>::new()).unwrap().self_signed(&stranger_key).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    let config = webhook::Config {
        bind: ([127, 0, 0, 1], 0).into(),
        endpoint: webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
        client_ca: Some(ca_file),
        ..Default::default()
    };
    let webhooks = Webhooks::start(plane().client().await, Arc::new(Metrics::new()), config).await.unwrap();
    let server_ca = webhooks.ca_bundle().expect("a generated CA");

    // One HTTPS request with an optional client certificate: the status
    // line, or the error that stopped it.
    let ask = |identity: Option<(String, String)>| {
        let (addr, server_ca) = (webhooks.local_addr(), server_ca.clone());
        async move {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&server_ca) {
                roots.add(cert.unwrap()).unwrap();
            }
            let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
            let tls = match identity {
                None => builder.with_no_client_auth(),
                Some((cert, key)) => builder
                    .with_client_auth_cert(
                        vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                        PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                    )
                    .unwrap(),
            };
            let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = ServerName::IpAddress(addr.ip().into());
            let answer = async {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut stream = connector.connect(name, tcp).await?;
                stream
                    .write_all(b"POST /validate/nobody HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
                    .await?;
                let mut out = Vec::new();
                stream.read_to_end(&mut out).await?;
                Ok::<_, std::io::Error>(String::from_utf8_lossy(&out).lines().next().unwrap_or_default().to_string())
            };
            tokio::time::timeout(WAIT, answer).await.expect("an answer or an error, not a hang")
        }
    };
    let signed = ask(Some((client_cert.pem(), client_key.serialize_pem()))).await;
    assert!(matches!(&signed, Ok(line) if line.starts_with("HTTP/1.1 404")), "the signed client: {signed:?}");
    let anonymous = ask(None).await;
    assert!(!matches!(&anonymous, Ok(line) if line.starts_with("HTTP/")), "no certificate, yet served: {anonymous:?}");
    let strange = ask(Some((stranger.pem(), stranger_key.serialize_pem()))).await;
    assert!(!matches!(&strange, Ok(line) if line.starts_with("HTTP/")), "an unknown CA, yet served: {strange:?}");
    webhooks.shut_down();
}

/// With the API server's webhook client certificate required (an
/// AdmissionConfiguration whose kubeconfig gives the API server a
/// certificate, and `--webhook-client-ca-file` its CA), a stranger's flood
/// of valid AdmissionReviews is cut off at the handshake: the plugin
/// answers none of them, spends nothing, and the API server's own calls —
/// legitimate creates of the plugin's kind under `failurePolicy: Fail` —
/// all go through meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_api_servers_client_certificate_required_a_strangers_flood_denies_no_create() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    init_logs();
    operon::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "apiserver-webhook-client-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let client_key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client.distinguished_name.push(DnType::CommonName, "kube-apiserver-webhook-client");
    client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client.signed_by(&client_key, &issuer).unwrap();
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("client-ca.crt"), ca_cert.pem()).unwrap();
    std::fs::write(path("client.crt"), client_cert.pem()).unwrap();
    std::fs::write(path("client.key"), client_key.serialize_pem()).unwrap();
    std::fs::write(
        path("webhook-kubeconfig.yaml"),
        format!(
            "apiVersion: v1\nkind: Config\nusers:\n  - name: '*'\n    user:\n      client-certificate: {}\n      client-key: {}\n",
            path("client.crt").display(),
            path("client.key").display()
        ),
    )
    .unwrap();
    let plugin = |name: &str| {
        format!(
            "  - name: {name}\n    configuration:\n      apiVersion: apiserver.config.k8s.io/v1\n      kind: WebhookAdmissionConfiguration\n      kubeConfigFile: {}\n",
            path("webhook-kubeconfig.yaml").display()
        )
    };
    std::fs::write(
        path("admission.yaml"),
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
            plugin("ValidatingAdmissionWebhook"),
            plugin("MutatingAdmissionWebhook")
        ),
    )
    .unwrap();
    let options = operon_envtest::Options::default()
        .crd(webapp_crd())
        .apiserver_arg(format!("--admission-control-config-file={}", path("admission.yaml").display()));
    let plane =
        tokio::task::spawn_blocking(move || operon_envtest::ControlPlane::start(options)).await.unwrap().unwrap();
    let client = plane.client().await;
    let namespace = operon_envtest::create_namespace(&client, "wh-mtls").await.unwrap();
    let runtime = runtime();
    let module = runtime.load(&guest("rust-webapp"), Limits::default()).unwrap();
    let config = webhook::Config {
        bind: ([127, 0, 0, 1], 0).into(),
        endpoint: webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
        client_ca: Some(path("client-ca.crt")),
        ..Default::default()
    };
    let mgr = Manager::builder(client.clone())
        .config(manager::Config {
            pipeline: operon::pipeline::Config { namespace: Some(namespace.clone()), ..Default::default() },
            server_addr: None,
            ..Default::default()
        })
        .runtime(runtime)
        .webhooks(config)
        .build()
        .await
        .unwrap();
    let settings = operon::pipeline::Config { guest_cpu: 0.25, ..Default::default() };
    let controller = mgr.build_controller(module, settings, None, false);
    let metrics = mgr.metrics().clone();
    let webhooks = mgr.webhooks().unwrap().clone();
    let mut registration = Registration::new(format!("mtls-{namespace}"), controller, mgr.leadership("webapp"));
    registration.failure_policy = FailurePolicy::Fail;
    registration.timeout = Duration::from_secs(5);
    registration.scope_namespace = Some(namespace.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(mgr.run(async move {
        let _ = stopped.await;
    }));
    webhooks.register(registration.clone()).await.unwrap();
    let path_label = Hook::Validate.path(&registration.name);
    let answered = || {
        let text = metrics.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with("controller_runtime_webhook_requests_total") && l.contains(&path_label))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum::<f64>()
    };
    let api = webapps(&client, &namespace);
    // The API server presents its certificate: its calls are answered.
    eventually("the API server to call the webhook with its certificate", WAIT, || async {
        let before = answered();
        let _ = dry_run(&api, "probe", json!({})).await;
        (answered() > before).then_some(())
    })
    .await;

    // The stranger: valid reviews, over TLS that trusts the server, without
    // a client certificate; 16 at once, as fast as it can.
    let server_ca = webhooks.ca_bundle().unwrap();
    let addr = webhooks.local_addr();
    let review = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "name": "w", "namespace": namespace,
            "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
            "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
            "userInfo": {"username": "stranger"},
            "object": {"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                "metadata": {"name": "w", "namespace": namespace}, "spec": {"image": "nginx"}}}
    }))
    .unwrap();
    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let flood: Vec<_> = (0..16)
        .map(|_| {
            let (flooding, served, attempts) = (flooding.clone(), served.clone(), attempts.clone());
            let (server_ca, review, path) = (server_ca.clone(), review.clone(), path_label.clone());
            tokio::spawn(async move {
                use rustls::pki_types::pem::PemObject;
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&server_ca) {
                    roots.add(cert.unwrap()).unwrap();
                }
                let tls = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
                let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
                while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                    attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else { continue };
                    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                    let exchange = async {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut stream = connector.connect(name, tcp).await?;
                        let head = format!(
                            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            review.len()
                        );
                        stream.write_all(head.as_bytes()).await?;
                        stream.write_all(&review).await?;
                        let mut out = Vec::new();
                        stream.read_to_end(&mut out).await?;
                        Ok::<_, std::io::Error>(out.starts_with(b"HTTP/1.1"))
                    };
                    if let Ok(Ok(true)) = tokio::time::timeout(Duration::from_secs(5), exchange).await {
                        served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // Legitimate creates, through the API server, while the flood runs.
    let started = Instant::now();
    let mut denied = Vec::new();
    for i in 0..20 {
        if let Err(e) = api.create(&PostParams::default(), &webapp(&format!("legit-{i}"), json!({}))).await {
            denied.push(e.to_string());
        }
    }
    let creates = started.elapsed();
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let (served, attempts) =
        (served.load(std::sync::atomic::Ordering::Relaxed), attempts.load(std::sync::atomic::Ordering::Relaxed));
    let refused = metrics
        .encode()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("operon_webhook_refused_total"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum::<f64>();
    eprintln!(
        "stranger: {attempts} attempts, {served} answered; 20 legitimate creates in {creates:?}, {} denied; {refused} refusals",
        denied.len()
    );
    assert!(attempts > 20, "the flood did not run: {attempts} attempts");
    assert_eq!(served, 0, "the server answered a client without a certificate");
    assert!(denied.is_empty(), "legitimate creates were denied under the flood: {denied:?}");
    assert_eq!(refused, 0.0, "the plugin refused calls: the flood spent its budget");
    let _ = stop.send(());
    let _ = tokio::time::timeout(WAIT, task).await;
    webhooks.shut_down();
}
