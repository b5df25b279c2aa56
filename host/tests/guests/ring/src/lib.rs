//! One hop of the fleet benchmark's ring (`host/benches/fleet.rs`).
//!
//! A guest may write only its parent's status and owned children in the
//! parent's namespace, so a hop is pulled, not pushed: the Reconciler of
//! hop `i` reconciles the `Ring` of namespace `i + 1` and reads the `Ring`
//! of namespace `i` (its upstream). The upstream carries the annotation
//! `ring.operon.dev/downstream: <ns i+1>/<name>`, which the manifest's watch
//! maps to the downstream parent, so a change upstream reconciles the
//! downstream Ring at once and the upstream arrives in `request.related`.
//!
//! The value a Ring passes on is its `spec.value` when it has one (the
//! origin, set by the benchmark) and otherwise its `status.value` (copied
//! from its own upstream). The guest writes `status.value` of its parent:
//! nothing else, and nothing when the value is already there (the host
//! skips identical statuses), so the ring settles once the value is back
//! at the origin.

use operon_sdk::{Context, Failure, Gvk, Manifest, Mapping, Outcome, Reconciler, Request, raw};
use serde_json::{Value, json};

/// The annotation of an upstream Ring naming its downstream, `namespace/name`.
pub const DOWNSTREAM: &str = "ring.operon.dev/downstream";
/// The annotation of a Ring naming its upstream, `namespace/name`: read with
/// `host.get` when `request.related` does not carry it.
pub const UPSTREAM: &str = "ring.operon.dev/upstream";

struct Ring;

fn ring() -> Gvk {
    Gvk::new("bench.operon.dev", "v1alpha1", "Ring")
}

/// What a Ring passes on.
fn output(object: &Value) -> Value {
    match object.pointer("/spec/value") {
        Some(v) if !v.is_null() => v.clone(),
        _ => object.pointer("/status/value").cloned().unwrap_or(Value::Null),
    }
}

impl Reconciler for Ring {
    type Object = Value;

    fn manifest() -> Manifest {
        Manifest::new("ring", ring()).watches(ring(), Mapping::Annotation(DOWNSTREAM.into()))
    }

    fn reconcile(req: Request<Value>, ctx: &Context) -> Result<Outcome, Failure> {
        let mut upstream = req
            .raw_related()
            .iter()
            .filter_map(|text| serde_json::from_str::<Value>(text).ok())
            .find(|o| o.pointer("/kind").and_then(Value::as_str) == Some("Ring"));
        if upstream.is_none()
            && let Some((namespace, name)) = req.annotations().get(UPSTREAM).and_then(|v| v.split_once('/'))
        {
            let reference = raw::ObjectRef {
                kind: raw::Gvk { group: "bench.operon.dev".into(), version: "v1alpha1".into(), kind: "Ring".into() },
                namespace: Some(namespace.into()),
                name: name.into(),
            };
            upstream = ctx.get_ref::<Value>(&reference)?;
        }
        let Some(upstream) = upstream else {
            // Not wired yet (the upstream is created or annotated later):
            // its creation reconciles this Ring again.
            return Ok(Outcome::new());
        };
        let value = output(&upstream);
        if value.is_null() {
            return Ok(Outcome::new());
        }
        let from = upstream.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
        Ok(Outcome::new().status(json!({"value": value, "from": from})))
    }
}

operon_sdk::export!(Ring);
