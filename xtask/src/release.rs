//! `cargo xtask release`: one directory holding a whole release, checked
//! and signed, that installs on a clean machine (`host/tests/all/release.rs`
//! proves it from the directory alone):
//!
//! | Path | What |
//! |---|---|
//! | `operon-X.Y.Z-<target>` | the static `operon` binary (`x86_64-unknown-linux-musl`) |
//! | `sdk/{crates,python,npm,goproxy,c}/` | every SDK package, as `cargo xtask packages` builds them |
//! | `operon-X.Y.Z.tgz` | the Helm chart (`helm package`) |
//! | `image/` | the image as an OCI layout (`skopeo copy oci:image:X.Y.Z docker://…` publishes it) |
//! | `sbom/*.cdx.json` | CycloneDX bills: the binary and image, and each SDK |
//! | `operon-release.pub` | the public key the signatures verify with |
//! | `SHA256SUMS` | every file above (`sha256sum -c SHA256SUMS`) |
//! | `FILE.sig` | beside every file, `SHA256SUMS` included: ECDSA P-256 over SHA-256, base64 DER (`operon verify --key operon-release.pub FILE`, `cosign verify-blob --key operon-release.pub --signature FILE.sig FILE`, or OpenSSL) |
//!
//! The signatures are made by the binary the release ships (`operon sign`),
//! with `--key KEY` (a PEM private key kept outside the repository) or, for
//! tests, `--ephemeral-key` (a key made for this run and then forgotten:
//! its signatures prove the pipeline, not the publisher).
//!
//! `cargo xtask test` builds the static binary once, for the image, and
//! assembles the release directory from that same build ([`assemble`]),
//! with the cheaper `release-test` profile; `cargo xtask release` builds
//! everything with the `release` profile.

use anyhow::{Context, Result, bail};
use operon_project::sdk::VERSION;
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const USAGE: &str = "\
usage: cargo xtask release (--key KEY.key | --ephemeral-key) [--out DIR] [--profile release-test]

KEY.key is a PEM private key (ECDSA P-256, `operon sign --new-key KEY` makes
one), its public half in KEY.pub beside it.

Builds the static binary (release profile), the SDK packages, the chart, the
image (an OCI layout) and the SBOMs into DIR (default target/release-dir),
with SHA256SUMS and a signature beside every file. `--profile release-test`
builds the binary as `cargo xtask test` does (to try the pipeline, not to
publish).
";

/// Where the release directory goes by default.
pub fn default_dir() -> PathBuf {
    crate::root().join("target/release-dir")
}

/// The name of the public key in the directory.
pub const PUBLIC_KEY: &str = "operon-release.pub";

/// What signs the release.
pub enum Key {
    /// A private key file (PEM), kept outside the repository.
    File(PathBuf),
    /// A key made for this run: for tests of the pipeline.
    Ephemeral,
}

pub fn run(args: &[&str]) -> Result<()> {
    let (mut out, mut key, mut profile) = (default_dir(), None, crate::image::Profile::Release);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match *arg {
            "--out" => out = PathBuf::from(it.next().context("--out needs a directory")?),
            "--key" => key = Some(Key::File(PathBuf::from(it.next().context("--key needs a file")?))),
            "--ephemeral-key" => key = Some(Key::Ephemeral),
            "--profile" => {
                profile = match it.next().copied() {
                    Some("release") => crate::image::Profile::Release,
                    Some("release-test") => crate::image::Profile::ReleaseTest,
                    other => bail!("--profile takes release or release-test, not {other:?}"),
                }
            }
            _ => {
                print!("{USAGE}");
                bail!("unknown argument: {arg}");
            }
        }
    }
    let Some(key) = key else {
        print!("{USAGE}");
        bail!("give the release key (--key KEY.pem), or --ephemeral-key to test the pipeline");
    };
    let started = Instant::now();
    let binary = crate::image::build_binary(profile)?;
    crate::packages::run(&[])?;
    let image = crate::root().join("target/release-image");
    crate::image::write_layout(&binary, &image.join("oci"), &image.join("bundle"))?;
    assemble(&out, &binary, &image.join("oci"), key)?;
    eprintln!("xtask: release {VERSION} in {} ({:.0?})", out.display(), started.elapsed());
    Ok(())
}

/// Write the release directory `out` from a built static `binary`, the
/// image `layout` and the packages in `target/packages`; sign with `key`.
pub fn assemble(out: &Path, binary: &Path, layout: &Path, key: Key) -> Result<()> {
    let started = Instant::now();
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(out)?;
    let shipped = out.join(format!("operon-{VERSION}-{}", crate::image::target()));
    copy(binary, &shipped)?;
    copy_tree(&crate::packages::dir(), &out.join("sdk"))?;
    copy_tree(layout, &out.join("image"))?;
    let helm = crate::tools::helm()?;
    exec(Command::new(&helm).arg("package").arg(crate::root().join("deploy/helm/operon")).arg("-d").arg(out))?;
    if !out.join(format!("operon-{VERSION}.tgz")).exists() {
        bail!("helm package wrote no operon-{VERSION}.tgz: is the chart's version the release's?");
    }
    let sbom = out.join("sbom");
    std::fs::create_dir_all(&sbom)?;
    let bills = [
        ("operon.cdx.json", crate::sbom::cargo("operon", Some(&crate::image::target()))?),
        ("operon-sdk-rust.cdx.json", crate::sbom::cargo("operon-sdk", None)?),
        ("operon-sdk-go.cdx.json", crate::sbom::go()?),
        (
            "operon-sdk-python.cdx.json",
            crate::sbom::standalone(
                &format!("pkg:pypi/operon-sdk@{VERSION}"),
                "operon-sdk",
                crate::sbom::python_has_no_dependencies(),
            )?,
        ),
        (
            "operon-sdk-npm.cdx.json",
            crate::sbom::standalone(
                &format!("pkg:npm/%40operon/sdk@{VERSION}"),
                "@operon/sdk",
                crate::sbom::npm_has_no_dependencies(),
            )?,
        ),
        (
            "operon-sdk-c.cdx.json",
            crate::sbom::standalone(&format!("pkg:generic/operon-sdk-c@{VERSION}"), "operon-sdk-c", Ok(()))?,
        ),
    ];
    for (name, bill) in bills {
        std::fs::write(sbom.join(name), serde_json::to_vec_pretty(&bill)?)?;
    }

    // The key, and the public half in the directory.
    let scratch = tempfile::tempdir()?;
    let private = match key {
        Key::File(path) => path,
        Key::Ephemeral => {
            let name = scratch.path().join("release");
            exec(Command::new(&shipped).args(["sign", "--new-key"]).arg(&name))?;
            name.with_extension("key")
        }
    };
    let public = out.join(PUBLIC_KEY);
    copy_public_key(&private, &public)?;

    let files = walk(out)?;
    let mut sums = String::new();
    for file in &files {
        let bytes = std::fs::read(out.join(file))?;
        sums.push_str(&format!("{}  {}\n", hex(&sha2::Sha256::digest(&bytes)), file));
    }
    std::fs::write(out.join("SHA256SUMS"), sums)?;
    let mut signed: Vec<String> = files.clone();
    signed.push("SHA256SUMS".into());
    // Signed by the binary the release ships, and checked by it.
    exec(Command::new(&shipped).current_dir(out).arg("sign").arg("--key").arg(&private).args(&signed))?;
    let verified = Command::new(&shipped)
        .current_dir(out)
        .args(["verify", "--key", PUBLIC_KEY])
        .args(&signed)
        .output()
        .context("running operon verify")?;
    if !verified.status.success() {
        bail!("the release's signatures do not verify: {}", String::from_utf8_lossy(&verified.stderr));
    }
    eprintln!(
        "xtask: release directory {} ({} files, {} signed) in {:.1?}",
        out.display(),
        files.len() + 1,
        signed.len(),
        started.elapsed()
    );
    Ok(())
}

/// Copy the public half of the key `private` into the directory: the
/// `.pub` file beside it (as `operon sign --new-key` and `cosign
/// generate-key-pair` write them).
fn copy_public_key(private: &Path, public: &Path) -> Result<()> {
    let beside = private.with_extension("pub");
    std::fs::copy(&beside, public).with_context(|| {
        format!("reading {} (the release key's public half, kept beside the private key)", beside.display())
    })?;
    Ok(())
}

/// Every file under `dir`, relative, sorted.
fn walk(dir: &Path) -> Result<Vec<String>> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir)?.to_string_lossy().into_owned();
                files.push(rel);
            }
        }
    }
    files.sort();
    Ok(files)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    if !from.exists() {
        bail!("{} does not exist: build it first", from.display());
    }
    for file in walk(from)? {
        let target = to.join(&file);
        std::fs::create_dir_all(target.parent().expect("a file in a directory"))?;
        copy(&from.join(&file), &target)?;
    }
    Ok(())
}

fn exec(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}
