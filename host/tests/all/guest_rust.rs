//! The Rust author workflow, end to end, with the real toolchain (cargo,
//! rustup) and the real host: `operon new --lang rust` → `operon build` →
//! `operon test` in a scratch directory outside the repository, then the
//! scaffold's own `cargo test`. A new project builds offline with the SDK
//! copied in, for a new user (an empty HOME) for whom crates.io's
//! `operon-sdk` is patched to a crate that does not compile. With `--sdk
//! registry` the project depends on `operon-sdk` by version; the crates
//! `cargo xtask packages` made with `cargo package` stand in for a
//! registry's through `[patch.crates-io]`. It never builds with this
//! workspace.
//!
//! The scratch project's crates are compiled into `target/scaffold-rust`
//! (`CARGO_TARGET_DIR`), so later runs rebuild only what changed; the
//! sources stay outside the repository. A missing toolchain fails the test
//! with the install hint (CI installs everything); it never skips.

use crate::common::author;
use author::{OPERON, VERSION, repo, run, scaffold_target};

use std::path::Path;
use std::process::Command;

/// A command that builds Rust in the scratch project: its own workspace,
/// with a target directory kept between runs.
fn in_project(program: &str, dir: &Path) -> Command {
    let mut command = Command::new(program);
    command.current_dir(dir).env("CARGO_TARGET_DIR", scaffold_target());
    // The test runs under `cargo test`: nothing of this workspace's build
    // may leak into the scaffold's.
    for var in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS"] {
        command.env_remove(var);
    }
    command
}

/// `operon build`, `operon test` and `inspect`, then the scaffold's own
/// `cargo test` (two unit tests and the fixtures test), in `project`, with
/// `env`.
fn build_and_test(project: &Path, offline: bool, env: &[(String, String)]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let command = |program: &str| {
        let mut command = in_project(program, project);
        author::with_env(&mut command, env);
        if offline {
            command.env("CARGO_NET_OFFLINE", "true");
        }
        command
    };
    let built = run(command(OPERON).arg("build"));
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = run(command(OPERON).arg("test"));
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
    let inspected = run(command(OPERON).args(["inspect", "dist/greeter.wasm"]));
    assert!(inspected.contains("wasi:         no"), "a Rust guest needs no WASI:\n{inspected}");
    let output = command(&cargo).args(["test", "--quiet"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "cargo test failed:\n{text}");
    let passed: u32 = text
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<u32>().ok())
        .sum();
    assert_eq!(passed, 3, "two unit tests and the fixtures test:\n{text}");
}

#[test]
fn a_rust_project_made_with_sdk_registry_should_depend_on_the_sdk_crate_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    author::cargo_patch(scratch.path());
    run(in_project(OPERON, scratch.path()).args(["new", "--sdk", "registry", "--lang", "rust", "greeter"]));
    let project = scratch.path().join("greeter");
    for file in [
        "operon.toml",
        "Cargo.toml",
        "src/lib.rs",
        "tests/fixtures.rs",
        "README.md",
        ".gitignore",
        "fixtures/create.yaml",
    ] {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    assert!(!project.join("operon-sdk").exists(), "nothing is vendored with --sdk registry");
    let manifest: toml::Table = std::fs::read_to_string(project.join("Cargo.toml")).unwrap().parse().unwrap();
    assert_eq!(manifest["dependencies"]["operon-sdk"].as_str(), Some(VERSION), "{manifest:?}");
    assert_eq!(manifest["dev-dependencies"]["operon-sdk"]["version"].as_str(), Some(VERSION), "{manifest:?}");
    build_and_test(&project, false, &[]);
    // What was built is the packaged crate, not this workspace's sources.
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).unwrap();
    assert!(lock.contains(&format!("name = \"operon-sdk\"\nversion = \"{VERSION}\"")), "{lock}");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let metadata = run(in_project(&cargo, &project).args(["metadata", "--format-version=1"]));
    let sdk_path = scratch.path().join(format!("crates/operon-sdk-{VERSION}/Cargo.toml"));
    assert!(metadata.contains(&sdk_path.display().to_string()), "operon-sdk does not come from the packaged crate");
}

#[test]
fn a_new_rust_project_with_no_flag_should_build_offline_for_a_new_user_without_asking_a_registry_for_the_sdk() {
    let scratch = tempfile::tempdir().unwrap();
    let user = author::NewUser::new(scratch.path());
    let project = user.operon_new("rust", "greeter");
    for file in [
        "operon-sdk/Cargo.toml",
        "operon-sdk/src/lib.rs",
        "operon-sdk/wit/reconciler.wit",
        "operon-contract/Cargo.toml",
    ] {
        assert!(project.join(file).is_file(), "{file} was not vendored");
    }
    let sdk_manifest = std::fs::read_to_string(project.join("operon-sdk/Cargo.toml")).unwrap();
    assert!(!sdk_manifest.contains("workspace"), "the vendored SDK must not need a workspace:\n{sdk_manifest}");
    build_and_test(&project, true, &user.env);
    // Cargo.lock names the SDK crates by path: no `source` line, no registry.
    let lock: toml::Table = std::fs::read_to_string(project.join("Cargo.lock")).unwrap().parse().unwrap();
    for name in ["operon-sdk", "operon-contract"] {
        let package = lock["package"].as_array().unwrap().iter().find(|p| p["name"].as_str() == Some(name));
        let package = package.unwrap_or_else(|| panic!("{name} is not in Cargo.lock"));
        assert!(package.get("source").is_none(), "{name} came from a registry: {package:?}");
    }
    user.asked_no_registry_for_the_sdk();
}

#[test]
fn a_new_rust_kind_should_get_its_crd_from_its_types_served_by_the_api_server_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    run(in_project(OPERON, scratch.path()).args([
        "new",
        "--lang",
        "rust",
        "--group",
        "shop.example.com",
        "--version",
        "v1",
        "--kind",
        "Gadget",
        "gadgets",
    ]));
    let project = scratch.path().join("gadgets");
    run(in_project(OPERON, &project).arg("build"));
    // `operon build` ran src/bin/crdgen.rs: kube's CustomResource derive on the spec.
    author::crd_should_be_served(
        &project,
        "Rust types",
        "gadgets.shop.example.com",
        "shop.example.com",
        "v1",
        "Gadget",
    );
    let tested = run(in_project(OPERON, &project).arg("test"));
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
}

#[test]
fn a_rust_guest_that_panics_should_say_why_in_operon_test() {
    // No stderr on wasm32-unknown-unknown: the SDK's panic hook says it through host.log.
    author::panicking_guest_in_operon_test(
        "rust",
        "src/lib.rs",
        &[("return Err(Failure::terminal(\"spec.message must not be empty\"));", "panic!(\"BUG: empty message\");")],
        "panicked at src/lib.rs:",
    );
}

/// The same sources give the same component wherever they are built: a
/// digest pinned in a Reconciler can be rebuilt, and a save that changes
/// nothing deploys nothing new.
#[test]
fn a_rust_build_should_not_depend_on_the_projects_directory() {
    let env = [
        ("CARGO_TARGET_DIR".to_string(), scaffold_target().display().to_string()),
        ("CARGO_NET_OFFLINE".to_string(), "true".to_string()),
    ];
    author::builds_the_same_from_two_directories("rust", &env);
}

/// `operon build` refuses an SDK that speaks another contract minor than
/// this operon's, naming both.
#[test]
fn a_rust_build_should_refuse_an_sdk_of_another_contract_minor() {
    let env = [
        ("CARGO_TARGET_DIR".to_string(), scaffold_target().display().to_string()),
        ("CARGO_NET_OFFLINE".to_string(), "true".to_string()),
    ];
    let from = format!("version = \"{VERSION}\"");
    author::refuses_an_sdk_of_another_minor("rust", "operon-sdk/Cargo.toml", &from, "version = \"0.1.0\"", &env);
}
