//! `manifest` traps, so the host's load-time smoke call must fail cleanly and
//! the module must never be activated. `reconcile` is well-behaved.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Outcome, ReconcilerManifest, Request};

struct Component;
export!(Component);

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        #[cfg(target_arch = "wasm32")]
        core::arch::wasm32::unreachable();
        #[cfg(not(target_arch = "wasm32"))]
        unreachable!("misbehave-manifest-trap traps only when built for wasm32");
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
