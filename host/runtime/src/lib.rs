//! The wasm runtime: one [`wasmtime::Engine`] per process, loaded guest
//! modules, and calls into them under a sandbox.
//!
//! Layered the way wasmtime's own embedding examples are: one `Engine`
//! (pooling allocator, epoch interruption) → one [`Module`] per module
//! version (a `Component` pre-linked into an `InstancePre`) → a cheap `Store`
//! per call (or a small pool of reused instances for heavy guests).
//!
//! **Invariant: the runtime never writes to the cluster.** A guest reads
//! through [`ObjectReader`] (backed by the informer cache, or by a fixture in
//! `operon test`) and returns an [`Outcome`]; applying it is `apply`'s job.

// The contract's crate under the name the modules use.
use operon_contract as contract;

mod admission;
mod artifacts;
mod call;
mod conversion;
mod error;
mod gate;
mod guest;
mod idle;
mod limits;
mod module;
mod pool;
mod stdio;

pub use error::{CallError, LoadError};
pub use gate::{Gate, GateLimits, Pass, Usage};
pub use guest::{Egress, NoEgress, NoObjects, ObjectReader, READ_BUDGET_SPENT, ReadError};
pub use limits::{InstancePolicy, Limits, POOLED_ABOVE_BYTES};
#[doc(hidden)]
pub use module::fuzz_outcome;
pub use module::{Admitted, Module, ModuleInfo, Shortage};
// The contract's vocabulary, re-exported: it is the runtime's API too.
pub use crate::contract::{Denial, Event, Failure, Gvk, Manifest, Mapping, Outcome, Request, Review, Watch};

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use operon_contract::{WIT_PACKAGE, WIT_VERSION, WIT_VERSIONS_RUN};

/// Process-wide engine settings. Per-module limits live in [`Limits`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Instance slots in the pooling allocator: the most guest instances that
    /// may be alive at once across every module (fresh ones live for one
    /// call; pooled ones stay).
    pub instance_slots: u32,
    /// Ceiling for any guest's linear memory; a module's `Limits::memory`
    /// must not exceed it.
    pub max_memory: u64,
    /// How often the epoch ticker advances: the granularity of timeouts.
    pub epoch_tick: Duration,
    /// Where compiled artifacts are cached, or `None` to compile every time.
    pub artifact_dir: Option<PathBuf>,
    /// The most bytes the artifact cache may hold (`0`: no bound); the
    /// least recently used entries go first, never a loaded module's.
    pub artifact_cache_max: u64,
    /// The host's share of guest memory and call slots, across every
    /// module ([`Gate`]); by default none.
    pub gate: GateLimits,
    /// Unload a module's compiled code and instances when no call began for
    /// this long ([`Module::unload_if_idle`]); it is loaded again from the
    /// artifact cache by its next call. `None`: never (also without an
    /// artifact cache).
    pub unload_idle_after: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            instance_slots: 1000,
            max_memory: 512 << 20,
            epoch_tick: Duration::from_millis(2),
            artifact_dir: default_artifact_dir(),
            artifact_cache_max: ARTIFACT_CACHE_MAX,
            gate: GateLimits::default(),
            unload_idle_after: None,
        }
    }
}

/// The artifact cache's bound by default: 2 GiB (some thirty-five
/// versions of a Python guest, a thousand of a Rust one).
pub const ARTIFACT_CACHE_MAX: u64 = 2 << 30;

/// The digest that names a module: `sha256:<hex>` of its bytes. The one
/// definition, used by the loader, the sources and the file watches alike.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `$XDG_CACHE_HOME/operon/artifacts`, else `~/.cache/operon/artifacts`.
pub fn default_artifact_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("operon").join("artifacts"))
}

/// The engine and everything shared by every module: linkers (with and
/// without WASI), the epoch ticker and the artifact cache.
///
/// Cheap to clone; the ticker thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: wasmtime::Engine,
    /// Links only `operon:reconciler/host`: for guests that import nothing else.
    linker: wasmtime::component::Linker<guest::State>,
    /// Also links WASI p2, for guests built with libc or a language runtime.
    wasi_linker: wasmtime::component::Linker<guest::State>,
    artifacts: Option<artifacts::ArtifactCache>,
    config: Config,
    gate: Gate,
    ticker_stop: Arc<AtomicBool>,
    /// Every module loaded, for the idle sweep (weak: a module dropped by
    /// its holders is gone).
    modules: Modules,
}

pub(crate) type Modules = Arc<std::sync::Mutex<Vec<std::sync::Weak<module::Inner>>>>;

impl Drop for Inner {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    /// Build the engine. Fails only if the platform cannot reserve the
    /// pooling allocator's address space.
    pub fn new(config: Config) -> Result<Runtime, LoadError> {
        let engine = build_engine(&config).map_err(LoadError::Engine)?;
        let linker = guest::linker(&engine, false).map_err(LoadError::Engine)?;
        let wasi_linker = guest::linker(&engine, true).map_err(LoadError::Engine)?;
        let artifacts = config.artifact_dir.clone().map(|dir| artifacts::ArtifactCache::new(dir, &engine));
        let ticker_stop = Arc::new(AtomicBool::new(false));
        spawn_epoch_ticker(&engine, config.epoch_tick, ticker_stop.clone());
        let gate = Gate::new(config.gate);
        let modules = Modules::default();
        if let (Some(after), Some(_)) = (config.unload_idle_after, &artifacts) {
            idle::spawn_sweep(modules.clone(), after, ticker_stop.clone());
        }
        Ok(Runtime {
            inner: Arc::new(Inner { engine, linker, wasi_linker, artifacts, config, gate, ticker_stop, modules }),
        })
    }

    /// Load a module from its bytes: digest → compile (or load the cached
    /// artifact) → check the WIT version and world → pre-link → smoke call of
    /// `manifest`.
    ///
    /// # Errors
    /// [`LoadError`] says which step failed and why; nothing is left behind.
    pub fn load(&self, bytes: &[u8], limits: Limits) -> Result<Module, LoadError> {
        let module = module::load(self, bytes, limits)?;
        // Something new in the artifact cache: the artifact compiled, or
        // the bytes kept.
        let grew = match &self.inner.artifacts {
            Some(cache) => cache.keep_module(&module.info().digest, bytes) | !module.info().from_cache,
            None => false,
        };
        let mut modules = self.inner.modules.lock().unwrap_or_else(|p| p.into_inner());
        modules.retain(|m| m.strong_count() > 0);
        modules.push(Arc::downgrade(&module.inner));
        if let (true, Some(cache), max @ 1..) = (grew, &self.inner.artifacts, self.inner.config.artifact_cache_max) {
            let live = modules.iter().filter_map(|m| m.upgrade()).map(|m| m.info.digest.clone()).collect();
            drop(modules);
            cache.evict(max, &live);
        }
        Ok(module)
    }

    /// Unload every module of this runtime idle for `after`
    /// ([`Module::unload_if_idle`]); returns how many it unloaded. The
    /// runtime does this by itself with [`Config::unload_idle_after`].
    pub fn unload_idle(&self, after: Duration) -> usize {
        idle::sweep(&self.inner.modules, after)
    }

    /// Whether the artifact cache can give `digest`'s component back.
    pub(crate) fn can_reload(&self, digest: &str) -> bool {
        self.inner.artifacts.as_ref().is_some_and(|c| c.can_restore(digest))
    }

    /// The component of `digest` again, for a module unloaded while idle:
    /// its compiled artifact, else its kept bytes compiled again.
    pub(crate) fn reload_component(&self, digest: &str) -> Result<wasmtime::component::Component, LoadError> {
        let cache = self.inner.artifacts.as_ref().ok_or_else(|| LoadError::Reload("no artifact cache".into()))?;
        if let Some(component) = cache.get_compiled(self.engine(), digest) {
            return Ok(component);
        }
        let bytes = cache
            .kept_module(digest)
            .ok_or_else(|| LoadError::Reload(format!("{digest} is no longer in the artifact cache")))?;
        cache.get_or_compile(self.engine(), digest, &bytes).map(|(c, _)| c)
    }

    /// Load a module this host loaded before, knowing only its digest
    /// (a rollback target after a restart): `Ok(None)` when its bytes are
    /// not kept here (no artifact directory, or another machine).
    ///
    /// # Errors
    /// As [`Runtime::load`].
    pub fn load_kept(&self, digest: &str, limits: Limits) -> Result<Option<Module>, LoadError> {
        let Some(bytes) = self.inner.artifacts.as_ref().and_then(|c| c.kept_module(digest)) else {
            return Ok(None);
        };
        module::load(self, &bytes, limits).map(Some)
    }

    /// The engine's settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The host's gate: every guest call of every module is admitted by it.
    pub fn gate(&self) -> &Gate {
        &self.inner.gate
    }

    pub(crate) fn engine(&self) -> &wasmtime::Engine {
        &self.inner.engine
    }
}

fn build_engine(config: &Config) -> wasmtime::Result<wasmtime::Engine> {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    let slots = config.instance_slots;
    pool.total_component_instances(slots)
        // A component made by `wasm-tools component new` has a few small
        // shim instances beside the main module; language runtimes have more.
        .total_core_instances(slots.saturating_mul(4))
        .max_core_instances_per_component(64)
        .total_memories(slots.saturating_mul(2))
        .max_memories_per_component(8)
        .total_tables(slots.saturating_mul(4))
        .max_tables_per_component(16)
        .max_memory_size(config.max_memory as usize)
        .max_core_instance_size(4 << 20)
        .max_component_instance_size(4 << 20)
        // Keep a few slots warm per module so `fresh` instances reuse
        // already-mapped memory.
        .max_unused_warm_slots(64)
        // A call runs on a fiber of its own (async calls), and each call
        // holds an instance: as many stacks as instances.
        .total_stacks(slots)
        // Reset a freed slot by rewriting the pages the last call touched
        // instead of discarding them, so the next instance does not take a
        // page fault on every page it uses. With the kernel's pagemap scan
        // (Linux 6.7+) only dirty pages are reset. Measured: fresh-instance
        // reconcile of the WebApp guest 114 µs → 68 µs (docs/BENCHMARKS.md).
        .linear_memory_keep_resident(1 << 20)
        .table_keep_resident(1 << 16)
        .pagemap_scan(wasmtime::Enabled::Auto);
    let mut cfg = wasmtime::Config::new();
    cfg.wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool))
        .cranelift_opt_level(wasmtime::OptLevel::Speed);
    #[cfg(feature = "profiling")]
    if std::env::var_os("OPERON_PERFMAP").is_some_and(|v| v == "1") {
        cfg.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    wasmtime::Engine::new(&cfg)
}

/// Advances the engine's epoch every `tick` so that per-call deadlines
/// (`Store::set_epoch_deadline`) fire. A plain thread: it must keep ticking
/// even when every tokio worker is busy inside a guest.
fn spawn_epoch_ticker(engine: &wasmtime::Engine, tick: Duration, stop: Arc<AtomicBool>) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("operon-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .expect("spawning the epoch ticker thread");
}

/// Convert `request` into contract `version`'s form (`"0.1.0"` or
/// `"0.2.0"`) `n` times and return the time it took: the host's part of a
/// reconcile's cost that differs between the versions (0.2 rates every
/// child's readiness and formats the clock), for `cargo xtask bench
/// runtime`. Not an API.
#[doc(hidden)]
pub fn request_conversion(request: &Request, version: &str, n: u32) -> Duration {
    use guest::Contract;
    let started = std::time::Instant::now();
    for _ in 0..n {
        if version == guest::v0_1::V0_1::VERSION {
            std::hint::black_box(guest::v0_1::V0_1::request(std::hint::black_box(request)));
        } else {
            std::hint::black_box(guest::v0_2::V0_2::request(std::hint::black_box(request)));
        }
    }
    started.elapsed()
}
