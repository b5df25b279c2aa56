// Shared by the stamp-* test guests (each sets VERSION, TRAP, READS and
// FINALIZER, then includes this file): reconciles
// `example.operon.dev/v1alpha1 Thing`, owns ConfigMaps. A Thing gets a
// ConfigMap `<name>-stamp` with its `spec.value` and the guest's version,
// and a status saying the same, so a test sees which version answered.
// `spec.spin`: iterations of a busy loop before answering (a slow guest).
// `spec.terminalFor`: a version that fails terminally for this Thing.
// READS: kinds the manifest also reads (another manifest, same behaviour).
// FINALIZER: the finalizer the host keeps on Things.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Gvk, Outcome, ReconcilerManifest, Request};
use serde_json::{Value, json};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "stamp".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("", "v1", "ConfigMap")],
            watches: vec![],
            reads: READS.iter().map(|(g, v, k)| gvk(g, v, k)).collect(),
            finalizer: FINALIZER.map(str::to_string),
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        if TRAP {
            // What the Rust SDK's panic hook does: say why through the
            // host's log (this guest has no stderr), then trap.
            std::panic::set_hook(Box::new(|info| {
                operon::reconciler::host::log(operon::reconciler::host::Level::Error, &info.to_string(), &[])
            }));
            panic!("this version traps on every reconcile");
        }
        let parent: Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        if let Some(spins) = parent.pointer("/spec/spin").and_then(Value::as_u64) {
            let mut n: u64 = 0;
            while n < spins {
                n = std::hint::black_box(n) + 1;
            }
        }
        if parent.pointer("/spec/terminalFor").and_then(Value::as_str) == Some(VERSION) {
            return Err(Failure::Terminal(format!("version {VERSION} cannot reconcile this Thing")));
        }
        let name = parent.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let value = parent.pointer("/spec/value").cloned().unwrap_or(Value::Null);
        let generation = parent.pointer("/metadata/generation").cloned().unwrap_or(Value::Null);
        let config_map = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-stamp")},
            "data": {"version": VERSION, "value": value.to_string()}
        });
        Ok(Outcome {
            desired: vec![config_map.to_string()],
            status: Some(json!({"version": VERSION, "value": value, "observedGeneration": generation}).to_string()),
            events: vec![],
            requeue_after_ms: None,
            finalized: request.finalizing,
        })
    }
}
