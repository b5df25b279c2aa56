//! The stamp guest keeping a finalizer on every Thing (see `../../stamp.rs`).
const VERSION: &str = "fin";
const TRAP: bool = false;
const READS: &[(&str, &str, &str)] = &[];
const FINALIZER: Option<&str> = Some("example.operon.dev/stamp");
include!("../../stamp.rs");
