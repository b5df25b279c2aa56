//! The on-disk cache of compiled components, keyed by module digest and the
//! engine's compatibility hash, so a restart or a swap back to a known
//! version skips Cranelift (seconds for language-runtime guests).
//!
//! **Invariant: only artifacts this host wrote are loaded.** A precompiled
//! artifact is native code that wasmtime maps and runs without checking it,
//! so the cache is trusted only as far as its directory is:
//! - the directory is created `0700`, and used only if it is a real
//!   directory (not a symlink), owned by the host's user and writable by
//!   nobody else; otherwise the cache is off (every load compiles) and a
//!   warning says why;
//! - each entry is named by the module's digest and the engine's hash, must
//!   be a regular file owned by the host's user and writable by nobody else,
//!   and has beside it (`.blake3`) the BLAKE3 hash of the module digest and
//!   the artifact, so a torn write, a corrupted file or an entry copied
//!   under another module's name is recompiled, never loaded. (BLAKE3, not
//!   SHA-256: the hash is taken at every load, and a language runtime's
//!   artifact is 37 MB; `cargo xtask bench languages`.)
//!
//! **The cache is bounded** ([`super::Config::artifact_cache_max`]): when a
//! new entry takes it over the bound, the least recently used digests go,
//! their artifacts first (a module kept as bytes can still be compiled
//! again), never those of a module this process has loaded. Without a
//! bound, each rebuild of a language-runtime guest under `operon dev` left
//! 55 MB behind for ever.
//!
//! **Artifacts are mapped, not read** (`Component::deserialize_file`): the
//! compiled code is file-backed pages, shared by every Reconciler that runs
//! the same module and resident only where touched, rather than a private
//! copy in anonymous memory per load. The checksum is taken from
//! the mapped file first, never read into memory. A mapped file is never written in place
//! (entries are written beside and renamed over), so a mapping never sees
//! it change.

#![allow(unsafe_code, reason = "deserialising a precompiled artifact is unsafe in wasmtime's API")]

use super::error::LoadError;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use wasmtime::component::Component;

pub(crate) struct ArtifactCache {
    dir: PathBuf,
    /// Identifies the engine build and settings; artifacts from another
    /// engine live under another name and are never loaded.
    engine_key: String,
    /// Whether `dir` is safe to use, decided on first use: `Err` says why not.
    trusted: OnceLock<Result<u32, String>>,
}

impl ArtifactCache {
    pub fn new(dir: PathBuf, engine: &wasmtime::Engine) -> ArtifactCache {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        ArtifactCache { dir, engine_key: format!("{:016x}", h.finish()), trusted: OnceLock::new() }
    }

    /// The host's uid if the directory may hold artifacts: created `0700` if
    /// missing; a real directory, owned by us, writable by nobody else.
    fn trusted(&self) -> Result<u32, &str> {
        let checked = self.trusted.get_or_init(|| {
            let check = || -> Result<u32, String> {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&self.dir)
                    .map_err(|e| format!("cannot create it: {e}"))?;
                // Our uid: the owner of a file we create.
                let probe = self.dir.join(format!(".probe-{}", std::process::id()));
                std::fs::write(&probe, b"").map_err(|e| format!("cannot write to it: {e}"))?;
                let uid = std::fs::metadata(&probe).map(|m| m.uid());
                let _ = std::fs::remove_file(&probe);
                let uid = uid.map_err(|e| e.to_string())?;
                let meta = std::fs::symlink_metadata(&self.dir).map_err(|e| e.to_string())?;
                if !meta.file_type().is_dir() {
                    return Err("it is not a directory (a symlink?)".into());
                }
                if meta.uid() != uid {
                    return Err(format!("it is owned by uid {}, not by this process's uid {uid}", meta.uid()));
                }
                if meta.mode() & 0o022 != 0 {
                    return Err(format!("others may write to it (mode {:o}); chmod go-w it", meta.mode() & 0o777));
                }
                Ok(uid)
            };
            check().inspect_err(|why| {
                tracing::warn!(dir = %self.dir.display(), "not using the compiled-module cache: {why}");
            })
        });
        checked.as_ref().map(|uid| *uid).map_err(String::as_str)
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
        let Ok(uid) = self.trusted() else {
            return Ok((Component::new(engine, bytes).map_err(LoadError::Compile)?, false));
        };
        if let Some(component) = self.load(engine, &path, digest, uid) {
            return Ok((component, true));
        }
        let component = Component::new(engine, bytes).map_err(LoadError::Compile)?;
        if let Err(e) = self.store(&path, digest, &component) {
            tracing::debug!(path = %path.display(), error = %e, "not caching the compiled module");
        }
        Ok((component, false))
    }

    /// The compiled artifact of `digest`, if this cache holds a sound one
    /// (an idle module loaded again without its bytes).
    pub fn get_compiled(&self, engine: &wasmtime::Engine, digest: &str) -> Option<Component> {
        let uid = self.trusted().ok()?;
        self.load(engine, &self.path(digest), digest, uid)
    }

    /// Whether this cache can give back `digest`'s component: its artifact,
    /// or its bytes to compile again.
    pub fn can_restore(&self, digest: &str) -> bool {
        self.trusted().is_ok() && (self.path(digest).is_file() || self.module_path(digest).is_file())
    }

    /// Keep the module's own bytes beside its artifact, so that a version
    /// known only by its digest (a rollback target after a restart) can be
    /// loaded again.
    /// Returns whether it wrote them (they were not kept yet).
    pub fn keep_module(&self, digest: &str, bytes: &[u8]) -> bool {
        let Ok(_) = self.trusted() else { return false };
        let path = self.module_path(digest);
        if path.exists() {
            return false;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            tracing::debug!(path = %path.display(), error = %e, "not keeping the module's bytes");
            let _ = std::fs::remove_file(&tmp);
            return false;
        }
        true
    }

    /// The bytes of a module kept by [`ArtifactCache::keep_module`], if they
    /// are there and still hash to `digest`.
    pub fn kept_module(&self, digest: &str) -> Option<Vec<u8>> {
        let uid = self.trusted().ok()?;
        let path = self.module_path(digest);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.file_type().is_file() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
            return None;
        }
        let bytes = std::fs::read(&path).ok()?;
        (super::digest(&bytes) == digest).then_some(bytes)
    }

    fn module_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{}.wasm", digest.trim_start_matches("sha256:")))
    }

    fn load(&self, engine: &wasmtime::Engine, path: &Path, digest: &str, uid: u32) -> Option<Component> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.file_type().is_file() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
            tracing::warn!(path = %path.display(), "compiled-module cache entry was not written by this host; recompiling");
            let _ = std::fs::remove_file(path);
            return None;
        }
        // The sum beside it is the hash of the module digest and the
        // artifact, so a torn or corrupted write, or an entry copied under
        // another module's name, is detected before wasmtime sees it.
        let sum_meta = std::fs::symlink_metadata(sum_path(path)).ok()?;
        if !sum_meta.file_type().is_file() || sum_meta.uid() != uid || sum_meta.mode() & 0o022 != 0 {
            return None;
        }
        let sum = std::fs::read(sum_path(path)).ok()?;
        if file_checksum(digest, path).ok()?.as_slice() != sum {
            tracing::warn!(path = %path.display(), "compiled-module cache entry is corrupt; recompiling");
            let _ = std::fs::remove_file(path);
            return None;
        }
        // SAFETY: the artifact was written by `store` below from
        // `Component::serialize` of an engine with the same compatibility
        // hash (part of the file name), for this module digest, and its
        // checksum matches. The file and its directory are owned by this
        // process's user and writable by nobody else (checked above and in
        // `trusted`), so no one else can have planted it. wasmtime
        // additionally checks the engine's version and settings in the
        // artifact header.
        // Mapped from the file, so its pages are shared and paged, not
        // copied.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(c) => {
                // Used now: the last to be evicted.
                touch(path);
                Some(c)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unusable compiled-module cache entry; recompiling");
                None
            }
        }
    }

    /// Write the artifact, then its sum (each written beside and renamed
    /// over, so a reader sees whole files; an artifact without its sum is
    /// recompiled).
    fn store(&self, path: &Path, digest: &str, component: &Component) -> std::io::Result<()> {
        let data = component.serialize().map_err(std::io::Error::other)?;
        let sum = checksum(digest, &data);
        let _ = std::fs::remove_file(sum_path(path));
        write_new(path, &data)?;
        write_new(&sum_path(path), &sum)
    }
}

impl ArtifactCache {
    /// Bring the directory under `max` bytes, if it is over: the least
    /// recently used digests' artifacts go first, then their kept bytes,
    /// down to nine tenths of `max`; digests in `live` (modules loaded in
    /// this process, which an idle reload may need) are never removed.
    /// Returns the bytes removed.
    pub fn evict(&self, max: u64, live: &std::collections::HashSet<String>) -> u64 {
        let Ok(uid) = self.trusted() else { return 0 };
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return 0 };
        // Per digest: its artifacts (with their sums) and its kept bytes.
        #[derive(Default)]
        struct Entry {
            artifacts: Vec<(PathBuf, u64)>,
            module: Vec<(PathBuf, u64)>,
            used: Option<std::time::SystemTime>,
        }
        let mut by_digest: std::collections::HashMap<String, Entry> = std::collections::HashMap::new();
        let mut total = 0u64;
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.file_type().is_file() || meta.uid() != uid {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(hex) = name.split(['-', '.']).next().filter(|h| h.len() == 64) else { continue };
            total += meta.len();
            // Files being written (`.tmpPID`) belong to their writer.
            if name.contains(".tmp") {
                continue;
            }
            let slot = by_digest.entry(hex.to_string()).or_default();
            let file = (entry.path(), meta.len());
            if name.ends_with(".wasm") {
                slot.module.push(file)
            } else {
                slot.artifacts.push(file)
            }
            slot.used = slot.used.max(meta.modified().ok());
        }
        if total <= max {
            return 0;
        }
        let target = max / 10 * 9;
        let mut oldest: Vec<(&String, &Entry)> =
            by_digest.iter().filter(|(hex, _)| !live.contains(&format!("sha256:{hex}"))).collect();
        oldest.sort_by_key(|(_, e)| e.used);
        let mut removed = 0;
        for pass in [0, 1] {
            for (_, entry) in &oldest {
                if total <= target {
                    break;
                }
                for (path, len) in if pass == 0 { &entry.artifacts } else { &entry.module } {
                    if std::fs::remove_file(path).is_ok() {
                        total = total.saturating_sub(*len);
                        removed += len;
                    }
                }
            }
        }
        if removed > 0 {
            tracing::info!(dir = %self.dir.display(), removed, left = total, max, "compiled-module cache evicted its least recently used entries");
        }
        removed
    }
}

/// Mark an entry used now (its modification time orders eviction).
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

/// Write `data` to `path` through a file beside it, renamed over, mode 0600.
fn write_new(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    std::io::Write::write_all(&mut file, data)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// Where an artifact's checksum is kept. (Entries of hosts that kept a
/// sha256 in `.cwasm.sum` have no sum here: compiled once again.)
fn sum_path(artifact: &Path) -> PathBuf {
    artifact.with_extension("cwasm.blake3")
}

/// [`checksum`] of an artifact file, mapped.
fn file_checksum(digest: &str, path: &Path) -> std::io::Result<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    h.update(digest.as_bytes());
    h.update(&[0]);
    h.update_mmap(path)?;
    Ok(h.finalize().into())
}

/// BLAKE3 of the module digest, a separator, and the artifact.
fn checksum(digest: &str, artifact: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(digest.as_bytes());
    h.update(&[0]);
    h.update(artifact);
    h.finalize().into()
}
