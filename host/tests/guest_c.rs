//! The C author workflow, end to end, with the real toolchain and the real
//! host: `operon new --lang c` → `operon build` → `operon test` in a scratch
//! directory outside the repository, and the repository's `c-webapp`
//! through the WebApp fixtures every language shares.
//!
//! A missing C toolchain (clang, wasi-libc) fails these tests with the install hint (CI
//! installs everything); they never skip.

#[path = "common/author.rs"]
mod author;
use author::{operon, repo, run};

use std::process::Command;

#[test]
fn a_new_c_project_should_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    operon(scratch.path(), &["new", "--lang", "c", "greeter"]);
    let project = scratch.path().join("greeter");
    for file in ["operon.toml", "Makefile", "src/main.c", "test/test_main.c", "README.md", "operon-sdk/operon.h"] {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    let built = operon(&project, &["build"]);
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = operon(&project, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
    // The scaffold's own unit tests, natively.
    let unit = run(Command::new("make").current_dir(&project).arg("test"));
    assert!(unit.lines().any(|l| l == "3 passed, 0 failed"), "{unit}");
}

#[test]
fn c_webapp_should_pass_the_shared_webapp_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    let module = scratch.path().join("c-webapp.wasm");
    let example = repo().join("guest-examples/c-webapp");
    operon(&repo(), &["build", example.to_str().unwrap(), "-o", module.to_str().unwrap()]);
    let fixtures = repo().join("guest-examples/webapp/fixtures");
    let tested = operon(&repo(), &["test", module.to_str().unwrap(), fixtures.to_str().unwrap()]);
    assert!(tested.lines().any(|l| l == author::all_passed(&fixtures)), "{tested}");
}

#[test]
fn a_c_guest_that_aborts_should_say_why_in_operon_test() {
    author::panicking_guest_in_operon_test(
        "c",
        "src/main.c",
        &[
            ("#include \"operon.h\"", "#include <stdio.h>\n#include <stdlib.h>\n\n#include \"operon.h\""),
            (
                "if (!*message) return operon_terminal(out, \"spec.message must not be empty\"); /* wait for a change */",
                "if (!*message) { fprintf(stderr, \"BUG: empty message\\n\"); abort(); }",
            ),
        ],
        "BUG: empty message — ",
    );
}
