//! `reconcile` spins forever. The host's wall-clock deadline (epoch
//! interruption) must stop it and report a timeout.

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
            name: "misbehave-loop".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(_request: Request) -> Result<Outcome, Failure> {
        // black_box keeps the optimiser from proving the loop pointless.
        let mut spins: u64 = 0;
        loop {
            spins = std::hint::black_box(spins).wrapping_add(1);
        }
    }
}
