//! The `operon` command line: `run`, `test`, `new`, `build`, `inspect`.

pub mod dev;
mod explain;
mod flags;
#[cfg(test)]
mod knobs;
pub mod reference;
mod run;
mod sign;
mod wizer;

pub use flags::{BadCpu, BadDuration, BadQuantity, LimitArgs, RecordArgs, RunArgs, duration};
pub(crate) use run::wait_signal;

use crate::runtime::{self, Limits, Module, Runtime};
use crate::telemetry::LogFormat;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Operon: a Kubernetes operator host for reconcilers written as WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "operon", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "OPERON_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// When to use colours and terminal escapes (log lines, `operon test`'s
    /// verdicts and diffs, `operon dev`'s table redrawn in place): `auto`
    /// only when the output is a terminal (and `NO_COLOR` is unset).
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto, env = "OPERON_COLOR")]
    pub color: Color,
    #[command(subcommand)]
    pub command: Command,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Color {
    /// Only on a terminal, unless `NO_COLOR` is set.
    Auto,
    /// Always, even into a pipe or a file.
    Always,
    /// Never.
    Never,
}

impl Color {
    /// Whether output to a stream that `is_terminal` (or not) is coloured.
    pub fn enabled(self, is_terminal: bool) -> bool {
        match self {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    /// For stdout.
    pub fn stdout(self) -> bool {
        self.enabled(std::io::IsTerminal::is_terminal(&std::io::stdout()))
    }

    /// For stderr.
    pub fn stderr(self) -> bool {
        self.enabled(std::io::IsTerminal::is_terminal(&std::io::stderr()))
    }
}

/// `operon new --sdk`: where the new project's SDK comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SdkFrom {
    /// Copied into the project, named by local path.
    Vendored,
    /// The package of the language's registry (not published yet).
    Registry,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run reconcilers from module files against the current kubeconfig (or
    /// the in-cluster config). A module file that changes is loaded and
    /// swapped in; a bad new version is refused and the old one keeps running.
    Run(Box<RunArgs>),
    /// The development loop: a local control plane (or --kubeconfig), the
    /// CRDs, the example guests built and loaded as Reconcilers with
    /// sample objects, a live status table, and rebuild-test-swap when a
    /// project's sources change. Ctrl-C stops it all.
    Dev(dev::Args),
    /// Run request fixtures through a module offline and compare outcomes
    /// with the expected files beside them. Without arguments: the project
    /// in the current directory (its built component and its fixtures).
    Test {
        /// The module (a .wasm component); default: the project's `dist/<name>.wasm`.
        module: Option<PathBuf>,
        /// Directory of fixtures: NAME.yaml with NAME.expected.yaml beside it;
        /// default: the project's fixtures.
        fixtures: Option<PathBuf>,
        /// The project whose component and fixtures to use.
        #[arg(long, default_value = ".")]
        project: PathBuf,
        /// Write the expected files from the current outcomes instead of
        /// comparing (review the result before committing it).
        #[arg(long)]
        update: bool,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Create a guest project: a minimal working reconciler, a CRD, a fixture
    /// with its expected outcome, the language's build file, and the
    /// language's SDK of this release, copied into the project and named by
    /// local path (no SDK package is published on any registry yet).
    New {
        /// The language: rust, python, ts, go or c.
        #[arg(long)]
        lang: crate::project::Lang,
        /// The new project's directory (its last component names the
        /// reconciler unless --name is given).
        dir: PathBuf,
        /// The reconciler's name.
        #[arg(long)]
        name: Option<String>,
        /// Where the SDK comes from. `vendored`: its sources, copied into
        /// the project from this binary; it builds offline with nothing but
        /// the language's tools. `registry`: the package of the language's
        /// registry (crates.io, PyPI, npm, the Go module proxy, or the C
        /// archive through pkg-config), which none of them serves yet: only
        /// for a registry or mirror you point the language's tools at.
        #[arg(long, value_enum, default_value_t = SdkFrom::Vendored)]
        sdk: SdkFrom,
        /// The same as `--sdk vendored`, the default.
        #[arg(long, hide = true, conflicts_with = "sdk")]
        vendor: bool,
        /// The API group of the kind it reconciles (as kubebuilder's
        /// `create api --group`, here the whole group: demo.example.com).
        #[arg(long, default_value = "demo.operon.dev")]
        group: String,
        /// The API version of that kind.
        #[arg(long = "version", default_value = "v1alpha1")]
        api_version: String,
        /// The kind (UpperCamelCase); the CRD, sample, fixtures and source
        /// are written for it.
        #[arg(long, default_value = "Greeting")]
        kind: String,
    },
    /// Build the project in DIR (default: the current directory) into a
    /// component, with its language's toolchain.
    Build {
        /// The project directory (holding operon.toml).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Where to write the component (default: DIR/dist/<name>.wasm).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Show every tool's command line and output.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Print the CustomResourceDefinitions of `Reconciler` and
    /// `ClusterReconciler` (YAML), or write them into a directory.
    Crds {
        /// Write `operon.dev_reconcilers.yaml` and
        /// `operon.dev_clusterreconcilers.yaml` here instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Write the generated references (every flag, metric family and
    /// status reason) into a directory: what `cargo xtask docs` runs.
    #[command(hide = true)]
    Reference {
        /// Where to write `cli.md`, `metrics.md` and `troubleshooting.md`.
        #[arg(long)]
        out_dir: PathBuf,
    },
    /// Pre-initialise a core module as wizer does, with a WASI that is the
    /// same on every run: what `operon build` of a TypeScript project hands
    /// componentize-js as its wizer, so the same sources give the same bytes.
    #[command(hide = true)]
    Wizer(wizer::Args),
    /// Print this binary's version, the WIT contract it speaks (which guests
    /// it runs) and the version of each language's SDK package it names.
    Version {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the readiness the host hands a guest for each object in FILE
    /// (`-`: standard input; one object or a list, YAML or JSON), as a JSON
    /// list of `{status, message}` — kstatus's verdicts, by the host's own
    /// rules. SDK test runners use it so that native tests see what a
    /// component would see.
    Readiness {
        /// The file of objects.
        file: PathBuf,
    },
    /// The last reconciles of one parent, from the recordings of `operon run
    /// --record DIR`: the module version that ran, its outbound calls and
    /// their answers, and which fields of its children and status changed
    /// from one reconcile to the next.
    Explain {
        /// The parent, as KIND/NAME (e.g. `dnsrecord/www`).
        target: String,
        /// The directory `operon run --record` wrote.
        #[arg(long, value_name = "DIR")]
        recordings: PathBuf,
        /// The parent's namespace (default: any).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// How many reconciles to show, the newest.
        #[arg(long, default_value_t = 10)]
        last: usize,
    },
    /// Sign modules and files so that a host requiring signatures
    /// (`spec.module.verify`, `--require-signed-modules`) loads them: FILE.sig
    /// beside each file, or a cosign signature pushed beside an OCI module
    /// (`--oci`). `--new-key NAME` makes the key pair first.
    Sign(sign::SignArgs),
    /// Check signatures as a host does before loading a module: each FILE
    /// against FILE.sig, or an OCI module's cosign signature (`--oci`).
    Verify(sign::VerifyArgs),
    /// Print a module's manifest, WIT version, imports, size and compile time.
    Inspect {
        /// The module (a .wasm component).
        module: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Entry point of the `operon` binary.
pub fn main() -> ExitCode {
    crate::install_crypto_provider();
    let cli = Cli::parse();
    // `operon dev` shows a table; the host's info lines would bury it.
    let _telemetry = if matches!(cli.command, Command::Dev(_)) {
        dev::init_logging(cli.color.stderr());
        None
    } else {
        match crate::telemetry::init(cli.log_format, Some(cli.color.stderr())) {
            Ok(guard) => Some(guard),
            Err(e) => {
                eprintln!("warning: {e}");
                None
            }
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How `operon build` and `operon dev` build: with this binary as the
/// TypeScript build's wizer (`operon wizer`), so its builds are reproducible.
pub(crate) fn build_options() -> crate::project::BuildOptions {
    crate::project::BuildOptions { wizer: std::env::current_exe().ok(), ..Default::default() }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(mut args) => {
            for warning in args.resolve_deprecated() {
                tracing::warn!("{warning}");
            }
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(run::run(*args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Dev(args) => dev::run(args, cli.color),
        Command::Test { module, fixtures, project, update, mut limits } => {
            for warning in limits.resolve_deprecated() {
                eprintln!("warning: {warning}");
            }
            let mut lock = None;
            let (module, fixtures) = match (module, fixtures) {
                (Some(m), Some(f)) => (m, f),
                (module, None) => {
                    let p = crate::project::Project::open(&project)?;
                    // Wait for a build of the project in progress (`operon dev`'s, say).
                    lock = Some(p.lock(&mut |line| eprintln!("operon test: {line}"))?);
                    let module = module.unwrap_or_else(|| p.default_output());
                    if !module.exists() {
                        anyhow::bail!("{} does not exist yet; build it with `operon build`", module.display());
                    }
                    (module, p.fixtures())
                }
                (None, Some(_)) => anyhow::bail!("give the module too: operon test MODULE FIXTURES"),
            };
            let runtime = Runtime::new(runtime::Config::default())?;
            let module = load(&runtime, &module, limits.limits())?;
            drop(lock);
            let options = crate::fixtures::Options { update, color: cli.color.stdout() };
            let report = crate::fixtures::run_dir_with(&module, &fixtures, options, &mut std::io::stdout())?;
            Ok(if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::New { lang, dir, name, sdk: from, vendor: _, group, api_version, kind } => {
            let parent = crate::project::ParentKind { group, version: api_version, kind };
            let source = match from {
                SdkFrom::Vendored => crate::project::SdkSource::Vendored,
                SdkFrom::Registry => crate::project::SdkSource::Registry,
            };
            crate::project::scaffold_kind(lang, &dir, name.as_deref(), source, &parent)?;
            let sdk = crate::project::sdk::package(lang);
            println!("created a {lang} reconciler in {}", dir.display());
            match (source, sdk.published) {
                (crate::project::SdkSource::Vendored, _) => println!(
                    "the SDK ({} {}) is vendored in the project and named by local path: \
                     no registry is asked for it",
                    sdk.name, sdk.version
                ),
                (crate::project::SdkSource::Registry, true) => {
                    println!("it depends on the SDK package: {} (from {})", sdk.requirement, sdk.registry)
                }
                (crate::project::SdkSource::Registry, false) => println!(
                    "it depends on the SDK package: {} (from {}), which is NOT published there: \
                     point the language's tools at a registry that serves it, or use the default \
                     (`--sdk vendored`)",
                    sdk.requirement, sdk.registry
                ),
            }
            println!("next:\n  cd {}\n  operon build\n  operon test", dir.display());
            println!("building needs: {}", lang.requirements());
            Ok(ExitCode::SUCCESS)
        }
        Command::Build { dir, output, verbose } => {
            let project = crate::project::Project::open(&dir)?;
            let options = crate::project::BuildOptions { output, verbose, ..build_options() };
            let built = crate::project::build(&project, &options, &mut |line| eprintln!("operon build: {line}"))?;
            println!(
                "{} ({} bytes{}) in {:.1}s",
                built.path.display(),
                built.size,
                if built.changed { "" } else { ", unchanged" },
                built.elapsed.as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds { out_dir } => {
            let files = crate::reconciler::crd::render()?;
            match out_dir {
                Some(dir) => {
                    for (name, text) in files {
                        let path = dir.join(name);
                        crate::project::write_if_changed(&path, text.as_bytes())?;
                        println!("{}", path.display());
                    }
                }
                None => {
                    for (_, text) in files {
                        print!("---\n{text}");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Reference { out_dir } => {
            std::fs::create_dir_all(&out_dir)?;
            for (name, text) in reference::files() {
                let path = out_dir.join(name);
                crate::project::write_if_changed(&path, text.as_bytes())?;
                println!("{}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Wizer(args) => {
            wizer::run(args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Version { json } => {
            print!("{}", version(json)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Sign(args) => {
            let lines = tokio::runtime::Runtime::new()?.block_on(sign::sign(args))?;
            for line in lines {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify(args) => {
            let lines = tokio::runtime::Runtime::new()?.block_on(sign::verify(args))?;
            for line in lines {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Readiness { file } => {
            println!("{}", readiness(&file)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain { target, recordings, namespace, last } => {
            print!("{}", explain::explain(&recordings, &target, namespace.as_deref(), last)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect { module, json } => {
            // No artifact cache: the compile time shown is the real one.
            let runtime = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() })?;
            let module = load(&runtime, &module, Limits::default())?;
            if json {
                println!("{}", serde_json::to_string_pretty(module.info())?);
            } else {
                print!("{}", describe(&module));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `operon readiness FILE`: each object's verdict, as a JSON list.
fn readiness(file: &Path) -> anyhow::Result<String> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?
    };
    let json = file.extension().is_some_and(|e| e == "json");
    let value: serde_json::Value = operon_contract::fixture::parse(&text, json)
        .map_err(|e| anyhow::anyhow!("{}: not YAML or JSON objects: {e}", file.display()))?;
    let objects = match value {
        serde_json::Value::Array(list) => list,
        one => vec![one],
    };
    let verdicts: Vec<operon_contract::Readiness> = objects.iter().map(operon_contract::Readiness::of).collect();
    Ok(serde_json::to_string(&verdicts)?)
}

/// Read and load a module file, with the path in the error.
pub fn load(runtime: &Runtime, path: &Path, limits: Limits) -> anyhow::Result<Module> {
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    runtime.load(&bytes, limits).map_err(|e| anyhow::anyhow!("loading {}: {e}", path.display()))
}

/// The text form of `operon inspect`.
fn describe(module: &Module) -> String {
    let info = module.info();
    let m = &info.manifest;
    let list = |kinds: &mut dyn Iterator<Item = String>| {
        let v: Vec<String> = kinds.collect();
        if v.is_empty() { "-".to_string() } else { v.join(", ") }
    };
    format!(
        "name:         {}\n\
         reconciles:   {}\n\
         owns:         {}\n\
         watches:      {}\n\
         reads:        {}\n\
         finalizer:    {}\n\
         wit:          {}@{} (host runs {})\n\
         digest:       {}\n\
         size:         {} bytes\n\
         compile time: {:.1} ms\n\
         wasi:         {}\n\
         imports:      {}\n\
         exports:      {}\n",
        m.name,
        m.for_kind,
        list(&mut m.owns.iter().map(ToString::to_string)),
        list(&mut m.watches.iter().map(|w| format!("{} ({:?})", w.kind, w.mapping))),
        list(&mut m.reads.iter().map(ToString::to_string)),
        m.finalizer.as_deref().unwrap_or("-"),
        runtime::WIT_PACKAGE,
        info.wit_version,
        runtime::WIT_VERSIONS_RUN.join(" and "),
        info.digest,
        info.size,
        info.compile_time.as_secs_f64() * 1000.0,
        if info.uses_wasi { "yes (no files, no environment, no sockets; stdio captured)" } else { "no" },
        list(&mut info.imports.iter().cloned()),
        list(&mut info.exports.iter().cloned()),
    )
}

/// `operon version`: the binary, the contract and the SDK packages.
fn version(json: bool) -> anyhow::Result<String> {
    let packages = crate::project::sdk::packages();
    let contract = format!("{}@{}", runtime::WIT_PACKAGE, runtime::WIT_VERSION);
    if json {
        let sdks: Vec<serde_json::Value> = packages
            .iter()
            .map(|p| {
                serde_json::json!({
                    "lang": p.lang.as_str(), "name": p.name, "version": p.version,
                    "registry": p.registry, "requirement": p.requirement, "published": p.published,
                })
            })
            .collect();
        let value = serde_json::json!({
            "operon": env!("CARGO_PKG_VERSION"),
            "contract": {"package": runtime::WIT_PACKAGE, "version": runtime::WIT_VERSION, "runs": runtime::WIT_VERSIONS_RUN},
            "sdks": sdks,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let runs: Vec<String> = runtime::WIT_VERSIONS_RUN
        .iter()
        .map(|v| {
            let mut it = v.split('.');
            let (major, minor) = (it.next().unwrap_or("0"), it.next().unwrap_or("0"));
            if major == "0" { format!("{major}.{minor}.x") } else { format!("{major}.x") }
        })
        .collect();
    let runs = runs.join(" and ");
    let mut out = format!(
        "operon {}\ncontract {contract} (runs guests built for {} {runs})\n\
         SDKs (`operon new` vendors these sources into every project; `--sdk registry` names the package):\n",
        env!("CARGO_PKG_VERSION"),
        runtime::WIT_PACKAGE,
    );
    for p in &packages {
        let version = if p.lang == crate::project::Lang::Go { format!("v{}", p.version) } else { p.version.clone() };
        let status = if p.published { "published on" } else { "not published on" };
        out.push_str(&format!("  {:<7}{:<19}{:<9}{status} {}\n", p.lang.as_str(), p.name, version, p.registry));
    }
    if packages.iter().all(|p| !p.published) {
        out.push_str(
            "no SDK package, chart or image of this release is published: build them from a checkout \
             (`cargo xtask packages`, `cargo xtask image`)\n",
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
