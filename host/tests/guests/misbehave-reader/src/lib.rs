//! Exercises the host's read grants. The manifest declares `reads: [v1
//! ConfigMap]` (besides the parent kind and the owned apps/v1 Deployment).
//!
//! What `reconcile` does depends on the parent's `spec.read`:
//! - `"list"`: `host.list` of v1 ConfigMap (declared, in the parent's
//!   namespace) and answers status `{"configMapCount": N}`; a list error is
//!   returned as `transient("list v1/ConfigMap: <error>")`.
//! - anything else, or missing: `host.get` of v1 Secret `forbidden` (not
//!   declared) and returns the host's error string as `transient(<error>)`.
//!   If the host wrongly allows the read, it answers
//!   `terminal("host.get of undeclared kind v1/Secret was allowed")`.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::host::{self, Level};
use operon::reconciler::types::{Failure, Gvk, ObjectRef, Outcome, ReconcilerManifest, Request};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "misbehave-reader".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![gvk("", "v1", "ConfigMap")],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: serde_json::Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        let mode = parent.pointer("/spec/read").and_then(|v| v.as_str()).unwrap_or("get");
        host::log(Level::Info, "misbehave-reader", &[("mode".into(), mode.into())]);

        if mode == "list" {
            let configmaps = host::list(&gvk("", "v1", "ConfigMap"), None, None)
                .map_err(|e| Failure::Transient(format!("list v1/ConfigMap: {e}")))?;
            let status = serde_json::json!({ "configMapCount": configmaps.len() });
            return Ok(Outcome {
                desired: vec![],
                status: Some(status.to_string()),
                events: vec![],
                requeue_after_ms: None,
                finalized: request.finalizing,
            });
        }

        let secret = ObjectRef { kind: gvk("", "v1", "Secret"), namespace: None, name: "forbidden".into() };
        match host::get(&secret) {
            Err(e) => Err(Failure::Transient(e)),
            Ok(_) => Err(Failure::Terminal("host.get of undeclared kind v1/Secret was allowed".into())),
        }
    }
}
