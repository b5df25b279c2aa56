//! What the fuzz targets check, as plain functions: the targets
//! (`fuzz_targets/`) run them on what libFuzzer makes, and the test
//! command runs them on the seeds and the built guests
//! (`host/tests/all/fuzz_seeds.rs`), so a finding kept as a seed stays a
//! regression test without a fuzz build.

use operon::apply::{self, Namespaces, Policy};
use operon::cache::CachedObject;
use operon::runtime::{self, Gvk, Limits, NoObjects, Request, Runtime, fuzz_outcome};
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A guest's outcome, as hostile as bytes allow, through everything the
/// host does with it before writing: size check and JSON parsing
/// (`runtime::fuzz_outcome`, the conversion every reconcile runs), then the
/// applier's validation against a policy (`apply::validate`: kinds,
/// reserved kinds, namespaces, names, duplicates, object size, counts).
///
/// The input is split on `\n` into parts: the first is the status, the
/// next up to 8 are desired objects, the rest are events
/// (`reason\tmessage`). The host must never panic, and anything `validate`
/// accepts must be something it is willing to write: a granted kind, in the
/// parent's namespace, with the parent as controller owner.
pub fn outcome(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\n');
    let status = parts.next().filter(|s| !s.is_empty()).map(str::to_string);
    let desired: Vec<String> = parts.by_ref().take(8).map(str::to_string).collect();
    let events: Vec<(bool, String, String)> = parts
        .map(|e| {
            let (reason, message) = e.split_once('\t').unwrap_or((e, ""));
            (reason.len() % 2 == 0, reason.to_string(), message.to_string())
        })
        .collect();
    let Ok(outcome) = fuzz_outcome(desired, status, events, None, 64 << 10) else { return };

    let parent = CachedObject::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "p", "namespace": "team-a", "uid": "u-1"}
    }))
    .expect("a well-formed parent");
    let policy = Policy {
        controller: "fuzz".into(),
        owns: vec![
            Gvk::new("", "v1", "ConfigMap"),
            Gvk::new("apps", "v1", "Deployment"),
            Gvk::new("", "v1", "Namespace"),
        ],
        namespaces: Namespaces::ParentOnly,
        cluster_scoped: false,
        max_desired: 4,
        max_events: 4,
    };
    let namespaced = |k: &Gvk| k.kind != "Namespace";
    let Ok(children) = apply::validate(&policy, &parent, &outcome, namespaced) else { return };
    assert!(children.len() <= 4 && outcome.events.len() <= 4);
    for child in children {
        assert!(policy.owns.contains(&child.kind), "an ungranted kind passed: {}", child.kind);
        assert!(apply::reserved(&child.kind).is_none());
        assert_eq!(child.key.namespace.as_deref(), Some("team-a"), "a child outside the parent's namespace passed");
        assert_eq!(child.object["metadata"]["namespace"], "team-a");
        assert_eq!(child.object["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert!(child.object["metadata"].get("resourceVersion").is_none());
    }
}

fn engine() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(runtime::Config {
            artifact_dir: None,
            instance_slots: 16,
            max_memory: 16 << 20,
            ..Default::default()
        })
        .expect("engine")
    })
}

/// Arbitrary bytes as a module: `Runtime::load` must refuse what is not a
/// valid reconciler component with a `LoadError`, never panic or crash, and
/// whatever it does load must answer a reconcile within its limits (a trap
/// or timeout is an answer).
pub fn load(data: &[u8]) {
    let limits = Limits { timeout: Duration::from_millis(50), memory: 16 << 20, ..Limits::default() };
    let Ok(module) = engine().load(data, limits) else { return };
    let request = Request {
        object: r#"{"apiVersion":"example.operon.dev/v1alpha1","kind":"Thing","metadata":{"name":"t","namespace":"default","uid":"u"}}"#.into(),
        ..Request::default()
    };
    let _ = module.reconcile(&request, Arc::new(NoObjects));
}
