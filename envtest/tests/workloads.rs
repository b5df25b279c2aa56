//! With [`Options::with_workloads`], workloads progress as on a real
//! cluster: Deployments get ReplicaSets and Pods, Pods are scheduled onto
//! kwok's fake Nodes and become Running and Ready, Deployments become
//! Available, and deleting them removes their Pods. One shared control plane;
//! each test in its own namespace.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet};
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use operon_envtest::{ControlPlane, Options, create_namespace, shared_with};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

/// Generous: a Deployment is usually Available within a few seconds.
const WAIT: Duration = Duration::from_secs(60);

fn plane() -> &'static ControlPlane {
    shared_with(Options::with_workloads)
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
    Deployment {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector { match_labels: Some(labels.clone()), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    // Never pulled: kwok only pretends to run it.
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some("registry.invalid/app:1".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// Polls `check` until it returns `Some`, or panics after [`WAIT`] with
/// `what`, the last state seen and the control plane's logs.
async fn eventually<T, F: Future<Output = Result<T, String>>>(
    plane: &ControlPlane,
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() > deadline => {
                panic!("{what}: not after {WAIT:?}; last seen: {last}\n{}", plane.logs(20))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn available_replicas(deployments: &Api<Deployment>, name: &str, wanted: i32) -> Result<(), String> {
    let deployment = deployments.get(name).await.map_err(|e| e.to_string())?;
    let status = deployment.status.unwrap_or_default();
    if status.available_replicas == Some(wanted) { Ok(()) } else { Err(format!("{status:?}")) }
}

async fn pods_of(client: &Client, ns: &str, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

fn is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn deployment_should_become_available_on_fake_nodes() {
    let plane = plane();
    let client = plane.client().await;
    let ns = create_namespace(&client, "available").await.unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);

    let started = Instant::now();
    deployments.create(&PostParams::default(), &deployment("web", 2)).await.unwrap();
    eventually(plane, "web has 2 available replicas", || available_replicas(&deployments, "web", 2)).await;
    eprintln!("deployment available in {:.2?}", started.elapsed());

    let pods = pods_of(&client, &ns, "web").await;
    assert_eq!(pods.len(), 2, "{pods:?}");
    for pod in &pods {
        assert!(is_ready(pod), "{pod:?}");
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default();
        assert!(node.starts_with("kwok-node-"), "scheduled onto {node:?}");
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).unwrap_or_default();
        let second: u8 = ip.split('.').nth(1).and_then(|octet| octet.parse().ok()).unwrap_or_default();
        assert!(ip.starts_with("10.") && second >= 128, "pod IP {ip:?} outside the Nodes' 10.128.0.0/9");
    }
}

#[tokio::test]
async fn deleting_a_deployment_should_remove_its_replica_sets_and_pods() {
    let plane = plane();
    let client = plane.client().await;
    let ns = create_namespace(&client, "delete").await.unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), &ns);

    deployments.create(&PostParams::default(), &deployment("doomed", 2)).await.unwrap();
    eventually(plane, "doomed has 2 available replicas", || available_replicas(&deployments, "doomed", 2)).await;
    assert_eq!(pods_of(&client, &ns, "doomed").await.len(), 2);

    // Background propagation, the default: the garbage collector removes the
    // ReplicaSet, then its Pods, which kwok lets go at once.
    deployments.delete("doomed", &DeleteParams::default()).await.unwrap();
    eventually(plane, "the ReplicaSets and Pods of doomed are gone", || async {
        let sets = replica_sets.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let pods = pods_of(&client, &ns, "doomed").await;
        if sets.items.is_empty() && pods.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "replica sets {:?}, pods {:?}",
                sets.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
                pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
            ))
        }
    })
    .await;
}

#[tokio::test]
async fn scaling_a_deployment_should_spread_pods_over_the_fake_nodes() {
    let plane = plane();
    let client = plane.client().await;
    let ns = create_namespace(&client, "scale").await.unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);

    deployments.create(&PostParams::default(), &deployment("wide", 9)).await.unwrap();
    eventually(plane, "wide has 9 available replicas", || available_replicas(&deployments, "wide", 9)).await;

    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.unwrap().items;
    assert_eq!(nodes.len(), 3, "Options::nodes defaults to 3");
    for node in &nodes {
        let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        assert!(taints.is_empty(), "{} is tainted: {taints:?}", node.name_any());
    }
    // The scheduler's default spreading puts some on every Node.
    let mut per_node = BTreeMap::<String, usize>::new();
    for pod in pods_of(&client, &ns, "wide").await {
        *per_node.entry(pod.spec.unwrap().node_name.unwrap()).or_default() += 1;
    }
    assert_eq!(per_node.len(), 3, "{per_node:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn workloads_should_keep_progressing_after_an_apiserver_restart() {
    let mut plane = tokio::task::block_in_place(|| ControlPlane::start(Options::with_workloads().nodes(1))).unwrap();
    assert_eq!(plane.pids().len(), 5, "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok");
    tokio::task::block_in_place(|| plane.restart_apiserver(Duration::from_secs(2), Duration::from_secs(60))).unwrap();

    let client = plane.client().await;
    let ns = create_namespace(&client, "restart").await.unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    deployments.create(&PostParams::default(), &deployment("after", 2)).await.unwrap();
    eventually(&plane, "after has 2 available replicas", || available_replicas(&deployments, "after", 2)).await;
    let logs = plane.logs(5);
    for name in ["kube-scheduler.log", "kwok.log"] {
        assert!(logs.contains(name), "the logs helper includes {name}:\n{logs}");
    }
}

#[test]
fn workloads_without_scheduler_or_kwok_should_fail_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        std::fs::write(dir.path().join(name), "").unwrap();
    }
    let mut options = Options::with_workloads();
    options.assets = Some(dir.path().to_owned());
    let error = format!("{:#}", ControlPlane::start(options).err().expect("no kube-scheduler nor kwok"));
    assert!(error.contains("lacks kube-scheduler, kwok"), "{error}");
    assert!(error.contains("cargo xtask envtest"), "{error}");
}
