//! The `operon` command line: `run`, `test`, `new`, `build`, `inspect`.

pub mod dev;
pub mod reference;
mod run;

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

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run reconcilers from module files against the current kubeconfig (or
    /// the in-cluster config). A module file that changes is loaded and
    /// swapped in; a bad new version is refused and the old one keeps running.
    Run(RunArgs),
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
    /// with its expected outcome, and the language's build file.
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

/// Flags of `operon run`, named as controller-runtime's where they match.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// A module file to run (repeat for several controllers); swapped when
    /// the file changes.
    #[arg(long = "module")]
    pub modules: Vec<PathBuf>,
    /// Run the controllers that `Reconciler` and `ClusterReconciler`
    /// resources describe (their CRDs must be installed: `operon crds`).
    /// The default when no --module is given.
    #[arg(long)]
    pub reconcilers: bool,
    /// Accept Reconcilers whose module is a file on this host
    /// (`spec.module.path`): for development only.
    #[arg(long)]
    pub allow_module_paths: bool,
    /// Only Reconcilers whose labels match this selector (several Operon
    /// installations sharing a cluster).
    #[arg(long)]
    pub reconciler_selector: Option<String>,
    /// With --leader-elect: one Lease per controller instead of one for the
    /// process, so several replicas share the controllers out.
    #[arg(long, requires = "leader_elect")]
    pub lease_per_reconciler: bool,
    /// Refuse namespaced Reconcilers that do not name a ServiceAccount to
    /// write as (multi-tenant clusters: the host then needs little more
    /// than watch and impersonate).
    #[arg(long)]
    pub require_service_account: bool,
    /// Most children one outcome may hold.
    #[arg(long, default_value_t = crate::apply::Policy::DEFAULT_MAX_DESIRED)]
    pub max_children_per_outcome: usize,
    /// Most events one outcome may hold.
    #[arg(long, default_value_t = crate::apply::Policy::DEFAULT_MAX_EVENTS)]
    pub max_events_per_outcome: usize,
    /// Shortest requeue-after honoured, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub requeue_floor_ms: u64,
    /// Requeue-afters per second per controller (the requeue budget); a
    /// guest asking every parent to run again sooner is spread out to this
    /// rate. 0 for no limit.
    #[arg(long, default_value_t = 10.0)]
    pub requeue_qps: f64,
    /// Burst of that bucket.
    #[arg(long, default_value_t = 100)]
    pub requeue_burst: u32,
    /// Guest time each controller's calls may use, as a CPU quantity (`250m`,
    /// `0.5`, `1`; `0` for no limit); a Reconciler's `spec.limits.cpu`
    /// overrides it. A controller past it waits before its next reconcile.
    #[arg(long, default_value = "250m", value_parser = cpu_quantity)]
    pub guest_cpu: f64,
    /// Guest seconds a controller may save up and spend at once.
    #[arg(long, default_value_t = 2)]
    pub guest_cpu_burst_secs: u64,
    /// The most a Reconciler's `spec.limits.cpu` may ask, as a CPU quantity
    /// (`0` for no ceiling); a Reconciler asking more (or `0`, no limit,
    /// under a ceiling) is refused with `InvalidSpec`.
    #[arg(long, default_value = "2", value_parser = cpu_quantity)]
    pub max_guest_cpu: f64,
    /// Retries per second per controller (controller-runtime's overall
    /// bucket); 0 for no limit.
    #[arg(long, default_value_t = 10.0)]
    pub retry_qps: f64,
    /// Burst of that bucket.
    #[arg(long, default_value_t = 100)]
    pub retry_burst: u32,
    /// Deadline of one whole reconcile (reads, guest call, writes), in seconds.
    #[arg(long, default_value_t = 60)]
    pub reconcile_timeout_secs: u64,
    /// Watch and act in this namespace only (default: all namespaces).
    #[arg(long, env = "OPERON_NAMESPACE")]
    pub namespace: Option<String>,
    /// Reconciles of different objects running at once, per controller.
    #[arg(long, default_value_t = 1)]
    pub max_concurrent_reconciles: usize,
    /// Use a Lease so that only one replica reconciles.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the Lease (default: the namespace flag, else the
    /// in-cluster namespace, else `default`).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, default_value = "operon-leader")]
    pub leader_election_id: String,
    /// How long a Lease is valid, in seconds.
    #[arg(long, default_value_t = 15)]
    pub lease_duration_secs: u64,
    /// How long the leader keeps trying to renew before it steps down, in
    /// milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub renew_deadline_ms: u64,
    /// How often candidates and the leader retry, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    pub retry_period_ms: u64,
    /// Where to serve /metrics (and /healthz, /readyz); `0` to disable.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: String,
    /// Where to serve /healthz and /readyz, if not only on the metrics address.
    #[arg(long)]
    pub health_probe_bind_address: Option<String>,
    /// How long in-flight reconciles may run on shutdown, in seconds.
    #[arg(long, default_value_t = 30)]
    pub shutdown_timeout_secs: u64,
    /// Most memory the host lets any guest grow to, in MiB.
    #[arg(long, default_value_t = 512)]
    pub max_guest_memory_mib: u64,
    /// Where to serve admission webhooks over HTTPS (e.g. `:9443`), for
    /// modules that export validate/mutate; `0` serves none.
    #[arg(long, default_value = "0")]
    pub webhook_bind_address: String,
    /// A directory holding tls.crt and tls.key (a mounted Secret), reloaded
    /// when they change; a ca.crt beside them becomes the webhook
    /// configurations' caBundle. Without it a CA and a serving certificate
    /// are generated at start, and the configurations are removed on exit
    /// (development).
    #[arg(long)]
    pub webhook_cert_dir: Option<PathBuf>,
    /// How the API server reaches this process directly, as HOST[:PORT]
    /// (clientConfig.url); default 127.0.0.1 and the bound port.
    #[arg(long, conflicts_with = "webhook_service")]
    pub webhook_url_host: Option<String>,
    /// The Service in front of this process, as NAMESPACE/NAME[:PORT]
    /// (clientConfig.service; port 443 by default): in a cluster.
    #[arg(long)]
    pub webhook_service: Option<String>,
    /// What the API server does when a --module's guest cannot answer an
    /// admission request: Fail (deny) or Ignore (allow).
    #[arg(long, default_value = "Fail")]
    pub webhook_failure_policy: crate::webhook::FailurePolicy,
    #[command(flatten)]
    pub limits: LimitArgs,
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

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(run::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Dev(args) => dev::run(args, cli.color),
        Command::Test { module, fixtures, project, update, limits } => {
            let (module, fixtures) = match (module, fixtures) {
                (Some(m), Some(f)) => (m, f),
                (module, None) => {
                    let p = crate::project::Project::open(&project)?;
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
            let options = crate::fixtures::Options { update, color: cli.color.stdout() };
            let report = crate::fixtures::run_dir_with(&module, &fixtures, options, &mut std::io::stdout())?;
            Ok(if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::New { lang, dir, name, group, api_version, kind } => {
            let parent = crate::project::ParentKind { group, version: api_version, kind };
            crate::project::scaffold_kind(lang, &dir, name.as_deref(), &parent)?;
            println!("created a {lang} reconciler in {}", dir.display());
            println!("next:\n  cd {}\n  operon build\n  operon test", dir.display());
            println!("building needs: {}", lang.requirements());
            Ok(ExitCode::SUCCESS)
        }
        Command::Build { dir, output, verbose } => {
            let project = crate::project::Project::open(&dir)?;
            let options = crate::project::BuildOptions { output, verbose };
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

/// `--guest-cpu`: a Kubernetes CPU quantity.
fn cpu_quantity(text: &str) -> Result<f64, String> {
    crate::controller::parse_cpu(text).ok_or_else(|| format!("{text:?} is not a CPU quantity such as 250m, 0.5 or 1"))
}
