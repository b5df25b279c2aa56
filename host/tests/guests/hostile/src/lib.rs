//! A plugin written to misbehave, in the way its parent's `spec.mode` names,
//! so the hostile-plugin suite and benchmark can run every attack from one
//! module beside a well-behaved neighbour:
//!
//! - `"calm"` (or missing): a well-behaved reconcile, status `{"calm": true}`;
//! - `"loop"`: spins forever;
//! - `"memory"`: allocates 1 MiB chunks forever;
//! - `"trap"`: executes `unreachable`;
//! - `"giant"`: returns `spec.bytes` (default 8 MiB) of ConfigMaps;
//! - `"flood"`: calls `host.list` and `host.get` of v1 ConfigMap up to
//!   `spec.calls` times (default 1 000 000) and returns the first error as
//!   `transient(<error>)`, or status `{"calls": N}` if none came;
//! - `"read-secret"`: `host.get` of a v1 Secret (not declared) and returns
//!   the host's error as `transient(<error>)`;
//! - `"requeue"`: status `{"count": n + 1}` and requeue-after 0 ms;
//! - `"echo"`: returns `spec.desired` as they are (to aim at kinds,
//!   namespaces and cluster-scoped objects it may not write).
//!
//! Reconciles `example.operon.dev/v1alpha1 Thing`; owns v1 ConfigMap and the
//! cluster-scoped v1 Namespace.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::host;
use operon::reconciler::types::{Failure, Gvk, ObjectRef, Outcome, ReconcilerManifest, Request};
use serde_json::{Value, json};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

fn outcome(status: Value) -> Outcome {
    Outcome {
        desired: vec![],
        status: Some(status.to_string()),
        events: vec![],
        requeue_after_ms: None,
        finalized: false,
    }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "hostile".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("", "v1", "ConfigMap"), gvk("", "v1", "Namespace")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        let spec = &parent["spec"];
        match spec["mode"].as_str().unwrap_or("calm") {
            "loop" => {
                let mut spins: u64 = 0;
                loop {
                    spins = std::hint::black_box(spins).wrapping_add(1);
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(std::hint::black_box(vec![0xA5u8; 1 << 20]));
                    std::hint::black_box(&hoard);
                }
            }
            "trap" => trap(),
            "giant" => {
                let total = spec["bytes"].as_u64().unwrap_or(8 << 20) as usize;
                let per = 512 << 10;
                let desired = (0..total.div_ceil(per))
                    .map(|i| {
                        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("giant-{i}")},
                            "data": {"padding": "x".repeat(per)}})
                        .to_string()
                    })
                    .collect();
                Ok(Outcome { desired, ..outcome(json!({})) })
            }
            "flood" => {
                let calls = spec["calls"].as_u64().unwrap_or(1_000_000);
                let configmap = gvk("", "v1", "ConfigMap");
                for i in 0..calls {
                    let result = if i % 2 == 0 {
                        host::list(&configmap, None, None).map(drop)
                    } else {
                        let r = ObjectRef { kind: configmap.clone(), namespace: None, name: format!("cm-{i}") };
                        host::get(&r).map(drop)
                    };
                    if let Err(e) = result {
                        return Err(Failure::Transient(format!("after {i} host calls: {e}")));
                    }
                }
                Ok(outcome(json!({"calls": calls})))
            }
            "read-secret" => {
                let secret = ObjectRef { kind: gvk("", "v1", "Secret"), namespace: None, name: "admin-token".into() };
                match host::get(&secret) {
                    Err(e) => Err(Failure::Transient(e)),
                    Ok(_) => Err(Failure::Terminal("host.get of an undeclared v1 Secret was allowed".into())),
                }
            }
            "requeue" => {
                let count = parent.pointer("/status/count").and_then(Value::as_u64).unwrap_or(0);
                Ok(Outcome { requeue_after_ms: Some(0), ..outcome(json!({"count": count + 1})) })
            }
            "echo" => {
                let desired =
                    spec["desired"].as_array().map(|a| a.iter().map(Value::to_string).collect()).unwrap_or_default();
                Ok(Outcome { desired, ..outcome(json!({"echoed": true})) })
            }
            _ => Ok(outcome(json!({"calm": true}))),
        }
    }
}

/// A wasm trap (`unreachable`); natively (the workspace's `cargo test`
/// compiles every member) an abort.
fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    unreachable!("the hostile guest traps only when built for wasm32");
}
