//! The WebApp's status: ready replicas and the `Ready` condition, from the
//! children's readiness the host hands in (contract 0.2).

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use operon_sdk::{ObjectKind, ReadinessStatus, Request};
use serde::Deserialize;

use crate::{Condition, WebAppSpec, WebAppStatus};

/// The fields of an existing Deployment this reconciler reads.
///
/// A slim view rather than `k8s_openapi::api::apps::v1::Deployment`: reading
/// the full type compiles the deserializer of the whole pod spec into the
/// component (about 600 KB of wasm), and parses fields nobody looks at.
/// Desired objects still use the k8s-openapi types, whose serializers are
/// needed anyway. Whether the rollout is done is the host's readiness, not
/// read here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Deployment {
    /// `spec.replicas` and the pod template's first container image.
    pub spec: Option<DeploymentSpec>,
    /// `status` (the readiness the host rates from all of it).
    pub status: Option<DeploymentStatus>,
}

impl ObjectKind for Deployment {
    const API_VERSION: &'static str = "apps/v1";
    const KIND: &'static str = "Deployment";
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
    /// Ready pods.
    pub ready_replicas: Option<i32>,
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

/// The type of the one condition.
pub const READY: &str = "Ready";

/// Whether the WebApp is ready, and why: `(status, reason, message)` of the
/// `Ready` condition.
///
/// The first that applies wins: a wanted child is missing; the Deployment
/// does not run the spec yet; a wanted child is not `Current` (the host's
/// readiness, kstatus's rules — no rollout arithmetic here); else ready.
pub fn verdict<K>(
    req: &Request<K>,
    spec: &WebAppSpec,
    deployment: Option<&Deployment>,
) -> (bool, &'static str, String) {
    let name = req.name();
    let mut wanted = vec![(Deployment::gvk(), "Deployment"), (Service::gvk(), "Service")];
    if spec.ingress.is_some() {
        wanted.push((Ingress::gvk(), "Ingress"));
    }
    let ready = ready_replicas(deployment);
    if let Some((_, kind)) = wanted.iter().find(|(gvk, _)| req.readiness_of(gvk, name).is_none()) {
        return (false, "Progressing", format!("{} {name} does not exist yet", kind.to_lowercase()));
    }
    if deployment.is_some_and(|d| d.replicas() != spec.replicas || d.image() != Some(spec.image.as_str())) {
        let counts = format!("{ready} of {} replicas ready", spec.replicas);
        return (false, "Progressing", format!("deployment {name} is being updated: {counts}"));
    }
    for (gvk, kind) in &wanted {
        let Some(rated) = req.readiness_of(gvk, name) else { continue };
        if rated.status != ReadinessStatus::Current {
            let reason = if rated.status == ReadinessStatus::Failed { "Failed" } else { "Progressing" };
            return (false, reason, format!("{kind} {name}: {}", rated.message));
        }
    }
    (true, "Available", format!("{ready} of {} replicas ready", spec.replicas))
}

/// `status.readyReplicas` of the Deployment (0 without one).
pub fn ready_replicas(deployment: Option<&Deployment>) -> i32 {
    deployment.and_then(|d| d.status.as_ref()).and_then(|s| s.ready_replicas).unwrap_or(0)
}

/// The new status: `observedGeneration`, `readyReplicas` and the `Ready`
/// condition of [`verdict`].
pub fn status<K>(
    req: &Request<K>,
    spec: &WebAppSpec,
    previous: Option<&WebAppStatus>,
    deployment: Option<&Deployment>,
) -> WebAppStatus {
    let (ready, reason, message) = verdict(req, spec, deployment);
    with_ready(req, previous, ready_replicas(deployment), ready, reason, message)
}

/// The status of a WebApp whose spec is invalid: `Ready` `False`,
/// `InvalidSpec`, with the failure's message — carried by the terminal
/// failure, so the WebApp says what is wrong while the host waits for a fix.
pub fn invalid<K>(
    req: &Request<K>,
    previous: Option<&WebAppStatus>,
    deployment: Option<&Deployment>,
    message: &str,
) -> WebAppStatus {
    with_ready(req, previous, ready_replicas(deployment), false, "InvalidSpec", message.to_owned())
}

/// A status with one `Ready` condition. `lastTransitionTime` is kept while
/// the condition's status stays the same, else it is the request's `now`
/// (the host's clock for this call, so the outcome stays a function of the
/// request).
fn with_ready<K>(
    req: &Request<K>,
    previous: Option<&WebAppStatus>,
    ready_replicas: i32,
    ready: bool,
    reason: &str,
    message: String,
) -> WebAppStatus {
    let value = if ready { "True" } else { "False" };
    let previous = previous.and_then(|status| status.conditions.iter().find(|condition| condition.type_ == READY));
    let last_transition_time = match previous {
        Some(condition) if condition.status == value => condition.last_transition_time.clone(),
        _ => req.now_rfc3339().to_owned(),
    };
    let generation = req.generation();
    WebAppStatus {
        observed_generation: generation,
        ready_replicas,
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
