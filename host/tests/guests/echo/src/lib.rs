//! Answers with whatever its parent's `spec` describes, so end-to-end tests
//! can script an outcome and watch what the host does with it:
//!
//! - `spec.desired`: the children (objects, as JSON), returned as they are;
//! - `spec.events`: `[{reason, message, warning}]`; with
//!   `spec.eventsOnChange: true`, only when the cached status differs from
//!   `spec.status` (as a guest reports a change once, not every reconcile);
//! - `spec.requeueAfterMs`: requeue-after;
//! - `spec.count`: when true, `status.count` is the cached status's count + 1
//!   (so the number of reconciles is visible from outside);
//! - `spec.status`: otherwise, the status to write.
//!
//! Reconciles `example.operon.dev/v1alpha1 Thing`; owns Deployments,
//! Services and ConfigMaps.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Event, Failure, Gvk, Outcome, ReconcilerManifest, Request};
use serde_json::Value;

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "echo".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment"), gvk("", "v1", "Service"), gvk("", "v1", "ConfigMap")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        let spec = &parent["spec"];
        let desired = spec["desired"].as_array().map(|a| a.iter().map(Value::to_string).collect()).unwrap_or_default();
        // The cached status already holds every field of `spec.status`
        // (other writers may have added their own).
        let unchanged = spec["eventsOnChange"].as_bool() == Some(true)
            && spec["status"]
                .as_object()
                .is_some_and(|want| want.iter().all(|(k, v)| parent.pointer(&format!("/status/{k}")) == Some(v)));
        let events = spec["events"]
            .as_array()
            .filter(|_| !unchanged)
            .map(|a| {
                a.iter()
                    .map(|e| Event {
                        warning: e["warning"].as_bool().unwrap_or(false),
                        reason: e["reason"].as_str().unwrap_or_default().into(),
                        message: e["message"].as_str().unwrap_or_default().into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let status = if spec["count"].as_bool() == Some(true) {
            let count = parent.pointer("/status/count").and_then(Value::as_u64).unwrap_or(0);
            Some(serde_json::json!({ "count": count + 1 }).to_string())
        } else {
            spec.get("status").filter(|s| !s.is_null()).map(Value::to_string)
        };
        Ok(Outcome {
            desired,
            status,
            events,
            requeue_after_ms: spec["requeueAfterMs"].as_u64(),
            finalized: request.finalizing,
        })
    }
}
