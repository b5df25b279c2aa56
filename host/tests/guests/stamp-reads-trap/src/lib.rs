//! A hostile new version: another manifest (it also reads Secrets) and a
//! trap on every reconcile (see `../../stamp.rs`).
const VERSION: &str = "broken-v3";
const TRAP: bool = true;
const READS: &[(&str, &str, &str)] = &[("", "v1", "Secret")];
const FINALIZER: Option<&str> = None;
include!("../../stamp.rs");
