//! Reconcilers as resources: the host's own controller for the
//! `Reconciler` and `ClusterReconciler` kinds ([`crd`]), and for the module
//! files of `operon run --module` — one lifecycle for both. Creating one
//! loads its module and runs a controller for it; changing it swaps the
//! module (or rebuilds the controller); deleting it stops exactly that
//! controller and releases what it held.
//!
//! The lifecycle is a pure function ([`plan`]) of what is known about a
//! Reconciler, carried out by a small executor (`lifecycle.rs`):
//! 1. observe: the spec ([`settings`]), what the source holds and the loads
//!    under way ([`loader`], off the lifecycle's workers), the modules
//!    loaded here, what was decided before (the durable record in the
//!    status), and what runs;
//! 2. plan: which version serves, which shadows, what to record, which
//!    events to tell, what the status says;
//! 3. execute: start, swap, rebuild or stop the controller; register or
//!    remove the webhooks; write the record, the events and the status
//!    (the replica that leads the Reconciler writes; the others follow it).
//!
//! **Invariant: the host, not the plugin, decides what a plugin may touch.**
//! Grants are checked before a controller exists ([`grants`]), and again
//! (as an [`crate::apply::Policy`]) on every outcome.
//!
//! **Invariant: one owner per fact.** What is active, what is a candidate
//! and what was refused are decided by the plan; the module controller only
//! runs what it is given and reports how a new version does.

pub mod crd;
pub mod grants;
mod lifecycle;
pub mod loader;
mod peers;
pub mod plan;
mod release;
pub mod settings;
pub mod source;
pub mod status;
pub mod verify;

use crate::cache::{ObjectKey, WatchKey};
use crate::contract::Gvk;
use crate::controller::{self, Controller};
use crate::leader::Fence;
use crate::manager::{Component, Manager, Part, Runnable};
use crate::webhook::FailurePolicy;
use futures::future::BoxFuture;
use grants::Placement;
use lifecycle::Lifecycle;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The API group and version of the Reconciler kinds.
pub const GROUP: &str = "operon.dev";
/// See [`GROUP`].
pub const VERSION: &str = "v1alpha1";
/// Field manager of what the host writes on Reconcilers (status, finalizer).
const FIELD_MANAGER: &str = "operon";
/// The finalizer the host keeps on a Reconciler whose module puts a
/// finalizer on parents: removed once those are released.
pub const RELEASE_FINALIZER: &str = "operon.dev/release-parents";
/// The default ceiling of `spec.limits.maxOutput` (`--max-guest-output`):
/// sixteen times the default cap, and an eighth of the largest guest memory.
pub const MAX_OUTPUT_CEILING: u64 = 64 << 20;
/// The annotation that asks for refused versions to be tried again.
pub const RETRY_ANNOTATION: &str = "operon.dev/retry";

/// Settings of the Reconciler lifecycle.
#[derive(Clone)]
pub struct Config {
    /// The cluster connection, for clients that impersonate a Reconciler's
    /// ServiceAccount (`None`: Reconcilers naming one are refused).
    pub kube_config: Option<kube::Config>,
    /// Watch `Reconciler` and `ClusterReconciler` resources (`false`: only
    /// module files).
    pub resources: bool,
    /// Watch Reconcilers in this namespace only (and no ClusterReconcilers);
    /// `None` for all.
    pub namespace: Option<String>,
    /// Only Reconcilers whose labels match this selector (several hosts
    /// sharing a cluster, each with its own plugins).
    pub selector: Option<String>,
    /// Refuse namespaced Reconcilers without `spec.serviceAccountName`.
    pub require_service_account: bool,
    /// Accept `spec.module.path` (a file on the host). Off in a cluster: a
    /// Reconciler author must not make the host read its files.
    pub allow_module_paths: bool,
    /// How often counters are copied into the status.
    pub status_period: Duration,
    /// How often `path` sources and module files are checked for changes.
    pub path_poll: Duration,
    /// Who records events (the pod name).
    pub instance: String,
    /// Bounds of every module download.
    pub bounds: source::Bounds,
    /// The most a Reconciler's `spec.limits.maxOutput` may ask, in bytes
    /// (`--max-guest-output`).
    pub max_output: u64,
    /// The keys every module must be signed by (`--require-signed-modules`),
    /// whatever its Reconciler says.
    pub module_trust: verify::HostPolicy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            kube_config: None,
            resources: true,
            namespace: None,
            selector: None,
            require_service_account: false,
            allow_module_paths: false,
            status_period: Duration::from_secs(5),
            path_poll: Duration::from_secs(2),
            instance: "operon".into(),
            bounds: source::Bounds::default(),
            max_output: MAX_OUTPUT_CEILING,
            module_trust: verify::HostPolicy::default(),
        }
    }
}

/// A module file run as a plugin (`operon run --module`): every kind its
/// manifest asks for, in any namespace (or `namespace`), swapped when the
/// file changes, rolled back like a Reconciler's module.
#[derive(Debug, Clone)]
pub struct ModuleFile {
    /// The file.
    pub path: PathBuf,
    /// Sandbox limits.
    pub limits: crate::runtime::Limits,
    /// Serve its `validate`/`mutate` (if it exports them) with this failure
    /// policy; `None`: no webhooks.
    pub admission: Option<FailurePolicy>,
    /// Act in this namespace only.
    pub namespace: Option<String>,
}

/// Why the lifecycle could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The wasm engine could not be built.
    #[error(transparent)]
    Engine(crate::runtime::LoadError),
    /// A module file could not be read.
    #[error("reading module {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A module file is not signed by a key the host trusts.
    #[error("module {path}: {source}")]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: verify::Error,
    },
    /// A module file did not load.
    #[error("loading module {path}: {source}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::runtime::LoadError,
    },
}

/// Identifies a plugin: a Reconciler, a ClusterReconciler, or a module file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PluginKey {
    /// A `Reconciler` (namespace and name).
    Reconciler(ObjectKey),
    /// A `ClusterReconciler` (name).
    ClusterReconciler(String),
    /// A module file of `operon run --module`.
    File(PathBuf),
}

impl PluginKey {
    /// The name of its controller (and of its unit of leadership):
    /// `namespace/name` for a Reconciler, the name for a ClusterReconciler,
    /// the manifest's name for a module file.
    pub fn controller_name(&self, manifest_name: &str) -> String {
        match self {
            PluginKey::Reconciler(k) => format!("{}/{}", k.namespace.as_deref().unwrap_or_default(), k.name),
            PluginKey::ClusterReconciler(name) => name.clone(),
            PluginKey::File(_) => manifest_name.to_string(),
        }
    }

    /// The plugin name its webhooks are registered under: `r.<namespace>.<name>`,
    /// `c.<name>` (namespaces hold no dots, so the two never collide), or the
    /// manifest's name for a module file.
    pub fn webhook_name(&self, manifest_name: &str) -> String {
        match self {
            PluginKey::Reconciler(k) => format!("r.{}.{}", k.namespace.as_deref().unwrap_or_default(), k.name),
            PluginKey::ClusterReconciler(name) => format!("c.{name}"),
            PluginKey::File(_) => manifest_name.to_string(),
        }
    }

    /// Where it acts.
    pub fn placement(&self) -> Placement {
        match self {
            PluginKey::Reconciler(k) => Placement::Namespaced(k.namespace.clone().unwrap_or_default()),
            PluginKey::ClusterReconciler(_) | PluginKey::File(_) => Placement::Cluster,
        }
    }

    /// The resource's kind (`None` for a file).
    fn kind(&self) -> Option<&'static str> {
        match self {
            PluginKey::Reconciler(_) => Some("Reconciler"),
            PluginKey::ClusterReconciler(_) => Some("ClusterReconciler"),
            PluginKey::File(_) => None,
        }
    }

    /// The resource's key in its informer.
    fn object_key(&self) -> Option<ObjectKey> {
        match self {
            PluginKey::Reconciler(k) => Some(k.clone()),
            PluginKey::ClusterReconciler(name) => Some(ObjectKey::new(None, name)),
            PluginKey::File(_) => None,
        }
    }
}

impl std::fmt::Display for PluginKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginKey::Reconciler(k) => write!(f, "Reconciler {k}"),
            PluginKey::ClusterReconciler(name) => write!(f, "ClusterReconciler {name}"),
            PluginKey::File(path) => write!(f, "module file {}", path.display()),
        }
    }
}

/// The kind of the namespaced resource.
pub fn reconciler_gvk() -> Gvk {
    Gvk::new(GROUP, VERSION, "Reconciler")
}

/// The kind of the cluster-scoped resource.
pub fn cluster_reconciler_gvk() -> Gvk {
    Gvk::new(GROUP, VERSION, "ClusterReconciler")
}

/// The Reconciler lifecycle of a host: a controller (the generic machinery
/// around [`Lifecycle`]) that runs on every replica. Cheap to clone.
#[derive(Clone)]
pub struct Reconcilers {
    controller: Controller<Lifecycle>,
}

impl Reconcilers {
    /// The lifecycle as a part of a manager: of `config`'s Reconciler
    /// resources and of module `files` (read and loaded when the manager is
    /// built: a file that does not load is an error at start, as `operon
    /// run --module` promises).
    ///
    /// ```no_run
    /// # async fn f(client: kube::Client) -> Result<(), operon::manager::Error> {
    /// use operon::{manager::Manager, reconciler::{self, Reconcilers}};
    /// let manager = Manager::builder(client)
    ///     .add(Reconcilers::component(reconciler::Config::default(), vec![]))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn component(config: Config, files: Vec<ModuleFile>) -> impl Component {
        Lifecycle::component(config, files)
    }

    async fn new(manager: &Manager, config: Config, files: Vec<ModuleFile>) -> Result<Reconcilers, Error> {
        let (lifecycle, triggers) = Lifecycle::new(manager.clone(), config, files).await?;
        let controller = Controller::new(
            "operon-reconcilers",
            Arc::new(lifecycle),
            triggers,
            controller::Config {
                // Loads and fetches run in tasks of their own: the workers
                // only plan and carry out.
                max_concurrent_reconciles: 4,
                backoff_base: Duration::from_millis(500),
                backoff_max: Duration::from_secs(300),
                // Status refreshes come back on a timer, not as requeues.
                requeue_qps: 0.0,
                ..controller::Config::default()
            },
            manager.metrics().clone(),
        );
        Ok(Reconcilers { controller })
    }

    /// Whether every Reconciler seen at start has been acted on (loaded, or
    /// refused with a reason): what `/readyz` waits for, so a new replica
    /// takes webhook traffic only once it can answer it.
    pub fn settled(&self) -> bool {
        self.controller.reconciler().settled()
    }

    /// The informer key of the Reconcilers this host acts on.
    fn watch_key(config: &Config, cluster: bool) -> WatchKey {
        let mut key = WatchKey::new(
            if cluster { cluster_reconciler_gvk() } else { reconciler_gvk() },
            if cluster { None } else { config.namespace.clone() },
        );
        key.selector = config.selector.clone();
        key
    }
}

impl Runnable for Reconcilers {
    fn name(&self) -> &str {
        self.controller.name()
    }

    fn run(&self, stop: BoxFuture<'static, ()>, fence: Fence) -> BoxFuture<'_, ()> {
        Box::pin(self.controller.run(stop, fence))
    }

    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'_, Result<(), crate::cache::Error>> {
        Box::pin(self.controller.wait_synced(timeout))
    }
}

impl Part for Reconcilers {
    /// Every plugin's controller stops; webhook configurations and Leases
    /// are left to the other replicas.
    fn stopped(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.controller.reconciler().shut_down())
    }

    fn not_ready(&self) -> Option<String> {
        (!self.settled()).then(|| "the Reconcilers present at start are not loaded yet".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_and_webhook_names_should_be_unique_per_namespace() {
        let a = PluginKey::Reconciler(ObjectKey::new(Some("a"), "webapp"));
        let b = PluginKey::Reconciler(ObjectKey::new(Some("b"), "webapp"));
        let c = PluginKey::ClusterReconciler("webapp".into());
        assert_eq!(a.controller_name("x"), "a/webapp");
        assert_ne!(a.controller_name("x"), b.controller_name("x"));
        assert_eq!(c.controller_name("x"), "webapp");
        assert_eq!(a.webhook_name("x"), "r.a.webapp");
        assert_eq!(c.webhook_name("x"), "c.webapp");
        assert_eq!(PluginKey::File("/m.wasm".into()).controller_name("webapp"), "webapp");
    }
}
