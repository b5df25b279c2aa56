//! Python guests: a reconciler class using `operon_sdk` (`sdk/python`), made a
//! component by componentize-py.
//!
//! The project names its reconciler in `pyproject.toml`, the file a Python
//! author already has, the way entry points are named (`module:attribute`):
//!
//! ```toml
//! [tool.operon]
//! reconciler = "app:GreetingReconciler"
//! ```
//!
//! **The SDK.** A new project carries the package in `operon_sdk/` (it is
//! not published on PyPI yet, and nothing is installed for it). With
//! `operon new --sdk registry` it depends on the package instead
//! (`dependencies = ["operon-sdk~=X.Y.Z"]`), installed in the environment
//! `operon build` runs in: the active virtualenv (`VIRTUAL_ENV`, which
//! componentize-py searches too) or the `python3` on `PATH`. The build
//! asks that interpreter for `operon_sdk.__version__` and refuses an SDK that
//! speaks another contract. The repository's examples name the SDK with
//! `sdk =` in `operon.toml`. A vendored or named SDK comes first, as on
//! Python's own path.
//!
//! The build writes an entry module (`.operon/build/_operon_entry.py`) that
//! imports the SDK's adapter (the only module that touches the bindings
//! componentize-py generates) and binds the reconciler to it, then runs
//! `componentize-py componentize` with the project, the SDK and the entry on
//! its path. componentize-py imports the module while it builds (it
//! snapshots the initialised interpreter), so an import error or a wrong
//! class name fails the build, with Python's traceback.
//!
//! **WASI.** componentize-py's interpreter imports WASI (stdio, clocks,
//! random, an empty filesystem) and initialises against it. The host links
//! WASI p2 with nothing granted, which is all it needs: `print` reaches the
//! host's log, and so does the traceback of an exception that escapes
//! `reconcile` (a bug: the component traps). `--stub-wasi` is not used:
//! its components import nothing but Operon's interface and pass the same
//! fixtures, but `print` and tracebacks then trap without a word, and the
//! build's random seed is baked in, to save 0.1% of the size.

use crate::scaffold::Scaffold;
use crate::{BuildContext, Error, run_tool, write_if_changed};
use include_dir::{Dir, include_dir};
use std::path::Path;
use std::process::Command;

/// What an author must install.
pub(super) const REQUIREMENTS: &str = "Python 3.11 or newer and componentize-py 0.25: \
    `pip install componentize-py==0.25.1` (in the environment `operon build` runs in; \
    `pip install pytest pyyaml` for the tests)";

/// The scaffold's own files (rendered).
static TEMPLATE: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/python/template");
/// The SDK package, vendored into every new project.
static SDK: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/python/operon_sdk");

const ENTRY: &str = "_operon_entry";

pub(super) fn build(cx: &mut BuildContext<'_>) -> Result<Vec<u8>, Error> {
    let project = cx.project;
    let (module, class) = reconciler(&project.dir)?;
    let sdk = match project.sdk() {
        Some(sdk) if !sdk.join("operon_sdk").join("__init__.py").is_file() => {
            return Err(Error::Project {
                path: sdk.clone(),
                reason: "operon.toml names this directory as the SDK (`sdk = ...`), but it holds no \
                         operon_sdk package"
                    .into(),
            });
        }
        Some(sdk) => {
            crate::sdk::check_copy(crate::Lang::Python, &sdk.join("operon_sdk/__init__.py"), "__version__ = ")?;
            Some(sdk)
        }
        None if project.dir.join("operon_sdk").join("__init__.py").is_file() => {
            let init = project.dir.join("operon_sdk/__init__.py");
            crate::sdk::check_copy(crate::Lang::Python, &init, "__version__ = ")?;
            None
        }
        None => {
            installed_sdk(cx)?;
            None
        }
    };
    generate_crd(cx, sdk.as_deref())?;
    let world = project.config.world;
    let entry = entry_module(&module, &class, world.admission(), world.conversion());
    write_if_changed(&cx.work_dir.join(format!("{ENTRY}.py")), entry.as_bytes())?;
    let output = cx.work_dir.join(format!("{}.wasm", project.name()));
    let mut cmd = Command::new("componentize-py");
    cmd.current_dir(&project.dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg("--wit-path")
        .arg(&cx.wit_dir)
        .args(["--world", project.config.world.name(), "--quiet", "componentize"])
        .arg("--python-path")
        .arg(&cx.work_dir)
        .arg("--python-path")
        .arg(&project.dir);
    if let Some(sdk) = &sdk {
        cmd.arg("--python-path").arg(sdk);
    }
    cmd.arg("--output").arg(&output).arg(ENTRY);
    run_tool(cx, &mut cmd, REQUIREMENTS)?;
    std::fs::read(&output).map_err(Error::io(&output))
}

/// The script that prints the project's CRD from its dataclasses, when it
/// has one (the scaffold's: `operon_sdk.crd` over the parent's types).
const CRDGEN: &str = "crd.py";

/// When the project has [`CRDGEN`], run it with the project (and a named
/// SDK) on the path and write its CRD to `crd.yaml`: the dataclasses the
/// reconciler reads its parent as are the CRD's schema.
fn generate_crd(cx: &mut BuildContext<'_>, sdk: Option<&Path>) -> Result<(), Error> {
    let dir = cx.project.dir.clone();
    if !dir.join(CRDGEN).is_file() {
        return Ok(());
    }
    (cx.progress)("generating crd.yaml from the Python dataclasses (crd.py)");
    let mut path = vec![dir.clone()];
    path.extend(sdk.map(Path::to_path_buf));
    let path = std::env::join_paths(path).map_err(|e| Error::Project { path: dir.clone(), reason: e.to_string() })?;
    let mut run = Command::new(python());
    run.current_dir(&dir).env("PYTHONPATH", path).env("PYTHONDONTWRITEBYTECODE", "1").arg(CRDGEN);
    let output = run_tool(cx, &mut run, REQUIREMENTS)?;
    let crd: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| Error::Project {
        path: dir.join(CRDGEN),
        reason: format!("it must print the CRD as JSON (`print(json.dumps(operon_sdk.crd(...)))`): {e}"),
    })?;
    if crd["kind"] != "CustomResourceDefinition" {
        return Err(Error::Project { path: dir.join(CRDGEN), reason: "it printed something else than a CRD".into() });
    }
    let text = format!(
        "# Generated by `operon build` from the Python dataclasses (the parent's, in the reconciler's module,\n\
         # printed by {CRDGEN} with operon_sdk.crd): change the dataclasses, not this file.\n{}",
        operon_contract::fixture::to_yaml(&crd)
    );
    write_if_changed(&dir.join("crd.yaml"), text.as_bytes())?;
    Ok(())
}

/// The interpreter whose packages componentize-py bundles: the virtualenv's
/// when one is active, else `python3` on `PATH`.
fn python() -> std::path::PathBuf {
    std::env::var_os("VIRTUAL_ENV")
        .map(|venv| Path::new(&venv).join("bin").join("python3"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "python3".into())
}

/// Checks that the installed `operon_sdk` (the dependency of `pyproject.toml`)
/// is there and speaks this operon's contract.
fn installed_sdk(cx: &mut BuildContext<'_>) -> Result<(), Error> {
    let python = python();
    let install = format!(
        "install the project's dependencies where operon build runs (a virtualenv: activate it first): \
         pip install 'operon-sdk~={}' componentize-py==0.25.1",
        crate::sdk::VERSION
    );
    let mut probe = Command::new(&python);
    probe.current_dir(&cx.project.dir).args(["-c", "import operon_sdk; print(operon_sdk.__version__)"]);
    let version = match run_tool(cx, &mut probe, REQUIREMENTS) {
        Ok(output) => String::from_utf8_lossy(&output.stdout).trim().to_string(),
        Err(Error::ToolFailed { output, .. }) if output.contains("ModuleNotFoundError") => {
            return Err(Error::Project {
                path: cx.project.dir.join("pyproject.toml"),
                reason: format!("the package operon_sdk is not installed for {}: {install}", python.display()),
            });
        }
        Err(e) => return Err(e),
    };
    if !crate::sdk::speaks_contract(&version) {
        return Err(crate::sdk::contract_mismatch(
            crate::Lang::Python,
            &version,
            cx.project.dir.join("pyproject.toml"),
        ));
    }
    Ok(())
}

/// The module componentize-py starts from: the adapter's exports (those of
/// the world), bound to the project's reconciler.
fn entry_module(module: &str, class: &str, admission: bool, conversion: bool) -> String {
    let py = |b: bool| if b { "True" } else { "False" };
    let mut text = String::from("# Written by `operon build`: the component's exports, bound to the reconciler.\n");
    text.push_str("from operon_sdk._component import Guest, bind\n");
    if admission {
        text.push_str("from operon_sdk._admission import Admission\n");
    }
    if conversion {
        text.push_str("from operon_sdk._conversion import Conversion\n");
    }
    text.push_str(&format!("from {module} import {class}\n\n"));
    text.push_str(&format!("bind({class}(), admission={}, conversion={})\n", py(admission), py(conversion)));
    text
}

/// `[tool.operon] reconciler = "module:Class"` of `pyproject.toml`.
fn reconciler(dir: &Path) -> Result<(String, String), Error> {
    let path = dir.join("pyproject.toml");
    let hint = "name the reconciler class in pyproject.toml:\n\n[tool.operon]\nreconciler = \"app:MyReconciler\"";
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::Project { path: path.clone(), reason: format!("cannot read it ({e}); {hint}") })?;
    let table: toml::Table =
        text.parse().map_err(|e| Error::Project { path: path.clone(), reason: format!("invalid TOML: {e}") })?;
    let value = table.get("tool").and_then(|t| t.get("operon")).and_then(|t| t.get("reconciler"));
    let Some(value) = value.and_then(|v| v.as_str()) else {
        return Err(Error::Project { path, reason: format!("no [tool.operon] reconciler; {hint}") });
    };
    let identifier = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    match value.split_once(':') {
        Some((module, class)) if module.split('.').all(identifier) && identifier(class) => {
            Ok((module.to_string(), class.to_string()))
        }
        _ => Err(Error::Project {
            path,
            reason: format!("[tool.operon] reconciler = {value:?} is not `module:Class` (e.g. \"app:MyReconciler\")"),
        }),
    }
}

/// `__version__` of the SDK package in this binary.
pub(crate) fn sdk_version() -> String {
    let init = SDK.get_file("__init__.py").and_then(|f| f.contents_utf8()).unwrap_or_default();
    crate::sdk::quoted_after(init, "__version__ = ").unwrap_or_default()
}

pub(super) fn scaffold(s: &mut Scaffold<'_>) -> Result<(), Error> {
    let version = crate::sdk::VERSION;
    if s.vendor {
        s.set(
            "sdk_comment",
            "# The Operon SDK is vendored in operon_sdk/ by `operon new` (not published on PyPI yet).",
        );
        s.set("sdk", "");
        s.set("sdk_install", "");
        s.set("sdk_path_note", " and the vendored operon_sdk package");
        s.set(
            "sdk_note",
            "`operon_sdk/` is the Operon Python SDK, vendored by `operon new` so the project\n\
             builds offline with nothing but Python and componentize-py. No `operon-sdk`\n\
             package is published on PyPI yet.",
        );
    } else {
        s.set(
            "sdk_comment",
            "# The Operon SDK from an index that serves it (not published on PyPI yet); its minor is the WIT contract's.",
        );
        s.set("sdk", format!("\"operon-sdk~={version}\""));
        s.set("sdk_install", format!("'operon-sdk~={version}' "));
        s.set("sdk_path_note", "");
        s.set(
            "sdk_note",
            format!(
                "The Operon Python SDK is the package `operon-sdk` (`~={version}`, the\n\
                 dependency `pyproject.toml` declares), from an index that serves it (it is not\n\
                 published on PyPI yet); `operon new` without `--sdk registry` copies it into\n\
                 the project instead."
            ),
        );
    }
    s.write_dir(&TEMPLATE, "", true)?;
    if s.vendor {
        write_sources(s, &SDK, Path::new("operon_sdk"))?;
    }
    Ok(())
}

/// The SDK's sources, verbatim, without caches a local test run left behind.
fn write_sources(s: &Scaffold<'_>, dir: &Dir<'_>, dest: &Path) -> Result<(), Error> {
    for file in dir.files() {
        if file.path().extension().is_some_and(|e| e == "py" || e == "typed") {
            let name = file.path().file_name().unwrap_or_default();
            s.write_bytes(&dest.join(name).to_string_lossy(), file.contents())?;
        }
    }
    for sub in dir.dirs() {
        let name = sub.path().file_name().unwrap_or_default();
        if name != "__pycache__" {
            write_sources(s, sub, &dest.join(name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_module_should_bind_the_named_class_and_admission_and_conversion_only_when_asked() {
        let plain = entry_module("app", "Greeter", false, false);
        assert!(plain.contains("from app import Greeter\n"), "{plain}");
        assert!(plain.contains("bind(Greeter(), admission=False, conversion=False)"), "{plain}");
        assert!(!plain.contains("Admission") && !plain.contains("Conversion"), "{plain}");
        let admission = entry_module("pkg.mod", "W", true, false);
        assert!(admission.contains("from operon_sdk._admission import Admission\n"), "{admission}");
        assert!(!admission.contains("Conversion"), "{admission}");
        let both = entry_module("pkg.mod", "W", true, true);
        assert!(both.contains("from operon_sdk._admission import Admission\n"), "{both}");
        assert!(both.contains("from operon_sdk._conversion import Conversion\n"), "{both}");
        assert!(both.contains("bind(W(), admission=True, conversion=True)"), "{both}");
    }

    #[test]
    fn the_reconciler_should_be_named_in_pyproject() {
        let dir = tempfile::tempdir().unwrap();
        let err = reconciler(dir.path()).unwrap_err().to_string();
        assert!(err.contains("[tool.operon]"), "{err}");
        std::fs::write(dir.path().join("pyproject.toml"), "[tool.operon]\nreconciler = \"app\"\n").unwrap();
        let err = reconciler(dir.path()).unwrap_err().to_string();
        assert!(err.contains("module:Class"), "{err}");
        std::fs::write(dir.path().join("pyproject.toml"), "[tool.operon]\nreconciler = \"web.app:Web_1\"\n").unwrap();
        assert_eq!(reconciler(dir.path()).unwrap(), ("web.app".to_string(), "Web_1".to_string()));
    }

    #[test]
    fn the_vendored_sdk_should_hold_the_package_without_caches() {
        assert!(SDK.get_file("__init__.py").is_some() && SDK.get_file("_component.py").is_some());
        assert!(SDK.get_file("_conversion.py").is_some());
        assert!(TEMPLATE.get_file("pyproject.toml").is_some() && TEMPLATE.get_file("app.py").is_some());
    }
}
