//! Admission webhooks served from the WebApp guest, against a real
//! kube-apiserver that calls the host's HTTPS server on 127.0.0.1
//! (`clientConfig.url`, the self-generated CA in `caBundle`).
//!
//! The test binary's control plane has the WebApp CRD *without* the schema
//! default of `spec.port`, so a port that appears on a stored WebApp can only
//! come from the guest's `mutate`.
//!
//! Every test registers its own plugin, scoped to its own namespace, so the
//! tests share the API server without seeing each other's webhooks. The
//! webhooks do not need the manager to run (they read the controller's
//! module at each call); the tests that do not need reconciles leave it
//! stopped, so nothing but the test writes to the WebApps.
//!
//! The last tests need no cluster: the runtime's admission calls and the
//! admission fixtures of `operon test`.

use crate::common;

use common::{eventually, guest, webapp_crd};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use operon::contract::{Gvk, Operation, Review, UserInfo};
use operon::manager::{self, Manager};
use operon::metrics::Metrics;
use operon::pipeline::ModuleController;
use operon::runtime::{self, CallError, Limits, NoObjects, Runtime};
use operon::webhook::{self, FailurePolicy, Hook, Registration, Webhooks};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn plane() -> &'static operon_envtest::ControlPlane {
    use kube::CustomResourceExt;
    operon_envtest::shared_named("admission", || {
        operon_envtest::Options::default()
            .crd(crd_without_port_default())
            .crd(operon::reconciler::crd::Reconciler::crd())
            .crd(operon::reconciler::crd::ClusterReconciler::crd())
    })
}

/// The WebApp CRD with no default for `spec.port`.
fn crd_without_port_default()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let mut crd = serde_json::to_value(webapp_crd()).unwrap();
    let port = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/port")
        .and_then(Value::as_object_mut)
        .expect("the WebApp CRD has spec.port");
    assert!(port.remove("default").is_some(), "the CRD defaults spec.port; the test removes that default");
    serde_json::from_value(crd).unwrap()
}

fn runtime() -> Runtime {
    Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap()
}

/// One plugin on a running webhook server, in its own namespace.
struct Setup {
    client: kube::Client,
    namespace: String,
    runtime: Runtime,
    controller: ModuleController,
    webhooks: Webhooks,
    metrics: Arc<Metrics>,
    plugin: Registration,
    stop: Vec<tokio::sync::oneshot::Sender<()>>,
    manager: Option<tokio::task::JoinHandle<Result<(), manager::Error>>>,
}

impl Setup {
    /// `module` as a controller (run when `reconcile` is true), its
    /// webhooks registered with `policy`.
    async fn start(prefix: &str, module: &str, policy: FailurePolicy, reconcile: bool) -> Setup {
        crate::common::logs::init();
        let client = plane().client().await;
        let namespace = operon_envtest::create_namespace(&client, prefix).await.unwrap();
        let runtime = runtime();
        let module = runtime.load(&guest(module), Limits::default()).unwrap();
        let config = webhook::Config {
            bind: ([127, 0, 0, 1], 0).into(),
            cert_dir: None,
            endpoint: webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
            ..Default::default()
        };
        let mgr = Manager::builder(client.clone())
            .config(manager::Config {
                pipeline: operon::pipeline::Config { namespace: Some(namespace.clone()), ..Default::default() },
                server_addr: None,
                ..Default::default()
            })
            .runtime(runtime.clone())
            .webhooks(config)
            .build()
            .await
            .unwrap();
        let controller = mgr.add(module);
        let metrics = mgr.metrics().clone();
        let webhooks = mgr.webhooks().unwrap().clone();
        let leadership = mgr.leadership(controller.name());
        let mut stop = Vec::new();
        let manager = reconcile.then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            stop.push(tx);
            tokio::spawn(mgr.run(async move {
                let _ = rx.await;
            }))
        });
        // One plugin per test, acting in the test's namespace only.
        let mut plugin = Registration::new(format!("webapp-{namespace}"), controller.clone(), leadership);
        plugin.failure_policy = policy;
        plugin.timeout = Duration::from_secs(5);
        plugin.scope_namespace = Some(namespace.clone());
        webhooks.register(plugin.clone()).await.unwrap();
        Setup { client, namespace, runtime, controller, webhooks, metrics, plugin, stop, manager }
    }

    fn api(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp");
        Api::namespaced_with(self.client.clone(), &self.namespace, &ApiResource::from_gvk(&gvk))
    }

    fn webapp(name: &str, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap()
    }

    async fn create(&self, name: &str, spec: Value) -> Result<DynamicObject, kube::Error> {
        self.api().create(&PostParams::default(), &Self::webapp(name, spec)).await
    }

    async fn dry_run(&self, name: &str, spec: Value) -> Result<DynamicObject, kube::Error> {
        self.api().create(&PostParams { dry_run: true, ..Default::default() }, &Self::webapp(name, spec)).await
    }

    /// `validate.<plugin>.operon.dev`, as the API server names it in denials.
    fn validating_webhook(&self) -> String {
        format!("validate.{}.operon.dev", self.plugin.name)
    }

    /// Wait until the API server calls the webhooks (it picks up a new
    /// configuration within a moment, not at once).
    async fn wait_active(&self) {
        let series = self.requests(Hook::Validate);
        eventually("the API server to call the validating webhook", WAIT, || async {
            let before = self.metric(&series);
            let _ = self.dry_run("probe", json!({"image": "nginx"})).await;
            (self.metric(&series) > before).then_some(())
        })
        .await;
    }

    fn requests(&self, hook: Hook) -> String {
        format!(r#"controller_runtime_webhook_requests_total{{code="200",webhook="{}"}}"#, hook.path(&self.plugin.name))
    }

    /// One series' value; 0 when absent.
    fn metric(&self, series: &str) -> f64 {
        let text = self.metrics.encode().unwrap();
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
    }

    async fn stop(mut self) {
        for stop in self.stop.drain(..) {
            let _ = stop.send(());
        }
        if let Some(manager) = self.manager.take() {
            manager.await.unwrap().unwrap();
        }
        self.webhooks.shut_down();
    }
}

/// The denial's status, or a panic describing what happened instead.
fn denial(result: Result<DynamicObject, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected the API server to deny the request, got {other:?}"),
    }
}

#[tokio::test]
async fn a_webapp_with_too_many_replicas_should_be_denied_with_the_guests_message() {
    let setup = Setup::start("admission-deny", "rust-webapp", FailurePolicy::Fail, true).await;
    setup.wait_active().await;

    let status = denial(setup.create("big", json!({"image": "nginx:1.27", "replicas": 51, "port": 8080})).await);
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status.message.contains(&format!(
            "admission webhook \"{}\" denied the request: spec.replicas must be between 0 and 50, not 51",
            setup.validating_webhook()
        )),
        "{status:?}"
    );
    denial(setup.create("blank", json!({"image": " ", "port": 8080})).await);

    // A valid one is stored, and reconciled as usual.
    setup.create("fine", json!({"image": "nginx:1.27", "replicas": 50, "port": 8080})).await.unwrap();
    let api = setup.api();
    eventually("the controller to reconcile the admitted WebApp", WAIT, || async {
        let web = api.get("fine").await.ok()?;
        web.data["status"]["observedGeneration"].as_i64().map(|_| ())
    })
    .await;
    // An update that breaks the rules is denied too.
    let patch = json!({"spec": {"replicas": 100}});
    let status = denial(api.patch("fine", &PatchParams::default(), &Patch::Merge(&patch)).await);
    assert!(status.message.contains("not 100"), "{status:?}");

    assert!(setup.metric(&setup.requests(Hook::Validate)) >= 3.0);
    assert!(setup.metric(&setup.requests(Hook::Mutate)) >= 3.0);
    let latency = format!(
        r#"controller_runtime_webhook_latency_seconds_count{{webhook="{}"}}"#,
        Hook::Validate.path(&setup.plugin.name)
    );
    assert!(setup.metric(&latency) >= 3.0);
    setup.stop().await;
}

#[tokio::test]
async fn a_webapp_without_a_port_should_be_stored_with_the_default() {
    let setup = Setup::start("admission-default", "rust-webapp", FailurePolicy::Fail, false).await;
    setup.wait_active().await;

    let stored = setup.create("portless", json!({"image": "nginx:1.27", "replicas": 2})).await.unwrap();
    assert_eq!(stored.data["spec"]["port"], 8080, "{:?}", stored.data);
    // Given a port, the guest leaves it alone.
    let stored = setup.create("ported", json!({"image": "nginx:1.27", "port": 9090})).await.unwrap();
    assert_eq!(stored.data["spec"]["port"], 9090);
    // A null port counts as absent. (The schema prunes nulls of non-nullable
    // fields before admission, so this is the same path.)
    let stored = setup.create("null-port", json!({"image": "nginx:1.27", "port": null})).await.unwrap();
    assert_eq!(stored.data["spec"]["port"], 8080);
    setup.stop().await;
}

#[tokio::test]
async fn an_update_of_the_status_alone_should_not_reach_the_webhook() {
    let setup = Setup::start("admission-status", "rust-webapp", FailurePolicy::Fail, false).await;
    setup.wait_active().await;
    setup.create("web", json!({"image": "nginx:1.27", "port": 8080})).await.unwrap();
    let api = setup.api();
    let validate = setup.requests(Hook::Validate);
    let mutate = setup.requests(Hook::Mutate);
    let before = (setup.metric(&validate), setup.metric(&mutate));

    // Even a status the guest would refuse as a spec goes through: the
    // webhooks are registered for `webapps`, never `webapps/status`.
    let status = json!({"status": {"observedGeneration": 7, "readyReplicas": 1000}});
    let written = api.patch_status("web", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    assert_eq!(written.data["status"]["readyReplicas"], 1000);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!((setup.metric(&validate), setup.metric(&mutate)), before, "a status write reached the webhooks");

    // The main resource does reach them.
    let spec = json!({"spec": {"replicas": 3}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&spec)).await.unwrap();
    assert_eq!(setup.metric(&validate), before.0 + 1.0);
    assert_eq!(setup.metric(&mutate), before.1 + 1.0);
    setup.stop().await;
}

#[tokio::test]
async fn the_denial_should_hold_across_a_module_swap() {
    let setup = Setup::start("admission-swap", "rust-webapp", FailurePolicy::Fail, false).await;
    setup.wait_active().await;
    let too_many = json!({"image": "nginx:1.27", "replicas": 51, "port": 8080});
    let guest_message = "spec.replicas must be between 0 and 50, not 51";
    assert!(denial(setup.dry_run("a", too_many.clone()).await).message.contains(guest_message));

    // A new version of the module: the webhooks follow the controller with
    // no re-registration.
    let again = setup.runtime.load(&guest("rust-webapp"), Limits::default()).unwrap();
    setup.controller.swap_module(again, false).unwrap();
    assert!(denial(setup.dry_run("b", too_many.clone()).await).message.contains(guest_message));

    // A version whose validate traps: from the very next request, the
    // failure policy answers, naming the plugin.
    let trapping = setup.runtime.load(&guest("admission-misbehave"), Limits::default()).unwrap();
    setup.controller.swap_module(trapping, false).unwrap();
    let status = denial(setup.dry_run("c", json!({"image": "nginx:1.27", "port": 8080})).await);
    assert!(
        status.message.contains(&format!("plugin {} could not validate this request", setup.plugin.name))
            && status.message.contains("trapped")
            && status.message.contains("failurePolicy: Fail"),
        "{status:?}"
    );

    // And back.
    let back = setup.runtime.load(&guest("rust-webapp"), Limits::default()).unwrap();
    setup.controller.swap_module(back, false).unwrap();
    assert!(denial(setup.dry_run("d", too_many).await).message.contains(guest_message));
    setup.create("e", json!({"image": "nginx:1.27", "port": 8080})).await.unwrap();
    setup.stop().await;
}

#[tokio::test]
async fn a_guest_that_cannot_answer_should_be_answered_by_the_failure_policy() {
    let setup = Setup::start("admission-policy", "admission-misbehave", FailurePolicy::Fail, false).await;
    setup.wait_active().await;
    let spec = json!({"image": "nginx:1.27", "port": 8080});
    let trap_series = |policy: &str| {
        format!(
            r#"operon_webhook_guest_failures_total{{failure_policy="{policy}",kind="trap",webhook="{}"}}"#,
            Hook::Validate.path(&setup.plugin.name)
        )
    };

    // Fail: a trap denies, naming the plugin.
    let status = denial(setup.create("trap", spec.clone()).await);
    assert!(status.message.contains(&setup.plugin.name) && status.message.contains("trapped"), "{status:?}");
    assert!(setup.metric(&trap_series("Fail")) >= 1.0);

    // A loop is stopped by the webhook deadline (half the API server's
    // timeout, and the module's 1 s timeout below that), well before the
    // API server gives up.
    let mut looping = Setup::webapp("loop", spec.clone());
    looping.metadata.annotations = Some([("admission-test".to_string(), "loop".to_string())].into());
    let started = Instant::now();
    let status = denial(setup.api().create(&PostParams::default(), &looping).await);
    assert!(status.message.contains("timed out"), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(4), "answered in {:?}", started.elapsed());

    // A mutate that renames the object is refused by the host.
    let mut renaming = Setup::webapp("rename", spec.clone());
    renaming.metadata.annotations = Some([("admission-test".to_string(), "rename".to_string())].into());
    let status = denial(setup.api().create(&PostParams::default(), &renaming).await);
    assert!(status.message.contains("mutate changed metadata.name"), "{status:?}");

    // Ignore: the same trap lets the request through, counted.
    let mut ignoring = setup.plugin.clone();
    ignoring.failure_policy = FailurePolicy::Ignore;
    setup.webhooks.register(ignoring).await.unwrap();
    eventually("the API server to apply failurePolicy Ignore", WAIT, || async {
        setup.dry_run("probe", spec.clone()).await.ok().map(|_| ())
    })
    .await;
    setup.create("ignored", spec.clone()).await.unwrap();
    assert!(setup.metric(&trap_series("Ignore")) >= 1.0);
    setup.stop().await;
}

#[tokio::test]
async fn deleting_the_plugin_should_remove_its_configurations_and_block_nothing() {
    let setup = Setup::start("admission-remove", "rust-webapp", FailurePolicy::Fail, false).await;
    setup.wait_active().await;
    let too_many = json!({"image": "nginx:1.27", "replicas": 51, "port": 8080});
    denial(setup.dry_run("a", too_many.clone()).await);

    let name = format!("operon-{}", setup.plugin.name);
    let validating = Api::<ValidatingWebhookConfiguration>::all(setup.client.clone());
    let mutating = Api::<MutatingWebhookConfiguration>::all(setup.client.clone());
    let applied = validating.get(&name).await.unwrap();
    assert_eq!(applied.metadata.labels.unwrap()["operon.dev/plugin"], setup.plugin.name);
    assert!(mutating.get_opt(&name).await.unwrap().is_some());

    setup.webhooks.unregister(&setup.plugin.name, true).await.unwrap();
    assert!(validating.get_opt(&name).await.unwrap().is_none());
    assert!(mutating.get_opt(&name).await.unwrap().is_none());
    assert!(setup.webhooks.registered().contains(&setup.plugin.name), "routes linger for calls in flight");

    // With the server gone too, nothing is left to call: writes go through.
    let api = setup.api();
    setup.stop().await;
    let stored = eventually("writes to pass without the webhooks", WAIT, || async {
        api.create(&PostParams::default(), &Setup::webapp("free", too_many.clone())).await.ok()
    })
    .await;
    assert_eq!(stored.data["spec"]["replicas"], 51);
    api.delete("free", &DeleteParams::default()).await.unwrap();
    let configs = validating.list(&Default::default()).await.unwrap();
    assert!(configs.items.iter().all(|c| c.metadata.name.as_deref() != Some(name.as_str())));
}

/// `spec.admission` on a Reconciler: the Reconciler controller registers the
/// module's webhooks, scoped to the Reconciler's namespace, and removes them
/// with the Reconciler.
#[tokio::test]
async fn a_reconciler_with_spec_admission_should_serve_its_webhooks_until_deleted() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::ConfigMap;
    use operon::reconciler;
    crate::common::logs::init();
    let client = plane().client().await;
    let namespace = operon_envtest::create_namespace(&client, "admission-reconciler").await.unwrap();
    let manager = Manager::builder(client.clone())
        .config(manager::Config { server_addr: None, ..Default::default() })
        .runtime(runtime())
        .webhooks(webhook::Config {
            bind: ([127, 0, 0, 1], 0).into(),
            cert_dir: None,
            endpoint: webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
            ..Default::default()
        })
        .add(reconciler::Reconcilers::component(
            reconciler::Config {
                kube_config: Some(plane().config()),
                namespace: Some(namespace.clone()),
                status_period: Duration::from_millis(500),
                path_poll: Duration::from_millis(500),
                instance: "test".into(),
                ..Default::default()
            },
            Vec::new(),
        ))
        .build()
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let manager_task = tokio::spawn(manager.clone().run(async move {
        let _ = stopped.await;
    }));

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some("webapp".into()), ..Default::default() },
        binary_data: Some([("module.wasm".to_string(), ByteString(guest("rust-webapp")))].into()),
        ..Default::default()
    };
    config_maps.create(&PostParams::default(), &cm).await.unwrap();
    let reconcilers: Api<reconciler::crd::Reconciler> = Api::namespaced(client.clone(), &namespace);
    let r: reconciler::crd::Reconciler = serde_json::from_value(json!({
        "apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler", "metadata": {"name": "webapp"},
        "spec": {
            "module": {"configMap": {"name": "webapp"}},
            "grants": {
                "for": [{"group": "example.operon.dev", "kind": "WebApp"}],
                "owns": [{"group": "apps", "kind": "Deployment"}, {"group": "", "kind": "Service"},
                         {"group": "networking.k8s.io", "kind": "Ingress"}]
            },
            "admission": {"failurePolicy": "Fail", "timeoutSeconds": 5}
        }
    }))
    .unwrap();
    reconcilers.create(&PostParams::default(), &r).await.unwrap();

    let gvk = GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp");
    let webapps: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &ApiResource::from_gvk(&gvk));
    let too_many = Setup::webapp("big", json!({"image": "nginx:1.27", "replicas": 51, "port": 8080}));
    let name = format!("operon-r.{namespace}.webapp");
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let status = eventually("the Reconciler's validating webhook to deny", WAIT, || async {
        match webapps.create(&PostParams { dry_run: true, ..Default::default() }, &too_many).await {
            Err(kube::Error::Api(status)) => Some(*status),
            _ => None,
        }
    })
    .await;
    assert!(status.message.contains("spec.replicas must be between 0 and 50, not 51"), "{status:?}");
    assert!(status.message.contains(&format!("validate.r.{namespace}.webapp.operon.dev")), "{status:?}");
    let applied = validating.get(&name).await.unwrap();
    let selector = serde_json::to_value(&applied.webhooks.unwrap()[0].namespace_selector).unwrap();
    assert!(selector.to_string().contains(&namespace), "scoped to the Reconciler's namespace: {selector}");
    // Defaulting comes from the same module, once the API server has seen
    // the mutating configuration too (it is applied after the validating
    // one, and each takes effect when the API server's informer has it).
    let portless = Setup::webapp("portless", json!({"image": "nginx:1.27"}));
    let defaulted = eventually("the Reconciler's mutating webhook to default", WAIT, || async {
        let dry = webapps.create(&PostParams { dry_run: true, ..Default::default() }, &portless).await.ok()?;
        (!dry.data["spec"]["port"].is_null()).then_some(dry)
    })
    .await;
    assert_eq!(defaulted.data["spec"]["port"], 8080);
    let stored = webapps.create(&PostParams::default(), &portless).await.unwrap();
    assert_eq!(stored.data["spec"]["port"], 8080);

    // Without the Reconciler, its configurations go and nothing is denied.
    reconcilers.delete("webapp", &DeleteParams::default()).await.unwrap();
    // The host deletes the validating configuration, then the mutating one.
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone());
    eventually("the configurations to be deleted with the Reconciler", WAIT, || async {
        let validating_gone = validating.get_opt(&name).await.unwrap().is_none();
        let mutating_gone = mutating.get_opt(&name).await.unwrap().is_none();
        (validating_gone && mutating_gone).then_some(())
    })
    .await;
    webapps.create(&PostParams::default(), &too_many).await.unwrap();

    let _ = stop.send(());
    manager_task.await.unwrap().unwrap();
}

#[tokio::test]
async fn bad_requests_should_get_a_clear_answer_and_leave_the_server_running() {
    let setup = Setup::start("admission-garbage", "rust-webapp", FailurePolicy::Fail, false).await;
    operon::install_crypto_provider();
    let ca = reqwest::Certificate::from_pem(&setup.webhooks.ca_bundle().unwrap()).unwrap();
    // Trust the self-generated CA only: what the API server does with caBundle.
    let http = reqwest::Client::builder().tls_certs_only([ca]).build().unwrap();
    let base = format!("https://127.0.0.1:{}", setup.webhooks.local_addr().port());
    let validate = format!("{base}{}", Hook::Validate.path(&setup.plugin.name));
    let post = |url: String, body: Vec<u8>, content_type: &'static str| {
        let http = http.clone();
        async move {
            let response = http.post(url).header("content-type", content_type).body(body).send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };

    let (code, text) = post(validate.clone(), b"{not json".to_vec(), "application/json").await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("not an admission.k8s.io/v1 AdmissionReview"), "{text}");
    let (code, text) =
        post(validate.clone(), br#"{"apiVersion":"v1","kind":"Pod"}"#.to_vec(), "application/json").await;
    assert_eq!(code, 400, "{text}");
    let (code, _) = post(validate.clone(), vec![b' '; 8 << 20], "application/json").await;
    assert_eq!(code, 413, "a body over 7 MiB");
    let (code, text) = post(validate.clone(), b"{}".to_vec(), "text/plain").await;
    assert_eq!(code, 415, "{text}");
    let (code, text) = post(format!("{base}/validate/nobody"), b"{}".to_vec(), "application/json").await;
    assert_eq!(code, 404, "{text}");
    assert_eq!(http.get(&validate).send().await.unwrap().status().as_u16(), 405);

    // Still serving, and answering real reviews.
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "abc-123",
            "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
            "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
            "namespace": setup.namespace, "name": "web", "operation": "CREATE",
            "userInfo": {"username": "tester"},
            "object": Setup::webapp("web", json!({"image": "nginx", "replicas": 99})),
        }
    });
    let (code, text): (u16, String) = post(validate, serde_json::to_vec(&review).unwrap(), "application/json").await;
    assert_eq!(code, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["uid"], "abc-123");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["message"], "spec.replicas must be between 0 and 50, not 99");
    let healthz = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(healthz.text().await.unwrap(), "ok\n");
    let bad = format!(
        r#"controller_runtime_webhook_requests_total{{code="400",webhook="{}"}}"#,
        Hook::Validate.path(&setup.plugin.name)
    );
    assert_eq!(setup.metric(&bad), 2.0);
    setup.stop().await;
}

#[tokio::test]
async fn a_module_without_admission_should_not_be_registered() {
    let client = plane().client().await;
    let rt = runtime();
    let module = rt.load(&guest("misbehave-trap"), Limits::default()).unwrap();
    assert!(!module.admission());
    let config = webhook::Config { bind: ([127, 0, 0, 1], 0).into(), ..Default::default() };
    let mgr = Manager::builder(client.clone())
        .config(manager::Config { server_addr: None, ..Default::default() })
        .runtime(rt.clone())
        .webhooks(config)
        .build()
        .await
        .unwrap();
    let controller = mgr.add(module);
    let webhooks = mgr.webhooks().unwrap().clone();
    let error = webhooks
        .register(Registration::new("no-admission", controller, mgr.leadership("no-admission")))
        .await
        .unwrap_err();
    assert!(matches!(error, webhook::Error::NoAdmission { .. }), "{error}");
    assert!(error.to_string().contains("reconciler-with-admission"), "{error}");
}

// ---- No cluster: the runtime's admission calls and `operon test`. ----

fn review(operation: Operation, object: Option<Value>) -> Review {
    Review {
        uid: "u".into(),
        operation,
        kind: Gvk::new("example.operon.dev", "v1alpha1", "WebApp"),
        sub_resource: None,
        namespace: Some("default".into()),
        name: "shop".into(),
        object: object.map(|o| o.to_string()),
        old_object: None,
        user_info: UserInfo::default(),
        dry_run: false,
    }
}

fn shop(spec: Value, annotations: Value) -> Value {
    json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
           "metadata": {"name": "shop", "namespace": "default", "annotations": annotations}, "spec": spec})
}

#[test]
fn the_runtime_should_call_validate_and_mutate_under_the_sandbox() {
    let rt = runtime();
    let webapp = rt.load(&guest("rust-webapp"), Limits::default()).unwrap();
    assert!(webapp.admission());
    let export = format!("operon:reconciler/admission@{}", runtime::WIT_VERSION);
    assert!(webapp.info().exports.contains(&export), "{:?}", webapp.info());
    let deadline = Duration::from_secs(1);
    let big = review(Operation::Create, Some(shop(json!({"image": "nginx", "replicas": 51}), json!({}))));
    let denial = webapp.validate(&big, Arc::new(NoObjects), deadline).unwrap().unwrap_err();
    assert_eq!((denial.message.as_str(), denial.code), ("spec.replicas must be between 0 and 50, not 51", None));
    let portless = review(Operation::Create, Some(shop(json!({"image": "nginx"}), json!({}))));
    let mutated = webapp.mutate(&portless, Arc::new(NoObjects), deadline).unwrap().unwrap().unwrap();
    assert_eq!(mutated["spec"]["port"], 8080);

    let misbehave = rt.load(&guest("admission-misbehave"), Limits::default()).unwrap();
    let trap = misbehave.validate(&portless, Arc::new(NoObjects), deadline).unwrap_err();
    assert!(matches!(&trap, CallError::Trap { trap, .. } if trap.contains("unreachable")), "{trap}");
    // The webhook's deadline wins when it is the smaller one.
    let looping = review(Operation::Create, Some(shop(json!({}), json!({"admission-test": "loop"}))));
    let started = Instant::now();
    let timeout = misbehave.validate(&looping, Arc::new(NoObjects), Duration::from_millis(100)).unwrap_err();
    assert!(matches!(timeout, CallError::Timeout { limit } if limit == Duration::from_millis(100)), "{timeout}");
    assert!(started.elapsed() < Duration::from_millis(900), "stopped after {:?}", started.elapsed());
    let renaming = review(Operation::Create, Some(shop(json!({}), json!({"admission-test": "rename"}))));
    let refused = misbehave.mutate(&renaming, Arc::new(NoObjects), deadline).unwrap_err();
    assert!(refused.to_string().contains("mutate changed metadata.name"), "{refused}");
    // The module keeps working after all that.
    assert!(misbehave.mutate(&portless, Arc::new(NoObjects), deadline).unwrap().unwrap().is_none());

    let plain = rt.load(&guest("misbehave-trap"), Limits::default()).unwrap();
    assert!(!plain.admission(), "a module of the base world");
    let error = plain.validate(&portless, Arc::new(NoObjects), deadline).unwrap_err();
    assert!(error.to_string().contains("does not export operon:reconciler/admission"), "{error}");
}

#[test]
fn the_webapp_admission_fixtures_should_pass_through_the_component() {
    let rt = runtime();
    let module = rt.load(&guest("rust-webapp"), Limits::default()).unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/webapp/fixtures");
    let mut out = Vec::new();
    let report = operon::fixtures::run_dir(&module, &dir, false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(report.failed.is_empty(), "{text}");
    for case in ["admission/replicas-too-many", "admission/create-defaults-port", "admission/delete-not-checked"] {
        assert!(text.contains(&format!("ok      {case}\n")), "{case} did not run:\n{text}");
    }
    let reviews = std::fs::read_dir(dir.join("admission"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name().into_string().unwrap();
            name.ends_with(".yaml") && !name.contains(".expected.")
        })
        .count();
    assert!(reviews >= 20 && text.lines().filter(|l| l.starts_with("ok      admission/")).count() == reviews, "{text}");
}

#[test]
fn admission_fixtures_should_fail_clearly_for_a_module_without_admission() {
    let rt = runtime();
    let plain = rt.load(&guest("misbehave-trap"), Limits::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("admission")).unwrap();
    let fixture = "review:\n  object: {apiVersion: example.operon.dev/v1alpha1, kind: WebApp, metadata: {name: a}}\n";
    std::fs::write(dir.path().join("admission/a.yaml"), fixture).unwrap();
    std::fs::write(dir.path().join("admission/a.expected.yaml"), "allowed: true\n").unwrap();
    let mut out = Vec::new();
    let report = operon::fixtures::run_dir(&plain, dir.path(), false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(report.failed, ["admission/a"], "{text}");
    // Named in the module's own contract version (a 0.1 guest here).
    assert!(text.contains("does not export operon:reconciler/admission@0.1.0"), "{text}");
    assert!(text.contains("export!(MyReconciler with admission)"), "{text}");

    // And a wrong expectation shows a diff, as request fixtures do.
    let webapp = rt.load(&guest("rust-webapp"), Limits::default()).unwrap();
    let mut out = Vec::new();
    let report = operon::fixtures::run_dir(&webapp, dir.path(), false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(report.failed, ["admission/a"], "{text}");
    assert!(text.contains("+message: spec.image must not be empty"), "{text}");
    // `--update` writes the answer; then it passes.
    operon::fixtures::run_dir(&webapp, dir.path(), true, &mut Vec::new()).unwrap();
    let written = std::fs::read_to_string(dir.path().join("admission/a.expected.yaml")).unwrap();
    assert_eq!(
        written,
        "allowed: false\nmessage: spec.image must not be empty\npatched:\n  apiVersion: example.operon.dev/v1alpha1\n  kind: WebApp\n  metadata:\n    name: a\n  spec:\n    port: 8080\n"
    );
    let report = operon::fixtures::run_dir(&webapp, dir.path(), false, &mut Vec::new()).unwrap();
    assert!(report.failed.is_empty());
}
