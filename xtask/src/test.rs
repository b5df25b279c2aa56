//! `cargo xtask test`: everything the README's test command promises, on a
//! fresh machine: build the guests, provision the control plane, run every
//! test of the workspace against it.

use anyhow::{Context, Result, bail};
use operon_envtest::assets;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
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
        .env("KUBEBUILDER_ASSETS", &dir)
        .stdout(Stdio::piped());
    let mut child = cargo.spawn().context("running cargo test")?;
    // Pass the output through and add up the per-binary results, so the run
    // ends with one line that counts every test (cargo's own last line is
    // that of whichever doc-test binary ran last).
    let mut totals = Totals::default();
    let stdout = child.stdout.take().context("cargo test stdout")?;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test output")?;
        println!("{line}");
        totals.add(&line);
    }
    let status = child.wait().context("waiting for cargo test")?;
    eprintln!("xtask: tests finished in {:.1?}", started.elapsed());
    println!("tests: {} passed, {} failed, {} skipped", totals.passed, totals.failed, totals.ignored);
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    if totals.passed == 0 {
        bail!("cargo test ran no test");
    }
    Ok(())
}

/// Sums of cargo's `test result:` lines.
#[derive(Default)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Totals {
    /// `test result: ok. 8 passed; 0 failed; 1 ignored; 0 measured; …`
    fn add(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("test result: ") else { return };
        for part in rest.split(['.', ';']) {
            let mut words = part.split_whitespace();
            if let (Some(n), Some(what)) = (words.next().and_then(|n| n.parse::<u64>().ok()), words.next()) {
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        }
    }
}
