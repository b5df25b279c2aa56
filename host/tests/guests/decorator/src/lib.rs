//! A decorator of StatefulSets, as a Metacontroller DecoratorController
//! user would port one (contract 0.2, wit-bindgen directly). Which
//! StatefulSets it decorates is the Reconciler's choice, not the guest's
//! (`spec.annotationSelector` or `spec.selector`, as Metacontroller's
//! `resources[].annotationSelector`): each parent it is handed gets one
//! Service per replica (`<name>-<i>`), the host's finalizer, and the label
//! `example.operon.dev/exposed: "true"`. A `finalizing` call (the parent is
//! deleted or no longer selected) answers `finalized`, wanting no Service
//! and leaving the labels alone as a plain port does, and says so in an
//! `Undecorated` event: removing the rest is the host's part.

wit_bindgen::generate!({ path: "../../../../wit/reconciler.wit", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Event, Failure, Gvk, Outcome, ParentMetadata, ReconcilerManifest, Request};
use serde_json::{Value, json};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

/// The decoration of a parent: its Services, the finalizer, the label.
fn decorated(desired: Vec<String>) -> Outcome {
    Outcome {
        desired,
        status: None,
        events: vec![],
        requeue_after_ms: None,
        requeue_at: None,
        finalized: false,
        needs_finalizer: true,
        parent_metadata: Some(ParentMetadata {
            labels: vec![("example.operon.dev/exposed".to_string(), "true".to_string())],
            annotations: vec![],
        }),
    }
}

/// The answer to a `finalizing` call: nothing outside the cluster to clean
/// up, no Service wanted, the parent's metadata not mentioned.
fn finalized() -> Outcome {
    Outcome {
        desired: vec![],
        status: None,
        events: vec![Event { warning: false, reason: "Undecorated".into(), message: "finalized: nothing kept".into() }],
        requeue_after_ms: None,
        requeue_at: None,
        finalized: true,
        needs_finalizer: false,
        parent_metadata: None,
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
            return Ok(finalized());
        }
        let parent: Value = serde_json::from_str(&request.object).unwrap_or_default();
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
        Ok(decorated(services))
    }
}
