//! The manager against a real kube-apiserver (and the garbage collector of
//! kube-controller-manager): WebApp children, pruning, status, finalizers,
//! requeue-after, refused outcomes, metrics.
//!
//! The control plane has no kubelet and no deployment controller: where a
//! Deployment must look ready, the test writes its status, as a kubelet
//! would.

use crate::common;

use common::running::Running;
use common::{eventually, thing_crd, webapp_crd};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("manager", || {
        operon_envtest::Options::with_controller_manager().crd(webapp_crd()).crd(thing_crd()).crd(shade_crd())
    })
}

/// `Shade`: a kind of its own, whose schema the relist test changes.
fn shade_crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(shade_crd_with(json!({"type": "string"}))).unwrap()
}

fn shade_crd_with(color: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "shades.cache.operon.dev"},
        "spec": {
            "group": "cache.operon.dev",
            "scope": "Namespaced",
            "names": {"plural": "shades", "singular": "shade", "kind": "Shade"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"color": color}}
                }}}
            }]
        }
    })
}

impl Running {
    /// Events about `name`.
    async fn events(&self, name: &str) -> Vec<Event> {
        let events = self.api::<Event>().list(&ListParams::default()).await.unwrap();
        events
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect()
    }

    /// Warning events about `name`, as `reason: note`.
    async fn warnings(&self, name: &str) -> Vec<String> {
        self.events(name)
            .await
            .into_iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    /// The metrics text. Panics if it cannot be scraped: a test must not
    /// read "no metric" as "zero".
    async fn scrape(&self) -> String {
        let url = format!("{}/metrics", self.metrics);
        let resp = common::http_get(&url).await.unwrap_or_else(|e| panic!("scraping {url}: {e}"));
        assert!(resp.status().is_success(), "scraping {url}: {}", resp.status());
        resp.text().await.unwrap()
    }

    /// One series' value. Panics when the series is missing.
    async fn metric(&self, series: &str) -> f64 {
        let text = self.scrape().await;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no series {series} in the metrics"))
    }

    /// Finished reconciles of `controller`, of every result.
    async fn reconciles(&self, controller: &str) -> f64 {
        let text = self.scrape().await;
        let prefix = format!("controller_runtime_reconcile_total{{controller=\"{controller}\",");
        let values: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()))
            .collect();
        assert!(!values.is_empty(), "no controller_runtime_reconcile_total series for {controller}");
        values.iter().sum()
    }

    /// `status.count` of a Thing (0 before the first status).
    async fn count(&self, name: &str) -> u64 {
        let p = self.custom("Thing").get(name).await.unwrap();
        p.data.pointer("/status/count").and_then(Value::as_u64).unwrap_or(0)
    }
}

async fn get<K: Clone + serde::de::DeserializeOwned + std::fmt::Debug>(api: &Api<K>, name: &str) -> Option<K> {
    api.get_opt(name).await.unwrap()
}

#[tokio::test]
async fn webapp_children_follow_the_spec_and_are_pruned() {
    let r = Running::start(plane(), "rust-webapp", "children").await;
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
    let r = Running::start(plane(), "rust-webapp", "status").await;
    r.create("WebApp", "web", json!({"image": "nginx:1.27", "replicas": 2})).await;
    let deployments = r.api::<Deployment>();
    eventually("the Deployment", WAIT, || async { get(&deployments, "web").await }).await;
    let not_ready = eventually("a status", WAIT, || async {
        let p = r.custom("WebApp").get("web").await.unwrap();
        p.data.get("status").filter(|s| s.get("conditions").is_some()).cloned()
    })
    .await;
    assert_eq!(not_ready["readyReplicas"], 0, "{not_ready}");

    // Play the Deployment controller: two ready replicas, the rollout
    // complete (what the host's readiness, kstatus's rules, reads).
    let status = json!({"status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2, "observedGeneration": 1,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}});
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
    let r = Running::start(plane(), "rust-webapp", "finalize").await;
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
    let r = Running::start(plane(), "requeue-counter", "requeue").await;
    r.create("Thing", "tick", json!({"everyMs": 200})).await;
    // Only requeues drive this guest (its status writes pass no predicate).
    let started = std::time::Instant::now();
    eventually("five requeued reconciles", WAIT, || async { (r.count("tick").await >= 5).then_some(()) }).await;
    assert!(
        started.elapsed() >= Duration::from_millis(4 * 200),
        "five reconciles 200 ms apart took {:?}",
        started.elapsed()
    );
    // And no faster than asked: a hot loop would make thousands.
    let before = r.reconciles("requeue-counter").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = r.reconciles("requeue-counter").await - before;
    assert!((5.0..=14.0).contains(&during), "{during} reconciles in 2 s with requeue-after 200 ms");
    r.stop().await;
}

#[tokio::test]
async fn a_requeue_after_below_the_floor_is_raised_to_it() {
    let r = Running::start(plane(), "echo", "requeue-floor").await;
    r.create("Thing", "spin", json!({"count": true, "requeueAfterMs": 0})).await;
    eventually("the first reconciles", WAIT, || async { (r.count("spin").await >= 2).then_some(()) }).await;
    let before = r.reconciles("echo").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = r.reconciles("echo").await - before;
    // The floor is 100 ms: at most ~20 in 2 s (before the floor, a zero
    // requeue-after re-ran the guest as fast as the CPU allowed).
    assert!((5.0..=24.0).contains(&during), "{during} reconciles in 2 s with requeue-after 0");
    let raised = r.metric(r#"operon_requeue_raised_total{controller="echo"}"#).await;
    assert!(raised >= 5.0, "raised {raised}");
    let warnings = eventually("one RequeueTooSoon event", WAIT, || async {
        let w = r.warnings("spin").await;
        w.iter().any(|e| e.starts_with("RequeueTooSoon")).then_some(w)
    })
    .await;
    let count = warnings.iter().filter(|e| e.starts_with("RequeueTooSoon")).count();
    assert_eq!(count, 1, "one event per parent, not one per reconcile: {warnings:?}");
    r.stop().await;
}

#[tokio::test]
async fn every_distinct_event_message_reaches_the_cluster_and_repeats_are_not_doubled() {
    let r = Running::start(plane(), "echo", "events").await;
    let events = json!([
        {"reason": "Step", "message": "one"},
        {"reason": "Step", "message": "two"},
        {"reason": "Step", "message": "three", "warning": true},
    ]);
    r.create("Thing", "chatty", json!({"events": events})).await;
    let notes = |all: Vec<Event>| -> Vec<(String, i32)> {
        let mut v: Vec<(String, i32)> = all
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Step"))
            .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
            .collect();
        v.sort();
        v
    };
    let first = eventually("three Step events", WAIT, || async {
        let v = notes(r.events("chatty").await);
        (v.len() == 3).then_some(v)
    })
    .await;
    let texts: Vec<&str> = first.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(texts, ["one", "three", "two"], "every message of one reason is kept");
    // A reconcile that says the same again (a label change triggers one).
    let patch = json!({"metadata": {"labels": {"again": "yes"}}});
    r.custom("Thing").patch("chatty", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let again = eventually("the repeat counted in the series", WAIT, || async {
        let v = notes(r.events("chatty").await);
        v.iter().all(|(_, count)| *count >= 2).then_some(v)
    })
    .await;
    assert_eq!(again.len(), 3, "repeats update the series, they do not add events: {again:?}");
    r.stop().await;
}

#[tokio::test]
async fn an_outcome_beyond_the_bounds_is_refused_naming_the_limit() {
    let r = Running::start(plane(), "echo", "bounds").await;
    let many: Vec<Value> = (0..501)
        .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}}))
        .collect();
    r.create("Thing", "flood", json!({"desired": many})).await;
    let warnings = eventually("an InvalidOutcome event", WAIT, || async {
        let w = r.warnings("flood").await;
        w.iter().any(|e| e.starts_with("InvalidOutcome")).then_some(w)
    })
    .await;
    let event = warnings.iter().find(|e| e.starts_with("InvalidOutcome")).unwrap();
    assert!(event.contains("501 desired objects exceed the limit of 500"), "{event}");
    let written = r.api::<k8s_openapi::api::core::v1::ConfigMap>().list(&ListParams::default()).await.unwrap();
    assert!(written.items.iter().all(|c| !c.metadata.name.as_deref().unwrap_or_default().starts_with("cm-")));
    r.stop().await;
}

#[tokio::test]
async fn a_refused_outcome_is_not_retried_until_the_object_changes() {
    let r = Running::start(plane(), "misbehave-escape", "terminal").await;
    r.create("Thing", "sly", json!({"escape": "secret"})).await;
    eventually("a terminal error", WAIT, || async {
        (r.metric(r#"controller_runtime_terminal_reconcile_errors_total{controller="misbehave-escape"}"#).await >= 1.0)
            .then_some(())
    })
    .await;
    // Backoff would have retried it several times within 3 s (5 ms, 10 ms, ...).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let errors = r.metric(r#"controller_runtime_reconcile_errors_total{controller="misbehave-escape"}"#).await;
    assert_eq!(errors, 1.0, "a refused outcome must not be retried while the object is unchanged");
    let refused = r.metric(r#"operon_outcomes_refused_total{controller="misbehave-escape"}"#).await;
    assert_eq!(refused, 1.0);
    // A change of the object is a new chance.
    let patch = json!({"spec": {"escape": "secret", "n": 2}});
    r.custom("Thing").patch("sly", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually("reconciled again after the change", WAIT, || async {
        (r.metric(r#"controller_runtime_reconcile_errors_total{controller="misbehave-escape"}"#).await >= 2.0)
            .then_some(())
    })
    .await;
    r.stop().await;
}

#[tokio::test]
async fn guest_traps_count_as_panics_in_the_metrics() {
    let r = Running::start(plane(), "misbehave-trap", "panics").await;
    r.create("Thing", "boom", json!({})).await;
    eventually("a counted panic", WAIT, || async {
        let text = r.scrape().await;
        text.lines()
            .any(|l| l.starts_with("controller_runtime_reconcile_panics_total{") && !l.ends_with(" 0"))
            .then_some(())
    })
    .await;
    r.stop().await;
}

#[tokio::test]
async fn an_outcome_with_a_kind_not_owned_writes_nothing() {
    let r = Running::start(plane(), "misbehave-escape", "escape-kind").await;
    r.create("Thing", "sly", json!({"escape": "secret"})).await;
    let warnings = eventually("an InvalidOutcome event", WAIT, || async {
        let w = r.warnings("sly").await;
        w.iter().any(|e| e.starts_with("InvalidOutcome")).then_some(w)
    })
    .await;
    let event = warnings.iter().find(|e| e.starts_with("InvalidOutcome")).unwrap();
    assert!(event.contains("v1 Secret sly-stolen") && event.contains("not among the kinds"), "{event}");
    assert!(get(&r.api::<Deployment>(), "sly").await.is_none(), "the valid Deployment must not be written either");
    assert!(get(&r.api::<Secret>(), "sly-stolen").await.is_none());
    r.stop().await;
}

#[tokio::test]
async fn an_outcome_in_another_namespace_writes_nothing() {
    let r = Running::start(plane(), "misbehave-escape", "escape-ns").await;
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
    let r = Running::start(plane(), "rust-webapp", "metrics").await;
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
        Err(e) => {
            common::skip::skip("OPERON_REQUIRE_PROMTOOL", &format!("promtool cannot run ({e}): no format check"));
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
    let files = ["deploy/rbac.yaml", "deploy/operon.yaml", "guest-examples/webapp/example.yaml"];
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        // Every document (empty ones are skipped); only `true` and `false` are booleans.
        let objects: Vec<DynamicObject> =
            serde_saphyr::from_multiple_with_options(&text, serde_saphyr::options! { strict_booleans: true })
                .unwrap_or_else(|e| panic!("{file}: {e}"));
        for obj in objects {
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

/// The finalizer write never re-creates a parent deleted since the cache
/// saw it (a server-side apply would: it creates what is missing), and it
/// adds or removes only the host's own entry.
#[tokio::test]
async fn the_finalizer_write_should_not_recreate_a_deleted_parent() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use operon::apply::Applier;
    use operon::cache::CachedObject;
    use operon::leader::Fence;
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "finalizer").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let applier = Applier::new(client.clone(), client.clone(), "finalizer-test", None);
    let cached = |cm: &ConfigMap| {
        let mut v = serde_json::to_value(cm).unwrap();
        v["apiVersion"] = json!("v1");
        v["kind"] = json!("ConfigMap");
        CachedObject::from_value(v).unwrap()
    };
    let make = |name: &str| ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            finalizers: Some(vec!["example.com/other".into()]),
            ..Default::default()
        },
        ..Default::default()
    };

    // Added beside another controller's finalizer, then removed alone.
    let live = api.create(&PostParams::default(), &make("kept")).await.unwrap();
    applier.set_finalizer(&cached(&live), "operon.dev/test", true, &Fence::open()).await.unwrap();
    let with = api.get("kept").await.unwrap();
    assert_eq!(with.metadata.finalizers.clone().unwrap(), ["example.com/other", "operon.dev/test"]);
    applier.set_finalizer(&cached(&with), "operon.dev/test", false, &Fence::open()).await.unwrap();
    assert_eq!(api.get("kept").await.unwrap().metadata.finalizers.unwrap(), ["example.com/other"]);

    // A stale view (the list changed since) is refused, not overwritten.
    let stale = cached(&with);
    let err = applier.set_finalizer(&stale, "operon.dev/test", true, &Fence::open()).await;
    assert!(err.is_err(), "a write from a stale resourceVersion must conflict");

    // Deleted after the cache saw it: nothing comes back.
    let mut gone = make("gone");
    gone.metadata.finalizers = None;
    let live = api.create(&PostParams::default(), &gone).await.unwrap();
    api.delete("gone", &DeleteParams::default()).await.unwrap();
    applier.set_finalizer(&cached(&live), "operon.dev/test", true, &Fence::open()).await.unwrap();
    assert!(api.get_opt("gone").await.unwrap().is_none(), "the deleted parent was re-created by the finalizer write");
    // Clean up the one with the other controller's finalizer.
    let kept = api.get("kept").await.unwrap();
    let mut patch = json!({"metadata": {"finalizers": null}});
    patch["metadata"]["resourceVersion"] = json!(kept.metadata.resource_version);
    api.patch("kept", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

/// A CRD change can show an object differently at the same
/// resourceVersion (here a default; in operon, a conversion switched to a
/// plugin). The watch opened before it is served from the old storage until
/// the API server tears that down; the watcher then lists again, and the
/// cache must deliver what looks different now — as a resync, which passes
/// every predicate — not swap it in silently (nothing changed in etcd, so no
/// other event will ever come). An asked-for relist ([`Cache::relist`]) of
/// what did not change delivers nothing.
#[tokio::test]
async fn an_object_a_crd_change_shows_differently_is_delivered_again() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use operon::cache::{Cache, Informer, ObjectEvent, ObjectKey, WatchKey};
    use operon::contract::Gvk;
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "relist").await.unwrap();
    let ar = kube::api::ApiResource::from_gvk(&GroupVersionKind::gvk("cache.operon.dev", "v1", "Shade"));
    let shades: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let shade: DynamicObject = serde_json::from_value(json!({"apiVersion": "cache.operon.dev/v1", "kind": "Shade",
        "metadata": {"name": "plain"}, "spec": {}}))
    .unwrap();
    shades.create(&PostParams::default(), &shade).await.unwrap();

    let cache = Cache::new(client.clone(), Default::default());
    let informer = cache.informer(WatchKey::new(Gvk::new("cache.operon.dev", "v1", "Shade"), Some(ns.clone())));
    informer.wait_synced(WAIT).await.unwrap();
    let mut events = informer.subscribe();
    assert!(matches!(events.recv().await, Some(ObjectEvent::Applied { initial: true, .. })));
    let held = |informer: &Informer| informer.store().get(&ObjectKey::new(Some(&ns), "plain")).cloned().unwrap();
    let color =
        |o: &operon::cache::CachedObject| o.value().pointer("/spec/color").and_then(Value::as_str).map(str::to_string);
    assert_eq!(color(&held(&informer)), None);

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let defaulted = shade_crd_with(json!({"type": "string", "default": "blue"}));
    crds.patch("shades.cache.operon.dev", &PatchParams::apply("relist-test").force(), &Patch::Apply(&defaulted))
        .await
        .unwrap();
    let event =
        tokio::time::timeout(WAIT, events.recv()).await.expect("the object shown differently was not delivered");
    match event {
        Some(ObjectEvent::Resync(o)) => assert_eq!((o.name(), color(&o).as_deref()), ("plain", Some("blue"))),
        other => panic!("expected a resync of the object shown differently, got {other:?}"),
    }
    assert_eq!(color(&held(&informer)).as_deref(), Some("blue"));

    let before = held(&informer);
    cache.relist("cache.operon.dev", "Shade", Duration::ZERO);
    eventually("the asked-for relist", WAIT, || async {
        (!std::sync::Arc::ptr_eq(&before, &held(&informer))).then_some(())
    })
    .await;
    assert!(events.try_recv().is_err(), "an object shown the same way was delivered again");
}

/// A metadata-only informer (a module's ConfigMap) holds each object's
/// metadata and nothing of its content, and still delivers every change.
#[tokio::test]
async fn a_metadata_only_informer_holds_no_content_and_sees_every_change() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::ConfigMap;
    use operon::cache::{Cache, ObjectEvent, ObjectKey, WatchKey};
    use operon::contract::Gvk;
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "meta-only").await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let write = |bytes: Vec<u8>| {
        let maps = maps.clone();
        async move {
            let cm = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("module".into()),
                    labels: Some([("size".to_string(), bytes.len().to_string())].into()),
                    ..Default::default()
                },
                binary_data: Some([("module.wasm".to_string(), ByteString(bytes))].into()),
                ..Default::default()
            };
            maps.patch("module", &PatchParams::apply("test").force(), &Patch::Apply(&cm)).await.unwrap();
        }
    };
    write(vec![7; 256 << 10]).await;

    let cache = Cache::new(client.clone(), Default::default());
    let mut key = WatchKey::new(Gvk::new("", "v1", "ConfigMap"), Some(ns.clone()));
    key.fields = Some("metadata.name=module".into());
    key.metadata_only = true;
    let informer = cache.informer(key);
    informer.wait_synced(WAIT).await.unwrap();
    let mut events = informer.subscribe();
    let held = informer.store().get(&ObjectKey::new(Some(&ns), "module")).cloned().expect("the ConfigMap is cached");
    assert_eq!((held.kind(), held.label("size")), ("ConfigMap", Some("262144")));
    assert!(held.uid().is_some() && held.resource_version().is_some());
    assert!(held.value().get("binaryData").is_none(), "the content is cached: {} bytes", held.json().len());
    assert!(held.json().len() < 4096, "{} bytes cached", held.json().len());
    assert!(matches!(events.recv().await, Some(ObjectEvent::Applied { initial: true, .. })));

    write(vec![8; 1000]).await;
    let event = tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Some(ObjectEvent::Applied { new, initial: false, .. }) => break new,
                Some(_) => continue,
                None => panic!("the informer stopped"),
            }
        }
    })
    .await
    .expect("the change was not delivered");
    assert_eq!(event.label("size"), Some("1000"));
    assert_ne!(event.resource_version(), held.resource_version());
}
