//! Fetching and loading modules off the lifecycle's workers: a slow
//! registry, a large download or a long compile runs in a task of its own
//! (fetches at most [`FETCH_SLOTS`] at once), and the Reconciler is
//! reconciled again when it is done — so one tenant's slow source never
//! delays another Reconciler's load, swap, revocation or deletion.
//!
//! **Fetched bytes live until their module is loaded**, then only their
//! digest is kept ([`Loader::known`]): a host of a thousand Reconcilers does
//! not hold a thousand modules' bytes besides their compiled code. A
//! ConfigMap source is read with a GET when the ConfigMap's metadata
//! (all the cache holds of it) shows a new version, and not at every
//! lifecycle step.

use super::PluginKey;
use super::crd::ModuleSource;
use super::source::{self, Bounds, Fetched};
use super::verify::{self, HostPolicy};
use crate::cache::CachedObject;
use crate::runtime::{Limits, LoadError, Module, Runtime};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Downloads (URL and OCI sources) running at once, across every tenant.
pub const FETCH_SLOTS: usize = 4;

/// How long a restore that found nothing (or failed) is reported as such
/// before it is tried again.
pub const RESTORE_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Where a plugin's fetch stands.
#[derive(Debug, Clone)]
pub enum Fetch {
    /// Under way.
    Running,
    /// These bytes.
    Done(Arc<Fetched>),
    /// Failed; `retry` says whether trying again may help.
    Failed { error: source::Error, retry: bool },
}

/// Where a load stands.
#[derive(Clone)]
pub enum Load {
    /// Under way.
    Running,
    /// Loaded.
    Done(Module),
    /// Failed.
    Failed(Arc<LoadError>),
    /// (Restores only) this host does not keep that version.
    Missing,
}

struct FetchSlot {
    /// What was asked for: a new source (or a new version of a ConfigMap)
    /// starts a new fetch.
    source: String,
    state: Fetch,
    /// The bytes were loaded and let go; what they were.
    released: Option<String>,
    /// Failed downloads in a row, and when the next may start.
    failures: u32,
    retry_at: tokio::time::Instant,
}

/// What the lifecycle's loader holds. Cheap to clone.
#[derive(Clone)]
pub struct Loader {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: Runtime,
    client: kube::Client,
    metrics: Arc<crate::metrics::Metrics>,
    http: reqwest::Client,
    bounds: Bounds,
    /// What the operator opened (`--egress-allow`): module URLs too.
    allowed: crate::egress::grants::Allowed,
    slots: Semaphore,
    fetches: Mutex<HashMap<PluginKey, FetchSlot>>,
    loads: Mutex<HashMap<(PluginKey, String, Limits), Load>>,
    /// When a restore that found nothing (or failed) may be tried again:
    /// another replica may keep the version's bytes a moment later, and a
    /// replica must not give up on the version it should roll back to.
    restore_retry: Mutex<HashMap<(PluginKey, String, Limits), tokio::time::Instant>>,
    /// The module digest behind a pinned OCI manifest digest, once pulled:
    /// an unchanged pin is never pulled again.
    oci: Mutex<HashMap<String, String>>,
    /// The host's `--require-signed-modules`.
    policy: HostPolicy,
    /// The digests whose signature was checked for a plugin, under which
    /// requirement (its [`verify::fingerprint`]): a new requirement voids
    /// them.
    verified: Mutex<HashMap<PluginKey, (String, std::collections::HashSet<String>)>>,
    /// Called with a plugin whose fetch or load finished.
    done: Box<dyn Fn(&PluginKey) + Send + Sync>,
}

impl Loader {
    /// A loader that reports finished work through `done`, downloads only
    /// from addresses `allowed` opens, and checks every module's signature
    /// against `policy` (and its spec's keys).
    pub fn new(
        runtime: Runtime,
        client: kube::Client,
        metrics: Arc<crate::metrics::Metrics>,
        bounds: Bounds,
        allowed: crate::egress::grants::Allowed,
        policy: HostPolicy,
        done: impl Fn(&PluginKey) + Send + Sync + 'static,
    ) -> Loader {
        Loader {
            inner: Arc::new(Inner {
                runtime,
                client,
                metrics,
                http: source::http_client(bounds, &allowed),
                bounds,
                allowed,
                slots: Semaphore::new(FETCH_SLOTS),
                fetches: Mutex::new(HashMap::new()),
                loads: Mutex::new(HashMap::new()),
                restore_retry: Mutex::new(HashMap::new()),
                oci: Mutex::new(HashMap::new()),
                policy,
                verified: Mutex::new(HashMap::new()),
                done: Box::new(done),
            }),
        }
    }

    /// The module digest a source pins, when it is known without fetching
    /// (a URL's sha256; an OCI digest pulled before).
    pub fn pinned(&self, source: &ModuleSource) -> Option<String> {
        if let Some(url) = &source.url {
            return Some(format!("sha256:{}", url.sha256));
        }
        let oci = source.oci.as_ref()?;
        self.inner.oci.lock().unwrap_or_else(|p| p.into_inner()).get(&oci.digest).cloned()
    }

    /// Whether `digest` may serve `key` under the signature requirement of
    /// `spec` and the host: nothing is required, or its signature was
    /// checked (since this process started) under that same requirement.
    pub fn verified(&self, key: &PluginKey, spec: &ModuleSource, digest: &str) -> bool {
        let Some(wanted) = verify::fingerprint(&self.inner.policy, spec.verify.as_ref()) else {
            return true;
        };
        let verified = self.inner.verified.lock().unwrap_or_else(|p| p.into_inner());
        verified.get(key).is_some_and(|(f, digests)| *f == wanted && digests.contains(digest))
    }

    /// Record that `digest`'s signature was checked for `key` under the
    /// requirement of `spec` and the host.
    pub fn mark_verified(&self, key: &PluginKey, spec: &ModuleSource, digest: &str) {
        let Some(wanted) = verify::fingerprint(&self.inner.policy, spec.verify.as_ref()) else {
            return;
        };
        let mut verified = self.inner.verified.lock().unwrap_or_else(|p| p.into_inner());
        let entry = verified.entry(key.clone()).or_insert_with(|| (wanted.clone(), Default::default()));
        if entry.0 != wanted {
            *entry = (wanted, Default::default());
        }
        entry.1.insert(digest.to_string());
    }

    /// The host's signature requirement.
    pub fn policy(&self) -> &HostPolicy {
        &self.inner.policy
    }

    /// The digest of what the source held when its bytes were last fetched
    /// and loaded, if the source (and, for a ConfigMap, `config_map`'s
    /// version) is still the one fetched.
    pub fn known(&self, key: &PluginKey, spec: &ModuleSource, config_map: Option<&CachedObject>) -> Option<String> {
        let wanted = wanted(spec, config_map);
        let fetches = self.inner.fetches.lock().unwrap_or_else(|p| p.into_inner());
        fetches.get(key).filter(|s| s.source == wanted).and_then(|s| s.released.clone())
    }

    /// The bytes of a Reconciler's source: at once for a path; in a task of
    /// its own for a ConfigMap (`config_map`: its metadata, as cached; read
    /// again only when its version changes), a URL or an OCI artifact
    /// (`Running` until it finishes).
    pub async fn fetch(
        &self,
        key: &PluginKey,
        spec: &ModuleSource,
        config_map: Option<Option<Arc<CachedObject>>>,
        allow_paths: bool,
    ) -> Fetch {
        let config_map = config_map.flatten();
        if let Some(cm) = &spec.config_map
            && config_map.is_none()
        {
            return done(Err(source::missing_config_map(&cm.name, &cm.key)));
        }
        if let Some(path) = &spec.path {
            if !allow_paths {
                return Fetch::Failed {
                    error: source::Error::Refused(
                        "spec.module.path is refused: this host does not load modules from its own files \
                         (start it with --allow-module-paths, for development only); use a ConfigMap, URL or OCI source"
                            .into(),
                    ),
                    retry: false,
                };
            }
            let mut read = source::from_path(path, self.inner.bounds).await;
            if let Ok(fetched) = &read
                && let Err(e) = self.check(key, spec, fetched).await
            {
                read = Err(e);
            }
            self.inner.metrics.module_fetched("path", read.is_ok());
            return done(read);
        }
        if spec.url.is_none() && spec.oci.is_none() && spec.config_map.is_none() {
            return Fetch::Failed { error: source::Error::Refused("spec.module names no source".into()), retry: false };
        }
        let wanted = wanted(spec, config_map.as_deref());
        let mut fetches = self.inner.fetches.lock().unwrap_or_else(|p| p.into_inner());
        let mut failures = 0;
        // A slot whose bytes were let go is fetched again (its module is
        // wanted once more, e.g. to roll back to).
        if let Some(slot) = fetches.get(key).filter(|s| s.source == wanted && s.released.is_none()) {
            // A failed download is tried again after a backoff of its own
            // (1 s doubling to 5 min), whoever asks meanwhile.
            let again =
                matches!(slot.state, Fetch::Failed { retry: true, .. }) && tokio::time::Instant::now() >= slot.retry_at;
            if !again {
                return slot.state.clone();
            }
            failures = slot.failures;
        }
        let now = tokio::time::Instant::now();
        let slot = FetchSlot { source: wanted.clone(), state: Fetch::Running, released: None, failures, retry_at: now };
        fetches.insert(key.clone(), slot);
        drop(fetches);
        let (this, key, spec) = (self.clone(), key.clone(), spec.clone());
        let namespace = config_map.as_ref().and_then(|o| o.namespace()).unwrap_or_default().to_string();
        tokio::spawn(async move {
            let result = {
                // A ConfigMap is one GET from the API server: it never
                // queues behind slow downloads.
                let _slot = match spec.config_map {
                    Some(_) => None,
                    None => Some(this.inner.slots.acquire().await),
                };
                match (&spec.config_map, &spec.url, &spec.oci) {
                    (Some(cm), _, _) => {
                        source::from_config_map_api(
                            &this.inner.client,
                            &namespace,
                            &cm.name,
                            &cm.key,
                            this.inner.bounds,
                        )
                        .await
                    }
                    (None, Some(url), _) => {
                        source::from_url(&this.inner.http, url, this.inner.bounds, &this.inner.allowed).await
                    }
                    (None, None, Some(oci)) => {
                        let pulled = source::from_oci(oci, this.inner.bounds).await;
                        if let Ok(f) = &pulled {
                            this.inner
                                .oci
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(oci.digest.clone(), f.digest.clone());
                        }
                        pulled
                    }
                    (None, None, None) => Err(source::Error::Refused("spec.module names no source".into())),
                }
            };
            let result = match result {
                Ok(fetched) => this.check(&key, &spec, &fetched).await.map(|()| fetched),
                Err(e) => Err(e),
            };
            let kind = match (&spec.config_map, &spec.url) {
                (Some(_), _) => "configmap",
                (None, Some(_)) => "url",
                (None, None) => "oci",
            };
            this.inner.metrics.module_fetched(kind, result.is_ok());
            let state = match result {
                Ok(f) => Fetch::Done(Arc::new(f)),
                Err(error) => {
                    // A ConfigMap that lacks the key may gain it; a
                    // download's 404 is the spec's to fix.
                    let retry =
                        matches!(error, source::Error::Unavailable(_) | source::Error::Untrusted { retry: true, .. })
                            || (spec.config_map.is_some() && matches!(error, source::Error::Missing(_)));
                    Fetch::Failed { error, retry }
                }
            };
            {
                let mut fetches = this.inner.fetches.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(slot) = fetches.get_mut(&key).filter(|s| s.source == wanted) {
                    if matches!(state, Fetch::Failed { .. }) {
                        slot.failures += 1;
                        let backoff = std::time::Duration::from_secs(1)
                            .saturating_mul(1 << slot.failures.min(9).saturating_sub(1))
                            .min(std::time::Duration::from_secs(300));
                        slot.retry_at = tokio::time::Instant::now() + backoff;
                    }
                    slot.state = state;
                }
            }
            (this.inner.done)(&key);
        });
        Fetch::Running
    }

    /// Check `fetched`'s signature against what the host and `spec`
    /// require, and remember it was checked.
    async fn check(&self, key: &PluginKey, spec: &ModuleSource, fetched: &Fetched) -> Result<(), source::Error> {
        if verify::fingerprint(&self.inner.policy, spec.verify.as_ref()).is_none() {
            return Ok(());
        }
        let namespace = match key {
            PluginKey::Reconciler(k) => k.namespace.as_deref(),
            _ => None,
        };
        let client = &self.inner.client;
        let trusts = verify::required(&self.inner.policy, client, namespace, spec.verify.as_ref())
            .await
            .map_err(verify::Error::into_source)?;
        verify::check(&self.inner.http, &self.inner.allowed, spec, fetched, &trusts, self.inner.bounds)
            .await
            .map_err(verify::Error::into_source)?;
        self.mark_verified(key, spec, &fetched.digest);
        Ok(())
    }

    /// Drop what was fetched for `key` (loaded, or the plugin is gone).
    pub fn forget(&self, key: &PluginKey) {
        self.inner.fetches.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        self.inner.verified.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        self.inner.loads.lock().unwrap_or_else(|p| p.into_inner()).retain(|(k, _, _), _| k != key);
        self.inner.restore_retry.lock().unwrap_or_else(|p| p.into_inner()).retain(|(k, _, _), _| k != key);
    }

    /// Load `bytes` (whose digest is `digest`) with `limits`, in a task of
    /// its own; or, with `bytes` `None`, load that version back from this
    /// host's store (a rollback target after a restart).
    pub fn load(&self, key: &PluginKey, digest: &str, bytes: Option<Arc<Fetched>>, limits: &Limits) -> Load {
        let slot = (key.clone(), digest.to_string(), limits.clone());
        let mut loads = self.inner.loads.lock().unwrap_or_else(|p| p.into_inner());
        self.expire_restore(&mut loads, &slot);
        if let Some(state) = loads.get(&slot) {
            return state.clone();
        }
        loads.insert(slot.clone(), Load::Running);
        drop(loads);
        let this = self.clone();
        let (runtime, limits) = (self.inner.runtime.clone(), limits.clone());
        let digest = digest.to_string();
        let restore = bytes.is_none();
        tokio::spawn(async move {
            let result = tokio::task::spawn_blocking(move || match bytes {
                Some(f) => runtime.load(&f.bytes, limits).map(Some),
                None => runtime.load_kept(&digest, limits),
            })
            .await;
            let state = match result {
                Ok(Ok(Some(m))) => Load::Done(m),
                Ok(Ok(None)) => Load::Missing,
                Ok(Err(e)) => Load::Failed(Arc::new(e)),
                Err(join) => Load::Failed(Arc::new(LoadError::Panicked(join.to_string()))),
            };
            let key = slot.0.clone();
            if restore && matches!(state, Load::Missing | Load::Failed(_)) {
                let at = tokio::time::Instant::now() + RESTORE_RETRY;
                this.inner.restore_retry.lock().unwrap_or_else(|p| p.into_inner()).insert(slot.clone(), at);
            }
            this.inner.loads.lock().unwrap_or_else(|p| p.into_inner()).insert(slot, state);
            (this.inner.done)(&key);
        });
        Load::Running
    }

    /// Where the load of `digest` with `limits` stands, without starting it
    /// (a restore that found nothing is forgotten after [`RESTORE_RETRY`],
    /// so the next step asks again).
    pub fn peek(&self, key: &PluginKey, digest: &str, limits: &Limits) -> Option<Load> {
        let slot = (key.clone(), digest.to_string(), limits.clone());
        let mut loads = self.inner.loads.lock().unwrap_or_else(|p| p.into_inner());
        self.expire_restore(&mut loads, &slot);
        loads.get(&slot).cloned()
    }

    /// Forget a failed restore of `slot` once its retry time has come.
    fn expire_restore(
        &self,
        loads: &mut HashMap<(PluginKey, String, Limits), Load>,
        slot: &(PluginKey, String, Limits),
    ) {
        let mut retry = self.inner.restore_retry.lock().unwrap_or_else(|p| p.into_inner());
        if retry.get(slot).is_some_and(|at| tokio::time::Instant::now() >= *at) {
            retry.remove(slot);
            loads.remove(slot);
        }
    }

    /// Every load for `key` with `limits` that finished with a module.
    pub fn finished(&self, key: &PluginKey, limits: &Limits) -> Vec<(String, Module)> {
        let loads = self.inner.loads.lock().unwrap_or_else(|p| p.into_inner());
        loads
            .iter()
            .filter(|((k, _, l), _)| k == key && l == limits)
            .filter_map(|((_, d, _), state)| match state {
                Load::Done(m) => Some((d.clone(), m.clone())),
                _ => None,
            })
            .collect()
    }

    /// Take a finished load out of the loader (the plugin holds the module
    /// from now on), and let go of the bytes it was loaded from.
    pub fn take(&self, key: &PluginKey, digest: &str, limits: &Limits) {
        self.inner.loads.lock().unwrap_or_else(|p| p.into_inner()).remove(&(
            key.clone(),
            digest.to_string(),
            limits.clone(),
        ));
        let mut fetches = self.inner.fetches.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = fetches.get_mut(key)
            && matches!(&slot.state, Fetch::Done(f) if f.digest == digest)
        {
            slot.state = Fetch::Running;
            slot.released = Some(digest.to_string());
        }
    }
}

/// What a fetch is of: the source as the spec states it, and for a
/// ConfigMap the version of it seen (a new version is fetched again).
fn wanted(spec: &ModuleSource, config_map: Option<&CachedObject>) -> String {
    let mut wanted = serde_json::to_string(spec).unwrap_or_default();
    if spec.config_map.is_some()
        && let Some(o) = config_map
    {
        wanted.push_str(&format!(" {}/{}", o.uid().unwrap_or_default(), o.resource_version().unwrap_or_default()));
    }
    wanted
}

fn done(result: Result<Fetched, source::Error>) -> Fetch {
    match result {
        Ok(f) => Fetch::Done(Arc::new(f)),
        Err(error) => {
            let retry = matches!(
                error,
                source::Error::Unavailable(_)
                    | source::Error::Missing(_)
                    | source::Error::Untrusted { retry: true, .. }
            );
            Fetch::Failed { error, retry }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restore whose bytes this host does not keep is reported missing,
    /// then asked for again after [`RESTORE_RETRY`]: another replica may
    /// keep the version a moment later, and a replica that gave up for good
    /// would hold its lease with nothing to run.
    #[tokio::test(start_paused = true)]
    async fn a_missing_restore_should_be_tried_again_later() {
        crate::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let config = crate::runtime::Config {
            artifact_dir: Some(dir.path().to_path_buf()),
            instance_slots: 4,
            ..Default::default()
        };
        let runtime = Runtime::new(config).unwrap();
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let loader = Loader::new(
            runtime,
            client,
            metrics,
            Bounds::default(),
            crate::egress::grants::Allowed::public(),
            HostPolicy::default(),
            |_| {},
        );
        let key = PluginKey::ClusterReconciler("r".into());
        let (digest, limits) = ("sha256:00", Limits::default());
        assert!(matches!(loader.load(&key, digest, None, &limits), Load::Running));
        let mut state = None;
        for _ in 0..100 {
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            state = loader.peek(&key, digest, &limits);
            if !matches!(state, Some(Load::Running)) {
                break;
            }
        }
        assert!(matches!(state, Some(Load::Missing)), "a version nobody kept is missing");
        tokio::time::advance(RESTORE_RETRY).await;
        assert!(loader.peek(&key, digest, &limits).is_none(), "after the retry time the restore is asked for again");
        assert!(matches!(loader.load(&key, digest, None, &limits), Load::Running));
    }
}
