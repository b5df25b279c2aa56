//! `cargo xtask image [--push REF]`: the operon image, built without a
//! container daemon, and pushed to an OCI registry.
//!
//! 1. `operon` is built as a static binary for `<arch>-unknown-linux-musl`
//!    (rustup's target; the C parts of ring and wasmtime compiled by Debian's
//!    `musl-gcc`, from `musl-tools`), release profile. A binary that asks for
//!    a dynamic loader is refused.
//! 2. umoci (Debian's `umoci`) writes an OCI image layout,
//!    `target/image/oci`, tag `X.Y.Z` (the release): one layer holding
//!    `/usr/local/bin/operon` and `/etc/ssl/certs/ca-certificates.crt`
//!    (Debian's `ca-certificates` bundle) and nothing else — no shell, no
//!    libc, no `/etc/passwd` — and a config whose user is `65532:65532`,
//!    entrypoint `/usr/local/bin/operon`, command `run`.
//! 3. skopeo (Debian's `skopeo`) pushes it to a `docker-registry` on
//!    loopback storing under `target/image/registry`, as
//!    `operon-dev/operon:X.Y.Z`: `host/tests/all/image.rs` serves that storage
//!    again, pulls the image back, unpacks it and runs it. With
//!    `--push REF` (e.g. `ghcr.io/operon-dev/operon:0.1.0`) it is pushed
//!    there too, with skopeo's usual credentials.
//!
//! Why umoci and skopeo rather than buildah: the image is one layer of two
//! files, which needs no build steps, no container storage and no user
//! namespaces; umoci writes a plain OCI layout from a directory and skopeo
//! copies it to any registry. Both are maintained (umoci by the OCI, skopeo
//! by the containers project) and packaged by Debian 12.

use anyhow::{Context, Result, bail};
use operon_project::sdk::VERSION;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The image's name where it is published; the chart and the kustomize base
/// default to it with the release's tag.
pub const IMAGE: &str = "ghcr.io/operon-dev/operon";
/// The repository under a registry's address (`127.0.0.1:PORT/<this>`).
pub const REPOSITORY: &str = "operon-dev/operon";
/// The image's user and group: distroless' `nonroot`, as the chart's
/// securityContext says.
pub const USER: &str = "65532:65532";
/// Where the binary is in the image.
pub const ENTRYPOINT: &str = "/usr/local/bin/operon";
/// Debian's CA bundle, copied into the image at the same path.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

const USAGE: &str = "\
usage: cargo xtask image [--profile release|release-test] [--push REF]

Builds the operon image (a static binary and CA certificates, user 65532)
into target/image/oci and pushes it to a loopback registry storing under
target/image/registry; with --push, also to REF. The profile is release
unless given; release-test builds the binary as `cargo xtask test` does.
";

/// The cargo profile of the static binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `release`: what is published.
    Release,
    /// `release-test` (Cargo.toml): what `cargo xtask test` builds once for
    /// the image and the release directory it tests, cheaper to build.
    ReleaseTest,
}

impl Profile {
    fn name(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::ReleaseTest => "release-test",
        }
    }
}

pub fn run(args: &[&str]) -> Result<()> {
    let (profile, rest) = match args {
        ["--profile", "release-test", rest @ ..] => (Profile::ReleaseTest, rest),
        ["--profile", "release", rest @ ..] => (Profile::Release, rest),
        rest => (Profile::Release, rest),
    };
    let push = match rest {
        [] => None,
        ["--push", reference] => Some(*reference),
        _ => {
            print!("{USAGE}");
            bail!("unknown arguments: {}", args.join(" "));
        }
    };
    build(profile, push).map(|_| ())
}

/// Build the image with the binary of `profile`, push it to the loopback
/// registry (and to `push`); the static binary's path.
pub fn build(profile: Profile, push: Option<&str>) -> Result<PathBuf> {
    let started = Instant::now();
    let dir = crate::root().join("target/image");
    let binary = build_binary(profile)?;
    let built = Instant::now();
    let layout = dir.join("oci");
    write_layout(&binary, &layout, &dir.join("bundle"))?;
    let (digest, size) = manifest_digest_and_size(&layout)?;
    let policy = dir.join("policy.json");
    std::fs::write(&policy, r#"{"default": [{"type": "insecureAcceptAnything"}]}"#)?;

    let storage = dir.join("registry");
    if storage.exists() {
        std::fs::remove_dir_all(&storage)?;
    }
    let registry = operon_envtest::Registry::start(&storage)?;
    let loopback = format!("{}/{REPOSITORY}:{VERSION}", registry.addr());
    skopeo_copy(&policy, &format!("oci:{}:{VERSION}", layout.display()), &format!("docker://{loopback}"), true)?;
    drop(registry);
    if let Some(reference) = push {
        skopeo_copy(&policy, &format!("oci:{}:{VERSION}", layout.display()), &format!("docker://{reference}"), false)?;
    }
    eprintln!(
        "xtask: image {IMAGE}:{VERSION} ({digest}, {:.1} MiB compressed; binary {:.1} MiB) in {:.0?} (binary {:.0?}); \
         pushed to a loopback registry stored in {}{}",
        size as f64 / (1 << 20) as f64,
        std::fs::metadata(&binary)?.len() as f64 / (1 << 20) as f64,
        started.elapsed(),
        built - started,
        storage.display(),
        push.map(|r| format!(" and to {r}")).unwrap_or_default()
    );
    Ok(binary)
}

/// The musl target of this machine's architecture.
pub fn target() -> String {
    format!("{}-unknown-linux-musl", std::env::consts::ARCH)
}

/// OCI's name of this machine's architecture.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn require(tool: &str, install: &str) -> Result<()> {
    let found = Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output()?.status.success();
    if !found {
        bail!("`{tool}` is not installed: {install} (.ci/run installs it)");
    }
    Ok(())
}

/// `cargo build --profile PROFILE -p operon` for the musl target; the
/// binary's path.
pub fn build_binary(profile: Profile) -> Result<PathBuf> {
    require("musl-gcc", "apt-get install musl-tools")?;
    require("umoci", "apt-get install umoci")?;
    require("skopeo", "apt-get install skopeo")?;
    let target = target();
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    if let Ok(out) = installed
        && !String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == target)
    {
        exec(Command::new("rustup").args(["target", "add", &target]))?;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cc_var = format!("CC_{}", target.replace('-', "_"));
    exec(
        Command::new(cargo)
            .current_dir(crate::root())
            .args(["build", "--profile", profile.name(), "--locked", "-p", "operon", "--bin", "operon"])
            .args(["--target", &target])
            .env(cc_var, "musl-gcc")
            // Symbols stay (panic backtraces name functions); DWARF goes.
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
            .env("CARGO_PROFILE_RELEASE_TEST_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_TEST_STRIP", "debuginfo"),
    )?;
    let binary = crate::cargo_target().join(&target).join(profile.name()).join("operon");
    let bytes = std::fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?;
    if let Some(interpreter) = elf_interpreter(&bytes)? {
        bail!("{} is not static: it asks for the loader {interpreter}", binary.display());
    }
    Ok(binary)
}

/// The `PT_INTERP` of a 64-bit little-endian ELF file: the dynamic loader a
/// dynamically linked executable needs; `None` for a static one.
fn elf_interpreter(elf: &[u8]) -> Result<Option<String>> {
    let u16_at = |at: usize| elf.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |at: usize| elf.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let u64_at = |at: usize| elf.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize);
    if !elf.starts_with(b"\x7fELF\x02\x01") {
        bail!("not a 64-bit little-endian ELF file");
    }
    let (phoff, phentsize, phnum) =
        (u64_at(0x20).context("truncated")?, u16_at(0x36).context("truncated")?, u16_at(0x38).context("truncated")?);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph).context("truncated program header")? == 3 {
            let (offset, size) = (u64_at(ph + 8).context("truncated")?, u64_at(ph + 32).context("truncated")?);
            let path = elf.get(offset..offset + size).context("PT_INTERP out of the file")?;
            return Ok(Some(String::from_utf8_lossy(path).trim_end_matches('\0').to_string()));
        }
    }
    Ok(None)
}

/// The OCI layout: a new image, one layer with the binary and the CA
/// bundle, then its config.
pub fn write_layout(binary: &Path, layout: &Path, bundle: &Path) -> Result<()> {
    for dir in [layout, bundle] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    let image = format!("{}:{VERSION}", layout.display());
    let rootless: &[&str] = if is_root() { &[] } else { &["--rootless"] };
    exec(Command::new("umoci").args(["init", "--layout"]).arg(layout))?;
    exec(Command::new("umoci").args(["new", "--image", &image]))?;
    exec(Command::new("umoci").arg("unpack").args(rootless).args(["--image", &image]).arg(bundle))?;
    let rootfs = bundle.join("rootfs");
    install(binary, &rootfs.join(ENTRYPOINT.trim_start_matches('/')), 0o755)?;
    install(Path::new(CA_BUNDLE), &rootfs.join(CA_BUNDLE.trim_start_matches('/')), 0o644)?;
    exec(
        Command::new("umoci")
            .arg("repack")
            .args(rootless)
            .args(["--image", &image, "--history.created_by", "cargo xtask image"])
            .arg(bundle),
    )?;
    let version_label = format!("org.opencontainers.image.version={VERSION}");
    exec(Command::new("umoci").args([
        "config",
        "--image",
        &image,
        &format!("--config.user={USER}"),
        &format!("--config.entrypoint={ENTRYPOINT}"),
        "--config.cmd=run",
        "--config.workingdir=/",
        &format!("--config.env=SSL_CERT_FILE={CA_BUNDLE}"),
        &format!("--config.label={version_label}"),
        "--config.label=org.opencontainers.image.source=https://github.com/operon-dev/operon",
        "--config.label=org.opencontainers.image.licenses=Apache-2.0",
        &format!("--architecture={}", oci_arch()),
        "--os=linux",
        "--history.created_by=cargo xtask image",
    ]))?;
    exec(Command::new("umoci").args(["gc", "--layout"]).arg(layout))?;
    std::fs::remove_dir_all(bundle).ok();
    Ok(())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

fn install(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(to.parent().expect("a file in a directory"))?;
    std::fs::copy(from, to).with_context(|| format!("copying {} into the image", from.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The tagged manifest's digest and the size of everything it references.
fn manifest_digest_and_size(layout: &Path) -> Result<(String, u64)> {
    let read_json = |path: PathBuf| -> Result<serde_json::Value> {
        Ok(serde_json::from_slice(&std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?)?)
    };
    let index = read_json(layout.join("index.json"))?;
    let manifest = index["manifests"]
        .as_array()
        .and_then(|m| m.iter().find(|d| d["annotations"]["org.opencontainers.image.ref.name"] == VERSION))
        .context("the layout has no manifest tagged with the version")?;
    let digest = manifest["digest"].as_str().context("a manifest without digest")?.to_string();
    let blob = |digest: &str| layout.join("blobs").join(digest.replace(':', "/"));
    let body = read_json(blob(&digest))?;
    let mut size = body["config"]["size"].as_u64().unwrap_or(0);
    for layer in body["layers"].as_array().into_iter().flatten() {
        size += layer["size"].as_u64().unwrap_or(0);
    }
    Ok((digest, size))
}

fn skopeo_copy(policy: &Path, from: &str, to: &str, plain_http: bool) -> Result<()> {
    let mut command = Command::new("skopeo");
    command.arg("--policy").arg(policy).args(["copy", "--retry-times", "3"]);
    if plain_http {
        command.arg("--dest-tls-verify=false");
    }
    exec(command.args([from, to]))
}

fn exec(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_and_the_kustomize_base_should_default_to_the_image_this_task_builds() {
        let root = crate::root();
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let values = read("deploy/helm/operon/values.yaml");
        assert!(values.contains(&format!("repository: {IMAGE}\n")), "values.yaml's image.repository is not {IMAGE}");
        let chart = read("deploy/helm/operon/Chart.yaml");
        assert!(
            chart.contains(&format!("appVersion: \"{VERSION}\"")),
            "the chart's appVersion (its default tag) is not {VERSION}"
        );
        let kustomization = read("deploy/kustomize/kustomization.yaml");
        assert!(kustomization.contains(&format!("name: {IMAGE}\n    newTag: {VERSION}")), "{kustomization}");
        assert!(read("deploy/kustomize/operon.yaml").contains(&format!("image: {IMAGE}:{VERSION}")));
        let deployment = read("deploy/helm/operon/templates/deployment.yaml");
        assert!(deployment.contains("runAsUser: 65532") && deployment.contains("readOnlyRootFilesystem: true"));
    }

    #[test]
    fn a_dynamic_executable_should_name_its_loader() {
        let sh = std::fs::read("/bin/sh").unwrap();
        assert!(elf_interpreter(&sh).unwrap().is_some_and(|l| l.contains("ld-")), "/bin/sh is dynamic on Debian");
        assert!(elf_interpreter(b"#!/bin/sh\n").is_err());
    }
}
