//! Admission webhooks served from the same guests that reconcile: a module
//! of the `reconciler-with-admission` world validates and defaults its
//! parent kind under the same sandbox, grants and hot swap as its
//! reconciles, as controller-runtime's Manager runs webhooks beside its
//! controllers.
//!
//! [`Webhooks`] is the registry and the HTTPS server (axum over rustls, on
//! its own port). [`Webhooks::register`] routes `/validate/<plugin>` and
//! `/mutate/<plugin>` to a plugin's [`Controller`] and applies a
//! `ValidatingWebhookConfiguration` and a `MutatingWebhookConfiguration`
//! named `operon-<plugin>` (server-side apply, field manager `operon`);
//! [`Webhooks::unregister`] deletes them. It knows nothing of the
//! Reconciler resource: `operon run --module` and the Reconciler controller
//! both call it.
//!
//! **Invariant: every webhook call reads the controller's module at the
//! moment it starts** ([`Controller::module`]), so a module swap switches
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
mod handler;
mod review;
mod server;

pub use handler::Answer;

use crate::controller::Controller;
use crate::metrics::Metrics;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How long a plugin's routes keep answering after its configurations were
/// deleted: the API server may still call it until its own informer drops
/// the configuration, and an unrouted call would fail (and, under `Fail`,
/// deny).
const UNREGISTER_GRACE: Duration = Duration::from_secs(10);

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
    /// The plugin's settings cannot make a webhook configuration.
    #[error("plugin {plugin}: {reason}")]
    InvalidPlugin {
        /// The plugin.
        plugin: String,
        /// What is wrong.
        reason: String,
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

/// Where the API server reaches this host: the webhook configurations'
/// `clientConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url = https://HOST:PORT/<hook>/<plugin>`: for an API
    /// server that reaches the host directly (development, envtest: `127.0.0.1`).
    /// `port` defaults to the port the server bound.
    Url {
        /// Host name or IP address.
        host: String,
        /// Port, if not the bound one (behind a port forward).
        port: Option<u16>,
    },
    /// `clientConfig.service`: a Service in front of the host's pods (in a cluster).
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The Service's port (443 usually), which targets the bind port.
        port: u16,
    },
}

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint::Url { host: "127.0.0.1".into(), port: None }
    }
}

impl Endpoint {
    /// Parses `NAMESPACE/NAME[:PORT]` (port 443 by default) as a Service.
    ///
    /// # Errors
    /// A description of what is wrong with `text`.
    pub fn service(text: &str) -> Result<Endpoint, String> {
        let (namespace, rest) =
            text.split_once('/').ok_or_else(|| format!("webhook service {text:?} must be NAMESPACE/NAME[:PORT]"))?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => {
                (name, port.parse().map_err(|_| format!("webhook service port {port:?} is not a port number"))?)
            }
            None => (rest, 443),
        };
        if namespace.is_empty() || name.is_empty() {
            return Err(format!("webhook service {text:?} must be NAMESPACE/NAME[:PORT]"));
        }
        Ok(Endpoint::Service { namespace: namespace.into(), name: name.into(), port })
    }

    /// Parses `HOST[:PORT]` (IPv6 addresses in brackets) as a URL endpoint.
    ///
    /// # Errors
    /// A description of what is wrong with `text`.
    pub fn url(text: &str) -> Result<Endpoint, String> {
        let bad = || format!("webhook URL host {text:?} must be HOST or HOST:PORT");
        if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p.parse().map_err(|_| bad())?),
                None if after.is_empty() => None,
                None => return Err(bad()),
            };
            return Ok(Endpoint::Url { host: host.into(), port });
        }
        match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => {
                Ok(Endpoint::Url { host: host.into(), port: Some(port.parse().map_err(|_| bad())?) })
            }
            _ if text.is_empty() => Err(bad()),
            _ => Ok(Endpoint::Url { host: text.into(), port: None }),
        }
    }

    /// The names the serving certificate must carry for the API server to
    /// accept it.
    fn hosts(&self) -> Vec<String> {
        match self {
            Endpoint::Url { host, .. } => vec![host.clone()],
            Endpoint::Service { namespace, name, .. } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
                format!("{name}.{namespace}"),
            ],
        }
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
    /// How the API server reaches this host.
    pub endpoint: Endpoint,
}

impl Default for Config {
    fn default() -> Self {
        Config { bind: SocketAddr::from(([0, 0, 0, 0], 9443)), cert_dir: None, endpoint: Endpoint::default() }
    }
}

/// One plugin whose module validates and defaults its parent kind.
#[derive(Clone)]
pub struct Plugin {
    /// Names the routes (`/validate/<name>`), the configurations
    /// (`operon-<name>`) and the webhooks (`validate.<name>.operon.dev`).
    /// Lowercase letters, digits, `-` and `.`.
    pub name: String,
    /// The controller whose module answers. Read at every call.
    pub controller: Controller,
    /// What happens when the guest cannot answer.
    pub failure_policy: FailurePolicy,
    /// The API server's webhook timeout (1–30 s). The guest's deadline is
    /// the smaller of the module's timeout and half of this.
    pub timeout: Duration,
    /// Only objects in namespaces matching this selector.
    pub namespace_selector: Option<LabelSelector>,
    /// Only objects matching this selector.
    pub object_selector: Option<LabelSelector>,
    /// For a plugin that acts in one namespace only (a namespaced
    /// Reconciler): only objects in that namespace are sent.
    pub scope_namespace: Option<String>,
}

impl Plugin {
    /// A plugin with the defaults: `Fail`, a 10 s timeout, no selectors,
    /// every namespace.
    pub fn new(name: impl Into<String>, controller: Controller) -> Plugin {
        Plugin {
            name: name.into(),
            controller,
            failure_policy: FailurePolicy::Fail,
            timeout: Duration::from_secs(10),
            namespace_selector: None,
            object_selector: None,
            scope_namespace: None,
        }
    }

    /// The deadline of one guest call: well under the API server's
    /// timeout, so that the host answers (per the failure policy) before the
    /// API server gives up.
    fn guest_deadline(&self) -> Duration {
        self.timeout / 2
    }

    fn settings(&self) -> config::Settings<'_> {
        config::Settings {
            name: &self.name,
            failure_policy: self.failure_policy,
            timeout: self.timeout,
            namespace_selector: self.namespace_selector.as_ref(),
            object_selector: self.object_selector.as_ref(),
            scope_namespace: self.scope_namespace.as_deref(),
        }
    }

    fn check(&self) -> Result<(), Error> {
        let invalid = |reason: String| Error::InvalidPlugin { plugin: self.name.clone(), reason };
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 200
            && self.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && self.name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && self.name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !name_ok {
            return Err(invalid(format!(
                "name {:?} must be 1-200 characters of [a-z0-9.-], starting and ending with a letter or digit",
                self.name
            )));
        }
        if !(1..=30).contains(&self.timeout.as_secs()) || self.timeout.subsec_nanos() != 0 {
            return Err(invalid(format!("timeout {:?} must be whole seconds between 1 and 30", self.timeout)));
        }
        Ok(())
    }
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("controller", &self.controller.name())
            .field("failure_policy", &self.failure_policy)
            .field("timeout", &self.timeout)
            .field("scope_namespace", &self.scope_namespace)
            .finish_non_exhaustive()
    }
}

/// A registered plugin, as the handler sees it.
pub(crate) struct Route {
    plugin: Plugin,
    /// Changes at every (re-)registration, so a delayed removal after
    /// `unregister` leaves a newer registration alone.
    generation: u64,
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
    /// PEM, for the configurations' `caBundle`.
    ca_bundle: Option<Vec<u8>>,
    self_signed: bool,
    routes: RwLock<HashMap<String, Arc<Route>>>,
    generations: AtomicU64,
}

impl Webhooks {
    /// Load (or generate) the serving certificate, bind `config.bind` and
    /// serve until `shutdown` completes. Plugins are added with
    /// [`Webhooks::register`].
    ///
    /// # Errors
    /// [`Error::Certificate`] when the cert directory lacks a usable
    /// `tls.crt`/`tls.key`; [`Error::Bind`] when the port is taken.
    pub async fn start(
        client: kube::Client,
        metrics: Arc<Metrics>,
        config: Config,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<Webhooks, Error> {
        let certs = match &config.cert_dir {
            Some(dir) => certs::Certs::from_dir(dir)?,
            None => certs::Certs::generate(&config.endpoint.hosts())?,
        };
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|source| Error::Bind { addr: config.bind, source })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Bind { addr: config.bind, source })?;
        let webhooks = Webhooks {
            shared: Arc::new(Shared {
                client,
                metrics,
                endpoint: config.endpoint,
                local_addr,
                ca_bundle: certs.ca_bundle.clone(),
                self_signed: config.cert_dir.is_none(),
                routes: RwLock::new(HashMap::new()),
                generations: AtomicU64::new(0),
            }),
        };
        tracing::info!(
            addr = %local_addr,
            certificate = %config.cert_dir.as_ref().map_or("self-generated".into(), |d| d.display().to_string()),
            "serving admission webhooks"
        );
        let tls = certs.server_config()?;
        if let Some(dir) = config.cert_dir {
            tokio::spawn(certs::watch(dir, certs.resolver.clone()));
        }
        tokio::spawn(server::serve(listener, tls, webhooks.clone(), shutdown));
        Ok(webhooks)
    }

    /// The address the server listens on (the real port when bound to 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The CA bundle (PEM) written into the configurations, if any.
    pub fn ca_bundle(&self) -> Option<&[u8]> {
        self.shared.ca_bundle.as_deref()
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

    /// Serve `plugin`'s module as a validating and a mutating webhook for its
    /// manifest's `for` kind (`CREATE` and `UPDATE` of the main resource,
    /// never `*/status`), and apply its two webhook configurations. A second
    /// call with the same name updates the settings.
    ///
    /// The routes exist before the configurations, so the API server never
    /// calls a path that is not served.
    ///
    /// # Errors
    /// [`Error::NoAdmission`] when the module does not export admission,
    /// [`Error::InvalidPlugin`], [`Error::Discovery`] when the kind is not
    /// served (yet), [`Error::Api`] when a configuration cannot be applied.
    /// On error the previous registration (if any) is kept as it was.
    pub async fn register(&self, plugin: Plugin) -> Result<(), Error> {
        plugin.check()?;
        let module = plugin.controller.module();
        if !module.admission() {
            return Err(Error::NoAdmission { plugin: plugin.name.clone() });
        }
        let kind = module.manifest().for_kind.clone();
        let gvk = kube::api::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.shared.client, &gvk)
            .await
            .map_err(|source| Error::Discovery { plugin: plugin.name.clone(), kind: kind.to_string(), source })?;
        let namespaced = caps.scope == kube::discovery::Scope::Namespaced;

        let name = plugin.name.clone();
        let route = Arc::new(Route { generation: self.shared.generations.fetch_add(1, Ordering::Relaxed), plugin });
        let previous = self.routes_mut().insert(name.clone(), route.clone());
        for hook in [Hook::Validate, Hook::Mutate] {
            self.shared.metrics.webhook_added(&hook.path(&name), route.plugin.failure_policy.as_str());
        }
        let target = config::Target {
            endpoint: &self.shared.endpoint,
            bound_port: self.shared.local_addr.port(),
            ca_bundle: self.shared.ca_bundle.as_deref(),
        };
        if let Err(e) =
            config::apply(&self.shared.client, &route.plugin.settings(), &kind, &resource.plural, namespaced, &target)
                .await
        {
            let mut routes = self.routes_mut();
            match previous {
                Some(previous) => routes.insert(name, previous),
                None => routes.remove(&name),
            };
            return Err(e);
        }
        tracing::info!(plugin = %name, kind = %kind, policy = %route.plugin.failure_policy, "admission webhooks registered");
        Ok(())
    }

    /// Delete `name`'s webhook configurations; its routes keep answering
    /// for a short grace period (the API server may still call them), then
    /// go. Unknown names are not an error.
    ///
    /// # Errors
    /// [`Error::Api`] when a configuration cannot be deleted; the routes are
    /// kept then, so nothing is left calling a path that is not served.
    pub async fn unregister(&self, name: &str) -> Result<(), Error> {
        config::delete(&self.shared.client, name).await?;
        let Some(route) = self.routes().get(name).cloned() else { return Ok(()) };
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

    /// [`Webhooks::unregister`] every plugin (on shutdown, when the
    /// certificate was self-generated: nobody else can serve it).
    ///
    /// # Errors
    /// The first failure; the others are still attempted.
    pub async fn unregister_all(&self) -> Result<(), Error> {
        let mut first = None;
        for name in self.registered() {
            if let Err(e) = self.unregister(&name).await {
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
    fn endpoints_should_parse_hosts_and_services() {
        assert_eq!(Endpoint::url("127.0.0.1").unwrap(), Endpoint::Url { host: "127.0.0.1".into(), port: None });
        assert_eq!(
            Endpoint::url("localhost:9443").unwrap(),
            Endpoint::Url { host: "localhost".into(), port: Some(9443) }
        );
        assert_eq!(Endpoint::url("[::1]:8443").unwrap(), Endpoint::Url { host: "::1".into(), port: Some(8443) });
        assert_eq!(Endpoint::url("::1").unwrap(), Endpoint::Url { host: "::1".into(), port: None });
        assert!(Endpoint::url("host:port").is_err());
        assert_eq!(
            Endpoint::service("operon-system/operon-webhooks").unwrap(),
            Endpoint::Service { namespace: "operon-system".into(), name: "operon-webhooks".into(), port: 443 }
        );
        assert!(matches!(Endpoint::service("ns/name:8443").unwrap(), Endpoint::Service { port: 8443, .. }));
        assert!(Endpoint::service("name-only").is_err());
    }

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
