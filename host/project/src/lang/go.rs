//! Go guests: a `main` package using the Operon Go SDK (`operon.dev/sdk/go`,
//! in `sdk/go/`), compiled by the standard Go toolchain for `GOOS=wasip1`
//! as a reactor (`-buildmode=c-shared`) and made a component here with the
//! WASI preview 1 reactor adapter.
//!
//! **The SDK.** A new project carries the module in `operon-sdk/` and
//! `go.mod` points at it with a `replace`, so Go never asks a proxy for it
//! (it is not published yet). With `operon new --sdk registry` it requires
//! the module at this release instead (`require operon.dev/sdk/go vX.Y.Z`,
//! fetched through `GOPROXY` like any module; its `go.sum` lines are written
//! by `operon new`, computed from the module's files in this binary, so Go
//! verifies that what it downloads is that module). The build refuses a required
//! version that speaks another contract. The module is `sdk/go` exactly (a
//! Go module is its directory): the scaffold's files live in
//! `sdk/go-template`.
//!
//! The bindings come from wit-bindgen's Go generator, run in this process
//! for the project's world. They belong to the SDK's package tree
//! (`operon.dev/sdk/go/internal/wit/...`), but they are never written into
//! the SDK: they go to `.operon/build/go/` and reach the compiler through
//! `go build -overlay`. So a vendored SDK stays as it was vendored, the
//! repository's examples share `sdk/go` whatever their world, and the
//! project's `go.mod` only needs the SDK and `go.bytecodealliance.org/pkg`
//! (the runtime package the generated code imports, pinned in `go.sum`).
//! Go refuses overlays of files in its module cache, so an SDK that comes
//! from there (the verified module, not a `replace`) is copied to
//! `.operon/build/go-sdk/` and the build reads a copy of the project's
//! `go.mod` that points at it (`-modfile`); the project's files stay as the
//! author wrote them.
//!
//! **The CRD comes from the Go types, as kubebuilder makes it.** A project
//! whose package marks a kind with `+kubebuilder:object:root=true` (the
//! scaffold's `api.go`, built only with the `operon_crd` tag so the
//! component never links Kubernetes' packages) gets its `crd.yaml` from
//! controller-gen, run through the Go module proxy at a pinned version
//! (`go run sigs.k8s.io/controller-tools/cmd/controller-gen@VERSION`): the
//! types and their markers are the schema, never a hand-written copy.
//!
//! TinyGo was not an option: it is not in the registries the project can
//! install from (PyPI, npm, Debian, crates, the Go module proxy).

use crate::scaffold::Scaffold;
use crate::{BuildContext, Error, World, componentize, embed_wit, run_tool};
use include_dir::{Dir, include_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What an author must install.
pub(super) const REQUIREMENTS: &str = "Go 1.25 or newer (`go version`): the Go toolchain from https://go.dev/dl, \
     or from a newer Debian's `golang-1.25-go`; with an older Go and GOTOOLCHAIN=auto, `go` fetches 1.25 through \
     the module proxy by itself. Nothing else: the bindings and the WASI adapter are built into operon";

/// The SDK's module path, as the project's `go.mod` requires it.
const SDK_MODULE: &str = crate::sdk::GO_MODULE;

/// Where the generated bindings live in the SDK's package tree.
const BINDINGS_PACKAGE: &str = "operon.dev/sdk/go/internal/wit";

/// controller-gen, from the Go module proxy (`go run PACKAGE@VERSION`).
pub const CONTROLLER_GEN: &str = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0";

/// The build tag of the file that holds the kind's root type for
/// controller-gen (with `metav1`, which the component does not link).
const CRD_TAG: &str = "operon_crd";

/// The marker of a kind's root type.
const ROOT_MARKER: &str = "+kubebuilder:object:root=true";

/// The oldest Go that builds the generated bindings
/// (`go.bytecodealliance.org/pkg` says `go 1.25`).
const MIN_MINOR: u32 = 25;

/// The scaffold's own files (rendered; `*.tmpl` loses its suffix).
static TEMPLATE: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/go-template");

pub(super) fn build(cx: &mut BuildContext<'_>) -> Result<Vec<u8>, Error> {
    let project = cx.project;
    let dir = &project.dir;
    check_version(cx)?;
    let (mut sdk, replaced) = sdk_dir(cx)?;
    let modfile = if replaced { None } else { Some(writable_sdk(cx, &mut sdk)?) };

    (cx.progress)("generating Go bindings");
    let gen_dir = cx.work_dir.join("go");
    let files = bindings(project.name(), project.config.world)?;
    let _ = std::fs::remove_dir_all(&gen_dir);
    let mut overlay = serde_json::Map::new();
    for (rel, bytes) in &files {
        let generated = gen_dir.join(rel);
        crate::write_if_changed(&generated, bytes)?;
        overlay.insert(
            sdk.join("internal/wit").join(rel).to_string_lossy().into_owned(),
            generated.to_string_lossy().into(),
        );
    }
    let overlay_file = cx.work_dir.join("go-overlay.json");
    let overlay = serde_json::json!({ "Replace": overlay }).to_string();
    crate::write_if_changed(&overlay_file, overlay.as_bytes())?;

    generate_crd(cx)?;

    let core = cx.work_dir.join("go-core.wasm");
    let mut go = Command::new("go");
    go.current_dir(dir)
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .env("CGO_ENABLED", "0")
        .args(["build", "-buildmode=c-shared", "-trimpath"])
        // The generated runtime reaches `runtime.sbrk` through go:linkname
        // (cabi_realloc may run before the Go runtime is up); -w drops DWARF
        // (about a third of the size), the name section stays for backtraces.
        .arg("-ldflags=-checklinkname=0 -w")
        .arg(format!("-overlay={}", overlay_file.display()));
    if let Some(modfile) = &modfile {
        go.arg(format!("-modfile={}", modfile.display()));
    }
    go.arg("-o").arg(&core).arg(".");
    run_tool(cx, &mut go, REQUIREMENTS)?;
    let core = std::fs::read(&core).map_err(Error::io(&core))?;
    let core = embed_wit(project.name(), &core, project.config.world)?;
    (cx.progress)("making a component (WASI preview 1 reactor adapter)");
    componentize(
        project.name(),
        &core,
        Some((
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )),
    )
}

/// When the package marks a kind's root type, write `crd.yaml` from the
/// types with controller-gen (see the module's docs).
fn generate_crd(cx: &mut BuildContext<'_>) -> Result<(), Error> {
    let dir = cx.project.dir.clone();
    let marked = std::fs::read_dir(&dir)
        .map_err(Error::io(&dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "go"))
        .any(|p| std::fs::read_to_string(p).is_ok_and(|text| text.contains(ROOT_MARKER)));
    if !marked {
        return Ok(());
    }
    (cx.progress)("generating crd.yaml from the Go types (controller-gen)");
    let mut controller_gen = Command::new("go");
    controller_gen.current_dir(&dir).arg("run").arg(CONTROLLER_GEN).arg(format!("--load-build-tags={CRD_TAG}")).args([
        "crd",
        "paths=./",
        "output:crd:stdout",
    ]);
    // Offline (`GOPROXY=off`, as a vendored project may build): the module
    // cache itself is the proxy, so a controller-gen fetched once (by an
    // earlier build, or CI's setup) keeps working without the network;
    // what it holds was checked against go.sum's database when it came.
    let env = run_tool(cx, Command::new("go").args(["env", "GOPROXY", "GOMODCACHE"]).current_dir(&dir), REQUIREMENTS)?;
    let env = String::from_utf8_lossy(&env.stdout).into_owned();
    if let [proxy, cache] = env.lines().collect::<Vec<_>>()[..]
        && proxy.trim() == "off"
    {
        controller_gen.env("GOPROXY", format!("file://{}/cache/download", cache.trim())).env("GOSUMDB", "off");
    }
    let output = run_tool(cx, &mut controller_gen, REQUIREMENTS)?;
    let crd = String::from_utf8_lossy(&output.stdout);
    if !crd.contains("kind: CustomResourceDefinition") {
        return Err(Error::Project {
            path: dir,
            reason: format!(
                "controller-gen found no kind: a type marked `{ROOT_MARKER}` must be in a file built with \
                 `//go:build {CRD_TAG}`, in a package with `+groupName=` and `+versionName=` markers (see api.go of \
                 `operon new --lang go`)"
            ),
        });
    }
    let text = format!(
        "# Generated by `operon build` from the Go types ({ROOT_MARKER} in api.go, and the types it names)\n\
         # with controller-gen: change the types and their markers, not this file.\n{}",
        crd.trim_start_matches("---\n")
    );
    crate::write_if_changed(&dir.join("crd.yaml"), text.as_bytes())?;
    Ok(())
}

/// `go version` (in the project, so GOTOOLCHAIN switching applies) must be
/// 1.25 or newer.
fn check_version(cx: &mut BuildContext<'_>) -> Result<(), Error> {
    let output = run_tool(cx, Command::new("go").arg("version").current_dir(&cx.project.dir), REQUIREMENTS)?;
    let text = String::from_utf8_lossy(&output.stdout);
    // `go version go1.26.8 linux/amd64`
    let minor = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("go1."))
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u32>().ok());
    match minor {
        Some(minor) if minor >= MIN_MINOR => Ok(()),
        _ => Err(Error::MissingTool {
            tool: format!("go 1.{MIN_MINOR} ({})", text.trim()),
            install: REQUIREMENTS.into(),
        }),
    }
}

/// The SDK module copied out of the module cache to `.operon/build/go-sdk`
/// (`sdk` becomes the copy), and a `go.mod` beside it for `-modfile`: the
/// project's, with a `replace` pointing at the copy, and its `go.sum`.
fn writable_sdk(cx: &BuildContext<'_>, sdk: &mut PathBuf) -> Result<PathBuf, Error> {
    fn copy(from: &Path, to: &Path) -> Result<(), Error> {
        std::fs::create_dir_all(to).map_err(Error::io(to))?;
        for entry in std::fs::read_dir(from).map_err(Error::io(from))? {
            let entry = entry.map_err(Error::io(from))?;
            let target = to.join(entry.file_name());
            if entry.file_type().map_err(Error::io(entry.path()))?.is_dir() {
                copy(&entry.path(), &target)?;
            } else {
                let bytes = std::fs::read(entry.path()).map_err(Error::io(entry.path()))?;
                std::fs::write(&target, bytes).map_err(Error::io(&target))?;
            }
        }
        Ok(())
    }
    let copied = cx.work_dir.join("go-sdk");
    let _ = std::fs::remove_dir_all(&copied);
    copy(sdk, &copied)?;
    let project_mod = cx.project.dir.join("go.mod");
    let mut text = std::fs::read_to_string(&project_mod).map_err(Error::io(&project_mod))?;
    text.push_str(&format!(
        "\n// Written by `operon build`: the module from the cache, copied.\nreplace {SDK_MODULE} => {}\n",
        copied.display()
    ));
    let modfile = cx.work_dir.join("go.mod");
    crate::write_if_changed(&modfile, text.as_bytes())?;
    let sums = std::fs::read(cx.project.dir.join("go.sum")).unwrap_or_default();
    crate::write_if_changed(&cx.work_dir.join("go.sum"), &sums)?;
    *sdk = copied;
    Ok(modfile)
}

/// The directory of the SDK module the project builds against, as Go
/// resolves it (the module cache, downloaded through `GOPROXY` and checked
/// against `go.sum` if need be, or where a `replace` points), and whether it
/// is a `replace`.
fn sdk_dir(cx: &mut BuildContext<'_>) -> Result<(PathBuf, bool), Error> {
    let dir = cx.project.dir.clone();
    let version = crate::sdk::VERSION;
    let go_says = |e: Error| match e {
        Error::ToolFailed { output, .. } => Error::Project {
            path: dir.join("go.mod"),
            reason: format!(
                "go.mod must require {SDK_MODULE} (`go get {SDK_MODULE}@v{version}`), or point at a copy \
                 with `replace {SDK_MODULE} => ./operon-sdk`; go says:\n{output}"
            ),
        },
        other => other,
    };
    let mut list = Command::new("go");
    list.current_dir(&dir).args(["list", "-m", "-json", SDK_MODULE]);
    let output = run_tool(cx, &mut list, REQUIREMENTS).map_err(go_says)?;
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let replaced = listed.get("Replace").is_some_and(|r| !r.is_null());
    let mut found = listed["Dir"].as_str().unwrap_or_default().to_string();
    if !replaced {
        let required = listed["Version"].as_str().unwrap_or_default();
        if !crate::sdk::speaks_contract(required) {
            return Err(crate::sdk::contract_mismatch(crate::Lang::Go, required, dir.join("go.mod")));
        }
        if found.is_empty() {
            // Not in the module cache yet: fetch it (and check it against go.sum).
            let mut download = Command::new("go");
            download.current_dir(&dir).args(["mod", "download", "-json", SDK_MODULE]);
            let output = run_tool(cx, &mut download, REQUIREMENTS).map_err(go_says)?;
            let downloaded: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
            found = downloaded["Dir"].as_str().unwrap_or_default().to_string();
        }
    }
    let sdk = PathBuf::from(found);
    if replaced && sdk.join("operon.go").is_file() {
        crate::sdk::check_copy(crate::Lang::Go, &sdk.join("operon.go"), "const Version = ")?;
    }
    if !sdk.join("internal/wit/doc.go").is_file() {
        return Err(Error::Project {
            path: dir.join("go.mod"),
            reason: format!(
                "{SDK_MODULE} resolves to {}, which is not the Operon Go SDK directory (no internal/wit/doc.go); \
                 point the `replace` at the SDK vendored by `operon new` or at sdk/go of the Operon repository",
                sdk.display()
            ),
        });
    }
    Ok((sdk, replaced))
}

/// The Go bindings of `world`, as (path under `internal/wit`, contents).
/// Only the `wit_bindings.go` files: the `empty.s` beside them exist for
/// native builds, and these packages are only ever built for wasm.
fn bindings(project: &str, world: World) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let fail = |e: anyhow::Error| Error::Output { project: project.to_string(), reason: format!("Go bindings: {e:#}") };
    let mut resolve = wit_bindgen_core::wit_parser::Resolve::default();
    let package = resolve.push_str("reconciler.wit", crate::WIT).map_err(fail)?;
    let world = resolve.select_world(&[package], Some(world.name())).map_err(fail)?;
    let opts = wit_bindgen_go::Opts {
        format: wit_bindgen_go::Format::False,
        pkg_name: Some(BINDINGS_PACKAGE.into()),
        ..Default::default()
    };
    let mut files = wit_bindgen_core::Files::default();
    opts.build().generate(&mut resolve, world, &mut files).map_err(fail)?;
    files
        .iter()
        .filter(|(name, _)| name.ends_with(".go"))
        .map(|(name, bytes)| {
            let text = String::from_utf8_lossy(bytes);
            let text = if name == "wit_exports/wit_exports.go" {
                align_return_area(&text).map_err(fail)?
            } else {
                text.into()
            };
            Ok((name.to_string(), text.into_bytes()))
        })
        .collect()
}

/// wit-bindgen-go 0.60 sizes the exports' static return area without
/// rounding it up to its alignment (`Allocate(&staticPinner, (17*4), 8)`
/// for this contract), and the runtime's `Allocate` panics on that in the
/// package's init, so every call would trap. Round it up in Go.
fn align_return_area(text: &str) -> anyhow::Result<String> {
    const CALL: &str = "witRuntime.Allocate(&staticPinner, ";
    let start = text.find(CALL).ok_or_else(|| anyhow::anyhow!("no export return area in wit_exports.go"))?;
    let args_start = start + CALL.len();
    let args_end =
        args_start + text[args_start..].find("))").ok_or_else(|| anyhow::anyhow!("unexpected return area"))?;
    let (size, align) = text[args_start..args_end]
        .rsplit_once(", ")
        .ok_or_else(|| anyhow::anyhow!("unexpected return area arguments"))?;
    let rounded = format!("(({size}+{align}-1)/{align}*{align}), {align}");
    Ok(format!("{}{rounded}{}", &text[..args_start], &text[args_end..]))
}

pub(super) fn scaffold(s: &mut Scaffold<'_>) -> Result<(), Error> {
    let version = crate::sdk::VERSION;
    if s.vendor {
        s.set(
            "sdk_replace",
            format!(
                "\n// The Operon Go SDK, vendored by `operon new` (it is not published yet): the\n\
                 // project builds with Go alone, offline.\nreplace {SDK_MODULE} => ./operon-sdk\n"
            ),
        );
        s.set("sdk_sum", "");
        s.set(
            "sdk_note",
            format!(
                "`operon-sdk/` is the Operon Go SDK (`{SDK_MODULE}`), vendored by `operon new`\n\
                 so the project builds with Go alone; `go.mod` points at it with a `replace`.\n\
                 The module is not published yet."
            ),
        );
    } else {
        s.set("sdk_replace", "");
        s.set("sdk_sum", crate::sdk::go_sum_lines(version));
        s.set(
            "sdk_note",
            format!(
                "The Operon Go SDK is the module `{SDK_MODULE}` (v{version}), from a GOPROXY that\n\
                 serves it (it is not published yet); `operon new` without `--sdk registry`\n\
                 copies it into the project instead."
            ),
        );
    }
    for file in TEMPLATE.files() {
        let text = file.contents_utf8().ok_or_else(|| missing(s.dir, &file.path().to_string_lossy()))?;
        let rel = file.path().to_string_lossy();
        let rel = rel.strip_suffix(".tmpl").unwrap_or(&rel);
        // go.mod and go.sum end without blank lines whatever was substituted.
        let text = s.render(text);
        let text = if rel.starts_with("go.") { format!("{}\n", text.trim_end()) } else { text };
        s.write_bytes(rel, text.as_bytes())?;
    }
    if s.vendor {
        vendor(s, &crate::sdk::GO_SDK, Path::new("operon-sdk"))?;
    }
    Ok(())
}

/// The SDK's version (`const Version` of `operon.go`).
pub(crate) fn sdk_version() -> String {
    let text = crate::sdk::GO_SDK.get_file("operon.go").and_then(|f| f.contents_utf8()).unwrap_or_default();
    crate::sdk::quoted_after(text, "const Version = ").unwrap_or_default()
}

/// Every SDK file, verbatim under `dest`.
fn vendor(s: &Scaffold<'_>, dir: &Dir<'_>, dest: &Path) -> Result<(), Error> {
    for file in dir.files() {
        s.write_bytes(&dest.join(file.path()).to_string_lossy(), file.contents())?;
    }
    for sub in dir.dirs() {
        vendor(s, sub, dest)?;
    }
    Ok(())
}

fn missing(dir: &Path, what: &str) -> Error {
    Error::Project { path: dir.to_path_buf(), reason: format!("this operon was built without the Go SDK's {what}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_should_be_library_packages_of_the_sdk() {
        let files = bindings("t", World::Reconciler).unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"wit_exports/wit_exports.go"), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("admission")), "{names:?}");
        let exports =
            String::from_utf8_lossy(&files.iter().find(|(n, _)| n.starts_with("wit_exports")).unwrap().1).into_owned();
        assert!(exports.contains("\"operon.dev/sdk/go/internal/wit/export_operon_reconciler_guest\""));
        assert!(exports.contains("witRuntime.Allocate(&staticPinner, (((40+14*4)+8-1)/8*8), 8)"), "{exports}");
        for world in ALL_WORLDS {
            let files = bindings("t", world).unwrap();
            let has = |package: &str| files.iter().any(|(n, _)| n.starts_with(&format!("{package}/")));
            assert_eq!(has("operon_reconciler_admission"), world.admission(), "{world:?}");
            assert_eq!(has("operon_reconciler_conversion"), world.conversion(), "{world:?}");
        }
    }

    const ALL_WORLDS: [World; 4] = [
        World::Reconciler,
        World::ReconcilerWithAdmission,
        World::ReconcilerWithConversion,
        World::ReconcilerWithAdmissionAndConversion,
    ];

    #[test]
    fn every_export_should_have_its_glue_in_the_sdk() {
        // wit_exports.go calls `export_<interface>.<Function>`: the SDK's
        // hand-written glue must define each, for the world's interfaces.
        for world in ALL_WORLDS {
            let files = bindings("t", world).unwrap();
            let exports =
                String::from_utf8_lossy(&files.iter().find(|(n, _)| n.starts_with("wit_exports/")).unwrap().1)
                    .into_owned();
            for line in exports.lines() {
                let Some(call) = line.split(":= export_").nth(1) else { continue };
                let (package, rest) = call.split_once('.').unwrap();
                let function = rest.split('(').next().unwrap();
                let dir = crate::sdk::GO_SDK
                    .get_dir(format!("internal/wit/export_{package}"))
                    .unwrap_or_else(|| panic!("{world:?}: no internal/wit/export_{package}"));
                let defined = dir
                    .files()
                    .any(|f| f.contents_utf8().is_some_and(|text| text.contains(&format!("\nfunc {function}("))));
                assert!(defined, "{world:?}: export_{package} does not define {function}");
            }
        }
    }

    #[test]
    fn ci_should_prebuild_the_controller_gen_operon_runs() {
        let ci = include_str!("../../../../.ci/run");
        assert!(ci.contains(&format!("CONTROLLER_GEN={CONTROLLER_GEN}\n")), ".ci/run must pin {CONTROLLER_GEN}");
    }

    #[test]
    fn every_generated_package_should_have_its_directory_in_the_sdk() {
        // `go mod tidy` and `go vet` resolve the import paths through these.
        for world in ALL_WORLDS {
            for (name, _) in bindings("t", world).unwrap() {
                let package = name.rsplit_once('/').unwrap().0;
                assert!(crate::sdk::GO_SDK.get_file(format!("internal/wit/{package}/doc.go")).is_some(), "{package}");
            }
        }
    }
}
