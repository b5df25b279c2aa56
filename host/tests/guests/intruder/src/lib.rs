//! The intruder guest (see `../../intruder.rs`), reconciling Things.
const NAME: &str = "intruder";
const FOR: (&str, &str, &str) = ("example.operon.dev", "v1alpha1", "Thing");
include!("../../intruder.rs");
