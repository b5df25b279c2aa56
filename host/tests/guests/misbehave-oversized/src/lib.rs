//! `reconcile` returns valid JSON children that are too big in total: 20
//! Deployments of about 1 MiB each (20 MiB), so a host whose output cap is
//! lower (e.g. 4 MiB) must fail with an "oversized" error rather than run out
//! of memory. Each object alone stays under 1 MiB, so only a total cap (or a
//! per-object cap below 1 MiB) trips. The guest needs about 21 MiB of linear
//! memory to build its answer.
//!
//! The parent may set `spec.totalBytes` (an integer) to choose another total,
//! e.g. to probe the exact cap; it is split into objects of at most 1 MiB.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Gvk, Outcome, ReconcilerManifest, Request};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

const DEFAULT_TOTAL: usize = 20 << 20;
const PER_OBJECT: usize = 1 << 20;

/// `spec.totalBytes` of the parent, found without a JSON library.
fn requested_total(object: &str) -> Option<usize> {
    let at = object.find("\"totalBytes\"")? + "\"totalBytes\"".len();
    let rest = object[at..].trim_start().strip_prefix(':')?.trim_start();
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..digits].parse().ok()
}

/// One Deployment of exactly `size` bytes of JSON (at least its skeleton).
fn deployment(index: usize, size: usize) -> String {
    let head = format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"oversized-{index}","annotations":{{"example.operon.dev/padding":""#
    );
    let tail = r#""}}}"#;
    let padding = size.saturating_sub(head.len() + tail.len());
    let mut json = String::with_capacity(head.len() + padding + tail.len());
    json.push_str(&head);
    json.extend(std::iter::repeat_n('x', padding));
    json.push_str(tail);
    json
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "misbehave-oversized".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let mut remaining = requested_total(&request.object).unwrap_or(DEFAULT_TOTAL);
        let mut desired = Vec::new();
        while remaining > 0 {
            let size = remaining.min(PER_OBJECT);
            let object = deployment(desired.len(), size);
            remaining = remaining.saturating_sub(object.len());
            desired.push(object);
        }
        Ok(Outcome { desired, status: None, events: vec![], requeue_after_ms: None, finalized: false })
    }
}
