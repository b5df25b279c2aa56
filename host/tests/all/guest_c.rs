//! The C author workflow, end to end, with the real toolchain and the real
//! host: `operon new --lang c` → `operon build` → `operon test` in a scratch
//! directory outside the repository, and the repository's `c-webapp`
//! through the WebApp fixtures every language shares (reconciles, admission
//! and conversion, contract 0.2). The new project finds
//! carries the SDK's sources, for a new user (an empty HOME) whose
//! pkg-config knows only an SDK no build accepts. With `--sdk registry` it
//! finds the SDK with pkg-config, installed (`make install`) from the
//! release archive `cargo xtask packages` built.
//!
//! A missing C toolchain (clang, wasi-libc) fails these tests with the install hint (CI
//! installs everything); they never skip.

use crate::common::author;
use author::{operon, operon_with, repo, run, with_env};

use std::path::Path;
use std::process::Command;

/// `operon build`, `operon test`, then the scaffold's `make test`, with `env`.
fn build_and_test(project: &Path, env: &[(String, String)]) {
    let built = operon_with(project, env, &["build"]);
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = operon_with(project, env, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
    // The scaffold's own unit tests, natively.
    let unit = run(with_env(Command::new("make").current_dir(project).arg("test"), env));
    assert!(unit.lines().any(|l| l == "3 passed, 0 failed"), "{unit}");
}

#[test]
fn a_c_project_made_with_sdk_registry_should_find_the_installed_sdk_with_pkg_config_build_and_pass_its_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    assert!(!scratch.path().starts_with(repo()), "the scratch directory must be outside the repository");
    operon(scratch.path(), &["new", "--sdk", "registry", "--lang", "c", "greeter"]);
    let project = scratch.path().join("greeter");
    for file in ["operon.toml", "Makefile", "src/main.c", "test/test_main.c", "README.md"] {
        assert!(project.join(file).is_file(), "{file} was not scaffolded");
    }
    assert!(!project.join("operon-sdk").exists(), "nothing is vendored with --sdk registry");
    // Without the SDK installed, the build says how to install it.
    let bare = Command::new(author::OPERON)
        .current_dir(&project)
        .arg("build")
        .env("PKG_CONFIG_PATH", scratch.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&bare.stderr);
    assert!(!bare.status.success() && said.contains("make install PREFIX="), "{said}");
    build_and_test(&project, &author::c_sdk(scratch.path()));
}

#[test]
fn a_new_c_project_with_no_flag_should_build_for_a_new_user_without_asking_pkg_config_for_the_sdk() {
    let scratch = tempfile::tempdir().unwrap();
    let user = author::NewUser::new(scratch.path());
    let project = user.operon_new("c", "greeter");
    assert!(project.join("operon-sdk/operon.h").is_file());
    build_and_test(&project, &user.env);
    // An empty pkg-config path: the vendored copy is all there is.
    build_and_test(&project, &[("PKG_CONFIG_PATH".into(), String::new()), ("PKG_CONFIG_LIBDIR".into(), String::new())]);
}

/// The manifest's 0.2 fields cross the C glue (`operon_wit.c`) into the
/// component: watches by reference and selector, update strategies.
#[test]
fn a_c_manifest_should_carry_its_0_2_watches_and_update_strategies_into_the_component() {
    let scratch = tempfile::tempdir().unwrap();
    operon(scratch.path(), &["new", "--lang", "c", "greeter"]);
    let project = scratch.path().join("greeter");
    let main = project.join("src/main.c");
    let source = std::fs::read_to_string(&main).unwrap();
    let manifest = "static const operon_manifest_t MANIFEST = {";
    assert!(source.contains(manifest), "{source}");
    let source = source.replace(
        manifest,
        "static const operon_watch_t WATCHES[] = {{{\"\", \"v1\", \"Secret\"}, OPERON_MAP_REFERENCE, \"spec.secretRef\"},\n\
         {{\"\", \"v1\", \"Pod\"}, OPERON_MAP_SELECTOR, \"spec.selector\"}};\n\
         static const operon_owned_update_t UPDATES[] = {{{\"\", \"v1\", \"ConfigMap\"}, OPERON_UPDATE_RECREATE}};\n\
         static const operon_manifest_t MANIFEST = {\n    .watches = WATCHES, .watches_len = 2, .updates = UPDATES, .updates_len = 1,",
    );
    std::fs::write(&main, source).unwrap();
    operon(&project, &["build"]);
    let inspected = operon(&project, &["inspect", "--json", "dist/greeter.wasm"]);
    let inspected: serde_json::Value = serde_json::from_str(&inspected).unwrap();
    let manifest = &inspected["manifest"];
    assert_eq!(manifest["watches"][0]["mapping"], serde_json::json!({"reference": "spec.secretRef"}), "{manifest}");
    assert_eq!(manifest["watches"][1]["mapping"], serde_json::json!({"selector": "spec.selector"}), "{manifest}");
    assert_eq!(manifest["updates"][0][1], "recreate", "{manifest}");
}

#[test]
fn c_webapp_should_pass_the_shared_webapp_fixtures() {
    let scratch = tempfile::tempdir().unwrap();
    let module = scratch.path().join("c-webapp.wasm");
    let example = repo().join("guest-examples/c-webapp");
    operon(&repo(), &["build", example.to_str().unwrap(), "-o", module.to_str().unwrap()]);
    // Its world, reconciler-with-admission-and-conversion, exports all three.
    let inspected = operon(&repo(), &["inspect", module.to_str().unwrap()]);
    for export in ["guest", "admission", "conversion"] {
        assert!(inspected.contains(&format!("operon:reconciler/{export}@0.2.0")), "{export}: {inspected}");
    }
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

/// `OPERON ARGS` in `project` while the test holds the project's build lock
/// (`.operon/build.lock`): the command must say it waits, and must not
/// finish, until the lock is released. Returns its stdout.
fn waits_for_the_build_lock(project: &Path, args: &[&str]) -> String {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    std::fs::create_dir_all(project.join(".operon")).unwrap();
    let held = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(project.join(".operon/build.lock"))
        .unwrap();
    held.lock().unwrap();
    let mut child = Command::new(author::OPERON)
        .current_dir(project)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("waiting for another build of greeter to finish") {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "{args:?} ended without waiting for the lock:\n{said}");
        said.push_str(&line);
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "{args:?} went on while another build held the lock");
    held.unlock().unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{args:?} failed after the lock was released:\n{said}\n{stdout}");
    stdout
}

/// Two builds of one project take turns (`operon build` beside `operon
/// dev`, both in `.operon/build/`), and `operon test` never reads a
/// component a build is writing.
#[test]
fn builds_and_tests_of_one_project_should_take_turns() {
    let scratch = tempfile::tempdir().unwrap();
    operon(scratch.path(), &["new", "--lang", "c", "greeter"]);
    let project = scratch.path().join("greeter");
    let built = waits_for_the_build_lock(&project, &["build"]);
    assert!(built.contains("dist/greeter.wasm"), "{built}");
    let tested = waits_for_the_build_lock(&project, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");

    // Two at once, for real: both succeed, and what they leave passes.
    std::fs::write(project.join("src/extra.c"), "int greeter_extra(void) { return 1; }\n").unwrap();
    let start = || Command::new(author::OPERON).current_dir(&project).arg("build").output();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(start);
        let b = s.spawn(start);
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    for out in [a, b] {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let tested = operon(&project, &["test"]);
    assert!(tested.lines().any(|l| l == "3 passed, 0 failed"), "{tested}");
}

/// The same sources give the same component wherever they are built: a
/// digest pinned in a Reconciler can be rebuilt, and a save that changes
/// nothing deploys nothing new.
#[test]
fn a_c_build_should_not_depend_on_the_projects_directory() {
    author::builds_the_same_from_two_directories("c", &[]);
}

/// `operon build` refuses an SDK that speaks another contract minor than
/// this operon's, naming both.
#[test]
fn a_c_build_should_refuse_an_sdk_of_another_contract_minor() {
    let (from, to) = (
        format!("#define OPERON_SDK_VERSION \"{}\"", author::VERSION),
        "#define OPERON_SDK_VERSION \"0.1.0\"".to_string(),
    );
    author::refuses_an_sdk_of_another_minor("c", "operon-sdk/operon.h", &from, &to, &[]);
}
