//! The egress probe (see `../../egress-probe.rs`), calling each URL as given.
const URL_SUFFIX: &str = "";
include!("../../egress-probe.rs");
