//! Conformance: the WebApp reconciler is written once per language
//! (`guest-examples/{rust,python,ts,go,c}-webapp`), and every one of them
//! must give the same outcome for every shared fixture
//! (`guest-examples/webapp/fixtures` and its subdirectories: reconcile
//! requests, the admission reviews of `admission/` and the conversion
//! requests of `conversion/`).
//!
//! Each language's component comes from `target/guests/` (built by `cargo
//! xtask guests`, which `cargo xtask test` runs first) and goes through
//! `operon test` — the real binary, with the host's outcome validation — on
//! every fixture directory. The expected files are the one definition of
//! the semantics; since every language is compared with them, all outcomes
//! are identical, or the test fails with a table of who differs where.
//!
//! The time-driven ScheduledScale reconciler
//! (`guest-examples/{rust,python}-scheduledscale`) is held to its shared
//! fixtures (`guest-examples/scheduledscale/fixtures`, requests at fixed
//! clock values) the same way.
//!
//! A missing component fails the test with what to run; nothing is skipped.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const OPERON: &str = env!("CARGO_BIN_EXE_operon");

/// The WebApp in every language, by component name.
const LANGUAGES: [&str; 5] = ["rust-webapp", "python-webapp", "ts-webapp", "go-webapp", "c-webapp"];

/// The ScheduledScale in every language it is written in, by component name.
const SCHEDULEDSCALE_LANGUAGES: [&str; 2] = ["rust-scheduledscale", "python-scheduledscale"];
const DNSRECORD_LANGUAGES: [&str; 2] = ["rust-dnsrecord", "python-dnsrecord"];

/// The shared fixtures of `guest-examples/{example}/fixtures`.
fn fixtures_root(example: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-examples").join(example).join("fixtures")
}

fn is_request(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    [".yaml", ".yml", ".json"].iter().any(|e| name.ends_with(e)) && !name.contains(".expected.") && path.is_file()
}

/// The names of the fixtures directly in `dir`, sorted.
fn fixture_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| is_request(p))
        .map(|p| p.file_name().unwrap().to_string_lossy().rsplit_once('.').unwrap().0.to_string())
        .collect();
    names.sort();
    names
}

/// The directories to run `operon test` on, with the fixtures each must
/// report: the root alone, since `operon test` runs every fixture below it,
/// each named by its path (`admission/NAME`, `conversion/NAME`,
/// `recorded/NAME`).
fn fixture_dirs(dir: &Path, out: &mut Vec<(PathBuf, Vec<String>)>) {
    fn under(dir: &Path, prefix: &str, names: &mut Vec<String>) {
        names.extend(fixture_names(dir).into_iter().map(|n| format!("{prefix}{n}")));
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        subdirs.sort();
        for sub in subdirs {
            let name = sub.file_name().unwrap().to_string_lossy().into_owned();
            under(&sub, &format!("{prefix}{name}/"), names);
        }
    }
    let mut names = Vec::new();
    under(dir, "", &mut names);
    if !names.is_empty() {
        out.push((dir.to_path_buf(), names));
    }
}

/// `operon test MODULE DIR`: per fixture `ok` or the failure text, and the
/// closing `N passed, M failed` line.
fn operon_test(module: &Path, dir: &Path) -> (BTreeMap<String, Result<(), String>>, String) {
    let output = Command::new(OPERON).arg("test").arg(module).arg(dir).output().expect("running operon test");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut results = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in stdout.lines() {
        if let Some(name) = line.strip_prefix("ok      ") {
            if let Some((n, text)) = current.take() {
                results.insert(n, Err(text));
            }
            results.insert(name.trim().to_string(), Ok(()));
        } else if let Some(rest) = line.strip_prefix("FAILED  ") {
            if let Some((n, text)) = current.take() {
                results.insert(n, Err(text));
            }
            let (name, why) = rest.split_once(": ").unwrap_or((rest, ""));
            current = Some((name.trim().to_string(), why.to_string()));
        } else if let Some((_, text)) = current.as_mut() {
            if !line.contains(" passed, ") {
                text.push('\n');
                text.push_str(line);
            }
        }
    }
    if let Some((n, text)) = current.take() {
        results.insert(n, Err(text));
    }
    let summary = stdout.lines().rev().find(|l| l.contains(" passed, ")).unwrap_or_default().to_string();
    if results.is_empty() {
        panic!(
            "`operon test {} {}` ran no fixture ({}):\n{stdout}\n{stderr}",
            module.display(),
            dir.display(),
            output.status
        );
    }
    (results, summary)
}

#[test]
fn every_language_should_give_the_same_outcome_for_every_webapp_fixture() {
    assert_same_outcomes(&fixtures_root("webapp"), &LANGUAGES);
}

#[test]
fn every_scheduledscale_gives_the_same_outcomes() {
    assert_same_outcomes(&fixtures_root("scheduledscale"), &SCHEDULEDSCALE_LANGUAGES);
}

/// The DnsRecord examples (egress to PowerDNS) replay the same recorded
/// calls and give the same outcomes.
#[test]
fn every_dnsrecord_gives_the_same_outcomes() {
    assert_same_outcomes(&fixtures_root("dnsrecord"), &DNSRECORD_LANGUAGES);
}

/// Runs `operon test` with every one of `languages`' components (from
/// `target/guests/`) on every fixture directory under `root`, and fails
/// with a table of who differs where unless every outcome is the expected one.
fn assert_same_outcomes(root: &Path, languages: &[&str]) {
    let guests = common::guests_dir();
    let missing: Vec<&str> =
        languages.iter().copied().filter(|l| !guests.join(format!("{l}.wasm")).is_file()).collect();
    assert!(
        missing.is_empty(),
        "missing components in {}: {}; build them with `cargo xtask guests` (needs every language's toolchain: \
         see .ci/run)",
        guests.display(),
        missing.join(", ")
    );

    let mut dirs = Vec::new();
    fixture_dirs(root, &mut dirs);
    assert!(!dirs.is_empty(), "no fixtures under {}", root.display());

    // (directory, fixture) → language → result.
    let mut table: BTreeMap<(String, String), BTreeMap<&str, Result<(), String>>> = BTreeMap::new();
    let mut summaries = Vec::new();
    let width = languages.iter().map(|l| l.len() + 1).max().unwrap_or_default().max(14);
    for (dir, names) in &dirs {
        let rel = dir.strip_prefix(root).unwrap_or(dir).display().to_string();
        for &language in languages {
            let (results, summary) = operon_test(&guests.join(format!("{language}.wasm")), dir);
            summaries.push(format!("{language:<width$} {:<10} {summary}", if rel.is_empty() { "." } else { &rel }));
            for name in names {
                let result = results.get(name).cloned().unwrap_or_else(|| Err("not run by `operon test`".to_string()));
                table.entry((rel.clone(), name.clone())).or_default().insert(language, result);
            }
        }
    }
    eprintln!("{}", summaries.join("\n"));

    let mut report = String::new();
    for ((dir, name), results) in &table {
        if results.values().all(Result::is_ok) {
            continue;
        }
        let row: Vec<String> =
            results.iter().map(|(l, r)| format!("{l}: {}", if r.is_ok() { "ok" } else { "DIFFERS" })).collect();
        report.push_str(&format!("\n{}/{name}: {}\n", if dir.is_empty() { "." } else { dir }, row.join(", ")));
        for (language, result) in results {
            if let Err(text) = result {
                report.push_str(&format!("  --- {language}: {text}\n"));
            }
        }
    }
    assert!(report.is_empty(), "the languages disagree with the expected outcomes (and so with each other):\n{report}");
    let fixtures: usize = dirs.iter().map(|(_, n)| n.len()).sum();
    eprintln!("{fixtures} fixtures × {} languages: identical outcomes", languages.len());
}
