//! What the language workflow tests (`guest_*.rs`) share: the repository,
//! running `operon` and other tools as an author would, and how many cases
//! the shared WebApp fixtures hold (counted from the files, not written
//! down). Included with `#[path]`: these tests do not need `common/mod.rs`.

#![allow(dead_code, reason = "each guest test uses part of it")]

use std::path::{Path, PathBuf};
use std::process::Command;

pub const OPERON: &str = env!("CARGO_BIN_EXE_operon");

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Runs `command`, asserting success; returns stdout.
pub fn run(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{command:?} failed ({}):\n{stdout}\n{stderr}", output.status);
    stdout
}

/// `operon ARGS` in `dir`, asserting success; returns stdout.
pub fn operon(dir: &Path, args: &[&str]) -> String {
    run(Command::new(OPERON).current_dir(dir).args(args))
}

/// The summary line `operon test` prints when every shared case passes.
pub fn all_passed(fixtures: &Path) -> String {
    let count = |dir: &Path| {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".expected.yaml"))
                    .count()
            })
            .unwrap_or(0)
    };
    let cases = count(fixtures) + count(&fixtures.join("admission"));
    assert!(cases > 0, "no fixtures in {}", fixtures.display());
    format!("{cases} passed, 0 failed")
}

/// Scaffold `lang` in a scratch directory, make each edit `(from, to)` of
/// `file` (the scaffold's terminal failure for an empty message becomes a
/// panic, an exception, an abort with a known message), build, and run
/// `operon test`: the empty-message fixture must fail, and its output must
/// show `said` first in the trap's message. Returns the output.
pub fn panicking_guest_in_operon_test(lang: &str, file: &str, edits: &[(&str, &str)], said: &str) -> String {
    let scratch = tempfile::tempdir().unwrap();
    operon(scratch.path(), &["new", "--lang", lang, "boom"]);
    let project = scratch.path().join("boom");
    let mut source = std::fs::read_to_string(project.join(file)).unwrap();
    for (from, to) in edits {
        assert!(source.contains(from), "the {lang} scaffold changed: update this test ({from:?})");
        source = source.replace(from, to);
    }
    std::fs::write(project.join(file), source).unwrap();
    operon(&project, &["build"]);
    let out = Command::new(OPERON).current_dir(&project).arg("test").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("FAILED  empty-message"), "{stdout}");
    assert!(stdout.contains(&format!("trapped: {said}")), "the guest's last words come first:\n{stdout}");
    stdout
}
