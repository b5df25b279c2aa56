//! A guest of contract 0.2 (`wit/`), built with wit-bindgen directly
//! (no SDK in between), so end-to-end tests see exactly what 0.2 hands a
//! guest and what the host does with its answers:
//!
//! - `status.now`: the request's clock; `status.count`: the cached count + 1
//!   (every reconcile is visible from outside);
//! - `status.related`: names of the related objects — ConfigMaps named by
//!   `spec.configRef` and those matched by `spec.selector`;
//! - `status.children`: `name=Readiness` of each child, as the host rated it;
//! - one child ConfigMap `<name>-child`, immutable, holding
//!   `spec.childData` (updated under the `recreate` strategy);
//! - with `spec.servicePort`, a child Service `<name>-svc` on that port
//!   (under `on-delete`: created, never changed);
//! - `spec.requeueAt`: returned as `requeue-at`;
//! - `spec.fail`: a terminal failure carrying `status.ready = false`.
//!
//! Reconciles `example.operon.dev/v1alpha1 Thing`.

wit_bindgen::generate!({ path: "../../../../wit/reconciler.wit", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{
    Failure, FailureDetail, Gvk, Mapping, Outcome, OwnedUpdate, ReadinessStatus, ReconcilerManifest, Request,
    UpdateStrategy, Watch,
};
use serde_json::{Value, json};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "clockwork".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("", "v1", "ConfigMap"), gvk("", "v1", "Service")],
            updates: vec![
                OwnedUpdate { kind: gvk("", "v1", "ConfigMap"), strategy: UpdateStrategy::Recreate },
                OwnedUpdate { kind: gvk("", "v1", "Service"), strategy: UpdateStrategy::OnDelete },
            ],
            watches: vec![
                Watch { kind: gvk("", "v1", "ConfigMap"), mapping: Mapping::Reference("spec.configRef".into()) },
                Watch { kind: gvk("", "v1", "ConfigMap"), mapping: Mapping::Selector("spec.selector".into()) },
            ],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: Value = serde_json::from_str(&request.object).map_err(|e| {
            Failure::Terminal(FailureDetail { message: format!("parent is not JSON: {e}"), status: None })
        })?;
        let spec = &parent["spec"];
        if spec["fail"].as_bool() == Some(true) {
            return Err(Failure::Terminal(FailureDetail {
                message: "spec.fail is set".into(),
                status: Some(json!({"ready": false, "reason": "Invalid", "now": request.now}).to_string()),
            }));
        }
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let mut related: Vec<String> = request
            .related
            .iter()
            .filter_map(|o| serde_json::from_str::<Value>(o).ok())
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        related.sort();
        related.dedup();
        let children: Vec<String> = request
            .children
            .iter()
            .flat_map(|c| &c.objects)
            .map(|c| {
                let o: Value = serde_json::from_str(&c.object).unwrap_or_default();
                let status = match c.readiness.status {
                    ReadinessStatus::Current => "Current",
                    ReadinessStatus::InProgress => "InProgress",
                    ReadinessStatus::Failed => "Failed",
                    ReadinessStatus::Terminating => "Terminating",
                    ReadinessStatus::Unknown => "Unknown",
                };
                format!("{}={status}", o["metadata"]["name"].as_str().unwrap_or_default())
            })
            .collect();
        let count = parent["status"]["count"].as_u64().unwrap_or(0) + 1;
        let child = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-child")},
            "immutable": true,
            "data": {"owner": name, "value": spec["childData"].as_str().unwrap_or("")}
        });
        let mut desired = vec![child.to_string()];
        if let Some(port) = spec["servicePort"].as_u64() {
            let service = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": format!("{name}-svc")},
                "spec": {"ports": [{"port": port}]}
            });
            desired.push(service.to_string());
        }
        Ok(Outcome {
            desired,
            status: Some(
                json!({"now": request.now, "count": count, "related": related, "children": children, "ready": true})
                    .to_string(),
            ),
            events: vec![],
            requeue_after_ms: None,
            requeue_at: spec["requeueAt"].as_str().map(str::to_string),
            finalized: false,
            needs_finalizer: false,
            parent_metadata: None,
        })
    }
}
