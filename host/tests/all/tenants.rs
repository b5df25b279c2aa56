//! Tenants held to their rights, against a real API server: what a hostile
//! plugin author (someone who may create Reconcilers in one namespace) tries
//! from inside a plugin — reading beyond the namespace, reconciling the
//! host's own kinds, rewriting another plugin's code, claiming another
//! controller's parents, planting children in another namespace — is
//! refused, visibly, and the neighbours keep running.
//!
//! The `intruder` guest does the trying (see `guests/intruder.rs`). The
//! plane runs no garbage collector, so what the host does with a forged
//! child is what the test sees.

use crate::common;
use crate::common::plugins;
use crate::common::serve;

use common::{eventually, guest, thing_crd};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use operon::reconciler;
use plugins::{Host, config_map_module, stamp_grants};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("tenants", || {
        use kube::CustomResourceExt;
        let crds: [CustomResourceDefinition; 2] =
            [reconciler::crd::Reconciler::crd(), reconciler::crd::ClusterReconciler::crd()];
        crds.into_iter().fold(operon_envtest::Options::default().crd(thing_crd()), |o, crd| o.crd(crd))
    })
}

/// What the intruder guest may be granted: Things, ConfigMaps, reading
/// Namespaces.
fn intruder_grants(adopt: bool) -> Value {
    json!({
        "for": [{"group": "example.operon.dev", "kind": "Thing"}],
        "owns": [{"group": "", "kind": "ConfigMap"}, {"group": "", "kind": "Secret"}],
        "reads": [{"group": "", "kind": "Namespace"}],
        "adopt": adopt,
    })
}

/// A Thing with `spec` as it is.
async fn thing_with(host: &Host, ns: &str, name: &str, spec: Value) {
    let t: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": name, "namespace": ns}, "spec": spec
    }))
    .unwrap();
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(host.client.clone(), ns, &thing_resource());
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&t)).await.unwrap();
}

fn thing_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing"))
}

/// A Thing's status, once it has one whose `value` is `value`.
async fn status_for(host: &Host, ns: &str, name: &str, value: Value) -> Value {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(host.client.clone(), ns, &thing_resource());
    eventually(&format!("{ns}/{name} reconciled with value {value}"), WAIT, || async {
        let t = api.get_opt(name).await.ok()??;
        let status = t.data.get("status")?.clone();
        (status.get("value") == Some(&value)).then_some(status)
    })
    .await
}

/// A ClusterReconciler (named after the test's namespace) for this host,
/// its module served over HTTP.
async fn cluster_reconciler(host: &Host, name: &str, module: &[u8], grants: Value) -> String {
    let href = serve::serve_module(module.to_vec()).await;
    let sha = reconciler::source::digest(module).trim_start_matches("sha256:").to_string();
    let name = format!("{}-{name}", host.ns);
    let r: reconciler::crd::ClusterReconciler = serde_json::from_value(json!({
        "apiVersion": "operon.dev/v1alpha1", "kind": "ClusterReconciler",
        "metadata": {"name": name, "labels": {"operon.dev/test": host.label}},
        "spec": {"module": {"url": {"href": href, "sha256": sha}}, "grants": grants}
    }))
    .unwrap();
    let api: Api<reconciler::crd::ClusterReconciler> = Api::all(host.client.clone());
    api.patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(&r)).await.unwrap();
    name
}

async fn cluster_ready(host: &Host, name: &str) {
    let api: Api<reconciler::crd::ClusterReconciler> = Api::all(host.client.clone());
    eventually(&format!("ClusterReconciler {name} Ready"), WAIT, || async {
        let r = api.get_opt(name).await.ok()??;
        r.status?.conditions.into_iter().find(|c| c.type_ == "Ready" && c.status == "True").map(drop)
    })
    .await;
}

#[tokio::test]
async fn a_namespaced_reconciler_reads_nothing_cluster_scoped_whatever_it_declares() {
    let host = Host::start_on(plane(), "ten-reads", false).await;
    host.module_config_map("intruder", &guest("intruder")).await;
    host.reconciler("intruder", json!({"module": config_map_module("intruder"), "grants": intruder_grants(false)}))
        .await;
    let read_namespaces =
        json!({"mode": "read", "read": {"group": "", "version": "v1", "kind": "Namespace"}, "value": 1});
    thing_with(&host, &host.ns, "snoop", read_namespaces).await;
    let status = status_for(&host, &host.ns, "snoop", json!(1)).await;
    assert_eq!(status.get("read"), None, "a namespaced plugin listed the cluster's Namespaces: {status}");
    let error = status["readError"].as_str().unwrap_or_default();
    assert!(error.contains("cluster-scoped") && error.contains("ClusterReconciler"), "{status}");
    host.stop().await;
}

#[tokio::test]
async fn the_hosts_own_kinds_are_never_reconciled_by_a_plugin() {
    let host = Host::start_on(plane(), "ten-for", false).await;
    host.module_config_map("usurper", &guest("intruder-for")).await;
    let grants = json!({"for": [{"group": "operon.dev", "kind": "*"}], "owns": [{"group": "", "kind": "ConfigMap"}],
        "reads": [{"group": "", "kind": "Namespace"}]});
    host.reconciler("usurper", json!({"module": config_map_module("usurper"), "grants": grants})).await;
    let refused = eventually("usurper refused", WAIT, || async {
        host.condition("usurper", "Ready").await.filter(|c| c.1 != "Loading")
    })
    .await;
    assert_eq!((refused.0.as_str(), refused.1.as_str()), ("False", "Forbidden"), "{refused:?}");
    assert!(refused.2.contains("which no plugin may reconcile"), "{refused:?}");
    // Nothing of it touched a Reconciler: its own status is the host's.
    let me = host.reconcilers().get("usurper").await.unwrap();
    assert!(me.metadata.finalizers.unwrap_or_default().iter().all(|f| f.starts_with("operon.dev/")));
    host.stop().await;
}

#[tokio::test]
async fn a_plugin_cannot_adopt_or_rewrite_another_plugins_module() {
    let host = Host::start_on(plane(), "ten-module", false).await;
    let (v1, evil) = (guest("stamp-v1"), guest("stamp-v2"));
    host.module_config_map("victim-module", &v1).await;
    // Disjoint selectors: two controllers of one kind may not share a parent.
    let victims = json!({"matchLabels": {"tenant": "victim"}});
    host.reconciler(
        "victim",
        json!({"module": config_map_module("victim-module"), "grants": stamp_grants(), "selector": victims}),
    )
    .await;
    host.module_config_map("intruder", &guest("intruder")).await;
    let others = json!({"matchExpressions": [{"key": "tenant", "operator": "DoesNotExist"}]});
    host.reconciler(
        "attacker",
        json!({"module": config_map_module("intruder"), "grants": intruder_grants(true), "selector": others}),
    )
    .await;
    let v1_digest = reconciler::source::digest(&v1);
    eventually("victim serves v1", WAIT, || async {
        let r = host.reconcilers().get("victim").await.ok()?;
        (r.status?.digest.as_deref() == Some(v1_digest.as_str())).then_some(())
    })
    .await;

    // The attacker's parent asks for the victim's module ConfigMap, with its own code in it.
    use base64::Engine as _;
    let forged = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "victim-module"},
        "binaryData": {"module.wasm": base64::engine::general_purpose::STANDARD.encode(&evil)}});
    thing_with(&host, &host.ns, "takeover", json!({"mode": "echo", "desired": [forged], "value": 1})).await;
    let refusal = eventually("the takeover refused", WAIT, || async {
        host.events("takeover").await.into_iter().find(|(_, note)| note.contains("victim-module"))
    })
    .await;
    assert!(refusal.1.contains("holds the module of Reconciler"), "{refusal:?}");

    // The victim's module is untouched and unowned; it still runs its own code.
    let cms: Api<ConfigMap> = Api::namespaced(host.client.clone(), &host.ns);
    let cm = cms.get("victim-module").await.unwrap();
    assert!(cm.metadata.owner_references.unwrap_or_default().is_empty(), "the module ConfigMap was adopted");
    assert_eq!(cm.binary_data.unwrap()["module.wasm"], ByteString(v1.clone()));
    let r = host.reconcilers().get("victim").await.unwrap();
    assert_eq!(r.status.unwrap().digest.as_deref(), Some(v1_digest.as_str()));
    host.stop().await;
}

/// A Secret another Reconciler names as a credential is the host's to
/// send out for that plugin: no plugin adopts or rewrites it, even with
/// `adopt` and the Secret kind granted.
#[tokio::test]
async fn a_plugin_cannot_adopt_or_rewrite_another_plugins_credential() {
    use k8s_openapi::api::core::v1::Secret;
    let host = Host::start_on(plane(), "ten-credential", false).await;
    let secrets: Api<Secret> = Api::namespaced(host.client.clone(), &host.ns);
    let original: Secret = serde_json::from_value(json!({"metadata": {"name": "victim-api"},
        "stringData": {"key": "the-victims-key"}}))
    .unwrap();
    secrets.create(&PostParams::default(), &original).await.unwrap();
    host.module_config_map("victim-module", &guest("stamp-v1")).await;
    let victims = json!({"matchLabels": {"tenant": "victim"}});
    host.reconciler(
        "victim",
        json!({"module": config_map_module("victim-module"), "grants": stamp_grants(), "selector": victims,
            "serviceAccountName": "victim",
            "credentials": [{"name": "api", "secretRef": {"name": "victim-api", "key": "key"}, "use": "bearer",
                "hosts": ["api.example.com"]}]}),
    )
    .await;
    host.module_config_map("intruder", &guest("intruder")).await;
    let others = json!({"matchExpressions": [{"key": "tenant", "operator": "DoesNotExist"}]});
    host.reconciler(
        "attacker",
        json!({"module": config_map_module("intruder"), "grants": intruder_grants(true), "selector": others}),
    )
    .await;
    let forged = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "victim-api"},
        "stringData": {"key": "the-attackers-key"}});
    thing_with(&host, &host.ns, "swap", json!({"mode": "echo", "desired": [forged], "value": 1})).await;
    let refusal = eventually("the rewrite refused", WAIT, || async {
        host.events("swap").await.into_iter().find(|(_, note)| note.contains("victim-api"))
    })
    .await;
    assert!(refusal.1.contains("holds credential \"api\" of Reconciler"), "{refusal:?}");
    let kept = secrets.get("victim-api").await.unwrap();
    assert!(kept.metadata.owner_references.unwrap_or_default().is_empty(), "the credential's Secret was adopted");
    assert_eq!(kept.data.unwrap()["key"], ByteString(b"the-victims-key".to_vec()), "the credential was rewritten");
    host.stop().await;
}

/// A recording (`--record`) of a plugin that writes a Secret holds no
/// value of it, is readable by the host's user only, and lives in the
/// plugin's own directory: recordings become committed fixtures.
#[tokio::test]
async fn a_recording_holds_no_secret_a_plugin_wrote_or_read() {
    use std::os::unix::fs::PermissionsExt as _;
    let recordings = tempfile::tempdir().unwrap();
    let pipeline = operon::pipeline::Config {
        controller: operon::controller::Config { max_concurrent_reconciles: 4, ..Default::default() },
        record: Some(std::sync::Arc::new(operon::pipeline::record::Recorder::new(recordings.path().to_path_buf(), 1))),
        ..Default::default()
    };
    let host = Host::start_configured(plane(), "ten-record", false, pipeline).await;
    host.module_config_map("intruder", &guest("intruder")).await;
    host.reconciler("generator", json!({"module": config_map_module("intruder"), "grants": intruder_grants(false)}))
        .await;
    const PASSWORD: &str = "generated-password-0f9e8d";
    let generated = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-password"},
        "stringData": {"password": PASSWORD}});
    thing_with(&host, &host.ns, "db", json!({"mode": "echo", "desired": [generated], "value": 1})).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(host.client.clone(), &host.ns);
    eventually("the Secret written", WAIT, || async { secrets.get_opt("db-password").await.ok()? }).await;
    // Reconciled again: the Secret is now a child in the request too.
    thing_with(&host, &host.ns, "db", json!({"mode": "echo", "desired": [generated], "value": 2})).await;
    let dir = recordings.path().join(format!("{}_generator", host.ns));
    let files = eventually("recordings of both reconciles", WAIT, || async {
        let files: Vec<std::path::PathBuf> =
            std::fs::read_dir(&dir).ok()?.filter_map(|e| Some(e.ok()?.path())).collect();
        let with_child = files
            .iter()
            .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("db-password") && t.contains("children:")));
        (files.len() >= 4 && with_child).then_some(files)
    })
    .await;
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(PASSWORD);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(!text.contains(PASSWORD) && !text.contains(&encoded), "{} holds the password:\n{text}", f.display());
        assert_eq!(std::fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600, "{}", f.display());
    }
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    host.stop().await;
}

#[tokio::test]
async fn a_younger_reconciler_of_the_same_kind_waits_for_the_older_one() {
    let host = Host::start_on(plane(), "ten-overlap", false).await;
    host.module_config_map("first", &guest("stamp-v1")).await;
    host.module_config_map("second", &guest("stamp-v2")).await;
    host.reconciler("first", json!({"module": config_map_module("first"), "grants": stamp_grants()})).await;
    host.thing("a", json!(1)).await;
    eventually("stamped by the first", WAIT, || async { host.stamped("a").await.filter(|s| s.0 == "v1") }).await;

    host.reconciler("second", json!({"module": config_map_module("second"), "grants": stamp_grants()})).await;
    let waiting = eventually("second waits", WAIT, || async {
        host.condition("second", "Ready").await.filter(|c| c.1 == "Overlaps")
    })
    .await;
    assert_eq!(waiting.0, "False");
    assert!(waiting.2.contains(&format!("Reconciler {}/first", host.ns)), "{waiting:?}");
    // Changes keep being reconciled by the first alone.
    host.thing("a", json!(2)).await;
    eventually("value 2 stamped", WAIT, || async { host.stamped("a").await.filter(|s| s.1 == json!(2)) }).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(host.stamped("a").await.unwrap().0, "v1", "the second reconciled the first one's parent");
    assert!(host.condition("first", "Ready").await.is_some_and(|c| c.0 == "True"), "the older one never yields");

    // The first gone, the second starts by itself.
    host.reconcilers().delete("first", &DeleteParams::default()).await.unwrap();
    eventually("second takes over", WAIT, || async { host.stamped("a").await.filter(|s| s.0 == "v2") }).await;
    host.stop().await;
}

#[tokio::test]
async fn a_child_planted_in_another_namespace_is_not_handed_to_the_parents_controller() {
    let host = Host::start_on(plane(), "ten-forged", false).await;
    let other = operon_envtest::create_namespace(&host.client, "ten-forged-b").await.unwrap();
    let mut grants = intruder_grants(false);
    grants["namespaces"] = json!([host.ns, other]);
    let name = cluster_reconciler(&host, "watcher", &guest("intruder"), grants).await;
    cluster_ready(&host, &name).await;
    thing_with(&host, &host.ns, "t", json!({"mode": "children", "value": 1})).await;
    status_for(&host, &host.ns, "t", json!(1)).await;

    // A tenant of the other namespace plants a ConfigMap claiming the Thing as its controller.
    let things: Api<kube::api::DynamicObject> = Api::namespaced_with(host.client.clone(), &host.ns, &thing_resource());
    let uid = things.get("t").await.unwrap().metadata.uid.unwrap();
    let planted: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "planted", "ownerReferences": [
        {"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "name": "t", "uid": uid, "controller": true}
    ]}, "data": {"payload": "from the other namespace"}}))
    .unwrap();
    let theirs: Api<ConfigMap> = Api::namespaced(host.client.clone(), &other);
    theirs.create(&PostParams::default(), &planted).await.unwrap();
    thing_with(&host, &host.ns, "t", json!({"mode": "children", "value": 2})).await;
    let status = status_for(&host, &host.ns, "t", json!(2)).await;
    assert_eq!(status["children"], json!([]), "a ConfigMap of another namespace was handed over as a child");
    assert!(theirs.get_opt("planted").await.unwrap().is_some(), "the controller pruned another namespace's object");
    host.stop().await;
}

/// Not a defect (kept as the test that shows it): a watched object mapped
/// by annotation to a parent outside a ClusterReconciler's namespaces
/// reconciles nothing there.
#[tokio::test]
async fn an_annotation_mapping_never_reaches_outside_the_grants() {
    let host = Host::start_on(plane(), "ten-mapping", false).await;
    let outside = operon_envtest::create_namespace(&host.client, "ten-mapping-out").await.unwrap();
    let mut grants = intruder_grants(false);
    grants["namespaces"] = json!([host.ns]);
    let name = cluster_reconciler(&host, "mapper", &guest("intruder"), grants).await;
    cluster_ready(&host, &name).await;
    thing_with(&host, &outside, "x", json!({"mode": "children", "value": 1})).await;
    thing_with(&host, &host.ns, "y", json!({"mode": "children", "value": 1})).await;
    status_for(&host, &host.ns, "y", json!(1)).await;
    let cms: Api<ConfigMap> = Api::namespaced(host.client.clone(), &host.ns);
    for (cm, parent) in [("to-outside", format!("{outside}/x")), ("to-inside", format!("{}/y", host.ns))] {
        let object: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": cm, "annotations": {"intruder/parent": parent}}, "data": {"n": "1"}}),
        )
        .unwrap();
        cms.create(&PostParams::default(), &object).await.unwrap();
    }
    // The inside parent heard of its ConfigMap (a reconcile after it)...
    thing_with(&host, &host.ns, "y", json!({"mode": "children", "value": 2})).await;
    status_for(&host, &host.ns, "y", json!(2)).await;
    // ...and the outside one was never reconciled.
    let theirs: Api<kube::api::DynamicObject> = Api::namespaced_with(host.client.clone(), &outside, &thing_resource());
    let x = theirs.get("x").await.unwrap();
    assert_eq!(x.data.get("status"), None, "a parent outside the grants was reconciled: {x:?}");
    host.stop().await;
}

/// The adoption race: the cache has not seen an object someone created a
/// moment ago, so the ownership check passes on the cache; the apply must
/// not then take the object over.
#[tokio::test]
async fn an_object_the_cache_has_not_seen_yet_is_not_adopted_by_the_apply() {
    use operon::apply::{self, Applier, Namespaces, Policy};
    use operon::cache::CachedObject;
    use operon::contract::{Gvk, Outcome};
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "ten-race").await.unwrap();
    let things: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), &ns, &thing_resource());
    let parent: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing", "metadata": {"name": "p"}, "spec": {}
    }))
    .unwrap();
    let parent = things.create(&PostParams::default(), &parent).await.unwrap();
    let parent = CachedObject::from_value(serde_json::to_value(&parent).unwrap()).unwrap();
    // Someone else's ConfigMap, created after the cache looked.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let theirs: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "taken"}, "data": {"owner": "someone else"}})).unwrap();
    cms.create(&PostParams::default(), &theirs).await.unwrap();

    let outcome = Outcome {
        desired: vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken"},
            "data": {"owner": "the plugin"}})],
        status: None,
        events: vec![],
        requeue_after: None,
        finalized: false,
        ..Outcome::default()
    };
    let policy = Policy {
        controller: "race".into(),
        owns: vec![Gvk::new("", "v1", "ConfigMap")],
        namespaces: Namespaces::ParentOnly,
        cluster_scoped: false,
        max_desired: 10,
        max_events: 10,
    };
    let children = apply::validate(&policy, &parent, &outcome, |_| true).unwrap();
    apply::check_ownership(&parent, &children, false, |_, _| None).expect("the cache saw nothing");
    let applier = Applier::new(client.clone(), client.clone(), "race", None);
    let in_place = |_: &Gvk| operon::contract::UpdateStrategy::InPlace;
    let refused =
        applier.apply(&parent, &children, &[], &outcome, false, in_place, &operon::leader::Fence::open()).await;
    let err = refused.expect_err("the apply took over an object it may not adopt").to_string();
    assert!(err.contains("without a controller owner") && err.contains("spec.grants.adopt"), "{err}");
    let cm = cms.get("taken").await.unwrap();
    assert_eq!(cm.data.unwrap()["owner"], "someone else");
    assert!(cm.metadata.owner_references.unwrap_or_default().is_empty());

    // With the adoption grant, the same apply adopts it.
    applier.apply(&parent, &children, &[], &outcome, true, in_place, &operon::leader::Fence::open()).await.unwrap();
    let cm = cms.get("taken").await.unwrap();
    assert_eq!(cm.data.unwrap()["owner"], "the plugin");
    assert_eq!(cm.metadata.owner_references.unwrap()[0].uid, parent.uid().unwrap());
}
