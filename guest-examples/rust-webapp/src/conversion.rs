//! Conversion between the WebApp's versions: `v1alpha1` keeps the
//! container's fields at the top of `spec` (`image`, `port`, `env`), `v1`
//! under `spec.container`. Everything else (metadata, status, the other
//! spec fields) is carried over as it is, so a round trip loses nothing.

use serde_json::{Map, Value};

/// `example.operon.dev/v1alpha1`: what the reconciler reconciles.
pub const V1ALPHA1: &str = "example.operon.dev/v1alpha1";
/// `example.operon.dev/v1`.
pub const V1: &str = "example.operon.dev/v1";
/// The fields `v1` keeps under `spec.container`.
const CONTAINER_FIELDS: [&str; 3] = ["image", "port", "env"];

/// Converts every object to `desired`.
///
/// # Errors
///
/// A desired version or an object that is not one of the two versions of
/// WebApp: the API server shows the message.
pub fn convert(objects: Vec<Value>, desired: &str) -> Result<Vec<Value>, String> {
    let versions = format!("WebApp has versions {V1ALPHA1} and {V1}");
    if desired != V1ALPHA1 && desired != V1 {
        return Err(format!("cannot convert to {desired}: {versions}"));
    }
    objects
        .into_iter()
        .map(|mut object| {
            let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            if kind != "WebApp" || (api_version != V1ALPHA1 && api_version != V1) {
                return Err(format!("cannot convert {api_version} {kind}: {versions}"));
            }
            if api_version != desired {
                if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                    if desired == V1 { nest(spec) } else { flatten(spec) }
                }
                object["apiVersion"] = Value::String(desired.to_owned());
            }
            Ok(object)
        })
        .collect()
}

/// `v1alpha1` → `v1`: the container's fields move under `spec.container`.
fn nest(spec: &mut Map<String, Value>) {
    let container: Map<String, Value> =
        CONTAINER_FIELDS.iter().filter_map(|field| spec.remove(*field).map(|v| ((*field).to_owned(), v))).collect();
    if !container.is_empty() {
        spec.insert("container".to_owned(), Value::Object(container));
    }
}

/// `v1` → `v1alpha1`: `spec.container`'s fields move up into `spec`.
fn flatten(spec: &mut Map<String, Value>) {
    if let Some(Value::Object(container)) = spec.remove("container") {
        spec.extend(container);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn webapp(api_version: &str, spec: Value) -> Value {
        json!({"apiVersion": api_version, "kind": "WebApp", "metadata": {"name": "shop", "uid": "u"},
               "spec": spec, "status": {"readyReplicas": 2}})
    }

    #[test]
    fn a_round_trip_should_lose_nothing() {
        let old = webapp(V1ALPHA1, json!({"image": "nginx:1.27", "port": 8080, "replicas": 2, "env": []}));
        let new = convert(vec![old.clone()], V1).unwrap().remove(0);
        assert_eq!(
            new,
            webapp(V1, json!({"container": {"image": "nginx:1.27", "port": 8080, "env": []}, "replicas": 2}))
        );
        assert_eq!(convert(vec![new], V1ALPHA1).unwrap(), [old]);
    }

    #[test]
    fn an_object_at_the_desired_version_should_be_returned_as_it_is() {
        let same = webapp(V1, json!({"replicas": 1}));
        assert_eq!(convert(vec![same.clone()], V1).unwrap(), [same]);
        let bare = webapp(V1ALPHA1, json!({"replicas": 1}));
        assert_eq!(convert(vec![bare], V1).unwrap()[0]["spec"], json!({"replicas": 1}), "no empty container");
    }

    #[test]
    fn other_versions_and_kinds_should_be_refused_by_name() {
        assert_eq!(
            convert(vec![], "example.operon.dev/v2").unwrap_err(),
            "cannot convert to example.operon.dev/v2: WebApp has versions example.operon.dev/v1alpha1 and example.operon.dev/v1"
        );
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert!(convert(vec![other], V1).unwrap_err().starts_with("cannot convert v1 ConfigMap: "));
    }
}
