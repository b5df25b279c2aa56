//! The `operon` command line: `run`, `test`, `inspect`.

use crate::runtime::{self, Limits, Module, Runtime};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Operon: a Kubernetes operator host for reconcilers written as WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "operon", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "OPERON_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run request fixtures through a module offline and compare outcomes
    /// with the expected files beside them.
    Test {
        /// The module (a .wasm component).
        module: PathBuf,
        /// Directory of fixtures: NAME.yaml with NAME.expected.yaml beside it.
        fixtures: PathBuf,
        /// Write the expected files from the current outcomes instead of
        /// comparing (review the result before committing it).
        #[arg(long)]
        update: bool,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Print a module's manifest, WIT version, imports, size and compile time.
    Inspect {
        /// The module (a .wasm component).
        module: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Sandbox limits for modules loaded from the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct LimitArgs {
    /// Wall-clock limit of one reconcile call, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
    /// Memory limit of one guest instance, in MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: u64,
}

impl LimitArgs {
    /// The runtime limits these flags describe.
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            memory: self.memory_mib << 20,
            ..Limits::default()
        }
    }
}

/// Entry point of the `operon` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Test { module, fixtures, update, limits } => {
            let runtime = Runtime::new(runtime::Config::default())?;
            let module = load(&runtime, &module, limits.limits())?;
            let report = crate::fixtures::run_dir(&module, &fixtures, update, &mut std::io::stdout())?;
            Ok(if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
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

fn load(runtime: &Runtime, path: &Path, limits: Limits) -> anyhow::Result<Module> {
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
         wit:          {}@{} (host speaks {})\n\
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
        runtime::WIT_VERSION,
        info.digest,
        info.size,
        info.compile_time.as_secs_f64() * 1000.0,
        if info.uses_wasi { "yes (no files, no environment, no sockets; stdio captured)" } else { "no" },
        list(&mut info.imports.iter().cloned()),
        list(&mut info.exports.iter().cloned()),
    )
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
