//! A plugin that says too much, in the way its parent's `spec.mode` names,
//! for the tests of what the host does with a guest's words:
//!
//! - `"log"`: calls `host.log` `spec.lines` times (default 100 000), at
//!   `info`, each message `spec.size` bytes long (default 100) and carrying
//!   a newline followed by a forged log line, a terminal escape and a
//!   carriage return; one field whose value does the same. Status
//!   `{"logged": N}`;
//! - `"events"`: an outcome with `spec.events` Normal events (default 50,
//!   what the contract allows one outcome), reason `Chatty`, each message
//!   distinct (`event i of N`), and status `{"events": N}`;
//! - anything else: status `{"quiet": true}`.
//!
//! Reconciles `example.operon.dev/v1alpha1 Thing`; owns nothing.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::host::{self, Level};
use operon::reconciler::types::{Event, Failure, Gvk, Outcome, ReconcilerManifest, Request};
use serde_json::{Value, json};

struct Component;
export!(Component);

/// What a guest that forges log lines writes after its newline.
pub const FORGED: &str = "FORGED-LINE level=INFO target=operon::leader: this replica lost its Lease";

fn outcome(status: Value, events: Vec<Event>) -> Outcome {
    Outcome { desired: vec![], status: Some(status.to_string()), events, requeue_after_ms: None, finalized: false }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "chatty".into(),
            for_: Gvk { group: "example.operon.dev".into(), version: "v1alpha1".into(), kind: "Thing".into() },
            owns: vec![],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        let spec = &parent["spec"];
        match spec["mode"].as_str().unwrap_or("") {
            "log" => {
                let lines = spec["lines"].as_u64().unwrap_or(100_000);
                let size = spec["size"].as_u64().unwrap_or(100) as usize;
                let forged = format!("\n{FORGED}\r\u{1b}[2K\u{1b}[31m");
                let padding = "x".repeat(size.saturating_sub(forged.len()));
                let message = format!("chatty{forged}{padding}");
                let fields = vec![("note".to_string(), format!("a field{forged}"))];
                for _ in 0..lines {
                    host::log(Level::Info, &message, &fields);
                }
                Ok(outcome(json!({"logged": lines}), vec![]))
            }
            "events" => {
                let n = spec["events"].as_u64().unwrap_or(50);
                let events = (0..n)
                    .map(|i| Event { warning: false, reason: "Chatty".into(), message: format!("event {i} of {n}") })
                    .collect();
                Ok(outcome(json!({"events": n}), events))
            }
            _ => Ok(outcome(json!({"quiet": true}), vec![])),
        }
    }
}
