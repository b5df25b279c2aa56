//! Example Operon reconciler driven by the clock: a `ScheduledScale`
//! (`example.operon.dev/v1alpha1`, see `../scheduledscale/crd.yaml`) keeps a
//! Deployment at the replicas its daily schedule says.
//!
//! ```yaml
//! spec:
//!   image: nginx:1.27
//!   schedule:                      # times of day, UTC
//!     - {at: "08:00", replicas: 3}
//!     - {at: "20:00", replicas: 1}
//! ```
//!
//! # Behaviour
//!
//! - **The time is an input**: the entry in force is the one whose time
//!   came last before the request's `now` (yesterday's last one before the
//!   day's first); nothing reads a clock, so fixtures pin the time with
//!   `now:` and the same request always gives the same outcome.
//! - **Child**: a Deployment named after the ScheduledScale, with the
//!   entry's replicas.
//! - **Requeue at the next change**: `outcome.requeue-at` is the next
//!   entry's time, so the host wakes the reconciler when the schedule turns
//!   (and owned Deployment changes wake it in between).
//! - **Status**: `observedGeneration`, `replicas`, `activeSince` and
//!   `nextChange` (RFC 3339, seconds, UTC).
//! - **Events**: `Created` (no Deployment yet) and `Scaled` (the
//!   Deployment's replicas differ from the entry's).
//! - **Failures**: an empty image or schedule, a time that is not
//!   `HH:MM[:SS]`, negative replicas or a time listed twice are terminal.

pub mod schedule;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use operon_sdk::{Context, Failure, Gvk, Manifest, ObjectKind, Outcome, Reconciler, Request};
use serde::{Deserialize, Serialize};

pub use schedule::{Entry, Turn};

/// `ScheduledScale`: the parent.
#[derive(Debug, Clone, Deserialize)]
pub struct ScheduledScale {
    /// What the user wants.
    pub spec: ScheduledScaleSpec,
}

impl ObjectKind for ScheduledScale {
    const API_VERSION: &'static str = "example.operon.dev/v1alpha1";
    const KIND: &'static str = "ScheduledScale";
}

/// `spec` of a [`ScheduledScale`]. Lenient (defaults everywhere): what is
/// missing is refused by [`schedule::validate`] with a message, as the CRD
/// schema would.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ScheduledScaleSpec {
    /// Container image.
    pub image: String,
    /// The daily schedule.
    pub schedule: Vec<Entry>,
}

/// `status` of a [`ScheduledScale`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledScaleStatus {
    /// The `metadata.generation` this status describes.
    pub observed_generation: i64,
    /// The replicas of the entry in force.
    pub replicas: i32,
    /// When the entry in force began.
    pub active_since: String,
    /// When the next entry begins.
    pub next_change: String,
}

/// The fields of the existing Deployment read here.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Existing {
    spec: Option<ExistingSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ExistingSpec {
    replicas: Option<i32>,
}

impl ObjectKind for Existing {
    const API_VERSION: &'static str = "apps/v1";
    const KIND: &'static str = "Deployment";
}

/// The ScheduledScale reconciler.
#[derive(Debug)]
pub struct ScheduledScaleReconciler;

impl Reconciler for ScheduledScaleReconciler {
    type Object = ScheduledScale;

    fn manifest() -> Manifest {
        Manifest::new("scheduledscale", ScheduledScale::gvk()).owns(Gvk::new("apps", "v1", "Deployment"))
    }

    fn reconcile(req: Request<ScheduledScale>, _ctx: &Context) -> Result<Outcome, Failure> {
        let name = req.name();
        let spec = &req.object.spec;
        schedule::validate(spec)?;
        let turn = schedule::turn(&spec.schedule, req.now())?;
        let mut outcome = Outcome::new().apply(deployment(name, &spec.image, turn.active.replicas));
        match req.child::<Existing>(name)? {
            None => {
                outcome = outcome.event(
                    "Created",
                    format!(
                        "creating deployment {name} with {} replicas ({} entry)",
                        turn.active.replicas, turn.active.at
                    ),
                );
            }
            Some(existing) => {
                let current = existing.spec.and_then(|s| s.replicas).unwrap_or(1);
                if current != turn.active.replicas {
                    outcome = outcome.event(
                        "Scaled",
                        format!(
                            "scaling deployment {name} from {current} to {} replicas ({} entry)",
                            turn.active.replicas, turn.active.at
                        ),
                    );
                }
            }
        }
        let status = ScheduledScaleStatus {
            observed_generation: req.generation(),
            replicas: turn.active.replicas,
            active_since: schedule::rfc3339(turn.active_since),
            next_change: schedule::rfc3339(turn.next_change),
        };
        Ok(outcome.status(status).requeue_at(turn.next_change))
    }
}

/// The Deployment: `replicas` pods of one container running `image`.
fn deployment(name: &str, image: &str, replicas: i32) -> Deployment {
    let labels = BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), name.to_owned()),
        ("app.kubernetes.io/managed-by".to_owned(), "operon".to_owned()),
    ]);
    let selector = BTreeMap::from([("app.kubernetes.io/name".to_owned(), name.to_owned())]);
    Deployment {
        metadata: ObjectMeta { name: Some(name.to_owned()), labels: Some(labels.clone()), ..ObjectMeta::default() },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector { match_labels: Some(selector), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".to_owned(),
                        image: Some(image.to_owned()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

operon_sdk::export!(ScheduledScaleReconciler);
