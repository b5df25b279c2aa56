//! The manager: the composition root. It owns the shared cache, the
//! metrics and health server, leader election, every controller, the
//! webhook server and the Reconciler lifecycle, and runs each controller
//! only while this replica leads it.
//!
//! Everything that runs a host — `operon run`, `operon dev`, the benches
//! and the end-to-end tests — builds it through one [`Builder`], as
//! controller-runtime's `Manager` is built once and given its runnables.
//!
//! Controllers come and go while the manager runs ([`Manager::add_controller`],
//! [`Manager::start`], [`Manager::remove`]): adding one starts (or joins) its
//! informers and, once its unit leads, its workers; removing one stops
//! exactly that controller — its triggers and workers stop, its queue is
//! dropped, its informer references are released — and nothing else is
//! disturbed.
//!
//! Three ways to lead ([`Leadership`]):
//! - no election: this replica always leads;
//! - one Lease for the process (controller-runtime's model): every
//!   controller runs while it is held, and losing it stops them all and
//!   ends [`Manager::run`] with [`Error::LeadershipLost`];
//! - one Lease per unit ([`Config::lease_per_controller`]): a unit (a
//!   Reconciler, a module file) is led by one replica at a time, replicas
//!   share the units out ([`leader::Shards`]), and a lost Lease stops that
//!   unit's controller only; the replica contends for it again.
//!
//! Standbys keep their caches warm (informers start with the controllers'
//! construction, not with leadership), so a failover costs only the Lease.

mod builder;
mod supervise;

pub use crate::leader::Leadership;
pub use builder::{Builder, Component, Part};
use supervise::{report_parts, report_readiness, supervise};

use crate::cache::{self, Cache};
use crate::controller::{Controller, Reconcile};
use crate::leader::{self, Fence, LeaderElector, Membership, Shards};
use crate::metrics::Metrics;
use crate::pipeline::{self, ModuleController};
use crate::runtime::{Module, Runtime};
use crate::server::{self, Endpoints, MetricsServing, Readiness, Server};
use crate::webhook::{self, Webhooks};
use futures::future::BoxFuture;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Settings of the manager.
#[derive(Debug, Clone)]
pub struct Config {
    /// Settings every module's controller starts from.
    pub pipeline: pipeline::Config,
    /// Settings of the shared cache.
    pub cache: cache::Config,
    /// Leader election, or `None` to act as the only replica.
    pub leader: Option<leader::Config>,
    /// With `leader`: one Lease per unit (named after `leader.name` and the
    /// unit) instead of one for the process, shared out over the replicas.
    pub lease_per_controller: bool,
    /// Where to serve `/metrics`; `None` for nowhere. Over plain HTTP,
    /// `/healthz` and `/readyz` are served there too.
    pub server_addr: Option<SocketAddr>,
    /// How `/metrics` is served: plain HTTP (the default here), or HTTPS
    /// for callers the API server authorizes (what `operon run` does).
    pub metrics_serving: MetricsServing,
    /// Where to serve `/healthz` and `/readyz` alone (controller-runtime's
    /// health-probe address), if wanted.
    pub probe_addr: Option<SocketAddr>,
    /// How long in-flight reconciles may run on shutdown (and when a
    /// controller is removed).
    pub shutdown_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pipeline: pipeline::Config::default(),
            cache: cache::Config::default(),
            leader: None,
            lease_per_controller: false,
            server_addr: Some(SocketAddr::from(([0, 0, 0, 0], 8080))),
            metrics_serving: MetricsServing::Http,
            probe_addr: None,
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// Why the manager could not be built, or stopped other than by a clean
/// shutdown.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This replica could not renew its Lease in time and stopped its
    /// controllers; a restart makes it a candidate again.
    #[error("leader election lost: stopped reconciling so that two replicas never write at once")]
    LeadershipLost,
    /// The HTTP server could not start.
    #[error(transparent)]
    Server(#[from] server::Error),
    /// Leader election is misconfigured.
    #[error(transparent)]
    Leader(#[from] leader::Error),
    /// The webhook server could not start.
    #[error(transparent)]
    Webhook(#[from] webhook::Error),
    /// A component added to the builder could not be built (a module file
    /// given on the command line that does not load, say).
    #[error(transparent)]
    Component(Box<dyn std::error::Error + Send + Sync>),
    /// A controller of this name already runs.
    #[error("a controller named {0:?} already runs; names must be unique")]
    Duplicate(String),
}

/// Something the manager runs while its unit leads: a controller.
pub trait Runnable: Send + Sync + 'static {
    /// Its name (unique among the manager's runnables).
    fn name(&self) -> &str;
    /// Run until `stop` completes, writing only while `fence` is open.
    fn run(&self, stop: BoxFuture<'static, ()>, fence: Fence) -> BoxFuture<'_, ()>;
    /// Wait until what it reads is cached.
    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'_, Result<(), cache::Error>>;
}

impl<R: Reconcile> Runnable for Controller<R> {
    fn name(&self) -> &str {
        Controller::name(self)
    }

    fn run(&self, stop: BoxFuture<'static, ()>, fence: Fence) -> BoxFuture<'_, ()> {
        Box::pin(Controller::run(self, stop, fence))
    }

    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'_, Result<(), cache::Error>> {
        Box::pin(Controller::wait_synced(self, timeout))
    }
}

/// Runs controllers against one cluster. Cheap to clone: clones are handles
/// to the same manager (to add and remove controllers while it runs).
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    cache: Cache,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    config: Config,
    mode: leader::Mode,
    /// The process Lease's elector, until `run` starts it.
    process: Mutex<Option<LeaderElector>>,
    /// Units by name, while anyone holds their leadership.
    units: Mutex<HashMap<String, leader::WeakLeadership>>,
    /// `true` once `run` has started (supervisors and electors start).
    running: watch::Sender<bool>,
    controllers: Mutex<BTreeMap<String, Entry>>,
    shards: Arc<Shards>,
    webhooks: Option<Webhooks>,
    runtime: Option<Runtime>,
    /// What the builder added (the Reconciler lifecycle).
    parts: Mutex<Vec<Arc<dyn Part>>>,
}

/// One controller and its supervisor.
struct Entry {
    runnable: Arc<dyn Runnable>,
    /// Set when it is a module's controller.
    module: Option<ModuleController>,
    leadership: Leadership,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Manager {
    /// A builder for a manager talking to the cluster through `client`.
    pub fn builder(client: kube::Client) -> Builder {
        Builder { client, config: Config::default(), runtime: None, webhooks: None, components: Vec::new() }
    }

    /// The leadership of the unit `name`: the same handle for as long as
    /// anyone holds one (a unit's Lease outlives its controllers' rebuilds).
    pub fn leadership(&self, name: &str) -> Leadership {
        let mut units = self.inner.units.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = units.get(name).and_then(|w| w.upgrade()) {
            return existing;
        }
        units.retain(|_, w| w.upgrade().is_some());
        let leadership = Leadership::new(name, &self.inner.mode);
        units.insert(name.to_string(), leadership.downgrade());
        if *self.inner.running.borrow() {
            leadership.start();
        }
        leadership
    }

    /// Add a controller for a loaded module with the manager's settings; its
    /// informers start at once.
    ///
    /// # Panics
    /// If a controller of the module's name already runs (use
    /// [`Manager::add_controller`] to handle that).
    pub fn add(&self, module: Module) -> ModuleController {
        let config = self.inner.config.pipeline.clone();
        self.add_controller(module, config, None).expect("controller names are unique")
    }

    /// Add a controller with its own settings, writing through `client`
    /// (e.g. one impersonating a ServiceAccount; default the manager's). Its
    /// informers start at once; it runs as soon as this replica leads its
    /// unit (named after the controller).
    ///
    /// # Errors
    /// [`Error::Duplicate`] if a controller of that name runs.
    pub fn add_controller(
        &self,
        module: Module,
        config: pipeline::Config,
        client: Option<kube::Client>,
    ) -> Result<ModuleController, Error> {
        let name = config.name.clone().unwrap_or_else(|| module.manifest().name.clone());
        if self.controller(&name).is_some() {
            return Err(Error::Duplicate(name));
        }
        let controller =
            self.build_controller(module, pipeline::Config { name: Some(name.clone()), ..config }, client, false);
        let leadership = self.leadership(&name);
        self.start(controller.clone(), leadership)?;
        Ok(controller)
    }

    /// Build a module's controller on this manager's cache, metrics and
    /// client (not started: see [`Manager::start`]).
    pub fn build_controller(
        &self,
        module: Module,
        config: pipeline::Config,
        client: Option<kube::Client>,
        probation: bool,
    ) -> ModuleController {
        let inner = &self.inner;
        let info = module.info();
        let name = config.name.clone().unwrap_or_else(|| module.manifest().name.clone());
        inner.metrics.module_loaded(&name, &info.digest, info.compile_time);
        let writer = client.unwrap_or_else(|| inner.client.clone());
        let config = pipeline::Config { name: Some(name), ..config };
        pipeline::build(module, &inner.cache, writer, inner.client.clone(), inner.metrics.clone(), config, probation)
    }

    /// Run `controller` whenever this replica leads `leadership`.
    ///
    /// # Errors
    /// [`Error::Duplicate`] if a controller of that name runs.
    pub fn start(&self, controller: ModuleController, leadership: Leadership) -> Result<(), Error> {
        let runnable: Arc<dyn Runnable> = Arc::new(controller.clone());
        self.start_runnable(runnable, Some(controller), leadership)
    }

    /// Run any runnable whenever this replica leads `leadership`.
    ///
    /// # Errors
    /// [`Error::Duplicate`] if a runnable of that name runs.
    pub fn start_runnable(
        &self,
        runnable: Arc<dyn Runnable>,
        module: Option<ModuleController>,
        leadership: Leadership,
    ) -> Result<(), Error> {
        let name = runnable.name().to_string();
        let mut controllers = self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner());
        if controllers.contains_key(&name) {
            return Err(Error::Duplicate(name));
        }
        let (stop, _) = watch::channel(false);
        let task = (*self.inner.running.borrow())
            .then(|| tokio::spawn(supervise(runnable.clone(), leadership.clone(), stop.subscribe())));
        controllers.insert(name, Entry { runnable, module, leadership, stop, task });
        Ok(())
    }

    /// Stop and forget a controller: in-flight reconciles finish (up to the
    /// shutdown timeout), then its queue and informer references are
    /// dropped. Other controllers are not disturbed. Returns whether it ran.
    pub async fn remove(&self, name: &str) -> bool {
        let entry = self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        let Some(mut entry) = entry else { return false };
        let _ = entry.stop.send(true);
        if let Some(task) = entry.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(self.inner.config.shutdown_timeout + Duration::from_secs(5), task).await.is_err() {
                tracing::warn!(controller = name, "controller did not stop in time; aborting it");
                abort.abort();
            }
        }
        if entry.module.is_some() {
            self.inner.metrics.controller_removed(name);
        }
        tracing::info!(controller = name, "controller removed");
        true
    }

    /// A module's controller by name.
    pub fn controller(&self, name: &str) -> Option<ModuleController> {
        self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner()).get(name).and_then(|e| e.module.clone())
    }

    /// The names of every module's controller.
    pub fn controller_names(&self) -> Vec<String> {
        let controllers = self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner());
        controllers.iter().filter(|(_, e)| e.module.is_some()).map(|(n, _)| n.clone()).collect()
    }

    /// Whether this replica leads the controller `name` now.
    pub fn leads(&self, name: &str) -> bool {
        let controllers = self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner());
        controllers.get(name).is_some_and(|e| e.task.is_some() && e.leadership.is_leading())
    }

    /// The identity this replica writes into Leases (empty without election).
    pub fn identity(&self) -> String {
        self.inner.config.leader.as_ref().map(|l| l.identity.clone()).unwrap_or_default()
    }

    /// The process's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// The shared cache.
    pub fn cache(&self) -> &Cache {
        &self.inner.cache
    }

    /// The client the manager was built with.
    pub fn client(&self) -> &kube::Client {
        &self.inner.client
    }

    /// The wasm engine the builder was given, if any.
    pub fn runtime(&self) -> Option<&Runtime> {
        self.inner.runtime.as_ref()
    }

    /// The webhook server, if this host serves webhooks.
    pub fn webhooks(&self) -> Option<&Webhooks> {
        self.inner.webhooks.as_ref()
    }

    /// The settings it was built with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Readiness checks reported on `/readyz`.
    pub fn readiness(&self) -> &Readiness {
        &self.inner.readiness
    }

    /// Run until `shutdown` completes (then drain in-flight reconciles for up
    /// to `shutdown_timeout` and release the Leases), or — with one Lease
    /// for the process — until it is lost.
    ///
    /// # Errors
    /// [`Error::LeadershipLost`] after stepping down; server and leader
    /// configuration errors at start.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let inner = self.inner.clone();
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };

        let mut background = tokio::task::JoinSet::new();
        let (metrics, readiness) = (inner.metrics.clone(), inner.readiness.clone());
        let metrics_endpoints = |addr| -> Result<_, server::Error> {
            let endpoints = match &inner.config.metrics_serving {
                MetricsServing::Http => Endpoints::plain(metrics.clone(), readiness.clone()),
                MetricsServing::Https { cert_dir } => {
                    Endpoints::secure_metrics(metrics.clone(), inner.client.clone(), cert_dir.as_deref())?
                }
            };
            Ok((addr, endpoints))
        };
        let endpoints = [
            inner.config.server_addr.map(metrics_endpoints).transpose()?,
            inner
                .config
                .probe_addr
                .map(|addr| (addr, Endpoints::probes(readiness.clone()).counted_in(metrics.clone()))),
        ];
        for (addr, endpoints) in endpoints.into_iter().flatten() {
            let server = Server::bind(addr).await?;
            let stop = stopped(stop_rx.clone());
            background.spawn(async move {
                if let Err(e) = server.serve(endpoints, stop).await {
                    tracing::error!(error = %e, "HTTP server failed");
                }
            });
        }
        let readiness =
            tokio::spawn(report_readiness(inner.cache.clone(), inner.metrics.clone(), inner.readiness.clone()));
        if let Some(webhooks) = &inner.webhooks {
            background.spawn(webhooks.clone().keep_configured(inner.cache.clone(), stopped(stop_rx.clone())));
        }

        let process_lease = match (&inner.config.leader, inner.process.lock().unwrap_or_else(|p| p.into_inner()).take())
        {
            (Some(config), Some(elector)) => {
                // A standby says so (0) rather than saying nothing.
                inner.metrics.leader_status(&config.name, false);
                let rx = elector.subscribe();
                background.spawn(elector.run(stopped(stop_rx.clone())));
                Some((rx, config.name.clone()))
            }
            (Some(config), None) => {
                let membership = Membership::new(inner.client.clone(), config.clone(), &config.name);
                let (shards, counted) = (inner.shards.clone(), Arc::downgrade(&inner));
                let units = move || counted.upgrade().map_or(0, |i| i.leased_units());
                background.spawn(membership.run(shards, units, stopped(stop_rx.clone())));
                None
            }
            (None, _) => None,
        };
        self.start_pending();
        let parts: Vec<Arc<dyn Part>> = inner.parts.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for part in &parts {
            let runnable: Arc<dyn Runnable> = part.clone();
            if let Err(e) = self.start_runnable(runnable, None, Leadership::always(part.name())) {
                tracing::error!(error = %e, "a component could not start");
            }
        }
        let parts_ready = tokio::spawn(report_parts(parts.clone(), inner.readiness.clone()));

        tokio::pin!(shutdown);
        let result = match process_lease {
            Some((mut leading, name)) => {
                let result = self.watch_process_lease(&mut leading, &name, shutdown.as_mut()).await;
                inner.metrics.leader_status(&name, false);
                result
            }
            None => {
                shutdown.as_mut().await;
                Ok(())
            }
        };
        let lost = result.is_err();
        // The components first (they add and remove controllers), then
        // every controller: drain in-flight reconciles, or (lease lost) stop
        // at once — the fence is already closed.
        parts_ready.abort();
        for part in &parts {
            self.remove(part.name()).await;
            part.stopped().await;
        }
        drop(parts);
        inner.parts.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let entries: Vec<Entry> =
            std::mem::take(&mut *inner.controllers.lock().unwrap_or_else(|p| p.into_inner())).into_values().collect();
        if !lost {
            tracing::info!(timeout = ?inner.config.shutdown_timeout, "shutting down: draining in-flight reconciles");
        }
        for e in &entries {
            let _ = e.stop.send(true);
        }
        let tasks: Vec<JoinHandle<()>> = entries.into_iter().filter_map(|mut e| e.task.take()).collect();
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        if lost {
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        let drained = tokio::time::timeout(inner.config.shutdown_timeout, futures::future::join_all(tasks)).await;
        if drained.is_err() {
            tracing::warn!("reconciles still running after the shutdown timeout; abandoning them");
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        // A self-generated CA dies with the process: configurations that name
        // it would only make the API server call a host nobody can trust.
        // Configurations with a mounted certificate stay: the other replicas
        // serve them.
        if let Some(webhooks) = inner.webhooks.as_ref().filter(|w| w.self_signed()) {
            let _ = tokio::time::timeout(Duration::from_secs(5), webhooks.unregister_all()).await;
        }
        // Releases the Leases (the electors see the stop) and stops the servers.
        readiness.abort();
        let _ = stop_tx.send(true);
        if let Some(webhooks) = &inner.webhooks {
            webhooks.shut_down();
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), async { while background.join_next().await.is_some() {} })
            .await;
        inner.running.send_replace(false);
        result
    }

    /// Start the supervisors of controllers added before `run`, and the
    /// elections of their units.
    fn start_pending(&self) {
        self.inner.running.send_replace(true);
        let units: Vec<Leadership> =
            self.inner.units.lock().unwrap_or_else(|p| p.into_inner()).values().filter_map(|w| w.upgrade()).collect();
        for unit in units {
            unit.start();
        }
        let mut controllers = self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner());
        for entry in controllers.values_mut() {
            entry.leadership.start();
            if entry.task.is_none() {
                entry.task = Some(tokio::spawn(supervise(
                    entry.runnable.clone(),
                    entry.leadership.clone(),
                    entry.stop.subscribe(),
                )));
            }
        }
    }

    /// With one Lease for the process: wait for `shutdown` (`Ok`) or for the
    /// Lease to be lost after it was held (`Err`).
    async fn watch_process_lease(
        &self,
        leading: &mut watch::Receiver<bool>,
        name: &str,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), Error> {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = leading.wait_for(|l| *l) => if r.is_err() { return Ok(()) },
        }
        self.inner.metrics.leader_status(name, true);
        tracing::info!(lease = %name, "leading: starting controllers");
        tokio::select! {
            _ = &mut shutdown => Ok(()),
            _ = leading.wait_for(|l| !*l) => Err(Error::LeadershipLost),
        }
    }
}

impl Inner {
    /// Units with a Lease of their own (the share is counted over them).
    fn leased_units(&self) -> usize {
        let units = self.units.lock().unwrap_or_else(|p| p.into_inner());
        units.values().filter_map(|w| w.upgrade()).filter(Leadership::leased).count()
    }
}
