//! Reconciles `example.operon.dev/v1 Gadget` and serves its CRD's
//! conversion (contract 0.2, wit-bindgen directly): `v1beta1` says
//! `spec.size` (`small`, `large`), `v1` says `spec.replicas` (1, 3). A
//! `v1beta1` Gadget of size `explode` makes `convert` trap, so tests can see
//! what the API server says then.

wit_bindgen::generate!({ path: "../../../../wit/reconciler.wit", world: "reconciler-with-conversion" });

use exports::operon::reconciler::conversion::Guest as Conversion;
use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Gvk, Outcome, ReconcilerManifest, Request};
use serde_json::{Value, json};

struct Component;
export!(Component);

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "converter".into(),
            for_: Gvk { group: "example.operon.dev".into(), version: "v1".into(), kind: "Gadget".into() },
            owns: vec![],
            updates: vec![],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: Value = serde_json::from_str(&request.object).unwrap_or_default();
        Ok(Outcome {
            desired: vec![],
            status: Some(json!({"replicas": parent["spec"]["replicas"]}).to_string()),
            events: vec![],
            requeue_after_ms: None,
            requeue_at: None,
            finalized: false,
            needs_finalizer: false,
            parent_metadata: None,
        })
    }
}

impl Conversion for Component {
    fn convert(objects: Vec<String>, desired_api_version: String) -> Result<Vec<String>, String> {
        objects
            .iter()
            .map(|text| {
                let mut o: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
                let from = o["apiVersion"].as_str().unwrap_or_default().to_string();
                if from == desired_api_version {
                    return Ok(text.clone());
                }
                let spec = o["spec"].take();
                o["spec"] = match desired_api_version.as_str() {
                    "example.operon.dev/v1" => {
                        let size = spec["size"].as_str().unwrap_or("small");
                        if size == "explode" {
                            panic!("cannot convert a Gadget of size explode");
                        }
                        json!({"replicas": if size == "large" { 3 } else { 1 }})
                    }
                    "example.operon.dev/v1beta1" => {
                        let replicas = spec["replicas"].as_u64().unwrap_or(1);
                        json!({"size": if replicas >= 3 { "large" } else { "small" }})
                    }
                    other => return Err(format!("no conversion to {other}")),
                };
                o["apiVersion"] = json!(desired_api_version);
                Ok(o.to_string())
            })
            .collect()
    }
}
