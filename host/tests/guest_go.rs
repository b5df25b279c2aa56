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
