//! `cargo xtask …`: the project's build and maintenance tasks.
//!
//! Small on purpose: each task is a module with one `run` function, and tasks
//! shell out to cargo, rustup and go rather than linking them.

mod bench;
mod cluster;
mod docs;
mod envtest;
mod fuzz;
mod guests;
mod image;
mod packages;
mod release;
mod run;
mod sbom;
mod soak;
mod test;
mod tools;
mod version;

use anyhow::{Result, bail};
use std::path::PathBuf;

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  guests [NAME…]         build every guest (every language) into target/guests/<name>.wasm
  docs                   regenerate docs/reference/ (CLI flags, metrics, status reasons) from the code
  packages [LANG…]       build the SDK packages (crates, wheel + sdist, npm tarball, GOPROXY dir, C archive) into target/packages/
  image [--push REF]     build the operon image (static binary + CA certificates, OCI layout in target/image/); push it
  release (--key KEY | --ephemeral-key) [--out DIR]
                         the release directory (target/release-dir): static binary, SDK packages, chart, image
                         layout, SBOMs, SHA256SUMS and a signature of every file
  version [X.Y.Z]        list every copy of the release version, or set them all
  envtest                provision etcd, kube-apiserver, kube-controller-manager; print their directory
  cluster up|down        start or stop a local control plane (target/operon-dev.kubeconfig)
  bench runtime|manager|hostile|languages|fleet|admission  run a benchmark and print its figures
  fuzz [--seconds N] [--dev]  run the fuzz targets (cargo-fuzz) for N seconds in all (default 60; --dev: unoptimised)
  soak [--minutes N]     churn, module swaps and a leader kill; RSS over time, errors, convergence
  run [ARGS]             the main job: `operon dev` (local control plane, every example as a Reconciler, live table)
  test [ARGS]            guests + control plane + `cargo test --workspace [ARGS]` + every language SDK's own tests
                         (the README's test command)
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["guests", rest @ ..] => guests::run(rest),
        ["docs"] => docs::run(),
        ["packages", rest @ ..] => packages::run(rest),
        ["image", rest @ ..] => image::run(rest),
        ["release", rest @ ..] => release::run(rest),
        ["version", rest @ ..] => version::run(rest),
        ["envtest", rest @ ..] => envtest::run(rest),
        ["cluster", rest @ ..] => cluster::run(rest),
        ["bench", rest @ ..] => bench::run(rest),
        ["test", rest @ ..] => test::run(rest),
        ["fuzz", rest @ ..] => fuzz::run(rest),
        ["soak", rest @ ..] => soak::run(rest),
        ["run", rest @ ..] => run::run(rest),
        [] | ["help" | "--help" | "-h"] => {
            print!("{USAGE}");
            Ok(())
        }
        [other, ..] => bail!("unknown task `{other}`\n\n{USAGE}"),
    }
}

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits inside the workspace").to_path_buf()
}

/// Where cargo writes what it builds: `CARGO_TARGET_DIR` (CI keeps it under
/// `$HOME`, so a fresh clone rebuilds only the workspace's own crates) or
/// `target/`. What xtask makes itself (guests, packages, the image) stays in
/// the checkout's `target/`.
pub fn cargo_target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}
