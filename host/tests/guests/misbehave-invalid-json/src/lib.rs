//! `reconcile` succeeds but its one desired child is truncated JSON. The host
//! must reject the whole outcome and write nothing.

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
            name: "misbehave-invalid-json".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(_request: Request) -> Result<Outcome, Failure> {
        Ok(Outcome {
            desired: vec![r#"{"apiVersion": "apps/v1", "kind":"#.to_string()],
            status: None,
            events: vec![],
            requeue_after_ms: None,
            finalized: false,
        })
    }
}
