//! The Python author workflow, end to end, with the real toolchain
//! (componentize-py) and the real host: `operon new --lang python` →
//! `operon build` → `operon test` in a scratch directory outside the
//! repository, and the repository's `python-webapp` through the WebApp
//! fixtures every language shares.
//!
//! A missing toolchain fails these tests with the install hint that
//! `operon build` prints (CI installs everything); they never skip.

#[path = "common/author.rs"]
mod author;
use author::{operon, repo, run};

use std::process::Command;

#[test]
fn a_new_python_project_should_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    operon(scratch.path(), &["new", "--lang", "python", "greeter"]);
    let project = scratch.path().join("greeter");
    for file in ["operon.toml", "pyproject.toml", "app.py", "tests/test_app.py", "README.md", "operon_sdk/__init__.py"]
    {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    assert!(!project.join("operon_sdk/__pycache__").exists(), "caches must not be vendored");
    let built = operon(&project, &["build"]);
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = operon(&project, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
    // The scaffold's own unit tests, natively, with the author's test runner.
    let unit =
        run(Command::new("python3").current_dir(&project).args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]));
    assert!(unit.contains("3 passed"), "{unit}");
}

#[test]
fn python_webapp_should_pass_the_shared_webapp_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    let module = scratch.path().join("python-webapp.wasm");
    let example = repo().join("guest-examples/python-webapp");
    operon(&repo(), &["build", example.to_str().unwrap(), "-o", module.to_str().unwrap()]);
    let fixtures = repo().join("guest-examples/webapp/fixtures");
    let tested = operon(&repo(), &["test", module.to_str().unwrap(), fixtures.to_str().unwrap()]);
    assert!(tested.lines().any(|l| l == author::all_passed(&fixtures)), "{tested}");
    let inspected = operon(&repo(), &["inspect", module.to_str().unwrap()]);
    assert!(inspected.contains("operon:reconciler/admission@0.1.0"), "the WebApp exports admission:\n{inspected}");
}

#[test]
fn a_python_guest_that_raises_should_say_why_in_operon_test() {
    author::panicking_guest_in_operon_test(
        "python",
        "app.py",
        &[("raise Terminal(\"spec.message must not be empty\")", "raise ValueError(\"BUG: empty message\")")],
        "ValueError: BUG: empty message — ",
    );
}
