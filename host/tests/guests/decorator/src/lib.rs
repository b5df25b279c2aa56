//! A decorator of StatefulSets, as a Metacontroller DecoratorController
//! user would port one (contract 0.2, wit-bindgen directly): while a
//! StatefulSet carries the annotation `example.operon.dev/expose: "true"`,
//! one Service per replica (`<name>-<i>`), the host's finalizer, and the
//! label `example.operon.dev/exposed: "true"` on the StatefulSet; without
//! it, none of them — so a StatefulSet that never opted in is never held.
//! A `finalizing` call answers `finalized` with nothing, and says so in an
//! `Undecorated` event.

wit_bindgen::generate!({ path: "../../../../wit/reconciler.wit", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Event, Failure, Gvk, Outcome, ParentMetadata, ReconcilerManifest, Request};
use serde_json::{Value, json};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

fn outcome(desired: Vec<String>, exposed: bool, finalized: bool) -> Outcome {
    let labels = if exposed { vec![("example.operon.dev/exposed".to_string(), "true".to_string())] } else { vec![] };
    Outcome {
        desired,
        status: None,
        events: if finalized {
            vec![Event { warning: false, reason: "Undecorated".into(), message: "finalized: nothing kept".into() }]
        } else {
            vec![]
        },
        requeue_after_ms: None,
        requeue_at: None,
        finalized,
        needs_finalizer: exposed,
        parent_metadata: Some(ParentMetadata { labels, annotations: vec![] }),
    }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "decorator".into(),
            for_: gvk("apps", "v1", "StatefulSet"),
            owns: vec![gvk("", "v1", "Service")],
            updates: vec![],
            watches: vec![],
            reads: vec![],
            finalizer: Some("example.operon.dev/decorator".into()),
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        if request.finalizing {
            // Nothing outside the cluster to clean up: the Services go with
            // their owner.
            return Ok(outcome(vec![], false, true));
        }
        let parent: Value = serde_json::from_str(&request.object).unwrap_or_default();
        let exposed = parent["metadata"]["annotations"]["example.operon.dev/expose"] == "true";
        if !exposed {
            return Ok(outcome(vec![], false, false));
        }
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let replicas = parent["spec"]["replicas"].as_u64().unwrap_or(1);
        let services = (0..replicas)
            .map(|i| {
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": format!("{name}-{i}")},
                    "spec": {
                        "selector": {"statefulset.kubernetes.io/pod-name": format!("{name}-{i}")},
                        "ports": [{"port": 80}]
                    }
                })
                .to_string()
            })
            .collect();
        Ok(outcome(services, true, false))
    }
}
