//! The Python author workflow, end to end, with the real toolchain
//! (componentize-py) and the real host: `operon new --lang python` →
//! `operon build` → `operon test` in a scratch directory outside the
//! repository, and the repository's `python-webapp` through the WebApp
//! fixtures every language shares. The new project's dependency on
//! `operon-sdk` is installed by pip into a virtualenv from the wheel `cargo
//! xtask packages` built (`--no-index --find-links`), as from PyPI; a
//! project made with `--vendor` needs no install.
//!
//! A missing toolchain fails these tests with the install hint that
//! `operon build` prints (CI installs everything); they never skip.

#[path = "common/author.rs"]
mod author;
use author::{VERSION, operon, operon_with, repo, run, with_env};

use std::path::Path;
use std::process::Command;

/// `operon build`, `operon test`, then the scaffold's pytest, with `env`.
fn build_and_test(project: &Path, env: &[(String, String)]) {
    let built = operon_with(project, env, &["build"]);
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = operon_with(project, env, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
    // The scaffold's own unit tests, natively, with the author's test runner.
    let unit = run(with_env(
        Command::new("python3").current_dir(project).args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]),
        env,
    ));
    assert!(unit.contains("3 passed"), "{unit}");
}

#[test]
fn a_new_python_project_should_depend_on_the_sdk_package_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    operon(scratch.path(), &["new", "--lang", "python", "greeter"]);
    let project = scratch.path().join("greeter");
    for file in ["operon.toml", "pyproject.toml", "app.py", "tests/test_app.py", "README.md"] {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    assert!(!project.join("operon_sdk").exists(), "nothing is vendored without --vendor");
    let pyproject: toml::Table = std::fs::read_to_string(project.join("pyproject.toml")).unwrap().parse().unwrap();
    let requirement = pyproject["project"]["dependencies"][0].as_str().expect("a dependency on the SDK").to_string();
    assert_eq!(requirement, format!("operon-sdk~={VERSION}"));

    // Without the package installed, the build says how to install it.
    let bare =
        Command::new(author::OPERON).current_dir(&project).arg("build").env_remove("VIRTUAL_ENV").output().unwrap();
    let said = String::from_utf8_lossy(&bare.stderr);
    assert!(!bare.status.success() && said.contains("pip install 'operon-sdk~="), "{said}");

    // The requirement pyproject.toml states, installed from the built wheel.
    let env = author::python_venv(scratch.path(), &requirement);
    build_and_test(&project, &env);
}

#[test]
fn a_vendored_python_project_should_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    operon(scratch.path(), &["new", "--lang", "python", "--vendor", "greeter"]);
    let project = scratch.path().join("greeter");
    assert!(project.join("operon_sdk/__init__.py").is_file() && project.join("operon_sdk/py.typed").is_file());
    assert!(!project.join("operon_sdk/__pycache__").exists(), "caches must not be vendored");
    build_and_test(&project, &[]);
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
    // Contract 0.2, world reconciler-with-admission-and-conversion.
    for export in ["operon:reconciler/admission@0.2.0", "operon:reconciler/conversion@0.2.0"] {
        assert!(inspected.contains(export), "the WebApp exports {export}:\n{inspected}");
    }
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
