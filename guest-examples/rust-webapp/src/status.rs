//! The WebApp's status: ready replicas and the `Ready` condition, from the
//! Deployment the request carries.

use operon_sdk::ObjectKind;
use serde::Deserialize;

use crate::{Condition, WebAppSpec, WebAppStatus};

/// The fields of an existing Deployment this reconciler reads.
///
/// A slim view rather than `k8s_openapi::api::apps::v1::Deployment`: reading
/// the full type compiles the deserializer of the whole pod spec into the
/// component (about 600 KB of wasm), and parses fields nobody looks at.
/// Desired objects still use the k8s-openapi types, whose serializers are
/// needed anyway. Timestamps stay text: the API writes them in one format
/// (`2006-01-02T15:04:05Z`), so text order is time order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Deployment {
    /// `metadata.generation`.
    pub metadata: DeploymentMeta,
    /// `spec.replicas` and the pod template's first container image.
    pub spec: Option<DeploymentSpec>,
    /// `status`.
    pub status: Option<DeploymentStatus>,
}

impl ObjectKind for Deployment {
    const API_VERSION: &'static str = "apps/v1";
    const KIND: &'static str = "Deployment";
}

/// `metadata` of a [`Deployment`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DeploymentMeta {
    /// `metadata.generation`.
    pub generation: Option<i64>,
}

/// `spec` of a [`Deployment`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DeploymentSpec {
    /// `spec.replicas` (the API server defaults it to 1).
    pub replicas: Option<i32>,
    /// `spec.template`.
    pub template: PodTemplate,
}

/// `spec.template` of a [`Deployment`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PodTemplate {
    /// `spec.template.spec`.
    pub spec: PodSpec,
}

/// `spec.template.spec` of a [`Deployment`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PodSpec {
    /// The containers, of which only the image is read.
    pub containers: Vec<Container>,
}

/// One container of a [`Deployment`]'s pod template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Container {
    /// `image`.
    pub image: Option<String>,
}

/// `status` of a [`Deployment`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeploymentStatus {
    /// The generation the Deployment controller has acted on.
    pub observed_generation: Option<i64>,
    /// Pods of the current template.
    pub updated_replicas: Option<i32>,
    /// Ready pods.
    pub ready_replicas: Option<i32>,
    /// `Available`, `Progressing`, ...
    pub conditions: Vec<DeploymentCondition>,
}

/// The timestamps of one condition of a [`Deployment`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeploymentCondition {
    /// Last time the condition was updated.
    pub last_update_time: Option<String>,
    /// Last time the condition's status changed.
    pub last_transition_time: Option<String>,
}

impl Deployment {
    /// `spec.replicas`, 1 when unset (the API server's default).
    pub fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(1)
    }

    /// The first container's image.
    pub fn image(&self) -> Option<&str> {
        self.spec.as_ref()?.template.spec.containers.first()?.image.as_deref()
    }
}

/// What the existing Deployment says about the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// `status.readyReplicas` (0 without a Deployment).
    pub ready_replicas: i32,
    /// The Deployment exists.
    pub exists: bool,
    /// The Deployment already runs the spec (image, replicas), its controller
    /// has seen its latest generation and every replica is updated.
    pub current: bool,
}

impl Rollout {
    /// Reads the Deployment (if any) against the spec.
    pub fn observe(deployment: Option<&Deployment>, spec: &WebAppSpec) -> Rollout {
        let Some(deployment) = deployment else {
            return Rollout { ready_replicas: 0, exists: false, current: false };
        };
        let status = deployment.status.as_ref();
        let ready_replicas = status.and_then(|s| s.ready_replicas).unwrap_or(0);
        let updated_replicas = status.and_then(|s| s.updated_replicas).unwrap_or(0);
        let observed = status.and_then(|s| s.observed_generation).unwrap_or(0);
        let generation = deployment.metadata.generation.unwrap_or(0);
        Rollout {
            ready_replicas,
            exists: true,
            current: deployment.replicas() == spec.replicas
                && deployment.image() == Some(spec.image.as_str())
                && observed >= generation
                && updated_replicas >= spec.replicas,
        }
    }

    /// Whether the WebApp is ready: the rollout is current and at least
    /// `spec.replicas` pods are ready.
    pub fn ready(&self, spec: &WebAppSpec) -> bool {
        self.current && self.ready_replicas >= spec.replicas
    }
}

/// The type of the one condition.
pub const READY: &str = "Ready";

/// The new status.
///
/// `lastTransitionTime` must not read the clock (the outcome must be a
/// function of the request, or every reconcile would rewrite the status). It
/// is kept from the existing `Ready` condition while its status stays the
/// same. When the status changes, it is the latest time the request shows:
/// the newest of the Deployment's condition timestamps
/// (`lastUpdateTime`/`lastTransitionTime`, the Deployment controller's latest
/// change, which is usually what made this reconcile see the change), the
/// previous transition and the WebApp's `creationTimestamp`. That is a lower
/// bound of the real transition time, and never goes backwards.
pub fn status(
    spec: &WebAppSpec,
    generation: i64,
    creation_timestamp: Option<&str>,
    previous: Option<&WebAppStatus>,
    deployment: Option<&Deployment>,
    name: &str,
) -> WebAppStatus {
    let rollout = Rollout::observe(deployment, spec);
    let ready = rollout.ready(spec);
    let (value, reason) = if ready { ("True", "Available") } else { ("False", "Progressing") };
    let counts = format!("{} of {} replicas ready", rollout.ready_replicas, spec.replicas);
    let message = if ready {
        counts
    } else if !rollout.exists {
        format!("deployment {name} does not exist yet")
    } else if !rollout.current {
        format!("deployment {name} is being updated: {counts}")
    } else {
        counts
    };
    let previous = previous.and_then(|status| status.conditions.iter().find(|condition| condition.type_ == READY));
    let last_transition_time = match previous {
        Some(condition) if condition.status == value => condition.last_transition_time.clone(),
        _ => latest_time(deployment, previous, creation_timestamp),
    };
    WebAppStatus {
        observed_generation: generation,
        ready_replicas: rollout.ready_replicas,
        conditions: vec![Condition {
            type_: READY.to_owned(),
            status: value.to_owned(),
            observed_generation: Some(generation),
            last_transition_time,
            reason: reason.to_owned(),
            message,
        }],
    }
}

/// The newest timestamp among the Deployment's conditions, the previous
/// `Ready` transition and the WebApp's creation (the epoch if there is none
/// at all, which no object from an API server lacks).
fn latest_time(
    deployment: Option<&Deployment>,
    previous: Option<&Condition>,
    creation_timestamp: Option<&str>,
) -> String {
    let deployment_times = deployment
        .and_then(|deployment| deployment.status.as_ref())
        .into_iter()
        .flat_map(|status| &status.conditions)
        .flat_map(|condition| [condition.last_update_time.as_deref(), condition.last_transition_time.as_deref()]);
    deployment_times
        .chain([previous.map(|condition| condition.last_transition_time.as_str()), creation_timestamp])
        .flatten()
        .max()
        .unwrap_or("1970-01-01T00:00:00Z")
        .to_owned()
}
