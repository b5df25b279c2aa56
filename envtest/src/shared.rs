//! One control plane per test binary, shared by its tests.
//!
//! Starting a control plane costs seconds; a test costs milliseconds. So a
//! test binary starts one, on first use, and its tests stay out of each
//! other's way by working in namespaces of their own.

use crate::{ControlPlane, Options};
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use std::sync::OnceLock;

/// The control plane shared by every test in this process, started on first
/// call, with the controller manager (so garbage collection works).
///
/// # Guarantees
///
/// Started once even when tests call this concurrently. Never dropped, yet
/// its processes stop and its directory goes when the test binary exits.
///
/// # Panics
///
/// If it did not start, in every test that calls this, with the reason
/// (often: run `cargo xtask envtest` first).
pub fn shared() -> &'static ControlPlane {
    shared_with(Options::with_controller_manager)
}

/// [`shared`], started with the options `make` returns: typically
/// [`Options::with_controller_manager`] plus the CRDs under test (see
/// [`Options::crds`]).
///
/// # Caveats
///
/// There is one shared control plane per process and the first caller
/// starts it: `make` runs only then, and later callers get that control
/// plane whatever they pass. Call this from one helper in the test binary.
pub fn shared_with(make: impl FnOnce() -> Options) -> &'static ControlPlane {
    static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    let started = SHARED.get_or_init(|| ControlPlane::start(make()).map_err(|e| format!("{e:#}")));
    match started {
        Ok(plane) => plane,
        Err(e) => panic!("the shared envtest control plane did not start: {e}"),
    }
}

/// Creates a namespace named `<prefix>-<random suffix>` and returns its
/// name, so a test can work on a shared control plane undisturbed.
///
/// The namespace is not deleted afterwards: the control plane is thrown
/// away soon enough, and what a failed test left is worth a look with
/// `OPERON_ENVTEST_KEEP=1`.
pub async fn create_namespace(client: &kube::Client, prefix: &str) -> Result<String> {
    let namespace = Namespace {
        metadata: ObjectMeta { generate_name: Some(format!("{prefix}-")), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    let created = kube::Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("could not create a namespace for `{prefix}`"))?;
    created.metadata.name.context("the API server returned a namespace without a name")
}
