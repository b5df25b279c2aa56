//! Admission: what a WebApp must be before the API server stores it, and
//! what is defaulted. Every language's WebApp implements exactly these
//! rules (the fixtures in `guest-examples/webapp/fixtures/admission` pin
//! them):
//!
//! - **validate**, for `CREATE` and `UPDATE` (a `DELETE` or `CONNECT` is
//!   accepted, no warnings), checks in this order, the first failure
//!   refusing the request (no status code, so 403):
//!   1. `spec.image` missing or blank → `spec.image must not be empty`;
//!   2. `spec.replicas` present and not an integer in 0..=50 →
//!      `spec.replicas must be between 0 and 50, not {value}`;
//!   3. `spec.port` present and not an integer in 1..=65535 →
//!      `spec.port must be between 1 and 65535, not {value}`.
//!
//!   A `null` field counts as absent; an integral float (`3.0`) counts as an
//!   integer; the refused value is quoted as JSON text (`not 51`, `not "x"`).
//! - **mutate**, for `CREATE` and `UPDATE`: when `spec.port` is absent or
//!   `null`, the whole object with `spec.port: 8080`; otherwise unchanged.
//!
//! The rules work on JSON values, not on [`WebApp`](crate::WebApp): what
//! they refuse (`replicas: "x"`) would not even parse into it.

use operon_sdk::admission::Operation;
use operon_sdk::{AdmissionReview, Denial};
use serde_json::{Map, Value};

/// Most replicas a WebApp may ask for.
pub const MAX_REPLICAS: i64 = 50;
/// The port a WebApp gets when it names none.
pub const DEFAULT_PORT: i64 = 8080;

/// The WebApp's `validate`.
///
/// # Errors
///
/// The first rule the object breaks.
pub fn validate(review: &AdmissionReview) -> Result<Vec<String>, Denial> {
    if matches!(review.operation, Operation::Delete | Operation::Connect) {
        return Ok(Vec::new());
    }
    let spec = review.object.as_ref().and_then(|object| object.get("spec")).and_then(Value::as_object);
    let image = field(spec, "image").and_then(Value::as_str);
    if image.is_none_or(|image| image.trim().is_empty()) {
        return Err(Denial::new("spec.image must not be empty"));
    }
    if let Some(replicas) = field(spec, "replicas")
        && !integer_in(replicas, 0, MAX_REPLICAS)
    {
        return Err(Denial::new(format!("spec.replicas must be between 0 and {MAX_REPLICAS}, not {replicas}")));
    }
    if let Some(port) = field(spec, "port")
        && !integer_in(port, 1, 65535)
    {
        return Err(Denial::new(format!("spec.port must be between 1 and 65535, not {port}")));
    }
    Ok(Vec::new())
}

/// The WebApp's `mutate`: defaults `spec.port`.
pub fn mutate(review: AdmissionReview) -> Option<Value> {
    if !matches!(review.operation, Operation::Create | Operation::Update) {
        return None;
    }
    let mut object = review.object?;
    let root = object.as_object_mut()?;
    let spec = root.entry("spec").or_insert(Value::Null);
    if spec.is_null() {
        *spec = Value::Object(Map::new());
    }
    let spec = spec.as_object_mut()?;
    if spec.get("port").is_some_and(|port| !port.is_null()) {
        return None;
    }
    spec.insert("port".to_owned(), Value::from(DEFAULT_PORT));
    Some(object)
}

/// A field of the spec; `null` counts as absent.
fn field<'a>(spec: Option<&'a Map<String, Value>>, name: &str) -> Option<&'a Value> {
    spec?.get(name).filter(|value| !value.is_null())
}

/// Whether `value` is an integer (an integral float counts) in `low..=high`.
fn integer_in(value: &Value, low: i64, high: i64) -> bool {
    if let Some(n) = value.as_i64() {
        return (low..=high).contains(&n);
    }
    match value.as_f64() {
        Some(f) => f.fract() == 0.0 && f >= low as f64 && f <= high as f64,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use operon_sdk::testing::{self, FakeCluster};
    use serde_json::json;

    fn webapp(spec: Value) -> Value {
        json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "shop", "namespace": "default"}, "spec": spec})
    }

    fn check(spec: Value) -> Result<Vec<String>, String> {
        let review = testing::review(webapp(spec)).build();
        testing::validate::<crate::WebAppReconciler>(&FakeCluster::new(), review).map_err(|d| d.message().to_owned())
    }

    #[test]
    fn validate_should_check_image_then_replicas_then_port() {
        assert_eq!(check(json!({"image": "nginx", "replicas": 3, "port": 80})), Ok(vec![]));
        assert_eq!(check(json!({"replicas": 99, "port": 0})), Err("spec.image must not be empty".into()));
        assert_eq!(check(json!({"image": " \t"})), Err("spec.image must not be empty".into()));
        assert_eq!(
            check(json!({"image": "nginx", "replicas": 51, "port": 0})),
            Err("spec.replicas must be between 0 and 50, not 51".into())
        );
        assert_eq!(
            check(json!({"image": "nginx", "port": 70000})),
            Err("spec.port must be between 1 and 65535, not 70000".into())
        );
    }

    #[test]
    fn validate_should_quote_refused_values_as_json() {
        assert_eq!(
            check(json!({"image": "nginx", "replicas": "x"})),
            Err(r#"spec.replicas must be between 0 and 50, not "x""#.into())
        );
        assert_eq!(
            check(json!({"image": "nginx", "replicas": 2.5})),
            Err("spec.replicas must be between 0 and 50, not 2.5".into())
        );
        assert_eq!(
            check(json!({"image": "nginx", "port": true})),
            Err("spec.port must be between 1 and 65535, not true".into())
        );
    }

    #[test]
    fn validate_should_take_null_as_absent_and_integral_floats_as_integers() {
        assert_eq!(check(json!({"image": "nginx", "replicas": null, "port": null})), Ok(vec![]));
        assert_eq!(check(json!({"image": "nginx", "replicas": 3.0, "port": 8080.0})), Ok(vec![]));
        assert_eq!(check(json!({"image": "nginx", "replicas": 0, "port": 65535})), Ok(vec![]));
        assert_eq!(check(json!({"image": "nginx", "replicas": 50, "port": 1})), Ok(vec![]));
    }

    #[test]
    fn validate_should_accept_deletes_without_looking() {
        let review = testing::review(webapp(json!({"replicas": 99}))).delete().build();
        assert_eq!(testing::validate::<crate::WebAppReconciler>(&FakeCluster::new(), review), Ok(vec![]));
    }

    #[test]
    fn mutate_should_default_the_port_only_when_absent() {
        let mutate = |review| testing::mutate::<crate::WebAppReconciler>(&FakeCluster::new(), review).unwrap();
        let defaulted = mutate(testing::review(webapp(json!({"image": "nginx"}))).build()).unwrap();
        assert_eq!(defaulted, webapp(json!({"image": "nginx", "port": 8080})));
        let null = mutate(testing::review(webapp(json!({"image": "nginx", "port": null}))).build()).unwrap();
        assert_eq!(null["spec"]["port"], 8080);
        assert_eq!(mutate(testing::review(webapp(json!({"image": "nginx", "port": 80}))).build()), None);
        let mut no_spec = webapp(json!(null));
        no_spec.as_object_mut().unwrap().remove("spec");
        assert_eq!(mutate(testing::review(no_spec).build()).unwrap()["spec"], json!({"port": 8080}));
        let deleting = testing::review(webapp(json!({"image": "nginx"}))).delete().build();
        assert_eq!(mutate(deleting), None);
    }
}
