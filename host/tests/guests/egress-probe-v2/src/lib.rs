//! Version 2 of the egress probe (see `../../egress-probe.rs`): the same,
//! but every URL it calls gets `?v2` appended — a module changed to make
//! other calls than a recording of version 1 holds.
const URL_SUFFIX: &str = "?v2";
include!("../../egress-probe.rs");
