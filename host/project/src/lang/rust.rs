//! Rust guests: a `cdylib` crate using `operon-sdk`, built by cargo for
//! `wasm32-unknown-unknown` and made a component here (no WASI, no adapter).
//!
//! **Scaffold.** `operon new --lang rust` writes a crate that depends on
//! `operon-sdk = "X.Y.Z"` from crates.io. With `--vendor` the SDK is copied
//! in as a path dependency instead (`operon-sdk/`, its sources as they are
//! in this repository, with the WIT package it generates its bindings from
//! in `operon-sdk/wit/`), so the crate builds with cargo and rustup alone,
//! offline. The vendored manifest is the SDK's own, with every `workspace =
//! true` replaced by what this repository's workspace says, and without its
//! dev-dependencies. A dependency on another crate of this workspace (such
//! as `operon-contract`) is vendored the same way beside it.

use crate::scaffold::Scaffold;
use crate::{BuildContext, Error, componentize, run_tool};
use include_dir::{Dir, include_dir};
use std::path::PathBuf;
use std::process::Command;
use toml::{Table, Value};

/// What an author must install.
pub(super) const REQUIREMENTS: &str =
    "Rust through rustup (https://rustup.rs), then `rustup target add wasm32-unknown-unknown`";

const TARGET: &str = "wasm32-unknown-unknown";

pub(super) fn build(cx: &mut BuildContext<'_>) -> Result<Vec<u8>, Error> {
    ensure_target(cx)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&cx.project.dir)
        .args(["build", "--release", "--target", TARGET, "--message-format=json-render-diagnostics"])
        // Whole-program optimisation: guests are small, and the serde code
        // they run on every call gets faster when inlined across crates.
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        // The DWARF of the precompiled std would make every guest ~1.5 MB;
        // function names stay, so trap backtraces stay readable.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    let output = run_tool(cx, &mut cmd, REQUIREMENTS)?;
    let manifest = cx.project.dir.join("Cargo.toml");
    let artifact = cdylib_artifact(&output.stdout, &manifest).ok_or_else(|| Error::Output {
        project: cx.project.name().to_string(),
        reason: format!("cargo built no .wasm for {}: is it `crate-type = [\"cdylib\"]`?", manifest.display()),
    })?;
    let core = std::fs::read(&artifact).map_err(Error::io(&artifact))?;
    componentize(cx.project.name(), &core, None)
}

/// The `.wasm` of the cdylib whose manifest is `manifest`, from cargo's JSON
/// messages.
fn cdylib_artifact(messages: &[u8], manifest: &std::path::Path) -> Option<PathBuf> {
    let wanted = manifest.canonicalize().ok()?;
    String::from_utf8_lossy(messages).lines().find_map(|line| {
        let message: serde_json::Value = serde_json::from_str(line).ok()?;
        if message["reason"] != "compiler-artifact" {
            return None;
        }
        let path = PathBuf::from(message["manifest_path"].as_str()?);
        if path.canonicalize().ok()? != wanted {
            return None;
        }
        let is_cdylib = message["target"]["kind"].as_array()?.iter().any(|k| k == "cdylib");
        let wasm = message["filenames"].as_array()?.iter().filter_map(|f| f.as_str()).find(|f| f.ends_with(".wasm"))?;
        is_cdylib.then(|| PathBuf::from(wasm))
    })
}

/// `rustup target add` when the target is missing (a fresh machine has none).
/// Without rustup, assume the toolchain was set up by other means.
fn ensure_target(cx: &mut BuildContext<'_>) -> Result<(), Error> {
    let Ok(installed) = Command::new("rustup").args(["target", "list", "--installed"]).output() else {
        return Ok(());
    };
    if installed.status.success() && String::from_utf8_lossy(&installed.stdout).lines().any(|l| l.trim() == TARGET) {
        return Ok(());
    }
    run_tool(cx, Command::new("rustup").args(["target", "add", TARGET]), REQUIREMENTS)?;
    Ok(())
}

/// The scaffold's own files (rendered; `*.tmpl` loses its suffix).
static TEMPLATE: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/rust-template");
/// The workspace manifest: what `workspace = true` stands for.
const WORKSPACE_MANIFEST: &str = include_str!("../../../../Cargo.toml");

/// A crate of this workspace that a scaffold vendors: its name, manifest and sources.
struct Vendored {
    name: &'static str,
    manifest: &'static str,
    sources: &'static Dir<'static>,
}

static SDK_SOURCES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/src");
static CONTRACT_SOURCES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../contract/src");

/// Every crate a scaffold may vendor: the SDK, and what it depends on in this workspace.
static VENDORABLE: [Vendored; 2] = [
    Vendored { name: "operon-sdk", manifest: include_str!("../../../../sdk/Cargo.toml"), sources: &SDK_SOURCES },
    Vendored {
        name: "operon-contract",
        manifest: include_str!("../../../../contract/Cargo.toml"),
        sources: &CONTRACT_SOURCES,
    },
];

/// The SDK's version, as its manifest (or the workspace's) says.
pub(crate) fn sdk_version() -> String {
    let manifest: Option<Table> = VENDORABLE[0].manifest.parse().ok();
    let workspace: Option<Table> = WORKSPACE_MANIFEST.parse().ok();
    let version = manifest.as_ref().and_then(|m| m.get("package")?.get("version").cloned());
    match version {
        Some(Value::String(v)) => v,
        _ => workspace
            .and_then(|w| w.get("workspace")?.get("package")?.get("version")?.as_str().map(str::to_owned))
            .unwrap_or_default(),
    }
}

pub(super) fn scaffold(s: &mut Scaffold<'_>) -> Result<(), Error> {
    let version = crate::sdk::VERSION;
    if s.vendor {
        s.set(
            "sdk_comment",
            "# The Operon Rust SDK, vendored by `operon new --vendor` (with the WIT\n\
             # contract it is generated from in operon-sdk/wit/): the project builds\n\
             # offline with cargo alone. `operon new` without --vendor names the\n\
             # crates.io package instead.",
        );
        s.set("sdk", "{ path = \"operon-sdk\" }");
        s.set("sdk_fixtures", "{ path = \"operon-sdk\", features = [\"fixtures\"] }");
        s.set(
            "sdk_note",
            "`operon-sdk/` is the Operon Rust SDK, vendored with the WIT contract it is\n\
             generated from (`operon-sdk/wit/`), so the project builds with cargo and\n\
             rustup alone, offline.",
        );
    } else {
        s.set(
            "sdk_comment",
            format!("# The Operon Rust SDK from crates.io ({version}; its minor is the WIT contract's)."),
        );
        s.set("sdk", format!("\"{version}\""));
        s.set("sdk_fixtures", format!("{{ version = \"{version}\", features = [\"fixtures\"] }}"));
        s.set(
            "sdk_note",
            format!(
                "The Operon Rust SDK is the crate `operon-sdk` {version} from crates.io\n\
                 (`cargo update -p operon-sdk` takes its patch releases); `operon new --vendor`\n\
                 copies it into the project instead."
            ),
        );
    }
    write_template(s, &TEMPLATE)?;
    if !s.vendor {
        return Ok(());
    }
    s.write_bytes("operon-sdk/wit/reconciler.wit", crate::WIT.as_bytes())?;
    let workspace: Table =
        WORKSPACE_MANIFEST.parse().map_err(|e| broken(s, &format!("the workspace manifest: {e}")))?;
    let mut pending = vec!["operon-sdk"];
    let mut done: Vec<&str> = Vec::new();
    while let Some(name) = pending.pop() {
        if done.contains(&name) {
            continue;
        }
        done.push(name);
        let krate = VENDORABLE.iter().find(|v| v.name == name).ok_or_else(|| {
            broken(s, &format!("operon-sdk depends on the workspace crate {name}, which operon does not carry"))
        })?;
        let manifest: Table = krate.manifest.parse().map_err(|e| broken(s, &format!("{name}'s manifest: {e}")))?;
        let (manifest, siblings) = standalone(manifest, &workspace).map_err(|e| broken(s, &format!("{name}: {e}")))?;
        s.write_bytes(&format!("{name}/Cargo.toml"), to_toml(&manifest).as_bytes())?;
        write_sources(s, krate.sources, &format!("{name}/src"))?;
        pending.extend(siblings.iter().filter_map(|n| VENDORABLE.iter().find(|v| v.name == n).map(|v| v.name)));
        if let Some(unknown) = siblings.iter().find(|n| !VENDORABLE.iter().any(|v| v.name == n.as_str())) {
            return Err(broken(
                s,
                &format!("{name} depends on the workspace crate {unknown}, which operon does not carry"),
            ));
        }
    }
    Ok(())
}

fn broken(s: &Scaffold<'_>, what: &str) -> Error {
    Error::Project { path: s.dir.to_path_buf(), reason: format!("this operon cannot vendor the Rust SDK: {what}") }
}

fn write_template(s: &Scaffold<'_>, dir: &Dir<'_>) -> Result<(), Error> {
    for file in dir.files() {
        let rel = file.path().to_string_lossy().into_owned();
        let rel = rel.strip_suffix(".tmpl").unwrap_or(&rel);
        // Stored without the dot, so it does not apply inside this repository.
        let rel = if rel == "gitignore" { ".gitignore" } else { rel };
        match file.contents_utf8() {
            Some(text) => s.write(rel, text)?,
            None => s.write_bytes(rel, file.contents())?,
        }
    }
    for sub in dir.dirs() {
        write_template(s, sub)?;
    }
    Ok(())
}

fn write_sources(s: &Scaffold<'_>, dir: &Dir<'_>, dest: &str) -> Result<(), Error> {
    for file in dir.files() {
        s.write_bytes(&format!("{dest}/{}", file.path().to_string_lossy()), file.contents())?;
    }
    for sub in dir.dirs() {
        write_sources(s, sub, dest)?;
    }
    Ok(())
}

/// A workspace member's manifest made standalone: `workspace = true` fields
/// and dependencies resolved from the workspace manifest, dev-dependencies
/// dropped (they are the crate's own tests), and dependencies on other
/// workspace crates pointed at `../<name>`. Returns the manifest and the
/// names of those workspace crates (to vendor beside it).
fn standalone(mut manifest: Table, workspace: &Table) -> Result<(Table, Vec<String>), String> {
    let ws = workspace.get("workspace").and_then(Value::as_table).ok_or("no [workspace] table")?;
    let empty = Table::new();
    let ws_package = ws.get("package").and_then(Value::as_table).unwrap_or(&empty);
    let ws_deps = ws.get("dependencies").and_then(Value::as_table).unwrap_or(&empty);
    let inherits = |v: &Value| v.get("workspace").and_then(Value::as_bool) == Some(true);

    if let Some(package) = manifest.get_mut("package").and_then(Value::as_table_mut) {
        for (key, value) in package.iter_mut() {
            if inherits(value) {
                *value = ws_package.get(key).cloned().ok_or(format!("package.{key} is not in [workspace.package]"))?;
            }
        }
    }
    if manifest.get("lints").is_some_and(inherits) {
        let lints = ws.get("lints").cloned().ok_or("[lints] workspace = true, but no [workspace.lints]")?;
        manifest.insert("lints".into(), lints);
    }
    manifest.remove("dev-dependencies");
    let mut siblings = Vec::new();
    for section in ["dependencies", "build-dependencies"] {
        let Some(deps) = manifest.get_mut(section).and_then(Value::as_table_mut) else { continue };
        for (name, spec) in deps.iter_mut() {
            if !inherits(spec) {
                continue;
            }
            let mut resolved = match ws_deps.get(name) {
                Some(Value::String(version)) => Table::from_iter([("version".to_string(), version.clone().into())]),
                Some(Value::Table(t)) => t.clone(),
                _ => return Err(format!("{section}.{name} is not in [workspace.dependencies]")),
            };
            if resolved.contains_key("path") {
                resolved.insert("path".into(), format!("../{name}").into());
                siblings.push(name.clone());
            }
            for (key, value) in spec.as_table().into_iter().flatten() {
                match (key.as_str(), resolved.get_mut("features"), value) {
                    ("workspace", ..) => {}
                    ("features", Some(Value::Array(base)), Value::Array(more)) => base.extend(more.iter().cloned()),
                    _ => {
                        resolved.insert(key.clone(), value.clone());
                    }
                }
            }
            *spec = Value::Table(resolved);
        }
    }
    Ok((manifest, siblings))
}

/// TOML text of a manifest: top-level tables as `[sections]`, everything
/// below them inline (valid TOML, and what Cargo.toml files look like).
fn to_toml(manifest: &Table) -> String {
    let mut out = String::from("# Vendored by `operon new` from the Operon repository; regenerate rather than edit.\n");
    let (mut sections, plain): (Vec<_>, Vec<_>) = manifest.iter().partition(|(_, v)| v.is_table());
    let order = ["package", "lib", "features", "dependencies", "build-dependencies"];
    sections.sort_by_key(|(name, _)| order.iter().position(|o| o == name).unwrap_or(order.len()));
    for (key, value) in plain {
        out.push_str(&format!("{} = {}\n", toml_key(key), inline(value)));
    }
    for (name, table) in sections {
        out.push_str(&format!("\n[{}]\n", toml_key(name)));
        for (key, value) in table.as_table().into_iter().flatten() {
            out.push_str(&format!("{} = {}\n", toml_key(key), inline(value)));
        }
    }
    out
}

fn toml_key(key: &str) -> String {
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        key.to_string()
    } else {
        serde_json::to_string(key).unwrap_or_default()
    }
}

/// A TOML value inline. JSON's string escapes are valid TOML basic strings.
fn inline(value: &Value) -> String {
    match value {
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(inline).collect::<Vec<_>>().join(", ")),
        Value::Table(t) => {
            let fields: Vec<String> = t.iter().map(|(k, v)| format!("{} = {}", toml_key(k), inline(v))).collect();
            format!("{{ {} }}", fields.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_sdk_manifest_should_inherit_nothing_from_a_workspace() {
        let workspace: Table = WORKSPACE_MANIFEST.parse().unwrap();
        let sdk: Table = VENDORABLE[0].manifest.parse().unwrap();
        let (manifest, siblings) = standalone(sdk, &workspace).unwrap();
        let text = to_toml(&manifest);
        assert!(!text.contains("workspace"), "{text}");
        assert!(!text.contains("dev-dependencies"), "{text}");
        let reparsed: Table = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(reparsed, manifest);
        assert_eq!(reparsed["package"]["name"].as_str(), Some("operon-sdk"));
        assert!(reparsed["dependencies"]["wit-bindgen"]["version"].is_str(), "{text}");
        for sibling in siblings {
            assert_eq!(reparsed["dependencies"][&sibling]["path"].as_str(), Some(format!("../{sibling}").as_str()));
        }
    }

    #[test]
    fn inherited_dependencies_should_keep_their_own_features_and_flags() {
        let workspace: Table = r#"
            [workspace.package]
            edition = "2024"
            [workspace.dependencies]
            serde = { version = "1", features = ["derive"] }
            anyhow = "1"
            local = { path = "local" }
        "#
        .parse()
        .unwrap();
        let manifest: Table = r#"
            [package]
            name = "x"
            edition.workspace = true
            [dependencies]
            serde = { workspace = true, features = ["rc"], optional = true }
            anyhow.workspace = true
            local.workspace = true
            [dev-dependencies]
            tempfile = "3"
        "#
        .parse()
        .unwrap();
        let (m, siblings) = standalone(manifest, &workspace).unwrap();
        assert_eq!(m["package"]["edition"].as_str(), Some("2024"));
        assert_eq!(
            inline(&m["dependencies"]["serde"]),
            r#"{ features = ["derive", "rc"], optional = true, version = "1" }"#
        );
        assert_eq!(inline(&m["dependencies"]["anyhow"]), r#"{ version = "1" }"#);
        assert_eq!(m["dependencies"]["local"]["path"].as_str(), Some("../local"));
        assert_eq!(siblings, ["local"]);
        assert!(m.get("dev-dependencies").is_none());
    }
}
