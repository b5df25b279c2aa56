//! `reconcile` allocates 1 MiB chunks, fills them and keeps them, forever.
//! The host's memory cap (`StoreLimits`) must be what stops it: `memory.grow`
//! fails, the allocator reports out-of-memory and the guest aborts (traps).

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
            name: "misbehave-memory".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(_request: Request) -> Result<Outcome, Failure> {
        const CHUNK: usize = 1 << 20;
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            // Filled with a non-zero byte so every page is written.
            let chunk = vec![0xA5u8; CHUNK];
            hoard.push(std::hint::black_box(chunk));
            std::hint::black_box(&hoard);
        }
    }
}
