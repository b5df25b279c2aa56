//! `cargo xtask soak [--minutes N] [ARGS]`: the soak, by hand (not in the
//! README's test command). Builds what it needs — the `rust-webapp`,
//! `echo` and `ticker` guests, the control plane binaries, the `operon`
//! binary (optimised) — then runs `host/benches/soak.rs`, which prints RSS
//! over time, reconcile errors and convergence, and fails if the run did not
//! converge or memory grew after warm-up. Other arguments (`--webapps`,
//! `--things`, `--tickers`) go to the program.

use anyhow::{Context, Result, bail};
use std::process::Command;

pub fn run(args: &[&str]) -> Result<()> {
    let mut rest: Vec<&str> = args.to_vec();
    if !rest.contains(&"--minutes") {
        rest.extend(["--minutes", "1"]);
    }
    crate::guests::run(&["rust-webapp", "echo", "ticker"]).context("building the soak's guests")?;
    let dir = operon_envtest::assets::ensure(&mut |line| eprintln!("envtest: {line}"))
        .context("provisioning the control plane binaries")?;
    eprintln!("soak: control plane binaries in {}", dir.display());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::root())
        .args(["bench", "-p", "operon", "--bench", "soak", "--"])
        .args(&rest)
        .env("KUBEBUILDER_ASSETS", &dir);
    eprintln!("soak: {cmd:?}");
    let status = cmd.status().context("running the soak")?;
    if !status.success() {
        bail!("the soak failed ({status}): see its report above and target/soak/");
    }
    Ok(())
}
