//! Every integration test of the operator, in one binary (as wasmtime's
//! `tests/all`): one link instead of one per suite, one harness
//! (`common`). Each suite is a module and keeps the control plane it needs
//! under its own name (`operon_envtest::shared_named`); a control plane no
//! running test uses is stopped, so the suites, which run one after the
//! other in name order, each have theirs while they run.
//!
//! Run one suite with `cargo test -p operon --test all -- egress::`.

mod common;

mod admission;
mod cli;
mod conformance;
mod contract;
mod dashboards;
mod deploy;
mod dev;
mod egress;
mod events;
mod failover;
mod faults;
mod fuzz_seeds;
mod guest_c;
mod guest_go;
mod guest_log;
mod guest_python;
mod guest_rust;
mod guest_ts;
mod handover;
mod hostile;
mod image;
mod languages;
mod leader;
mod lifecycle;
mod lost_lease;
mod manager;
mod reconcilers;
mod release;
mod resilience;
mod sandbox;
mod scaleout;
mod sources;
mod tenants;
mod webhooks;
mod workloads;
