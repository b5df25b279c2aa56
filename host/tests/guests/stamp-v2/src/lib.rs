//! Version v2 of the stamp guest (see `../../stamp.rs`).
const VERSION: &str = "v2";
const TRAP: bool = false;
include!("../../stamp.rs");
