//! The Go author workflow, end to end, with the real toolchain and the real
//! host: `operon new --lang go` → `operon build` → `operon test` in a scratch
//! directory outside the repository, and the repository's `go-webapp`
//! through the WebApp fixtures every language shares. A new project
//! carries the SDK module behind a `replace`, for a new user (an empty
//! HOME) whose first `GOPROXY` is a trap. With `--sdk registry` it requires
//! `operon.dev/sdk/go` by version and fetches it through `GOPROXY`, a
//! directory `cargo xtask packages` wrote, checked against the `go.sum`
//! lines `operon new` wrote.
//!
//! A missing Go toolchain fails these tests with the install hint (CI
//! installs everything); they never skip.

use crate::common::author;
use author::{VERSION, operon, operon_with, repo, run, with_env};

use std::path::Path;
use std::process::Command;

/// `operon build`, `operon test`, then the scaffold's `go test`, with `env`.
fn build_and_test(project: &Path, env: &[(String, String)]) {
    let built = operon_with(project, env, &["build"]);
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = operon_with(project, env, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
    // The scaffold's own unit tests, natively.
    let unit = run(with_env(Command::new("go").current_dir(project).args(["test", "./..."]), env));
    assert!(unit.contains("ok"), "{unit}");
}

#[test]
fn a_go_project_made_with_sdk_registry_should_require_the_sdk_module_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    operon(scratch.path(), &["new", "--sdk", "registry", "--lang", "go", "greeter"]);
    let project = scratch.path().join("greeter");
    for file in ["operon.toml", "go.mod", "go.sum", "main.go", "main_test.go", "README.md"] {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    assert!(!project.join("operon-sdk").exists(), "nothing is vendored with --sdk registry");
    let go_mod = std::fs::read_to_string(project.join("go.mod")).unwrap();
    let requires_sdk = go_mod.lines().any(|l| {
        let l = l.trim().trim_start_matches("require ").trim();
        l == format!("operon.dev/sdk/go v{VERSION}")
    });
    assert!(requires_sdk && !go_mod.contains("replace"), "{go_mod}");
    let env = author::go_env(scratch.path());
    build_and_test(&project, &env);
    // Go took the module from the proxy directory, and go.sum vouched for it.
    let listed = run(with_env(
        Command::new("go").current_dir(&project).args(["list", "-m", "-json", "operon.dev/sdk/go"]),
        &env,
    ));
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["Version"], format!("v{VERSION}"));
    assert!(
        listed["Dir"].as_str().unwrap().starts_with(&scratch.path().join("gomodcache").display().to_string()),
        "{listed}"
    );
}

#[test]
fn a_new_go_project_with_no_flag_should_build_for_a_new_user_without_asking_a_registry_for_the_sdk() {
    let scratch = tempfile::tempdir().unwrap();
    let user = author::NewUser::new(scratch.path());
    let project = user.operon_new("go", "greeter");
    assert!(project.join("operon-sdk/go.mod").is_file() && project.join("operon-sdk/internal/wit/doc.go").is_file());
    build_and_test(&project, &user.env);
    user.asked_no_registry_for_the_sdk();
}

#[test]
fn a_new_go_project_with_no_flag_should_build_offline() {
    let scratch = tempfile::tempdir().unwrap();
    operon(scratch.path(), &["new", "--lang", "go", "greeter"]);
    build_and_test(&scratch.path().join("greeter"), &[("GOPROXY".into(), "off".into())]);
}

#[test]
fn go_webapp_should_pass_the_shared_webapp_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    let module = scratch.path().join("go-webapp.wasm");
    let example = repo().join("guest-examples/go-webapp");
    operon(&repo(), &["build", example.to_str().unwrap(), "-o", module.to_str().unwrap()]);
    let fixtures = repo().join("guest-examples/webapp/fixtures");
    let tested = operon(&repo(), &["test", module.to_str().unwrap(), fixtures.to_str().unwrap()]);
    assert!(tested.lines().any(|l| l == author::all_passed(&fixtures)), "{tested}");
}

#[test]
fn a_new_go_kind_should_get_its_crd_from_its_types_served_by_the_api_server_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    operon(
        scratch.path(),
        &["new", "--lang", "go", "--group", "shop.example.com", "--version", "v1beta1", "--kind", "Widget", "widgets"],
    );
    let project = scratch.path().join("widgets");
    operon(&project, &["build"]);
    // `operon build` wrote the CRD from types.go and api.go with controller-gen.
    author::crd_should_be_served(
        &project,
        "Go types",
        "widgets.shop.example.com",
        "shop.example.com",
        "v1beta1",
        "Widget",
    );
    let tested = operon(&project, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
}

#[test]
fn a_go_guest_that_panics_should_say_why_in_operon_test() {
    author::panicking_guest_in_operon_test(
        "go",
        "main.go",
        &[("return nil, operon.Terminalf(\"spec.message must not be empty\")", "panic(\"BUG: empty message\")")],
        "panic: BUG: empty message — ",
    );
}

/// The same sources give the same component wherever they are built: a
/// digest pinned in a Reconciler can be rebuilt, and a save that changes
/// nothing deploys nothing new.
#[test]
fn a_go_build_should_not_depend_on_the_projects_directory() {
    author::builds_the_same_from_two_directories("go", &[]);
}

/// `operon build` refuses an SDK that speaks another contract minor than
/// this operon's, naming both.
#[test]
fn a_go_build_should_refuse_an_sdk_of_another_contract_minor() {
    let (from, to) = (format!("const Version = \"{}\"", author::VERSION), "const Version = \"0.1.0\"".to_string());
    author::refuses_an_sdk_of_another_minor(
        "go",
        "operon-sdk/operon.go",
        &from,
        &to,
        &[("GOPROXY".to_string(), "off".to_string())],
    );
}
