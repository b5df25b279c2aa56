//! `cargo xtask test`: everything the README's test command promises, on a
//! fresh machine: build the guests of every language, the SDK packages, the
//! image and the release directory (from the image's one static build),
//! provision the control plane, build every test binary, run
//! each language SDK's and each example's own unit tests with that
//! language's test runner (pytest, node's test runner, go test, the C tests'
//! make target), then every test of the workspace against the control plane.
//!
//! The fuzz targets' checks run on their seeds and the built guests as
//! ordinary tests (`host/tests/all/fuzz_seeds.rs`); fuzzing itself, with
//! its own instrumented build, is `cargo xtask fuzz` for long runs by hand.
//! With `OPERON_TEST_FREE_DISK=1` (a machine short of disk), build products no later step reads
//! are removed once used: the image's static binary build once the image is
//! in its registry and the release directory holds its copy.
//!
//! The run ends with one line counting every test of every runner:
//! `tests: N passed, M failed, K skipped`. It fails if any suite fails. A
//! cargo test that could not run here (a tool missing) writes itself to
//! the skip ledger (`OPERON_SKIP_LEDGER`, `target/test-skips.txt`) and is
//! counted as skipped, not passed; under CI's `OPERON_REQUIRE_*` it fails.

use anyhow::{Context, Result, bail};
use operon_envtest::assets;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn run(args: &[&str]) -> Result<()> {
    let started = Instant::now();
    let root = crate::root();
    crate::guests::run(&[])?;
    // What the author-workflow, image and deploy tests install from.
    let step = Instant::now();
    crate::packages::run(&[])?;
    eprintln!("xtask: SDK packages built in {:.1?}", step.elapsed());
    let step = Instant::now();
    let binary = crate::image::build(crate::image::Profile::ReleaseTest, None)?;
    eprintln!("xtask: image built and pushed in {:.1?}", step.elapsed());
    // The release directory from the same static build (one per run): what
    // `host/tests/all/release.rs` installs from, signed with a key made for
    // this run.
    let step = Instant::now();
    let layout = root.join("target/image/oci");
    crate::release::assemble(&crate::release::default_dir(), &binary, &layout, crate::release::Key::Ephemeral)?;
    eprintln!("xtask: release directory assembled in {:.1?}", step.elapsed());
    // The tests read the image from its registry storage and the binary
    // from the release directory, never the static binary's build (over a
    // GB).
    let musl = crate::cargo_target().join(format!("{}-unknown-linux-musl", std::env::consts::ARCH));
    free_disk(&musl);
    let step = Instant::now();
    let dir = assets::ensure(&mut |line| eprintln!("envtest: {line}"))?;
    eprintln!("xtask: control plane binaries ready in {:.1?} ({})", step.elapsed(), dir.display());
    // Every test binary, and the operon binary the language suites need
    // (their native test runners rate children's readiness with `operon
    // readiness`, the host's one set of rules), built with the features
    // `cargo test` resolves (dev-dependencies included, tokio's `test-util`
    // among them). A `cargo build -p operon` resolved other features and
    // compiled much of the dependency tree a second time (measured: 142
    // crates twice, 4.5 minutes and 1.5 GB on 2 cores).
    let step = Instant::now();
    let build_args: Vec<&str> = args.iter().copied().take_while(|a| *a != "--").collect();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .args(["test", "--workspace", "--locked", "--no-run"])
        .args(&build_args)
        .status()
        .context("building the tests and the operon binary")?;
    if !status.success() {
        bail!("building the tests and the operon binary failed");
    }
    eprintln!("xtask: tests and the operon binary built in {:.1?}", step.elapsed());

    // The language suites, before `cargo test` (13 s together on 2 cores, mostly
    // one thread): installs touch the examples' directories, which the guest
    // tests build too, and none of them shares the CPU with the
    // timing-sensitive suites.
    let step = Instant::now();
    let suites = suites();
    for suite in &suites {
        suite.prepare(&root)?;
    }
    let languages: Vec<_> = suites.iter().map(|s| s.run(&root)).collect();
    eprintln!("xtask: language suites ran in {:.1?}", step.elapsed());

    // The tests that could not run here write themselves down
    // (host/tests/all/common/skip.rs): counted as skipped, not passed.
    let ledger = root.join("target").join("test-skips.txt");
    let _ = std::fs::remove_file(&ledger);
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .current_dir(&root)
        .args(["test", "--workspace", "--locked", "--no-fail-fast"])
        .args(args)
        .env("KUBEBUILDER_ASSETS", &dir)
        .env(SKIP_LEDGER, &ledger)
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
        totals.add_cargo(&line);
    }
    let status = child.wait().context("waiting for cargo test")?;
    let skipped = std::fs::read_to_string(&ledger).unwrap_or_default();
    totals.skip(&skipped);
    if !skipped.is_empty() {
        eprintln!("xtask: skipped, not passed (a tool is missing):\n{skipped}");
    }
    let cargo_totals = totals;

    let mut failed_suites = Vec::new();
    eprintln!("xtask: language suites:");
    for outcome in languages {
        eprintln!(
            "  {:<44} {:>4} passed, {} failed, {} skipped  ({:.1}s){}",
            outcome.name,
            outcome.totals.passed,
            outcome.totals.failed,
            outcome.totals.ignored,
            outcome.elapsed.as_secs_f64(),
            if outcome.ok { "" } else { "  FAILED" }
        );
        totals.passed += outcome.totals.passed;
        totals.failed += outcome.totals.failed;
        totals.ignored += outcome.totals.ignored;
        if !outcome.ok {
            failed_suites.push(outcome.name);
        }
    }
    eprintln!("xtask: tests finished in {:.1?}", started.elapsed());
    println!("tests: {} passed, {} failed, {} skipped", totals.passed, totals.failed, totals.ignored);
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    if !failed_suites.is_empty() {
        bail!("test suites failed: {} (their output is above)", failed_suites.join(", "));
    }
    if cargo_totals.passed == 0 {
        bail!("cargo test ran no test");
    }
    Ok(())
}

/// With `OPERON_TEST_FREE_DISK=1` (a machine short of disk), remove `dir`: build products no
/// later step reads.
fn free_disk(dir: &Path) {
    if std::env::var_os("OPERON_TEST_FREE_DISK").is_none_or(|v| v != "1") || !dir.exists() {
        return;
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => eprintln!("xtask: removed {} (OPERON_TEST_FREE_DISK=1)", dir.display()),
        Err(e) => eprintln!("xtask: could not remove {}: {e}", dir.display()),
    }
}

/// How a runner reports its counts.
#[derive(Debug, Clone, Copy)]
enum Runner {
    /// `41 passed, 1 failed, 2 skipped in 0.47s`
    Pytest,
    /// `# pass 19`, `# fail 0`, `# skipped 0`
    Node,
    /// `go test -v`: `--- PASS: Name`, `--- FAIL: Name`, `--- SKIP: Name`
    Go,
    /// `11 passed, 0 failed`
    Plain,
}

/// One language's unit tests in one directory.
struct Suite {
    name: String,
    dir: &'static str,
    command: Vec<&'static str>,
    runner: Runner,
    /// `npm ci` first, when `node_modules` is missing or older than the lock.
    npm: bool,
}

fn suites() -> Vec<Suite> {
    let suite = |dir: &'static str, command: Vec<&'static str>, runner: Runner, npm: bool| Suite {
        name: format!("{} ({dir})", command.join(" ")),
        dir,
        command,
        runner,
        npm,
    };
    let pytest = vec!["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"];
    let go = vec!["go", "test", "-v", "-count=1", "./..."];
    vec![
        suite("sdk/python", pytest.clone(), Runner::Pytest, false),
        suite("guest-examples/python-webapp", pytest.clone(), Runner::Pytest, false),
        suite("guest-examples/python-scheduledscale", pytest.clone(), Runner::Pytest, false),
        suite("guest-examples/python-dnsrecord", pytest, Runner::Pytest, false),
        suite("sdk/typescript", vec!["npm", "test", "--silent"], Runner::Node, true),
        suite("guest-examples/ts-webapp", vec!["npm", "test", "--silent"], Runner::Node, true),
        suite("sdk/go", go.clone(), Runner::Go, false),
        suite("guest-examples/go-webapp", go, Runner::Go, false),
        suite("sdk/c", vec!["make", "--no-print-directory", "test"], Runner::Plain, false),
        suite("guest-examples/c-webapp", vec!["make", "--no-print-directory", "test"], Runner::Plain, false),
    ]
}

/// The operon binary `cargo build` writes.
fn operon_binary() -> PathBuf {
    crate::cargo_target().join("debug/operon")
}

struct SuiteOutcome {
    name: String,
    totals: Totals,
    ok: bool,
    elapsed: Duration,
}

impl Suite {
    fn prepare(&self, root: &Path) -> Result<()> {
        if !self.npm {
            return Ok(());
        }
        let dir = root.join(self.dir);
        let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let installed = modified(dir.join("node_modules/.package-lock.json"));
        let locked = modified(dir.join("package-lock.json"));
        if matches!((installed, locked), (Some(i), Some(l)) if i >= l) {
            return Ok(());
        }
        eprintln!("xtask: npm ci in {}", self.dir);
        let status = Command::new("npm")
            .current_dir(&dir)
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .status()
            .with_context(|| format!("running npm ci in {}: install Node.js 20 or newer with npm", self.dir))?;
        if !status.success() {
            bail!("`npm ci` in {} failed ({status})", self.dir);
        }
        Ok(())
    }

    /// Run the suite; its output is printed only when it fails (or counts nothing).
    fn run(&self, root: &Path) -> SuiteOutcome {
        let started = Instant::now();
        let output = Command::new(self.command[0])
            .args(&self.command[1..])
            .current_dir(root.join(self.dir))
            .env("OPERON", operon_binary())
            .stdin(Stdio::null())
            .output();
        let (text, success) = match output {
            Ok(o) => (
                format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
                o.status.success(),
            ),
            Err(e) => (format!("cannot run `{}`: {e} (.ci/run installs every toolchain)", self.command[0]), false),
        };
        let mut totals = Totals::default();
        for line in text.lines() {
            totals.add(self.runner, line);
        }
        let ok = success && totals.failed == 0 && totals.passed > 0;
        if !ok {
            eprintln!("xtask: ---- {} (in {}) ----\n{text}", self.command.join(" "), self.dir);
            if success && totals.passed == 0 {
                eprintln!("xtask: it ran no test");
            }
            if !success && totals.failed == 0 {
                totals.failed = 1;
            }
        }
        SuiteOutcome { name: self.name.clone(), totals, ok, elapsed: started.elapsed() }
    }
}

/// The environment variable naming the file where a test that cannot run
/// here writes itself down (`host/tests/all/common/skip.rs`).
const SKIP_LEDGER: &str = "OPERON_SKIP_LEDGER";

/// Test counts.
#[derive(Default, Clone, Copy)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Totals {
    /// Move each test of the skip ledger (one line each) from passed to
    /// skipped: libtest counted it passed when it returned early.
    fn skip(&mut self, ledger: &str) {
        let n = ledger.lines().filter(|l| !l.trim().is_empty()).count() as u64;
        let n = n.min(self.passed);
        self.passed -= n;
        self.ignored += n;
    }

    /// `test result: ok. 8 passed; 0 failed; 1 ignored; 0 measured; …`
    fn add_cargo(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("test result: ") else { return };
        self.add_counts(rest, &[("passed", 0), ("failed", 1), ("ignored", 2)]);
    }

    fn add(&mut self, runner: Runner, line: &str) {
        let line = line.trim();
        match runner {
            Runner::Pytest if line.contains(" in ") && (line.contains(" passed") || line.contains(" failed")) => {
                let line = line.trim_matches('=').trim();
                self.add_counts(line, &[("passed", 0), ("failed", 1), ("error", 1), ("errors", 1), ("skipped", 2)]);
            }
            Runner::Node => {
                let mut words = line.split_whitespace();
                if let (Some("#"), Some(what), Some(n)) = (words.next(), words.next(), words.next()) {
                    let n = n.parse::<u64>().unwrap_or(0);
                    match what {
                        "pass" => self.passed += n,
                        "fail" | "cancelled" => self.failed += n,
                        "skipped" | "todo" => self.ignored += n,
                        _ => {}
                    }
                }
            }
            Runner::Go => {
                if line.starts_with("--- PASS:") {
                    self.passed += 1;
                } else if line.starts_with("--- FAIL:") {
                    self.failed += 1;
                } else if line.starts_with("--- SKIP:") {
                    self.ignored += 1;
                }
            }
            Runner::Plain if line.ends_with(" failed") && line.contains(" passed, ") => {
                self.add_counts(line, &[("passed", 0), ("failed", 1)]);
            }
            _ => {}
        }
    }

    /// Add `N word` pairs, separated by `.`, `;` or `,`, for the words named
    /// (0: passed, 1: failed, 2: skipped).
    fn add_counts(&mut self, text: &str, words: &[(&str, u8)]) {
        for part in text.split(['.', ';', ',']) {
            let mut it = part.split_whitespace();
            let (Some(n), Some(what)) = (it.next().and_then(|n| n.parse::<u64>().ok()), it.next()) else { continue };
            match words.iter().find(|(w, _)| *w == what).map(|(_, k)| *k) {
                Some(0) => self.passed += n,
                Some(1) => self.failed += n,
                Some(2) => self.ignored += n,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(runner: Runner, text: &str) -> (u64, u64, u64) {
        let mut t = Totals::default();
        for line in text.lines() {
            t.add(runner, line);
        }
        (t.passed, t.failed, t.ignored)
    }

    #[test]
    fn each_runners_closing_lines_should_be_counted() {
        assert_eq!(count(Runner::Pytest, "....\n41 passed in 0.47s\n"), (41, 0, 0));
        assert_eq!(count(Runner::Pytest, "=== 1 failed, 3 passed, 2 skipped in 1.02s ===\n"), (3, 1, 2));
        assert_eq!(count(Runner::Node, "# tests 19\n# pass 18\n# fail 1\n# skipped 2\n# todo 0\n"), (18, 1, 2));
        let go = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n    --- PASS: TestA/sub (0.00s)\n--- FAIL: TestB\n--- SKIP: TestC\nok  x 0.1s\n";
        assert_eq!(count(Runner::Go, go), (2, 1, 1));
        assert_eq!(count(Runner::Plain, "ok      a\n11 passed, 0 failed\n"), (11, 0, 0));
        let mut cargo = Totals::default();
        cargo.add_cargo("test result: ok. 8 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.1s");
        assert_eq!((cargo.passed, cargo.failed, cargo.ignored), (8, 1, 2));
    }

    #[test]
    fn a_test_in_the_skip_ledger_should_count_as_skipped_not_passed() {
        let mut cargo = Totals::default();
        cargo.add_cargo("test result: ok. 8 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.1s");
        cargo.skip("egress::dnsrecord_keeps_records: pdns_server is not installed\nmanager::metrics: no promtool\n");
        assert_eq!((cargo.passed, cargo.failed, cargo.ignored), (6, 0, 3));
        cargo.skip("");
        assert_eq!((cargo.passed, cargo.failed, cargo.ignored), (6, 0, 3));
    }
}
