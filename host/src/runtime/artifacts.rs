//! The on-disk cache of compiled components, keyed by module digest and the
//! engine's compatibility hash, so a restart or a swap back to a known
//! version skips Cranelift (seconds for language-runtime guests).

#![allow(unsafe_code, reason = "deserialising a precompiled artifact is unsafe in wasmtime's API")]

use super::error::LoadError;
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::component::Component;

pub(crate) struct ArtifactCache {
    dir: PathBuf,
    /// Identifies the engine build and settings; artifacts from another
    /// engine live under another name and are never loaded.
    engine_key: String,
}

impl ArtifactCache {
    pub fn new(dir: PathBuf, engine: &wasmtime::Engine) -> ArtifactCache {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        ArtifactCache { dir, engine_key: format!("{:016x}", h.finish()) }
    }

    fn path(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir.join(format!("{hex}-{}.cwasm", self.engine_key))
    }

    /// Load the artifact for `digest`, or compile `bytes` and store it.
    /// Cache trouble (unwritable dir, corrupt file) only costs a compile.
    pub fn get_or_compile(
        &self,
        engine: &wasmtime::Engine,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(Component, bool), LoadError> {
        let path = self.path(digest);
        if let Some(component) = self.load(engine, &path) {
            return Ok((component, true));
        }
        let component = Component::new(engine, bytes).map_err(LoadError::Compile)?;
        if let Err(e) = self.store(&path, &component) {
            tracing::debug!(path = %path.display(), error = %e, "not caching the compiled module");
        }
        Ok((component, false))
    }

    fn load(&self, engine: &wasmtime::Engine, path: &Path) -> Option<Component> {
        let data = std::fs::read(path).ok()?;
        // The file ends with the sha256 of what precedes it, so a torn or
        // corrupted write is detected before wasmtime sees it.
        let (artifact, sum) = data.split_at_checked(data.len().checked_sub(32)?)?;
        if Sha256::digest(artifact).as_slice() != sum {
            tracing::warn!(path = %path.display(), "compiled-module cache entry is corrupt; recompiling");
            let _ = std::fs::remove_file(path);
            return None;
        }
        // SAFETY: the artifact was written by `store` below from
        // `Component::serialize` of an engine with the same compatibility
        // hash (part of the file name), and its checksum matches. wasmtime
        // additionally checks the engine's version and settings in the
        // artifact header. The cache directory must be writable only by the
        // operator's user, like wasmtime's own cache.
        match unsafe { Component::deserialize(engine, artifact) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unusable compiled-module cache entry; recompiling");
                None
            }
        }
    }

    fn store(&self, path: &Path, component: &Component) -> std::io::Result<()> {
        let mut data = component.serialize().map_err(std::io::Error::other)?;
        let sum = Sha256::digest(&data);
        data.extend_from_slice(&sum);
        std::fs::create_dir_all(&self.dir)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &data)?;
        std::fs::rename(&tmp, path)
    }
}
