//! The {{name}} reconciler: a `Greeting` (`demo.operon.dev/v1alpha1`, see
//! `crd.yaml`) wants a ConfigMap `<name>-greeting` holding `spec.message`,
//! and reports `status.observedGeneration` and `status.published` (whether
//! that ConfigMap exists). An empty message is a terminal failure: retrying
//! cannot help, so the host waits until the Greeting changes.
//!
//! `cargo test` runs the unit tests below and `fixtures/` natively;
//! `operon build` makes `dist/{{name}}.wasm`; `operon test` runs `fixtures/`
//! through the component.

use operon_sdk::{Context, Failure, Manifest, ObjectKind, Outcome, Reconciler, Request};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The parent, as the reconciler reads it (metadata is on the [`Request`]).
#[derive(Debug, Deserialize)]
pub struct Greeting {
    /// What the user asked for.
    pub spec: GreetingSpec,
}

// The spec is also the kind's schema: natively, kube's `CustomResource`
// derive makes `GreetingResource` from it (with `GreetingStatus`), whose CRD
// `src/bin/crdgen.rs` prints and `operon build` writes to `crd.yaml`. The
// component (wasm) links none of it. Doc comments become the schema's
// descriptions (`kubectl explain greeting.spec`).

/// What a Greeting asks for.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(Serialize, schemars::JsonSchema, kube::CustomResource))]
#[cfg_attr(
    not(target_arch = "wasm32"),
    kube(
        group = "demo.operon.dev",
        version = "v1alpha1",
        kind = "Greeting",
        root = "GreetingResource",
        namespaced,
        status = "GreetingStatus",
        printcolumn(name = "Message", type_ = "string", json_path = ".spec.message"),
        printcolumn(name = "Published", type_ = "boolean", json_path = ".status.published")
    )
)]
pub struct GreetingSpec {
    /// The text to publish in the ConfigMap <name>-greeting.
    pub message: String,
}

impl ObjectKind for Greeting {
    const API_VERSION: &'static str = "demo.operon.dev/v1alpha1";
    const KIND: &'static str = "Greeting";
}

/// The child: a ConfigMap with the fields this reconciler writes. (With the
/// SDK's `k8s-openapi` feature, `k8s_openapi::api::core::v1::ConfigMap`
/// works as well.)
#[derive(Debug, Serialize)]
pub struct ConfigMap {
    /// Only the name: the host sets the namespace and the owner reference.
    pub metadata: Name,
    /// The published message.
    pub data: BTreeMap<String, String>,
}

/// `metadata` with a name only.
#[derive(Debug, Serialize)]
pub struct Name {
    /// The object's name.
    pub name: String,
}

impl ObjectKind for ConfigMap {
    const API_VERSION: &'static str = "v1";
    const KIND: &'static str = "ConfigMap";
}

/// What the reconciler reports about a Greeting.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(Deserialize, schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct GreetingStatus {
    /// The generation this status describes.
    pub observed_generation: i64,
    /// Whether the ConfigMap exists.
    pub published: bool,
}

/// The reconciler.
pub struct GreetingReconciler;

impl Reconciler for GreetingReconciler {
    type Object = Greeting;

    fn manifest() -> Manifest {
        Manifest::new("{{name}}", Greeting::gvk()).owns(ConfigMap::gvk())
    }

    fn reconcile(req: Request<Greeting>, ctx: &Context) -> Result<Outcome, Failure> {
        let message = &req.object.spec.message;
        if message.is_empty() {
            return Err(Failure::terminal("spec.message must not be empty"));
        }
        let name = format!("{}-greeting", req.name());
        ctx.debug(format_args!("publishing greeting in {name}"));
        let published = req.has_child::<ConfigMap>(&name);
        let config_map = ConfigMap { metadata: Name { name }, data: [("message".to_owned(), message.clone())].into() };
        Ok(Outcome::new()
            .apply_kind(config_map)
            .status(GreetingStatus { observed_generation: req.generation(), published }))
    }
}

operon_sdk::export!(GreetingReconciler);

#[cfg(test)]
mod tests {
    use super::*;
    use operon_sdk::testing::{self, FakeCluster};
    use serde_json::{Value, json};

    fn greeting(message: &str) -> Value {
        json!({
            "apiVersion": "demo.operon.dev/v1alpha1",
            "kind": "Greeting",
            "metadata": {"name": "hello", "namespace": "default", "generation": 2},
            "spec": {"message": message},
        })
    }

    #[test]
    fn the_message_should_be_published_in_a_configmap() {
        let request = testing::request(greeting("hi")).build::<GreetingReconciler>();
        let outcome = testing::reconcile::<GreetingReconciler>(&FakeCluster::new(), request).unwrap();
        let config_map = outcome.find("ConfigMap", "hello-greeting").expect("the ConfigMap");
        assert_eq!(config_map["data"], json!({"message": "hi"}));
        assert_eq!(outcome.status, Some(json!({"observedGeneration": 2, "published": false})));
    }

    #[test]
    fn an_empty_message_should_be_a_terminal_failure() {
        let request = testing::request(greeting("")).build::<GreetingReconciler>();
        let failure = testing::reconcile::<GreetingReconciler>(&FakeCluster::new(), request).unwrap_err();
        assert_eq!(failure, Failure::terminal("spec.message must not be empty"));
    }
}
