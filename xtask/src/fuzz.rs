//! `cargo xtask fuzz [--seconds N] [--asan] [TARGET…]`: run the fuzz
//! targets in `fuzz/` (cargo-fuzz, libFuzzer) for a bounded time, and fail
//! on a finding.
//!
//! - Installs cargo-fuzz if it is missing (`cargo install cargo-fuzz`, from
//!   crates.io into `~/.cargo/bin`, so later runs find it).
//! - Builds with the workspace's stable toolchain and no sanitizer (the
//!   coverage instrumentation needs no nightly flag), so it runs on any
//!   machine that builds the project. `--asan` builds with nightly and
//!   AddressSanitizer instead (`rustup toolchain install nightly`), for long
//!   runs by hand: the host's only `unsafe` is wasmtime's, and the guest
//!   memory the fuzzed code touches is wasmtime's too.
//! - Targets: `outcome` (a guest's outcome through conversion and
//!   validation) and `load` (arbitrary bytes as a module). The time is split
//!   between them; the default, 60 s in all, is the README's test command.
//! - Corpora live in `fuzz/corpus/<target>` (not committed) and grow from
//!   run to run; they are seeded from `fuzz/seeds/<target>` and, for `load`,
//!   with every built guest (`target/guests/*.wasm`).
//! - A crash or a panic stops the run: libFuzzer writes the input to
//!   `fuzz/artifacts/<target>/`, and this task fails naming it. Reproduce
//!   with `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-…`.
//!
//! Longer runs by hand: `cargo xtask fuzz --seconds 3600`.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const TARGETS: &[&str] = &["outcome", "load"];

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [--asan] [outcome|load …]";

pub fn run(args: &[&str]) -> Result<()> {
    let mut seconds: u64 = 60;
    let mut asan = false;
    let mut targets: Vec<&str> = Vec::new();
    let mut it = args.iter();
    while let Some(&arg) = it.next() {
        match arg {
            "--seconds" => {
                let n = it.next().context(USAGE)?;
                seconds = n.parse().with_context(|| format!("--seconds {n}: not a number"))?;
            }
            "--asan" => asan = true,
            t if TARGETS.contains(&t) => targets.push(t),
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    let root = crate::root();
    ensure_tools(asan)?;

    let guests = root.join("target/guests");
    if !has_wasm(&guests) {
        crate::guests::run(&[]).context("building the guests that seed the `load` corpus")?;
    }
    let per_target = (seconds / targets.len() as u64).max(1);
    let mut summary = Vec::new();
    for target in &targets {
        let corpus = root.join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
        seed(&root.join("fuzz/seeds").join(target), &corpus)?;
        if *target == "load" {
            seed(&guests, &corpus)?;
        }
        let started = Instant::now();
        let (runs, status, tail) = run_target(&root, target, &corpus, per_target, asan)?;
        let corpus_size = std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0);
        let line = format!(
            "fuzz {target}: {runs} executions in {:.0?}, corpus {corpus_size} inputs",
            started.elapsed()
        );
        eprintln!("{line}");
        if !status.success() {
            let artifacts = root.join("fuzz/artifacts").join(target);
            bail!(
                "fuzz target `{target}` found a failure ({status}); the input is in {}\n{tail}",
                artifacts.display()
            );
        }
        summary.push(line);
    }
    for line in summary {
        println!("{line}");
    }
    Ok(())
}

/// cargo-fuzz (and nightly with `--asan`), installed if missing.
fn ensure_tools(asan: bool) -> Result<()> {
    let nightly = Command::new("rustup").args(["run", "nightly", "rustc", "--version"]).output();
    if asan && !nightly.is_ok_and(|o| o.status.success()) {
        eprintln!("fuzz: installing the nightly toolchain");
        let status = Command::new("rustup")
            .args(["toolchain", "install", "nightly", "--profile", "minimal"])
            .status()
            .context("running rustup")?;
        if !status.success() {
            bail!("`rustup toolchain install nightly` failed ({status})");
        }
    }
    let fuzz = Command::new("cargo").args(["fuzz", "--version"]).current_dir(crate::root().join("fuzz")).output();
    if !fuzz.is_ok_and(|o| o.status.success()) {
        eprintln!("fuzz: installing cargo-fuzz from crates.io into ~/.cargo/bin");
        let status = Command::new("cargo")
            .args(["install", "cargo-fuzz", "--locked"])
            .status()
            .context("running cargo install")?;
        if !status.success() {
            bail!("`cargo install cargo-fuzz` failed ({status})");
        }
    }
    Ok(())
}

fn has_wasm(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().any(|e| e.path().extension().is_some_and(|x| x == "wasm")))
        .unwrap_or(false)
}

/// Copy every file of `from` (if it exists) into `corpus`.
fn seed(from: &Path, corpus: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(from) else { return Ok(()) };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_file() {
            let name = format!("seed-{}", path.file_name().unwrap_or_default().to_string_lossy());
            std::fs::copy(&path, corpus.join(name)).with_context(|| format!("seeding from {}", path.display()))?;
        }
    }
    Ok(())
}

/// Run one target for `seconds`; returns libFuzzer's execution count, the
/// exit status and the last lines of its output.
fn run_target(
    root: &Path,
    target: &str,
    corpus: &Path,
    seconds: u64,
    asan: bool,
) -> Result<(u64, std::process::ExitStatus, String)> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root.join("fuzz"))
        // The main workspace's settings (e.g. a CARGO_TARGET_DIR) are not ours.
        .env_remove("CARGO_TARGET_DIR");
    if asan {
        cmd.args(["+nightly", "fuzz", "run", "--sanitizer", "address", target]);
    } else {
        cmd.args(["fuzz", "run", "--sanitizer", "none", target]);
    }
    cmd
        .arg(corpus)
        .args(["--", &format!("-max_total_time={seconds}"), "-timeout=30", "-rss_limit_mb=4096", "-print_final_stats=1"])
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    eprintln!("fuzz: {cmd:?}");
    let output = cmd.spawn().context("running cargo fuzz")?.wait_with_output().context("waiting for cargo fuzz")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Compilation output and libFuzzer's status lines, passed through.
    eprint!("{}", stderr.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n"));
    eprintln!();
    let runs = stderr
        .lines()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
    let tail = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
    Ok((runs, output.status, tail))
}
