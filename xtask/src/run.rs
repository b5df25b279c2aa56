//! `cargo xtask run`: the main job on one machine, now `operon dev`. Kept
//! as a shortcut so the habit and old docs still work: it runs
//! `cargo run -p operon -- dev ARGS…` from the repository root, which
//! starts a local control plane, builds the example guests, loads them as
//! Reconcilers with their sample objects, and shows their status until
//! Ctrl-C.

use anyhow::{Context, Result, bail};
use std::process::Command;

pub fn run(args: &[&str]) -> Result<()> {
    // `cargo xtask run -- FLAGS` (the old form) and `cargo xtask run FLAGS`.
    let args = match args {
        ["--", rest @ ..] => rest,
        rest => rest,
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(crate::root())
        .args(["run", "--quiet", "-p", "operon", "--", "dev"])
        .args(args)
        .status()
        .context("running operon dev")?;
    if !status.success() {
        bail!("operon dev exited with {status}");
    }
    Ok(())
}
