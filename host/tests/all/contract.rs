//! Contract 0.2 against a real API server, beside 0.1 in one host: the
//! request's clock and `requeue-at`, watches by reference and by selector
//! (exactly the parents concerned are reconciled), children handed in with
//! their readiness, `observedGeneration` written by the host, and a failure
//! that carries the parent's status (issues 19 and 23).
//!
//! The 0.2 plugin is the `clockwork` guest; the 0.1 one is `echo`; both run
//! as Reconcilers from ConfigMaps in one in-process manager.

use crate::common;
use crate::common::plugins;
use crate::common::serve;

use common::{eventually, guest, thing_crd};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use operon::reconciler::crd::{ClusterReconciler, Reconciler};
use plugins::{Host, config_map_module};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("contract", || {
        use kube::CustomResourceExt;
        operon_envtest::Options::default()
            .crd(thing_crd_with_a_freezable_status())
            .crd(gadget_crd())
            .crd(survey_crd())
            .crd(Reconciler::crd())
            .crd(ClusterReconciler::crd())
    })
}

/// `Thing`, whose status refuses a new `count` while `status.frozen` is
/// true: a rejection of the host's status write that depends on state
/// someone else changes.
fn thing_crd_with_a_freezable_status()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let mut crd = serde_json::to_value(thing_crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] = json!({
        "type": "object", "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"count": {"type": "integer"}, "frozen": {"type": "boolean"}},
        "x-kubernetes-validations": [{
            "rule": "!has(oldSelf.frozen) || !oldSelf.frozen || !has(self.count) || !has(oldSelf.count) || self.count == oldSelf.count",
            "message": "status.count is frozen"
        }]
    });
    serde_json::from_value(crd).unwrap()
}

/// `Gadget` in two versions: `v1beta1` (stored) and `v1`, no conversion of
/// its own (strategy None) until a plugin serves it.
fn gadget_crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    };
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.operon.dev"},
        "spec": {"group": "example.operon.dev", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "conversion": {"strategy": "None"},
            "versions": [version("v1beta1", true), version("v1", false)]}
    }))
    .unwrap()
}

/// `Survey`: a cluster-scoped kind the `surveyor` guest reconciles.
fn survey_crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "surveys.example.operon.dev"},
        "spec": {"group": "example.operon.dev", "scope": "Cluster",
            "names": {"plural": "surveys", "singular": "survey", "kind": "Survey"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    }))
    .unwrap()
}

fn grants() -> Value {
    json!({"for": [{"group": "example.operon.dev", "kind": "Thing"}],
        "owns": [{"group": "", "kind": "ConfigMap"}, {"group": "", "kind": "Service"}]})
}

/// Start `clockwork` (0.2) for the Things labelled `contract: v2`.
async fn clockwork(host: &Host) {
    host.module_config_map("clockwork", &guest("clockwork")).await;
    let spec = json!({"module": config_map_module("clockwork"), "grants": grants(),
        "selector": {"matchLabels": {"contract": "v2"}}});
    host.reconciler("clockwork", spec).await;
}

async fn thing(host: &Host, name: &str, spec: Value) {
    let t: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": name, "labels": {"contract": "v2"}}, "spec": spec
    }))
    .unwrap();
    host.things().patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&t)).await.unwrap();
}

async fn config_map(host: &Host, name: &str, labels: Value, data: &str) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"v": data}
    }))
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(host.client.clone(), &host.ns);
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&cm)).await.unwrap();
}

async fn status(host: &Host, name: &str) -> Option<Value> {
    let t = host.things().get_opt(name).await.ok()??;
    t.data.get("status").cloned()
}

async fn count(host: &Host, name: &str) -> u64 {
    status(host, name).await.and_then(|s| s["count"].as_u64()).unwrap_or(0)
}

/// Every Thing's reconcile count, once two rounds 2 s apart agree.
async fn settled_counts(host: &Host, names: &[String]) -> BTreeMap<String, u64> {
    let deadline = std::time::Instant::now() + WAIT;
    let mut last = BTreeMap::new();
    loop {
        let listed = host.things().list(&Default::default()).await.unwrap();
        let now: BTreeMap<String, u64> = listed
            .items
            .iter()
            .filter_map(|t| Some((t.metadata.name.clone()?, t.data["status"]["count"].as_u64().unwrap_or(0))))
            .filter(|(n, _)| names.contains(n))
            .collect();
        if now.len() == names.len() && now.values().all(|c| *c > 0) && now == last {
            return now;
        }
        assert!(std::time::Instant::now() < deadline, "the reconcile counts did not settle: {now:?}");
        last = now;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[tokio::test]
async fn a_0_1_and_a_0_2_module_run_side_by_side_and_0_2_sees_the_clock_readiness_and_observed_generation() {
    let host = Host::start_on(plane(), "contract-side", false).await;
    // 0.1: echo writes the status its spec describes.
    host.module_config_map("echo", &guest("echo")).await;
    let echo_grants = json!({"for": [{"group": "example.operon.dev", "kind": "Thing"}],
        "owns": [{"group": "apps", "kind": "Deployment"}, {"group": "", "kind": "Service"}, {"group": "", "kind": "ConfigMap"}]});
    let echo = json!({"module": config_map_module("echo"), "grants": echo_grants,
        "selector": {"matchLabels": {"contract": "v1"}}});
    host.reconciler("echo", echo).await;
    clockwork(&host).await;
    let old: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "old", "labels": {"contract": "v1"}}, "spec": {"status": {"hello": "0.1"}}
    }))
    .unwrap();
    host.things().patch("old", &PatchParams::apply("test").force(), &Patch::Apply(&old)).await.unwrap();
    thing(&host, "new", json!({"n": 1})).await;

    eventually("the 0.1 module reconciled its Thing", WAIT, || async {
        (status(&host, "old").await?["hello"] == "0.1").then_some(())
    })
    .await;
    let s = eventually("the 0.2 module saw its child, with its readiness", WAIT, || async {
        let s = status(&host, "new").await?;
        (s["children"] == json!(["new-child=Current"])).then_some(s)
    })
    .await;
    let now = s["now"].as_str().unwrap();
    assert!(now.len() == 24 && now.ends_with('Z'), "RFC 3339 with milliseconds in UTC: {now}");
    let t = host.things().get("new").await.unwrap();
    assert_eq!(s["observedGeneration"], t.metadata.generation.unwrap(), "set by the host for a 0.2 module: {s}");
    // A 0.1 module's status is written as it said, nothing added.
    assert!(status(&host, "old").await.unwrap().get("observedGeneration").is_none());
    // `operon inspect`'s facts say which contract each module speaks.
    let v2 = host.runtime.load(&guest("clockwork"), operon::runtime::Limits::default()).unwrap();
    let v1 = host.runtime.load(&guest("echo"), operon::runtime::Limits::default()).unwrap();
    assert_eq!((v1.info().wit_version.as_str(), v2.info().wit_version.as_str()), ("0.1.0", "0.2.0"));
    host.stop().await;
}

#[tokio::test]
async fn a_change_to_a_referenced_config_map_reconciles_exactly_the_parent_naming_it() {
    let host = Host::start_on(plane(), "contract-ref", false).await;
    clockwork(&host).await;
    let names: Vec<String> = (0..500).map(|i| format!("p{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        config_map(&host, &format!("config-{i}"), json!({}), "1").await;
        thing(&host, n, json!({"configRef": format!("config-{i}")})).await;
    }
    let before = settled_counts(&host, &names).await;
    let s = status(&host, "p7").await.unwrap();
    assert_eq!(s["related"], json!(["config-7"]), "the referenced ConfigMap is handed in: {s}");

    config_map(&host, "config-7", json!({}), "2").await;
    eventually("p7 reconciled after its ConfigMap changed", WAIT, || async {
        (count(&host, "p7").await > before["p7"]).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut changed = Vec::new();
    for n in &names {
        if count(&host, n).await != before[n] {
            changed.push(n.clone());
        }
    }
    assert_eq!(changed, vec!["p7".to_string()], "one ConfigMap changed: one parent reconciled");
    host.stop().await;
}

#[tokio::test]
async fn a_relabelled_object_reconciles_the_parents_whose_selector_matched_before_or_after() {
    let host = Host::start_on(plane(), "contract-sel", false).await;
    clockwork(&host).await;
    thing(&host, "a", json!({"selector": {"matchLabels": {"group": "a"}}})).await;
    thing(&host, "b", json!({"selector": {"group": "b"}})).await;
    thing(&host, "c", json!({"selector": {"matchLabels": {"group": "c"}}})).await;
    let names = ["a", "b", "c"].map(String::from);
    config_map(&host, "member", json!({"group": "a"}), "1").await;
    eventually("a sees its member", WAIT, || async {
        (status(&host, "a").await?["related"] == json!(["member"])).then_some(())
    })
    .await;
    let before = settled_counts(&host, &names).await;

    config_map(&host, "member", json!({"group": "b"}), "1").await;
    eventually("b sees the member, a no longer does", WAIT, || async {
        let (a, b) = (status(&host, "a").await?, status(&host, "b").await?);
        (a["related"] == json!([]) && b["related"] == json!(["member"])).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(count(&host, "a").await > before["a"] && count(&host, "b").await > before["b"]);
    assert_eq!(count(&host, "c").await, before["c"], "c's selector matched neither before nor after");
    host.stop().await;
}

#[tokio::test]
async fn requeue_at_reconciles_at_the_time_asked_and_a_failure_writes_the_status_it_carries() {
    let host = Host::start_on(plane(), "contract-time", false).await;
    clockwork(&host).await;
    thing(&host, "bad", json!({"fail": true})).await;
    let s = eventually("the failure's status is written", WAIT, || async {
        let s = status(&host, "bad").await?;
        (s["ready"] == false).then_some(s)
    })
    .await;
    assert_eq!(s["reason"], "Invalid", "{s}");
    let t = host.things().get("bad").await.unwrap();
    assert_eq!(s["observedGeneration"], t.metadata.generation.unwrap(), "{s}");
    let events = eventually("the terminal failure's event", WAIT, || async {
        let e = host.events("bad").await;
        e.iter().any(|(r, _)| r == "ReconcileTerminal").then_some(e)
    })
    .await;
    assert!(events.iter().any(|(_, m)| m.contains("spec.fail is set")), "{events:?}");

    // Asked to run again 3 s after its first reconcile's clock.
    thing(&host, "timer", json!({})).await;
    let first = eventually("the timer reconciled", WAIT, || async {
        status(&host, "timer").await?["now"].as_str().map(str::to_string)
    })
    .await;
    let at = first.parse::<jiff::Timestamp>().unwrap() + jiff::SignedDuration::from_secs(3);
    thing(&host, "timer", json!({"requeueAt": at.to_string()})).await;
    let woke = eventually("a reconcile at the time asked", WAIT, || async {
        let now = status(&host, "timer").await?["now"].as_str()?.parse::<jiff::Timestamp>().ok()?;
        (now >= at).then_some(now)
    })
    .await;
    let late = woke.duration_since(at);
    assert!(late < jiff::SignedDuration::from_secs(1), "woke {late} after the time asked");
    host.stop().await;
}

#[tokio::test]
async fn a_child_with_an_immutable_change_is_recreated_and_one_on_delete_is_left_alone() {
    let host = Host::start_on(plane(), "contract-update", false).await;
    clockwork(&host).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(host.client.clone(), &host.ns);
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(host.client.clone(), &host.ns);
    thing(&host, "imm", json!({"childData": "a", "servicePort": 80})).await;
    let first = eventually("the immutable child and the service", WAIT, || async {
        let cm = config_maps.get_opt("imm-child").await.ok()??;
        services.get_opt("imm-svc").await.ok()??;
        (cm.data?.get("value")? == "a").then_some(cm.metadata.uid?)
    })
    .await;

    thing(&host, "imm", json!({"childData": "b", "servicePort": 81})).await;
    let second = eventually("the child created anew with the new data", WAIT, || async {
        let cm = config_maps.get_opt("imm-child").await.ok()??;
        (cm.data?.get("value")? == "b").then_some(cm.metadata.uid?)
    })
    .await;
    assert_ne!(first, second, "an immutable ConfigMap can only change by being created anew");
    let events = host.events("imm").await;
    assert!(events.iter().any(|(r, m)| r == "ChildRecreated" && m.contains("imm-child")), "{events:?}");
    // The Service's strategy is on-delete: the reconciles that created the
    // new ConfigMap (from the new spec) left the existing Service as it was.
    let svc = services.get("imm-svc").await.unwrap();
    assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 80);
    // Deleted, it comes back as the parent now asks.
    services.delete("imm-svc", &Default::default()).await.unwrap();
    eventually("the service created anew on the new port", WAIT, || async {
        let svc = services.get_opt("imm-svc").await.ok()??;
        (svc.spec?.ports?[0].port == 81).then_some(())
    })
    .await;
    host.stop().await;
}

fn decorator_grants() -> Value {
    json!({"for": [{"group": "apps", "kind": "StatefulSet"}], "owns": [{"group": "", "kind": "Service"}]})
}

const DECORATOR_FINALIZER: &str = "example.operon.dev/decorator";

/// Whether the StatefulSet `name` is decorated (`Some(true)`: its two
/// Services, the label and the finalizer; `Some(false)`: none of them;
/// `None`: in between).
async fn decorated(host: &Host, name: &str) -> Option<bool> {
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(host.client.clone(), &host.ns);
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(host.client.clone(), &host.ns);
    let s = sets.get(name).await.ok()?;
    let label = s.metadata.labels.unwrap_or_default().get("example.operon.dev/exposed").is_some_and(|v| v == "true");
    let held = s.metadata.finalizers.unwrap_or_default().iter().any(|f| f == DECORATOR_FINALIZER);
    let mut children = 0;
    for i in 0..2 {
        children += usize::from(services.get_opt(&format!("{name}-{i}")).await.ok()?.is_some());
    }
    match (label, held, children) {
        (true, true, 2) => Some(true),
        (false, false, 0) => Some(false),
        _ => None,
    }
}

fn stateful_set(name: &str, expose: bool) -> k8s_openapi::api::apps::v1::StatefulSet {
    let annotations = if expose { json!({"example.operon.dev/expose": "true"}) } else { json!({}) };
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 2, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}
        }
    }))
    .unwrap()
}

/// Whether the guest was called to finalize the parent `name` (the
/// decorator guest's `Undecorated` event).
async fn finalized_by_the_guest(host: &Host, name: &str) -> bool {
    host.events(name).await.iter().any(|(reason, _)| reason == "Undecorated")
}

/// A decorator as a Metacontroller user writes one: the Reconciler's
/// `spec.annotationSelector`, not the guest, picks the StatefulSets that
/// opted in. One that opts out is finalized like a deleted one: the guest
/// is called `finalizing`, and once it answers `finalized` its Services,
/// the label it kept through `parent-metadata` and the finalizer go.
#[tokio::test]
async fn a_decorator_holds_a_finalizer_and_children_only_while_its_parent_opts_in() {
    let host = Host::start_on(plane(), "contract-decorator", false).await;
    host.module_config_map("decorator", &guest("decorator")).await;
    host.reconciler(
        "decorator",
        json!({"module": config_map_module("decorator"), "grants": decorator_grants(),
        "annotationSelector": {"matchAnnotations": {"example.operon.dev/expose": "true"}}}),
    )
    .await;
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(host.client.clone(), &host.ns);
    let apply = |name: &'static str, expose: bool| {
        let sets = sets.clone();
        async move {
            sets.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&stateful_set(name, expose)))
                .await
                .unwrap()
        }
    };
    apply("plain", false).await;
    apply("exposed", true).await;
    eventually("a Service per replica, the finalizer and the label on the opted-in StatefulSet", WAIT, || async {
        decorated(&host, "exposed").await?.then_some(())
    })
    .await;
    // The plain one went through the same informer and queue, and holds
    // nothing: deleting it takes effect at once.
    let plain = sets.get("plain").await.unwrap();
    assert!(
        plain.metadata.finalizers.unwrap_or_default().is_empty(),
        "a parent that never opted in holds no finalizer"
    );
    sets.delete("plain", &Default::default()).await.unwrap();
    eventually("the plain StatefulSet gone", WAIT, || async {
        sets.get_opt("plain").await.ok()?.is_none().then_some(())
    })
    .await;

    // Opting out: finalized by the guest, then the Services, the label and
    // the finalizer removed.
    apply("exposed", false).await;
    eventually("the opted-out StatefulSet's Services, label and finalizer removed", WAIT, || async {
        (!decorated(&host, "exposed").await?).then_some(())
    })
    .await;
    assert!(
        finalized_by_the_guest(&host, "exposed").await,
        "the guest was not called to finalize the opted-out parent"
    );

    // Opted in again: decorated again. Then deleted: finalized, and gone.
    apply("exposed", true).await;
    eventually("opted in again, decorated again", WAIT, || async { decorated(&host, "exposed").await?.then_some(()) })
        .await;
    sets.delete("exposed", &Default::default()).await.unwrap();
    eventually("the opted-in StatefulSet finalized and gone", WAIT, || async {
        sets.get_opt("exposed").await.ok()?.is_none().then_some(())
    })
    .await;
    host.stop().await;
}

/// A parent that leaves the Reconciler's `spec.selector` holding the
/// finalizer is finalized by the guest, and keeps none of its decoration.
#[tokio::test]
async fn a_parent_that_leaves_the_selector_is_finalized_and_keeps_no_children_or_labels() {
    let host = Host::start_on(plane(), "contract-leave", false).await;
    host.module_config_map("decorator", &guest("decorator")).await;
    host.reconciler(
        "decorator",
        json!({"module": config_map_module("decorator"), "grants": decorator_grants(),
        "selector": {"matchLabels": {"decorate": "yes"}}}),
    )
    .await;
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(host.client.clone(), &host.ns);
    let mut set = stateful_set("leaver", true);
    set.metadata.labels = Some([("decorate".to_string(), "yes".to_string())].into());
    sets.patch("leaver", &PatchParams::apply("test").force(), &Patch::Apply(&set)).await.unwrap();
    eventually("the selected StatefulSet decorated", WAIT, || async {
        decorated(&host, "leaver").await?.then_some(())
    })
    .await;
    set.metadata.labels = Some([("decorate".to_string(), "no".to_string())].into());
    sets.patch("leaver", &PatchParams::apply("test").force(), &Patch::Apply(&set)).await.unwrap();
    eventually("the Services, label and finalizer removed once it left the selector", WAIT, || async {
        (!decorated(&host, "leaver").await?).then_some(())
    })
    .await;
    assert!(finalized_by_the_guest(&host, "leaver").await, "the guest was not called to finalize the parent that left");
    host.stop().await;
}

/// `spec.annotationSelector` picks a Reconciler's parents by
/// their annotations (as Metacontroller's decorators do): the host never
/// hands the guest a parent outside it — even one the guest would decorate —
/// and releases the finalizer of a parent that leaves it.
#[tokio::test]
async fn an_annotation_selector_picks_the_parents_and_releases_one_that_leaves() {
    let host = Host::start_on(plane(), "contract-annotations", false).await;
    host.module_config_map("decorator", &guest("decorator")).await;
    let grants = json!({"for": [{"group": "apps", "kind": "StatefulSet"}], "owns": [{"group": "", "kind": "Service"}]});
    host.reconciler(
        "decorator",
        json!({"module": config_map_module("decorator"), "grants": grants,
        "annotationSelector": {"matchAnnotations": {"example.operon.dev/team": "web"}}}),
    )
    .await;
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(host.client.clone(), &host.ns);
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(host.client.clone(), &host.ns);
    let apply = |name: &'static str, team: Option<&str>| {
        let (sets, mut set) = (sets.clone(), stateful_set(name, true));
        if let Some(team) = team {
            set.metadata.annotations.get_or_insert_default().insert("example.operon.dev/team".into(), team.into());
        }
        async move { sets.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&set)).await.unwrap() }
    };
    apply("outside", Some("db")).await;
    apply("inside", Some("web")).await;
    const FINALIZER: &str = "example.operon.dev/decorator";
    eventually("the selected StatefulSet decorated and held", WAIT, || async {
        services.get_opt("inside-0").await.ok()??;
        let s = sets.get("inside").await.ok()?;
        s.metadata.finalizers?.iter().any(|f| f == FINALIZER).then_some(())
    })
    .await;
    // Both events went through the same informer and queue; the one
    // outside the selector was never handed to the guest.
    assert!(services.get_opt("outside-0").await.unwrap().is_none(), "a parent outside the selector was decorated");
    let outside = sets.get("outside").await.unwrap();
    assert!(outside.metadata.finalizers.unwrap_or_default().is_empty(), "a parent outside the selector is held");

    apply("inside", Some("db")).await;
    eventually("the finalizer released once it left the annotation selector", WAIT, || async {
        let s = sets.get("inside").await.ok()?;
        (!s.metadata.finalizers.unwrap_or_default().iter().any(|f| f == FINALIZER)).then_some(())
    })
    .await;
    host.stop().await;
}

/// A status the API server rejects is retried with backoff, as
/// controller-runtime retries any error: the rejection here depends on
/// state someone else changes (`status.frozen`, which no reconcile is
/// triggered by), and the status is written once it is lifted.
#[tokio::test]
async fn a_rejected_status_is_retried_with_backoff_until_the_api_server_takes_it() {
    let host = Host::start_on(plane(), "contract-status", false).await;
    clockwork(&host).await;
    thing(&host, "frozen", json!({"n": 1})).await;
    eventually("the first status", WAIT, || async { (count(&host, "frozen").await > 0).then_some(()) }).await;
    let freeze = |frozen: bool| {
        let things = host.things();
        async move {
            let patch = json!({"status": {"frozen": frozen}});
            things.patch_status("frozen", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        }
    };
    freeze(true).await;
    let before = count(&host, "frozen").await;
    // A new generation: the guest answers count + 1, which is refused.
    thing(&host, "frozen", json!({"n": 2})).await;
    eventually("the status write refused", WAIT, || async {
        let events = host.events("frozen").await;
        events.iter().any(|(_, note)| note.contains("status.count is frozen")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(count(&host, "frozen").await, before, "a frozen status was written");
    // Lifted by someone else: nothing reconciles the Thing but the retry.
    freeze(false).await;
    eventually("the status written once the API server takes it", WAIT, || async {
        (count(&host, "frozen").await > before).then_some(())
    })
    .await;
    host.stop().await;
}

/// The tests that point the Gadget CRD's conversion take turns: one CRD,
/// one converter.
static GADGET_CRD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A ClusterReconciler spec of the `converter` guest granted conversion:
/// the module served over HTTP on loopback (a ClusterReconciler has no
/// namespace for a ConfigMap).
async fn converter_spec() -> Value {
    let bytes = guest("converter");
    let url = serve::serve_module(bytes.clone()).await;
    let sha = operon::runtime::digest(&bytes).trim_start_matches("sha256:").to_string();
    json!({"module": {"url": {"href": url, "sha256": sha}},
        "grants": {"for": [{"group": "example.operon.dev", "kind": "Gadget"}], "namespaces": ["*"], "conversion": true}})
}

/// Where the Gadget CRD's conversion points: the path of its webhook.
async fn gadget_conversion(client: &kube::Client) -> Option<String> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = Api::<CustomResourceDefinition>::all(client.clone()).get("gadgets.example.operon.dev").await.ok()?;
    let url = crd.spec.conversion?.webhook?.client_config?.url?;
    Some(url.split_once("/convert/").map_or(url.clone(), |(_, p)| p.to_string()))
}

#[tokio::test]
async fn a_plugin_granted_conversion_serves_its_crds_versions_and_gives_the_crd_back() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, GroupVersionKind, PostParams};
    let _turn = GADGET_CRD.lock().await;
    let host = Host::start_serving_webhooks(plane(), "contract-convert").await;
    let name = format!("{}-converter", host.ns);
    host.cluster_reconciler(&name, converter_spec().await).await;
    let crds: Api<CustomResourceDefinition> = Api::all(host.client.clone());
    eventually("the CRD's conversion pointed at the plugin", WAIT, || async {
        let crd = crds.get("gadgets.example.operon.dev").await.ok()?;
        (crd.spec.conversion?.strategy == "Webhook").then_some(())
    })
    .await;
    let at = |version: &str| {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", version, "Gadget"));
        Api::<DynamicObject>::namespaced_with(host.client.clone(), &host.ns, &ar)
    };
    let (beta, v1) = (at("v1beta1"), at("v1"));
    let gadget = |version: &str, name: &str, spec: Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": format!("example.operon.dev/{version}"), "kind": "Gadget",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap()
    };
    beta.create(&PostParams::default(), &gadget("v1beta1", "big", json!({"size": "large"}))).await.unwrap();
    v1.create(&PostParams::default(), &gadget("v1", "one", json!({"replicas": 1}))).await.unwrap();
    // Stored as v1beta1, served as v1 through the guest's convert; and back.
    assert_eq!(v1.get("big").await.unwrap().data["spec"], json!({"replicas": 3}));
    assert_eq!(beta.get("one").await.unwrap().data["spec"], json!({"size": "small"}));
    // The controller reads v1: it reconciled both through the conversion.
    eventually("both Gadgets reconciled at v1", WAIT, || async {
        let big = v1.get("big").await.ok()?.data["status"]["replicas"].as_u64()?;
        let one = v1.get("one").await.ok()?.data["status"]["replicas"].as_u64()?;
        (big == 3 && one == 1).then_some(())
    })
    .await;

    // A convert that traps: the API server says which plugin and why.
    beta.create(&PostParams::default(), &gadget("v1beta1", "bomb", json!({"size": "explode"}))).await.unwrap();
    let err = v1.get("bomb").await.unwrap_err().to_string();
    assert!(err.contains("could not convert") && err.contains("trapped"), "{err}");
    beta.delete("bomb", &Default::default()).await.unwrap();

    // The ClusterReconciler goes: the CRD gets its own settings back.
    Api::<ClusterReconciler>::all(host.client.clone()).delete(&name, &Default::default()).await.unwrap();
    eventually("the CRD's conversion given back", WAIT, || async {
        let crd = crds.get("gadgets.example.operon.dev").await.ok()?;
        let annotated = crd.metadata.annotations.unwrap_or_default().contains_key("operon.dev/conversion-before");
        let conversion = crd.spec.conversion?;
        (conversion.strategy == "None" && conversion.webhook.is_none() && !annotated).then_some(())
    })
    .await;
    host.stop().await;
}

/// Conversion is a cluster-wide power: the API server refuses it on a
/// namespaced Reconciler and on a ClusterReconciler that does not cover
/// every namespace, naming the field.
#[tokio::test]
async fn a_tenant_may_not_take_a_crds_conversion() {
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "contract-convert-tenant").await.unwrap();
    let grants = json!({"for": [{"group": "example.operon.dev", "kind": "Gadget"}], "conversion": true});
    let r: Reconciler = serde_json::from_value(json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
        "metadata": {"name": "converter", "namespace": ns},
        "spec": {"module": config_map_module("converter"), "grants": grants}}))
    .unwrap();
    let refused = Api::<Reconciler>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &r)
        .await
        .expect_err("a namespaced Reconciler granted conversion was accepted");
    assert!(refused.to_string().contains("spec.grants.conversion is for ClusterReconcilers"), "{refused}");
    let mut spec = converter_spec().await;
    spec["grants"]["namespaces"] = json!([ns]);
    let c: ClusterReconciler = serde_json::from_value(json!({"apiVersion": "operon.dev/v1alpha1",
        "kind": "ClusterReconciler", "metadata": {"name": format!("{ns}-converter")}, "spec": spec}))
    .unwrap();
    let refused = Api::<ClusterReconciler>::all(client)
        .create(&Default::default(), &c)
        .await
        .expect_err("a ClusterReconciler of one namespace granted conversion was accepted");
    assert!(refused.to_string().contains("spec.grants.conversion needs spec.grants.namespaces"), "{refused}");
}

/// One converter per CRD, decided from the CRD's record: a second plugin
/// on another replica is refused (it does not flip the CRD to itself), its
/// clean-up leaves the holder's webhook in place, and a host whose
/// operator does not allow the CRD never points it.
#[tokio::test]
async fn two_replicas_never_take_a_crds_conversion_from_each_other() {
    use k8s_openapi::api::events::v1::Event;
    let _turn = GADGET_CRD.lock().await;
    let a = Host::start_serving_webhooks(plane(), "contract-convert-a").await;
    let b = Host::start_serving_webhooks(plane(), "contract-convert-b").await;
    let (first, second) = (format!("{}-converter", a.ns), format!("{}-converter", b.ns));
    a.cluster_reconciler(&first, converter_spec().await).await;
    let holder = format!("c.{first}");
    eventually("the CRD's conversion pointed at the first plugin", WAIT, || async {
        (gadget_conversion(&a.client).await? == holder).then_some(())
    })
    .await;

    b.cluster_reconciler(&second, converter_spec().await).await;
    let events: Api<Event> = Api::namespaced(b.client.clone(), "default");
    let refusal = eventually("the second plugin refused the CRD's conversion", WAIT, || async {
        let now = gadget_conversion(&a.client).await;
        assert_eq!(now.as_deref(), Some(holder.as_str()), "the second replica took the CRD's conversion");
        events.list(&Default::default()).await.ok()?.items.into_iter().find_map(|e| {
            (e.regarding.as_ref()?.name.as_deref() == Some(second.as_str())
                && e.reason.as_deref() == Some("ConversionRefused"))
            .then(|| e.note.unwrap_or_default())
        })
    })
    .await;
    assert!(refusal.contains(&format!("converted by plugin {holder}")), "{refusal}");

    // The refused plugin goes: the holder's webhook stays.
    Api::<ClusterReconciler>::all(b.client.clone()).delete(&second, &Default::default()).await.unwrap();
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = gadget_conversion(&a.client).await;
        assert_eq!(now.as_deref(), Some(holder.as_str()), "the refused plugin's clean-up took the holder's webhook");
    }

    Api::<ClusterReconciler>::all(a.client.clone()).delete(&first, &Default::default()).await.unwrap();
    eventually("the CRD's conversion given back", WAIT, || async {
        gadget_conversion(&a.client).await.is_none().then_some(())
    })
    .await;
    a.stop().await;
    b.stop().await;

    // A host whose operator does not allow the CRD never points it.
    let c = Host::start_serving_webhooks_with(plane(), "contract-convert-c", Default::default()).await;
    let third = format!("{}-converter", c.ns);
    c.cluster_reconciler(&third, converter_spec().await).await;
    let refusal = eventually("the plugin refused a CRD the host does not allow", WAIT, || async {
        events.list(&Default::default()).await.ok()?.items.into_iter().find_map(|e| {
            (e.regarding.as_ref()?.name.as_deref() == Some(third.as_str())
                && e.reason.as_deref() == Some("ConversionRefused"))
            .then(|| e.note.unwrap_or_default())
        })
    })
    .await;
    assert!(refusal.contains("--conversion-allow gadgets.example.operon.dev"), "{refusal}");
    assert_eq!(gadget_conversion(&c.client).await, None, "pointed without the operator's leave");
    Api::<ClusterReconciler>::all(c.client.clone()).delete(&third, &Default::default()).await.unwrap();
    c.stop().await;
}

/// A ClusterReconciler spec of a guest served over HTTP on loopback.
async fn served(guest_name: &str, grants: Value) -> Value {
    let bytes = guest(guest_name);
    let url = serve::serve_module(bytes.clone()).await;
    let sha = operon::runtime::digest(&bytes).trim_start_matches("sha256:").to_string();
    json!({"module": {"url": {"href": url, "sha256": sha}}, "grants": grants})
}

/// The `namespace/name` of every related object a Survey's guest was
/// handed, once it reconciled.
async fn surveyed(client: &kube::Client, name: &str) -> Option<Vec<String>> {
    use kube::api::{ApiResource, GroupVersionKind};
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Survey"));
    let survey = Api::<DynamicObject>::all_with(client.clone(), &ar).get_opt(name).await.ok()??;
    let related = survey.data["status"]["related"].as_array()?;
    Some(related.iter().filter_map(|r| r.as_str().map(str::to_string)).collect())
}

async fn survey(client: &kube::Client, name: &str, spec: Value) {
    use kube::api::{ApiResource, GroupVersionKind};
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Survey"));
    let s: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1",
        "kind": "Survey", "metadata": {"name": name}, "spec": spec}))
    .unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&s))
        .await
        .unwrap();
}

async fn labelled_config_map(client: &kube::Client, ns: &str, name: &str, labels: Value, data: &str) {
    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"v": data}}))
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&cm)).await.unwrap();
}

/// What a guest is handed through its watches is what it may read: a
/// cluster-scoped parent's selector and reference reach only the
/// ClusterReconciler's granted namespaces, never the others'.
#[tokio::test]
async fn a_cluster_scoped_parents_watches_stay_within_the_granted_namespaces() {
    let host = Host::start_on(plane(), "contract-reach", false).await;
    let other = operon_envtest::create_namespace(&host.client, "contract-reach-other").await.unwrap();
    let label = json!({"survey": host.ns});
    labelled_config_map(&host.client, &host.ns, "granted", label.clone(), "a").await;
    labelled_config_map(&host.client, &other, "not-granted", label.clone(), "password").await;
    let grants = json!({"for": [{"group": "example.operon.dev", "kind": "Survey"}],
        "reads": [{"group": "", "kind": "ConfigMap"}], "namespaces": [host.ns], "clusterScoped": true});
    let name = format!("{}-surveyor", host.ns);
    host.cluster_reconciler(&name, served("surveyor", grants).await).await;
    let parent = format!("{}-everything", host.ns);
    survey(
        &host.client,
        &parent,
        json!({"selector": {"matchLabels": label}, "configRef": format!("{other}/not-granted")}),
    )
    .await;
    let related = eventually("the Survey reconciled", WAIT, || surveyed(&host.client, &parent)).await;
    assert_eq!(related, vec![format!("{}/granted", host.ns)], "handed objects of a namespace it was not granted");
    Api::<ClusterReconciler>::all(host.client.clone()).delete(&name, &Default::default()).await.unwrap();
    host.stop().await;
}

/// A namespaced parent's reference stays in its namespace unless the
/// ClusterReconciler's grants let references cross between its
/// namespaces: a parent's author must not have the plugin read another
/// namespace's objects for them.
#[tokio::test]
async fn a_reference_crosses_namespaces_only_where_the_grants_allow() {
    let host = Host::start_on(plane(), "contract-cross", false).await;
    let other = operon_envtest::create_namespace(&host.client, "contract-cross-other").await.unwrap();
    labelled_config_map(&host.client, &other, "shared-settings", json!({}), "b").await;
    labelled_config_map(&host.client, &host.ns, "own-settings", json!({}), "a").await;
    let mut grants = grants();
    grants["namespaces"] = json!([host.ns, other]);
    grants["reads"] = json!([{"group": "", "kind": "ConfigMap"}]);
    let name = format!("{}-clockwork", host.ns);
    let mut spec = served("clockwork", grants.clone()).await;
    spec["selector"] = json!({"matchLabels": {"contract": "v2"}});
    host.cluster_reconciler(&name, spec.clone()).await;
    thing(&host, "across", json!({"configRef": format!("{other}/shared-settings")})).await;
    thing(&host, "within", json!({"configRef": "own-settings"})).await;
    let related = |n: &'static str| {
        let host = &host;
        async move {
            let s = status(host, n).await?;
            (s["count"].as_u64()? > 0).then(|| s["related"].clone())
        }
    };
    assert_eq!(eventually("within reconciled", WAIT, || related("within")).await, json!(["own-settings"]));
    assert_eq!(
        eventually("across reconciled", WAIT, || related("across")).await,
        json!([]),
        "a reference crossed into another namespace without the grant"
    );
    // The grant opts in.
    spec["grants"]["crossNamespaceReferences"] = json!(true);
    host.cluster_reconciler(&name, spec).await;
    eventually("across handed the other namespace's object", WAIT, || async {
        (related("across").await? == json!(["shared-settings"])).then_some(())
    })
    .await;
    Api::<ClusterReconciler>::all(host.client.clone()).delete(&name, &Default::default()).await.unwrap();
    host.stop().await;
}

/// The related objects of one request are bounded like the guest's reads:
/// past the bound the guest is not called, and the parent says why.
#[tokio::test]
async fn related_objects_past_the_read_budget_fail_the_reconcile_with_a_reason() {
    use k8s_openapi::api::events::v1::Event;
    let pipeline = operon::pipeline::Config {
        controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
        max_related_bytes: 8 << 10,
        // The module is served on loopback, which its operator opened.
        egress_allowed: operon::egress::grants::Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap(),
        ..Default::default()
    };
    let host = Host::start_configured(plane(), "contract-bound", false, pipeline).await;
    let label = json!({"bound": host.ns});
    for i in 0..4 {
        labelled_config_map(&host.client, &host.ns, &format!("big-{i}"), label.clone(), &"x".repeat(3000)).await;
    }
    let grants = json!({"for": [{"group": "example.operon.dev", "kind": "Survey"}],
        "reads": [{"group": "", "kind": "ConfigMap"}], "namespaces": [host.ns], "clusterScoped": true});
    let name = format!("{}-surveyor", host.ns);
    host.cluster_reconciler(&name, served("surveyor", grants).await).await;
    let parent = format!("{}-big", host.ns);
    survey(&host.client, &parent, json!({"selector": {"matchLabels": label}})).await;
    let events: Api<Event> = Api::namespaced(host.client.clone(), "default");
    let note = eventually("a RelatedTooLarge event on the Survey", WAIT, || async {
        events.list(&Default::default()).await.ok()?.items.into_iter().find_map(|e| {
            (e.regarding.as_ref()?.name.as_deref() == Some(parent.as_str())
                && e.reason.as_deref() == Some("RelatedTooLarge"))
            .then(|| e.note.unwrap_or_default())
        })
    })
    .await;
    assert!(note.contains("more than 8192 bytes") && note.contains("narrow"), "{note}");
    assert_eq!(surveyed(&host.client, &parent).await, None, "the guest was called with a truncated request");
    Api::<ClusterReconciler>::all(host.client.clone()).delete(&name, &Default::default()).await.unwrap();
    host.stop().await;
}
