//! The release directory (`cargo xtask release`, or the one `cargo xtask
//! test` assembles from its static build) installs on a clean machine,
//! from the directory alone: every checksum and every signature verifies
//! with the standard tools (`sha256sum`, OpenSSL) and with the shipped
//! binary, a changed byte fails both; the binary runs `operon version` with
//! nothing of this machine's environment; each SDK package installs the
//! way its registry client takes a local source (cargo `[patch]`, pip
//! `--find-links`, a loopback npm registry, a `GOPROXY` directory, the C
//! archive's `make install` and pkg-config); the image layout is an image
//! of the release; the SBOM names what the binary links. The chart is
//! installed from the directory under server-side dry run by
//! `deploy.rs` (`the_release_directorys_chart_passes_server_side_dry_run`).
//!
//! A missing directory fails these tests (they never pass by skipping):
//! `cargo xtask release --ephemeral-key` writes it, `$OPERON_RELEASE_DIR`
//! points elsewhere.

use crate::common::author::{self, VERSION, repo, run, with_env};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The release directory under test.
fn dir() -> PathBuf {
    let dir =
        std::env::var_os("OPERON_RELEASE_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("target/release-dir"));
    assert!(
        dir.join("SHA256SUMS").exists(),
        "{} holds no release: run `cargo xtask release --ephemeral-key` (or `cargo xtask test`) first",
        dir.display()
    );
    dir
}

/// The files `SHA256SUMS` lists.
fn listed(dir: &Path) -> Vec<String> {
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    sums.lines().map(|l| l.split_once("  ").expect("`HASH  FILE` lines").1.to_string()).collect()
}

/// The shipped binary.
fn binary(dir: &Path) -> PathBuf {
    let name = format!("operon-{VERSION}-{}-unknown-linux-musl", std::env::consts::ARCH);
    let path = dir.join(&name);
    assert!(path.exists(), "the release holds no {name}");
    path
}

/// OpenSSL's verdict on `file` and its `.sig` with the release's key.
fn openssl_verifies(dir: &Path, file: &Path, signature: &Path) -> bool {
    use base64::Engine as _;
    let text = std::fs::read_to_string(signature).unwrap();
    let der = base64::engine::general_purpose::STANDARD.decode(text.trim()).expect("a base64 signature");
    let scratch = tempfile::tempdir().unwrap();
    let sig = scratch.path().join("sig.der");
    std::fs::write(&sig, der).unwrap();
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(dir.join("operon-release.pub"))
        .arg("-signature")
        .arg(&sig)
        .arg(file)
        .output()
        .expect("running openssl");
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Verified OK")
}

#[test]
fn every_file_is_listed_in_the_checksums_and_signed_and_a_changed_byte_fails() {
    let dir = dir();
    run(Command::new("sha256sum").current_dir(&dir).args(["--check", "--strict", "--quiet", "SHA256SUMS"]));
    let files = listed(&dir);
    for expected in [
        format!("operon-{VERSION}-{}-unknown-linux-musl", std::env::consts::ARCH),
        format!("operon-{VERSION}.tgz"),
        "image/index.json".into(),
        "image/oci-layout".into(),
        format!("sdk/crates/operon-sdk-{VERSION}.crate"),
        format!("sdk/crates/operon-contract-{VERSION}.crate"),
        format!("sdk/python/operon_sdk-{VERSION}-py3-none-any.whl"),
        format!("sdk/npm/operon-sdk-{VERSION}.tgz"),
        format!("sdk/goproxy/operon.dev/sdk/go/@v/v{VERSION}.zip"),
        format!("sdk/c/operon-sdk-c-{VERSION}.tar.gz"),
        "sbom/operon.cdx.json".into(),
        "operon-release.pub".into(),
    ] {
        assert!(files.contains(&expected), "SHA256SUMS lists no {expected}: {files:?}");
    }
    // Every file of the directory is listed or is a signature.
    let mut on_disk = Vec::new();
    let mut todo = vec![dir.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                on_disk.push(p.strip_prefix(&dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    for file in &on_disk {
        let signature = file.ends_with(".sig");
        assert!(signature || file == "SHA256SUMS" || files.contains(file), "{file} is not in SHA256SUMS");
    }
    // Each file's signature, with OpenSSL and with the shipped binary.
    let mut signed: Vec<String> = files.clone();
    signed.push("SHA256SUMS".into());
    for file in &signed {
        let signature = dir.join(format!("{file}.sig"));
        assert!(signature.exists(), "{file} has no signature");
        assert!(openssl_verifies(&dir, &dir.join(file), &signature), "OpenSSL does not verify {file}");
    }
    run(Command::new(binary(&dir)).current_dir(&dir).args(["verify", "--key", "operon-release.pub"]).args(&signed));

    // A changed byte fails both.
    let scratch = tempfile::tempdir().unwrap();
    let changed = scratch.path().join("SHA256SUMS");
    let mut bytes = std::fs::read(dir.join("SHA256SUMS")).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&changed, &bytes).unwrap();
    std::fs::copy(dir.join("SHA256SUMS.sig"), scratch.path().join("SHA256SUMS.sig")).unwrap();
    assert!(!openssl_verifies(&dir, &changed, &dir.join("SHA256SUMS.sig")), "OpenSSL verified a changed file");
    let out = Command::new(binary(&dir))
        .args(["verify", "--key"])
        .arg(dir.join("operon-release.pub"))
        .arg(&changed)
        .output()
        .unwrap();
    assert!(!out.status.success(), "operon verify passed a changed file");
}

#[test]
fn the_binary_runs_with_nothing_of_this_machine() {
    let dir = dir();
    let clean = tempfile::tempdir().unwrap();
    let operon = clean.path().join("operon");
    std::fs::copy(binary(&dir), &operon).unwrap();
    let out = Command::new(&operon)
        .arg("version")
        .env_clear()
        .env("HOME", clean.path())
        .current_dir(clean.path())
        .output()
        .expect("running the shipped binary");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with(&format!("operon {VERSION}\n")), "{text}");
}

#[test]
fn the_sdk_packages_install_from_the_directory() {
    let sdk = dir().join("sdk");
    let scratch = tempfile::tempdir().unwrap();
    let scratch = scratch.path();

    // pip, from the wheel.
    let env = author::python_venv_from(&sdk, scratch, &format!("operon-sdk=={VERSION}"));
    let version =
        run(with_env(Command::new("python3").args(["-c", "import operon_sdk; print(operon_sdk.__version__)"]), &env));
    assert_eq!(version.trim(), VERSION);

    // npm, from a loopback registry serving the tarball.
    let project = scratch.join("npm-project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("package.json"), r#"{"name": "release-check", "version": "0.0.0", "type": "module"}"#)
        .unwrap();
    let env = author::npm_registry_from(&sdk);
    run(with_env(
        Command::new("npm").current_dir(&project).args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            &format!("@operon/sdk@{VERSION}"),
        ]),
        &env,
    ));
    let installed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.join("node_modules/@operon/sdk/package.json")).unwrap())
            .unwrap();
    assert_eq!(installed["version"], VERSION);
    run(Command::new("node").current_dir(&project).args(["--input-type=module", "-e", "await import('@operon/sdk')"]));

    // go, from the GOPROXY directory.
    let env = author::go_env_from(&sdk, scratch);
    let module = format!("operon.dev/sdk/go@v{VERSION}");
    let listed =
        run(with_env(Command::new("go").current_dir(scratch).args(["mod", "download", "-json", &module]), &env));
    let info: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(info["Version"], format!("v{VERSION}"), "{listed}");

    // cargo, with [patch] on the unpacked crates: a project depending on
    // the SDK resolves to them.
    author::cargo_patch_from(&sdk, scratch);
    let crate_dir = scratch.join("rust-project");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    std::fs::write(crate_dir.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        crate_dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"release-check\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n[dependencies]\noperon-sdk = \"={VERSION}\"\n"
        ),
    )
    .unwrap();
    run(Command::new(env!("CARGO")).current_dir(&crate_dir).args(["generate-lockfile", "--offline"]));
    let lock = std::fs::read_to_string(crate_dir.join("Cargo.lock")).unwrap();
    for name in ["operon-sdk", "operon-contract"] {
        let entry = format!("name = \"{name}\"\nversion = \"{VERSION}\"\n");
        let at = lock.find(&entry).unwrap_or_else(|| panic!("{name} {VERSION} is not in the lock file:\n{lock}"));
        let next = lock[at..].split("\n\n").next().unwrap();
        assert!(!next.contains("source ="), "{name} came from a registry, not the release's crate: {next}");
    }

    // C, from the archive, through pkg-config.
    let env = author::c_sdk_from(&sdk, scratch);
    let version = run(with_env(Command::new("pkg-config").args(["--modversion", "operon-sdk"]), &env));
    assert_eq!(version.trim(), VERSION);
}

#[test]
fn the_image_layout_and_the_sbom_describe_the_release() {
    let dir = dir();
    let out = run(Command::new("skopeo")
        .arg("inspect")
        .arg("--config")
        .arg(format!("oci:{}:{VERSION}", dir.join("image").display())));
    let config: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(config["config"]["User"], "65532:65532", "{config}");
    assert_eq!(config["config"]["Labels"]["org.opencontainers.image.version"], VERSION, "{config}");

    let bom: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sbom/operon.cdx.json")).unwrap()).unwrap();
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["metadata"]["component"]["purl"], format!("pkg:cargo/operon@{VERSION}"));
    let components = bom["components"].as_array().unwrap();
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    let wasmtime = components.iter().find(|c| c["name"] == "wasmtime").expect("the SBOM names wasmtime");
    let checksum = wasmtime["hashes"][0]["content"].as_str().unwrap();
    assert!(lock.contains(&format!("checksum = \"{checksum}\"")), "wasmtime's hash is Cargo.lock's");
    for sdk in ["rust", "go", "python", "npm", "c"] {
        let path = dir.join(format!("sbom/operon-sdk-{sdk}.cdx.json"));
        let bom: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(bom["metadata"]["component"]["version"].as_str().map(|v| v.trim_start_matches('v')), Some(VERSION));
    }
}
