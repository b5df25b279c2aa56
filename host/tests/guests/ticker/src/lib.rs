//! A periodic reconciler for the soak (`cargo xtask soak`): each reconcile
//! of a `Ticker` writes `status.count` = the previous count + 1 and a
//! ConfigMap child `<name>-tick` holding the parent's `spec.message`, and
//! asks to run again after `spec.everyMs` (default 1000 ms).
//!
//! Reconciles `example.operon.dev/v1alpha1 Ticker`; owns v1 ConfigMap.

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
            name: "ticker".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Ticker"),
            owns: vec![gvk("", "v1", "ConfigMap")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        let name = parent.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let count = parent.pointer("/status/count").and_then(Value::as_u64).unwrap_or(0);
        let message = parent.pointer("/spec/message").and_then(Value::as_str).unwrap_or_default();
        let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-tick")},
            "data": {"message": message}});
        Ok(Outcome {
            desired: vec![child.to_string()],
            status: Some(json!({"count": count + 1, "message": message}).to_string()),
            events: vec![],
            requeue_after_ms: Some(parent.pointer("/spec/everyMs").and_then(Value::as_u64).unwrap_or(1000)),
            finalized: request.finalizing,
        })
    }
}
