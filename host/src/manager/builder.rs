//! The one way to assemble a host: [`Builder`], and the components it adds
//! beside the manager's own parts.

use super::*;

/// Something the builder assembles into the manager beside its own parts:
/// the Reconciler lifecycle (`reconciler::Reconcilers::component`). Built
/// once the manager exists, then run on every replica until shutdown; the
/// components stop first, before the controllers they added.
pub trait Component: Send + 'static {
    /// Build it on the manager.
    ///
    /// # Errors
    /// Whatever keeps it from starting, said for a person.
    fn build(self: Box<Self>, manager: &Manager) -> BoxFuture<'_, Result<Arc<dyn Part>, Error>>;
}

/// A built [`Component`]: a runnable the manager stops first, and tells.
pub trait Part: Runnable {
    /// Called after its run stopped, before the controllers are drained.
    fn stopped(&self) -> BoxFuture<'_, ()>;
    /// Why it is not ready yet (`/readyz`), or `None` when it is.
    fn not_ready(&self) -> Option<String>;
}

/// Builds a [`Manager`]: the one way to assemble a host.
///
/// ```no_run
/// # async fn f(client: kube::Client) -> Result<(), operon::manager::Error> {
/// use operon::manager::{self, Manager};
/// let manager = Manager::builder(client)
///     .config(manager::Config { server_addr: None, ..Default::default() })
///     .build()
///     .await?;
/// manager.run(std::future::pending()).await
/// # }
/// ```
pub struct Builder {
    pub(super) client: kube::Client,
    pub(super) config: Config,
    pub(super) runtime: Option<Runtime>,
    pub(super) webhooks: Option<webhook::Config>,
    pub(super) components: Vec<Box<dyn Component>>,
}

impl Builder {
    /// Settings of the manager (default: [`Config::default`]).
    pub fn config(mut self, config: Config) -> Builder {
        self.config = config;
        self
    }

    /// The wasm engine modules load into (default: a new one with default
    /// settings).
    pub fn runtime(mut self, runtime: Runtime) -> Builder {
        self.runtime = Some(runtime);
        self
    }

    /// Serve admission webhooks (the server binds when the manager is built).
    pub fn webhooks(mut self, config: webhook::Config) -> Builder {
        self.webhooks = Some(config);
        self
    }

    /// Add a component (the Reconciler lifecycle:
    /// `reconciler::Reconcilers::component`).
    pub fn add(mut self, component: impl Component) -> Builder {
        self.components.push(Box::new(component));
        self
    }

    /// Build the manager: the webhook server (bound now, so its port is
    /// known), then each component (a module file that does not load is an
    /// error here).
    ///
    /// # Errors
    /// [`Error::Webhook`], [`Error::Leader`], [`Error::Component`].
    pub async fn build(self) -> Result<Manager, Error> {
        crate::install_crypto_provider();
        let Builder { client, config, runtime, webhooks, components } = self;
        let metrics = Arc::new(Metrics::new());
        if let Some(runtime) = &runtime {
            metrics.host_usage(runtime.gate().usage());
        }
        let shards = Arc::new(Shards::default());
        let (process, mode) = match (&config.leader, config.lease_per_controller) {
            (Some(leader), false) => {
                let elector = LeaderElector::new(client.clone(), leader.clone())?;
                let mode = leader::Mode::Process { leading: elector.subscribe(), lease: leader.qualified_name() };
                (Some(elector), mode)
            }
            (Some(leader), true) => {
                leader.validate()?;
                let mode = leader::Mode::PerUnit {
                    client: client.clone(),
                    config: leader.clone(),
                    shards: shards.clone(),
                    metrics: metrics.clone(),
                    elections: Arc::default(),
                };
                (None, mode)
            }
            (None, _) => (None, leader::Mode::Always(Arc::new(watch::channel(true).0))),
        };
        let webhooks = match webhooks {
            Some(c) => Some(Webhooks::start(client.clone(), metrics.clone(), c).await?),
            None => None,
        };
        let manager = Manager {
            inner: Arc::new(Inner {
                cache: Cache::new(client.clone(), config.cache.clone()),
                client,
                metrics,
                readiness: Readiness::new(),
                config,
                mode,
                process: Mutex::new(process),
                units: Mutex::new(HashMap::new()),
                running: watch::channel(false).0,
                controllers: Mutex::new(BTreeMap::new()),
                shards,
                webhooks,
                runtime,
                parts: Mutex::new(Vec::new()),
            }),
        };
        for component in components {
            let part = component.build(&manager).await?;
            manager.inner.parts.lock().unwrap_or_else(|p| p.into_inner()).push(part);
        }
        Ok(manager)
    }
}
