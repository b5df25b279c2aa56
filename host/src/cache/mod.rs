//! The shared cache: one informer per (kind, namespace scope, label
//! selector), shared by every controller that needs it.
//!
//! An informer is a kube-runtime [`watcher`] feeding a [`Store`]. Informers
//! are reference-counted: [`Cache::informer`] starts one on first use and the
//! watch stops when the last [`Arc<Informer>`] is dropped. Objects are held as
//! `Arc<CachedObject>` with `managedFields` stripped.
//!
//! [`Cache::relist`] starts a kind's watches over: when the API server
//! changes how it serves a kind (a CRD's conversion switched), a watch
//! opened before keeps the old representation until the old storage is torn
//! down, and nothing changes the objects it delivered meanwhile.
//!
//! **Invariant: reconciles read only from here, never from the API server.**

mod object;
mod route;
mod store;

pub use object::{CachedObject, ControllerRef, MalformedObject, RawObject};
pub use route::Interest;
pub use store::Store;

use crate::contract::Gvk;
use futures::StreamExt;
use kube::api::{ApiResource, GroupVersionKind, TypeMeta};
use kube::discovery::Scope;
use kube::runtime::watcher;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Namespace and name of an object: what queues hold (never objects).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectKey {
    /// Build from parts.
    pub fn new(namespace: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey { namespace: namespace.map(str::to_string), name: name.to_string() }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// What an informer tells its subscribers.
#[derive(Debug, Clone)]
pub enum ObjectEvent {
    /// Created or updated. `initial` marks objects from the first list (and
    /// from the replay a late subscriber gets), which queues serve at low
    /// priority.
    Applied {
        /// The version the cache held before, if any.
        old: Option<Arc<CachedObject>>,
        /// The new version.
        new: Arc<CachedObject>,
        /// From an initial list.
        initial: bool,
    },
    /// Deleted (the last known version).
    Deleted(Arc<CachedObject>),
    /// The periodic resync: the object did not change; controllers reconcile
    /// it anyway, bypassing predicates.
    Resync(Arc<CachedObject>),
}

/// Identifies one informer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatchKey {
    /// The kind watched.
    pub kind: Gvk,
    /// One namespace, or `None` for all namespaces (and cluster-scoped kinds).
    pub namespace: Option<String>,
    /// A label selector, in the string syntax.
    pub selector: Option<String>,
    /// A field selector (`metadata.name=module`): one object of a kind,
    /// rather than all of a namespace.
    pub fields: Option<String>,
    /// Watch metadata only (`PartialObjectMetadata`): the store holds each
    /// object's `metadata` and nothing else, for a watcher that needs to
    /// know *that* an object changed, not what it holds (a module's
    /// ConfigMap: its megabyte is read with a GET when it changes, never
    /// kept).
    pub metadata_only: bool,
}

impl WatchKey {
    /// Every object of `kind` in `namespace` (`None`: all namespaces).
    pub fn new(kind: Gvk, namespace: Option<String>) -> WatchKey {
        WatchKey { kind, namespace, selector: None, fields: None, metadata_only: false }
    }
}

impl fmt::Display for WatchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(s) = &self.selector {
            write!(f, " [{s}]")?;
        }
        if let Some(s) = &self.fields {
            write!(f, " [{s}]")?;
        }
        if self.metadata_only {
            write!(f, " (metadata)")?;
        }
        Ok(())
    }
}

/// Cache settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Period of the resync that re-delivers every object (jittered ±10%).
    pub resync: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { resync: Duration::from_secs(10 * 3600) }
    }
}

/// Errors of waiting for the cache.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An informer did not finish its first list in time.
    #[error("cache for {key} not synced after {timeout:?}{}", last_error.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    SyncTimeout {
        /// The informer.
        key: WatchKey,
        /// How long we waited.
        timeout: Duration,
        /// The last error its watch reported, if any.
        last_error: Option<String>,
    },
}

/// The shared cache: a registry of informers. Cheap to clone.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<CacheInner>,
}

struct CacheInner {
    client: kube::Client,
    config: Config,
    informers: Mutex<HashMap<WatchKey, Weak<Informer>>>,
}

impl Cache {
    /// A cache that watches through `client`.
    pub fn new(client: kube::Client, config: Config) -> Cache {
        Cache { inner: Arc::new(CacheInner { client, config, informers: Mutex::new(HashMap::new()) }) }
    }

    /// The informer for `key`, started if nobody holds it yet. The watch runs
    /// as long as any clone of the returned `Arc` is alive.
    pub fn informer(&self, key: WatchKey) -> Arc<Informer> {
        let mut informers = self.inner.informers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = informers.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        let (synced, _) = watch::channel(false);
        let informer = Arc::new(Informer {
            key: key.clone(),
            store: RwLock::new(Store::default()),
            synced,
            last_error: Mutex::new(None),
            subscribers: Mutex::new(route::Subscribers::default()),
            task: Mutex::new(None),
            namespaced: OnceLock::new(),
            relist: Arc::new(tokio::sync::Notify::new()),
        });
        let task =
            tokio::spawn(run_informer(self.inner.client.clone(), Arc::downgrade(&informer), self.inner.config.resync));
        *informer.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
        informers.retain(|_, w| w.strong_count() > 0);
        informers.insert(key, Arc::downgrade(&informer));
        informer
    }

    /// Every live informer (for readiness and metrics).
    pub fn informers(&self) -> Vec<Arc<Informer>> {
        let informers = self.inner.informers.lock().unwrap_or_else(|p| p.into_inner());
        informers.values().filter_map(Weak::upgrade).collect()
    }

    /// Start every watch of `group`/`kind` (any version, namespace or
    /// selector) over with a fresh list, after `delay`. An object the new
    /// list shows differently at the same resourceVersion (converted another
    /// way) is delivered as a [`ObjectEvent::Resync`], past every predicate.
    /// Returns at once.
    pub fn relist(&self, group: &str, kind: &str, delay: Duration) {
        let (cache, group, kind) = (self.clone(), group.to_string(), kind.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            for informer in cache.informers() {
                if informer.key.kind.group == group && informer.key.kind.kind == kind {
                    tracing::debug!(informer = %informer.key, "relisting");
                    informer.relist.notify_one();
                }
            }
        });
    }
}

/// One watch and its store.
pub struct Informer {
    key: WatchKey,
    store: RwLock<Store>,
    synced: watch::Sender<bool>,
    last_error: Mutex<Option<String>>,
    subscribers: Mutex<route::Subscribers>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
    namespaced: OnceLock<bool>,
    /// Tells the watch to start over ([`Cache::relist`]).
    relist: Arc<tokio::sync::Notify>,
}

impl Drop for Informer {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

impl Informer {
    /// What this informer watches.
    pub fn key(&self) -> &WatchKey {
        &self.key
    }

    /// Read access to the store.
    pub fn store(&self) -> std::sync::RwLockReadGuard<'_, Store> {
        self.store.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the first list has completed.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Whether the kind is namespaced, once discovery has answered.
    pub fn namespaced(&self) -> Option<bool> {
        self.namespaced.get().copied()
    }

    /// The last error of discovery or the watch, cleared on success.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Wait until the first list has completed.
    ///
    /// # Errors
    /// [`Error::SyncTimeout`] with the watch's last error (e.g. a kind whose
    /// CRD is not installed).
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), Error> {
        let mut rx = self.synced.subscribe();
        match tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await {
            Ok(_) => Ok(()),
            Err(_) => Err(Error::SyncTimeout { key: self.key.clone(), timeout, last_error: self.last_error() }),
        }
    }

    /// Receive every future event, preceded by an `Applied { initial: true }`
    /// for each object already held. Nothing is missed or duplicated between
    /// the replay and the live events: both happen under the store lock.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<ObjectEvent> {
        self.subscribe_to(Interest::all())
    }

    /// As [`Informer::subscribe`], but only the events of objects `interest`
    /// admits (an update also when its old version did): the informer
    /// routes each event through an index of its subscribers' interests.
    pub fn subscribe_to(&self, interest: Interest) -> mpsc::UnboundedReceiver<ObjectEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let store = self.store();
        let held: Vec<Arc<CachedObject>> = match &interest.namespaces {
            Some(namespaces) if interest.label.is_none() => {
                let mut held: Vec<_> = namespaces.iter().flat_map(|ns| store.in_namespace(Some(ns))).collect();
                if interest.cluster {
                    held.extend(store.iter().filter(|o| o.namespace().is_none()).cloned());
                }
                held
            }
            _ => store.iter().filter(|o| interest.admits(o)).cloned().collect(),
        };
        for object in held {
            let _ = tx.send(ObjectEvent::Applied { old: None, new: object, initial: true });
        }
        self.subscribers.lock().unwrap_or_else(|p| p.into_inner()).add(tx, interest);
        drop(store);
        rx
    }

    fn publish(&self, event: ObjectEvent) {
        self.subscribers.lock().unwrap_or_else(|p| p.into_inner()).publish(&event);
    }

    fn set_error(&self, error: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = error;
    }
}

/// Resolve the kind, then run the watch until the informer is dropped.
async fn run_informer(client: kube::Client, weak: Weak<Informer>, resync: Duration) {
    let Some((key, relist_asked)) = weak.upgrade().map(|i| (i.key.clone(), i.relist.clone())) else { return };
    let gvk = GroupVersionKind::gvk(&key.kind.group, &key.kind.version, &key.kind.kind);
    // A kind whose CRD is not installed yet is retried, not fatal.
    let mut delay = Duration::from_millis(500);
    let (resource, namespaced) = loop {
        match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok((ar, caps)) => break (ar, caps.scope == Scope::Namespaced),
            Err(e) => {
                let Some(informer) = weak.upgrade() else { return };
                let msg = format!("kind {} is not served by the API server (is its CRD installed?): {e}", key.kind);
                tracing::warn!(kind = %key.kind, error = %e, retry_in = ?delay, "cannot resolve kind; retrying");
                informer.set_error(Some(msg));
                drop(informer);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    };
    if let Some(informer) = weak.upgrade() {
        let _ = informer.namespaced.set(namespaced);
        informer.set_error(None);
    }
    tracing::debug!(informer = %key, namespaced, "watch starting");
    let meta: kube::Api<kube::core::PartialObjectMeta<RawObject>> = match (&key.namespace, namespaced) {
        (Some(ns), true) => kube::Api::namespaced_with(client.clone(), ns, &resource),
        _ => kube::Api::all_with(client.clone(), &resource),
    };
    let api: kube::Api<RawObject> = match (&key.namespace, namespaced) {
        (Some(ns), true) => kube::Api::namespaced_with(client, ns, &resource),
        _ => kube::Api::all_with(client, &resource),
    };
    let mut config = watcher::Config::default();
    if let Some(s) = &key.selector {
        config = config.labels(s);
    }
    if let Some(s) = &key.fields {
        config = config.fields(s);
    }
    let types = Arc::new(TypeMeta { api_version: resource.api_version.clone(), kind: resource.kind.clone() });
    let open = || match key.metadata_only {
        false => watcher::watcher(api.clone(), config.clone()).boxed(),
        true => watcher::watcher(meta.clone(), config.clone())
            .map(|item| item.map(|event| map_event(event, object::from_meta)))
            .boxed(),
    };
    let mut stream = open();
    let mut backoff = Duration::from_millis(100);
    let mut relist: Option<Store> = None;
    // The kind stopped being served (its CRD was deleted): not synced until
    // the watch works again.
    let mut gone = false;
    let mut resync_timer = Box::pin(tokio::time::sleep(jitter(resync)));
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = &mut resync_timer => {
                let Some(informer) = weak.upgrade() else { return };
                let objects: Vec<_> = informer.store().iter().cloned().collect();
                for o in objects {
                    informer.publish(ObjectEvent::Resync(o));
                }
                resync_timer = Box::pin(tokio::time::sleep(jitter(resync)));
                continue;
            }
            _ = relist_asked.notified() => {
                // A new watcher lists first; its InitDone swaps the store.
                stream = open();
                relist = None;
                continue;
            }
        };
        let Some(item) = item else { return };
        let Some(informer) = weak.upgrade() else { return };
        match item {
            Err(e) => {
                // The watcher recovers by itself on the next poll (resuming
                // from the last resourceVersion, or re-listing after 410 Gone);
                // back off so a down API server is not hammered.
                tracing::debug!(informer = %key, error = %e, "watch error; retrying");
                informer.set_error(Some(format!("watch of {key} failed: {e}")));
                // The cache no longer reflects the cluster: say so (/readyz)
                // rather than serve a kind that is gone as if it were empty.
                if not_served(&e) && informer.is_synced() {
                    tracing::warn!(informer = %key, "kind no longer served (CRD deleted?); not synced until it returns");
                    informer.synced.send_replace(false);
                    gone = true;
                }
                drop(informer);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
            Ok(event) => {
                backoff = Duration::from_millis(100);
                if gone && matches!(event, watcher::Event::Apply(_) | watcher::Event::Delete(_)) {
                    // Served again and the watch resumed without a re-list.
                    gone = false;
                    informer.set_error(None);
                    informer.synced.send_replace(true);
                }
                if matches!(event, watcher::Event::InitDone) {
                    gone = false;
                }
                apply_event(&informer, event, &types, &mut relist);
            }
        }
    }
}

/// `event` with each object it carries mapped by `f`.
fn map_event<A, B>(event: watcher::Event<A>, f: impl Fn(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

fn apply_event(
    informer: &Informer,
    event: watcher::Event<RawObject>,
    types: &Arc<TypeMeta>,
    relist: &mut Option<Store>,
) {
    let wrap = |raw: RawObject| match CachedObject::from_raw(&raw, types) {
        Ok(o) => Some(Arc::new(o)),
        Err(e) => {
            tracing::warn!(informer = %informer.key, object = ?kube::Resource::meta(&raw).name, error = %e, "skipping an object the cache cannot hold");
            None
        }
    };
    match event {
        watcher::Event::Apply(o) => {
            let Some(new) = wrap(o) else { return };
            let mut store = informer.store.write().unwrap_or_else(|p| p.into_inner());
            let old = store.insert(new.clone());
            informer.publish(ObjectEvent::Applied { old, new, initial: false });
        }
        watcher::Event::Delete(o) => {
            let Some(gone) = wrap(o) else { return };
            let mut store = informer.store.write().unwrap_or_else(|p| p.into_inner());
            store.remove(&gone.key());
            informer.publish(ObjectEvent::Deleted(gone));
        }
        watcher::Event::Init => *relist = Some(Store::default()),
        watcher::Event::InitApply(o) => {
            if let Some(o) = wrap(o) {
                relist.get_or_insert_with(Store::default).insert(o);
            }
        }
        watcher::Event::InitDone => {
            // Swap in the new list at once and tell subscribers what changed
            // while the watch was down (objects gone from the list were
            // deleted meanwhile).
            let fresh = relist.take().unwrap_or_default();
            let first = !informer.is_synced();
            let mut store = informer.store.write().unwrap_or_else(|p| p.into_inner());
            let old_store = std::mem::replace(&mut *store, fresh);
            for new in store.iter() {
                let old = old_store.get(&new.key()).cloned();
                match old {
                    // The same version shown another way (its CRD's
                    // conversion changed): reconcile it, whatever the
                    // predicates say of an unchanged generation.
                    Some(o) if o.resource_version() == new.resource_version() => {
                        if o.json() != new.json() {
                            informer.publish(ObjectEvent::Resync(new.clone()));
                        }
                    }
                    old => informer.publish(ObjectEvent::Applied { old, new: new.clone(), initial: first }),
                }
            }
            for gone in old_store.iter().filter(|o| store.get(&o.key()).is_none()) {
                informer.publish(ObjectEvent::Deleted(gone.clone()));
            }
            let count = store.len();
            drop(store);
            informer.set_error(None);
            if first {
                tracing::debug!(informer = %informer.key, objects = count, "synced");
            }
            informer.synced.send_replace(true);
        }
    }
}

/// Whether a watch error says the kind is not served (404).
fn not_served(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// ±10% so that many informers do not resync in the same instant.
pub(crate) fn jitter(period: Duration) -> Duration {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let factor = 0.9 + 0.2 * (nanos as f64 / 1e9);
    period.mul_f64(factor)
}

/// Resolve an [`ApiResource`] for `kind` through discovery (used by the
/// applier, which writes kinds the cache may not watch).
pub async fn resolve(client: &kube::Client, kind: &Gvk) -> kube::Result<(ApiResource, bool)> {
    let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    Ok((ar, caps.scope == Scope::Namespaced))
}
