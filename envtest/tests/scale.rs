//! The control plane holds what a large operator deployment has: tens of
//! thousands of objects in one namespace, and a ClusterIP for each of more
//! than 10 000 Services. Each test starts a control plane of its own.
//!
//! Services are the slow part: Kubernetes 1.34 allocates ClusterIPs under
//! one lock (each allocation creates an IPAddress object through the API
//! server, then counts all of them for a metric), so Service creates run
//! one at a time, at about a hundred a second, slowing as they add up. No
//! flag changes that; a client creating Services in parallel gains little.
//!
//! These take minutes, so they are ignored by default. Run them one at a
//! time, for figures worth comparing:
//!
//! ```text
//! cargo test -p operon-envtest --test scale -- --ignored --nocapture --test-threads=1
//! ```

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use operon_envtest::{ControlPlane, Options, create_namespace};
use serde::de::DeserializeOwned;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Requests in flight at once: enough to keep the API server busy on two
/// cores without queueing for long.
const CONCURRENCY: usize = 64;

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "selector": { "app": name }, "ports": [{ "port": 80, "targetPort": 8080 }] }
    }))
    .unwrap()
}

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "app", "image": "registry.invalid/app:1" }] }
            }
        }
    }))
    .unwrap()
}

fn ingress(name: &str) -> Ingress {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "rules": [{
            "host": format!("{name}.example.com"),
            "http": { "paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": { "service": { "name": name, "port": { "number": 80 } } }
            }]}
        }]}
    }))
    .unwrap()
}

fn parent_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("scale.operon.dev", "v1", "Parent"), "parents")
}

fn parent_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "parents.scale.operon.dev" },
        "spec": {
            "group": "scale.operon.dev",
            "scope": "Namespaced",
            "names": { "plural": "parents", "singular": "parent", "kind": "Parent", "listKind": "ParentList" },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": { "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } }
                }}
            }]
        }
    }))
    .unwrap()
}

/// Creates `count` objects named `<prefix>-<i>`, [`CONCURRENCY`] at a time,
/// and returns them as created.
async fn create_all<K>(api: &Api<K>, prefix: &str, count: usize, make: impl Fn(&str) -> K) -> Vec<K>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + Debug,
{
    let post = PostParams::default();
    futures::stream::iter((0..count).map(|i| make(&format!("{prefix}-{i}"))))
        .map(|object| {
            let post = &post;
            async move { api.create(post, &object).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("creating {prefix}-*: {e}"))
}

/// `child`, controlled by the Parent named like it.
fn owned<K: Resource>(mut child: K, uids: &HashMap<String, String>) -> K {
    let name = child.meta().name.clone().unwrap();
    child.meta_mut().owner_references = Some(vec![OwnerReference {
        api_version: "scale.operon.dev/v1".into(),
        kind: "Parent".into(),
        uid: uids[&name].clone(),
        name,
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    child
}

async fn count<K>(api: &Api<K>) -> usize
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    // Pages, as a client of this many objects should.
    let mut total = 0;
    let mut params = ListParams::default().limit(5000);
    loop {
        let page = api.list(&params).await.unwrap();
        total += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return total,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "creates 12 000 Services, a few minutes; run with --ignored"]
async fn twelve_thousand_services_should_each_get_a_cluster_ip() {
    const SERVICES: usize = 12_000;
    let plane = tokio::task::block_in_place(|| ControlPlane::start(Options::default())).unwrap();
    let client: Client = plane.client().await;
    let ns = create_namespace(&client, "services").await.unwrap();
    let services = Api::<Service>::namespaced(client, &ns);

    let started = Instant::now();
    create_all(&services, "svc", SERVICES, service).await;
    let elapsed = started.elapsed();
    eprintln!("created {SERVICES} Services in {elapsed:.1?} ({:.0}/s)", SERVICES as f64 / elapsed.as_secs_f64());

    let listed = services.list(&ListParams::default()).await.unwrap().items;
    let ips: HashSet<String> =
        listed.iter().filter_map(|s| s.spec.as_ref().and_then(|spec| spec.cluster_ip.clone())).collect();
    assert_eq!(listed.len(), SERVICES);
    assert_eq!(ips.len(), SERVICES, "every Service has a ClusterIP of its own");
    assert!(ips.iter().all(|ip| ip.starts_with("10.0.")), "all within 10.0.0.0/16");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "creates 10 000 custom objects and 30 000 children, about five minutes; run with --ignored"]
async fn ten_thousand_parents_with_thirty_thousand_children_should_fit_in_one_namespace() {
    const PARENTS: usize = 10_000;
    let plane =
        tokio::task::block_in_place(|| ControlPlane::start(Options::with_controller_manager().crd(parent_crd())))
            .unwrap();
    let client: Client = plane.client().await;
    let ns = create_namespace(&client, "scale").await.unwrap();
    let parents = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &parent_resource());
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);

    let started = Instant::now();
    let created = create_all(&parents, "app", PARENTS, |name| {
        DynamicObject::new(name, &parent_resource()).data(json!({ "spec": { "replicas": 2, "image": "app:1" } }))
    })
    .await;
    eprintln!("created {PARENTS} parents in {:.1?}", started.elapsed());
    let uids: HashMap<String, String> = created.into_iter().map(|p| (p.name_any(), p.uid().unwrap())).collect();
    let children = Instant::now();
    // Owned, so the garbage collector tracks all 40 000 in its graph.
    create_all(&deployments, "app", PARENTS, |name| owned(deployment(name), &uids)).await;
    create_all(&services, "app", PARENTS, |name| owned(service(name), &uids)).await;
    create_all(&ingresses, "app", PARENTS, |name| owned(ingress(name), &uids)).await;
    eprintln!(
        "created {} children in {:.1?}; {} objects in {:.1?}",
        3 * PARENTS,
        children.elapsed(),
        4 * PARENTS,
        started.elapsed()
    );

    assert_eq!(count(&parents).await, PARENTS);
    assert_eq!(count(&deployments).await, PARENTS);
    assert_eq!(count(&services).await, PARENTS);
    assert_eq!(count(&ingresses).await, PARENTS);

    // The garbage collector still keeps up: a hundred parents go, and so do
    // their children.
    let deleting = Instant::now();
    for i in 0..100 {
        parents.delete(&format!("app-{i}"), &DeleteParams::default()).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let left = loop {
        let left = count(&services).await + count(&deployments).await + count(&ingresses).await;
        if left == 3 * (PARENTS - 100) || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(left, 3 * (PARENTS - 100), "children of deleted parents left after 120 s\n{}", plane.logs(20));
    eprintln!("garbage-collected 300 children in {:.1?}", deleting.elapsed());
}
