//! A manager running one module in a namespace of its own, in the test's
//! process: the harness of the suites that drive the manager directly
//! (`manager.rs`, `workloads.rs`), each with its own control plane.

use super::{free_port, guest};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use serde_json::{Value, json};

/// A manager running one module, scoped to one namespace.
pub struct Running {
    pub client: kube::Client,
    pub namespace: String,
    /// `http://127.0.0.1:PORT` of its metrics server.
    pub metrics: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), manager::Error>>,
}

impl Running {
    /// The manager on `plane`, running the guest `module` (two reconciles at
    /// once), in a new namespace named after `prefix`.
    pub async fn start(plane: &operon_envtest::ControlPlane, module: &str, prefix: &str) -> Running {
        crate::common::logs::init();
        let client = plane.client().await;
        let namespace = operon_envtest::create_namespace(&client, prefix).await.unwrap();
        let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
        let module = rt.load(&guest(module), Limits::default()).unwrap();
        let port = free_port();
        let mgr = Manager::builder(client.clone())
            .config(manager::Config {
                pipeline: operon::pipeline::Config {
                    namespace: Some(namespace.clone()),
                    controller: operon::controller::Config { max_concurrent_reconciles: 2, ..Default::default() },
                    ..Default::default()
                },
                server_addr: Some(([127, 0, 0, 1], port).into()),
                ..Default::default()
            })
            .build()
            .await
            .unwrap();
        mgr.add(module);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(mgr.run(async move {
            let _ = stopped.await;
        }));
        Running { client, namespace, metrics: format!("http://127.0.0.1:{port}"), stop: Some(stop), task }
    }

    /// A namespaced API in the test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// `example.operon.dev/v1alpha1` `kind` in the test's namespace.
    pub fn custom(&self, kind: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("example.operon.dev", "v1alpha1", kind);
        Api::namespaced_with(self.client.clone(), &self.namespace, &ApiResource::from_gvk(&gvk))
    }

    /// Create an `example.operon.dev/v1alpha1` `kind` called `name`.
    pub async fn create(&self, kind: &str, name: &str, spec: Value) -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": kind,
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        self.custom(kind).create(&PostParams::default(), &obj).await.unwrap()
    }

    /// Stop the manager and wait for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}
