//! The TypeScript author workflow, end to end, with the real toolchain
//! (npm, tsc, esbuild, componentize-js) and the real host: `operon new
//! --lang ts` → `operon build` → `operon test` in a scratch directory
//! outside the repository, and the repository's `ts-webapp` through the
//! WebApp fixtures every language shares. A new project links the SDK's
//! sources vendored into it, for a new user (an empty HOME) whose npm would
//! fail the build if it asked a registry for `@operon/sdk`. With `--sdk
//! registry` its `@operon/sdk` dependency is resolved by npm through a
//! registry on loopback that serves the tarball `cargo xtask packages`
//! built (the `@operon` scope only; every other package comes from the
//! public registry or npm's cache), as from a registry that published it.
//!
//! A missing toolchain fails these tests with the install hint that
//! `operon build` prints (CI installs everything); they never skip.

use crate::common::author;
use author::{VERSION, operon, operon_with, repo, run, with_env};

use std::path::Path;
use std::process::Command;

/// `operon build` (which runs `npm install` first), `operon test`, then the
/// scaffold's `npm test`, with `env`.
fn build_and_test(project: &Path, env: &[(String, String)]) {
    let built = operon_with(project, env, &["build"]);
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = operon_with(project, env, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
    // The scaffold's own unit tests, natively, with node's test runner.
    let unit = run(with_env(Command::new("npm").current_dir(project).args(["test", "--silent"]), env));
    assert!(unit.lines().any(|l| l == "# fail 0") && unit.lines().any(|l| l == "# pass 2"), "{unit}");
}

#[test]
fn a_ts_project_made_with_sdk_registry_should_depend_on_the_sdk_package_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    operon(scratch.path(), &["new", "--sdk", "registry", "--lang", "ts", "greeter"]);
    let project = scratch.path().join("greeter");
    for file in [
        "operon.toml",
        "package.json",
        "package-lock.json",
        "tsconfig.json",
        "src/index.ts",
        "test/index.test.ts",
        "README.md",
    ] {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    assert!(!project.join("operon-sdk").exists(), "nothing is vendored with --sdk registry");
    let package: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.join("package.json")).unwrap()).unwrap();
    assert_eq!(package["dependencies"]["@operon/sdk"], format!("^{VERSION}"));
    build_and_test(&project, &author::npm_registry());
    // npm installed the packed package: its JavaScript and declarations.
    let installed = project.join("node_modules/@operon/sdk");
    assert!(!installed.is_symlink(), "@operon/sdk must be installed, not linked");
    for file in ["dist/index.js", "dist/index.d.ts", "dist/component.js", "package.json"] {
        assert!(installed.join(file).is_file(), "{file} is not in the installed package");
    }
}

#[test]
fn a_new_ts_project_with_no_flag_should_build_for_a_new_user_without_asking_a_registry_for_the_sdk() {
    let scratch = tempfile::tempdir().unwrap();
    let user = author::NewUser::new(scratch.path());
    let project = user.operon_new("ts", "greeter");
    for file in ["operon-sdk/package.json", "operon-sdk/src/index.ts"] {
        assert!(project.join(file).is_file(), "{file} was not vendored");
    }
    build_and_test(&project, &user.env);
    user.asked_no_registry_for_the_sdk();
    assert!(project.join("node_modules/@operon/sdk").is_symlink(), "npm links the vendored sources");
}

#[test]
fn ts_webapp_should_pass_the_shared_webapp_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    let module = scratch.path().join("ts-webapp.wasm");
    let example = repo().join("guest-examples/ts-webapp");
    operon(&repo(), &["build", example.to_str().unwrap(), "-o", module.to_str().unwrap()]);
    let fixtures = repo().join("guest-examples/webapp/fixtures");
    let tested = operon(&repo(), &["test", module.to_str().unwrap(), fixtures.to_str().unwrap()]);
    assert!(tested.lines().any(|l| l == author::all_passed(&fixtures)), "{tested}");
    let inspected = operon(&repo(), &["inspect", module.to_str().unwrap()]);
    assert!(inspected.contains("operon:reconciler@0.2.0"), "the WebApp speaks contract 0.2:\n{inspected}");
    for iface in ["admission", "conversion"] {
        assert!(
            inspected.contains(&format!("operon:reconciler/{iface}@0.2.0")),
            "the WebApp exports {iface}:\n{inspected}"
        );
    }
    assert!(!inspected.contains("wasi:http"), "the network is disabled:\n{inspected}");
}

#[test]
fn a_typescript_guest_that_throws_should_say_why_in_operon_test() {
    author::panicking_guest_in_operon_test(
        "ts",
        "src/index.ts",
        &[(
            "if (!message) throw new Terminal(\"spec.message must not be empty\");",
            "if (!message) throw new Error(\"BUG: empty message\");",
        )],
        "reconcile threw Error: BUG: empty message — ",
    );
}

/// The same sources give the same component wherever they are built: a
/// digest pinned in a Reconciler can be rebuilt, and a save that changes
/// nothing deploys nothing new.
#[test]
#[ignore = "not reproducible yet: componentize-js pre-initializes the engine with wizer, whose WASI gives it the \
            machine's entropy and clock, and the snapshot differs from build to build even in one directory"]
fn a_ts_build_should_not_depend_on_the_projects_directory() {
    author::builds_the_same_from_two_directories("ts", &[]);
}

/// `operon build` refuses an SDK that speaks another contract minor than
/// this operon's, naming both.
#[test]
fn a_ts_build_should_refuse_an_sdk_of_another_contract_minor() {
    let (from, to) = (format!("\"version\": \"{}\"", author::VERSION), "\"version\": \"0.1.0\"".to_string());
    author::refuses_an_sdk_of_another_minor("ts", "operon-sdk/package.json", &from, &to, &[]);
}

/// The schemas a TypeScript reconciler reads its parent with are its CRD's:
/// `operon build` runs the scaffold's `src/crd.ts` (the SDK's `s.crd`) into
/// `crd.yaml`, which the API server serves, accepting the sample and
/// refusing a parent without `spec.message`.
#[test]
fn a_new_ts_kind_should_get_its_crd_from_its_schemas_served_by_the_api_server_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    operon(
        scratch.path(),
        &["new", "--lang", "ts", "--group", "shop.example.com", "--version", "v1", "--kind", "Gizmo", "gizmos"],
    );
    let project = scratch.path().join("gizmos");
    operon(&project, &["build"]);
    author::crd_should_be_served(
        &project,
        "TypeScript schemas",
        "gizmos.shop.example.com",
        "shop.example.com",
        "v1",
        "Gizmo",
    );
    let tested = operon(&project, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
}
