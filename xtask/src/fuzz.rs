//! `cargo xtask fuzz [--seconds N] [--dev] [--asan] [TARGET…]`: run the fuzz
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
//!   between them (default 60 s in all). The README's test command
//!   (`cargo xtask test`, xtask/src/test.rs) runs 30 s in all with `--dev`.
//! - `--dev` builds without optimisations (cargo-fuzz's `--dev`, into
//!   `fuzz/target/<triple>/debug`, with overflow checks and debug
//!   assertions): a cold build is much shorter, each execution slower. For
//!   the test command's short run; long runs by hand use the default
//!   optimised build. In `--dev`, `load` starts from no seed, in a corpus
//!   of its own (`fuzz/corpus/load-dev`) of inputs up to 16 KiB: the
//!   unoptimised Cranelift takes about 7 s to compile even the smallest real
//!   guest (13 kB), and libFuzzer runs the whole corpus before it looks at
//!   the clock. So the short run fuzzes the refusal of arbitrary bytes; the
//!   mutation of real components is for the optimised runs by hand.
//! - Corpora live in `fuzz/corpus/<target>` (not committed) and grow from
//!   run to run; they are seeded from `fuzz/seeds/<target>` and, for `load`,
//!   with every built guest of at most 1 MiB (`target/guests/*.wasm`; the
//!   Python, TypeScript and Go guests carry a whole language runtime and take
//!   seconds to compile, each, which would spend a bounded run on them and,
//!   in the `--dev` build, exceed libFuzzer's 30 s timeout).
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

/// The largest built guest that seeds the `load` corpus.
const LOAD_SEED_MAX: u64 = 1 << 20;
/// The largest input of `load` in `--dev`.
const LOAD_DEV_MAX: u64 = 16 << 10;

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [--dev] [--asan] [outcome|load …]";

pub fn run(args: &[&str]) -> Result<()> {
    let mut seconds: u64 = 60;
    let mut asan = false;
    let mut dev = false;
    let mut targets: Vec<&str> = Vec::new();
    let mut it = args.iter();
    while let Some(&arg) = it.next() {
        match arg {
            "--seconds" => {
                let n = it.next().context(USAGE)?;
                seconds = n.parse().with_context(|| format!("--seconds {n}: not a number"))?;
            }
            "--asan" => asan = true,
            "--dev" => dev = true,
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
        // The unoptimised build compiles a real guest in seconds, and
        // libFuzzer first runs the whole corpus whatever its time limit: in
        // `--dev`, `load` keeps a corpus of its own, unseeded, small inputs.
        let small = dev && *target == "load";
        let corpus = root.join("fuzz/corpus").join(if small { "load-dev" } else { target });
        std::fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
        seed(&root.join("fuzz/seeds").join(target), &corpus, u64::MAX)?;
        if *target == "load" && !small {
            seed(&guests, &corpus, LOAD_SEED_MAX)?;
        }
        let started = Instant::now();
        let max_len = small.then_some(LOAD_DEV_MAX);
        let (runs, status, tail) = run_target(&root, target, &corpus, per_target, asan, dev, max_len)?;
        let corpus_size = std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0);
        let line =
            format!("fuzz {target}: {runs} executions in {:.0?}, corpus {corpus_size} inputs", started.elapsed());
        eprintln!("{line}");
        if !status.success() {
            let artifacts = root.join("fuzz/artifacts").join(target);
            bail!("fuzz target `{target}` found a failure ({status}); the input is in {}\n{tail}", artifacts.display());
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

/// Copy every file of `from` (if it exists) of at most `max` bytes into
/// `corpus`.
fn seed(from: &Path, corpus: &Path, max: u64) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(from) else { return Ok(()) };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_file() && entry.metadata().is_ok_and(|m| m.len() <= max) {
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
    dev: bool,
    max_len: Option<u64>,
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
    if dev {
        cmd.arg("--dev");
    }
    cmd.arg(corpus)
        .args([
            "--",
            &format!("-max_total_time={seconds}"),
            "-timeout=30",
            "-rss_limit_mb=4096",
            "-print_final_stats=1",
        ])
        .args(max_len.map(|n| format!("-max_len={n}")))
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
