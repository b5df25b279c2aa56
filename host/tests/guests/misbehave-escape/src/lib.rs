//! Tries to write outside its grants. The manifest owns only apps/v1
//! Deployment. `reconcile` always returns a valid Deployment first, then,
//! depending on the parent's `spec.escape`:
//! - `"secret"`: a v1 Secret (a kind it does not own);
//! - `"namespace"`: a second Deployment in namespace `kube-system`;
//! - anything else: nothing more (a well-behaved reconcile).
//!
//! The host must refuse the whole outcome: not even the valid Deployment
//! may be written.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Gvk, Outcome, ReconcilerManifest, Request};
use serde_json::json;

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "misbehave-escape".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: serde_json::Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        let name = parent.pointer("/metadata/name").and_then(|v| v.as_str()).unwrap_or("thing");
        let deployment = |name: &str, namespace: Option<&str>| {
            let mut d = json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "app", "image": "busybox"}]}}
                }
            });
            if let Some(ns) = namespace {
                d["metadata"]["namespace"] = ns.into();
            }
            d.to_string()
        };
        let mut desired = vec![deployment(name, None)];
        match parent.pointer("/spec/escape").and_then(|v| v.as_str()) {
            Some("secret") => desired.push(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{name}-stolen")},
                    "stringData": {"token": "x"}})
                .to_string(),
            ),
            Some("namespace") => desired.push(deployment(&format!("{name}-elsewhere"), Some("kube-system"))),
            _ => {}
        }
        Ok(Outcome { desired, status: None, events: vec![], requeue_after_ms: None, finalized: request.finalizing })
    }
}
