//! `cargo xtask guests [-v] [--debug-info] [NAME…]`: build every guest into
//! `target/guests/<name>.wasm`, as a WebAssembly component.
//!
//! Guests are the folders under `guest-examples/` and `host/tests/guests/`.
//! A folder's language is told by its marker file (`Cargo.toml`, `go.mod`,
//! ...); a Rust guest must be a workspace member, its output name is its crate
//! name, and it may pick its target in its manifest:
//!
//! ```toml
//! [package.metadata.operon]
//! target = "wasm32-wasip2"   # default: "wasm32-unknown-unknown"
//! ```
//!
//! - `wasm32-unknown-unknown`: one `cargo build` for all such guests, then
//!   each core module becomes a component in-process with `wit-component`
//!   (same 0.254 family as wasmtime 48's parser).
//! - `wasm32-wasip2`: rustc links a component itself (wasm-component-ld);
//!   it is validated and copied.
//!
//! Every output is validated with wasmparser 0.254 and must export something.
//! A language is one `build_*` function from guests to component bytes; Go,
//! Python and JavaScript are recognised but not built yet.
//!
//! Guests are built with `CARGO_PROFILE_RELEASE_STRIP=debuginfo`: the DWARF of
//! the precompiled std would otherwise make every guest about 1.5 MB instead
//! of tens of KB (too big for a ConfigMap). Function names are kept, so trap
//! backtraces stay readable. `--debug-info` keeps the workspace profile as is.

use anyhow::{Context, Result, anyhow, bail};
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
  -v, --verbose   list each component's imports and exports
  --debug-info    keep DWARF in Rust guests (the workspace release profile as is)
";

/// How a guest is turned into a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Lang {
    Rust(RustTarget),
    /// `GOOS=wasip1` + `wit-bindgen go` + the reactor adapter from crate
    /// `wasi-preview1-component-adapter-provider` (see [`componentize`]).
    Go,
    /// componentize-py.
    Python,
    /// componentize-js.
    JavaScript,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum RustTarget {
    /// A core module, made into a component here.
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

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lang::Rust(target) => write!(f, "rust {}", target.triple()),
            Lang::Go => f.write_str("go"),
            Lang::Python => f.write_str("python"),
            Lang::JavaScript => f.write_str("javascript"),
        }
    }
}

#[derive(Debug)]
struct Guest {
    /// Output name: `target/guests/<name>.wasm`.
    name: String,
    dir: PathBuf,
    lang: Lang,
}

struct Options {
    verbose: bool,
    debug_info: bool,
    only: Vec<String>,
}

/// Shared by the language builders.
struct Ctx {
    root: PathBuf,
    cargo: OsString,
    debug_info: bool,
}

pub fn run(args: &[&str]) -> Result<()> {
    let opts = parse_args(args)?;
    let started = Instant::now();
    let root = crate::root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let metadata = cargo_metadata(&cargo, &root)?;
    let out_dir =
        PathBuf::from(metadata["target_directory"].as_str().context("cargo metadata has no target_directory")?)
            .join("guests");

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

    let ctx = Ctx { root, cargo, debug_info: opts.debug_info };
    let mut groups: BTreeMap<Lang, Vec<&Guest>> = BTreeMap::new();
    for guest in &guests {
        groups.entry(guest.lang).or_default().push(guest);
    }

    let mut failures: Vec<String> = Vec::new();
    let (mut built, mut failed) = (0, 0);
    for (lang, members) in groups {
        let components = match build_group(&ctx, lang, &members) {
            Ok(components) => components,
            Err(e) => {
                let names: Vec<&str> = members.iter().map(|g| g.name.as_str()).collect();
                failures.push(format!("{} ({lang}): {e:#}", names.join(", ")));
                failed += members.len();
                continue;
            }
        };
        for (guest, component) in members.iter().zip(components) {
            match component.and_then(|bytes| finish(guest, &bytes, &out_dir, opts.verbose)) {
                Ok(()) => built += 1,
                Err(e) => {
                    failures.push(format!("{}: {e:#}", guest.name));
                    failed += 1;
                }
            }
        }
    }

    if !failures.is_empty() {
        bail!("{failed} of {} guests failed:\n  {}", guests.len(), failures.join("\n  "));
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

/// Every guest folder, sorted by name. Folders without a marker file are
/// skipped (they are not guests).
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
            let dir_name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
            if dir.join("Cargo.toml").is_file() {
                guests.push(rust_guest(&dir, packages)?);
            } else {
                let lang = if dir.join("go.mod").is_file() {
                    Lang::Go
                } else if dir.join("pyproject.toml").is_file() || dir.join("app.py").is_file() {
                    Lang::Python
                } else if dir.join("package.json").is_file() {
                    Lang::JavaScript
                } else {
                    continue;
                };
                guests.push(Guest { name: dir_name, dir, lang });
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

fn rust_guest(dir: &Path, packages: &[Value]) -> Result<Guest> {
    let manifest = dir.join("Cargo.toml");
    let canonical = manifest.canonicalize()?;
    let package = packages
        .iter()
        .find(|p| {
            p["manifest_path"].as_str().and_then(|m| Path::new(m).canonicalize().ok()).is_some_and(|m| m == canonical)
        })
        .with_context(|| {
            format!("{} is not a workspace member: add it to `members` in the root Cargo.toml", dir.display())
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
    Ok(Guest { name: name.to_string(), dir: dir.to_path_buf(), lang: Lang::Rust(target) })
}

/// Build one language group. The outer error fails the whole group; the
/// components (or each guest's own error) come back in `guests` order.
fn build_group(ctx: &Ctx, lang: Lang, guests: &[&Guest]) -> Result<Vec<Result<Vec<u8>>>> {
    match lang {
        Lang::Rust(target) => build_rust(ctx, target, guests),
        Lang::Go | Lang::Python | Lang::JavaScript => {
            bail!("building {lang} guests is not supported by `cargo xtask guests` yet")
        }
    }
}

/// One `cargo build` for every guest of `target`, then a component per guest.
/// `--keep-going`: a guest that does not compile fails alone.
fn build_rust(ctx: &Ctx, target: RustTarget, guests: &[&Guest]) -> Result<Vec<Result<Vec<u8>>>> {
    let triple = target.triple();
    ensure_rust_target(triple)?;

    let mut cmd = Command::new(&ctx.cargo);
    cmd.current_dir(&ctx.root)
        .args(["build", "--release", "--keep-going", "--target", triple])
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for guest in guests {
        cmd.args(["-p", &guest.name]);
    }
    // Whole-program optimisation: guests are small, and the serde code they
    // run on every call gets faster when it is inlined across crates.
    cmd.env("CARGO_PROFILE_RELEASE_LTO", "fat").env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    if !ctx.debug_info {
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
            Some(artifact) => rust_component(target, artifact),
            None if !status.success() => Err(anyhow!(
                "`cargo build --release --target {triple} -p {}` failed; see cargo's errors above",
                guest.name
            )),
            None => Err(anyhow!("cargo produced no .wasm: is it `crate-type = [\"cdylib\"]`?")),
        });
    }
    Ok(components)
}

fn rust_component(target: RustTarget, artifact: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(artifact).with_context(|| format!("reading {}", artifact.display()))?;
    match target {
        RustTarget::Core => {
            componentize(&bytes, None).with_context(|| format!("making a component of {}", artifact.display()))
        }
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

/// Turn a core module carrying `component-type` custom sections (from
/// wit-bindgen and friends) into a component. `adapter` is a WASI preview 1
/// adapter (name, bytes) for modules that import `wasi_snapshot_preview1`,
/// e.g. Go's: `("wasi_snapshot_preview1", wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)`.
fn componentize(core: &[u8], adapter: Option<(&str, &[u8])>) -> Result<Vec<u8>> {
    let mut encoder = wit_component::ComponentEncoder::default().validate(true).module(core)?;
    if let Some((name, bytes)) = adapter {
        encoder = encoder.adapter(name, bytes)?;
    }
    encoder.encode()
}

/// Imports and exports of a component, as `namespace:package/interface@version`.
struct Shape {
    imports: Vec<String>,
    exports: Vec<String>,
}

/// Validate, describe, write (only when changed) and print one line.
fn finish(guest: &Guest, bytes: &[u8], out_dir: &Path, verbose: bool) -> Result<()> {
    if !wasmparser::Parser::is_component(bytes) {
        bail!("the output is a core module, not a component");
    }
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::default())
        .validate_all(bytes)
        .context("the component does not validate with wasmparser 0.254 (wasmtime 48)")?;
    let shape = shape(bytes)?;
    if shape.exports.is_empty() {
        bail!(
            "the component exports nothing: does the guest generate its bindings and \
             call `export!`?"
        );
    }

    let out = out_dir.join(format!("{}.wasm", guest.name));
    let unchanged = std::fs::read(&out).is_ok_and(|old| old == bytes);
    if !unchanged {
        let tmp = out_dir.join(format!("{}.wasm.tmp", guest.name));
        std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &out).with_context(|| format!("writing {}", out.display()))?;
    }
    println!(
        "{:<28} {:>10}  {:<28} {} imports, {} exports{}",
        guest.name,
        human_size(bytes.len()),
        guest.lang.to_string(),
        shape.imports.len(),
        shape.exports.len(),
        if unchanged { "" } else { "  (updated)" }
    );
    if verbose {
        for import in &shape.imports {
            println!("    import {import}");
        }
        for export in &shape.exports {
            println!("    export {export}");
        }
    }
    Ok(())
}

fn shape(component: &[u8]) -> Result<Shape> {
    let wit_component::DecodedWasm::Component(resolve, world) =
        wit_component::decode(component).context("decoding the component's WIT")?
    else {
        bail!("the output decodes as a WIT package, not a component");
    };
    let world = &resolve.worlds[world];
    let names = |items: &wit_parser::IndexMap<wit_parser::WorldKey, wit_parser::WorldItem>| {
        items
            .iter()
            .filter(|(_, item)| !matches!(item, wit_parser::WorldItem::Type { .. }))
            .map(|(key, _)| resolve.name_world_key(key))
            .collect::<Vec<_>>()
    };
    Ok(Shape { imports: names(&world.imports), exports: names(&world.exports) })
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
