//! Rust guests: a `cdylib` crate using `operon-sdk`, built by cargo for
//! `wasm32-unknown-unknown` and made a component here (no WASI, no adapter).

use crate::project::scaffold::Scaffold;
use crate::project::{BuildContext, Error, componentize, run_tool};
use std::path::PathBuf;
use std::process::Command;

/// What an author must install.
pub(super) const REQUIREMENTS: &str =
    "Rust through rustup (https://rustup.rs), then `rustup target add wasm32-unknown-unknown`";

const TARGET: &str = "wasm32-unknown-unknown";

pub(super) fn build(cx: &mut BuildContext<'_>) -> Result<Vec<u8>, Error> {
    ensure_target(cx)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&cx.project.dir)
        .args(["build", "--release", "--target", TARGET, "--message-format=json-render-diagnostics"])
        // Whole-program optimisation: guests are small, and the serde code
        // they run on every call gets faster when inlined across crates.
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        // The DWARF of the precompiled std would make every guest ~1.5 MB;
        // function names stay, so trap backtraces stay readable.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    let output = run_tool(cx, &mut cmd, REQUIREMENTS)?;
    let manifest = cx.project.dir.join("Cargo.toml");
    let artifact = cdylib_artifact(&output.stdout, &manifest).ok_or_else(|| Error::Output {
        project: cx.project.name().to_string(),
        reason: format!("cargo built no .wasm for {}: is it `crate-type = [\"cdylib\"]`?", manifest.display()),
    })?;
    let core = std::fs::read(&artifact).map_err(Error::io(&artifact))?;
    componentize(cx.project.name(), &core, None)
}

/// The `.wasm` of the cdylib whose manifest is `manifest`, from cargo's JSON
/// messages.
fn cdylib_artifact(messages: &[u8], manifest: &std::path::Path) -> Option<PathBuf> {
    let wanted = manifest.canonicalize().ok()?;
    String::from_utf8_lossy(messages).lines().find_map(|line| {
        let message: serde_json::Value = serde_json::from_str(line).ok()?;
        if message["reason"] != "compiler-artifact" {
            return None;
        }
        let path = PathBuf::from(message["manifest_path"].as_str()?);
        if path.canonicalize().ok()? != wanted {
            return None;
        }
        let is_cdylib = message["target"]["kind"].as_array()?.iter().any(|k| k == "cdylib");
        let wasm = message["filenames"].as_array()?.iter().filter_map(|f| f.as_str()).find(|f| f.ends_with(".wasm"))?;
        is_cdylib.then(|| PathBuf::from(wasm))
    })
}

/// `rustup target add` when the target is missing (a fresh machine has none).
/// Without rustup, assume the toolchain was set up by other means.
fn ensure_target(cx: &mut BuildContext<'_>) -> Result<(), Error> {
    let Ok(installed) = Command::new("rustup").args(["target", "list", "--installed"]).output() else {
        return Ok(());
    };
    if installed.status.success() && String::from_utf8_lossy(&installed.stdout).lines().any(|l| l.trim() == TARGET) {
        return Ok(());
    }
    run_tool(cx, Command::new("rustup").args(["target", "add", TARGET]), REQUIREMENTS)?;
    Ok(())
}

pub(super) fn scaffold(s: &Scaffold<'_>) -> Result<(), Error> {
    Err(Error::Project { path: s.dir.to_path_buf(), reason: "rust projects cannot be scaffolded yet".into() })
}
