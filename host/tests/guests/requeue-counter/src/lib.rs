//! Proves requeue-after: each reconcile writes `status.count` = the previous
//! count + 1 and asks to run again after `spec.everyMs` (default 200 ms).
//! Status writes do not trigger reconciles (the host's default predicate),
//! so the count grows only through requeues. Owns and writes nothing else.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Gvk, Outcome, ReconcilerManifest, Request};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "requeue-counter".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: serde_json::Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        let count = parent.pointer("/status/count").and_then(|v| v.as_u64()).unwrap_or(0);
        let every = parent.pointer("/spec/everyMs").and_then(|v| v.as_u64()).unwrap_or(200);
        Ok(Outcome {
            desired: vec![],
            status: Some(serde_json::json!({ "count": count + 1 }).to_string()),
            events: vec![],
            requeue_after_ms: Some(every),
            finalized: request.finalizing,
        })
    }
}
