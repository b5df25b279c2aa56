//! A broken version of the stamp guest: same manifest, traps on every
//! reconcile (see `../../stamp.rs`), for rollback tests.
const VERSION: &str = "broken";
const TRAP: bool = true;
const READS: &[(&str, &str, &str)] = &[];
const FINALIZER: Option<&str> = None;
include!("../../stamp.rs");
