//! The manager: lifecycle of everything else. It owns the shared cache, the
//! metrics and the HTTP server, runs leader election, and runs each
//! controller only while this replica leads it.
//!
//! Controllers come and go while the manager runs ([`Manager::add_controller`],
//! [`Manager::remove`]): adding one starts (or joins) its informers and,
//! once it leads, its workers; removing one stops exactly that controller —
//! its feeders and workers stop, its queue is dropped, its informer
//! references are released — and nothing else is disturbed.
//!
//! Three ways to lead:
//! - no election: this replica always leads;
//! - one Lease for the process (controller-runtime's model): every
//!   controller runs while it is held, and losing it stops them all and
//!   ends [`Manager::run`] with [`Error::LeadershipLost`];
//! - one Lease per controller ([`Config::lease_per_controller`]): each
//!   controller is led by one replica at a time, replicas share them out
//!   ([`leader::Shards`]), and a lost Lease stops that controller only; the
//!   replica contends for it again.
//!
//! Standbys keep their caches warm (informers start with the controllers'
//! construction, not with leadership), so a failover costs only the Lease.

use crate::cache::{self, Cache};
use crate::controller::{self, Controller};
use crate::leader::{self, Fence, LeaderElector, Membership, Shards};
use crate::metrics::Metrics;
use crate::runtime::Module;
use crate::server::{self, Endpoints, MetricsServing, Readiness, Server};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Settings of the manager.
#[derive(Debug, Clone)]
pub struct Config {
    /// Settings every controller starts from.
    pub controller: controller::Config,
    /// Settings of the shared cache.
    pub cache: cache::Config,
    /// Leader election, or `None` to act as the only replica.
    pub leader: Option<leader::Config>,
    /// With `leader`: one Lease per controller (named after `leader.name`
    /// and the controller) instead of one for the process, shared out over
    /// the replicas.
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
            controller: controller::Config::default(),
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

/// Why the manager stopped other than by a clean shutdown.
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
    /// A controller of this name already runs.
    #[error("a controller named {0:?} already runs; names must be unique")]
    Duplicate(String),
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
    controllers: Mutex<BTreeMap<String, Entry>>,
    /// Set once `run` starts: how supervisors learn whether they may lead.
    leading: Mutex<Option<Leading>>,
    shards: Arc<Shards>,
}

/// One controller and its supervisor.
struct Entry {
    controller: Controller,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    /// Whether this replica leads it now (for status writers).
    leads: watch::Receiver<bool>,
}

/// How supervisors lead, decided when `run` starts.
#[derive(Clone)]
enum Leading {
    /// Follow this channel (no election: always true; one Lease: the elector).
    Shared { leading: watch::Receiver<bool>, lease: String },
    /// Contend for a Lease of the controller's own.
    PerController { config: leader::Config },
}

impl Manager {
    /// A manager with no controllers yet.
    pub fn new(client: kube::Client, config: Config) -> Manager {
        crate::install_crypto_provider();
        Manager {
            inner: Arc::new(Inner {
                cache: Cache::new(client.clone(), config.cache.clone()),
                client,
                metrics: Arc::new(Metrics::new()),
                readiness: Readiness::new(),
                config,
                controllers: Mutex::new(BTreeMap::new()),
                leading: Mutex::new(None),
                shards: Arc::new(Shards::default()),
            }),
        }
    }

    /// Add a controller for a loaded module with the manager's controller
    /// settings; its informers start at once.
    ///
    /// # Panics
    /// If a controller of the module's name already runs (use
    /// [`Manager::add_controller`] to handle that).
    pub fn add(&mut self, module: Module) -> Controller {
        let config = self.inner.config.controller.clone();
        self.add_controller(module, config, None).expect("controller names are unique")
    }

    /// Add a controller with its own settings, writing through `client`
    /// (e.g. one impersonating a ServiceAccount; default the manager's). Its
    /// informers start at once; it runs as soon as this replica leads it.
    ///
    /// # Errors
    /// [`Error::Duplicate`] if a controller of that name runs.
    pub fn add_controller(
        &self,
        module: Module,
        config: controller::Config,
        client: Option<kube::Client>,
    ) -> Result<Controller, Error> {
        let inner = &self.inner;
        let name = config.name.clone().unwrap_or_else(|| module.manifest().name.clone());
        let mut controllers = inner.controllers.lock().unwrap_or_else(|p| p.into_inner());
        if controllers.contains_key(&name) {
            return Err(Error::Duplicate(name));
        }
        let info = module.info();
        inner.metrics.module_loaded(&name, &info.digest, info.compile_time);
        let writer = client.unwrap_or_else(|| inner.client.clone());
        let controller = Controller::new(
            module,
            &inner.cache,
            writer,
            inner.client.clone(),
            inner.metrics.clone(),
            controller::Config { name: Some(name.clone()), ..config },
        );
        let (stop, _) = watch::channel(false);
        let (leads_tx, leads) = watch::channel(false);
        // Before `run`, the supervisor is started by `run` itself.
        let leading = inner.leading.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let task = leading.map(|leading| {
            tokio::spawn(supervise(self.inner.clone(), controller.clone(), stop.subscribe(), leading, leads_tx))
        });
        controllers.insert(name, Entry { controller: controller.clone(), stop, task, leads });
        Ok(controller)
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
        self.inner.metrics.controller_removed(name);
        tracing::info!(controller = name, "controller removed");
        true
    }

    /// A running controller by name.
    pub fn controller(&self, name: &str) -> Option<Controller> {
        self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner()).get(name).map(|e| e.controller.clone())
    }

    /// The names of every controller.
    pub fn controller_names(&self) -> Vec<String> {
        self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    /// Whether this replica leads the controller now.
    pub fn leads(&self, name: &str) -> bool {
        self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner()).get(name).is_some_and(|e| *e.leads.borrow())
    }

    /// Whether this replica should write bookkeeping for `controller` (the
    /// status of its Reconciler): it leads that controller; or, with no
    /// controller running under that name, it leads the process (one
    /// Lease), or no single replica is in charge (per-controller Leases:
    /// every replica computes the same status from the same spec).
    pub fn writes_for(&self, controller: &str) -> bool {
        if let Some(entry) = self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner()).get(controller)
            && entry.task.is_some()
        {
            return *entry.leads.borrow();
        }
        match &*self.inner.leading.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(Leading::Shared { leading, .. }) => *leading.borrow(),
            Some(Leading::PerController { .. }) => true,
            None => false,
        }
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
            inner.config.probe_addr.map(|addr| (addr, Endpoints::probes(readiness.clone()))),
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

        // Without election this replica always leads; the sender is kept
        // alive so that "leadership changed" never fires.
        let (_always, process_lease) = match (&inner.config.leader, inner.config.lease_per_controller) {
            (Some(config), false) => {
                let name = config.name.clone();
                // A standby says so (0) rather than saying nothing.
                inner.metrics.leader_status(&name, false);
                let elector = LeaderElector::new(inner.client.clone(), config.clone())?;
                let rx = elector.subscribe();
                background.spawn(elector.run(stopped(stop_rx.clone())));
                *inner.leading.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Leading::Shared { leading: rx.clone(), lease: config.qualified_name() });
                (None, Some((rx, name)))
            }
            (Some(config), true) => {
                config.validate()?;
                let membership = Membership::new(inner.client.clone(), config.clone(), &config.name);
                let (shards, counted) = (inner.shards.clone(), inner.clone());
                let controllers = move || counted.controllers.lock().unwrap_or_else(|p| p.into_inner()).len();
                background.spawn(membership.run(shards, controllers, stopped(stop_rx.clone())));
                *inner.leading.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Leading::PerController { config: config.clone() });
                (None, None)
            }
            (None, _) => {
                let (tx, rx) = watch::channel(true);
                *inner.leading.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Leading::Shared { leading: rx, lease: "(no election)".into() });
                (Some(tx), None)
            }
        };
        self.start_pending();

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
        // Stop every controller: drain in-flight reconciles, or (lease lost)
        // stop at once — the fence is already closed.
        let entries: Vec<(String, Option<JoinHandle<()>>, watch::Sender<bool>)> = {
            let mut controllers = inner.controllers.lock().unwrap_or_else(|p| p.into_inner());
            controllers.iter_mut().map(|(n, e)| (n.clone(), e.task.take(), e.stop.clone())).collect()
        };
        if !lost {
            tracing::info!(timeout = ?inner.config.shutdown_timeout, "shutting down: draining in-flight reconciles");
        }
        for (_, _, stop) in &entries {
            let _ = stop.send(true);
        }
        let tasks: Vec<JoinHandle<()>> = entries.into_iter().filter_map(|(_, t, _)| t).collect();
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        if lost {
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        let drained = tokio::time::timeout(inner.config.shutdown_timeout, futures::future::join_all(tasks)).await;
        if drained.is_err() {
            tracing::warn!("reconciles still running after the shutdown timeout; abandoning them");
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        // Releases the Leases (the electors see the stop) and stops the server.
        readiness.abort();
        let _ = stop_tx.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), async { while background.join_next().await.is_some() {} })
            .await;
        result
    }

    /// Start the supervisors of controllers added before `run`.
    fn start_pending(&self) {
        let leading = self.inner.leading.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(leading) = leading else { return };
        let mut controllers = self.inner.controllers.lock().unwrap_or_else(|p| p.into_inner());
        for entry in controllers.values_mut() {
            if entry.task.is_none() {
                let (leads_tx, leads) = watch::channel(false);
                entry.leads = leads;
                entry.task = Some(tokio::spawn(supervise(
                    self.inner.clone(),
                    entry.controller.clone(),
                    entry.stop.subscribe(),
                    leading.clone(),
                    leads_tx,
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

/// Run one controller whenever this replica leads it, until `stop`.
async fn supervise(
    inner: Arc<Inner>,
    controller: Controller,
    mut stop: watch::Receiver<bool>,
    leading: Leading,
    leads: watch::Sender<bool>,
) {
    let name = controller.name().to_string();
    match leading {
        Leading::Shared { leading, lease } => {
            let mut leading_rx = leading.clone();
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                r = leading_rx.wait_for(|l| *l) => if r.is_err() { return },
            }
            let fence = Fence::new(leading, lease);
            wait_synced(&controller, &mut stop).await;
            leads.send_replace(true);
            run_until(&controller, &mut stop, fence).await;
            leads.send_replace(false);
        }
        Leading::PerController { config } => {
            let lease_name = leader::lease_name(&config.name, &name);
            let config = leader::Config { name: lease_name.clone(), ..config };
            let lease_id = config.qualified_name();
            let elector = match LeaderElector::new(inner.client.clone(), config) {
                Ok(e) => e.with_gate(inner.shards.clone()),
                Err(e) => {
                    tracing::error!(controller = %name, error = %e, "cannot elect a leader for this controller");
                    return;
                }
            };
            let mut leading = elector.subscribe();
            let (release_tx, mut release_rx) = watch::channel(false);
            let election = tokio::spawn(elector.run(async move {
                let _ = release_rx.wait_for(|r| *r).await;
            }));
            inner.metrics.leader_status(&lease_id, false);
            loop {
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => break,
                    r = leading.wait_for(|l| *l) => if r.is_err() { break },
                }
                inner.shards.acquired();
                inner.metrics.leader_status(&lease_id, true);
                tracing::info!(controller = %name, lease = %lease_id, "leading this controller");
                let fence = Fence::new(leading.clone(), lease_id.clone());
                wait_synced(&controller, &mut stop).await;
                leads.send_replace(true);
                run_until(&controller, &mut stop, fence).await;
                leads.send_replace(false);
                inner.shards.released();
                inner.metrics.leader_status(&lease_id, false);
                if *stop.borrow() {
                    break;
                }
                tracing::warn!(controller = %name, lease = %lease_id, "lost this controller's lease; standing by");
            }
            // Stop the workers first (done above), then hand the Lease over.
            let _ = release_tx.send(true);
            let _ = election.await;
            let _ = inner.metrics.leader_election_master_status.remove_label_values(&[&lease_id]);
        }
    }
}

/// Run the controller until `stop` or until its fence closes.
async fn run_until(controller: &Controller, stop: &mut watch::Receiver<bool>, fence: Fence) {
    let mut stop = stop.clone();
    let closed = fence.clone();
    controller
        .run(
            async move {
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => {}
                    () = closed.closed() => {}
                }
            },
            fence,
        )
        .await;
}

/// Wait for a controller's informers, logging (not failing) while a kind is
/// missing: its CRD may be installed later.
async fn wait_synced(c: &Controller, stop: &mut watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = c.wait_synced(Duration::from_secs(30)) => match r {
                Ok(()) => return,
                Err(e) => tracing::warn!(controller = c.name(), error = %e, "still waiting for the cache"),
            }
        }
    }
}

/// Keep `/readyz` and the cache gauges current.
async fn report_readiness(cache: Cache, metrics: Arc<Metrics>, readiness: Readiness) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let mut unsynced = Vec::new();
        for informer in cache.informers() {
            let key = informer.key();
            metrics.cache_objects(&key.kind.to_string(), informer.store().len());
            if !informer.is_synced() {
                unsynced.push(match informer.last_error() {
                    Some(e) => format!("{key} ({e})"),
                    None => key.to_string(),
                });
            }
        }
        readiness.set(
            "cache",
            if unsynced.is_empty() { Ok(()) } else { Err(format!("not synced: {}", unsynced.join("; "))) },
        );
    }
}
