//! The `operon` binary as a guest author uses it: `inspect` and `test`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn operon(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_operon")).args(args).output().expect("running operon")
}

fn webapp_module() -> String {
    let path = common::guests_dir().join("rust-webapp.wasm");
    assert!(path.exists(), "{} missing; run `cargo xtask guests`", path.display());
    path.display().to_string()
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/webapp/fixtures")
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // `admission/`: its own fixtures, not needed by these tests.
            continue;
        }
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn inspect_shows_the_manifest_and_the_module() {
    let out = operon(&["inspect", &webapp_module()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    for expected in [
        "name:         webapp",
        "reconciles:   example.operon.dev/v1alpha1 WebApp",
        "apps/v1 Deployment, v1 Service, networking.k8s.io/v1 Ingress",
        "finalizer:    example.operon.dev/cleanup",
        &format!("operon:reconciler@{} (host runs 0.1.0 and 0.2.0)", operon::runtime::WIT_VERSION),
        "wasi:         no",
        "compile time:",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&operon(&["inspect", "--json", &webapp_module()]).stdout).unwrap();
    assert_eq!(json["manifest"]["name"], "webapp");
    assert!(json["digest"].as_str().unwrap().starts_with("sha256:"));
}

#[test]
fn the_webapp_fixtures_pass() {
    let out = operon(&["test", &webapp_module(), fixtures().to_str().unwrap()]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.ends_with(" passed, 0 failed") && !last.starts_with("0 "), "{text}");
    for case in ["create", "scale", "ingress-on", "ingress-off", "ready", "delete-finalizer", "invalid-spec"] {
        assert!(text.contains(&format!("ok      {case}\n")), "fixture {case} did not run:\n{text}");
    }
}

#[test]
fn a_wrong_expectation_fails_with_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), dir.path());
    let expected = dir.path().join("scale.expected.yaml");
    let text = std::fs::read_to_string(&expected).unwrap();
    let edited = text.replacen("    replicas: 3\n", "    replicas: 30\n", 1);
    assert_ne!(text, edited, "the scale fixture should set replicas: 3");
    std::fs::write(&expected, edited).unwrap();

    let out = operon(&["test", &webapp_module(), dir.path().to_str().unwrap()]);
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("FAILED  scale"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with('-') && l.trim_end().ends_with("replicas: 30")),
        "diff shows the expected value:\n{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with('+') && l.trim_end().ends_with("replicas: 3")),
        "diff shows the actual value:\n{text}"
    );
    assert!(text.lines().last().unwrap().ends_with("passed, 1 failed"), "{text}");
    assert!(!text.contains('\u{1b}'), "no escape codes into a pipe:\n{text}");

    // --color always: the verdict and the diff's lines are coloured.
    let out = operon(&["--color", "always", "test", &webapp_module(), dir.path().to_str().unwrap()]);
    let text = stdout(&out);
    assert!(text.contains("\u{1b}[31mFAILED\u{1b}[0m  scale"), "{text}");
    assert!(text.contains("\u{1b}[32m+"), "{text}");
}

#[test]
fn update_writes_missing_expected_files() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), dir.path());
    let expected = dir.path().join("create.expected.yaml");
    let original = std::fs::read_to_string(&expected).unwrap();
    std::fs::remove_file(&expected).unwrap();

    let out = operon(&["test", &webapp_module(), dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stdout(&out).contains("no expected file"), "{}", stdout(&out));

    let out = operon(&["test", "--update", &webapp_module(), dir.path().to_str().unwrap()]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    // It says what it wrote, and what it left as it was.
    assert!(text.contains("wrote   create → create.expected.yaml\n"), "{text}");
    assert!(text.contains("ok      scale (unchanged)\n"), "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with("1 written, ") && last.ends_with(" unchanged, 0 failed"), "{text}");
    let written: serde_json::Value = serde_saphyr::from_str(&std::fs::read_to_string(&expected).unwrap()).unwrap();
    let original: serde_json::Value = serde_saphyr::from_str(&original).unwrap();
    assert_eq!(written, original, "--update writes what the reviewed golden file says");
}

#[test]
fn a_module_that_is_not_a_component_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.wasm");
    std::fs::write(&bogus, b"not wasm at all").unwrap();
    let out = operon(&["inspect", bogus.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a WebAssembly component"), "{err}");
}

#[test]
fn version_prints_the_binary_the_contract_and_each_sdk() {
    let out = operon(&["version"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    let version = env!("CARGO_PKG_VERSION");
    assert!(text.starts_with(&format!("operon {version}\n")), "{text}");
    assert!(
        text.contains(&format!(
            "contract operon:reconciler@{} (runs guests built for operon:reconciler 0.1.x and 0.2.x)",
            operon::runtime::WIT_VERSION
        )),
        "{text}"
    );
    for (lang, line) in [
        ("rust", format!("operon-sdk         {version}")),
        ("python", format!("operon-sdk         {version}")),
        ("ts", format!("@operon/sdk        {version}")),
        ("go", format!("operon.dev/sdk/go  v{version}")),
        ("c", format!("operon-sdk         {version}")),
    ] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(lang) && l.contains(&line) && l.contains("not published on")),
            "{lang}: {line:?}, not published, in\n{text}"
        );
    }
    assert!(text.contains("no SDK package, chart or image of this release is published"), "{text}");
}

#[test]
fn new_vendors_the_sdk_unless_asked_for_the_unpublished_registry_package() {
    let scratch = tempfile::tempdir().unwrap();
    let new = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_operon")).current_dir(scratch.path()).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        stdout(&out)
    };
    let said = new(&["new", "--lang", "python", "vendored"]);
    assert!(said.contains("is vendored in the project and named by local path"), "{said}");
    assert!(scratch.path().join("vendored/operon_sdk/__init__.py").is_file());
    let said = new(&["new", "--lang", "python", "--vendor", "flagged"]);
    assert!(said.contains("is vendored in the project"), "{said}");
    let said = new(&["new", "--sdk", "registry", "--lang", "python", "packaged"]);
    assert!(said.contains("it depends on the SDK package: \"operon-sdk~="), "{said}");
    assert!(said.contains("which is NOT published there"), "{said}");
    assert!(!scratch.path().join("packaged/operon_sdk").exists());
}

/// A contract 0.2 module's fixtures run at the clock they carry: the same
/// fixture passes every time, and another `now` changes the answer
/// (`requeue-at` is measured from it).
#[test]
fn a_0_2_modules_fixtures_run_at_their_own_clock() {
    let module = common::guests_dir().join("clockwork.wasm").display().to_string();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guests/clockwork/fixtures");
    let out = operon(&["test", &module, fixtures.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("2 passed"), "{}", stdout(&out));

    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures, dir.path());
    let timer = dir.path().join("timer.yaml");
    let text = std::fs::read_to_string(&timer)
        .unwrap()
        .replace("now: \"2026-01-01T09:00:00Z\"", "now: \"2026-01-01T09:10:00Z\"");
    std::fs::write(&timer, text).unwrap();
    let out = operon(&["test", &module, dir.path().to_str().unwrap()]);
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("requeueAfterMs") && text.contains("1200000"), "twenty minutes left at 09:10:\n{text}");
}

/// Conversion fixtures (`conversion/`) run a 0.2 module's `convert`
/// offline, and a changed answer fails with a diff.
#[test]
fn conversion_fixtures_run_a_modules_convert() {
    let module = common::guests_dir().join("converter.wasm").display().to_string();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guests/converter/fixtures");
    let out = operon(&["test", &module, fixtures.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("ok      conversion/up") && stdout(&out).contains("2 passed"), "{}", stdout(&out));

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("conversion")).unwrap();
    copy_dir(&fixtures.join("conversion"), &dir.path().join("conversion"));
    let up = dir.path().join("conversion/up.yaml");
    std::fs::write(&up, std::fs::read_to_string(&up).unwrap().replace("{size: large}", "{size: small}")).unwrap();
    let out = operon(&["test", &module, dir.path().to_str().unwrap()]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("FAILED  conversion/up") && stdout(&out).contains("replicas"), "{}", stdout(&out));
}

/// `operon readiness` rates objects by the host's rules (what SDK test
/// runners ask natively), one verdict per object, in order.
#[test]
fn readiness_rates_each_object_as_the_host_does() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    std::fs::write(
        &file,
        "- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: a, generation: 2}\n  spec: {replicas: 2}\n  status: {observedGeneration: 1}\n\
         - apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: c}\n\
         - apiVersion: batch/v1\n  kind: Job\n  metadata: {name: j, deletionTimestamp: '2026-01-01T00:00:00Z'}\n",
    )
    .unwrap();
    let out = operon(&["readiness", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let verdicts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let statuses: Vec<&str> = verdicts.as_array().unwrap().iter().map(|v| v["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["InProgress", "Current", "Terminating"], "{verdicts}");
    let bad = operon(&["readiness", dir.path().join("missing.yaml").to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing.yaml"), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// A 0.2 guest that reads WASI's wall clock (Rust std's `SystemTime::now()`)
/// reads the request's `now`, not the machine's time: the fixture's
/// `now`, in milliseconds, whatever day the test runs.
#[test]
fn wasis_wall_clock_should_be_the_requests_now() {
    let module = common::guests_dir().join("wall-clock.wasm").display().to_string();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guests/wall-clock/fixtures");
    let out = operon(&["test", &module, fixtures.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("1 passed, 0 failed"), "{}", stdout(&out));
}
