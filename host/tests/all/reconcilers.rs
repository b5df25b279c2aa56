//! Reconcilers as resources, against a real API server: plugins loaded from
//! ConfigMaps and URLs, refused with a reason, swapped under load, rolled
//! back, shadowed, scoped to their namespace, bounded by their
//! ServiceAccount's RBAC and by adoption rules, and removed cleanly; the
//! host's `Synced` condition on parents whose reconciles fail.
//!
//! Each test runs its own in-process manager with the Reconciler controller
//! (`Plugins`), watching its own namespace.

use crate::common;
use crate::common::plugins;
use crate::common::serve;

use common::{eventually, guest, thing_crd, webapp_crd};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use operon::reconciler;
use operon::runtime;
use plugins::{Host, config_map_module, stamp_grants};
use serde_json::{Value, json};
use serve::serve_module;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn reconciler_crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![reconciler::crd::Reconciler::crd(), reconciler::crd::ClusterReconciler::crd()]
}

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("reconcilers", || {
        let mut o = operon_envtest::Options::with_controller_manager().crd(thing_crd()).crd(webapp_crd());
        for crd in reconciler_crds() {
            o = o.crd(crd);
        }
        o
    })
}

impl Host {
    async fn start(prefix: &str) -> Host {
        Host::start_on(plane(), prefix, false).await
    }

    /// `allow_module_paths`: accept `spec.module.path` (as `operon dev` does).
    async fn start_with(prefix: &str, allow_module_paths: bool) -> Host {
        Host::start_on(plane(), prefix, allow_module_paths).await
    }
}

fn digest(bytes: &[u8]) -> String {
    reconciler::source::digest(bytes)
}

#[tokio::test]
async fn a_reconciler_from_a_config_map_swaps_under_load_without_failures() {
    let host = Host::start("rec-swap").await;
    let (v1, v2) = (guest("stamp-v1"), guest("stamp-v2"));
    // v2 is compiled once beforehand: the swap takes it from the precompiled cache.
    host.runtime.load(&v2, runtime::Limits::default()).unwrap();
    host.module_config_map("stamp", &v1).await;
    host.reconciler("stamp", json!({"module": config_map_module("stamp"), "grants": stamp_grants()})).await;
    let names: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
    for n in &names {
        host.thing(n, json!(0)).await;
    }
    eventually("every Thing stamped by v1", WAIT, || async {
        for n in &names {
            if host.stamped(n).await?.0 != "v1" {
                return None;
            }
        }
        Some(())
    })
    .await;
    let ready = eventually("Ready", WAIT, || async { host.condition("stamp", "Ready").await }).await;
    assert_eq!(ready.0, "True", "{ready:?}");

    // A steady stream of changes: each Thing's value goes up, many times a second.
    let writer = {
        let (things, names) = (host.things(), names.clone());
        tokio::spawn(async move {
            let mut value = 0;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(6) {
                value += 1;
                for n in &names {
                    let patch = json!({"spec": {"value": value}});
                    let _ = things.patch(n, &PatchParams::default(), &Patch::Merge(&patch)).await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            value
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let swapped_at = Instant::now();
    host.module_config_map("stamp", &v2).await;
    let v2_digest = digest(&v2);
    eventually("v2 active", WAIT, || async {
        let r = host.reconcilers().get("stamp").await.ok()?;
        (r.status?.digest.as_deref() == Some(v2_digest.as_str())).then_some(())
    })
    .await;
    eprintln!("swap: new version active {:?} after the ConfigMap changed (precompiled)", swapped_at.elapsed());
    let last = writer.await.unwrap();
    eventually("every Thing converged to v2's output for the last value", WAIT, || async {
        for n in &names {
            let (version, value) = host.stamped(n).await?;
            if version != "v2" || value != json!(last) {
                return None;
            }
        }
        Some(())
    })
    .await;
    let c = host.manager.controller(&format!("{}/stamp", host.ns)).unwrap();
    let stats = c.stats();
    assert_eq!(stats.errors, 0, "no reconcile failed across the swap: {stats:?}");
    assert!(stats.reconciles >= 50, "{stats:?}");
    host.stop().await;
}

/// `spec.module.path`, what `operon dev` loads: refused by a host that does
/// not allow host files; where allowed, a file replaced the way `operon
/// dev`'s watcher replaces it (written beside, renamed over) is swapped in.
#[tokio::test]
async fn a_module_file_is_refused_by_default_and_swapped_when_replaced_where_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stamp.wasm");
    std::fs::write(&file, guest("stamp-v1")).unwrap();
    let module = json!({"path": file.to_str().unwrap()});

    let host = Host::start("rec-path-refused").await;
    host.reconciler("stamp", json!({"module": module, "grants": stamp_grants()})).await;
    let refused = eventually("path refused", WAIT, || async {
        host.condition("stamp", "Ready").await.filter(|c| c.0 == "False" && c.1 != "Loading")
    })
    .await;
    assert!(refused.2.contains("--allow-module-paths"), "{refused:?}");
    host.stop().await;

    let host = Host::start_with("rec-path", true).await;
    host.reconciler("stamp", json!({"module": module, "grants": stamp_grants()})).await;
    host.thing("a", json!(1)).await;
    eventually("stamped by v1", WAIT, || async { host.stamped("a").await.filter(|s| s.0 == "v1") }).await;

    let v2 = guest("stamp-v2");
    let staged = dir.path().join("stamp.next.wasm");
    std::fs::write(&staged, &v2).unwrap();
    std::fs::rename(&staged, &file).unwrap();
    let v2_digest = digest(&v2);
    eventually("v2 active", WAIT, || async {
        let r = host.reconcilers().get("stamp").await.ok()?;
        (r.status?.digest.as_deref() == Some(v2_digest.as_str())).then_some(())
    })
    .await;
    host.thing("a", json!(2)).await;
    let stamped = eventually("stamped by v2", WAIT, || async {
        host.stamped("a").await.filter(|s| s.0 == "v2" && s.1 == json!(2))
    })
    .await;
    assert_eq!(stamped.0, "v2");
    host.stop().await;
}

#[tokio::test]
async fn bad_modules_are_refused_with_the_reason_and_the_old_version_keeps_serving() {
    let host = Host::start("rec-bad").await;
    // No version yet: each bad source makes the Reconciler not Ready, with its reason.
    let cases: Vec<(&str, Value, &str)> = vec![
        ("garbage", config_map_module("garbage"), "InvalidModule"),
        ("old-major", config_map_module("old-major"), "WitVersionMismatch"),
        ("too-much", config_map_module("too-much"), "Forbidden"),
        (
            "nowhere",
            json!({"url": {"href": "http://127.0.0.1:9/module.wasm", "sha256": "0".repeat(64)}}),
            "SourceUnavailable",
        ),
    ];
    host.module_config_map("garbage", b"this is not wasm").await;
    host.module_config_map("old-major", &guest("misbehave-old-major")).await;
    // echo owns Deployments, Services and ConfigMaps; it is granted ConfigMaps only.
    host.module_config_map("too-much", &guest("echo")).await;
    for (name, module, _) in &cases {
        host.reconciler(name, json!({"module": module, "grants": stamp_grants()})).await;
    }
    for (name, _, reason) in &cases {
        let (status, got, message) = eventually(&format!("{name}: Ready=False"), WAIT, || async {
            host.condition(name, "Ready").await.filter(|c| c.0 == "False" && c.1 != "Loading")
        })
        .await;
        assert_eq!((status.as_str(), got.as_str()), ("False", *reason), "{name}: {message}");
        eprintln!("{name}: {got}: {message}");
    }
    let (_, _, forbidden) = host.condition("too-much", "Ready").await.unwrap();
    assert!(forbidden.contains("owns apps/v1 Deployment") && forbidden.contains("owns v1 Service"), "{forbidden}");
    assert!(host.manager.controller(&format!("{}/too-much", host.ns)).is_none(), "no controller starts");

    // With a good version running, a bad one leaves it serving: Degraded, still Ready.
    host.module_config_map("good", &guest("stamp-v1")).await;
    host.reconciler("good", json!({"module": config_map_module("good"), "grants": stamp_grants()})).await;
    host.thing("a", json!(1)).await;
    eventually("v1 serving", WAIT, || async { host.stamped("a").await.filter(|s| s.0 == "v1") }).await;
    host.module_config_map("good", b"\0asm\x0d\0\x01\0garbage").await;
    let degraded =
        eventually("Degraded", WAIT, || async { host.condition("good", "Degraded").await.filter(|c| c.0 == "True") })
            .await;
    assert_eq!(degraded.1, "InvalidModule", "{degraded:?}");
    assert_eq!(host.condition("good", "Ready").await.unwrap().0, "True", "the old version keeps serving");
    host.thing("a", json!(2)).await;
    eventually("v1 still reconciles", WAIT, || async { host.stamped("a").await.filter(|s| s.1 == json!(2)) }).await;
    let events = host.events("good").await;
    assert!(events.iter().any(|(r, _)| r == "InvalidModule"), "{events:?}");
    host.stop().await;
}

#[tokio::test]
async fn a_version_that_traps_is_rolled_back_by_itself() {
    let host = Host::start("rec-rollback").await;
    host.module_config_map("stamp", &guest("stamp-v1")).await;
    host.reconciler(
        "stamp",
        json!({"module": config_map_module("stamp"), "grants": stamp_grants(), "rollback": {"probationCalls": 10, "maxFailures": 2}}),
    )
    .await;
    for i in 0..5 {
        host.thing(&format!("t{i}"), json!(i)).await;
    }
    eventually("v1 serving", WAIT, || async { host.stamped("t0").await.filter(|s| s.0 == "v1") }).await;
    let v1 = digest(&guest("stamp-v1"));
    host.module_config_map("stamp", &guest("stamp-trap")).await;
    // Only once the broken version is active: changes that reached v1 before
    // the swap would be reconciled by it, and nothing would ever trap.
    let broken = digest(&guest("stamp-trap"));
    eventually("the broken version active", WAIT, || async {
        let r = host.reconcilers().get("stamp").await.ok()?;
        (r.status?.digest.as_deref() == Some(broken.as_str())).then_some(())
    })
    .await;
    // Changes reach the broken version, which traps; after three failures it goes.
    for i in 0..5 {
        host.thing(&format!("t{i}"), json!(100 + i)).await;
    }
    let degraded = eventually("RolledBack", WAIT, || async {
        host.condition("stamp", "Degraded").await.filter(|c| c.1 == "RolledBack")
    })
    .await;
    assert!(degraded.2.contains("rolled back"), "{degraded:?}");
    let r = host.reconcilers().get("stamp").await.unwrap();
    assert_eq!(r.status.unwrap().digest.as_deref(), Some(v1.as_str()), "v1 is active again");
    eventually("the changes reconciled by v1", WAIT, || async {
        for i in 0..5 {
            let (version, value) = host.stamped(&format!("t{i}")).await?;
            if version != "v1" || value != json!(100 + i) {
                return None;
            }
        }
        Some(())
    })
    .await;
    // The guest's panic message travels with the trap: in the rollback's
    // event and reason, and in the events of the parents it failed on.
    let said = "this version traps on every reconcile";
    let events = host.events("stamp").await;
    assert!(events.iter().any(|(r, note)| r == "RolledBack" && note.contains(said)), "{events:?}");
    assert!(degraded.2.contains(said), "{degraded:?}");
    let mut parents = Vec::new();
    for i in 0..5 {
        parents.extend(host.events(&format!("t{i}")).await);
    }
    assert!(
        parents
            .iter()
            .any(|(r, note)| r == "ReconcileError" && note.contains("trapped: panicked at") && note.contains(said)),
        "{parents:?}"
    );
    let swaps = host
        .manager
        .metrics()
        .module_swaps_total
        .with_label_values(&[&format!("{}/stamp", host.ns), "rolled_back"])
        .get();
    assert_eq!(swaps, 1);
    host.stop().await;
}

#[tokio::test]
async fn a_guest_past_its_cpu_limit_waits_and_the_reconciler_says_so() {
    let host = Host::start("rec-cpu").await;
    // The schema refuses what is not a CPU quantity.
    let bad: reconciler::crd::Reconciler = serde_json::from_value(json!({
        "apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler", "metadata": {"name": "bad"},
        "spec": {"module": config_map_module("stamp"), "grants": stamp_grants(), "limits": {"cpu": "lots"}}
    }))
    .unwrap();
    let refused = host.reconcilers().create(&Default::default(), &bad).await.unwrap_err();
    assert!(refused.to_string().contains("spec.limits.cpu must look like 250m or 0.5"), "{refused}");

    host.module_config_map("stamp", &guest("stamp-v1")).await;
    // Whoever may write a Reconciler cannot lift the budget above the host's
    // ceiling (2 CPUs by default).
    host.reconciler(
        "greedy",
        json!({"module": config_map_module("stamp"), "grants": stamp_grants(), "limits": {"cpu": "8"}}),
    )
    .await;
    let refused = eventually("greedy refused", WAIT, || async {
        host.condition("greedy", "Ready").await.filter(|c| c.1 == "InvalidSpec")
    })
    .await;
    assert!(refused.2.contains("--max-guest-cpu"), "{refused:?}");
    host.reconcilers().delete("greedy", &Default::default()).await.unwrap();
    host.reconciler(
        "stamp",
        // A deadline far above one spin, however loaded the machine: this test
        // is about the CPU budget, not about guests stopped at their deadline.
        json!({"module": config_map_module("stamp"), "grants": stamp_grants(), "limits": {"cpu": "10m", "timeout": "30s"}}),
    )
    .await;
    // Each reconcile spins for tens of milliseconds: a hundredth of a CPU,
    // with the host's 2 s saved up, is spent within the first few dozen.
    for i in 0..40 {
        let t: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": format!("slow-{i}")}, "spec": {"value": i, "spin": 100_000_000u64}
        }))
        .unwrap();
        host.things()
            .patch(&format!("slow-{i}"), &PatchParams::apply("test").force(), &Patch::Apply(&t))
            .await
            .unwrap();
    }
    let degraded = eventually("CpuThrottled", WAIT, || async {
        host.condition("stamp", "Degraded").await.filter(|c| c.1 == "CpuThrottled")
    })
    .await;
    assert_eq!(degraded.0, "True");
    assert!(degraded.2.contains("CPU budget of 10m"), "{degraded:?}");
    let waited =
        host.manager.metrics().guest_throttled_seconds_total.with_label_values(&[&format!("{}/stamp", host.ns)]).get();
    assert!(waited > 0.0, "{waited}");
    // Late, not lost: the first ones (in the order the host took them) were
    // reconciled, the others wait their turn.
    eventually("a slow Thing reconciled", WAIT, || async {
        for i in 0..40 {
            if host.stamped(&format!("slow-{i}")).await.is_some() {
                return Some(());
            }
        }
        None
    })
    .await;
    host.stop().await;
}

#[tokio::test]
async fn a_shadow_candidate_reports_differences_and_writes_nothing() {
    let host = Host::start("rec-shadow").await;
    host.module_config_map("stamp", &guest("stamp-v1")).await;
    host.reconciler(
        "stamp",
        json!({"module": config_map_module("stamp"), "grants": stamp_grants(), "rollout": "shadow"}),
    )
    .await;
    host.thing("a", json!(1)).await;
    eventually("v1 serving", WAIT, || async { host.stamped("a").await.filter(|s| s.0 == "v1") }).await;

    // An identical candidate (other bytes, same behaviour): no difference.
    let mut same = guest("stamp-v1");
    wasm_encoder_custom_section(&mut same);
    host.module_config_map("stamp", &same).await;
    eventually("the identical candidate compared", WAIT, || async {
        host.thing("a", json!(rand_value())).await;
        let s = host.reconcilers().get("stamp").await.ok()?.status?.shadow?;
        (s.candidate_digest == digest(&same) && s.compared >= 2).then_some(s)
    })
    .await;
    let s = host.reconcilers().get("stamp").await.unwrap().status.unwrap().shadow.unwrap();
    assert_eq!(s.differing, 0, "identical versions report no difference: {s:?}");

    // A candidate that answers differently: counted and shown, never written.
    host.module_config_map("stamp", &guest("stamp-v2")).await;
    let s = eventually("differences counted", WAIT, || async {
        host.thing("a", json!(rand_value())).await;
        let s = host.reconcilers().get("stamp").await.ok()?.status?.shadow?;
        (s.candidate_digest == digest(&guest("stamp-v2")) && s.differing >= 1).then_some(s)
    })
    .await;
    assert!(s.compared >= s.differing);
    let events = host.events("stamp").await;
    let sample = events.iter().find(|(r, _)| r == "ShadowDiffers").map(|(_, n)| n.clone());
    assert!(sample.as_deref().is_some_and(|n| n.contains("v1") && n.contains("v2")), "{events:?}");
    assert_eq!(host.stamped("a").await.unwrap().0, "v1", "nothing of the candidate is applied");
    let cm: Api<ConfigMap> = Api::namespaced(host.client.clone(), &host.ns);
    assert_eq!(cm.get("a-stamp").await.unwrap().data.unwrap()["version"], "v1");

    // Promotion is a spec change.
    host.reconciler(
        "stamp",
        json!({"module": config_map_module("stamp"), "grants": stamp_grants(), "rollout": "immediate"}),
    )
    .await;
    host.thing("a", json!(rand_value())).await;
    eventually("v2 promoted", WAIT, || async { host.stamped("a").await.filter(|s| s.0 == "v2") }).await;
    host.stop().await;
}

#[tokio::test]
async fn reconcilers_in_two_namespaces_each_see_and_write_only_their_own() {
    let a = Host::start("rec-ns-a").await;
    let client = a.client.clone();
    let ns_b = operon_envtest::create_namespace(&client, "rec-ns-b").await.unwrap();
    let things = |ns: &str| -> Api<DynamicObject> {
        Api::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing")),
        )
    };
    let module = guest("stamp-v1");
    for ns in [a.ns.as_str(), ns_b.as_str()] {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some("stamp".into()), ..Default::default() },
            binary_data: Some([("module.wasm".to_string(), ByteString(module.clone()))].into()),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .patch("stamp", &PatchParams::apply("test").force(), &Patch::Apply(&cm))
            .await
            .unwrap();
        a.reconciler_in(ns, "stamp", json!({"module": config_map_module("stamp"), "grants": stamp_grants()})).await;
        let t: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": "t"}, "spec": {"value": ns}}))
            .unwrap();
        things(ns).create(&PostParams::default(), &t).await.unwrap();
    }
    // Same module, same kind, one watch per kind: each controller reconciles
    // its own namespace's Thing and writes its child there.
    for ns in [a.ns.as_str(), ns_b.as_str()] {
        eventually(&format!("the Thing in {ns} reconciled"), WAIT, || async {
            let t = things(ns).get("t").await.ok()?;
            (t.data.pointer("/status/value")? == &json!(ns)).then_some(())
        })
        .await;
        let cm = Api::<ConfigMap>::namespaced(client.clone(), ns).get("t-stamp").await.unwrap();
        assert_eq!(cm.data.unwrap()["value"], format!("\"{ns}\""));
        let owner = &cm.metadata.managed_fields.unwrap_or_default();
        let manager = format!("operon/{ns}/stamp");
        assert!(owner.iter().any(|m| m.manager.as_deref() == Some(manager.as_str())), "written by its own controller");
    }
    let names = a.manager.controller_names();
    assert!(names.contains(&format!("{}/stamp", a.ns)) && names.contains(&format!("{ns_b}/stamp")), "{names:?}");
    let informers = a.manager.cache().informers();
    let thing_watches = informers.iter().filter(|i| i.key().kind.kind == "Thing").count();
    assert_eq!(thing_watches, 1, "one watch per kind, shared by both controllers");
    a.stop().await;
}

#[tokio::test]
async fn a_service_account_without_rights_is_forbidden_until_granted() {
    let host = Host::start("rec-rbac").await;
    let sas: Api<ServiceAccount> = Api::namespaced(host.client.clone(), &host.ns);
    sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "plugin"}})).unwrap())
        .await
        .unwrap();
    host.module_config_map("stamp", &guest("stamp-v1")).await;
    host.reconciler(
        "stamp",
        json!({"module": config_map_module("stamp"), "grants": stamp_grants(), "serviceAccountName": "plugin"}),
    )
    .await;
    host.thing("a", json!(1)).await;
    let degraded = eventually("the API server's Forbidden in the status", WAIT, || async {
        host.condition("stamp", "Degraded").await.filter(|c| c.1 == "ApiForbidden")
    })
    .await;
    assert!(degraded.2.contains("forbidden") || degraded.2.contains("Forbidden"), "{degraded:?}");
    assert!(host.stamped("a").await.is_none(), "nothing written as the ServiceAccount");

    // Grant the role: the retries succeed, no restart.
    let roles: Api<Role> = Api::namespaced(host.client.clone(), &host.ns);
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "plugin"}, "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                {"apiGroups": ["example.operon.dev"], "resources": ["things", "things/status"], "verbs": ["get", "patch", "update"]}
            ]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(host.client.clone(), &host.ns);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "plugin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "plugin"},
                "subjects": [{"kind": "ServiceAccount", "name": "plugin", "namespace": host.ns}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    eventually("reconciled once granted", Duration::from_secs(120), || async { host.stamped("a").await }).await;
    let cm: Api<ConfigMap> = Api::namespaced(host.client.clone(), &host.ns);
    let written = cm.get("a-stamp").await.unwrap();
    let managers: Vec<String> =
        written.metadata.managed_fields.unwrap_or_default().into_iter().filter_map(|m| m.manager).collect();
    assert!(managers.iter().any(|m| m.contains("stamp")), "{managers:?}");
    host.stop().await;
}

#[tokio::test]
async fn existing_objects_are_never_taken_over_and_adopted_only_with_the_grant() {
    let host = Host::start("rec-adopt").await;
    let cm: Api<ConfigMap> = Api::namespaced(host.client.clone(), &host.ns);
    // One unowned, one controlled by someone else, both named as the guest's children.
    let unowned: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "free-stamp"}, "data": {"keep": "me"}})).unwrap();
    cm.create(&PostParams::default(), &unowned).await.unwrap();
    let owner = cm
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap())
        .await
        .unwrap();
    let taken: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "taken-stamp", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid.unwrap(), "controller": true}]},
        "data": {"keep": "me"}}))
    .unwrap();
    cm.create(&PostParams::default(), &taken).await.unwrap();
    host.module_config_map("stamp", &guest("stamp-v1")).await;
    host.reconciler("stamp", json!({"module": config_map_module("stamp"), "grants": stamp_grants()})).await;
    host.thing("free", json!(1)).await;
    host.thing("taken", json!(1)).await;
    for (thing, rule) in [("free", "spec.grants.adopt"), ("taken", "never taken over")] {
        let events = eventually(&format!("{thing}: InvalidOutcome"), WAIT, || async {
            let api: Api<Event> = Api::namespaced(host.client.clone(), &host.ns);
            let list = api.list(&ListParams::default()).await.ok()?;
            let notes: Vec<String> = list
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(thing))
                .filter(|e| e.reason.as_deref() == Some("InvalidOutcome"))
                .filter_map(|e| e.note)
                .collect();
            (!notes.is_empty()).then_some(notes)
        })
        .await;
        assert!(events.iter().any(|n| n.contains(rule)), "{thing}: {events:?}");
    }
    for name in ["free-stamp", "taken-stamp"] {
        let c = cm.get(name).await.unwrap();
        assert_eq!(c.data.unwrap().get("keep").map(String::as_str), Some("me"), "{name} untouched");
    }
    // With the grant, the unowned one is adopted; the other stays its owner's.
    let mut grants = stamp_grants();
    grants["adopt"] = true.into();
    host.reconciler("stamp", json!({"module": config_map_module("stamp"), "grants": grants})).await;
    host.thing("free", json!(2)).await;
    host.thing("taken", json!(2)).await;
    eventually("the unowned ConfigMap adopted", WAIT, || async {
        let c = cm.get("free-stamp").await.ok()?;
        let owner = c.metadata.owner_references?.into_iter().find(|o| o.controller == Some(true))?;
        (owner.kind == "Thing").then_some(())
    })
    .await;
    let c = cm.get("taken-stamp").await.unwrap();
    assert_eq!(c.metadata.owner_references.unwrap()[0].name, "owner", "never taken over, even with adopt");
    host.stop().await;
}

#[tokio::test]
async fn deleting_a_reconciler_stops_its_controller_and_no_other() {
    let host = Host::start("rec-delete").await;
    host.module_config_map("stamp", &guest("stamp-v1")).await;
    host.module_config_map("echo", &guest("echo")).await;
    // echo reconciles Things too: the two share the kind by disjoint
    // selectors (two controllers on one parent are refused as overlapping),
    // so both run side by side.
    host.reconciler(
        "stamp",
        json!({"module": config_map_module("stamp"), "grants": stamp_grants(),
            "selector": {"matchLabels": {"side": "stamp"}}}),
    )
    .await;
    host.reconciler(
        "counter",
        json!({"module": config_map_module("echo"), "grants": {
            "for": [{"group": "example.operon.dev", "kind": "Thing"}],
            "owns": [{"group": "", "kind": "ConfigMap"}, {"group": "apps", "kind": "Deployment"}, {"group": "", "kind": "Service"}]},
            "selector": {"matchLabels": {"side": "counter"}}}),
    )
    .await;
    let stamp_name = format!("{}/stamp", host.ns);
    let counter_name = format!("{}/counter", host.ns);
    eventually("both controllers", WAIT, || async {
        (host.manager.controller(&stamp_name).is_some() && host.manager.controller(&counter_name).is_some())
            .then_some(())
    })
    .await;
    host.thing_labelled("a", json!(1), json!({"side": "stamp"})).await;
    host.thing_labelled("b", json!(1), json!({"side": "counter"})).await;
    eventually("reconciled", WAIT, || async { host.stamped("a").await }).await;
    let counter = host.manager.controller(&counter_name).unwrap();
    host.reconcilers().delete("stamp", &DeleteParams::default()).await.unwrap();
    let before = counter.stats().reconciles;
    eventually("the stamp controller gone", WAIT, || async {
        host.manager.controller(&stamp_name).is_none().then_some(())
    })
    .await;
    // The other controller keeps reconciling during and after the deletion;
    // the deleted one's parent is reconciled by nobody.
    for v in 2..6 {
        host.thing_labelled("a", json!(v), json!({"side": "stamp"})).await;
        host.thing_labelled("b", json!(v), json!({"side": "counter"})).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eventually("the other controller still reconciles", WAIT, || async {
        (counter.stats().reconciles > before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(host.stamped("a").await.unwrap().1, json!(1), "no reconcile of the deleted Reconciler afterwards");
    assert!(
        !host.manager.metrics().encode().unwrap().contains(&format!("controller=\"{stamp_name}\"")),
        "its metrics series are gone"
    );
    host.stop().await;
}

/// Append an empty custom section: other bytes (another digest), the same
/// behaviour.
fn wasm_encoder_custom_section(bytes: &mut Vec<u8>) {
    // id 0 (custom), size, name length 4, "test".
    bytes.extend_from_slice(&[0, 5, 4, b't', b'e', b's', b't']);
}

fn rand_value() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64
}

#[tokio::test]
async fn modules_from_a_url_or_a_registry_load_only_with_their_pinned_digest() {
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    use oci_client::secrets::RegistryAuth;
    let host = Host::start("rec-remote").await;
    let module = guest("stamp-v1");
    let sha = digest(&module).trim_start_matches("sha256:").to_string();

    // URL: the right digest loads; a wrong one is refused, nothing loaded.
    let href = serve_module(module.clone()).await;
    // Each its own parents (disjoint selectors): two controllers of one
    // kind may not share a parent.
    let by_url = json!({"module": {"url": {"href": href, "sha256": sha}}, "grants": stamp_grants(),
        "selector": {"matchLabels": {"source": "url"}}});
    host.reconciler("by-url", by_url).await;
    let ready = eventually("by-url Ready", WAIT, || async {
        host.condition("by-url", "Ready").await.filter(|c| c.1 != "Loading")
    })
    .await;
    assert_eq!(ready.0, "True", "{ready:?}");
    host.reconciler(
        "bad-url",
        json!({"module": {"url": {"href": href, "sha256": "0".repeat(64)}}, "grants": stamp_grants(),
            "selector": {"matchLabels": {"source": "bad-url"}}}),
    )
    .await;
    let refused = eventually("bad-url refused", WAIT, || async {
        host.condition("bad-url", "Ready").await.filter(|c| c.1 == "SourceUnavailable")
    })
    .await;
    assert!(refused.2.contains("digest mismatch"), "{refused:?}");

    // OCI: push the module as an artifact, pin its manifest digest.
    operon::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let registry = operon_envtest::Registry::start(dir.path()).unwrap();
    let reference: oci_client::Reference = format!("{}/operon/stamp:v1", registry.addr()).parse().unwrap();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![registry.addr().to_string()]),
        ..ClientConfig::default()
    });
    let pushed = eventually("the registry up and the module pushed", WAIT, || async {
        let layer = ImageLayer::new(module.clone(), "application/wasm".into(), None);
        let config = Config::new(b"{}".to_vec(), "application/vnd.wasm.config.v0+json".into(), None);
        client.push(&reference, &[layer], config, &RegistryAuth::Anonymous, None).await.ok()
    })
    .await;
    let (_, manifest_digest) =
        client.pull_image_manifest(&reference, &RegistryAuth::Anonymous).await.expect("the manifest back");
    eprintln!("pushed {} ({manifest_digest})", pushed.manifest_url);
    host.reconciler(
        "by-oci",
        json!({"module": {"oci": {"reference": format!("{}/operon/stamp:v1", registry.addr()), "digest": manifest_digest}},
            "grants": stamp_grants(), "selector": {"matchLabels": {"source": "oci"}}}),
    )
    .await;
    let ready = eventually("by-oci Ready", WAIT, || async {
        host.condition("by-oci", "Ready").await.filter(|c| c.1 != "Loading")
    })
    .await;
    assert_eq!(ready.0, "True", "{ready:?}");
    let status = host.reconcilers().get("by-oci").await.unwrap().status.unwrap();
    assert_eq!(status.digest.as_deref(), Some(digest(&module).as_str()), "the layer is the module");
    host.reconciler(
        "bad-oci",
        json!({"module": {"oci": {"reference": format!("{}/operon/stamp:v1", registry.addr()), "digest": format!("sha256:{}", "1".repeat(64))}},
            "grants": stamp_grants(), "selector": {"matchLabels": {"source": "bad-oci"}}}),
    )
    .await;
    eventually("bad-oci refused", WAIT, || async {
        host.condition("bad-oci", "Ready").await.filter(|c| c.1 == "SourceUnavailable")
    })
    .await;
    host.stop().await;
}

/// `spec.resyncPeriodSeconds` (Metacontroller's name; controller-runtime's
/// `SyncPeriod`): every parent is reconciled again after the period though
/// nothing changed, so a guest that reads something the host does not
/// watch converges; a parent that is gone is not resynced.
#[tokio::test]
async fn a_resync_period_reconciles_unchanged_parents_again_and_forgets_deleted_ones() {
    let host = Host::start("rec-resync").await;
    host.module_config_map("stamp", &guest("stamp-v1")).await;
    host.reconciler(
        "stamp",
        json!({"module": config_map_module("stamp"), "grants": stamp_grants(), "resyncPeriodSeconds": 1}),
    )
    .await;
    host.thing("a", json!(1)).await;
    eventually("reconciled", WAIT, || async { host.stamped("a").await }).await;
    let name = format!("{}/stamp", host.ns);
    let controller = host.manager.controller(&name).unwrap();
    let before = controller.stats().reconciles;
    eventually("three more reconciles of the unchanged Thing", WAIT, || async {
        (controller.stats().reconciles >= before + 3).then_some(())
    })
    .await;
    assert_eq!(controller.stats().errors, 0);

    host.things().delete("a", &DeleteParams::default()).await.unwrap();
    eventually("the Thing gone", WAIT, || async { host.things().get_opt("a").await.ok()?.is_none().then_some(()) })
        .await;
    // The deletion's own reconcile, then nothing: a parent that is gone
    // does not come back every period.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = controller.stats().reconciles;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(controller.stats().reconciles, after, "a deleted parent kept being resynced");
    host.stop().await;
}

/// The `Synced` condition of a parent: `(status, reason, message)`.
async fn synced(webapps: &Api<DynamicObject>, name: &str) -> Option<(String, String, String)> {
    let o = webapps.get_opt(name).await.ok()??;
    let list = o.data.pointer("/status/conditions")?.as_array()?.clone();
    let c = list.into_iter().find(|c| c["type"] == "Synced")?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// A failure after a side effect shows on the parent: a WebApp whose
/// Deployment and Service are written but whose Ingress the plugin's
/// ServiceAccount may not write keeps the guest's own conditions from its
/// last good reconcile, and the host adds `Synced=False` with the reason
/// and the API server's refusal — written once, not at every backoff step
/// — then `Synced=True` once the Ingress may be written. A Reconciler with
/// `syncedCondition: false` leaves its parents' conditions to the guest.
#[tokio::test]
async fn a_failing_reconcile_after_a_side_effect_shows_as_synced_false_on_the_parent() {
    let host = Host::start("rec-synced").await;
    let sas: Api<ServiceAccount> = Api::namespaced(host.client.clone(), &host.ns);
    sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "plugin"}})).unwrap())
        .await
        .unwrap();
    let rules = |ingress: bool| {
        let mut rules = vec![
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}),
            json!({"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}),
            json!({"apiGroups": ["example.operon.dev"], "resources": ["webapps", "webapps/status"], "verbs": ["get", "patch", "update"]}),
            json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}),
        ];
        if ingress {
            rules.push(json!({"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}));
        }
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "plugin"}, "rules": rules})
    };
    let roles: Api<Role> = Api::namespaced(host.client.clone(), &host.ns);
    let role: Role = serde_json::from_value(rules(false)).unwrap();
    roles.patch("plugin", &PatchParams::apply("test").force(), &Patch::Apply(&role)).await.unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(host.client.clone(), &host.ns);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "plugin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "plugin"},
                "subjects": [{"kind": "ServiceAccount", "name": "plugin", "namespace": host.ns}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    host.module_config_map("webapp", &guest("rust-webapp")).await;
    let spec = |app: &str, synced: Option<bool>| {
        let mut spec = json!({"module": config_map_module("webapp"), "serviceAccountName": "plugin",
            "selector": {"matchLabels": {"app": app}},
            "grants": {"for": [{"group": "example.operon.dev", "kind": "WebApp"}],
                       "owns": [{"group": "apps", "kind": "Deployment"}, {"group": "", "kind": "Service"},
                                {"group": "networking.k8s.io", "kind": "Ingress"}]}});
        if let Some(on) = synced {
            spec["syncedCondition"] = json!(on);
        }
        spec
    };
    host.reconciler("reported", spec("reported", None)).await;
    host.reconciler("quiet", spec("quiet", Some(false))).await;
    let webapps: Api<DynamicObject> = Api::namespaced_with(
        host.client.clone(),
        &host.ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp")),
    );
    let apply_webapp = |name: &'static str, ingress: bool| {
        let mut w = json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"image": "registry.example.com/shop/web:1.4.2", "replicas": 1, "port": 8080}});
        if ingress {
            w["spec"]["ingress"] = json!({"host": "shop.example.com", "path": "/"});
        }
        let webapps = webapps.clone();
        async move {
            let object: DynamicObject = serde_json::from_value(w).unwrap();
            webapps.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&object)).await.unwrap();
        }
    };
    apply_webapp("reported", false).await;
    apply_webapp("quiet", false).await;
    let guest_conditions = |o: &DynamicObject| -> Vec<String> {
        let list = o.data.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        list.iter()
            .filter(|c| c["type"] != "Synced")
            .map(|c| c["type"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let first = eventually("the first reconcile to succeed", WAIT, || async {
        synced(&webapps, "reported").await.filter(|(status, _, _)| status == "True")
    })
    .await;
    assert_eq!(first.1, "ReconcileSuccess");
    let written = webapps.get("reported").await.unwrap();
    let before = guest_conditions(&written);
    assert!(!before.is_empty(), "the guest writes conditions of its own: {:?}", written.data["status"]);

    // The Ingress is refused: the Deployment and Service are written, then
    // every reconcile fails.
    apply_webapp("reported", true).await;
    apply_webapp("quiet", true).await;
    let failed = eventually("Synced=False on the parent", WAIT, || async {
        synced(&webapps, "reported").await.filter(|(status, _, _)| status == "False")
    })
    .await;
    eprintln!("Synced: {failed:?}");
    assert_eq!(failed.1, "ApplyFailed");
    assert!(
        failed.2.contains("Ingress") && failed.2.contains("forbidden"),
        "the refusal is in the message: {failed:?}"
    );
    let failing = webapps.get("reported").await.unwrap();
    assert_eq!(guest_conditions(&failing), before, "the guest's conditions are all still there");
    // The failing loop retries with backoff; the condition is not written again.
    let version = failing.metadata.resource_version.clone();
    // controller_runtime_reconcile_errors_total of the Reconciler's controller.
    let errors = || {
        let text = host.manager.metrics().encode().unwrap();
        let prefix = format!("controller_runtime_reconcile_errors_total{{controller=\"{}/reported\"}} ", host.ns);
        text.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0.0, |v| v.trim().parse::<f64>().unwrap())
    };
    let errors_before = errors();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let errors_after = errors();
    assert!(errors_after >= errors_before + 2.0, "reconciles kept failing ({errors_before} → {errors_after})");
    assert_eq!(
        webapps.get("reported").await.unwrap().metadata.resource_version,
        version,
        "the parent was written again while the same failure repeated"
    );
    let quiet = webapps.get("quiet").await.unwrap();
    assert!(
        synced(&webapps, "quiet").await.is_none(),
        "syncedCondition: false writes nothing: {:?}",
        quiet.data["status"]
    );

    // Granted: the next retry succeeds, and the parent says so.
    let role: Role = serde_json::from_value(rules(true)).unwrap();
    roles.patch("plugin", &PatchParams::apply("test").force(), &Patch::Apply(&role)).await.unwrap();
    let recovered = eventually("Synced=True again", Duration::from_secs(120), || async {
        synced(&webapps, "reported").await.filter(|(status, _, _)| status == "True")
    })
    .await;
    assert_eq!(recovered.1, "ReconcileSuccess");
    assert_eq!(guest_conditions(&webapps.get("reported").await.unwrap()), before);
    host.stop().await;
}
