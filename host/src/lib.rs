//! Operon: a Kubernetes operator host whose reconcilers are sandboxed
//! WebAssembly components.
//!
//! See `ARCHITECTURE.md` at the repository root for a map of this crate.

pub use operon_contract as contract;

pub mod apply;
pub mod cache;
pub mod cli;
pub mod controller;
pub mod fixtures;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod project;
pub mod queue;
pub mod runtime;
pub mod server;
pub mod telemetry;
