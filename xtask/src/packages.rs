//! `cargo xtask packages [LANG…]`: build every SDK package as its registry
//! would receive it, into `target/packages/`:
//!
//! | Directory | What | Built by |
//! |---|---|---|
//! | `crates/` | `operon-contract-X.Y.Z.crate`, `operon-sdk-X.Y.Z.crate` | `cargo package` (verified: each is built from its packaged sources, the SDK against the packaged contract) |
//! | `python/` | `operon_sdk-X.Y.Z-py3-none-any.whl` and `operon_sdk-X.Y.Z.tar.gz` | `python3 -m build` (flit_core, no isolation: the pinned backend `.ci/run` installs) |
//! | `npm/` | `operon-sdk-X.Y.Z.tgz` | `npm pack` (its `prepack` builds `dist/` with tsc) |
//! | `goproxy/` | `operon.dev/sdk/go/@v/{list, vX.Y.Z.info, .mod, .zip}` | here: a `GOPROXY=file://…` directory, the module zip of `sdk/go` |
//! | `c/` | `operon-sdk-c-X.Y.Z.tar.gz` | `tar`: headers, sources, tests, a Makefile whose `install` writes `operon-sdk.pc` |
//!
//! The author-workflow tests (`host/tests/guest_*.rs`) install from these
//! the way each registry client takes a local source, so what they prove is
//! what an author gets from the public registries. Publishing is not done
//! here (docs/releasing.md).

use anyhow::{Context, Result, bail};
use operon_project::sdk::{GO_MODULE, VERSION};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const USAGE: &str = "\
usage: cargo xtask packages [rust|python|ts|go|c…]

Builds the SDK packages (all, or the languages named) into target/packages/.
";

/// Every language's package, in the order they are built.
const ALL: [&str; 5] = ["rust", "python", "ts", "go", "c"];

/// Seconds since the epoch stamped into archives (wheel, sdist, C tarball),
/// so that rebuilding the same sources gives the same bytes: 2026-01-01.
const SOURCE_DATE_EPOCH: &str = "1767225600";

pub fn run(args: &[&str]) -> Result<()> {
    if args.iter().any(|a| matches!(*a, "-h" | "--help" | "help")) {
        print!("{USAGE}");
        return Ok(());
    }
    if let Some(unknown) = args.iter().find(|a| !ALL.contains(a)) {
        bail!("unknown language `{unknown}`\n\n{USAGE}");
    }
    let wanted: Vec<&str> = if args.is_empty() { ALL.to_vec() } else { args.to_vec() };
    let out = dir();
    for lang in wanted {
        let started = Instant::now();
        let built = match lang {
            "rust" => crates(&out.join("crates"))?,
            "python" => python(&out.join("python"))?,
            "ts" => npm(&out.join("npm"))?,
            "go" => goproxy(&out.join("goproxy"))?,
            "c" => c_archive(&out.join("c"))?,
            _ => unreachable!("checked above"),
        };
        for path in built {
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            eprintln!("xtask: {} ({} KiB)", path.display(), size.div_ceil(1024));
        }
        eprintln!("xtask: {lang} package(s) built in {:.1?}", started.elapsed());
    }
    Ok(())
}

/// `target/packages`.
pub fn dir() -> PathBuf {
    crate::root().join("target/packages")
}

/// A fresh, empty directory.
fn fresh(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn run_in(dir: &Path, program: &str, args: &[&str], install: &str) -> Result<()> {
    let status = Command::new(program)
        .current_dir(dir)
        .args(args)
        .env("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
        .status()
        .with_context(|| format!("running `{program}`: {install}"))?;
    if !status.success() {
        bail!("`{program} {}` in {} failed ({status})", args.join(" "), dir.display());
    }
    Ok(())
}

/// `cargo package` of the contract and the SDK together: cargo verifies the
/// SDK against the packaged contract through a temporary local registry, so
/// no path dependency can hide in either.
fn crates(out: &Path) -> Result<Vec<PathBuf>> {
    fresh(out)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = crate::root();
    forget_verified_sources()?;
    // A dirty work tree is how one works on the SDK; CI's is clean.
    run_in(
        &root,
        &cargo,
        &["package", "--locked", "--allow-dirty", "-p", "operon-contract", "-p", "operon-sdk"],
        "cargo",
    )?;
    let mut built = Vec::new();
    for name in ["operon-contract", "operon-sdk"] {
        let file = format!("{name}-{VERSION}.crate");
        let from = crate::cargo_target().join("package").join(&file);
        std::fs::copy(&from, out.join(&file)).with_context(|| format!("copying {}", from.display()))?;
        built.push(out.join(file));
    }
    Ok(built)
}

/// Cargo verifies the SDK against the packaged contract through a local
/// registry it names after the work tree's path, and unpacks each crate of
/// it under `$CARGO_HOME/registry/src/-HASH/NAME-VERSION` once: an unpacking
/// left by an earlier run of the same version (a cached `$HOME`, as CI's)
/// would be built instead of today's sources. Local registries' directories
/// start with `-`; crates.io's are never touched.
fn forget_verified_sources() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else { return Ok(()) };
    let Ok(registries) = std::fs::read_dir(&src) else { return Ok(()) };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for name in ["operon-contract", "operon-sdk"] {
            let unpacked = registry.path().join(format!("{name}-{VERSION}"));
            if unpacked.exists() {
                std::fs::remove_dir_all(&unpacked).with_context(|| format!("removing {}", unpacked.display()))?;
            }
        }
    }
    Ok(())
}

/// The wheel and the sdist of `sdk/python`.
fn python(out: &Path) -> Result<Vec<PathBuf>> {
    fresh(out)?;
    let sdk = crate::root().join("sdk/python");
    let out_arg = out.to_string_lossy().into_owned();
    run_in(
        &sdk,
        "python3",
        &["-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", &out_arg, "."],
        "install the build tools: pip install build==1.6.1 flit_core==4.2.0 (.ci/run does)",
    )?;
    let built = vec![
        out.join(format!("operon_sdk-{VERSION}-py3-none-any.whl")),
        out.join(format!("operon_sdk-{VERSION}.tar.gz")),
    ];
    for file in &built {
        if !file.is_file() {
            bail!("python3 -m build wrote no {}: is the version in operon_sdk/__init__.py {VERSION}?", file.display());
        }
    }
    Ok(built)
}

/// `npm pack` of `sdk/typescript` (`npm ci` first when its tools are missing).
fn npm(out: &Path) -> Result<Vec<PathBuf>> {
    fresh(out)?;
    let sdk = crate::root().join("sdk/typescript");
    let install = "install Node.js 20 or newer with npm";
    if !sdk.join("node_modules/.bin/tsc").exists() {
        run_in(&sdk, "npm", &["ci", "--no-audit", "--no-fund", "--loglevel=error"], install)?;
    }
    let out_arg = out.to_string_lossy().into_owned();
    run_in(&sdk, "npm", &["pack", "--silent", "--pack-destination", &out_arg], install)?;
    let file = out.join(format!("operon-sdk-{VERSION}.tgz"));
    if !file.is_file() {
        bail!("npm pack wrote no {}: is the version in sdk/typescript/package.json {VERSION}?", file.display());
    }
    Ok(vec![file])
}

/// A `GOPROXY` directory serving `GO_MODULE@vVERSION` (the protocol of
/// `go help goproxy`): what proxy.golang.org serves once the tag
/// `sdk/go/vVERSION` is pushed. The zip holds every file of `sdk/go`, as
/// `operon_project::sdk::go_module_files` lists them, the same list the
/// `go.sum` lines of `operon new` are computed from.
fn goproxy(out: &Path) -> Result<Vec<PathBuf>> {
    use std::io::Write as _;
    fresh(out)?;
    let dir = out.join(GO_MODULE).join("@v");
    std::fs::create_dir_all(&dir)?;
    let version = format!("v{VERSION}");
    let zip_path = dir.join(format!("{version}.zip"));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&zip_path)?);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .last_modified_time(zip::DateTime::default());
    for (name, bytes) in operon_project::sdk::go_module_files(VERSION) {
        zip.start_file(name, options)?;
        zip.write_all(bytes)?;
    }
    zip.finish()?;
    let go_mod = std::fs::read(crate::root().join("sdk/go/go.mod"))?;
    std::fs::write(dir.join(format!("{version}.mod")), go_mod)?;
    std::fs::write(
        dir.join(format!("{version}.info")),
        format!("{{\"Version\":\"{version}\",\"Time\":\"2026-01-01T00:00:00Z\"}}\n"),
    )?;
    std::fs::write(dir.join("list"), format!("{version}\n"))?;
    Ok(vec![zip_path])
}

/// `operon-sdk-c-VERSION.tar.gz`: what `make install` needs (headers,
/// sources, the Makefile) and the SDK's own tests, under one top directory.
fn c_archive(out: &Path) -> Result<Vec<PathBuf>> {
    fresh(out)?;
    let sdk = crate::root().join("sdk/c");
    let top = format!("operon-sdk-c-{VERSION}");
    let file = out.join(format!("{top}.tar.gz"));
    let mut files: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(&sdk)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let keep = name.ends_with(".c") || name.ends_with(".h") || name == "Makefile" || name == "README.md";
        if keep {
            files.push(name);
        }
    }
    files.push("test".into());
    files.sort();
    let mut args: Vec<String> = [
        "--create",
        "--use-compress-program=gzip -n",
        "--sort=name",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "--mode=u+rw,go+r,go-w",
        "--exclude=*.o",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("--mtime=@{SOURCE_DATE_EPOCH}"));
    args.push(format!("--transform=s,^,{top}/,"));
    args.push(format!("--file={}", file.display()));
    args.extend(files);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let status = Command::new("tar").current_dir(&sdk).args(&args).status().context("running tar (GNU tar)")?;
    if !status.success() {
        bail!("tar failed ({status})");
    }
    Ok(vec![file])
}
