//! Operon: a Kubernetes operator host whose reconcilers are sandboxed
//! WebAssembly components.
//!
//! See `ARCHITECTURE.md` at the repository root for a map of this crate.

pub use operon_contract as contract;
pub use operon_project as project;
pub use operon_runtime as runtime;

pub mod apply;
pub mod cache;
pub mod cli;
pub mod client;
pub mod controller;
pub mod egress;
pub mod fixtures;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod pipeline;
pub mod queue;
pub mod reconciler;
pub mod server;
pub mod signing;
pub mod telemetry;
pub mod webhook;

/// Install ring as the process's rustls crypto provider (the one kube
/// already uses), once. HTTPS clients other than kube's (module downloads,
/// OCI registries, OTLP) build their TLS from the process default; call this
/// before building one. Called by the CLI, [`manager::Manager::new`] and
/// [`runtime::Runtime::new`]; tests that build an HTTP client first call it
/// themselves.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Fails only if another provider was installed first: that one serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
