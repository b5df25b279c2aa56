//! Idle unload: a module with no call for a while gives back what its
//! calls need in memory (its `Loaded`: compiled code through the instance
//! templates, and pooled instances) and loads it again from the artifact
//! cache on its next call. What describes the module stays.

use super::Modules;
use super::error::CallError;
use super::module::{Loaded, Module};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

impl Module {
    /// The compiled code and instance templates, loaded again from the
    /// artifact cache if the module was unloaded for being idle. Marks the
    /// module used.
    pub(super) fn loaded(&self) -> Result<Arc<Loaded>, CallError> {
        let inner = &self.inner;
        inner.last_used.store(inner.born.elapsed().as_millis() as u64, Ordering::Relaxed);
        if let Some(loaded) = inner.loaded.read().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(loaded);
        }
        let _one = inner.reloading.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = inner.loaded.read().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(loaded);
        }
        let started = Instant::now();
        let runtime = &inner.runtime;
        let component = runtime.reload_component(&inner.info.digest).map_err(|e| CallError::Reload(e.to_string()))?;
        let loaded = Loaded::new(
            runtime,
            &component,
            inner.info.uses_wasi,
            &inner.info.wit_version,
            inner.admission,
            inner.conversion,
            &inner.calls.limits,
        )
        .map(Arc::new)
        .map_err(|e| CallError::Reload(e.to_string()))?;
        *inner.loaded.write().unwrap_or_else(|p| p.into_inner()) = Some(loaded.clone());
        inner.reloads.fetch_add(1, Ordering::Relaxed);
        inner.last_reload_us.store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        tracing::debug!(digest = %inner.info.digest, took = ?started.elapsed(), "reloaded an idle module");
        Ok(loaded)
    }

    /// Drop the compiled code and instance templates (and pooled
    /// instances) if no call began for `idle`, keeping what describes the
    /// module; the next call loads them again from the artifact cache. A
    /// module the cache cannot give back is never unloaded. Calls in flight
    /// keep what they use until they end. Returns whether it unloaded.
    pub fn unload_if_idle(&self, idle: Duration) -> bool {
        let inner = &self.inner;
        let now = inner.born.elapsed().as_millis() as u64;
        if now.saturating_sub(inner.last_used.load(Ordering::Relaxed)) < idle.as_millis() as u64 {
            return false;
        }
        if !inner.runtime.can_reload(&inner.info.digest) {
            return false;
        }
        let unloaded = inner.loaded.write().unwrap_or_else(|p| p.into_inner()).take().is_some();
        if unloaded {
            inner.unloads.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(digest = %inner.info.digest, "unloaded an idle module");
        }
        unloaded
    }

    /// Whether the module exports admission (known while unloaded too).
    pub(super) fn inner_admission(&self) -> bool {
        self.inner.admission
    }

    /// Whether the module exports `convert` (known while unloaded too).
    pub(super) fn inner_conversion(&self) -> bool {
        self.inner.conversion
    }

    /// Whether the compiled code is loaded (not unloaded for being idle).
    pub fn is_loaded(&self) -> bool {
        self.inner.loaded.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Unloads and reloads so far, and how long the last reload took.
    pub fn unload_stats(&self) -> (u64, u64, Duration) {
        let inner = &self.inner;
        (
            inner.unloads.load(Ordering::Relaxed),
            inner.reloads.load(Ordering::Relaxed),
            Duration::from_micros(inner.last_reload_us.load(Ordering::Relaxed)),
        )
    }
}

/// Unload the modules idle for `after`; forget the dropped ones.
pub(crate) fn sweep(modules: &Modules, after: Duration) -> usize {
    let live: Vec<Module> = {
        let mut list = modules.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|m| m.strong_count() > 0);
        list.iter().filter_map(|m| m.upgrade()).map(|inner| Module { inner }).collect()
    };
    live.iter().filter(|m| m.unload_if_idle(after)).count()
}

/// The idle sweep: every quarter of `after` (at most 30 s), until the
/// runtime is dropped.
pub(crate) fn spawn_sweep(modules: Modules, after: Duration, stop: Arc<AtomicBool>) {
    let every = (after / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    let _ = std::thread::Builder::new().name("operon-idle-sweep".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            let unloaded = sweep(&modules, after);
            if unloaded > 0 {
                tracing::debug!(unloaded, "unloaded idle modules");
            }
        }
    });
}
