//! The host under adverse conditions, each on a control plane of its own:
//! the API server restarted during a run (watches resume or re-list, no
//! change is lost), and a kind whose CRD is installed only after the host
//! started (retried and reported, not fatal).

use crate::common;

use common::{eventually, free_port, guest, thing_crd, webapp_crd};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use serde_json::json;
use std::time::Duration;

fn webapps(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn create(client: &kube::Client, ns: &str, name: &str, replicas: i64) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": name}, "spec": {"image": "nginx:1.27", "replicas": replicas}
    }))
    .unwrap();
    webapps(client, ns).create(&PostParams::default(), &obj).await.unwrap();
}

/// Every named WebApp has a Deployment with the given replicas.
async fn converged(client: &kube::Client, ns: &str, expected: &[(String, i32)]) -> Option<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    for (name, replicas) in expected {
        let d = deployments.get_opt(name).await.ok()??;
        if d.spec?.replicas != Some(*replicas) {
            return None;
        }
    }
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_loses_no_change() {
    let mut plane = tokio::task::block_in_place(|| {
        operon_envtest::ControlPlane::start(operon_envtest::Options::default().crd(webapp_crd()))
    })
    .expect("control plane");
    let client = plane.client().await;
    let ns = operon_envtest::create_namespace(&client, "restart").await.unwrap();

    let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    let mgr = Manager::builder(client.clone())
        .config(manager::Config {
            pipeline: operon::pipeline::Config { namespace: Some(ns.clone()), ..Default::default() },
            server_addr: None,
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    mgr.add(rt.load(&guest("rust-webapp"), Limits::default()).unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(mgr.run(async move {
        let _ = stopped.await;
    }));

    let mut expected: Vec<(String, i32)> = Vec::new();
    for i in 0..5 {
        create(&client, &ns, &format!("before-{i}"), 1).await;
        expected.push((format!("before-{i}"), 1));
    }
    eventually("parents created before the restart converge", Duration::from_secs(30), || {
        converged(&client, &ns, &expected)
    })
    .await;

    tokio::task::block_in_place(|| plane.restart_apiserver(Duration::from_secs(3), Duration::from_secs(60)))
        .expect("the API server comes back");

    // Changes made as soon as the API server is back, while the host's
    // watches are still reconnecting.
    let client = plane.client().await;
    for (name, replicas) in expected.iter_mut() {
        *replicas = 3;
        let patch = json!({"spec": {"replicas": 3}});
        webapps(&client, &ns).patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }
    for i in 0..5 {
        create(&client, &ns, &format!("after-{i}"), 2).await;
        expected.push((format!("after-{i}"), 2));
    }
    eventually("every parent converges after the restart", Duration::from_secs(60), || {
        converged(&client, &ns, &expected)
    })
    .await;

    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_installed_later_is_waited_for_and_reported() {
    let plane = tokio::task::block_in_place(|| operon_envtest::ControlPlane::start(operon_envtest::Options::default()))
        .expect("control plane");
    let client = plane.client().await;
    let ns = operon_envtest::create_namespace(&client, "late-crd").await.unwrap();
    let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    let port = free_port();
    let mgr = Manager::builder(client.clone())
        .config(manager::Config {
            pipeline: operon::pipeline::Config { namespace: Some(ns.clone()), ..Default::default() },
            server_addr: Some(([127, 0, 0, 1], port).into()),
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    mgr.add(rt.load(&guest("requeue-counter"), Limits::default()).unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(mgr.run(async move {
        let _ = stopped.await;
    }));

    // Not ready, and /readyz says why.
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    let why = eventually("/readyz to explain the missing kind", Duration::from_secs(30), || async {
        let resp = common::http_get(&readyz).await.ok()?;
        let status = resp.status();
        let body = resp.text().await.ok()?;
        (status == 503 && body.contains("CRD")).then_some(body)
    })
    .await;
    assert!(why.contains("example.operon.dev/v1alpha1 Thing"), "{why}");
    assert!(!task.is_finished(), "a missing kind must not stop the manager");

    // Install the CRD: the host picks the kind up and reconciles.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &thing_crd()).await.unwrap();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing"));
    let things: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let thing: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "metadata": {"name": "late"}, "spec": {"everyMs": 100000}
    }))
    .unwrap();
    eventually("the new kind to be served", Duration::from_secs(30), || async {
        things.create(&PostParams::default(), &thing).await.ok()
    })
    .await;
    eventually("a reconcile of the new kind", Duration::from_secs(60), || async {
        let t = things.get("late").await.ok()?;
        t.data.pointer("/status/count").and_then(serde_json::Value::as_u64).filter(|c| *c >= 1)
    })
    .await;
    eventually("/readyz ok", Duration::from_secs(30), || async {
        common::http_get(&readyz).await.ok()?.status().is_success().then_some(())
    })
    .await;
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}
