//! The Python author workflow, end to end, with the real toolchain
//! (componentize-py) and the real host: `operon new --lang python` →
//! `operon build` → `operon test` in a scratch directory outside the
//! repository, and the repository's `python-webapp` through the WebApp
//! fixtures every language shares. A new project carries the SDK and needs
//! no install, for a new user (an empty HOME) whose pip would ask a trap
//! for it. With `--sdk registry` the project's dependency on `operon-sdk`
//! is installed by pip into a virtualenv from the wheel `cargo xtask
//! packages` built (`--no-index --find-links`), as from an index that
//! published it.
//!
//! A missing toolchain fails these tests with the install hint that
//! `operon build` prints (CI installs everything); they never skip.

use crate::common::author;
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
fn a_python_project_made_with_sdk_registry_should_depend_on_the_sdk_package_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    operon(scratch.path(), &["new", "--sdk", "registry", "--lang", "python", "greeter"]);
    let project = scratch.path().join("greeter");
    for file in ["operon.toml", "pyproject.toml", "app.py", "tests/test_app.py", "README.md"] {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    assert!(!project.join("operon_sdk").exists(), "nothing is vendored with --sdk registry");
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
fn a_new_python_project_with_no_flag_should_build_for_a_new_user_without_asking_a_registry_for_the_sdk() {
    let scratch = tempfile::tempdir().unwrap();
    let user = author::NewUser::new(scratch.path());
    let project = user.operon_new("python", "greeter");
    assert!(project.join("operon_sdk/__init__.py").is_file() && project.join("operon_sdk/py.typed").is_file());
    assert!(!project.join("operon_sdk/__pycache__").exists(), "caches must not be vendored");
    build_and_test(&project, &user.env);
    user.asked_no_registry_for_the_sdk();
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

/// The same sources give the same component wherever they are built: a
/// digest pinned in a Reconciler can be rebuilt, and a save that changes
/// nothing deploys nothing new.
#[test]
#[ignore = "not reproducible yet: two componentize-py builds of one project in one directory differ (its snapshot \
            of the initialised interpreter, under PYTHONHASHSEED=0 and SOURCE_DATE_EPOCH too)"]
fn a_python_build_should_not_depend_on_the_projects_directory() {
    author::builds_the_same_from_two_directories("python", &[]);
}

/// `operon build` refuses an SDK that speaks another contract minor than
/// this operon's, naming both.
#[test]
fn a_python_build_should_refuse_an_sdk_of_another_contract_minor() {
    let (from, to) = (format!("__version__ = \"{}\"", author::VERSION), "__version__ = \"0.1.0\"".to_string());
    author::refuses_an_sdk_of_another_minor("python", "operon_sdk/__init__.py", &from, &to, &[]);
}

/// The dataclasses a Python reconciler reads its parent as are its CRD's
/// schema: `operon build` runs the scaffold's `crd.py` (`operon_sdk.crd`)
/// into `crd.yaml`, which the API server serves, accepting the sample and
/// refusing a parent without `spec.message`.
#[test]
fn a_new_python_kind_should_get_its_crd_from_its_dataclasses_served_by_the_api_server_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    operon(
        scratch.path(),
        &[
            "new",
            "--lang",
            "python",
            "--group",
            "shop.example.com",
            "--version",
            "v1",
            "--kind",
            "Doohickey",
            "doohickeys",
        ],
    );
    let project = scratch.path().join("doohickeys");
    operon(&project, &["build"]);
    author::crd_should_be_served(
        &project,
        "Python dataclasses",
        "doohickeys.shop.example.com",
        "shop.example.com",
        "v1",
        "Doohickey",
    );
    let tested = operon(&project, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
}
