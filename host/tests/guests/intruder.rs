// Shared by the intruder test guests (each sets NAME and FOR, then includes
// this file): a plugin a hostile tenant writes, to try the host's grants
// from inside. It owns v1 ConfigMaps and Secrets, reads v1 Namespaces (cluster-scoped)
// and watches v1 ConfigMaps by the annotation `intruder/parent`. What it
// does depends on its parent's `spec.mode`:
//
// - `"read"`: `host.get` (with `spec.read.name`) or `host.list` of the kind
//   `spec.read` names (`group`, `version`, `kind`, optional `namespace`);
//   status `{"read": N}` (objects seen) or `{"readError": "<the host's
//   error>"}`;
// - `"echo"`: returns `spec.desired` as they are (objects it may not write);
// - `"children"` (or missing): status `{"children": [names]}`, the names of
//   the ConfigMaps the host handed it as its children.
//
// Every status also says `value`: the parent's `spec.value`, so a test
// knows which reconcile wrote it.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::host;
use operon::reconciler::types::{Failure, Gvk, Mapping, ObjectRef, Outcome, ReconcilerManifest, Request, Watch};
use serde_json::{Value, json};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

fn text(v: &Value, field: &str) -> String {
    v.get(field).and_then(Value::as_str).unwrap_or_default().to_string()
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        let (group, version, kind) = FOR;
        ReconcilerManifest {
            name: NAME.into(),
            for_: gvk(group, version, kind),
            owns: vec![gvk("", "v1", "ConfigMap"), gvk("", "v1", "Secret")],
            watches: vec![Watch {
                kind: gvk("", "v1", "ConfigMap"),
                mapping: Mapping::Annotation("intruder/parent".into()),
            }],
            reads: vec![gvk("", "v1", "Namespace")],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let parent: Value =
            serde_json::from_str(&request.object).map_err(|e| Failure::Terminal(format!("parent is not JSON: {e}")))?;
        let spec = &parent["spec"];
        let value = spec.get("value").cloned().unwrap_or(Value::Null);
        let (desired, mut status) = match spec["mode"].as_str().unwrap_or("children") {
            "read" => {
                let r = &spec["read"];
                let kind = gvk(&text(r, "group"), &text(r, "version"), &text(r, "kind"));
                let namespace = r.get("namespace").and_then(Value::as_str).map(str::to_string);
                let seen = match r.get("name").and_then(Value::as_str) {
                    Some(name) => {
                        host::get(&ObjectRef { kind, namespace, name: name.into() }).map(|o| usize::from(o.is_some()))
                    }
                    None => host::list(&kind, namespace.as_deref(), None).map(|l| l.len()),
                };
                let status = match seen {
                    Ok(n) => json!({"read": n}),
                    Err(e) => json!({"readError": e}),
                };
                (vec![], status)
            }
            "echo" => {
                let desired =
                    spec["desired"].as_array().map(|a| a.iter().map(Value::to_string).collect()).unwrap_or_default();
                (desired, json!({"echoed": true}))
            }
            _ => {
                let names: Vec<Value> = request
                    .children
                    .iter()
                    .flat_map(|c| c.objects.iter())
                    .filter_map(|o| serde_json::from_str::<Value>(o).ok())
                    .map(|o| o["metadata"]["name"].clone())
                    .collect();
                (vec![], json!({"children": names}))
            }
        };
        status["value"] = value;
        Ok(Outcome {
            desired,
            status: Some(status.to_string()),
            events: vec![],
            requeue_after_ms: None,
            finalized: request.finalizing,
        })
    }
}
