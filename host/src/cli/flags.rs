//! The flags of `operon run` and of the commands that load a module, and
//! their value parsers: durations as Go writes them, CPU and byte quantities
//! as Kubernetes does, deprecated flags moved to their successors.

use crate::runtime::Limits;
use clap::ArgAction;
use std::path::PathBuf;
use std::time::Duration;

/// `--record` and its companions, of `operon run` and `operon dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct RecordArgs {
    /// Record reconciles as fixtures in this directory (one subdirectory per
    /// controller): the request, the objects the guest read, its outbound
    /// calls and answers (credentials never), and the outcome — replayed by
    /// `operon test` and every SDK's runner with no cluster and no network,
    /// and read back by `operon explain`.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// With --record: record one reconcile in N (of every controller's).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "record")]
    pub record_every: u64,
    /// With --record: only reconciles of parents whose labels match this
    /// selector (`app=shop,tier in (web)`).
    #[arg(long, value_name = "SELECTOR", requires = "record")]
    pub record_selector: Option<String>,
    /// With --record: the most disk one controller's recordings take, as a
    /// quantity (`64Mi`); past it the oldest recordings are removed.
    #[arg(long, value_name = "SIZE", default_value = "64Mi", value_parser = quantity, requires = "record")]
    pub record_max_size: u64,
}

impl RecordArgs {
    /// The recorder these flags ask for, if any.
    ///
    /// # Errors
    /// A `--record-selector` that is not a label selector.
    pub fn recorder(&self) -> anyhow::Result<Option<std::sync::Arc<crate::pipeline::record::Recorder>>> {
        let Some(dir) = &self.record else { return Ok(None) };
        let mut recorder =
            crate::pipeline::record::Recorder::new(dir.clone(), self.record_every).max_bytes(self.record_max_size);
        if let Some(s) = &self.record_selector {
            let selector =
                crate::contract::Selector::parse(s).map_err(|e| anyhow::anyhow!("--record-selector {s:?}: {e}"))?;
            recorder = recorder.of_parents(selector);
        }
        Ok(Some(std::sync::Arc::new(recorder)))
    }
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

/// A flag that is not a duration.
#[derive(Debug, thiserror::Error)]
pub enum BadDuration {
    /// Not Go's syntax, or a number without its unit.
    #[error("{0:?} is not a duration such as 15s, 500ms or 1m30s")]
    Syntax(String),
    /// Below zero.
    #[error("{0:?} is negative; give a positive duration")]
    Negative(String),
}

/// A duration flag: Go's `time.ParseDuration` syntax (`15s`, `500ms`,
/// `1m30s`, `1.5h`), as controller-runtime's and kubectl's flags take, or
/// `0`.
pub fn duration(text: &str) -> Result<Duration, BadDuration> {
    let syntax = || BadDuration::Syntax(text.to_string());
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    // A number needs its unit: `15` could be seconds or milliseconds.
    if !text.ends_with(|c: char| c.is_ascii_alphabetic()) || text.trim() != text {
        return Err(syntax());
    }
    let parsed: jiff::SignedDuration = text.parse().map_err(|_| syntax())?;
    Duration::try_from(parsed).map_err(|_| BadDuration::Negative(text.to_string()))
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
    /// Hosts any Reconciler may grant its plugin egress to, and module URLs
    /// may be fetched from, as grants name them (`api.example.com`,
    /// `*.example.com`, an address or a CIDR; comma-separated or repeated).
    /// `*`, the default, is any public name or address. Loopback,
    /// link-local (cloud metadata), private, CGNAT and the other special
    /// ranges (and --cluster-cidrs) are reached only where an address or
    /// CIDR entry here names them (`*,127.0.0.1,10.96.0.0/12`): a
    /// Reconciler's grant alone never opens them. A Reconciler granting
    /// more is refused with a condition naming the flag.
    #[arg(long, value_name = "HOSTS", value_delimiter = ',', default_value = "*")]
    pub egress_allow: Vec<String>,
    /// The cluster's Pod and Service CIDRs, when they are not in private
    /// or CGNAT space (which is special already): treated as special, so
    /// egress and module URLs reach them only where --egress-allow names
    /// them.
    #[arg(long, value_name = "CIDRS", value_delimiter = ',')]
    pub cluster_cidrs: Vec<ipnet::IpNet>,
    #[command(flatten)]
    pub record: RecordArgs,
    /// Only Reconcilers whose labels match this selector (several Operon
    /// installations sharing a cluster).
    #[arg(long)]
    pub reconciler_selector: Option<String>,
    /// With --leader-elect: one Lease per controller instead of one for the
    /// process, so several replicas share the controllers out.
    #[arg(long, requires = "leader_elect")]
    pub lease_per_reconciler: bool,
    /// Load only modules signed by one of the --trusted-module-key keys,
    /// from every source (Reconcilers and --module files alike). A
    /// Reconciler's `spec.module.verify` adds its own keys; it can never
    /// lift or replace this requirement. A module that fails is refused
    /// with `UntrustedModule` (a --module file: the host does not start).
    #[arg(long, requires = "trusted_module_keys")]
    pub require_signed_modules: bool,
    /// With --require-signed-modules: a trusted public key (ECDSA P-256,
    /// PEM, as cosign.pub), or a directory of them (`*.pub`, `*.pem`: a
    /// mounted ConfigMap); repeat for several.
    #[arg(long = "trusted-module-key", value_name = "PATH", requires = "require_signed_modules")]
    pub trusted_module_keys: Vec<PathBuf>,
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
    /// Unload a module's compiled code and instances when none of its calls
    /// (reconciles, webhooks) began for this long (`0`: never); its next
    /// call loads them again from the compiled-artifact cache, in
    /// milliseconds. Controllers, queues and caches stay, so nothing is
    /// missed meanwhile; idle plugins cost little memory.
    #[arg(long, default_value = "10m", value_parser = duration)]
    pub unload_idle_after: Duration,
    /// The most disk the compiled-module cache may use, as a quantity
    /// (`2Gi`; `0` for no bound). Past it, the least recently used modules'
    /// artifacts and bytes are removed, never those of a module this host
    /// runs.
    #[arg(long, default_value = "2Gi", value_parser = quantity)]
    pub artifact_cache_max_size: u64,
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
    /// Without it any client that reaches the webhook port is served (a
    /// warning at start says so); restrict the port with a NetworkPolicy
    /// (docs/admission.md says how on each distribution).
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
    /// CustomResourceDefinitions whose conversion a ClusterReconciler
    /// granted conversion may take (`gadgets.example.com`, `*.example.com`
    /// for every CRD of a group, `*` for all; comma-separated or repeated).
    /// None by default: a CRD's conversion runs for every object of its
    /// kind, in every namespace.
    #[arg(long, value_name = "CRDS", value_delimiter = ',')]
    pub conversion_allow: Vec<String>,
    /// Connections the webhook server keeps open at once; one more is
    /// closed as it comes (the API server then applies the webhook's
    /// failurePolicy). Every connection must finish its TLS handshake, send
    /// its headers (or stay idle) and its body within 10 s each.
    #[arg(long, default_value_t = crate::server::Limits::WEBHOOKS.max_connections)]
    pub webhook_max_connections: usize,
    /// Connections one client address may keep open to the webhook server,
    /// so one pod that reaches the port cannot take them all.
    #[arg(long, default_value_t = crate::server::Limits::WEBHOOKS.max_connections_per_client)]
    pub webhook_max_connections_per_client: usize,
    /// How long the webhook server keeps answering after a shutdown signal:
    /// while a Service's endpoints drop this Pod, or until no webhook
    /// configuration names this replica's address (`--webhook-url-host`),
    /// whichever comes first; then it stops taking connections and answers
    /// the calls in flight.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub webhook_shutdown_grace: Duration,
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

/// A flag that is not a CPU quantity.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a CPU quantity such as 250m, 0.5 or 1")]
pub struct BadCpu(String);

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
