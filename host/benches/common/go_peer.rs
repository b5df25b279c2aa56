//! The controller-runtime peer (`host/benches/peers/go-webapp`): built with
//! `go build` into `target/peers/go-webapp` when its sources are newer than
//! the binary. Shared by `manager.rs` (the controller) and `admission.rs`
//! (its `webhook` mode).

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};

/// The peer's sources.
pub fn source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/peers/go-webapp")
}

/// The peer's binary, built first if missing or older than its sources.
pub fn build(target_dir: &Path) -> Result<PathBuf> {
    let src = source();
    let out = target_dir.join("peers/go-webapp");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let newest_source = std::fs::read_dir(&src)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "go" || e == "mod" || e == "sum"))
        .filter_map(|p| modified(&p))
        .max();
    if let (Some(built), Some(source)) = (modified(&out), newest_source)
        && built > source
    {
        return Ok(out);
    }
    eprintln!("bench: go build {} -> {}", src.display(), out.display());
    let status = std::process::Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(&src)
        .status()
        .context("running `go build` (Go 1.24 or later must be on PATH)")?;
    if !status.success() {
        bail!("`go build` of {} failed ({status})", src.display());
    }
    Ok(out)
}
