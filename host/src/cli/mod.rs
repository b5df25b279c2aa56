//! The `operon` command line: `run`, `test`, `new`, `build`, `inspect`.

pub mod dev;
#[cfg(test)]
mod knobs;
pub mod reference;
mod run;

pub(crate) use run::wait_signal;

use crate::runtime::{self, Limits, Module, Runtime};
use crate::telemetry::LogFormat;
use clap::{ArgAction, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

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
    /// with its expected outcome, and the language's build file, which
    /// depends on the language's SDK package of this release (crates.io,
    /// PyPI, npm, the Go module proxy, or the C release archive through
    /// pkg-config).
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
        /// Copy the SDK's sources into the project instead of depending on
        /// its package: the project then builds offline, with nothing but
        /// the language's tools.
        #[arg(long)]
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
    /// Print this binary's version, the WIT contract it speaks (which guests
    /// it runs) and the version of each language's SDK package it names.
    Version {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
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
    /// Wall-clock limit of one guest call (a duration: `500ms`, `2s`), as a
    /// Reconciler's `spec.limits.timeout`.
    #[arg(long, default_value = "1s", value_parser = duration)]
    pub guest_timeout: Duration,
    /// Deprecated: --guest-timeout in milliseconds.
    #[arg(long = "timeout-ms", hide = true, conflicts_with = "guest_timeout")]
    pub deprecated_timeout_ms: Option<u64>,
    /// Memory limit of one guest instance, in MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: u64,
}

impl LimitArgs {
    /// The runtime limits these flags describe.
    pub fn limits(&self) -> Limits {
        Limits { timeout: self.guest_timeout, memory: self.memory_mib << 20, ..Limits::default() }
    }

    /// Moves the values of deprecated flags into their successors; returns a
    /// warning for each one used.
    pub fn resolve_deprecated(&mut self) -> Vec<String> {
        let mut warnings = Vec::new();
        deprecated(
            &mut warnings,
            &mut self.guest_timeout,
            self.deprecated_timeout_ms.take(),
            "--timeout-ms",
            "--guest-timeout",
            Duration::from_millis,
        );
        warnings
    }
}

/// The unit a deprecated flag counted in.
type Unit = fn(u64) -> Duration;

/// Move one deprecated flag's value (in its old unit) into its successor.
fn deprecated(
    warnings: &mut Vec<String>,
    successor: &mut Duration,
    old: Option<u64>,
    old_flag: &str,
    new_flag: &str,
    unit: Unit,
) {
    if let Some(value) = old {
        *successor = unit(value);
        warnings.push(format!(
            "{old_flag} is deprecated (removed in the next minor release): use {new_flag}={}",
            format_duration(*successor)
        ));
    }
}

/// A duration as Go prints the short ones: `1m30s`, `15s`, `500ms`.
fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) || ms == 0 {
        return format!("{ms}ms");
    }
    let (h, m, s) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// A duration flag: Go's `time.ParseDuration` syntax (`15s`, `500ms`,
/// `1m30s`, `1.5h`), as controller-runtime's and kubectl's flags take, or
/// `0`.
pub fn duration(text: &str) -> Result<Duration, String> {
    let hint = || format!("{text:?} is not a duration such as 15s, 500ms or 1m30s");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    // A number needs its unit: `15` could be seconds or milliseconds.
    if !text.ends_with(|c: char| c.is_ascii_alphabetic()) || text.trim() != text {
        return Err(hint());
    }
    let parsed: jiff::SignedDuration = text.parse().map_err(|_| hint())?;
    Duration::try_from(parsed).map_err(|_| format!("{text:?} is negative; give a positive duration"))
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
    /// Events per second each controller may record (its outcomes' and the
    /// host's own about its parents); past the burst, what exceeds it is
    /// dropped, counted in `operon_events_dropped_total` and logged.
    #[arg(long, default_value_t = crate::apply::events::Budget::DEFAULT_QPS)]
    pub event_qps: f64,
    /// Events a controller may record at once before --event-qps applies.
    #[arg(long, default_value_t = crate::apply::events::Budget::DEFAULT_BURST)]
    pub event_burst: u32,
    /// Shortest requeue-after honoured.
    #[arg(long, default_value = "100ms", value_parser = duration)]
    pub requeue_floor: Duration,
    /// Deprecated: --requeue-floor in milliseconds.
    #[arg(long = "requeue-floor-ms", hide = true, conflicts_with = "requeue_floor")]
    pub deprecated_requeue_floor_ms: Option<u64>,
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
    /// Guest time a controller may save up and spend at once.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub guest_cpu_burst: Duration,
    /// Deprecated: --guest-cpu-burst in seconds.
    #[arg(long = "guest-cpu-burst-secs", hide = true, conflicts_with = "guest_cpu_burst")]
    pub deprecated_guest_cpu_burst_secs: Option<u64>,
    /// The most a Reconciler's `spec.limits.cpu` may ask, as a CPU quantity
    /// (`0` for no ceiling); a Reconciler asking more (or `0`, no limit,
    /// under a ceiling) is refused with `InvalidSpec`.
    #[arg(long, default_value = "2", value_parser = cpu_quantity)]
    pub max_guest_cpu: f64,
    /// Guest CPU every plugin's calls may use together, as a CPU quantity
    /// (`0` for no host-wide limit): no tenant's share, however many
    /// Reconcilers it has, can take the host's cores from the others.
    #[arg(long, default_value = "2", value_parser = cpu_quantity)]
    pub max_guest_cpu_total: f64,
    /// Guest linear memory every instance together may hold, as a quantity
    /// (`768Mi`, `2Gi`; `0` for no limit). Each call reserves its module's
    /// whole memory limit up front; idle pooled instances hold what they
    /// grew to and are dropped first when memory is short. The default fits
    /// the chart's 1Gi pod limit, leaving 256Mi to the host.
    #[arg(long, default_value = "768Mi", value_parser = quantity)]
    pub max_guest_memory_total: u64,
    /// Guest calls in flight at once, reconciles and admission webhooks of
    /// every plugin together (`0` for no limit).
    #[arg(long, default_value_t = 16)]
    pub max_guest_calls: usize,
    /// The most a Reconciler's `spec.limits.maxOutput` may ask, as a byte
    /// quantity (`64Mi`); a Reconciler asking more is refused with
    /// `InvalidSpec`.
    #[arg(long, default_value = "64Mi", value_parser = quantity)]
    pub max_guest_output: u64,
    /// Largest module the host downloads or reads, from any source (`64Mi`);
    /// a larger one is refused, and the download stopped at this size.
    #[arg(long, default_value = "64Mi", value_parser = quantity)]
    pub max_module_size: u64,
    /// Longest download of a module (a URL or an OCI source); a source that
    /// sends nothing for 15 s (or this, if shorter) is given up too.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub module_fetch_timeout: Duration,
    /// Retries per second per controller (controller-runtime's overall
    /// bucket); 0 for no limit.
    #[arg(long, default_value_t = 10.0)]
    pub retry_qps: f64,
    /// Burst of that bucket.
    #[arg(long, default_value_t = 100)]
    pub retry_burst: u32,
    /// Deadline of one whole reconcile (reads, guest call, writes).
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub reconcile_timeout: Duration,
    /// Deprecated: --reconcile-timeout in seconds.
    #[arg(long = "reconcile-timeout-secs", hide = true, conflicts_with = "reconcile_timeout")]
    pub deprecated_reconcile_timeout_secs: Option<u64>,
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
    /// How long a Lease is valid (non-leaders wait this long after the last
    /// renewal before they take it).
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub leader_elect_lease_duration: Duration,
    /// Deprecated: --leader-elect-lease-duration in seconds.
    #[arg(long = "lease-duration-secs", hide = true, conflicts_with = "leader_elect_lease_duration")]
    pub deprecated_lease_duration_secs: Option<u64>,
    /// How long the leader keeps trying to renew before it steps down.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub leader_elect_renew_deadline: Duration,
    /// Deprecated: --leader-elect-renew-deadline in milliseconds.
    #[arg(long = "renew-deadline-ms", hide = true, conflicts_with = "leader_elect_renew_deadline")]
    pub deprecated_renew_deadline_ms: Option<u64>,
    /// How often candidates and the leader retry.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub leader_elect_retry_period: Duration,
    /// Deprecated: --leader-elect-retry-period in milliseconds.
    #[arg(long = "retry-period-ms", hide = true, conflicts_with = "leader_elect_retry_period")]
    pub deprecated_retry_period_ms: Option<u64>,
    /// Where to serve /metrics (`:8443`, `127.0.0.1:8080`); `0` to disable.
    #[arg(long, default_value = ":8443")]
    pub metrics_bind_address: String,
    /// Serve /metrics over HTTPS, to callers whose bearer token the API
    /// server authenticates (TokenReview) and allows `get` on /metrics
    /// (SubjectAccessReview; the `operon-metrics-reader` ClusterRole).
    /// `--metrics-secure=false` serves plain HTTP to anyone, with /healthz
    /// and /readyz on the same address.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub metrics_secure: bool,
    /// A directory holding the metrics serving certificate, `tls.crt` and
    /// `tls.key` (a mounted Secret), read again when they change; without
    /// it a self-signed certificate is made at start.
    #[arg(long)]
    pub metrics_cert_path: Option<PathBuf>,
    /// Where to serve /healthz and /readyz (plain HTTP, for the kubelet); `0`
    /// to disable.
    #[arg(long, default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// How long in-flight reconciles may run on shutdown.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub graceful_shutdown_timeout: Duration,
    /// Deprecated: --graceful-shutdown-timeout in seconds.
    #[arg(long = "shutdown-timeout-secs", hide = true, conflicts_with = "graceful_shutdown_timeout")]
    pub deprecated_shutdown_timeout_secs: Option<u64>,
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
    /// A PEM file of the CA that signs the API server's client certificate
    /// for webhooks (the `kubeConfigFile` of its AdmissionConfiguration):
    /// then only clients presenting a certificate it signed are served.
    /// Without it any client that reaches the webhook port is served;
    /// restrict the port with a NetworkPolicy.
    #[arg(long)]
    pub webhook_client_ca_file: Option<PathBuf>,
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
    /// Admission calls answered at once, across every plugin, each on a
    /// thread of the webhook server's own; a call beyond is refused at once
    /// (HTTP 429), and the API server applies the webhook's failurePolicy.
    #[arg(long, default_value_t = crate::webhook::Config::DEFAULT_MAX_CONCURRENT)]
    pub webhook_max_concurrent: usize,
    /// Admission calls of one plugin answered at once; beyond, refused as
    /// with --webhook-max-concurrent.
    #[arg(long, default_value_t = crate::webhook::Config::DEFAULT_MAX_CONCURRENT_PER_PLUGIN)]
    pub webhook_max_concurrent_per_plugin: usize,
    #[command(flatten)]
    pub limits: LimitArgs,
}

impl RunArgs {
    /// Moves the values of deprecated flags into their successors; returns a
    /// warning for each one used (they go in the next minor release).
    pub fn resolve_deprecated(&mut self) -> Vec<String> {
        let mut w = self.limits.resolve_deprecated();
        let (secs, ms): (Unit, Unit) = (Duration::from_secs, Duration::from_millis);
        deprecated(
            &mut w,
            &mut self.requeue_floor,
            self.deprecated_requeue_floor_ms.take(),
            "--requeue-floor-ms",
            "--requeue-floor",
            ms,
        );
        deprecated(
            &mut w,
            &mut self.guest_cpu_burst,
            self.deprecated_guest_cpu_burst_secs.take(),
            "--guest-cpu-burst-secs",
            "--guest-cpu-burst",
            secs,
        );
        deprecated(
            &mut w,
            &mut self.reconcile_timeout,
            self.deprecated_reconcile_timeout_secs.take(),
            "--reconcile-timeout-secs",
            "--reconcile-timeout",
            secs,
        );
        deprecated(
            &mut w,
            &mut self.leader_elect_lease_duration,
            self.deprecated_lease_duration_secs.take(),
            "--lease-duration-secs",
            "--leader-elect-lease-duration",
            secs,
        );
        deprecated(
            &mut w,
            &mut self.leader_elect_renew_deadline,
            self.deprecated_renew_deadline_ms.take(),
            "--renew-deadline-ms",
            "--leader-elect-renew-deadline",
            ms,
        );
        deprecated(
            &mut w,
            &mut self.leader_elect_retry_period,
            self.deprecated_retry_period_ms.take(),
            "--retry-period-ms",
            "--leader-elect-retry-period",
            ms,
        );
        deprecated(
            &mut w,
            &mut self.graceful_shutdown_timeout,
            self.deprecated_shutdown_timeout_secs.take(),
            "--shutdown-timeout-secs",
            "--graceful-shutdown-timeout",
            secs,
        );
        w
    }

    /// How /metrics is served, from --metrics-secure and --metrics-cert-path.
    pub fn metrics_serving(&self) -> crate::server::MetricsServing {
        if self.metrics_secure {
            crate::server::MetricsServing::Https { cert_dir: self.metrics_cert_path.clone() }
        } else {
            crate::server::MetricsServing::Http
        }
    }
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
        Command::New { lang, dir, name, vendor, group, api_version, kind } => {
            let parent = crate::project::ParentKind { group, version: api_version, kind };
            crate::project::scaffold_kind(lang, &dir, name.as_deref(), vendor, &parent)?;
            let sdk = crate::project::sdk::package(lang);
            println!("created a {lang} reconciler in {}", dir.display());
            if vendor {
                println!("the SDK ({} {}) is vendored in the project", sdk.name, sdk.version);
            } else {
                println!("it depends on the SDK package: {} (from {})", sdk.requirement, sdk.registry);
            }
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
        Command::Version { json } => {
            print!("{}", version(json)?);
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

/// A flag that is not a CPU quantity.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a CPU quantity such as 250m, 0.5 or 1")]
pub struct BadCpu(String);

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
                    "registry": p.registry, "requirement": p.requirement,
                })
            })
            .collect();
        let value = serde_json::json!({
            "operon": env!("CARGO_PKG_VERSION"),
            "contract": {"package": runtime::WIT_PACKAGE, "version": runtime::WIT_VERSION},
            "sdks": sdks,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let (major, minor) = {
        let mut it = runtime::WIT_VERSION.split('.');
        (it.next().unwrap_or("0"), it.next().unwrap_or("0"))
    };
    let runs = if major == "0" { format!("{major}.{minor}.x") } else { format!("{major}.x") };
    let mut out = format!(
        "operon {}\ncontract {contract} (runs guests built for {} {runs})\n\
         SDKs (what `operon new` depends on; `operon new --vendor` copies the same sources):\n",
        env!("CARGO_PKG_VERSION"),
        runtime::WIT_PACKAGE,
    );
    for p in &packages {
        let version = if p.lang == crate::project::Lang::Go { format!("v{}", p.version) } else { p.version.clone() };
        out.push_str(&format!("  {:<7}{:<19}{:<9}{}\n", p.lang.as_str(), p.name, version, p.registry));
    }
    Ok(out)
}

/// `--guest-cpu`: a Kubernetes CPU quantity.
fn cpu_quantity(text: &str) -> Result<f64, BadCpu> {
    crate::pipeline::parse_cpu(text).ok_or_else(|| BadCpu(text.to_string()))
}

/// A flag that is not a byte quantity.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a byte quantity such as 64Mi, 512Ki, 2Gi or 1048576")]
pub struct BadQuantity(String);

/// `--max-guest-memory-total`, `--max-module-size`, `--max-guest-output`:
/// a byte quantity as Kubernetes writes one (binary suffixes), in bytes.
fn quantity(text: &str) -> Result<u64, BadQuantity> {
    crate::reconciler::settings::parse_quantity(text).ok_or_else(|| BadQuantity(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["operon", "run"].iter().chain(args)).unwrap_or_else(|e| panic!("{e}"));
        match cli.command {
            Command::Run(args) => *args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn durations_should_be_read_as_go_writes_them() {
        assert_eq!(duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("300us"), Ok(Duration::from_micros(300)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        for bad in ["15", "", "s", "-5s", "15 s ", "fifteen seconds"] {
            assert!(duration(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(duration("15").unwrap_err().contains("15s, 500ms or 1m30s"));
    }

    #[test]
    fn run_flags_should_default_as_a_kubebuilder_manager() {
        let args = run_args(&[]);
        assert_eq!(args.metrics_bind_address, ":8443");
        assert!(args.metrics_secure);
        assert_eq!(args.health_probe_bind_address, ":8081");
        assert_eq!(args.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(args.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(args.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(args.metrics_serving(), crate::server::MetricsServing::Https { cert_dir: None });
        let plain = run_args(&["--metrics-secure=false"]);
        assert_eq!(plain.metrics_serving(), crate::server::MetricsServing::Http);
        assert!(run_args(&["--metrics-secure"]).metrics_secure);
    }

    #[test]
    fn deprecated_flags_should_still_work_and_name_their_successors() {
        let mut args = run_args(&[
            "--lease-duration-secs=4",
            "--renew-deadline-ms",
            "3000",
            "--retry-period-ms=500",
            "--shutdown-timeout-secs=5",
            "--timeout-ms=250",
        ]);
        let warnings = args.resolve_deprecated();
        assert_eq!(args.leader_elect_lease_duration, Duration::from_secs(4));
        assert_eq!(args.leader_elect_renew_deadline, Duration::from_secs(3));
        assert_eq!(args.leader_elect_retry_period, Duration::from_millis(500));
        assert_eq!(args.graceful_shutdown_timeout, Duration::from_secs(5));
        assert_eq!(args.limits.limits().timeout, Duration::from_millis(250));
        assert_eq!(warnings.len(), 5, "{warnings:?}");
        assert!(warnings.contains(&"--renew-deadline-ms is deprecated (removed in the next minor release): use --leader-elect-renew-deadline=3s".to_string()), "{warnings:?}");
        assert!(warnings.iter().any(|w| w.contains("--guest-timeout=250ms")), "{warnings:?}");
        // Not both at once.
        assert!(
            Cli::try_parse_from(["operon", "run", "--lease-duration-secs=4", "--leader-elect-lease-duration=4s"])
                .is_err()
        );
        assert!(run_args(&[]).resolve_deprecated().is_empty());
    }

    #[test]
    fn deprecated_flags_should_not_be_in_the_help() {
        use clap::CommandFactory as _;
        let mut command = Cli::command();
        let help = command.find_subcommand_mut("run").unwrap().render_long_help().to_string();
        assert!(help.contains("--leader-elect-lease-duration") && !help.contains("--lease-duration-secs"), "{help}");
    }

    #[test]
    fn version_should_name_the_contract_and_every_sdk() {
        let text = version(false).unwrap();
        assert!(text.starts_with(&format!("operon {}\n", env!("CARGO_PKG_VERSION"))), "{text}");
        assert!(text.contains(&format!("contract operon:reconciler@{}", runtime::WIT_VERSION)), "{text}");
        for name in ["operon-sdk", "@operon/sdk", "operon.dev/sdk/go"] {
            assert!(text.contains(name), "{name} missing: {text}");
        }
        let json: serde_json::Value = serde_json::from_str(&version(true).unwrap()).unwrap();
        assert_eq!(json["sdks"].as_array().unwrap().len(), 5);
        assert_eq!(json["contract"]["version"], runtime::WIT_VERSION);
    }
}
