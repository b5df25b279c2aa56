//! `cargo xtask guests [-v] [--debug-info] [NAME…]`: build every guest into
//! `target/guests/<name>.wasm`, as a WebAssembly component.
//!
//! Guests are the folders under `guest-examples/` and `host/tests/guests/`:
//!
//! - A folder with an `operon.toml` is a guest project in any language
//!   (`rust | python | ts | go | c`), built by `operon_project::build`,
//!   the recipe `operon build` runs: **this task has no build recipe of its
//!   own.** A tool that is missing fails the build with what to install.
//! - Rust crates of this workspace (the test guests, which have no
//!   `operon.toml`, and Rust projects inside the workspace such as
//!   `rust-webapp`) are built by one batched `cargo build` for speed, then
//!   made components by `operon_project::componentize`. A test guest may
//!   pick its target in its manifest:
//!
//! ```toml
//! [package.metadata.operon]
//! target = "wasm32-wasip2"   # default: "wasm32-unknown-unknown"
//! ```
//!
//! With `wasm32-wasip2`, rustc links a component itself (wasm-component-ld);
//! it is validated and copied.
//!
//! Project builds run on their own threads beside the cargo build. Every
//! output is validated with wasmparser 0.254 (wasmtime 48's) and must export
//! something.
//!
//! Rust guests are built with `CARGO_PROFILE_RELEASE_STRIP=debuginfo`: the
//! DWARF of the precompiled std would otherwise make every guest about 1.5 MB
//! instead of tens of KB (too big for a ConfigMap). Function names are kept,
//! so trap backtraces stay readable. `--debug-info` keeps the workspace
//! profile as is.

use anyhow::{Context, Result, anyhow, bail};
use operon_project::{self as project, BuildOptions, Lang, Project};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Folders (relative to the workspace root) whose subfolders are guests.
const GUEST_DIRS: &[&str] = &["guest-examples", "host/tests/guests"];

const USAGE: &str = "\
usage: cargo xtask guests [-v|--verbose] [--debug-info] [NAME…]

Builds every guest (or only the NAMEs) into target/guests/<name>.wasm.
  -v, --verbose   show every tool's output; list each component's imports and exports
  --debug-info    keep DWARF in Rust guests (the workspace release profile as is)
";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum RustTarget {
    /// A core module, made into a component by `operon_project::componentize`.
    Core,
    /// A component linked by rustc (Rust std over WASI 0.2).
    Wasip2,
}

impl RustTarget {
    fn triple(self) -> &'static str {
        match self {
            RustTarget::Core => "wasm32-unknown-unknown",
            RustTarget::Wasip2 => "wasm32-wasip2",
        }
    }
}

/// How a guest is built.
#[derive(Debug)]
enum How {
    /// A crate of this workspace, in the batched `cargo build`.
    Workspace(RustTarget),
    /// `operon_project::build`.
    Project(Box<Project>),
}

#[derive(Debug)]
struct Guest {
    /// Output name: `target/guests/<name>.wasm`.
    name: String,
    dir: PathBuf,
    how: How,
}

impl Guest {
    fn lang(&self) -> String {
        match &self.how {
            How::Workspace(target) => format!("rust {}", target.triple()),
            How::Project(p) => p.config.lang.to_string(),
        }
    }
}

struct Options {
    verbose: bool,
    debug_info: bool,
    only: Vec<String>,
}

pub fn run(args: &[&str]) -> Result<()> {
    let opts = parse_args(args)?;
    let started = Instant::now();
    let root = crate::root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let metadata = cargo_metadata(&cargo, &root)?;
    // The checkout's `target/guests`, where tests and benches read them,
    // whatever `CARGO_TARGET_DIR` cargo builds in.
    let out_dir = root.join("target").join("guests");

    let mut guests = discover(&root, &metadata)?;
    if !opts.only.is_empty() {
        let unknown: Vec<&str> =
            opts.only.iter().filter(|n| !guests.iter().any(|g| &g.name == *n)).map(String::as_str).collect();
        if !unknown.is_empty() {
            let known: Vec<&str> = guests.iter().map(|g| g.name.as_str()).collect();
            bail!("no guest named {}; guests: {}", unknown.join(", "), known.join(", "));
        }
        guests.retain(|g| opts.only.contains(&g.name));
    }
    if guests.is_empty() {
        bail!("no guests found under {}", GUEST_DIRS.join(", "));
    }
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;

    let mut by_target: BTreeMap<RustTarget, Vec<&Guest>> = BTreeMap::new();
    let mut projects: Vec<(&Guest, &Project)> = Vec::new();
    for guest in &guests {
        match &guest.how {
            How::Workspace(target) => by_target.entry(*target).or_default().push(guest),
            How::Project(p) => projects.push((guest, p)),
        }
    }

    let mut failures: Vec<String> = Vec::new();
    let mut built = 0;
    std::thread::scope(|scope| {
        // Projects build on their own threads (their tools are mostly
        // single-threaded) while cargo builds the workspace guests.
        let handles: Vec<_> = projects
            .iter()
            .map(|&(guest, project)| {
                let output = out_dir.join(format!("{}.wasm", guest.name));
                let verbose = opts.verbose;
                let handle = scope.spawn(move || {
                    let options = BuildOptions { output: Some(output), verbose, copy_to: None };
                    let name = &guest.name;
                    let mut progress = |line: &str| {
                        if verbose {
                            eprintln!("{name}: {line}");
                        }
                    };
                    project::build(project, &options, &mut progress)
                });
                (guest, handle)
            })
            .collect();

        for (target, members) in &by_target {
            let components = match build_rust(&cargo, &root, *target, members, opts.debug_info) {
                Ok(components) => components,
                Err(e) => {
                    let names: Vec<&str> = members.iter().map(|g| g.name.as_str()).collect();
                    failures.push(format!("{} (rust {}): {e:#}", names.join(", "), target.triple()));
                    continue;
                }
            };
            for (guest, component) in members.iter().zip(components) {
                let result = component.and_then(|bytes| {
                    let out = out_dir.join(format!("{}.wasm", guest.name));
                    let changed = project::write_if_changed(&out, &bytes)?;
                    report(guest, &bytes, changed, opts.verbose)
                });
                match result {
                    Ok(()) => built += 1,
                    Err(e) => failures.push(format!("{}: {e:#}", guest.name)),
                }
            }
        }

        for (guest, handle) in handles {
            let result = match handle.join() {
                Ok(Ok(b)) => std::fs::read(&b.path)
                    .with_context(|| format!("reading {}", b.path.display()))
                    .and_then(|bytes| report(guest, &bytes, b.changed, opts.verbose)),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => Err(anyhow!("the build thread panicked")),
            };
            match result {
                Ok(()) => built += 1,
                Err(e) => failures.push(format!("{} ({}): {e:#}", guest.name, guest.lang())),
            }
        }
    });

    if !failures.is_empty() {
        bail!("{} of {} guests failed:\n  {}", failures.len(), guests.len(), failures.join("\n  "));
    }
    println!("{built} guests in {:.1}s -> {}", started.elapsed().as_secs_f64(), out_dir.display());
    Ok(())
}

fn parse_args(args: &[&str]) -> Result<Options> {
    let mut opts = Options { verbose: false, debug_info: false, only: Vec::new() };
    for &arg in args {
        match arg {
            "-v" | "--verbose" => opts.verbose = true,
            "--debug-info" => opts.debug_info = true,
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            flag if flag.starts_with('-') => bail!("unknown option `{flag}`\n\n{USAGE}"),
            name => opts.only.push(name.to_string()),
        }
    }
    Ok(opts)
}

fn cargo_metadata(cargo: &OsString, root: &Path) -> Result<Value> {
    let output = Command::new(cargo)
        .current_dir(root)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .stderr(Stdio::inherit())
        .output()
        .context("running `cargo metadata`")?;
    if !output.status.success() {
        bail!("`cargo metadata` failed ({})", output.status);
    }
    serde_json::from_slice(&output.stdout).context("parsing `cargo metadata` output")
}

/// Every guest folder, sorted by name. Folders with neither an
/// `operon.toml` nor a `Cargo.toml` are skipped (e.g. the shared WebApp
/// fixtures).
fn discover(root: &Path, metadata: &Value) -> Result<Vec<Guest>> {
    let packages = metadata["packages"].as_array().context("cargo metadata has no packages")?;
    let mut guests = Vec::new();
    for parent in GUEST_DIRS {
        let parent = root.join(parent);
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for entry in entries {
            let dir = entry?.path();
            if !dir.is_dir() {
                continue;
            }
            if dir.join(project::PROJECT_FILE).is_file() {
                let project = Project::open(&dir)?;
                let member = workspace_member(&dir, packages)?;
                let how = match (project.config.lang, member) {
                    (Lang::Rust, Some(_)) => How::Workspace(RustTarget::Core),
                    _ => How::Project(Box::new(project.clone())),
                };
                guests.push(Guest { name: project.name().to_string(), dir, how });
            } else if dir.join("Cargo.toml").is_file() {
                guests.push(rust_guest(&dir, packages)?);
            }
        }
    }
    guests.sort_by(|a, b| a.name.cmp(&b.name));
    for pair in guests.windows(2) {
        if pair[0].name == pair[1].name {
            bail!("two guests are named `{}`: {} and {}", pair[0].name, pair[0].dir.display(), pair[1].dir.display());
        }
    }
    Ok(guests)
}

/// The workspace package whose manifest is `dir/Cargo.toml`, if any.
fn workspace_member<'a>(dir: &Path, packages: &'a [Value]) -> Result<Option<&'a Value>> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Ok(None);
    }
    let canonical = manifest.canonicalize()?;
    Ok(packages.iter().find(|p| {
        p["manifest_path"].as_str().and_then(|m| Path::new(m).canonicalize().ok()).is_some_and(|m| m == canonical)
    }))
}

/// A Rust test guest: a workspace member, named by its crate.
fn rust_guest(dir: &Path, packages: &[Value]) -> Result<Guest> {
    let package = workspace_member(dir, packages)?.with_context(|| {
        format!(
            "{} is not a workspace member: add it to `members` in the root Cargo.toml (or give it an operon.toml)",
            dir.display()
        )
    })?;
    let name = package["name"].as_str().context("package without a name")?;
    let target = match package["metadata"]["operon"]["target"].as_str() {
        None | Some("wasm32-unknown-unknown") => RustTarget::Core,
        Some("wasm32-wasip2") => RustTarget::Wasip2,
        Some(other) => bail!(
            "{name}: unsupported [package.metadata.operon] target `{other}` \
             (use wasm32-unknown-unknown or wasm32-wasip2)"
        ),
    };
    Ok(Guest { name: name.to_string(), dir: dir.to_path_buf(), how: How::Workspace(target) })
}

/// One `cargo build` for every guest of `target`, then a component per guest.
/// `--keep-going`: a guest that does not compile fails alone. The outer
/// error fails the whole group; the components (or each guest's own error)
/// come back in `guests` order.
fn build_rust(
    cargo: &OsString,
    root: &Path,
    target: RustTarget,
    guests: &[&Guest],
    debug_info: bool,
) -> Result<Vec<Result<Vec<u8>>>> {
    let triple = target.triple();
    ensure_rust_target(triple)?;

    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "--keep-going", "--target", triple])
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for guest in guests {
        let package = if guest.dir.join(project::PROJECT_FILE).is_file() {
            // A Rust project's output is named by operon.toml; its crate by Cargo.toml.
            crate_name(&guest.dir)?
        } else {
            guest.name.clone()
        };
        cmd.args(["-p", &package]);
    }
    // Whole-program optimisation: guests are small, and the serde code they
    // run on every call gets faster when it is inlined across crates.
    cmd.env("CARGO_PROFILE_RELEASE_LTO", "fat").env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    if !debug_info {
        cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "false").env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    }
    let mut child = cmd.spawn().context("running cargo build")?;

    // The cdylib artifact of each guest, keyed by its manifest's folder.
    let mut artifacts: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let is_cdylib = message["target"]["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"));
        let wasm = message["filenames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|f| f.ends_with(".wasm"));
        let dir = message["manifest_path"].as_str().and_then(|m| Path::new(m).parent());
        if let (true, Some(wasm), Some(dir)) = (is_cdylib, wasm, dir) {
            artifacts.insert(dir.canonicalize()?, PathBuf::from(wasm));
        }
    }
    let status = child.wait()?;

    let mut components = Vec::new();
    for guest in guests {
        components.push(match artifacts.get(&guest.dir.canonicalize()?) {
            Some(artifact) => rust_component(&guest.name, target, artifact),
            None if !status.success() => Err(anyhow!(
                "`cargo build --release --target {triple}` of {} failed; see cargo's errors above",
                guest.dir.display()
            )),
            None => Err(anyhow!("cargo produced no .wasm: is it `crate-type = [\"cdylib\"]`?")),
        });
    }
    Ok(components)
}

fn crate_name(dir: &Path) -> Result<String> {
    let path = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: toml::Table = text.parse().with_context(|| format!("parsing {}", path.display()))?;
    manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("{} has no [package] name", path.display()))
}

fn rust_component(name: &str, target: RustTarget, artifact: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(artifact).with_context(|| format!("reading {}", artifact.display()))?;
    match target {
        RustTarget::Core => project::componentize(name, &bytes, None)
            .with_context(|| format!("making a component of {}", artifact.display())),
        RustTarget::Wasip2 => Ok(bytes),
    }
}

/// `rustup target add` when the target is missing (a fresh machine has none).
/// Without rustup, assume the toolchain was set up by other means.
fn ensure_rust_target(triple: &str) -> Result<()> {
    let Ok(installed) =
        Command::new("rustup").args(["target", "list", "--installed"]).stderr(Stdio::inherit()).output()
    else {
        eprintln!("warning: rustup not found; assuming the {triple} target is installed");
        return Ok(());
    };
    if installed.status.success() && String::from_utf8_lossy(&installed.stdout).lines().any(|l| l.trim() == triple) {
        return Ok(());
    }
    let status = Command::new("rustup").args(["target", "add", triple]).status().context("running rustup")?;
    if !status.success() {
        bail!("`rustup target add {triple}` failed ({status})");
    }
    Ok(())
}

/// Validate and describe a written component, in one line.
fn report(guest: &Guest, bytes: &[u8], changed: bool, verbose: bool) -> Result<()> {
    if !wasmparser::Parser::is_component(bytes) {
        bail!("the output is a core module, not a component");
    }
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::default())
        .validate_all(bytes)
        .context("the component does not validate with wasmparser 0.254 (wasmtime 48)")?;
    let (imports, exports) = project::shape(bytes)?;
    if exports.is_empty() {
        bail!(
            "the component exports nothing: does the guest generate its bindings and \
             call `export!`?"
        );
    }
    println!(
        "{:<28} {:>10}  {:<28} {} imports, {} exports{}",
        guest.name,
        human_size(bytes.len()),
        guest.lang(),
        imports.len(),
        exports.len(),
        if changed { "  (updated)" } else { "" }
    );
    if verbose {
        for import in &imports {
            println!("    import {import}");
        }
        for export in &exports {
            println!("    export {export}");
        }
    }
    Ok(())
}

fn human_size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes < 1024 * 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}
