//! Version v2 of the stamp guest (see `../../stamp.rs`).
const VERSION: &str = "v2";
const TRAP: bool = false;
const READS: &[(&str, &str, &str)] = &[];
const FINALIZER: Option<&str> = None;
include!("../../stamp.rs");
