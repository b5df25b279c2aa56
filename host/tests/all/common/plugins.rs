//! A manager running the Reconciler controller in-process, on a test's
//! control plane: what the Reconciler suites share (included with `#[path]`
//! by `tests/reconcilers.rs`, `tests/tenants.rs` and `tests/events.rs`).

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use operon::manager::{self, Manager};
use operon::reconciler;
use operon::runtime::{self, Runtime};
use serde_json::{Value, json};
use std::time::Duration;

/// A manager with the Reconciler controller, acting on the Reconcilers
/// labelled for this test only (tests run side by side on one plane).
pub struct Host {
    pub client: kube::Client,
    pub ns: String,
    pub label: String,
    pub manager: Manager,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    pub runtime: Runtime,
    _artifacts: tempfile::TempDir,
}

impl Host {
    /// A host on `plane` in a new namespace named after `prefix`;
    /// `allow_module_paths`: accept `spec.module.path` (as `operon dev` does).
    ///
    /// Its operator opened loopback (`--egress-allow '*,127.0.0.1'`), where
    /// the tests serve modules and APIs; [`Host::start_configured`] takes
    /// the pipeline's `egress_allowed` as given (the default: public hosts
    /// only).
    pub async fn start_on(plane: &operon_envtest::ControlPlane, prefix: &str, allow_module_paths: bool) -> Host {
        let pipeline = operon::pipeline::Config {
            controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
            egress_allowed: operon::egress::grants::Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap(),
            ..Default::default()
        };
        Host::start_configured(plane, prefix, allow_module_paths, pipeline).await
    }

    /// [`Host::start_on`], serving webhooks on 127.0.0.1 (a self-signed
    /// certificate; the API server calls `clientConfig.url`).
    pub async fn start_serving_webhooks(plane: &operon_envtest::ControlPlane, prefix: &str) -> Host {
        // The test kinds' CRDs, as an operator names the ones plugins may
        // convert.
        let allowed = operon::webhook::ConversionAllowed::parse(&["*.example.operon.dev".into()]).unwrap();
        Host::start_serving_webhooks_with(plane, prefix, allowed).await
    }

    /// [`Host::start_serving_webhooks`], pointing only the CRDs `allowed`
    /// names at plugins that convert (`--conversion-allow`).
    pub async fn start_serving_webhooks_with(
        plane: &operon_envtest::ControlPlane,
        prefix: &str,
        allowed: operon::webhook::ConversionAllowed,
    ) -> Host {
        let webhooks = operon::webhook::Config {
            bind: ([127, 0, 0, 1], 0).into(),
            cert_dir: None,
            endpoint: operon::webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
            conversion_allowed: allowed,
            ..Default::default()
        };
        let pipeline = operon::pipeline::Config {
            controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
            egress_allowed: operon::egress::grants::Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap(),
            ..Default::default()
        };
        Host::start_full(plane, prefix, false, pipeline, Some(webhooks)).await
    }

    /// [`Host::start_on`] with the plugins' controllers configured by
    /// `pipeline` (the manager's base for every Reconciler).
    pub async fn start_configured(
        plane: &operon_envtest::ControlPlane,
        prefix: &str,
        allow_module_paths: bool,
        pipeline: operon::pipeline::Config,
    ) -> Host {
        Host::start_full(plane, prefix, allow_module_paths, pipeline, None).await
    }

    /// [`Host::start_configured`] with the runtime's host-wide gate of
    /// guest memory and call slots (`--max-guest-memory-total`,
    /// `--max-guest-calls`).
    pub async fn start_gated(
        plane: &operon_envtest::ControlPlane,
        prefix: &str,
        pipeline: operon::pipeline::Config,
        gate: runtime::GateLimits,
    ) -> Host {
        Host::launch(plane, prefix, false, pipeline, None, gate).await
    }

    async fn start_full(
        plane: &operon_envtest::ControlPlane,
        prefix: &str,
        allow_module_paths: bool,
        pipeline: operon::pipeline::Config,
        webhooks: Option<operon::webhook::Config>,
    ) -> Host {
        Host::launch(plane, prefix, allow_module_paths, pipeline, webhooks, runtime::GateLimits::default()).await
    }

    async fn launch(
        plane: &operon_envtest::ControlPlane,
        prefix: &str,
        allow_module_paths: bool,
        pipeline: operon::pipeline::Config,
        webhooks: Option<operon::webhook::Config>,
        gate: runtime::GateLimits,
    ) -> Host {
        crate::common::logs::init();
        let client = plane.client().await;
        let ns = operon_envtest::create_namespace(&client, prefix).await.unwrap();
        let artifacts = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(runtime::Config {
            artifact_dir: Some(artifacts.path().to_path_buf()),
            gate,
            ..Default::default()
        })
        .unwrap();
        let mut builder = Manager::builder(client.clone())
            .config(manager::Config { pipeline, server_addr: None, ..Default::default() })
            .runtime(runtime.clone());
        if let Some(webhooks) = webhooks {
            builder = builder.webhooks(webhooks);
        }
        let manager = builder
            .add(reconciler::Reconcilers::component(
                reconciler::Config {
                    kube_config: Some(plane.config()),
                    selector: Some(format!("operon.dev/test={ns}")),
                    allow_module_paths,
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
        let mgr = manager.clone();
        let task = tokio::spawn(async move {
            mgr.run(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Host { client, label: ns.clone(), ns, manager, stop: Some(stop), task, runtime, _artifacts: artifacts }
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(60), &mut self.task).await;
    }

    pub fn things(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing"));
        Api::namespaced_with(self.client.clone(), &self.ns, &ar)
    }

    pub fn reconcilers(&self) -> Api<reconciler::crd::Reconciler> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub async fn module_config_map(&self, name: &str, bytes: &[u8]) {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            binary_data: Some([("module.wasm".to_string(), ByteString(bytes.to_vec()))].into()),
            ..Default::default()
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
        api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&cm)).await.unwrap();
    }

    pub async fn reconciler(&self, name: &str, spec: Value) {
        self.reconciler_in(&self.ns, name, spec).await;
    }

    pub async fn reconciler_in(&self, ns: &str, name: &str, spec: Value) {
        let r: reconciler::crd::Reconciler = serde_json::from_value(json!({
            "apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name, "labels": {"operon.dev/test": self.label}}, "spec": spec
        }))
        .unwrap();
        let api: Api<reconciler::crd::Reconciler> = Api::namespaced(self.client.clone(), ns);
        api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&r)).await.unwrap();
    }

    /// A ClusterReconciler, labelled for this host.
    pub async fn cluster_reconciler(&self, name: &str, spec: Value) {
        let r: reconciler::crd::ClusterReconciler = serde_json::from_value(json!({
            "apiVersion": "operon.dev/v1alpha1", "kind": "ClusterReconciler",
            "metadata": {"name": name, "labels": {"operon.dev/test": self.label}}, "spec": spec
        }))
        .unwrap();
        let api: Api<reconciler::crd::ClusterReconciler> = Api::all(self.client.clone());
        api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&r)).await.unwrap();
    }

    pub async fn thing(&self, name: &str, value: Value) {
        let t: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": name}, "spec": {"value": value}
        }))
        .unwrap();
        self.things().patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&t)).await.unwrap();
    }

    /// A Thing with `spec.value` and these labels.
    pub async fn thing_labelled(&self, name: &str, value: Value, labels: Value) {
        let t: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": name, "labels": labels}, "spec": {"value": value}
        }))
        .unwrap();
        self.things().patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&t)).await.unwrap();
    }

    /// `(version, value)` of a Thing's status.
    pub async fn stamped(&self, name: &str) -> Option<(String, Value)> {
        let t = self.things().get_opt(name).await.ok()??;
        let s = t.data.get("status")?;
        Some((s.get("version")?.as_str()?.to_string(), s.get("value")?.clone()))
    }

    /// The condition `type_` of a Reconciler: `(status, reason, message)`.
    pub async fn condition(&self, name: &str, type_: &str) -> Option<(String, String, String)> {
        let r = self.reconcilers().get_opt(name).await.ok()??;
        let c = r.status?.conditions.into_iter().find(|c| c.type_ == type_)?;
        Some((c.status, c.reason, c.message))
    }

    pub async fn events(&self, regarding: &str) -> Vec<(String, String)> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }
}

pub fn stamp_grants() -> Value {
    json!({"for": [{"group": "example.operon.dev", "kind": "Thing"}], "owns": [{"group": "", "kind": "ConfigMap"}]})
}

pub fn config_map_module(name: &str) -> Value {
    json!({"configMap": {"name": name}})
}
