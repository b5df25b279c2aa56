//! `cargo xtask test`: everything the README's test command promises, on a
//! fresh machine: build the guests, provision the control plane, run every
//! test of the workspace against it.

use anyhow::{Context, Result, bail};
use operon_envtest::assets;
use std::process::Command;
use std::time::Instant;

pub fn run(args: &[&str]) -> Result<()> {
    let started = Instant::now();
    crate::guests::run(&[])?;
    let step = Instant::now();
    let dir = assets::ensure(&mut |line| eprintln!("envtest: {line}"))?;
    eprintln!("xtask: control plane binaries ready in {:.1?} ({})", step.elapsed(), dir.display());

    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .current_dir(crate::root())
        .args(["test", "--workspace", "--locked"])
        .args(args)
        .env("KUBEBUILDER_ASSETS", &dir);
    let status = cargo.status().context("running cargo test")?;
    eprintln!("xtask: tests finished in {:.1?}", started.elapsed());
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    Ok(())
}
