//! The reconcile logic, natively through the SDK's testing path (the same
//! code the component runs). The fixtures in `fixtures/` cover whole
//! scenarios; these tests pin single rules.

use super::*;
use operon_sdk::testing::{self, FakeCluster, Reconciled};
use operon_sdk::{Readiness, ReadinessStatus};
use serde_json::{Value, json};

fn webapp(spec: Value) -> Value {
    json!({
        "apiVersion": "example.operon.dev/v1alpha1",
        "kind": "WebApp",
        "metadata": {
            "name": "shop",
            "namespace": "default",
            "uid": "3f0c6a52-8d1e-4b7a-9c2d-5e8f1a2b3c4d",
            "generation": 5,
            "creationTimestamp": "2026-11-20T10:00:00Z",
        },
        "spec": spec,
    })
}

/// A Deployment as the API server shows it; with `ready == replicas` its
/// rollout is complete (what kstatus reads as `Current`).
fn deployment(replicas: i32, ready: i32, image: &str) -> Value {
    let complete = ready == replicas;
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": "default", "generation": 7},
        "spec": {"replicas": replicas, "progressDeadlineSeconds": 600,
                 "template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
        "status": {
            "observedGeneration": 7,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {"type": "Available", "status": if complete { "True" } else { "False" }},
                {"type": "Progressing", "status": "True",
                 "reason": if complete { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" }},
            ],
        },
    })
}

fn service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop", "namespace": "default"},
           "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10"}})
}

const NOW: &str = "2026-11-26T09:00:00.000Z";

fn run(request: testing::RequestBuilder) -> Result<Reconciled, Failure> {
    testing::reconcile::<WebAppReconciler>(&FakeCluster::new(), request.build::<WebAppReconciler>())
}

fn ready_condition(outcome: &Reconciled) -> &Value {
    &outcome.status.as_ref().expect("a status")["conditions"][0]
}

fn reasons(outcome: &Reconciled) -> Vec<&str> {
    outcome.events.iter().map(|event| event.reason.as_str()).collect()
}

#[test]
fn manifest_should_own_deployment_service_and_ingress_in_that_order() {
    let manifest = WebAppReconciler::manifest();
    assert_eq!(manifest.name(), "webapp");
    assert_eq!(manifest.for_kind().to_string(), "example.operon.dev/v1alpha1 WebApp");
    let owned: Vec<String> = manifest.owned().iter().map(ToString::to_string).collect();
    assert_eq!(owned, ["apps/v1 Deployment", "v1 Service", "networking.k8s.io/v1 Ingress"]);
    assert_eq!(manifest.as_raw().finalizer.as_deref(), Some(FINALIZER));
}

#[test]
fn spec_defaults_should_match_the_crd() {
    let outcome = run(testing::request(webapp(json!({"image": "nginx:1.27"})))).unwrap();
    let deployment = outcome.find("Deployment", "shop").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"], 8080);
    assert!(deployment["spec"]["template"]["spec"]["containers"][0].get("env").is_none());
    assert_eq!(outcome.find("Service", "shop").unwrap()["spec"]["ports"][0]["port"], 8080);
}

#[test]
fn children_should_carry_the_labels_and_select_the_pods() {
    let outcome = run(testing::request(webapp(json!({"image": "nginx:1.27"})))).unwrap();
    let labels = json!({"app.kubernetes.io/name": "shop", "app.kubernetes.io/managed-by": "operon"});
    for object in &outcome.desired {
        assert_eq!(object["metadata"]["labels"], labels, "{}", object["kind"]);
    }
    let deployment = outcome.find("Deployment", "shop").unwrap();
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    assert_eq!(selector, &json!({"app.kubernetes.io/name": "shop"}));
    assert_eq!(deployment["spec"]["template"]["metadata"]["labels"], labels);
    assert_eq!(&outcome.find("Service", "shop").unwrap()["spec"]["selector"], selector);
}

#[test]
fn ingress_should_follow_spec_ingress() {
    let with =
        run(testing::request(webapp(json!({"image": "nginx:1.27", "ingress": {"host": "shop.example.com"}})))).unwrap();
    let ingress = with.find("Ingress", "shop").unwrap();
    let path = &ingress["spec"]["rules"][0]["http"]["paths"][0];
    assert_eq!(path["path"], "/");
    assert_eq!(path["backend"]["service"], json!({"name": "shop", "port": {"name": "http"}}));
    assert!(ingress["spec"].get("ingressClassName").is_none());

    let without = run(testing::request(webapp(json!({"image": "nginx:1.27"})))).unwrap();
    assert_eq!(without.desired.len(), 2);
    assert!(without.find("Ingress", "shop").is_none());
}

#[test]
fn ready_should_follow_the_readiness_of_every_wanted_child() {
    let spec = json!({"image": "nginx:1.27", "replicas": 2});
    let request = |deployment: Value| testing::request(webapp(spec.clone())).child(deployment).child(service());
    let ready = run(request(deployment(2, 2, "nginx:1.27"))).unwrap();
    assert_eq!(ready_condition(&ready)["status"], "True");
    assert_eq!(ready_condition(&ready)["message"], "2 of 2 replicas ready");
    assert_eq!(ready.status.as_ref().unwrap()["readyReplicas"], 2);

    // All pods ready, but of the old image: the rollout has not started.
    let old_image = run(request(deployment(2, 2, "nginx:1.26"))).unwrap();
    assert_eq!(ready_condition(&old_image)["status"], "False");
    assert_eq!(ready_condition(&old_image)["reason"], "Progressing");
    assert_eq!(reasons(&old_image), ["Updated"]);

    // The host's verdict, in its words.
    let short = run(request(deployment(2, 1, "nginx:1.27"))).unwrap();
    assert_eq!(ready_condition(&short)["message"], "Deployment shop: Available: 1/2");

    // A child the host rates Failed makes the reason Failed.
    let stuck = run(testing::request(webapp(spec.clone()))
        .child(deployment(2, 2, "nginx:1.27"))
        .child_with_readiness(service(), Readiness::new(ReadinessStatus::Failed, "no endpoints")))
    .unwrap();
    assert_eq!(ready_condition(&stuck)["reason"], "Failed");
    assert_eq!(ready_condition(&stuck)["message"], "Service shop: no endpoints");

    // No Service yet: nothing is ready, however the Deployment stands.
    let alone = run(testing::request(webapp(spec)).child(deployment(2, 2, "nginx:1.27"))).unwrap();
    assert_eq!(ready_condition(&alone)["message"], "service shop does not exist yet");
}

#[test]
fn last_transition_time_should_be_kept_while_the_condition_holds() {
    let mut parent = webapp(json!({"image": "nginx:1.27", "replicas": 2}));
    parent["status"] = json!({"conditions": [{
        "type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T10:03:00Z",
        "reason": "Available", "message": "2 of 2 replicas ready",
    }]});
    let outcome =
        run(testing::request(parent).now(NOW).child(deployment(2, 2, "nginx:1.27")).child(service())).unwrap();
    assert_eq!(ready_condition(&outcome)["lastTransitionTime"], "2026-11-20T10:03:00Z");
    assert!(outcome.events.is_empty(), "a steady state records no events: {:?}", outcome.events);
}

#[test]
fn last_transition_time_should_be_the_hosts_clock_on_a_change() {
    let request = testing::request(webapp(json!({"image": "nginx:1.27", "replicas": 2})))
        .now(NOW)
        .child(deployment(2, 2, "nginx:1.27"))
        .child(service());
    let outcome = run(request).unwrap();
    assert_eq!(ready_condition(&outcome)["lastTransitionTime"], NOW);
    assert_eq!(reasons(&outcome), ["Available"]);
}

#[test]
fn reconcile_should_be_deterministic() {
    let request = testing::request(webapp(json!({"image": "nginx:1.27", "env": [{"name": "A", "value": "1"}]})))
        .child(deployment(3, 1, "nginx:1.27"))
        .build::<WebAppReconciler>();
    let first = testing::reconcile::<WebAppReconciler>(&FakeCluster::new(), request.clone()).unwrap();
    let second = testing::reconcile::<WebAppReconciler>(&FakeCluster::new(), request).unwrap();
    assert_eq!(first, second);
    assert_eq!(first.requeue_after, None, "owned Deployment changes trigger reconciles; no polling");
}

#[test]
fn invalid_specs_should_be_terminal_and_say_so_in_the_status() {
    let cases = [
        (json!({"replicas": 1}), "WebApp default/shop is invalid: missing field `image`"),
        (json!({"image": " "}), "spec.image must not be empty"),
        (json!({"image": "x", "replicas": -1}), "spec.replicas must be 0 or more, not -1"),
        (json!({"image": "x", "port": 70000}), "spec.port must be between 1 and 65535, not 70000"),
        (json!({"image": "x", "env": [{"name": "A"}, {"name": "A"}]}), "spec.env[1]: A is set twice"),
        (json!({"image": "x", "ingress": {"host": "h", "path": "store"}}), "spec.ingress.path must start with /"),
    ];
    for (spec, message) in cases {
        let failure = run(testing::request(webapp(spec)).now(NOW)).unwrap_err();
        assert!(failure.is_terminal());
        assert_eq!(failure.message(), message);
        let status = failure.status().expect("the failure carries a status");
        let ready = &status["conditions"][0];
        assert_eq!(
            (&ready["status"], &ready["reason"], &ready["message"]),
            (&json!("False"), &json!("InvalidSpec"), &json!(message))
        );
        assert_eq!(ready["lastTransitionTime"], NOW);
        assert_eq!(status["observedGeneration"], 5);
    }
}

#[test]
fn every_outcome_should_keep_the_finalizer_until_finalized() {
    let outcome = run(testing::request(webapp(json!({"image": "nginx:1.27"})))).unwrap();
    assert!(outcome.needs_finalizer);
}

#[test]
fn finalizing_should_want_nothing_and_finish() {
    let outcome = run(testing::request(webapp(json!({"image": "nginx:1.27"})))
        .child(deployment(1, 1, "nginx:1.27"))
        .finalizing(true))
    .unwrap();
    assert!(outcome.desired.is_empty());
    assert!(outcome.finalized);
    assert!(!outcome.needs_finalizer);
    assert_eq!(outcome.status, None);
    assert_eq!(reasons(&outcome), ["Cleanup"]);
}
