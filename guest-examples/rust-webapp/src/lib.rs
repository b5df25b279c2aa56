//! Example Operon reconciler: a `WebApp` (`example.operon.dev/v1alpha1`, see
//! `crd.yaml`) yields a Deployment, a ClusterIP Service and, when
//! `spec.ingress` is set, an Ingress.
//!
//! # Behaviour
//!
//! - **Children**: all named after the WebApp, labelled
//!   `app.kubernetes.io/name=<name>` and `app.kubernetes.io/managed-by=operon`
//!   ([`children`]). Removing `spec.ingress` drops the Ingress from the
//!   outcome, and the host deletes it.
//! - **Status**: `observedGeneration`, `readyReplicas` from the Deployment
//!   and a `Ready` condition ([`status::verdict`]): `True`/`Available` once
//!   every wanted child exists, the Deployment runs the current spec and the
//!   host rates every child `Current` (contract 0.2's readiness, kstatus's
//!   rules — no rollout arithmetic in the guest); otherwise `False` with
//!   `Progressing` (or `Failed`, when a child failed) and the child's
//!   message. Its `lastTransitionTime` is kept while the condition holds,
//!   else the request's `now`, so the outcome is a function of the request.
//! - **Events**, only when something is about to change, so a steady state
//!   records none: `Created` (first reconcile), `Scaled` (replicas differ
//!   from the Deployment's), `Updated` (image differs), `IngressCreated`,
//!   `IngressRemoved`, `Available` (the `Ready` condition turns `True`), and
//!   `Cleanup` when the WebApp is deleted.
//! - **No requeue**: the Deployment is owned, so every change of its status
//!   reconciles the WebApp again; polling would add load and no information.
//! - **Failures**: a spec that does not parse or validate is terminal (the
//!   host waits for the WebApp to change), and carries a status whose
//!   `Ready` condition is `False`/`InvalidSpec` with the reason.
//! - **Deletion**: with the finalizer `example.operon.dev/cleanup` (every
//!   outcome says it is needed), a deleted WebApp gets a `Cleanup` event, no
//!   children, and `finalized`.
//! - **Admission** ([`admission`]): the component is exported `with
//!   admission`; it refuses an empty image, replicas outside 0..=50 and
//!   ports outside 1..=65535, and defaults `spec.port` to 8080.
//! - **Conversion** ([`conversion`]): between `v1alpha1` and `v1`, which
//!   keeps the container's fields under `spec.container`.

pub mod admission;
pub mod children;
pub mod conversion;
pub mod status;
mod webapp;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use operon_sdk::{AdmissionReview, Context, Denial, Failure, Manifest, ObjectKind, Outcome, Reconciler, Request};

pub use webapp::{Condition, EnvVar, IngressSpec, WebApp, WebAppSpec, WebAppStatus};

/// The finalizer the host adds to every WebApp.
pub const FINALIZER: &str = "example.operon.dev/cleanup";

/// The WebApp reconciler.
#[derive(Debug)]
pub struct WebAppReconciler;

impl Reconciler for WebAppReconciler {
    type Object = Unchecked;

    fn manifest() -> Manifest {
        Manifest::new("webapp", WebApp::gvk())
            .owns(Deployment::gvk())
            .owns(Service::gvk())
            .owns(Ingress::gvk())
            .finalizer(FINALIZER)
    }

    fn reconcile(req: Request<Unchecked>, _ctx: &Context) -> Result<Outcome, Failure> {
        let name = req.name();
        if req.finalizing {
            // Nothing outside the cluster to clean up; the children go with
            // the WebApp (the host prunes them, their ownerReferences too).
            return Ok(Outcome::new()
                .event("Cleanup", format!("webapp {name} deleted; its children are deleted with it"))
                .finalized());
        }
        // Read through a slim view of the Deployment (see `status::Deployment`).
        let existing = req.child::<status::Deployment>(name)?;
        // The parent is typed here rather than by the SDK, so that an invalid
        // spec fails with a status that says so (the SDK's parse would fail
        // before `reconcile` runs, with nothing to write).
        let previous = req.object.status.as_ref().and_then(|s| serde_json::from_str::<WebAppStatus>(s.get()).ok());
        let invalid = |message: String| {
            let status = status::invalid(&req, previous.as_ref(), existing.as_ref(), &message);
            Failure::terminal(message).with_status(status)
        };
        let spec = match &req.object.spec {
            None => Err("missing field `spec`".to_owned()),
            Some(spec) => {
                serde_json::from_str::<WebAppSpec>(spec.get()).map_err(|e| Failure::from(e).message().to_owned())
            }
        };
        let spec = &spec.map_err(|error| invalid(format!("{} is invalid: {error}", describe(&req))))?;
        spec.validate().map_err(|failure| invalid(failure.message().to_owned()))?;

        let had_ingress = req.has_child::<Ingress>(name);
        let status = status::status(&req, spec, previous.as_ref(), existing.as_ref());
        let mut outcome = Outcome::new().apply(children::deployment(name, spec)).apply(children::service(name, spec));
        if let Some(ingress) = children::ingress(name, spec) {
            outcome = outcome.apply(ingress);
        }
        for (reason, message) in events(name, spec, existing.as_ref(), had_ingress, previous.as_ref(), &status) {
            outcome = outcome.event(reason, message);
        }
        Ok(outcome.status(status).needs_finalizer(true))
    }

    fn convert(objects: Vec<serde_json::Value>, desired_api_version: &str) -> Result<Vec<serde_json::Value>, String> {
        conversion::convert(objects, desired_api_version)
    }

    fn validate(review: AdmissionReview, _ctx: &Context) -> Result<Vec<String>, Denial> {
        admission::validate(&review)
    }

    fn mutate(review: AdmissionReview, _ctx: &Context) -> Result<Option<serde_json::Value>, Denial> {
        Ok(admission::mutate(review))
    }
}

/// The events of one reconcile: what the outcome is about to change.
fn events(
    name: &str,
    spec: &WebAppSpec,
    existing: Option<&status::Deployment>,
    had_ingress: bool,
    previous: Option<&WebAppStatus>,
    status: &WebAppStatus,
) -> Vec<(&'static str, String)> {
    let mut events = Vec::new();
    match existing {
        None => events
            .push(("Created", format!("creating deployment and service {name} ({} x {})", spec.replicas, spec.image))),
        Some(current) => {
            let replicas = current.replicas();
            if replicas != spec.replicas {
                events.push((
                    "Scaled",
                    format!("scaling deployment {name} from {replicas} to {} replicas", spec.replicas),
                ));
            }
            let image = current.image().unwrap_or("");
            if image != spec.image {
                events.push(("Updated", format!("updating deployment {name} from image {image} to {}", spec.image)));
            }
        }
    }
    match (&spec.ingress, had_ingress) {
        (Some(ingress), false) => events.push((
            "IngressCreated",
            format!("exposing service {name} at {}{}", ingress.host, ingress.path.as_deref().unwrap_or("/")),
        )),
        (None, true) => events.push(("IngressRemoved", format!("deleting ingress {name}: spec.ingress was removed"))),
        _ => {}
    }
    let is_ready = |status: &WebAppStatus| {
        status.conditions.iter().any(|condition| condition.type_ == status::READY && condition.status == "True")
    };
    if is_ready(status) && !previous.is_some_and(is_ready) {
        events.push(("Available", format!("all {} replicas of {name} are ready", spec.replicas)));
    }
    events
}

/// A WebApp as the SDK hands it in: `spec` and `status` not typed yet, so
/// that a spec that does not fit [`WebAppSpec`] fails *with* a status
/// (`reconcile` types them; the SDK's own parse would fail before it runs,
/// with nothing to write). Metadata is the SDK's ([`Request::metadata`]).
/// Kept as JSON text, not parsed twice.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Unchecked {
    /// `spec`, as sent.
    #[serde(default)]
    pub spec: Option<Box<serde_json::value::RawValue>>,
    /// `status`, as sent.
    #[serde(default)]
    pub status: Option<Box<serde_json::value::RawValue>>,
}

/// `WebApp default/shop`, as the SDK names an object in its messages.
fn describe<K>(req: &Request<K>) -> String {
    match req.namespace() {
        Some(namespace) => format!("WebApp {namespace}/{}", req.name()),
        None => format!("WebApp {}", req.name()),
    }
}

operon_sdk::export!(WebAppReconciler with admission, conversion);

#[cfg(test)]
mod tests;
