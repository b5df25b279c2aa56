//! A real Kubernetes control plane on loopback for tests, in the manner of
//! controller-runtime's envtest: etcd, kube-apiserver and, if asked,
//! kube-controller-manager, as child processes of the test. With
//! [`Options::with_workloads`] also kube-scheduler and kwok with fake Nodes,
//! so Deployments get Pods that become Running and Ready.
//!
//! Anything that claims Kubernetes behaviour (server-side apply, status
//! subresources, watches, garbage collection) is tested against this, not
//! against a fake.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! let plane = operon_envtest::shared();
//! let client = plane.client().await;
//! let namespace = operon_envtest::create_namespace(&client, "my-test").await?;
//! let config_maps = kube::Api::<ConfigMap>::namespaced(client, &namespace);
//! assert!(config_maps.list(&Default::default()).await?.items.is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! A suite whose tests need CRDs, garbage collection of custom objects
//! included, shares a control plane started with them through one helper:
//! `shared_named("my-suite", || Options::with_controller_manager().crd(my_crd()))`.
//! One test binary may hold many suites, each under its own name; a shared
//! control plane no test used for [`IDLE`] is stopped, so a binary running
//! its suites one after the other runs few at a time.
//! Each test makes its own [`ControlPlane::client`]. For a control plane of
//! its own (to stop it, or to start it differently), a test calls
//! [`ControlPlane::start`] and drops the result.
//!
//! A test binary whose tests need Deployments to become Available (an
//! operator that waits for its children to be ready) starts the shared
//! control plane with `shared_with(Options::with_workloads)`; a Deployment
//! of two replicas is then Available within a second or so.
//!
//! # Scale
//!
//! The control plane is set up to hold tens of thousands of objects: an
//! 8 GiB etcd quota, a /16 Service range (65 534 ClusterIPs), more
//! concurrent requests, and controllers that may send 1000 requests a second.
//! Kubernetes 1.34 allocates ClusterIPs one at a time, though (a lock around
//! an IPAddress create), so Services with a ClusterIP are created at about
//! a hundred a second whatever the client does; `tests/scale.rs` measures it.
//!
//! # Binaries
//!
//! Tests never download or build: they use `KUBEBUILDER_ASSETS` or the cache
//! that `cargo xtask envtest` fills (see [`assets`]), and fail, never skip,
//! when neither has the binaries.
//!
//! # Environment
//!
//! - `KUBEBUILDER_ASSETS`: a directory holding `etcd`, `kube-apiserver`
//!   (and `kube-controller-manager`; and `kube-scheduler` and `kwok` for
//!   workloads), used instead of the cache.
//! - `OPERON_ENVTEST_KEEP=1`: keep each control plane's directory (logs,
//!   certificates, kubeconfig) after it stops.
//!
//! Unix only: the binaries are Linux or macOS builds and cleanup relies on
//! `sh`.

pub mod assets;
mod certs;
mod control_plane;
mod kubeconfig;
mod process;
pub mod registry;
mod shared;

pub use control_plane::{ControlPlane, KEEP_ENV, Options};
pub use registry::Registry;
pub use shared::{IDLE, Shared, create_namespace, shared, shared_named, shared_with};
