//! The manager: lifecycle of everything else. It owns the shared cache, the
//! metrics and the HTTP server, runs leader election, and starts the
//! controllers only while this replica leads.
//!
//! Standbys keep their caches warm (informers start with the controllers'
//! construction, not with leadership), so a failover costs only the Lease.

use crate::cache::{self, Cache};
use crate::controller::{self, Controller};
use crate::leader::{self, Fence, LeaderElector};
use crate::metrics::Metrics;
use crate::runtime::Module;
use crate::server::{self, Readiness, Server};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Settings of the manager.
#[derive(Debug, Clone)]
pub struct Config {
    /// Settings every controller starts from.
    pub controller: controller::Config,
    /// Settings of the shared cache.
    pub cache: cache::Config,
    /// Leader election, or `None` to act as the only replica.
    pub leader: Option<leader::Config>,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`; `None` for nowhere.
    pub server_addr: Option<SocketAddr>,
    /// A second address for the same endpoints (controller-runtime's
    /// separate health-probe address), if wanted.
    pub probe_addr: Option<SocketAddr>,
    /// How long in-flight reconciles may run on shutdown.
    pub shutdown_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            controller: controller::Config::default(),
            cache: cache::Config::default(),
            leader: None,
            server_addr: Some(SocketAddr::from(([0, 0, 0, 0], 8080))),
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
}

/// Runs controllers against one cluster.
pub struct Manager {
    client: kube::Client,
    cache: Cache,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    controllers: Vec<Controller>,
    config: Config,
}

impl Manager {
    /// A manager with no controllers yet.
    pub fn new(client: kube::Client, config: Config) -> Manager {
        Manager {
            cache: Cache::new(client.clone(), config.cache.clone()),
            client,
            metrics: Arc::new(Metrics::new()),
            readiness: Readiness::new(),
            controllers: Vec::new(),
            config,
        }
    }

    /// Add a controller for a loaded module; its informers start at once.
    pub fn add(&mut self, module: Module) -> Controller {
        let info = module.info();
        self.metrics.module_loaded(&info.manifest.name, &info.digest, info.compile_time);
        let c = Controller::new(
            module,
            &self.cache,
            self.client.clone(),
            self.client.clone(),
            self.metrics.clone(),
            self.config.controller.clone(),
        );
        self.controllers.push(c.clone());
        c
    }

    /// The process's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The shared cache.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Run until `shutdown` completes (then drain in-flight reconciles for up
    /// to `shutdown_timeout` and release the Lease), or until leadership is
    /// lost.
    ///
    /// # Errors
    /// [`Error::LeadershipLost`] after stepping down; server and leader
    /// configuration errors at start.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };

        let mut background = tokio::task::JoinSet::new();
        for addr in [self.config.server_addr, self.config.probe_addr].into_iter().flatten() {
            let server = Server::bind(addr).await?;
            let (metrics, readiness, stop) = (self.metrics.clone(), self.readiness.clone(), stopped(stop_rx.clone()));
            background.spawn(async move {
                if let Err(e) = server.serve(metrics, readiness, stop).await {
                    tracing::error!(error = %e, "HTTP server failed");
                }
            });
        }
        let readiness =
            tokio::spawn(report_readiness(self.cache.clone(), self.metrics.clone(), self.readiness.clone()));

        // Without election this replica always leads; the sender is kept
        // alive so that "leadership changed" never fires.
        let (_always, mut leading, elector_name) = match self.config.leader.clone() {
            Some(config) => {
                let name = config.name.clone();
                // A standby says so (0) rather than saying nothing.
                self.metrics.leader_status(&name, false);
                let elector = LeaderElector::new(self.client.clone(), config)?;
                let rx = elector.subscribe();
                background.spawn(elector.run(stopped(stop_rx.clone())));
                (None, rx, Some(name))
            }
            None => {
                let (tx, rx) = watch::channel(true);
                (Some(tx), rx, None)
            }
        };

        tokio::pin!(shutdown);
        let result = self.lead(&mut leading, elector_name.as_deref(), shutdown).await;
        // Releases the Lease (the elector sees the stop) and stops the server.
        readiness.abort();
        let _ = stop_tx.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), async { while background.join_next().await.is_some() {} })
            .await;
        result
    }

    /// Stand by until this replica leads, then run the controllers until
    /// `shutdown` (drain, `Ok`) or until leadership is lost (stop at once,
    /// `Err`).
    async fn lead(
        &self,
        leading: &mut watch::Receiver<bool>,
        lease: Option<&str>,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), Error> {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = leading.wait_for(|l| *l) => if r.is_err() { return Ok(()) },
        }
        if let Some(name) = lease {
            self.metrics.leader_status(name, true);
            tracing::info!(lease = %name, "leading: starting controllers");
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        // Every write checks this: it closes the moment the elector says we
        // no longer lead, before the tasks below are even aborted.
        let fence = Fence::new(leading.clone(), lease.unwrap_or("(no election)"));
        let mut running = tokio::task::JoinSet::new();
        for c in &self.controllers {
            let (c, mut stop, fence) = (c.clone(), stop_rx.clone(), fence.clone());
            running.spawn(async move {
                wait_synced(&c).await;
                c.run(
                    async move {
                        let _ = stop.wait_for(|s| *s).await;
                    },
                    fence,
                )
                .await;
            });
        }
        let lost = tokio::select! {
            _ = &mut shutdown => false,
            _ = leading.wait_for(|l| !*l) => true,
        };
        if lost {
            // Stop writing now: the Lease may soon be someone else's.
            running.abort_all();
            while running.join_next().await.is_some() {}
            if let Some(name) = lease {
                self.metrics.leader_status(name, false);
            }
            return Err(Error::LeadershipLost);
        }
        tracing::info!(timeout = ?self.config.shutdown_timeout, "shutting down: draining in-flight reconciles");
        let _ = stop_tx.send(true);
        let drained =
            tokio::time::timeout(self.config.shutdown_timeout, async { while running.join_next().await.is_some() {} })
                .await;
        if drained.is_err() {
            tracing::warn!("reconciles still running after the shutdown timeout; abandoning them");
            running.abort_all();
        }
        Ok(())
    }
}

/// Wait for a controller's informers, logging (not failing) while a kind is
/// missing: its CRD may be installed later.
async fn wait_synced(c: &Controller) {
    loop {
        match c.wait_synced(Duration::from_secs(30)).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(controller = c.name(), error = %e, "still waiting for the cache"),
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
