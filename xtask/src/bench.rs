//! `cargo xtask bench runtime|manager|…`: build what a benchmark needs, then
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
//! - `hostile`: the neighbour's latency p99 and throughput beside each
//!   hostile plugin, as ratios (docs/RELIABILITY.md). Needs the envtest
//!   binaries and the `hostile` guest.
//!
//! - `admission`: creates through a real API server with the WebApp
//!   guest's webhooks, with the same webhooks written with
//!   controller-runtime (the Go peer's `webhook` mode), and without any, in
//!   one run; then each server called directly and the host's handler alone
//!   (docs/admission.md). Needs the envtest binaries, `rust-webapp` and `go`
//!   on PATH: the program builds the Go peer into `target/peers/` itself.
//!
//! - `languages`: the WebApp reconciler in Rust, C, Go, TypeScript and
//!   Python side by side: size, cold compile, cached load, instantiate,
//!   warm reconcile p50/p99, memory per instance. Builds every language's
//!   component (needs every toolchain, see `.ci/run`).
//!
//! - `fleet`: Reconcilers as resources in one in-process host against a
//!   real control plane: RSS with 1, 10, 100 distinct Reconcilers over the
//!   same WebApps, a ring of Reconcilers copying a value namespace to
//!   namespace (per-hop latency), and module swap latency (precompiled and
//!   cold). Needs the envtest binaries and the `rust-webapp`, `ring`,
//!   `stamp-v1` and `stamp-v2` guests.
//!
//! - `egress`: a neighbour Reconciler's reconcile latency alone and beside
//!   another whose every reconcile waits 30 s on an outside API, as a
//!   ratio, under `operon run`'s gate and two others (docs/egress.md).
//!   Needs the envtest binaries and the `egress-probe` test guest.
//!
//! Arguments after the benchmark's name go to the program, e.g.
//! `cargo xtask bench manager --parents 1000,3000,10000`.

use anyhow::{Context, Result, bail};
use std::process::Command;

const USAGE: &str =
    "usage: cargo xtask bench runtime|manager|hostile|languages|fleet|admission|egress [ARGS for the bench program]";

pub fn run(args: &[&str]) -> Result<()> {
    let (name, rest) = match args {
        [name @ ("runtime" | "manager" | "hostile" | "languages" | "fleet" | "admission" | "egress"), rest @ ..] => {
            (*name, rest)
        }
        _ => bail!("{USAGE}"),
    };
    let guests: &[&str] = match name {
        "hostile" => &["rust-webapp", "hostile", "admission-misbehave"],
        "fleet" => &["rust-webapp", "ring", "stamp-v1", "stamp-v2"],
        "egress" => &["egress-probe"],
        "languages" => &["rust-webapp", "c-webapp", "go-webapp", "ts-webapp", "python-webapp"],
        _ => &["rust-webapp"],
    };
    crate::guests::run(guests).context("building the benchmark's guests")?;
    if matches!(name, "manager" | "hostile" | "fleet" | "admission" | "egress") {
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
