//! The manager against a real kube-apiserver (and the garbage collector of
//! kube-controller-manager): WebApp children, pruning, status, finalizers,
//! requeue-after, refused outcomes, metrics.
//!
//! The control plane has no kubelet and no deployment controller: where a
//! Deployment must look ready, the test writes its status, as a kubelet
//! would.

mod common;

use common::{eventually, free_port, guest, thing_crd, webapp_crd};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_with(|| {
        operon_envtest::Options::with_controller_manager().crd(webapp_crd()).crd(thing_crd())
    })
}

/// A manager running one module, scoped to one namespace.
struct Running {
    client: kube::Client,
    namespace: String,
    metrics: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), manager::Error>>,
}

impl Running {
    async fn start(module: &str, prefix: &str) -> Running {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
            .with_test_writer()
            .try_init();
        let client = plane().client().await;
        let namespace = operon_envtest::create_namespace(&client, prefix).await.unwrap();
        let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
        let module = rt.load(&guest(module), Limits::default()).unwrap();
        let port = free_port();
        let mut mgr = Manager::new(
            client.clone(),
            manager::Config {
                controller: operon::controller::Config {
                    namespace: Some(namespace.clone()),
                    max_concurrent_reconciles: 2,
                    ..Default::default()
                },
                server_addr: Some(([127, 0, 0, 1], port).into()),
                ..Default::default()
            },
        );
        mgr.add(module);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(mgr.run(async move {
            let _ = stopped.await;
        }));
        Running { client, namespace, metrics: format!("http://127.0.0.1:{port}"), stop: Some(stop), task }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn custom(&self, kind: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("example.operon.dev", "v1alpha1", kind);
        Api::namespaced_with(self.client.clone(), &self.namespace, &ApiResource::from_gvk(&gvk))
    }

    async fn create(&self, kind: &str, name: &str, spec: Value) -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": kind,
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        self.custom(kind).create(&PostParams::default(), &obj).await.unwrap()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }

    /// Warning events about `name`, as `reason: note`.
    async fn warnings(&self, name: &str) -> Vec<String> {
        let events = self.api::<Event>().list(&ListParams::default()).await.unwrap();
        events
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }
}

async fn get<K: Clone + serde::de::DeserializeOwned + std::fmt::Debug>(api: &Api<K>, name: &str) -> Option<K> {
    api.get_opt(name).await.unwrap()
}

#[tokio::test]
async fn webapp_children_follow_the_spec_and_are_pruned() {
    let r = Running::start("rust-webapp", "children").await;
    let parent = r
        .create(
            "WebApp",
            "shop",
            json!({"image": "nginx:1.27", "replicas": 2, "ingress": {"host": "shop.example.com"}}),
        )
        .await;
    let uid = parent.metadata.uid.clone().unwrap();

    let deployments = r.api::<Deployment>();
    let d = eventually("the Deployment", WAIT, || async { get(&deployments, "shop").await }).await;
    let owner = &d.metadata.owner_references.as_ref().expect("owner references")[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("WebApp", uid.as_str()));
    assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
    let managers: Vec<_> = d.metadata.managed_fields.unwrap().into_iter().filter_map(|m| m.manager).collect();
    assert!(managers.contains(&"operon/webapp".to_string()), "field manager: {managers:?}");
    eventually("the Service", WAIT, || async { get(&r.api::<Service>(), "shop").await }).await;
    eventually("the Ingress", WAIT, || async { get(&r.api::<Ingress>(), "shop").await }).await;
    let with_finalizer = eventually("the finalizer", WAIT, || async {
        let p = r.custom("WebApp").get("shop").await.unwrap();
        p.metadata.finalizers.clone().filter(|f| f.iter().any(|x| x == "example.operon.dev/cleanup")).map(|_| p)
    })
    .await;
    assert!(with_finalizer.metadata.deletion_timestamp.is_none());

    // Spec changes flow to the children.
    let patch = json!({"spec": {"replicas": 5}});
    r.custom("WebApp").patch("shop", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually("replicas 5", WAIT, || async {
        get(&deployments, "shop").await.filter(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(5))
    })
    .await;

    // Ingress turned off: pruned.
    let patch = json!({"spec": {"ingress": null}});
    r.custom("WebApp").patch("shop", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually("the Ingress pruned", WAIT, || async { get(&r.api::<Ingress>(), "shop").await.is_none().then_some(()) })
        .await;
    assert!(get(&r.api::<Service>(), "shop").await.is_some(), "the Service stays");
    r.stop().await;
}

#[tokio::test]
async fn webapp_status_reflects_the_deployment() {
    let r = Running::start("rust-webapp", "status").await;
    r.create("WebApp", "web", json!({"image": "nginx:1.27", "replicas": 2})).await;
    let deployments = r.api::<Deployment>();
    eventually("the Deployment", WAIT, || async { get(&deployments, "web").await }).await;
    let not_ready = eventually("a status", WAIT, || async {
        let p = r.custom("WebApp").get("web").await.unwrap();
        p.data.get("status").filter(|s| s.get("conditions").is_some()).cloned()
    })
    .await;
    assert_eq!(not_ready["readyReplicas"], 0, "{not_ready}");

    // Play kubelet: the Deployment reports two ready replicas.
    let status = json!({"status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2, "observedGeneration": 1}});
    deployments.patch_status("web", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let ready = eventually("status Ready", WAIT, || async {
        let p = r.custom("WebApp").get("web").await.unwrap();
        let s = p.data.get("status")?.clone();
        (s["readyReplicas"] == 2).then_some((s, p.metadata.generation))
    })
    .await;
    let (status, generation) = ready;
    let condition = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(condition["status"], "True", "{status}");
    assert_eq!(status["observedGeneration"].as_i64(), generation, "{status}");
    r.stop().await;
}

#[tokio::test]
async fn deleting_a_webapp_runs_its_finalizer_and_children_are_collected() {
    let r = Running::start("rust-webapp", "finalize").await;
    r.create("WebApp", "gone", json!({"image": "nginx:1.27"})).await;
    eventually("the finalizer", WAIT, || async {
        let p = r.custom("WebApp").get("gone").await.unwrap();
        p.metadata.finalizers.filter(|f| !f.is_empty())
    })
    .await;
    eventually("the Deployment", WAIT, || async { get(&r.api::<Deployment>(), "gone").await }).await;
    r.custom("WebApp").delete("gone", &DeleteParams::default()).await.unwrap();
    eventually("the WebApp deleted once finalized", WAIT, || async {
        r.custom("WebApp").get_opt("gone").await.unwrap().is_none().then_some(())
    })
    .await;
    // The garbage collector (kube-controller-manager) removes the children.
    eventually("children garbage-collected", Duration::from_secs(60), || async {
        let d = get(&r.api::<Deployment>(), "gone").await;
        let s = get(&r.api::<Service>(), "gone").await;
        (d.is_none() && s.is_none()).then_some(())
    })
    .await;
    r.stop().await;
}

#[tokio::test]
async fn requeue_after_is_honoured() {
    let r = Running::start("requeue-counter", "requeue").await;
    r.create("Thing", "tick", json!({"everyMs": 200})).await;
    // Only requeues drive this guest (its status writes pass no predicate).
    let count = eventually("five requeued reconciles", WAIT, || async {
        let p = r.custom("Thing").get("tick").await.unwrap();
        let count = p.data.pointer("/status/count").and_then(Value::as_u64).unwrap_or(0);
        (count >= 5).then_some(count)
    })
    .await;
    assert!(count >= 5);
    r.stop().await;
}

#[tokio::test]
async fn an_outcome_with_a_kind_not_owned_writes_nothing() {
    let r = Running::start("misbehave-escape", "escape-kind").await;
    r.create("Thing", "sly", json!({"escape": "secret"})).await;
    let warnings = eventually("an InvalidOutcome event", WAIT, || async {
        let w = r.warnings("sly").await;
        w.iter().any(|e| e.starts_with("InvalidOutcome")).then_some(w)
    })
    .await;
    let event = warnings.iter().find(|e| e.starts_with("InvalidOutcome")).unwrap();
    assert!(event.contains("v1 Secret sly-stolen") && event.contains("not in the manifest's owns"), "{event}");
    assert!(get(&r.api::<Deployment>(), "sly").await.is_none(), "the valid Deployment must not be written either");
    assert!(get(&r.api::<Secret>(), "sly-stolen").await.is_none());
    r.stop().await;
}

#[tokio::test]
async fn an_outcome_in_another_namespace_writes_nothing() {
    let r = Running::start("misbehave-escape", "escape-ns").await;
    r.create("Thing", "sly", json!({"escape": "namespace"})).await;
    let warnings = eventually("an InvalidOutcome event", WAIT, || async {
        let w = r.warnings("sly").await;
        w.iter().any(|e| e.starts_with("InvalidOutcome")).then_some(w)
    })
    .await;
    let event = warnings.iter().find(|e| e.starts_with("InvalidOutcome")).unwrap();
    assert!(event.contains("kube-system"), "{event}");
    assert!(get(&r.api::<Deployment>(), "sly").await.is_none());
    let elsewhere: Api<Deployment> = Api::namespaced(r.client.clone(), "kube-system");
    assert!(get(&elsewhere, "sly-elsewhere").await.is_none());
    r.stop().await;
}

#[tokio::test]
async fn metrics_and_probes_are_served_and_metrics_pass_promtool() {
    let r = Running::start("rust-webapp", "metrics").await;
    r.create("WebApp", "m", json!({"image": "nginx:1.27"})).await;
    eventually("the Deployment", WAIT, || async { get(&r.api::<Deployment>(), "m").await }).await;
    let http = reqwest::Client::new();
    eventually("/readyz ok", WAIT, || async {
        let resp = http.get(format!("{}/readyz", r.metrics)).send().await.ok()?;
        resp.status().is_success().then_some(())
    })
    .await;
    let text = eventually("a success in the metrics", WAIT, || async {
        let text = http.get(format!("{}/metrics", r.metrics)).send().await.ok()?.text().await.ok()?;
        text.contains(r#"controller_runtime_reconcile_total{controller="webapp",result="success"}"#).then_some(text)
    })
    .await;
    for name in
        ["workqueue_adds_total", "controller_runtime_reconcile_time_seconds_bucket", "operon_guest_call_seconds_bucket"]
    {
        assert!(text.contains(name), "missing {name}");
    }
    promtool_check(&text);
    r.stop().await;
}

/// `promtool check metrics` on the text, if promtool is installed; required
/// when `OPERON_REQUIRE_PROMTOOL=1` (CI installs it).
fn promtool_check(text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if std::env::var("OPERON_REQUIRE_PROMTOOL").as_deref() == Ok("1") => panic!("promtool is required: {e}"),
        Err(_) => {
            eprintln!(
                "promtool not installed; skipping the format check (set OPERON_REQUIRE_PROMTOOL=1 to require it)"
            );
            return;
        }
    };
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // promtool exits 3 for lint warnings only (e.g. naming advice), 1 for errors.
    assert!(out.status.code() != Some(1), "promtool check metrics failed:\n{report}");
}

#[tokio::test]
async fn shipped_manifests_are_accepted_by_the_api_server() {
    use kube::discovery::{Scope, pinned_kind};
    let client = plane().client().await;
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "operon-system"}});
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces.patch("operon-system", &PatchParams::apply("test"), &Patch::Apply(&ns)).await.unwrap();
    let files = ["deploy/rbac.yaml", "deploy/operon.yaml", "guest-examples/rust-webapp/example.yaml"];
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: serde_yaml::Value = serde::Deserialize::deserialize(doc).unwrap();
            if value.is_null() {
                continue;
            }
            let obj: DynamicObject = serde_yaml::from_value(value).unwrap();
            let types = obj.types.clone().unwrap();
            let (group, version) = types.api_version.rsplit_once('/').unwrap_or(("", &types.api_version));
            let (ar, caps) = pinned_kind(&client, &GroupVersionKind::gvk(group, version, &types.kind)).await.unwrap();
            let api: Api<DynamicObject> = match (&obj.metadata.namespace, caps.scope) {
                (Some(ns), Scope::Namespaced) => Api::namespaced_with(client.clone(), ns, &ar),
                (None, Scope::Namespaced) => Api::namespaced_with(client.clone(), "default", &ar),
                _ => Api::all_with(client.clone(), &ar),
            };
            let name = obj.metadata.name.clone().unwrap();
            let params = PatchParams::apply("test").dry_run();
            api.patch(&name, &params, &Patch::Apply(&obj))
                .await
                .unwrap_or_else(|e| panic!("{file}: {} {name} refused: {e}", types.kind));
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} objects found");
}
