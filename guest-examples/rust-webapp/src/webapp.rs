//! The `WebApp` custom resource (`example.operon.dev/v1alpha1`), as in
//! `crd.yaml`.

use operon_sdk::{Failure, ObjectKind};
use serde::{Deserialize, Serialize};

/// A web application: an image served by a Deployment, a Service in front of
/// it and, optionally, an Ingress.
///
/// Only `spec` and `status` are here: the SDK reads `metadata` itself
/// ([`operon_sdk::Request::metadata`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct WebApp {
    /// What the user wants.
    pub spec: WebAppSpec,
    /// What the reconciler last reported.
    #[serde(default)]
    pub status: Option<WebAppStatus>,
}

impl ObjectKind for WebApp {
    const API_VERSION: &'static str = "example.operon.dev/v1alpha1";
    const KIND: &'static str = "WebApp";
}

/// `spec` of a [`WebApp`]. Defaults match the CRD's, so an object that did
/// not go through the API server's defaulting reads the same.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebAppSpec {
    /// Container image, e.g. `nginx:1.27`. Required.
    pub image: String,
    /// Pod count.
    #[serde(default = "default_replicas")]
    pub replicas: i32,
    /// Port the container listens on, served by the Service under the same
    /// number.
    #[serde(default = "default_port")]
    pub port: i32,
    /// Environment variables of the container.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Expose the Service through an Ingress; none when absent.
    #[serde(default)]
    pub ingress: Option<IngressSpec>,
}

fn default_replicas() -> i32 {
    1
}

fn default_port() -> i32 {
    8080
}

/// One environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct EnvVar {
    /// Variable name.
    pub name: String,
    /// Value (empty when absent).
    #[serde(default)]
    pub value: String,
}

/// `spec.ingress`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    /// Host name, e.g. `shop.example.com`.
    pub host: String,
    /// URL path prefix; `/` when absent.
    #[serde(default)]
    pub path: Option<String>,
    /// IngressClass; the cluster default when absent.
    #[serde(default)]
    pub class_name: Option<String>,
}

/// `status` of a [`WebApp`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebAppStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default)]
    pub observed_generation: i64,
    /// Ready pods of the Deployment.
    #[serde(default)]
    pub ready_replicas: i32,
    /// `Ready`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A `metav1.Condition`. Timestamps stay text, so they round-trip exactly.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The generation the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// UpperCamelCase reason.
    pub reason: String,
    /// Human-readable text.
    pub message: String,
}

impl WebAppSpec {
    /// Checks what the CRD schema also checks, for objects that did not go
    /// through it (fixtures, an API server without the schema).
    ///
    /// # Errors
    ///
    /// Terminal: retrying an invalid spec cannot help.
    pub fn validate(&self) -> Result<(), Failure> {
        if self.image.trim().is_empty() {
            return Err(Failure::terminal("spec.image must not be empty"));
        }
        if self.replicas < 0 {
            return Err(Failure::terminal(format!("spec.replicas must be 0 or more, not {}", self.replicas)));
        }
        if !(1..=65535).contains(&self.port) {
            return Err(Failure::terminal(format!("spec.port must be between 1 and 65535, not {}", self.port)));
        }
        for (index, var) in self.env.iter().enumerate() {
            if var.name.is_empty() {
                return Err(Failure::terminal(format!("spec.env[{index}].name must not be empty")));
            }
            if self.env[..index].iter().any(|earlier| earlier.name == var.name) {
                return Err(Failure::terminal(format!("spec.env[{index}]: {} is set twice", var.name)));
            }
        }
        if let Some(ingress) = &self.ingress {
            if ingress.host.is_empty() {
                return Err(Failure::terminal("spec.ingress.host must not be empty"));
            }
            if ingress.path.as_deref().is_some_and(|path| !path.starts_with('/')) {
                return Err(Failure::terminal("spec.ingress.path must start with /"));
            }
        }
        Ok(())
    }
}
