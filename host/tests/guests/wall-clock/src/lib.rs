//! A guest of contract 0.2 that reads WASI's wall clock (Rust std's
//! `SystemTime::now()`, for wasm32-wasip2) during a reconcile and reports
//! it beside the request's clock: `status.now` is `request.now` as given,
//! `status.wallMs` the wall clock in milliseconds since the Unix epoch. The
//! host promises they are the same instant (docs/contract-0.2.md), so a
//! reconcile is a function of its request even when a language runtime
//! reads the time on its own.
//!
//! Reconciles `example.operon.dev/v1alpha1 Thing`; owns nothing.

wit_bindgen::generate!({ path: "../../../../wit/reconciler.wit", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Gvk, Outcome, ReconcilerManifest, Request};

struct Component;
export!(Component);

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "wall-clock".into(),
            for_: Gvk { group: "example.operon.dev".into(), version: "v1alpha1".into(), kind: "Thing".into() },
            owns: vec![],
            updates: vec![],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let status = serde_json::json!({"now": request.now, "wallMs": wall.as_millis() as u64});
        Ok(Outcome {
            desired: vec![],
            status: Some(status.to_string()),
            events: vec![],
            requeue_after_ms: None,
            requeue_at: None,
            finalized: false,
            needs_finalizer: false,
            parent_metadata: None,
        })
    }
}
