//! The stamp guest with a renamed finalizer (see `../../stamp.rs`): the
//! host must release the old name from every Thing.
const VERSION: &str = "fin2";
const TRAP: bool = false;
const READS: &[(&str, &str, &str)] = &[];
const FINALIZER: Option<&str> = Some("example.operon.dev/stamp-2");
include!("../../stamp.rs");
