//! The Go author workflow, end to end, with the real toolchain and the real
//! host: `operon new --lang go` → `operon build` → `operon test` in a scratch
//! directory outside the repository, and the repository's `go-webapp`
//! through the WebApp fixtures every language shares.
//!
//! A missing Go toolchain fails these tests with the install hint (CI
//! installs everything); they never skip.

#[path = "common/author.rs"]
mod author;
use author::{operon, repo, run};

use std::process::Command;

#[test]
fn a_new_go_project_should_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    operon(scratch.path(), &["new", "--lang", "go", "greeter"]);
    let project = scratch.path().join("greeter");
    for file in ["operon.toml", "go.mod", "go.sum", "main.go", "main_test.go", "README.md", "operon-sdk/go.mod"] {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    let built = operon(&project, &["build"]);
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = operon(&project, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
    // The scaffold's own unit tests, natively.
    let unit = run(Command::new("go").current_dir(&project).args(["test", "./..."]));
    assert!(unit.contains("ok"), "{unit}");
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
