//! The WebApp request every runtime benchmark times: a steady-state
//! reconcile of a realistic WebApp (a parent of about 4 KB of JSON and its
//! two children as the API server returns them), built from the Rust
//! example's own desired objects so it stays in step with the example.
//! Shared by `runtime.rs` and `languages.rs`.

#![allow(dead_code, reason = "each benchmark uses a subset")]

use operon::runtime::{Gvk, Request};
use operon_sdk::raw;
use operon_sdk::testing::{self, FakeCluster};
use rust_webapp::WebAppReconciler;
use serde_json::{Value, json};

/// The reconcile natively, through the code path the component export runs.
pub fn native_call(request: &raw::Request) -> Result<raw::Outcome, raw::Failure> {
    operon_sdk::run::reconcile::<WebAppReconciler>(&FakeCluster::new(), request.clone())
}

/// A steady-state request: the parent carries the status of the previous
/// reconcile, and its Deployment and Service exist as the API server returns
/// them. Built from the guest's own desired objects, so it stays in step with
/// the example.
pub fn webapp_request() -> raw::Request {
    let mut parent = webapp_parent();
    // First reconcile (no children) yields the desired children.
    let first = native_call(&testing::request(&parent).build::<WebAppReconciler>()).expect("first reconcile");
    let mut deployment: Value = serde_json::from_str(&first.desired[0]).unwrap();
    let mut service: Value = serde_json::from_str(&first.desired[1]).unwrap();
    as_served(&mut deployment, "apps/v1", "Deployment");
    as_served(&mut service, "v1", "Service");
    let replicas = deployment["spec"]["replicas"].clone();
    let d = &mut deployment;
    d["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1"});
    d["spec"]["progressDeadlineSeconds"] = json!(600);
    d["spec"]["revisionHistoryLimit"] = json!(10);
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}});
    let pod = &mut d["spec"]["template"]["spec"];
    pod["dnsPolicy"] = json!("ClusterFirst");
    pod["restartPolicy"] = json!("Always");
    pod["schedulerName"] = json!("default-scheduler");
    pod["securityContext"] = json!({});
    pod["terminationGracePeriodSeconds"] = json!(30);
    let container = &mut pod["containers"][0];
    container["imagePullPolicy"] = json!("IfNotPresent");
    container["resources"] = json!({});
    container["terminationMessagePath"] = json!("/dev/termination-log");
    container["terminationMessagePolicy"] = json!("File");
    container["ports"][0]["protocol"] = json!("TCP");
    d["status"] = json!({
        "observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas,
        "conditions": [
            {"type": "Available", "status": "True", "lastUpdateTime": "2026-01-01T00:00:20Z",
             "lastTransitionTime": "2026-01-01T00:00:20Z", "reason": "MinimumReplicasAvailable",
             "message": "Deployment has minimum availability."},
            {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-01-01T00:00:20Z",
             "lastTransitionTime": "2026-01-01T00:00:02Z", "reason": "NewReplicaSetAvailable",
             "message": "ReplicaSet \"web-7d9f8c6b5\" has successfully progressed."}
        ]
    });
    let s = &mut service["spec"];
    s["clusterIP"] = json!("10.0.0.42");
    s["clusterIPs"] = json!(["10.0.0.42"]);
    s["internalTrafficPolicy"] = json!("Cluster");
    s["ipFamilies"] = json!(["IPv4"]);
    s["ipFamilyPolicy"] = json!("SingleStack");
    s["sessionAffinity"] = json!("None");
    s["type"] = json!("ClusterIP");
    service["status"] = json!({"loadBalancer": {}});

    // Second reconcile with the children: its status is what the parent
    // would now carry, making this request a steady state (no events).
    let with_children =
        |parent: &Value| testing::request(parent).child(&deployment).child(&service).build::<WebAppReconciler>();
    let second = native_call(&with_children(&parent)).expect("second reconcile");
    parent["status"] = serde_json::from_str(second.status.as_deref().unwrap()).unwrap();
    with_children(&parent)
}

/// Server-filled metadata, as a child looks in the informer cache.
fn as_served(object: &mut Value, api_version: &str, kind: &str) {
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    let meta = &mut object["metadata"];
    meta["namespace"] = json!("shop");
    meta["uid"] = json!(format!("2f0c6a3e-5b1d-4c7e-9a2f-{:012x}", kind.len()));
    meta["resourceVersion"] = json!("48213");
    meta["generation"] = json!(1);
    meta["creationTimestamp"] = json!("2026-01-01T00:00:01Z");
    meta["ownerReferences"] = json!([{
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp", "name": "web",
        "uid": "7c1e2a90-3d4b-4f6a-8e21-5a9b0c3d2e1f", "controller": true, "blockOwnerDeletion": true
    }]);
}

/// A WebApp of about 4 KB of JSON, as the API server returns it (the
/// client-side-apply annotation is the usual bulk of a real object).
fn webapp_parent() -> Value {
    let spec = json!({
        "image": "registry.example.com/shop/web:1.4.2",
        "replicas": 3,
        "port": 8080,
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-v3,recommendations-v1"},
            {"name": "DATABASE_URL", "value": "postgres://db.shop.svc:5432/shop?sslmode=require"},
            {"name": "CACHE_URL", "value": "redis://cache.shop.svc:6379/0"},
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability.svc:4318"}
        ]
    });
    let last_applied = json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "web", "namespace": "shop",
                     "labels": {"team": "shop", "tier": "frontend", "app.kubernetes.io/part-of": "store"}},
        "spec": spec,
    });
    json!({
        "apiVersion": "example.operon.dev/v1alpha1",
        "kind": "WebApp",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": "7c1e2a90-3d4b-4f6a-8e21-5a9b0c3d2e1f",
            "generation": 4,
            "resourceVersion": "48377",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["example.operon.dev/cleanup"],
            "labels": {"team": "shop", "tier": "frontend", "app.kubernetes.io/part-of": "store",
                       "cost-center": "cc-1042", "environment": "production"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied.to_string(),
                "description": "The storefront of the shop: serves the catalogue, the basket and the checkout pages. ".repeat(20),
                "owner": "platform-team@example.com",
                "runbook": "https://runbooks.example.com/shop/web"
            }
        },
        "spec": spec,
    })
}

/// The same request in the host's form (identical JSON texts).
pub fn to_host(r: &raw::Request) -> Request {
    Request {
        object: r.object.clone(),
        children: r
            .children
            .iter()
            .map(|c| {
                let objects = c.objects.iter().map(|child| child.object.clone()).collect();
                (Gvk::new(&c.kind.group, &c.kind.version, &c.kind.kind), objects)
            })
            .collect(),
        related: r.related.clone(),
        finalizing: r.finalizing,
        attempt: r.attempt,
        now: r.now.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        ..Request::default()
    }
}
