//! TypeScript guests: a reconciler using `@operon/sdk` (`sdk/typescript`),
//! type-checked by `tsc`, bundled by esbuild and made a component by
//! componentize-js.
//!
//! The project is an npm package. Its tools are pinned devDependencies
//! (`typescript`, `esbuild`, `@bytecodealliance/componentize-js`), run from
//! its own `node_modules`, so every author and CI build with the same
//! versions and nothing is installed globally. `operon build` runs `npm
//! install` when `node_modules` is missing or older than `package.json`, as
//! cargo fetches crates: a fresh clone or a new scaffold builds with one
//! command. The SDK is a `file:` dependency (`file:./operon-sdk` in a new
//! project, its TypeScript sources vendored by `operon new`, so npm never
//! asks a registry for `@operon/sdk`, which is not published;
//! `file:../../sdk/typescript` in this repository), or the npm package
//! `@operon/sdk` (`^X.Y.Z` with `operon new --sdk registry`, for a registry
//! that serves it; its JavaScript and declarations are built by `tsc`). The
//! build refuses an installed SDK that speaks another contract. A project
//! whose `operon.toml` names the SDK (`sdk = ...`, the repository's examples)
//! is bundled from the SDK's sources: esbuild gets the `source` export
//! condition.
//! `@bytecodealliance/preview2-shim` is listed as well: componentize-js 0.23
//! imports it when it runs but declares it only among its own
//! devDependencies, so an install from a lockfile would leave it out.
//!
//! `package.json` names the module whose default export is the reconciler
//! (`"operon": {"reconciler": "src/index.ts"}`, the default). The build:
//!
//! 1. `tsc --noEmit`: type errors fail the build (esbuild would strip types
//!    without checking them); then, when the project has `src/crd.ts` (the
//!    scaffold does), it runs with tsx and its CRD, written by the SDK's
//!    `s.crd` from the parent's schemas, becomes `crd.yaml`;
//! 2. writes `.operon/build/entry.ts`, which binds the reconciler to the
//!    SDK's adapter (the only module importing `operon:reconciler/host`):
//!    `guest`, and `admission` and `conversion` when the world exports them;
//! 3. `esbuild --bundle`: componentize-js takes a single ES module, and a
//!    bundle lets authors use npm packages (pure JavaScript ones);
//! 4. `componentize-js` with the `http` and `fetch-event` features
//!    disabled: the host grants no network, so the component should not
//!    import it. It keeps WASI stdio (`console.log` and uncaught errors reach
//!    the host's log), clocks and random, which the host's empty WASI context
//!    provides. Never `--aot`: it downloads weval at build time.

use crate::scaffold::Scaffold;
use crate::{BuildContext, Error, World, run_tool, write_if_changed};
use include_dir::{Dir, include_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What an author must install.
pub(super) const REQUIREMENTS: &str = "Node.js 20 or newer with npm (Debian: `apt-get install nodejs npm`); \
    `operon build` then installs the project's pinned tools (typescript, esbuild, \
    @bytecodealliance/componentize-js) into its node_modules with `npm install`";

/// The scaffold's own files (rendered).
static TEMPLATE: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/typescript/template");
/// The SDK's sources, vendored into every new project as `operon-sdk/`.
static SDK_SOURCES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/typescript/src");
/// The SDK's package.json (the package's name and exports).
const SDK_PACKAGE: &str = include_str!("../../../../sdk/typescript/package.json");

/// The tools the project's package.json must provide, and the package each comes from.
const TOOLS: [(&str, &str); 3] =
    [("tsc", "typescript"), ("esbuild", "esbuild"), ("componentize-js", "@bytecodealliance/componentize-js")];

pub(super) fn build(cx: &mut BuildContext<'_>) -> Result<Vec<u8>, Error> {
    let project = cx.project;
    let dir = project.dir.clone();
    let main = reconciler_module(&dir)?;
    npm_install_if_needed(cx)?;
    let bin = dir.join("node_modules").join(".bin");
    for (tool, package) in TOOLS {
        if !bin.join(tool).exists() {
            return Err(Error::Project {
                path: dir.join("package.json"),
                reason: format!(
                    "node_modules/.bin/{tool} is missing after `npm install`: add the devDependency \
                     `{package}` (`npm install --save-dev --save-exact {package}`)"
                ),
            });
        }
    }
    installed_sdk(&dir)?;

    if dir.join("tsconfig.json").is_file() {
        let mut tsc = Command::new(bin.join("tsc"));
        tsc.current_dir(&dir).args(["--noEmit", "--pretty", "false", "-p", "."]);
        run_tool(cx, &mut tsc, REQUIREMENTS)?;
    }

    generate_crd(cx, &bin)?;

    let world = project.config.world;
    let entry = cx.work_dir.join("entry.ts");
    write_if_changed(&entry, entry_module(&relative_import(&cx.work_dir, &main), world).as_bytes())?;
    let bundle = cx.work_dir.join("component.js");
    let mut esbuild = Command::new(bin.join("esbuild"));
    esbuild
        .current_dir(&dir)
        .arg(&entry)
        .args([
            "--bundle",
            "--format=esm",
            "--platform=neutral",
            "--target=es2022",
            "--main-fields=module,main",
            "--external:operon:*",
            "--log-level=warning",
            "--sourcemap=external",
        ])
        .arg(format!("--outfile={}", bundle.display()));
    if project.sdk().is_some() {
        esbuild.arg("--conditions=source");
    }
    run_tool(cx, &mut esbuild, REQUIREMENTS)?;
    // The SDK maps the stacks it reports with it (`sourcemap.ts`): frames
    // name `src/index.ts:LINE:COLUMN`, not the bundle's lines.
    let map_path = cx.work_dir.join("component.js.map");
    let map = std::fs::read_to_string(&map_path).map_err(Error::io(&map_path))?;
    let mut code = std::fs::read_to_string(&bundle).map_err(Error::io(&bundle))?;
    code.push_str(&embedded_map(&map, &cx.work_dir, &dir));
    std::fs::write(&bundle, code).map_err(Error::io(&bundle))?;

    let output = cx.work_dir.join(format!("{}.wasm", project.name()));
    let mut componentize = Command::new(bin.join("componentize-js"));
    // componentize-js maps its working directory into the component (for
    // file names in stack traces): keep it to the build directory.
    componentize
        .current_dir(&cx.work_dir)
        .arg("component.js")
        .arg("--wit")
        .arg(&cx.wit_dir)
        .args(["--world-name", project.config.world.name(), "--disable", "http", "fetch-event", "--out"])
        .arg(&output);
    run_tool(cx, &mut componentize, REQUIREMENTS)?;
    std::fs::read(&output).map_err(Error::io(&output))
}

/// The statement appended to the bundle that hands esbuild's source map
/// (`map`, written beside the bundle in `work_dir`) to the SDK: its sources
/// made relative to the project (`src/index.ts`), its mappings as they are,
/// no source text. Appended after the last line, it moves no mapped position.
fn embedded_map(map: &str, work_dir: &Path, project: &Path) -> String {
    let map: serde_json::Value = serde_json::from_str(map).unwrap_or_default();
    let sources: Vec<String> = map["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str())
        .map(|source| {
            let mut path: Vec<&str> = work_dir
                .strip_prefix(project)
                .map(|rel| rel.iter().filter_map(|c| c.to_str()).collect())
                .unwrap_or_default();
            for part in source.split('/') {
                match part {
                    ".." if path.last().is_some_and(|p| *p != "..") => {
                        path.pop();
                    }
                    "." | "" => {}
                    other => path.push(other),
                }
            }
            path.join("/")
        })
        .collect();
    let embedded = serde_json::json!({"sources": sources, "mappings": map["mappings"].as_str().unwrap_or_default()});
    format!("\nglobalThis.__operonSourceMap = {embedded};\n")
}

/// The module that prints the project's CRD from its schemas, when it has
/// one (the scaffold's: `s.crd` of the SDK over the parent's schemas).
const CRDGEN: &str = "src/crd.ts";

/// When the project has [`CRDGEN`], run it (tsx, natively) and write its
/// CRD to `crd.yaml`: the schemas the reconciler reads its parent with are
/// the CRD's.
fn generate_crd(cx: &mut BuildContext<'_>, bin: &Path) -> Result<(), Error> {
    let dir = cx.project.dir.clone();
    if !dir.join(CRDGEN).is_file() {
        return Ok(());
    }
    (cx.progress)("generating crd.yaml from the TypeScript schemas (src/crd.ts)");
    let tsx = bin.join("tsx");
    if !tsx.exists() {
        return Err(Error::Project {
            path: dir.join("package.json"),
            reason: format!(
                "{CRDGEN} prints the CRD and runs with tsx, which node_modules/.bin lacks: add the devDependency \
                 `tsx` (`npm install --save-dev --save-exact tsx`)"
            ),
        });
    }
    let mut run = Command::new("node");
    run.current_dir(&dir);
    if cx.project.sdk().is_some() {
        run.arg("--conditions=source");
    }
    run.args(["--import", "tsx", CRDGEN]);
    let output = run_tool(cx, &mut run, REQUIREMENTS)?;
    let crd: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| Error::Project {
        path: dir.join(CRDGEN),
        reason: format!("it must print the CRD as JSON (`console.log(JSON.stringify(s.crd({{...}})))`): {e}"),
    })?;
    if crd["kind"] != "CustomResourceDefinition" {
        return Err(Error::Project { path: dir.join(CRDGEN), reason: "it printed something else than a CRD".into() });
    }
    let text = format!(
        "# Generated by `operon build` from the TypeScript schemas (the parent's, in src/index.ts, printed by\n\
         # {CRDGEN} with the SDK's s.crd): change the schemas, not this file.\n{}",
        operon_contract::fixture::to_yaml(&crd)
    );
    crate::write_if_changed(&dir.join("crd.yaml"), text.as_bytes())?;
    Ok(())
}

/// The module componentize-js starts from: the adapter's exports, bound to
/// the project's reconciler (the interfaces `world` exports).
fn entry_module(main: &str, world: World) -> String {
    let mut text = String::from("// Written by `operon build`: the component's exports, bound to the reconciler.\n");
    text.push_str(&format!("import reconciler from {main:?};\n"));
    text.push_str("import { admissionExports, conversionExports, guestExports } from \"@operon/sdk/component\";\n\n");
    text.push_str("export const guest = guestExports(reconciler);\n");
    if world.admission() {
        text.push_str("export const admission = admissionExports(reconciler);\n");
    }
    if world.conversion() {
        text.push_str("export const conversion = conversionExports(reconciler);\n");
    }
    text
}

/// The SDK `npm install` put in `node_modules/@operon/sdk` must be there and
/// speak this operon's contract.
fn installed_sdk(dir: &Path) -> Result<(), Error> {
    let manifest = dir.join("node_modules").join("@operon").join("sdk").join("package.json");
    let text = std::fs::read_to_string(&manifest).map_err(|_| Error::Project {
        path: dir.join("package.json"),
        reason: format!(
            "node_modules/@operon/sdk is missing: add the SDK as a dependency, \
             `\"@operon/sdk\": \"file:./operon-sdk\"` with the SDK's sources vendored there (what \
             `operon new` writes), or `npm install @operon/sdk@^{}` from a registry that serves it",
            crate::sdk::VERSION
        ),
    })?;
    let version = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|p| p["version"].as_str().map(str::to_owned))
        .unwrap_or_default();
    if !crate::sdk::speaks_contract(&version) {
        return Err(crate::sdk::contract_mismatch(crate::Lang::TypeScript, &version, dir.join("package.json")));
    }
    Ok(())
}

/// `target` as an import specifier relative to `from` (`../../src/index.ts`).
fn relative_import(from: &Path, target: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = target.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); from.len() - common];
    parts.extend(to[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    let path = parts.join("/");
    if path.starts_with("..") { path } else { format!("./{path}") }
}

/// The module `package.json` names (`"operon": {"reconciler": ...}`), or `src/index.ts`.
fn reconciler_module(dir: &Path) -> Result<PathBuf, Error> {
    let path = dir.join("package.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::Project {
        path: path.clone(),
        reason: format!(
            "cannot read it ({e}): a TypeScript guest is an npm package; `operon new --lang ts` writes one"
        ),
    })?;
    let package: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::Project { path: path.clone(), reason: format!("invalid JSON: {e}") })?;
    let main = package.pointer("/operon/reconciler").and_then(|v| v.as_str()).unwrap_or("src/index.ts");
    let file = dir.join(main);
    if !file.is_file() {
        return Err(Error::Project {
            path,
            reason: format!(
                "the reconciler module {main} does not exist; write it (its default export is the \
                 reconciler) or name another one with \"operon\": {{\"reconciler\": \"src/main.ts\"}}"
            ),
        });
    }
    Ok(file)
}

/// `npm install` when `node_modules` is missing or older than `package.json`.
fn npm_install_if_needed(cx: &mut BuildContext<'_>) -> Result<(), Error> {
    let dir = &cx.project.dir;
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let installed = modified(&dir.join("node_modules").join(".package-lock.json"));
    let fresh = match (installed, modified(&dir.join("package.json"))) {
        (Some(installed), Some(manifest)) => installed >= manifest,
        _ => false,
    };
    if fresh {
        return Ok(());
    }
    let mut npm = Command::new("npm");
    npm.current_dir(dir).args(["install", "--no-audit", "--no-fund", "--loglevel=error"]);
    run_tool(cx, &mut npm, REQUIREMENTS)?;
    Ok(())
}

/// The SDK package's version.
pub(crate) fn sdk_version() -> String {
    serde_json::from_str::<serde_json::Value>(SDK_PACKAGE)
        .ok()
        .and_then(|p| p["version"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

pub(super) fn scaffold(s: &mut Scaffold<'_>) -> Result<(), Error> {
    let version = crate::sdk::VERSION;
    if s.vendor {
        s.set("sdk", "file:./operon-sdk");
        s.set(
            "sdk_note",
            "`operon-sdk/` is the Operon TypeScript SDK's sources, vendored by `operon new`\n\
             so the project builds without an npm package: `@operon/sdk` is not published\n\
             on npm yet.",
        );
    } else {
        s.set("sdk", format!("^{version}"));
        s.set(
            "sdk_note",
            format!(
                "The Operon TypeScript SDK is the package `@operon/sdk` (`^{version}`), from a\n\
                 registry that serves it (it is not published on npm yet); `operon new` without\n\
                 `--sdk registry` copies its sources into the project instead."
            ),
        );
    }
    s.write_dir(&TEMPLATE, "", true)?;
    if !s.vendor {
        return Ok(());
    }
    s.write_bytes("operon-sdk/package.json", vendored_package().as_bytes())?;
    for file in SDK_SOURCES.files() {
        let name = file.path().file_name().unwrap_or_default().to_string_lossy();
        s.write_bytes(&format!("operon-sdk/src/{name}"), file.contents())?;
    }
    Ok(())
}

/// The SDK's package.json for a vendored copy: its sources are the package
/// (each export's `source` target), with no build step and no tools.
fn vendored_package() -> String {
    let mut package: serde_json::Value = serde_json::from_str(SDK_PACKAGE).unwrap_or_default();
    if let Some(exports) = package["exports"].as_object_mut() {
        for target in exports.values_mut() {
            if let Some(source) = target.get("source").cloned() {
                *target = source;
            }
        }
    }
    if let Some(fields) = package.as_object_mut() {
        for key in ["scripts", "devDependencies", "files"] {
            fields.remove(key);
        }
    }
    serde_json::to_string_pretty(&package).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_module_should_export_what_the_world_exports() {
        let plain = entry_module("../../src/index.ts", World::Reconciler);
        assert!(plain.contains("import reconciler from \"../../src/index.ts\";"), "{plain}");
        assert!(plain.contains("export const guest = guestExports(reconciler);"));
        assert!(!plain.contains("export const admission") && !plain.contains("export const conversion"));
        let admission = "export const admission = admissionExports(reconciler);";
        let conversion = "export const conversion = conversionExports(reconciler);";
        let only_admission = entry_module("./x.ts", World::ReconcilerWithAdmission);
        assert!(only_admission.contains(admission) && !only_admission.contains(conversion), "{only_admission}");
        let only_conversion = entry_module("./x.ts", World::ReconcilerWithConversion);
        assert!(!only_conversion.contains(admission) && only_conversion.contains(conversion), "{only_conversion}");
        let both = entry_module("./x.ts", World::ReconcilerWithAdmissionAndConversion);
        assert!(both.contains(admission) && both.contains(conversion), "{both}");
    }

    #[test]
    fn the_embedded_map_should_name_sources_relative_to_the_project() {
        let map = r#"{"version":3,"sources":["../../src/index.ts","../../operon-sdk/src/component.ts","../../../../sdk/typescript/src/run.ts"],"mappings":"AAAA;AACA"}"#;
        let line = embedded_map(map, Path::new("/p/.operon/build"), Path::new("/p"));
        let json = line.strip_prefix("\nglobalThis.__operonSourceMap = ").and_then(|l| l.strip_suffix(";\n")).unwrap();
        let embedded: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(
            embedded,
            serde_json::json!({
                "sources": ["src/index.ts", "operon-sdk/src/component.ts", "../../sdk/typescript/src/run.ts"],
                "mappings": "AAAA;AACA",
            })
        );
    }

    #[test]
    fn imports_should_be_relative_to_the_build_directory() {
        let import = relative_import(Path::new("/p/.operon/build"), Path::new("/p/src/index.ts"));
        assert_eq!(import, "../../src/index.ts");
        assert_eq!(relative_import(Path::new("/p"), Path::new("/p/src/a.ts")), "./src/a.ts");
    }

    #[test]
    fn the_reconciler_module_should_default_to_src_index_and_be_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(reconciler_module(dir.path()).unwrap_err().to_string().contains("npm package"));
        std::fs::write(dir.path().join("package.json"), "{}").unwrap();
        assert!(reconciler_module(dir.path()).unwrap_err().to_string().contains("src/index.ts does not exist"));
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/main.ts"), "").unwrap();
        std::fs::write(dir.path().join("package.json"), r#"{"operon": {"reconciler": "src/main.ts"}}"#).unwrap();
        assert!(reconciler_module(dir.path()).unwrap().ends_with("src/main.ts"));
    }

    #[test]
    fn the_vendored_sdk_should_carry_its_sources_and_the_template_its_package() {
        assert!(SDK_SOURCES.get_file("index.ts").is_some() && SDK_SOURCES.get_file("component.ts").is_some());
        assert!(SDK_PACKAGE.contains("\"name\": \"@operon/sdk\""));
        let vendored: serde_json::Value = serde_json::from_str(&vendored_package()).unwrap();
        assert_eq!(vendored["exports"]["."], "./src/index.ts", "{vendored}");
        assert_eq!(vendored["exports"]["./component"], "./src/component.ts", "{vendored}");
        assert!(vendored.get("scripts").is_none() && vendored.get("devDependencies").is_none());
        assert!(TEMPLATE.get_file("package.json").is_some() && TEMPLATE.get_file("src/index.ts").is_some());
    }
}
