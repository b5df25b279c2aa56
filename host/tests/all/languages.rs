//! Every language's WebApp against a real API server: a failure that
//! carries a status (contract 0.2) tells the truth on the parent, through
//! each SDK, and is replaced when the spec is fixed — never left stale
//! (issue #23).
//!
//! The WebApp CRD here keeps unknown fields (no schema), so a spec the
//! shipped schema would refuse reaches the guests, as it would on a cluster
//! whose CRD is older than the reconciler.

use crate::common;

use common::running::Running;
use common::{eventually, webapp_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// The WebApp CRD without its schema.
fn permissive_webapp_crd() -> CustomResourceDefinition {
    let mut crd = webapp_crd();
    for version in &mut crd.spec.versions {
        version.schema = Some(CustomResourceValidation {
            open_api_v3_schema: Some(JSONSchemaProps {
                type_: Some("object".into()),
                x_kubernetes_preserve_unknown_fields: Some(true),
                ..JSONSchemaProps::default()
            }),
        });
    }
    crd
}

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("languages", || operon_envtest::Options::default().crd(permissive_webapp_crd()))
}

/// `(status, reason, message)` of the `Ready` condition and the status's
/// `observedGeneration`, once they describe `generation`.
async fn ready_at(r: &Running, name: &str, generation: i64) -> Option<(String, String, String)> {
    let w = r.custom("WebApp").get(name).await.ok()?;
    let status = w.data.get("status")?;
    if status["observedGeneration"] != json!(generation) {
        return None;
    }
    let c = status["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Some((text(&c["status"]), text(&c["reason"]), text(&c["message"])))
}

async fn a_failure_carries_its_status(module: &str) {
    let r = Running::start(plane(), module, &format!("lang-{}", module.trim_end_matches("-webapp"))).await;
    let webapps = r.custom("WebApp");
    r.create("WebApp", "shop", json!({"replicas": 1})).await;
    let broken = eventually("Ready False, InvalidSpec, for generation 1", WAIT, || ready_at(&r, "shop", 1)).await;
    assert_eq!(
        broken,
        (
            "False".into(),
            "InvalidSpec".into(),
            format!("WebApp {}/shop is invalid: missing field `image`", r.namespace)
        ),
        "{module}"
    );

    // Fixed: the status follows the new generation (not the failure's).
    let fix = json!({"spec": {"image": "nginx:1.27"}});
    webapps.patch("shop", &PatchParams::default(), &Patch::Merge(&fix)).await.unwrap();
    let fixed = eventually("a status for generation 2", WAIT, || ready_at(&r, "shop", 2)).await;
    assert_eq!((fixed.0.as_str(), fixed.1.as_str()), ("False", "Progressing"), "{module}: {fixed:?}");

    // Broken again, another way: the failure's status replaces it.
    let blank = json!({"spec": {"image": " "}});
    webapps.patch("shop", &PatchParams::default(), &Patch::Merge(&blank)).await.unwrap();
    let again = eventually("InvalidSpec for generation 3", WAIT, || ready_at(&r, "shop", 3)).await;
    assert_eq!(again, ("False".into(), "InvalidSpec".into(), "spec.image must not be empty".into()), "{module}");
    r.stop().await;
}

#[tokio::test]
async fn rust_a_failure_carries_its_status_to_the_parent() {
    a_failure_carries_its_status("rust-webapp").await;
}

#[tokio::test]
async fn python_a_failure_carries_its_status_to_the_parent() {
    a_failure_carries_its_status("python-webapp").await;
}

#[tokio::test]
async fn typescript_a_failure_carries_its_status_to_the_parent() {
    a_failure_carries_its_status("ts-webapp").await;
}

#[tokio::test]
async fn go_a_failure_carries_its_status_to_the_parent() {
    a_failure_carries_its_status("go-webapp").await;
}

#[tokio::test]
async fn c_a_failure_carries_its_status_to_the_parent() {
    a_failure_carries_its_status("c-webapp").await;
}
