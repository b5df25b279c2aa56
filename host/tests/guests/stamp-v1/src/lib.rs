//! Version v1 of the stamp guest (see `../../stamp.rs`).
const VERSION: &str = "v1";
const TRAP: bool = false;
include!("../../stamp.rs");
