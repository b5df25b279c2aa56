//! Built against `operon:reconciler@0.0.1` (the copy in `wit/` here), an
//! incompatible major version of the contract: the host must refuse it with a
//! message naming both 0.0.1 and the version it speaks. Otherwise a
//! well-behaved reconciler.

wit_bindgen::generate!({ path: "wit", world: "reconciler" });

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
            name: "misbehave-old-major".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        Ok(Outcome {
            desired: vec![],
            status: None,
            events: vec![],
            requeue_after_ms: None,
            finalized: request.finalizing,
        })
    }
}
