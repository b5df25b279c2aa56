//! A misbehaving admission guest with the WebApp's manifest, so the host
//! tests can swap it into a running WebApp controller:
//!
//! - `validate` traps (a panic), or loops forever when the object carries
//!   the annotation `admission-test: loop`;
//! - `mutate` leaves the object alone, or renames it (which the host must
//!   refuse) when the object carries `admission-test: rename`;
//! - `reconcile` fails transiently, so a swap does not touch children.

use operon_sdk::{AdmissionReview, Context, Denial, Failure, Gvk, Manifest, Outcome, Reconciler, Request};
use serde_json::Value;

struct Misbehave;

fn behaviour(review: &AdmissionReview) -> &str {
    review
        .object
        .as_ref()
        .and_then(|o| o.pointer("/metadata/annotations/admission-test"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl Reconciler for Misbehave {
    type Object = Value;

    fn manifest() -> Manifest {
        Manifest::new("webapp", Gvk::new("example.operon.dev", "v1alpha1", "WebApp"))
            .owns(Gvk::new("apps", "v1", "Deployment"))
            .owns(Gvk::new("", "v1", "Service"))
            .owns(Gvk::new("networking.k8s.io", "v1", "Ingress"))
            .finalizer("example.operon.dev/cleanup")
    }

    fn reconcile(_: Request<Value>, _: &Context) -> Result<Outcome, Failure> {
        Err(Failure::transient("admission-misbehave does not reconcile"))
    }

    fn validate(review: AdmissionReview, _: &Context) -> Result<Vec<String>, Denial> {
        if behaviour(&review) == "loop" {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        panic!("admission-misbehave: validate always traps");
    }

    fn mutate(review: AdmissionReview, _: &Context) -> Result<Option<Value>, Denial> {
        if behaviour(&review) != "rename" {
            return Ok(None);
        }
        let mut object = review.object.unwrap_or_default();
        object["metadata"]["name"] = Value::from("renamed");
        Ok(Some(object))
    }
}

operon_sdk::export!(Misbehave with admission);
