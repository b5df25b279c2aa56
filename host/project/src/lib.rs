//! Guest projects: what `operon new` scaffolds and `operon build` builds, in
//! each language a reconciler can be written in.
//!
//! A project is a directory with an `operon.toml`:
//!
//! ```toml
//! name = "greeter"                # the component: dist/greeter.wasm
//! lang = "python"                 # rust | python | ts | go | c
//! world = "reconciler"            # or "reconciler-with-admission"
//! fixtures = "fixtures"           # request fixtures for `operon test`
//! # sdk = "../../sdk/python"      # where the language SDK is, when it is not
//! #                               # vendored in the project (the repository's examples)
//! ```
//!
//! Building calls the language's own toolchain (cargo, componentize-py, tsc
//! and componentize-js, go, clang); everything else — the WIT package, the
//! bindings generators for Go and C, the WASI adapter, turning a core module
//! into a component — is inside this binary, so an author needs nothing but
//! `operon` and their language's tools. When a tool is missing, the error
//! says exactly what to install.
//!
//! **Invariant: one build recipe per language, here.** `cargo xtask guests`
//! and `operon dev` build the repository's examples through this module too.

pub mod dev;
pub mod lang;
mod scaffold;
pub mod sdk;

pub use dev::DevConfig;
pub use lang::Lang;
pub use scaffold::{ParentKind, SdkSource, scaffold, scaffold_kind};

use serde::Deserialize;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The WIT package every guest is built against, as shipped in this binary.
pub const WIT: &str = include_str!("../../../wit/reconciler.wit");

/// The project file's name.
pub const PROJECT_FILE: &str = "operon.toml";

/// Errors of scaffolding and building projects.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The directory holds no `operon.toml`, or it is invalid.
    #[error("{path}: {reason}")]
    Project {
        /// The project file (or directory).
        path: PathBuf,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A tool the language needs is not installed.
    #[error("`{tool}` was not found: {install}")]
    MissingTool {
        /// The command that was looked for.
        tool: String,
        /// How to install it.
        install: String,
    },
    /// A tool ran and failed.
    #[error("`{command}` failed ({status}):\n{output}")]
    ToolFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The end of its output (stderr, then stdout).
        output: String,
    },
    /// The build produced something that is not a usable component.
    #[error("the build of {project} produced no usable component: {reason}")]
    Output {
        /// The project's name.
        project: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `operon new` was pointed at a directory that is not empty.
    #[error("{0} already exists and is not empty; pick a new directory")]
    NotEmpty(PathBuf),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

/// Which WIT world a guest implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    /// `manifest` and `reconcile`.
    #[default]
    Reconciler,
    /// Also `validate` and `mutate` (admission webhooks).
    ReconcilerWithAdmission,
    /// Also `convert` (the CRD's conversion webhook; contract 0.2).
    ReconcilerWithConversion,
    /// Admission and conversion both (contract 0.2).
    ReconcilerWithAdmissionAndConversion,
}

impl World {
    /// The world's name in the WIT package.
    pub fn name(self) -> &'static str {
        match self {
            World::Reconciler => "reconciler",
            World::ReconcilerWithAdmission => "reconciler-with-admission",
            World::ReconcilerWithConversion => "reconciler-with-conversion",
            World::ReconcilerWithAdmissionAndConversion => "reconciler-with-admission-and-conversion",
        }
    }

    /// Whether the world exports `validate` and `mutate`.
    pub fn admission(self) -> bool {
        matches!(self, World::ReconcilerWithAdmission | World::ReconcilerWithAdmissionAndConversion)
    }

    /// Whether the world exports `convert`.
    pub fn conversion(self) -> bool {
        matches!(self, World::ReconcilerWithConversion | World::ReconcilerWithAdmissionAndConversion)
    }
}

/// `operon.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The component's name (`dist/<name>.wasm`); defaults to the directory's.
    #[serde(default)]
    pub name: String,
    /// The language.
    pub lang: Lang,
    /// The world implemented.
    #[serde(default)]
    pub world: World,
    /// Request fixtures, relative to the project.
    #[serde(default = "default_fixtures")]
    pub fixtures: PathBuf,
    /// Where the language SDK is, relative to the project, when it is not
    /// vendored inside it (the repository's own examples).
    #[serde(default)]
    pub sdk: Option<PathBuf>,
    /// What `operon dev` gives the project's Reconciler beyond the grants
    /// its manifest implies (`[dev]`).
    #[serde(default)]
    pub dev: DevConfig,
}

fn default_fixtures() -> PathBuf {
    PathBuf::from("fixtures")
}

/// A guest project on disk.
#[derive(Debug, Clone)]
pub struct Project {
    /// The project directory (absolute).
    pub dir: PathBuf,
    /// Its `operon.toml`.
    pub config: Config,
}

impl Project {
    /// Read the project in `dir`.
    ///
    /// # Errors
    /// [`Error::Project`] when `operon.toml` is missing or invalid.
    pub fn open(dir: &Path) -> Result<Project, Error> {
        let dir = std::path::absolute(dir).map_err(Error::io(dir))?;
        let file = dir.join(PROJECT_FILE);
        let text = std::fs::read_to_string(&file).map_err(|e| Error::Project {
            path: dir.clone(),
            reason: if e.kind() == std::io::ErrorKind::NotFound {
                format!("no {PROJECT_FILE} here; create a project with `operon new --lang LANG NAME`")
            } else {
                format!("cannot read {PROJECT_FILE}: {e}")
            },
        })?;
        let mut config: Config =
            toml::from_str(&text).map_err(|e| Error::Project { path: file.clone(), reason: e.to_string() })?;
        if config.name.is_empty() {
            config.name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        }
        let valid = !config.name.is_empty()
            && config.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !valid {
            return Err(Error::Project {
                path: file,
                reason: format!("name {:?} must be lowercase letters, digits, `-` or `_`", config.name),
            });
        }
        Ok(Project { dir, config })
    }

    /// The project's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Where `operon build` writes the component by default.
    pub fn default_output(&self) -> PathBuf {
        self.dir.join("dist").join(format!("{}.wasm", self.config.name))
    }

    /// The fixtures directory.
    pub fn fixtures(&self) -> PathBuf {
        self.dir.join(&self.config.fixtures)
    }

    /// The language SDK configured in `operon.toml`, made absolute.
    pub fn sdk(&self) -> Option<PathBuf> {
        self.config.sdk.as_ref().map(|p| self.dir.join(p))
    }

    /// Take the project's build lock (`.operon/build.lock`), first saying
    /// through `progress` that it waits when another build holds it.
    ///
    /// Every build of the project holds it ([`build`]): two builds at once
    /// (`operon build` beside `operon dev`) would write the same
    /// `.operon/build/` files and corrupt each other. `operon test` takes it
    /// too, so it never reads a component a build is writing. The lock is
    /// the operating system's (`flock`): a process that dies releases it.
    ///
    /// # Errors
    /// [`Error::Io`] when the lock file cannot be created or locked.
    pub fn lock(&self, progress: &mut dyn FnMut(&str)) -> Result<BuildLock, Error> {
        let dir = self.dir.join(".operon");
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        let path = dir.join("build.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Error::io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                progress(&format!("waiting for another build of {} to finish ({})", self.name(), path.display()));
                file.lock().map_err(Error::io(&path))?;
            }
            Err(std::fs::TryLockError::Error(source)) => return Err(Error::Io { path, source }),
        }
        Ok(BuildLock { _file: file })
    }
}

/// A project's build lock ([`Project::lock`]), released when dropped.
#[derive(Debug)]
pub struct BuildLock {
    _file: std::fs::File,
}

/// How to build.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Where to write the component; default [`Project::default_output`].
    pub output: Option<PathBuf>,
    /// Echo every tool's command line and output.
    pub verbose: bool,
    /// Also write the component here, under the same lock (`operon dev`'s
    /// staged copy, which it swaps in once the fixtures pass).
    pub copy_to: Option<PathBuf>,
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct Built {
    /// The component file written.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: usize,
    /// Whether the file changed.
    pub changed: bool,
    /// How long the build took.
    pub elapsed: Duration,
}

/// What a language's build step is handed.
pub struct BuildContext<'a> {
    /// The project.
    pub project: &'a Project,
    /// A directory holding the WIT package (`reconciler.wit`), written from
    /// [`WIT`].
    pub wit_dir: PathBuf,
    /// Scratch space for intermediate files (`<project>/.operon/build`).
    pub work_dir: PathBuf,
    /// Echo commands and their output.
    pub verbose: bool,
    /// Progress lines ("running componentize-py", ...).
    pub progress: &'a mut dyn FnMut(&str),
}

/// Build `project` into a component and write it.
///
/// # Errors
/// A missing tool (with what to install), a failing tool (with its output),
/// or an output that is not a component exporting the reconciler world.
pub fn build(project: &Project, options: &BuildOptions, progress: &mut dyn FnMut(&str)) -> Result<Built, Error> {
    let started = Instant::now();
    let _lock = project.lock(progress)?;
    let work_dir = project.dir.join(".operon");
    let wit_dir = work_dir.join("wit");
    write_if_changed(&wit_dir.join("reconciler.wit"), WIT.as_bytes())?;
    let build_dir = work_dir.join("build");
    std::fs::create_dir_all(&build_dir).map_err(Error::io(&build_dir))?;
    let mut cx = BuildContext { project, wit_dir, work_dir: build_dir, verbose: options.verbose, progress };
    let bytes = lang::build(&mut cx)?;
    check_component(project, &bytes)?;
    let path = options.output.clone().unwrap_or_else(|| project.default_output());
    let changed = write_if_changed(&path, &bytes)?;
    if let Some(copy) = &options.copy_to {
        write_if_changed(copy, &bytes)?;
    }

    Ok(Built { path, size: bytes.len(), changed, elapsed: started.elapsed() })
}

/// The output must be a component that exports the guest interface (and the
/// admission interface when the project says so).
fn check_component(project: &Project, bytes: &[u8]) -> Result<(), Error> {
    let fail = |reason: String| Error::Output { project: project.name().to_string(), reason };
    if !wasmparser::Parser::is_component(bytes) {
        return Err(fail("it is a core wasm module, not a component".into()));
    }
    let (imports, exports) = shape(bytes).map_err(|e| fail(format!("it cannot be decoded: {e:#}")))?;
    let exports_iface =
        |iface: &str| exports.iter().any(|e| e.starts_with(&format!("{}/{iface}@", operon_contract::WIT_PACKAGE)));
    if !exports_iface("guest") {
        return Err(fail(format!(
            "it does not export {}/guest (exports: {}); does the source export the reconciler?",
            operon_contract::WIT_PACKAGE,
            if exports.is_empty() { "none".to_string() } else { exports.join(", ") }
        )));
    }
    let world = project.config.world;
    for (wanted, iface) in [(world.admission(), "admission"), (world.conversion(), "conversion")] {
        if wanted && !exports_iface(iface) {
            return Err(fail(format!(
                "operon.toml says world = \"{}\" but it does not export {}/{iface}",
                world.name(),
                operon_contract::WIT_PACKAGE
            )));
        }
    }
    if let Some(bad) = imports.iter().find(|i| !i.starts_with("wasi:") && !i.starts_with(operon_contract::WIT_PACKAGE))
    {
        return Err(fail(format!("it imports {bad}, which the host does not provide")));
    }
    Ok(())
}

/// Imports and exports of a component, as `namespace:package/interface@version`.
pub fn shape(component: &[u8]) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let wit_component::DecodedWasm::Component(resolve, world) = wit_component::decode(component)? else {
        anyhow::bail!("it decodes as a WIT package, not a component");
    };
    let world = &resolve.worlds[world];
    let names = |items: &wit_parser::IndexMap<wit_parser::WorldKey, wit_parser::WorldItem>| {
        items
            .iter()
            .filter(|(_, item)| !matches!(item, wit_parser::WorldItem::Type { .. }))
            .map(|(key, _)| resolve.name_world_key(key))
            .collect::<Vec<_>>()
    };
    Ok((names(&world.imports), names(&world.exports)))
}

/// Turn a core module that carries `component-type` custom sections (from a
/// bindings generator, or [`embed_wit`]) into a component. `adapter` is a
/// WASI preview 1 adapter (import name, bytes) for modules that import
/// `wasi_snapshot_preview1`, e.g. Go's and C's.
///
/// # Errors
/// wit-component's, as [`Error::Output`].
pub fn componentize(project: &str, core: &[u8], adapter: Option<(&str, &[u8])>) -> Result<Vec<u8>, Error> {
    let fail = |e: anyhow::Error| Error::Output { project: project.to_string(), reason: format!("{e:#}") };
    let mut encoder = wit_component::ComponentEncoder::default().validate(true).module(core).map_err(fail)?;
    if let Some((name, bytes)) = adapter {
        encoder = encoder.adapter(name, bytes).map_err(fail)?;
    }
    encoder.encode().map_err(fail)
}

/// Add the `component-type` section for `world` of [`WIT`] to a core module
/// built without one (`wasm-tools component embed`).
///
/// # Errors
/// The WIT or the module cannot be processed, as [`Error::Output`].
pub fn embed_wit(project: &str, core: &[u8], world: World) -> Result<Vec<u8>, Error> {
    let fail = |e: anyhow::Error| Error::Output { project: project.to_string(), reason: format!("{e:#}") };
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("reconciler.wit", WIT).map_err(fail)?;
    let world = resolve.select_world(&[package], Some(world.name())).map_err(fail)?;
    let mut core = core.to_vec();
    wit_component::embed_component_metadata(&mut core, &resolve, world, wit_component::StringEncoding::UTF8)
        .map_err(fail)?;
    Ok(core)
}

/// Run a tool and return its output, with errors that say what to install
/// (`install`) when it is missing and show its output when it fails.
///
/// # Errors
/// [`Error::MissingTool`], [`Error::ToolFailed`].
pub fn run_tool(cx: &mut BuildContext<'_>, command: &mut Command, install: &str) -> Result<Output, Error> {
    let line = command_line(command);
    (cx.progress)(&format!("running {line}"));
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = command.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::MissingTool {
                tool: command.get_program().to_string_lossy().into_owned(),
                install: install.to_string(),
            }
        } else {
            Error::Io { path: PathBuf::from(command.get_program()), source: e }
        }
    })?;
    if cx.verbose {
        for stream in [&output.stdout, &output.stderr] {
            for l in String::from_utf8_lossy(stream).lines() {
                (cx.progress)(&format!("  {l}"));
            }
        }
    }
    if !output.status.success() {
        return Err(Error::ToolFailed { command: line, status: output.status.to_string(), output: tail(&output) });
    }
    Ok(output)
}

/// Whether `program` can be run (found on `PATH`, or a path that exists).
pub fn have_tool(program: impl AsRef<OsStr>) -> bool {
    let program = program.as_ref();
    if Path::new(program).components().count() > 1 {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

fn command_line(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| {
            let a = a.to_string_lossy();
            if a.contains(' ') { format!("'{a}'") } else { a.into_owned() }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last 40 lines of stderr and stdout.
fn tail(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !stdout.trim().is_empty() {
        text.push_str(&stdout);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].iter().map(|l| format!("  {l}\n")).collect()
}

/// Write `bytes` to `path` (creating its directory) unless it already holds
/// them; returns whether it wrote. The write is atomic.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool, Error> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(Error::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(Error::io(path))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path an `include_dir!` or `include_str!` in `src/` names, as
    /// `build.rs` lists them (relative to this crate).
    #[test]
    fn every_embedded_path_should_be_watched() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let build = std::fs::read_to_string(root.join("build.rs")).expect("build.rs watches what src/ embeds");
        let mut files = vec![root.join("src")];
        let mut missing = Vec::new();
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (at, _) in text.match_indices("include_") {
                let rest = &text[at..];
                let call = ["include_dir!(\"", "include_str!(\"", "include_bytes!(\""];
                let Some(arg) = call.iter().find_map(|c| rest.strip_prefix(c)).and_then(|r| r.split_once('"')) else {
                    continue;
                };
                let arg = arg.0;

                let embedded = match arg.strip_prefix("$CARGO_MANIFEST_DIR/") {
                    Some(rel) => root.join(rel),
                    None => path.parent().unwrap().join(arg),
                };
                let embedded = embedded.canonicalize().unwrap_or_else(|e| panic!("{arg}: {e}"));
                let rel = embedded.strip_prefix(root.parent().unwrap().parent().unwrap()).unwrap();
                let listed = format!("\"../../{}\"", rel.display());
                if !build.contains(&listed) {
                    missing.push(format!("{} (in {})", rel.display(), path.display()));
                }
            }
        }
        assert!(missing.is_empty(), "build.rs does not watch: {missing:?}");
    }

    #[test]
    fn project_file_should_name_the_language_and_default_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("my-guest");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join(PROJECT_FILE), "lang = \"python\"\n").unwrap();
        let project = Project::open(&p).unwrap();
        assert_eq!(project.name(), "my-guest");
        assert_eq!(project.config.lang, Lang::Python);
        assert_eq!(project.config.world, World::Reconciler);
        assert_eq!(project.fixtures(), project.dir.join("fixtures"));
        assert!(project.default_output().ends_with("dist/my-guest.wasm"));
    }

    #[test]
    fn project_file_errors_should_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let err = Project::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("operon new"), "{err}");
        std::fs::write(dir.path().join(PROJECT_FILE), "lang = \"cobol\"\n").unwrap();
        let err = Project::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("cobol") && err.contains("python"), "{err}");
        std::fs::write(dir.path().join(PROJECT_FILE), "lang = \"go\"\nwrold = \"x\"\n").unwrap();
        assert!(Project::open(dir.path()).unwrap_err().to_string().contains("wrold"));
    }

    #[test]
    fn the_embedded_wit_should_define_both_worlds() {
        let mut resolve = wit_parser::Resolve::default();
        let package = resolve.push_str("reconciler.wit", WIT).unwrap();
        for world in [World::Reconciler, World::ReconcilerWithAdmission] {
            resolve.select_world(&[package], Some(world.name())).unwrap();
        }
    }

    #[test]
    fn missing_tools_should_say_what_to_install() {
        let project = Project { dir: PathBuf::from("/nonexistent"), config: toml::from_str("lang = \"go\"").unwrap() };
        let mut lines = Vec::new();
        let mut progress = |l: &str| lines.push(l.to_string());
        let mut cx = BuildContext {
            project: &project,
            wit_dir: PathBuf::new(),
            work_dir: PathBuf::new(),
            verbose: false,
            progress: &mut progress,
        };
        let err = run_tool(&mut cx, &mut Command::new("operon-no-such-tool"), "install it with `apt install x`")
            .unwrap_err()
            .to_string();
        assert!(err.contains("operon-no-such-tool") && err.contains("apt install x"), "{err}");
        assert!(!have_tool("operon-no-such-tool"));
        assert!(have_tool("sh"));
    }
}
