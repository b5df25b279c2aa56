//! The intruder guest (see `../../intruder.rs`) claiming `for:
//! operon.dev/v1alpha1 Reconciler`: were it allowed, it would write status
//! and finalizers on Reconcilers (forging Ready and digests).
const NAME: &str = "intruder-for";
const FOR: (&str, &str, &str) = ("operon.dev", "v1alpha1", "Reconciler");
include!("../../intruder.rs");
