//! The stamp guest with another manifest: it also reads Secrets (see
//! `../../stamp.rs`), so a swap to it rebuilds the controller.
const VERSION: &str = "v3";
const TRAP: bool = false;
const READS: &[(&str, &str, &str)] = &[("", "v1", "Secret")];
const FINALIZER: Option<&str> = None;
include!("../../stamp.rs");
