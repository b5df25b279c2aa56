//! Admission webhooks served from the same guests that reconcile: a module
//! of the `reconciler-with-admission` world validates and defaults its
//! parent kind under the same sandbox, grants and hot swap as its
//! reconciles, as controller-runtime's Manager runs webhooks beside its
//! controllers.
//!
//! [`Webhooks`] is the registry and the HTTPS server (axum over rustls, on
//! its own port). [`Webhooks::register`] routes `/validate/<plugin>` and
//! `/mutate/<plugin>` to a module's controller on every replica, and the
//! replica that leads the plugin applies its `ValidatingWebhookConfiguration`
//! and `MutatingWebhookConfiguration`, named `operon-<plugin>` (server-side
//! apply, field manager `operon`), and keeps them in place
//! ([`Webhooks::keep_configured`]): a configuration deleted or changed by
//! anyone else, or left behind by a replica that shut down, is put back by
//! whichever replica leads the plugin then. [`Webhooks::unregister`]
//! deletes them (a Reconciler deleted, paused or refused). It knows nothing
//! of the Reconciler resource.
//!
//! **Invariant: shutting a replica down never removes a plugin's webhooks**
//! (unless its serving certificate was self-generated, which nobody else
//! can serve): the other replicas serve them.
//!
//! **Invariant: every webhook call reads the controller's module at the
//! moment it starts** ([`ModuleController::module`]), so a module swap switches
//! the webhooks atomically with the controller: no call ever sees a module
//! the controller does not run.
//!
//! **Invariant: the server never fails open by accident.** A guest that
//! traps, times out or answers nonsense is answered by the plugin's
//! [`FailurePolicy`] (`Fail`: deny, naming the plugin; `Ignore`: allow with
//! a warning, counted in `operon_webhook_guest_failures_total`). A request
//! the server cannot read gets a 4xx, which the API server also treats per
//! the failure policy.
//!
//! See `docs/admission.md` for how plugin authors and platform teams use it.

mod certs;
mod config;
mod conversion;
mod endpoint;
mod handler;
mod keep;
mod registration;
mod review;
mod server;
mod threads;

pub use conversion::{Allowed as ConversionAllowed, BadAllowed as BadConversionAllowed, CONVERTED_BY};
pub use endpoint::{BadEndpoint, Endpoint};
pub use handler::Answer;
pub use registration::Registration;
use registration::Route;

use crate::cache::{Cache, ObjectEvent, WatchKey};
use crate::contract::Gvk;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::pipeline::ModuleController;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// How long a plugin's routes keep answering after its configurations were
/// deleted: the API server may still call it until its own informer drops
/// the configuration, and an unrouted call would fail (and, under `Fail`,
/// deny).
const UNREGISTER_GRACE: Duration = Duration::from_secs(10);
/// How often the configurations of the plugins this replica leads are
/// checked even without an event.
const RECHECK: Duration = Duration::from_secs(30);

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be opened.
    #[error("cannot listen for webhooks on {addr} (is the port in use? pick another with --webhook-bind-address)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The serving certificate could not be read or made.
    #[error("webhook serving certificate: {0}")]
    Certificate(String),
    /// The plugin's module does not export `validate`/`mutate`.
    #[error(
        "plugin {plugin}: its module does not export operon:reconciler/admission; build it for the \
         reconciler-with-admission world, or do not ask for admission webhooks"
    )]
    NoAdmission {
        /// The plugin.
        plugin: String,
    },
    /// The plugin's module does not export `convert`.
    #[error(
        "plugin {plugin}: its module does not export operon:reconciler/conversion (contract 0.2); build it for \
         the reconciler-with-conversion world, or do not grant it conversion"
    )]
    NoConversion {
        /// The plugin.
        plugin: String,
    },
    /// The plugin's settings cannot make a webhook configuration.
    #[error("plugin {plugin}: {reason}")]
    InvalidPlugin {
        /// The plugin.
        plugin: String,
        /// What is wrong.
        reason: String,
    },
    /// The host's operator does not let plugins convert this CRD.
    #[error(
        "plugin {plugin}: this host does not point the conversion of CustomResourceDefinition {crd} at plugins; \
         its operator allows it with --conversion-allow {crd} (the chart's conversion.allow)"
    )]
    ConversionNotAllowed {
        /// The plugin.
        plugin: String,
        /// The CRD's name.
        crd: String,
    },
    /// Another plugin converts the CRD, as the CRD's record says.
    #[error(
        "plugin {plugin}: CustomResourceDefinition {crd} is converted by plugin {holder} (its {CONVERTED_BY} \
         annotation): one converter per CRD; grant conversion to one ClusterReconciler of a kind"
    )]
    ConversionHeld {
        /// The plugin refused.
        plugin: String,
        /// The CRD's name.
        crd: String,
        /// The plugin the CRD's record names.
        holder: String,
    },
    /// The API server does not serve the plugin's kind (yet).
    #[error("plugin {plugin}: the API server does not serve {kind} (is its CRD installed?)")]
    Discovery {
        /// The plugin.
        plugin: String,
        /// The kind, as `group/version Kind`.
        kind: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A plugin's CRD could not be read or its conversion written.
    #[error(
        "{action} the conversion of CustomResourceDefinition {name} failed (is the plugin's kind served by that \
         CRD, and may operon's ServiceAccount get and patch customresourcedefinitions?)"
    )]
    Crd {
        /// `reading`, `pointing` or `restoring`.
        action: &'static str,
        /// The CRD's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// This replica no longer leads the plugin when a write was due: the
    /// replica that does writes it.
    #[error("plugin {plugin}: not written: {source}")]
    NotLeading {
        /// The plugin.
        plugin: String,
        /// The lease that was lost.
        #[source]
        source: crate::leader::NotLeading,
    },
    /// A webhook configuration could not be written or deleted.
    #[error(
        "{action} {resource} {name} failed (does operon's ServiceAccount have RBAC for admissionregistration.k8s.io?)"
    )]
    Api {
        /// `applying` or `deleting`.
        action: &'static str,
        /// `ValidatingWebhookConfiguration` or `MutatingWebhookConfiguration`.
        resource: &'static str,
        /// The object's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// Whether unregistering a plugin deletes its configurations.
#[derive(Debug, Clone, Copy)]
enum Delete {
    No,
    /// While this replica leads the plugin (its fence checked before each).
    AsLeader,
    /// Whoever leads (a self-generated certificate nobody else serves).
    Always,
}

/// What the API server does when a plugin's guest cannot answer (a trap,
/// a timeout, a malformed answer), and what the host answers in its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailurePolicy {
    /// Deny the request, with a message naming the plugin.
    #[default]
    Fail,
    /// Allow the request (with a warning), counted in
    /// `operon_webhook_guest_failures_total{failure_policy="Ignore"}`.
    Ignore,
}

impl FailurePolicy {
    /// The value of `failurePolicy` in a webhook configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for FailurePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Fail" | "fail" => Ok(FailurePolicy::Fail),
            "Ignore" | "ignore" => Ok(FailurePolicy::Ignore),
            _ => Err(format!("failure policy {s:?} must be Fail or Ignore")),
        }
    }
}

/// The two webhooks of a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    /// `validate`: a `ValidatingWebhookConfiguration`, path `/validate/<plugin>`.
    Validate,
    /// `mutate`: a `MutatingWebhookConfiguration`, path `/mutate/<plugin>`.
    Mutate,
}

impl Hook {
    /// The first segment of the path: `validate` or `mutate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Validate => "validate",
            Hook::Mutate => "mutate",
        }
    }

    /// The path the API server calls for `plugin`, also the `webhook` label
    /// of the metrics (as controller-runtime labels its webhooks).
    pub fn path(self, plugin: &str) -> String {
        format!("/{}/{plugin}", self.as_str())
    }
}

/// Settings of the webhook server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (`0.0.0.0:9443` in a pod; port 0 picks one).
    pub bind: SocketAddr,
    /// A directory holding `tls.crt` and `tls.key` (a mounted Secret, as
    /// controller-runtime's `CertDir`), reloaded when they change; with a
    /// `ca.crt` beside them, that is the configurations' `caBundle`.
    /// `None`: a CA and a serving certificate are generated at start and
    /// the CA goes into every configuration (development).
    pub cert_dir: Option<PathBuf>,
    /// A PEM file of CAs whose client certificates are let in
    /// (`--webhook-client-ca-file`): the API server authenticates itself
    /// with the certificate its `AdmissionConfiguration` names for
    /// webhooks; other clients fail the handshake. `None`: any client
    /// that reaches the port is served.
    pub client_ca: Option<PathBuf>,
    /// How the API server reaches this host.
    pub endpoint: Endpoint,
    /// Admission calls answered at once across every plugin
    /// (`--webhook-max-concurrent`): each holds a thread of its own, so
    /// this bounds the server's threads too.
    pub max_concurrent: usize,
    /// Admission calls of one plugin answered at once
    /// (`--webhook-max-concurrent-per-plugin`), so one tenant's flood
    /// leaves the others their share of the total.
    pub max_concurrent_per_plugin: usize,
    /// The CRDs whose conversion the host may point at a plugin
    /// (`--conversion-allow`); none by default.
    pub conversion_allowed: ConversionAllowed,
    /// Connections, timeouts and body sizes clients meet
    /// (`--webhook-max-connections`, `--webhook-max-connections-per-client`;
    /// the rest [`crate::server::Limits::WEBHOOKS`]).
    pub limits: crate::server::Limits,
}

impl Config {
    /// `--webhook-max-concurrent`: two busy plugins' worth of the per-plugin cap, twice over.
    pub const DEFAULT_MAX_CONCURRENT: usize = 16;
    /// `--webhook-max-concurrent-per-plugin`.
    pub const DEFAULT_MAX_CONCURRENT_PER_PLUGIN: usize = 4;
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: SocketAddr::from(([0, 0, 0, 0], 9443)),
            cert_dir: None,
            client_ca: None,
            endpoint: Endpoint::default(),
            max_concurrent: Config::DEFAULT_MAX_CONCURRENT,
            max_concurrent_per_plugin: Config::DEFAULT_MAX_CONCURRENT_PER_PLUGIN,
            conversion_allowed: ConversionAllowed::default(),
            limits: crate::server::Limits::WEBHOOKS,
        }
    }
}

/// The webhook registry and its HTTPS server. Cheap to clone.
#[derive(Clone)]
pub struct Webhooks {
    shared: Arc<Shared>,
}

struct Shared {
    client: kube::Client,
    metrics: Arc<Metrics>,
    endpoint: Endpoint,
    local_addr: SocketAddr,
    /// PEM, for the configurations' `caBundle`: replaced when the cert
    /// directory's `ca.crt` is rotated, and the configurations re-applied.
    ca_bundle: RwLock<Option<Arc<Vec<u8>>>>,
    /// Admission calls answered at once, across every plugin.
    calls: Arc<tokio::sync::Semaphore>,
    /// The most calls at once, in total and per plugin (for refusals).
    max_concurrent: usize,
    max_concurrent_per_plugin: usize,
    self_signed: bool,
    routes: RwLock<HashMap<String, Arc<Route>>>,
    /// Conversion routes, by plugin.
    conversions: RwLock<HashMap<String, conversion::Route>>,
    /// The CRDs whose conversion plugins may take.
    conversion_allowed: ConversionAllowed,
    generations: AtomicU64,
    /// Stops the server.
    stop: watch::Sender<bool>,
    /// Held while configurations are written or deleted, so that a
    /// re-apply never follows the deletion it raced with.
    writing: tokio::sync::Mutex<()>,
    recheck: tokio::sync::Notify,
}

impl Webhooks {
    /// Load (or generate) the serving certificate, bind `config.bind` and
    /// serve until [`Webhooks::shut_down`]. Plugins are added with
    /// [`Webhooks::register`].
    ///
    /// # Errors
    /// [`Error::Certificate`] when the cert directory lacks a usable
    /// `tls.crt`/`tls.key`; [`Error::Bind`] when the port is taken.
    pub async fn start(client: kube::Client, metrics: Arc<Metrics>, config: Config) -> Result<Webhooks, Error> {
        let certs = match &config.cert_dir {
            Some(dir) => certs::Certs::from_dir(dir)?,
            None => certs::Certs::generate(&config.endpoint.hosts())?,
        };
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|source| Error::Bind { addr: config.bind, source })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Bind { addr: config.bind, source })?;
        let (stop, mut stopped) = watch::channel(false);
        let webhooks = Webhooks {
            shared: Arc::new(Shared {
                client,
                metrics,
                endpoint: config.endpoint,
                local_addr,
                ca_bundle: RwLock::new(certs.ca_bundle.clone().map(Arc::new)),
                calls: Arc::new(tokio::sync::Semaphore::new(config.max_concurrent.max(1))),
                max_concurrent: config.max_concurrent.max(1),
                max_concurrent_per_plugin: config.max_concurrent_per_plugin.max(1),
                self_signed: config.cert_dir.is_none(),
                routes: RwLock::new(HashMap::new()),
                conversions: RwLock::new(HashMap::new()),
                conversion_allowed: config.conversion_allowed.clone(),
                generations: AtomicU64::new(0),
                stop,
                writing: tokio::sync::Mutex::new(()),
                recheck: tokio::sync::Notify::new(),
            }),
        };
        tracing::info!(
            addr = %local_addr,
            certificate = %config.cert_dir.as_ref().map_or("self-generated".into(), |d| d.display().to_string()),
            clients = %config.client_ca.as_ref().map_or("any (no --webhook-client-ca-file)".into(), |p| format!("signed by {}", p.display())),
            "serving admission webhooks"
        );
        if config.client_ca.is_none() {
            tracing::warn!(
                "admission webhook clients are not authenticated: any client that reaches the port may send \
                 AdmissionReviews. Give --webhook-client-ca-file (the CA of the API server's webhook client \
                 certificate), or restrict the port with a NetworkPolicy (docs/admission.md)"
            );
        }
        let client_ca = match &config.client_ca {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                Error::Certificate(format!("--webhook-client-ca-file: reading {}: {e}", path.display()))
            })?),
            None => None,
        };
        let tls = certs.server_config(client_ca.as_deref())?;
        if let Some(dir) = config.cert_dir {
            // A rotated `ca.crt` replaces the bundle and wakes the keeper,
            // which re-applies the configurations of the plugins it leads.
            let shared = Arc::downgrade(&webhooks.shared);
            let on_ca = move |pem: Vec<u8>| {
                let Some(shared) = shared.upgrade() else { return };
                *shared.ca_bundle.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(pem));
                shared.recheck.notify_one();
            };
            let stopping = webhooks.shared.stop.subscribe();
            tokio::spawn(certs::watch(dir, certs.resolver.clone(), certs.ca_bundle.clone(), on_ca, stopping));
        }
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        tokio::spawn(server::serve(listener, tls, webhooks.clone(), config.limits, shutdown));
        Ok(webhooks)
    }

    /// Stop serving (the manager's shutdown).
    pub fn shut_down(&self) {
        self.shared.stop.send_replace(true);
    }

    /// The address the server listens on (the real port when bound to 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The CA bundle (PEM) written into the configurations, if any: the
    /// current one (a rotated `ca.crt` replaces it).
    pub fn ca_bundle(&self) -> Option<Arc<Vec<u8>>> {
        self.shared.ca_bundle.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Whether the serving certificate was generated at start (rather than
    /// read from a cert directory).
    pub fn self_signed(&self) -> bool {
        self.shared.self_signed
    }

    /// The names of the registered plugins.
    pub fn registered(&self) -> Vec<String> {
        let mut names: Vec<String> = self.routes().keys().cloned().collect();
        names.sort();
        names
    }

    /// Serve `registration`'s module as a validating and a mutating webhook
    /// for its manifest's `for` kind (`CREATE` and `UPDATE` of the main
    /// resource, never `*/status`) on this replica, and — where this
    /// replica leads the plugin — apply its two webhook configurations. A
    /// second call with the same name updates the settings.
    ///
    /// The route exists before the configurations, so the API server never
    /// calls a path that is not served.
    ///
    /// # Errors
    /// [`Error::NoAdmission`] when the module does not export admission,
    /// [`Error::InvalidPlugin`], [`Error::Discovery`] when the kind is not
    /// served (yet), [`Error::Api`] when a configuration cannot be applied.
    /// On error the previous registration (if any) is kept as it was.
    pub async fn register(&self, registration: Registration) -> Result<(), Error> {
        registration.check()?;
        let module = registration.controller.module();
        if !module.admission() {
            return Err(Error::NoAdmission { plugin: registration.name.clone() });
        }
        let kind = module.manifest().for_kind.clone();
        let gvk = kube::api::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.shared.client, &gvk)
            .await
            .map_err(|source| Error::Discovery { plugin: registration.name.clone(), kind: kind.to_string(), source })?;
        let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
        let name = registration.name.clone();
        // A plugin registered anew keeps its calls in flight counted.
        let slots = self.route(&name).map_or_else(
            || Arc::new(tokio::sync::Semaphore::new(self.shared.max_concurrent_per_plugin)),
            |r| r.slots.clone(),
        );
        let route = Arc::new(Route {
            generation: self.shared.generations.fetch_add(1, Ordering::Relaxed),
            slots,
            warned: Arc::default(),
            registration,
            kind,
            plural: resource.plural,
            namespaced,
            configured: true,
        });
        let _writing = self.shared.writing.lock().await;
        let previous = self.routes_mut().insert(name.clone(), route.clone());
        for hook in [Hook::Validate, Hook::Mutate] {
            self.shared.metrics.webhook_added(&hook.path(&name), route.registration.failure_policy.as_str());
        }
        if route.registration.leadership.is_leading()
            && let Err(e) = self.apply(&route).await
            // Leadership lost meanwhile: the replica that leads applies them.
            && !matches!(e, Error::NotLeading { .. })
        {
            let mut routes = self.routes_mut();
            match previous {
                Some(previous) => routes.insert(name, previous),
                None => routes.remove(&name),
            };
            return Err(e);
        }
        tracing::info!(plugin = %name, kind = %route.kind, policy = %route.registration.failure_policy, "admission webhooks registered");
        Ok(())
    }

    async fn apply(&self, route: &Route) -> Result<(), Error> {
        let ca = self.ca_bundle();
        let target = self.target(ca.as_ref().map(|c| c.as_slice()));
        config::apply(
            &self.shared.client,
            &route.registration.settings(),
            &route.kind,
            &route.plural,
            route.namespaced,
            &target,
            &route.registration.leadership.fence(),
        )
        .await
    }

    /// Stop serving `name`: with `delete_configurations` (the replica that
    /// leads the plugin, when the plugin goes) its configurations are
    /// deleted first. Its routes keep answering for a short grace period
    /// (the API server may still call them), then go. Unknown names are not
    /// an error.
    ///
    /// # Errors
    /// [`Error::Api`] when a configuration cannot be deleted; the routes are
    /// kept then, so nothing is left calling a path that is not served.
    pub async fn unregister(&self, name: &str, delete_configurations: bool) -> Result<(), Error> {
        let delete = if delete_configurations { Delete::AsLeader } else { Delete::No };
        self.remove(name, delete).await
    }

    async fn remove(&self, name: &str, delete: Delete) -> Result<(), Error> {
        let _writing = self.shared.writing.lock().await;
        let fence = self.route(name).map(|r| r.registration.leadership.fence());
        match delete {
            Delete::No => {}
            // Each delete only while this replica still leads the plugin.
            Delete::AsLeader => config::delete(&self.shared.client, name, fence.as_ref()).await?,
            Delete::Always => config::delete(&self.shared.client, name, None).await?,
        }
        let Some(route) = self.routes().get(name).cloned() else { return Ok(()) };
        // Kept answering for the grace period, no longer kept configured.
        let route = Arc::new(Route {
            registration: route.registration.clone(),
            kind: route.kind.clone(),
            plural: route.plural.clone(),
            namespaced: route.namespaced,
            generation: route.generation,
            slots: route.slots.clone(),
            warned: route.warned.clone(),
            configured: false,
        });
        self.routes_mut().insert(name.to_string(), route.clone());
        tracing::info!(plugin = %name, "admission webhooks unregistered");
        let webhooks = self.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(UNREGISTER_GRACE).await;
            let mut routes = webhooks.routes_mut();
            if routes.get(&name).is_some_and(|r| r.generation == route.generation) {
                routes.remove(&name);
                drop(routes);
                for hook in [Hook::Validate, Hook::Mutate] {
                    webhooks.shared.metrics.webhook_removed(&hook.path(&name));
                }
            }
        });
        Ok(())
    }

    /// Delete the configurations of every plugin (on shutdown, when the
    /// certificate was self-generated: nobody else can serve it).
    ///
    /// # Errors
    /// The first failure; the others are still attempted.
    pub async fn unregister_all(&self) -> Result<(), Error> {
        let mut first = None;
        for name in self.registered() {
            if let Err(e) = self.remove(&name, Delete::Always).await {
                tracing::warn!(plugin = %name, error = %e, "could not remove webhook configurations");
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Answer one AdmissionReview sent to `hook` of `plugin`: what the HTTPS
    /// server does for `POST /<hook>/<plugin>`, callable without a socket
    /// (benchmarks).
    pub async fn answer(&self, hook: Hook, plugin: &str, body: &[u8]) -> Answer {
        handler::answer(self, hook, plugin, body).await
    }

    fn route(&self, plugin: &str) -> Option<Arc<Route>> {
        self.routes().get(plugin).cloned()
    }

    fn routes(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Route>>> {
        // Single inserts and removes: the map is consistent even after a panic.
        self.shared.routes.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn routes_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Route>>> {
        self.shared.routes.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_policies_should_parse_as_kubernetes_spells_them() {
        assert_eq!("Fail".parse::<FailurePolicy>().unwrap(), FailurePolicy::Fail);
        assert_eq!("ignore".parse::<FailurePolicy>().unwrap(), FailurePolicy::Ignore);
        assert!("Allow".parse::<FailurePolicy>().is_err());
    }

    #[test]
    fn hooks_should_be_served_under_their_plugin() {
        assert_eq!(Hook::Validate.path("webapp"), "/validate/webapp");
        assert_eq!(Hook::Mutate.path("shop.webapp"), "/mutate/shop.webapp");
    }
}
