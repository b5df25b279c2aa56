//! C guests: `src/*.c` with the Operon C SDK (`operon.h`, `operon.c`, in
//! `sdk/c/`), compiled by clang for `wasm32-wasi` against wasi-libc as a
//! reactor, and made a component here with the WASI preview 1 reactor
//! adapter.
//!
//! The bindings come from wit-bindgen's C generator, run in this process
//! for the project's world (renamed `operon_wit`, so the SDK's glue,
//! `operon_wit.c`, is the same for every world; `operon_wit_admission.c`
//! and `operon_wit_conversion.c` join it for the worlds that export
//! admission and conversion), into `.operon/build/c/`.
//! The WIT world is embedded after linking (no component-type object file,
//! so the linker needs nothing but wasi-libc).
//!
//! Debian 12's clang 14, lld 14 and wasi-libc (2022) are enough, and they
//! install with apt; PyPI's `ziglang` was not needed.
//!
//! **The SDK.** C has no registry: the SDK is a release archive
//! (`operon-sdk-c-X.Y.Z.tar.gz`) whose `make install` puts the headers, the
//! sources and `operon-sdk.pc` under a prefix, and a new project finds it
//! with pkg-config (`pkg-config 'operon-sdk >= X.Y.Z'`), as C projects find
//! their libraries. The build asks pkg-config for the SDK's version, headers
//! and sources, and refuses one that speaks another contract. A new project
//! carries the sources in `operon-sdk/` (no archive is published yet);
//! `operon new --sdk registry` finds the installed archive with pkg-config
//! instead. The repository's examples name `sdk/c` with `sdk =` in
//! `operon.toml`. A vendored or named SDK comes first.

use crate::scaffold::Scaffold;
use crate::{BuildContext, Error, World, componentize, embed_wit, run_tool};
use include_dir::{Dir, include_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What an author must install.
pub(super) const REQUIREMENTS: &str = "clang with the wasm32-wasi target and wasi-libc: on Debian or Ubuntu \
     `apt-get install clang lld wasi-libc libclang-rt-dev-wasm32` (Debian 12's clang 14 works). Nothing else: the \
     bindings and the WASI adapter are built into operon";

/// The SDK, vendored into new projects (its `template/` and tests excluded).
static SDK: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/c");

/// The world's name in the generated C (`operon_wit_string_t`, ...).
const BINDINGS: &str = "operon_wit";

/// Where the SDK's headers and sources are.
struct Sdk {
    include: PathBuf,
    sources: PathBuf,
}

/// The SDK: `sdk = ...` of operon.toml, a vendored `operon-sdk/`, or the
/// one pkg-config knows.
fn sdk(cx: &mut BuildContext<'_>) -> Result<Sdk, Error> {
    let project = cx.project;
    let flat = |dir: PathBuf| Sdk { include: dir.clone(), sources: dir };
    if let Some(dir) = project.sdk() {
        if !dir.join("operon.h").is_file() {
            return Err(Error::Project {
                path: dir,
                reason: "operon.toml names this directory as the SDK (`sdk = ...`), but it holds no operon.h".into(),
            });
        }
        crate::sdk::check_copy(crate::Lang::C, &dir.join("operon.h"), "#define OPERON_SDK_VERSION ")?;
        return Ok(flat(dir));
    }
    let vendored = project.dir.join("operon-sdk");
    if vendored.join("operon.h").is_file() {
        crate::sdk::check_copy(crate::Lang::C, &vendored.join("operon.h"), "#define OPERON_SDK_VERSION ")?;
        return Ok(flat(vendored));
    }
    let version = crate::sdk::VERSION;
    let install = format!(
        "install the C SDK where pkg-config finds it: unpack operon-sdk-c-{version}.tar.gz, run \
         `make install PREFIX=$HOME/.local` in it and `export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig` \
         (or vendor it: `operon new` without `--sdk registry` copies it into the project)"
    );
    let mut query = |args: &[&str]| -> Result<String, Error> {
        let mut pkg_config = Command::new("pkg-config");
        pkg_config.args(args).arg("operon-sdk");
        match run_tool(cx, &mut pkg_config, &format!("pkg-config (Debian: `apt-get install pkgconf`); then {install}"))
        {
            Ok(output) => Ok(String::from_utf8_lossy(&output.stdout).trim().to_string()),
            Err(Error::ToolFailed { output, .. }) => Err(Error::Project {
                path: project.dir.clone(),
                reason: format!("pkg-config does not know operon-sdk ({}): {install}", output.trim()),
            }),
            Err(e) => Err(e),
        }
    };
    let found = query(&["--modversion"])?;
    if !crate::sdk::speaks_contract(&found) {
        return Err(crate::sdk::contract_mismatch(crate::Lang::C, &found, project.dir.clone()));
    }
    let sdk = Sdk {
        include: PathBuf::from(query(&["--variable=includedir"])?),
        sources: PathBuf::from(query(&["--variable=srcdir"])?),
    };
    if !sdk.include.join("operon.h").is_file() || !sdk.sources.join("operon.c").is_file() {
        return Err(Error::Project {
            path: project.dir.clone(),
            reason: format!(
                "pkg-config's operon-sdk {found} names {} and {}, which do not hold operon.h and operon.c: {install}",
                sdk.include.display(),
                sdk.sources.display()
            ),
        });
    }
    Ok(sdk)
}

pub(super) fn build(cx: &mut BuildContext<'_>) -> Result<Vec<u8>, Error> {
    let project = cx.project;
    let sdk = sdk(cx)?;
    let sources = sources(&project.dir.join("src"))?;

    (cx.progress)("generating C bindings");
    let gen_dir = cx.work_dir.join("c");
    for (name, bytes) in bindings(project.name(), project.config.world)? {
        crate::write_if_changed(&gen_dir.join(name), &bytes)?;
    }

    let core = cx.work_dir.join("c-core.wasm");
    let mut clang = Command::new("clang");
    clang
        .current_dir(&project.dir)
        .args(["--target=wasm32-wasi", "-mexec-model=reactor", "-std=c11", "-O2", "-Wall", "-Wextra"])
        // The exports are named by `__export_name__` attributes; everything
        // else may go. No -g: the name section stays, for trap backtraces.
        .arg("-Wl,--gc-sections")
        .arg("-I")
        .arg(&sdk.include)
        .arg("-I")
        .arg(&gen_dir)
        .arg("-I")
        .arg(project.dir.join("src"))
        .arg("-o")
        .arg(&core)
        .args(&sources)
        .arg(sdk.sources.join("operon.c"))
        .arg(sdk.sources.join("operon_wit.c"))
        .arg(gen_dir.join(format!("{BINDINGS}.c")));
    let world = project.config.world;
    for (wanted, glue) in
        [(world.admission(), "operon_wit_admission.c"), (world.conversion(), "operon_wit_conversion.c")]
    {
        if wanted {
            clang.arg(sdk.sources.join(glue));
        }
    }
    run_tool(cx, &mut clang, REQUIREMENTS)?;
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

/// The project's C sources: every `src/*.c`, sorted.
fn sources(src: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(src)
        .map_err(|e| Error::Project { path: src.to_path_buf(), reason: format!("the C sources go in src/: {e}") })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    if sources.is_empty() {
        return Err(Error::Project { path: src.to_path_buf(), reason: "no .c files in src/".into() });
    }
    Ok(sources)
}

/// The C bindings of `world`: `operon_wit.c` and `operon_wit.h`.
fn bindings(project: &str, world: World) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let fail = |e: anyhow::Error| Error::Output { project: project.to_string(), reason: format!("C bindings: {e:#}") };
    let mut resolve = wit_bindgen_core::wit_parser::Resolve::default();
    let package = resolve.push_str("reconciler.wit", crate::WIT).map_err(fail)?;
    let world = resolve.select_world(&[package], Some(world.name())).map_err(fail)?;
    let opts = wit_bindgen_c::Opts { rename_world: Some(BINDINGS.into()), no_object_file: true, ..Default::default() };
    let mut files = wit_bindgen_core::Files::default();
    opts.build().generate(&mut resolve, world, &mut files).map_err(fail)?;
    Ok(files.iter().map(|(name, bytes)| (name.to_string(), bytes.to_vec())).collect())
}

/// `OPERON_SDK_VERSION` of the SDK's header.
pub(crate) fn sdk_version() -> String {
    let header = SDK.get_file("operon.h").and_then(|f| f.contents_utf8()).unwrap_or_default();
    crate::sdk::quoted_after(header, "#define OPERON_SDK_VERSION ").unwrap_or_default()
}

pub(super) fn scaffold(s: &mut Scaffold<'_>) -> Result<(), Error> {
    let version = crate::sdk::VERSION;
    if s.vendor {
        s.set(
            "sdk_make",
            "# The Operon C SDK, vendored by `operon new`.\nSDK_SRC ?= operon-sdk\nSDK_CFLAGS ?= -I operon-sdk\n",
        );
        s.set(
            "sdk_note",
            "`operon-sdk/` is the Operon C SDK (`operon.h`, `operon.c`, the component\n\
             glue and `operon_testing.h`), vendored by `operon new` so the project needs\n\
             nothing but clang and wasi-libc. No SDK archive is published yet.",
        );
    } else {
        s.set(
            "sdk_make",
            format!(
                "# The Operon C SDK, found with pkg-config (README.md says how to install it).\n\
                 OPERON_SDK ?= operon-sdk >= {version}\n\
                 SDK_CFLAGS := $(shell pkg-config --print-errors --cflags '$(OPERON_SDK)')\n\
                 SDK_SRC := $(shell pkg-config --variable=srcdir operon-sdk)\n"
            ),
        );
        s.set(
            "sdk_note",
            format!(
                "The Operon C SDK comes from its release archive, `operon-sdk-c-{version}.tar.gz`:\n\
                 unpack it and run `make install PREFIX=$HOME/.local` there, then\n\
                 `export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig`. `operon build` and the\n\
                 Makefile find it with pkg-config (`operon-sdk >= {version}`). The archive is\n\
                 not published yet (`cargo xtask packages` builds it from a checkout); `operon new`\n\
                 without `--sdk registry` copies the SDK into the project instead."
            ),
        );
    }
    let template = SDK.get_dir("template").ok_or_else(|| Error::Project {
        path: s.dir.to_path_buf(),
        reason: "this operon was built without the C SDK's template".into(),
    })?;
    write_template(s, template)?;
    if s.vendor {
        // The SDK's sources only: its Makefile and test/ are the SDK's own tests.
        for file in SDK.files().filter(|f| f.path().extension().is_some_and(|x| x == "c" || x == "h")) {
            s.write_bytes(&Path::new("operon-sdk").join(file.path()).to_string_lossy(), file.contents())?;
        }
    }
    Ok(())
}

fn write_template(s: &Scaffold<'_>, dir: &Dir<'_>) -> Result<(), Error> {
    for file in dir.files() {
        let rel = file.path().strip_prefix("template").unwrap_or(file.path()).to_string_lossy().into_owned();
        let rel = rel.strip_suffix(".tmpl").unwrap_or(&rel);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_should_use_one_name_for_every_world() {
        for world in [
            World::Reconciler,
            World::ReconcilerWithAdmission,
            World::ReconcilerWithConversion,
            World::ReconcilerWithAdmissionAndConversion,
        ] {
            let files = bindings("t", world).unwrap();
            let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["operon_wit.c", "operon_wit.h"], "{world:?}");
            let header = String::from_utf8_lossy(&files[1].1).into_owned();
            assert!(header.contains("operon_wit_string_t"));
            // The names the SDK's glue implements (operon_wit*.c).
            assert!(header.contains("exports_operon_reconciler_guest_reconcile"), "{world:?}");
            assert_eq!(header.contains("exports_operon_reconciler_admission_validate"), world.admission(), "{world:?}");
            assert_eq!(
                header.contains("exports_operon_reconciler_conversion_convert"),
                world.conversion(),
                "{world:?}"
            );
        }
    }

    #[test]
    fn the_sdk_should_carry_the_glue_of_every_world() {
        for glue in ["operon_wit.c", "operon_wit_admission.c", "operon_wit_conversion.c"] {
            assert!(SDK.get_file(glue).is_some(), "{glue}");
        }
    }
}
