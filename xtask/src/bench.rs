//! `cargo xtask bench runtime|manager`: build what a benchmark needs, then
//! run its program (`host/benches/<name>.rs`, a plain `main` that prints
//! figures; see docs/BENCHMARKS.md).
//!
//! - `runtime`: the WebApp guest's reconcile call (fresh and pooled
//!   instances) beside the same logic compiled natively. Needs
//!   `target/guests/rust-webapp.wasm`.
//! - `manager`: `operon run` against a real control plane, beside a native
//!   kube-rs controller and a controller-runtime controller in Go, each its
//!   own process. Also needs the envtest binaries (`cargo xtask envtest`, or
//!   `KUBEBUILDER_ASSETS`) and `go` on PATH: the program builds the Go peer
//!   (`host/benches/peers/go-webapp`) into `target/peers/` itself. Cargo
//!   builds the `operon` binary with the bench. Writes `target/bench/`
//!   (`manager.svg`, `manager.json`, the processes' logs).
//!
//! Arguments after the benchmark's name go to the program, e.g.
//! `cargo xtask bench manager --parents 1000,3000,10000`.

use anyhow::{Context, Result, bail};
use std::process::Command;

const USAGE: &str = "usage: cargo xtask bench runtime|manager [ARGS for the bench program]";

pub fn run(args: &[&str]) -> Result<()> {
    let (name, rest) = match args {
        [name @ ("runtime" | "manager"), rest @ ..] => (*name, rest),
        _ => bail!("{USAGE}"),
    };
    crate::guests::run(&["rust-webapp"]).context("building the rust-webapp guest")?;
    if name == "manager" {
        let dir = operon_envtest::assets::ensure(&mut |line| eprintln!("envtest: {line}"))
            .context("provisioning the control plane binaries")?;
        eprintln!("bench: control plane binaries in {}", dir.display());
    }

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::root()).args(["bench", "-p", "operon", "--bench", name, "--"]).args(rest);
    eprintln!("bench: {cmd:?}");
    let status = cmd.status().context("running cargo bench")?;
    if !status.success() {
        bail!("`cargo bench -p operon --bench {name}` failed ({status})");
    }
    Ok(())
}
