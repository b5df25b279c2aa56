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
//!   and a `Ready` condition ([`status::status`]): `True`/`Available` once the
//!   Deployment runs the current spec with every replica ready, otherwise
//!   `False`/`Progressing`. Its `lastTransitionTime` is derived from the
//!   request, never from the clock, so the outcome is deterministic: kept
//!   while the condition holds, else the latest time the request shows.
//! - **Events**, only when something is about to change, so a steady state
//!   records none: `Created` (first reconcile), `Scaled` (replicas differ
//!   from the Deployment's), `Updated` (image differs), `IngressCreated`,
//!   `IngressRemoved`, `Available` (the `Ready` condition turns `True`), and
//!   `Cleanup` when the WebApp is deleted.
//! - **No requeue**: the Deployment is owned, so every change of its status
//!   reconciles the WebApp again; polling would add load and no information.
//! - **Failures**: a spec that does not parse or validate is terminal (the
//!   host waits for the WebApp to change).
//! - **Deletion**: with the finalizer `example.operon.dev/cleanup`, a deleted
//!   WebApp gets a `Cleanup` event, no children, and `finalized`.
//! - **Admission** ([`admission`]): the component is exported `with
//!   admission`; it refuses an empty image, replicas outside 0..=50 and
//!   ports outside 1..=65535, and defaults `spec.port` to 8080.

pub mod admission;
pub mod children;
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
    type Object = WebApp;

    fn manifest() -> Manifest {
        Manifest::new("webapp", WebApp::gvk())
            .owns(Deployment::gvk())
            .owns(Service::gvk())
            .owns(Ingress::gvk())
            .finalizer(FINALIZER)
    }

    fn reconcile(req: Request<WebApp>, _ctx: &Context) -> Result<Outcome, Failure> {
        let name = req.name();
        if req.finalizing {
            // Nothing outside the cluster to clean up; the children go with
            // the WebApp (the host prunes them, their ownerReferences too).
            return Ok(Outcome::new()
                .event("Cleanup", format!("webapp {name} deleted; its children are deleted with it"))
                .finalized());
        }
        let spec = &req.object.spec;
        spec.validate()?;

        // Read through a slim view of the Deployment (see `status::Deployment`).
        let existing = req.child::<status::Deployment>(name)?;
        let had_ingress = req.has_child::<Ingress>(name);
        let previous = req.object.status.as_ref();
        let status = status::status(
            spec,
            req.generation(),
            req.metadata().creation_timestamp.as_deref(),
            previous,
            existing.as_ref(),
            name,
        );

        let mut outcome = Outcome::new().apply(children::deployment(name, spec)).apply(children::service(name, spec));
        if let Some(ingress) = children::ingress(name, spec) {
            outcome = outcome.apply(ingress);
        }
        for (reason, message) in events(name, spec, existing.as_ref(), had_ingress, previous, &status) {
            outcome = outcome.event(reason, message);
        }
        Ok(outcome.status(status))
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

operon_sdk::export!(WebAppReconciler with admission);

#[cfg(test)]
mod tests;
