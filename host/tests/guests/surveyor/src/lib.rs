//! Reconciles the cluster-scoped `example.operon.dev/v1alpha1 Survey` and
//! writes into its status every related object the host handed it, as
//! `namespace/name` (contract 0.2, wit-bindgen directly): ConfigMaps named
//! by `spec.configRef` and selected by `spec.selector`. What a guest is
//! handed is what it could leak, so tests read the host's filtering here.

wit_bindgen::generate!({ path: "../../../../wit/reconciler.wit", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Gvk, Mapping, Outcome, ReconcilerManifest, Request, Watch};
use serde_json::{Value, json};

struct Component;
export!(Component);

fn config_map() -> Gvk {
    Gvk { group: String::new(), version: "v1".into(), kind: "ConfigMap".into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "surveyor".into(),
            for_: Gvk { group: "example.operon.dev".into(), version: "v1alpha1".into(), kind: "Survey".into() },
            owns: vec![],
            updates: vec![],
            watches: vec![
                Watch { kind: config_map(), mapping: Mapping::Reference("spec.configRef".into()) },
                Watch { kind: config_map(), mapping: Mapping::Selector("spec.selector".into()) },
            ],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let mut related: Vec<String> = request
            .related
            .iter()
            .filter_map(|o| serde_json::from_str::<Value>(o).ok())
            .map(|o| {
                let m = &o["metadata"];
                format!("{}/{}", m["namespace"].as_str().unwrap_or_default(), m["name"].as_str().unwrap_or_default())
            })
            .collect();
        related.sort();
        related.dedup();
        Ok(Outcome {
            desired: vec![],
            status: Some(json!({"related": related, "ready": true}).to_string()),
            events: vec![],
            requeue_after_ms: None,
            requeue_at: None,
            finalized: false,
            needs_finalizer: false,
            parent_metadata: None,
        })
    }
}
