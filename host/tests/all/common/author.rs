//! What the language workflow tests (`guest_*.rs`) share: the repository,
//! running `operon` and other tools as an author would, and how many cases
//! the shared WebApp fixtures hold (counted from the files, not written
//! down). Included with `#[path]`: these tests do not need `common/mod.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const OPERON: &str = env!("CARGO_BIN_EXE_operon");

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Where the scaffolded Rust projects build: beside the workspace's own
/// build (`CARGO_TARGET_DIR`, which CI keeps under `$HOME`), so their
/// dependencies are compiled once per machine, not once per checkout.
pub fn scaffold_target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"))
        .join("scaffold-rust")
}

/// Runs `command`, asserting success; returns stdout.
pub fn run(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{command:?} failed ({}):\n{stdout}\n{stderr}", output.status);
    stdout
}

/// `operon ARGS` in `dir`, asserting success; returns stdout.
pub fn operon(dir: &Path, args: &[&str]) -> String {
    run(Command::new(OPERON).current_dir(dir).args(args))
}

/// The summary line `operon test` prints when every shared case passes:
/// every expected file under `fixtures`, subdirectories included.
pub fn all_passed(fixtures: &Path) -> String {
    fn count(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .map(|p| match p.is_dir() {
                        true => count(&p),
                        false => usize::from(p.to_string_lossy().ends_with(".expected.yaml")),
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    let cases = count(fixtures);

    assert!(cases > 0, "no fixtures in {}", fixtures.display());
    format!("{cases} passed, 0 failed")
}

/// The release every SDK package carries (the workspace's version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A package under `root` (`target/packages`, where `cargo xtask packages`
/// builds them, or a release directory's `sdk/`); a clear failure when it
/// is missing (these tests install what CI built, never the public
/// registries' copies).
pub fn package_in(root: &Path, rel: &str) -> PathBuf {
    let path = root.join(rel);
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask packages` (or `cargo xtask release`) first",
        path.display()
    );
    path
}

/// Cargo's local source for the SDK crates: the `.crate` files `cargo
/// package` wrote, unpacked in `scratch/crates`, and
/// `scratch/.cargo/config.toml` patching crates.io with them, so a project
/// under `scratch` that depends on `operon-sdk = "X.Y.Z"` gets the packaged
/// crates (and every other dependency from crates.io).
pub fn cargo_patch(scratch: &Path) {
    cargo_patch_from(&repo().join("target/packages"), scratch);
}

/// [`cargo_patch`] with the `.crate` files under `root`.
pub fn cargo_patch_from(root: &Path, scratch: &Path) {
    let crates = scratch.join("crates");
    std::fs::create_dir_all(&crates).unwrap();
    let mut config = String::from("[patch.crates-io]\n");
    for name in ["operon-contract", "operon-sdk"] {
        let file = package_in(root, &format!("crates/{name}-{VERSION}.crate"));
        run(Command::new("tar").arg("xzf").arg(&file).arg("-C").arg(&crates));
        config.push_str(&format!("{name} = {{ path = {:?} }}\n", crates.join(format!("{name}-{VERSION}"))));
    }
    std::fs::create_dir_all(scratch.join(".cargo")).unwrap();
    std::fs::write(scratch.join(".cargo/config.toml"), config).unwrap();
}

/// A virtualenv in `scratch/venv` (with the machine's componentize-py,
/// pytest and pyyaml) into which `requirement` is installed by pip from the
/// wheel `cargo xtask packages` built (`--no-index --find-links`): the
/// environment variables that activate it.
pub fn python_venv(scratch: &Path, requirement: &str) -> Vec<(String, String)> {
    python_venv_from(&repo().join("target/packages"), scratch, requirement)
}

/// [`python_venv`] with the wheel under `root`.
pub fn python_venv_from(root: &Path, scratch: &Path, requirement: &str) -> Vec<(String, String)> {
    let venv = scratch.join("venv");
    run(Command::new("python3").args(["-m", "venv", "--system-site-packages"]).arg(&venv));
    let find_links = package_in(root, "python");
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "--no-index", "--find-links"])
        .arg(&find_links)
        .arg(requirement));
    let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    vec![("VIRTUAL_ENV".into(), venv.display().to_string()), ("PATH".into(), path)]
}

/// `GOPROXY` for the Go SDK: the directory `cargo xtask packages` wrote
/// first, then the machine's module cache as a proxy (for the SDK's own
/// dependencies, already downloaded), with a module cache of the test's own
/// so that no copy of an earlier SDK build is used. No network; `go.sum`
/// as `operon new` wrote it checks what comes from the proxy. controller-gen
/// (`go run …@version`) is outside `go.sum`, and the go command asks the
/// checksum database through a proxy that serves it (proxy.golang.org), never
/// a `file://` one: `GOSUMDB=off` here, for modules the machine's own cache
/// verified when they were first downloaded.
pub fn go_env(scratch: &Path) -> Vec<(String, String)> {
    go_env_from(&repo().join("target/packages"), scratch)
}

/// [`go_env`] with the `GOPROXY` directory under `root`.
pub fn go_env_from(root: &Path, scratch: &Path) -> Vec<(String, String)> {
    let go_env = |key: &str| run(Command::new("go").args(["env", key])).trim().to_string();
    let proxy =
        format!("file://{},file://{}/cache/download", package_in(root, "goproxy").display(), go_env("GOMODCACHE"));
    vec![
        ("GOPROXY".into(), proxy),
        ("GOMODCACHE".into(), scratch.join("gomodcache").display().to_string()),
        ("GOFLAGS".into(), format!("{} -modcacherw", go_env("GOFLAGS")).trim().to_string()),
        ("GOSUMDB".into(), "off".into()),
    ]
}

/// The C SDK from its release archive: unpacked, `make install`ed under
/// `scratch/prefix`; the `PKG_CONFIG_PATH` that finds it.
pub fn c_sdk(scratch: &Path) -> Vec<(String, String)> {
    c_sdk_from(&repo().join("target/packages"), scratch)
}

/// [`c_sdk`] with the archive under `root`.
pub fn c_sdk_from(root: &Path, scratch: &Path) -> Vec<(String, String)> {
    let archive = package_in(root, &format!("c/operon-sdk-c-{VERSION}.tar.gz"));
    run(Command::new("tar").arg("xzf").arg(&archive).arg("-C").arg(scratch));
    let prefix = scratch.join("prefix");
    run(Command::new("make")
        .current_dir(scratch.join(format!("operon-sdk-c-{VERSION}")))
        .arg("install")
        .arg(format!("PREFIX={}", prefix.display())));
    vec![("PKG_CONFIG_PATH".into(), prefix.join("lib/pkgconfig").display().to_string())]
}

/// A minimal npm registry on loopback serving the `@operon/sdk` tarball
/// `cargo xtask packages` built (its packument with the tarball's sha512
/// integrity, and the tarball), and the npm setting that sends the
/// `@operon` scope there (everything else comes from the public registry or
/// npm's cache), as an environment variable so the user's `.npmrc` stays.
/// The server lives as long as the test process.
pub fn npm_registry() -> Vec<(String, String)> {
    npm_registry_from(&repo().join("target/packages"))
}

/// [`npm_registry`] serving the tarball under `root`.
pub fn npm_registry_from(root: &Path) -> Vec<(String, String)> {
    use base64::Engine as _;
    use sha2::{Digest, Sha512};
    use std::io::{BufRead, BufReader, Write};
    let path = package_in(root, &format!("npm/operon-sdk-{VERSION}.tgz"));
    let tarball = std::fs::read(&path).unwrap();
    let manifest = run(Command::new("tar").arg("xzOf").arg(&path).arg("package/package.json"));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut version: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    version["dist"] = serde_json::json!({
        "tarball": format!("{base}/@operon/sdk/-/sdk-{VERSION}.tgz"),
        "integrity": format!("sha512-{}", base64::engine::general_purpose::STANDARD.encode(Sha512::digest(&tarball))),
    });
    let packument = serde_json::json!({
        "name": "@operon/sdk",
        "dist-tags": {"latest": VERSION},
        "versions": {VERSION: version},
    })
    .to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request_line = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            // Headers are read and ignored.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or_default().to_ascii_lowercase();
            let (status, kind, body): (&str, &str, &[u8]) = if path == "/@operon%2fsdk" || path == "/@operon/sdk" {
                ("200 OK", "application/json", packument.as_bytes())
            } else if path.ends_with(".tgz") {
                ("200 OK", "application/octet-stream", &tarball)
            } else {
                ("404 Not Found", "application/json", b"{}")
            };
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
        }
    });
    vec![("npm_config_@operon:registry".into(), format!("{base}/"))]
}

/// `command` with `env` set.
pub fn with_env<'a>(command: &'a mut Command, env: &[(String, String)]) -> &'a mut Command {
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// `operon ARGS` in `dir` with `env`, asserting success; returns stdout.
pub fn operon_with(dir: &Path, env: &[(String, String)], args: &[&str]) -> String {
    run(with_env(Command::new(OPERON).current_dir(dir).args(args), env))
}

/// Scaffold `lang` in a scratch directory, make each edit `(from, to)` of
/// `file` (the scaffold's terminal failure for an empty message becomes a
/// panic, an exception, an abort with a known message), build, and run
/// `operon test`: the empty-message fixture must fail, and its output must
/// show `said` first in the trap's message. Returns the output.
pub fn panicking_guest_in_operon_test(lang: &str, file: &str, edits: &[(&str, &str)], said: &str) -> String {
    let scratch = tempfile::tempdir().unwrap();
    operon(scratch.path(), &["new", "--lang", lang, "boom"]);
    let project = scratch.path().join("boom");
    let mut source = std::fs::read_to_string(project.join(file)).unwrap();
    for (from, to) in edits {
        assert!(source.contains(from), "the {lang} scaffold changed: update this test ({from:?})");
        source = source.replace(from, to);
    }
    std::fs::write(project.join(file), source).unwrap();
    let mut build = Command::new(OPERON);
    build.current_dir(&project).arg("build");
    if lang == "rust" {
        // The dependencies the other Rust scaffold tests already built.
        build.env("CARGO_TARGET_DIR", scaffold_target());
    }
    run(&mut build);
    // The guest's unwinding (Go's runtime prints a stack trace through
    // WASI) is wall-clock timed: under a loaded test run it once took past
    // the default 1 s, and the fixture failed as a timeout, not a panic.
    let out = Command::new(OPERON).current_dir(&project).args(["test", "--guest-timeout", "30s"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("FAILED  empty-message"), "{stdout}");
    assert!(stdout.contains(&format!("trapped: {said}")), "the guest's last words come first:\n{stdout}");
    stdout
}

/// Check a project's generated `crd.yaml` (its first line says it was
/// generated from `source`) as the real API server takes it: applied, served
/// for `group/version Kind`, the project's sample accepted, and a sample
/// without `spec.message` refused by the schema.
pub fn crd_should_be_served(project: &Path, source: &str, name: &str, group: &str, version: &str, kind: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    let text = std::fs::read_to_string(project.join("crd.yaml")).unwrap();
    assert!(text.starts_with(&format!("# Generated by `operon build` from the {source}")), "{text}");
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(crd.metadata.name.as_deref(), Some(name));
    let served = &crd.spec.versions[0];
    assert_eq!((served.name.as_str(), crd.spec.scope.as_str()), (version, "Namespaced"));
    let plane = operon_envtest::shared_with(operon_envtest::Options::default);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = plane.client().await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&crd)).await.unwrap();
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let ar = loop {
            match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok((ar, _)) => break ar,
                Err(e) if std::time::Instant::now() > deadline => panic!("{kind} is not served: {e}"),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        };
        let sample: DynamicObject =
            serde_saphyr::from_str(&std::fs::read_to_string(project.join("example.yaml")).unwrap()).unwrap();
        let objects: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
        let sample_name = sample.metadata.name.clone().unwrap();
        objects.patch(&sample_name, &PatchParams::apply("test"), &Patch::Apply(&sample)).await.unwrap();
        let mut bad = sample.clone();
        bad.data["spec"] = serde_json::json!({});
        let refused = objects.patch(&sample_name, &PatchParams::apply("test").force(), &Patch::Apply(&bad)).await;
        assert!(refused.is_err(), "the generated schema requires spec.message");
    });
}

/// A registry on loopback that serves nothing: it answers every request
/// 404 and keeps its request lines, so a test can prove that no tool asked
/// a registry for an SDK name. Lives as long as the test process.
pub struct Trap {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Trap {
    pub fn start() -> Trap {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                log.lock().unwrap().push(request_line.trim().to_string());
                let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            }
        });
        Trap { url, asked }
    }

    /// What was asked of it.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

/// The environment of a new user on this machine: `HOME` is an empty
/// directory (no `.npmrc`, `.cargo/config.toml`, `pip.conf` or Go env file
/// that would send a tool to another registry), the toolchains and their
/// download caches where this machine keeps them, and every place an SDK
/// name could be resolved from pointed at a trap that would make the build
/// fail and say so: npm's `@operon` scope, pip's index and the first
/// `GOPROXY` at [`Trap`]; a `[patch.crates-io]` above the project that
/// replaces `operon-sdk` and `operon-contract` with crates that do not
/// compile; a `pkg-config` path holding an `operon-sdk` 0.0.0 that no build
/// accepts. Projects go under `scratch/work`.
pub struct NewUser {
    pub env: Vec<(String, String)>,
    pub trap: Trap,
    pub work: PathBuf,
}

impl NewUser {
    pub fn new(scratch: &Path) -> NewUser {
        let real_home = PathBuf::from(std::env::var("HOME").expect("HOME"));
        let home = scratch.join("home");
        let work = scratch.join("work");
        std::fs::create_dir_all(&home).unwrap();
        let trap = Trap::start();
        let var_or = |key: &str, default: PathBuf| std::env::var(key).map(PathBuf::from).unwrap_or(default);
        let go = |key: &str| {
            Command::new("go")
                .args(["env", key])
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let mut env: Vec<(String, String)> = vec![
            ("HOME".into(), home.display().to_string()),
            ("XDG_CONFIG_HOME".into(), home.join(".config").display().to_string()),
            ("CARGO_HOME".into(), var_or("CARGO_HOME", real_home.join(".cargo")).display().to_string()),
            ("RUSTUP_HOME".into(), var_or("RUSTUP_HOME", real_home.join(".rustup")).display().to_string()),
            ("npm_config_cache".into(), real_home.join(".npm").display().to_string()),
            ("npm_config_@operon:registry".into(), format!("{}/npm/", trap.url)),
            ("PIP_INDEX_URL".into(), format!("{}/pypi/simple/", trap.url)),
            ("PIP_NO_CACHE_DIR".into(), "1".into()),
            ("PKG_CONFIG_PATH".into(), scratch.join("pkgconfig").display().to_string()),
        ];
        if let Ok(root) = std::env::var("PYENV_ROOT") {
            env.push(("PYENV_ROOT".into(), root));
        } else if real_home.join(".pyenv").is_dir() {
            env.push(("PYENV_ROOT".into(), real_home.join(".pyenv").display().to_string()));
        }
        if let (Some(modcache), Some(cache)) = (go("GOMODCACHE"), go("GOCACHE")) {
            env.extend([
                ("GOPROXY".into(), format!("{}/go,file://{modcache}/cache/download", trap.url)),
                ("GOMODCACHE".into(), modcache),
                ("GOCACHE".into(), cache),
                ("GOFLAGS".into(), "-modcacherw".into()),
                // The machine's module cache verified these modules when they were first downloaded.
                ("GOSUMDB".into(), "off".into()),
            ]);
        }
        // The Rust scaffold's dependencies, built once for every run.
        env.push(("CARGO_TARGET_DIR".into(), scaffold_target().display().to_string()));
        // crates.io's `operon-sdk` and `operon-contract`, were they ever asked for, replaced by crates that fail.
        let mut patch = String::from("[patch.crates-io]\n");
        for name in ["operon-sdk", "operon-contract"] {
            let krate = scratch.join("trap-crates").join(name);
            std::fs::create_dir_all(krate.join("src")).unwrap();
            std::fs::write(
                krate.join("Cargo.toml"),
                format!("[package]\nname = \"{name}\"\nversion = \"{VERSION}\"\nedition = \"2024\"\n"),
            )
            .unwrap();
            std::fs::write(
                krate.join("src/lib.rs"),
                format!("compile_error!(\"{name} was resolved from crates.io, where it is not published\");\n"),
            )
            .unwrap();
            patch.push_str(&format!("{name} = {{ path = {:?} }}\n", krate));
        }
        std::fs::create_dir_all(work.join(".cargo")).unwrap();
        std::fs::write(work.join(".cargo/config.toml"), patch).unwrap();
        std::fs::create_dir_all(scratch.join("pkgconfig")).unwrap();
        std::fs::write(
            scratch.join("pkgconfig/operon-sdk.pc"),
            "Name: operon-sdk\nDescription: not the Operon C SDK\nVersion: 0.0.0\nCflags: -DOPERON_SDK_FROM_PKG_CONFIG\n\
             srcdir=/nonexistent\n",
        )
        .unwrap();
        NewUser { env, trap, work }
    }

    /// `operon new --lang LANG NAME` with no other flag, in [`NewUser::work`]:
    /// the project's directory.
    pub fn operon_new(&self, lang: &str, name: &str) -> PathBuf {
        let said = operon_with(&self.work, &self.env, &["new", "--lang", lang, name]);
        assert!(said.contains("vendored in the project"), "{said}");
        self.work.join(name)
    }

    /// No tool asked a registry for an SDK name.
    pub fn asked_no_registry_for_the_sdk(&self) {
        let asked: Vec<String> =
            self.trap.asked().into_iter().filter(|l| l.to_lowercase().contains("operon")).collect();
        assert!(asked.is_empty(), "an SDK name was looked up in a registry: {asked:?}");
    }
}

/// `operon new --lang LANG greeter` in two directories of different names
/// and depths, each built with `env`: the two components must be the same
/// bytes (a build depends on the sources, not on where they are). On a
/// difference the message names the texts found in only one of them.
pub fn builds_the_same_from_two_directories(lang: &str, env: &[(String, String)]) {
    let scratch = tempfile::tempdir().unwrap();
    let mut built = Vec::new();
    for dir in ["a", "somewhere/much/deeper"] {
        let parent = scratch.path().join(dir);
        std::fs::create_dir_all(&parent).unwrap();
        operon_with(&parent, env, &["new", "--lang", lang, "greeter"]);
        let project = parent.join("greeter");
        operon_with(&project, env, &["build"]);
        built.push(std::fs::read(project.join("dist/greeter.wasm")).unwrap());
    }
    if built[0] == built[1] {
        return;
    }
    let texts = |bytes: &[u8]| -> std::collections::BTreeSet<String> {
        bytes
            .split(|b| !(b.is_ascii_graphic() || *b == b' '))
            .filter(|run| run.len() >= 8)
            .map(|run| String::from_utf8_lossy(run).into_owned())
            .collect()
    };
    let (a, b) = (texts(&built[0]), texts(&built[1]));
    let only: Vec<&String> = a.symmetric_difference(&b).take(8).collect();
    panic!(
        "{lang}: the same sources built in two directories differ ({} and {} bytes); texts in one only: {only:#?}",
        built[0].len(),
        built[1].len()
    );
}

/// `operon new --lang LANG greeter` whose vendored SDK says it is of
/// another contract minor (in `file`, `from` becomes `to`): `operon build`
/// with `env` must refuse it, naming the SDK's version and the contract.
pub fn refuses_an_sdk_of_another_minor(lang: &str, file: &str, from: &str, to: &str, env: &[(String, String)]) {
    let scratch = tempfile::tempdir().unwrap();
    operon_with(scratch.path(), env, &["new", "--lang", lang, "greeter"]);
    let project = scratch.path().join("greeter");
    let path = project.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "the {lang} SDK changed: update this test ({from:?} in {file})");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    let out = with_env(Command::new(OPERON).current_dir(&project).arg("build"), env).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{lang}: an SDK of another minor was built with:\n{said}");
    let contract = format!("which does not speak operon:reconciler@{}", operon_contract::WIT_VERSION);
    assert!(said.contains(" 0.1.0, ") && said.contains(&contract), "{lang}: {said}");
}
