//! `operon dev`: the whole development loop in one process. A cluster (a
//! local control plane, or `--kubeconfig`), the CRDs, the example guests
//! built with their toolchains and loaded as `Reconciler` resources from
//! files, the manager and the Reconciler controller, a live status table,
//! and a watcher that rebuilds, tests and hot-swaps a project when its
//! sources change. `--once` turns it into a check: every sample parent
//! Ready, or a non-zero exit that says why.
//!
//! **Nothing is silent.** A project's fixtures run before it is loaded (a
//! project whose fixtures fail is shown and held back until they pass); an
//! object of a loaded kind outside the namespaces its Reconciler acts in is
//! named, with the namespace that would act; the table shows `Degraded`
//! and rollbacks with their reason; the kubectl hint names the kinds
//! actually loaded.
//!
//! Everything runs in-process so that one Ctrl-C stops all of it, the
//! control plane included.

mod spec;
mod table;
mod ui;
mod watch;

use crate::contract::{Gvk, Manifest};
use crate::manager::{self, Manager};
use crate::project::{self, Project};
use crate::reconciler;
use crate::runtime::{self, Limits, Runtime};
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
pub use ui::Ui;

/// Field manager of what `operon dev` applies.
const FIELD_MANAGER: &str = "operon-dev";
/// How often `spec.module.path` is checked: a swap shows within a second.
const PATH_POLL: Duration = Duration::from_millis(500);

/// Flags of `operon dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Guest projects (directories holding operon.toml); default: every
    /// `guest-examples/*-webapp` of the repository around the current
    /// directory.
    pub dirs: Vec<PathBuf>,
    /// Use this cluster instead of starting a local control plane.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Exit 0 once every sample parent is Ready, non-zero with the reason
    /// if that does not happen within --timeout; no watching.
    #[arg(long)]
    pub once: bool,
    /// With --once: how long to wait for every parent to become Ready (a
    /// duration, `5m`; a bare number of seconds is still read, deprecated).
    #[arg(long, default_value = "5m", value_parser = timeout)]
    pub timeout: Duration,
    /// Where to serve /metrics; `0` to disable.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_bind_address: String,
    /// Do not apply the sample objects (example.yaml) into the namespaces.
    #[arg(long)]
    pub no_examples: bool,
    /// Hosts the dev host lets grants reach, as `operon run --egress-allow`
    /// reads it. The addresses and CIDRs the projects' `[dev]` egress grants
    /// name are opened as well: in dev, the project file is the operator's
    /// word (a name never reaches loopback or private space: grant the
    /// address).
    #[arg(long, value_name = "HOSTS", value_delimiter = ',', default_value = "*")]
    pub egress_allow: Vec<String>,
    #[command(flatten)]
    pub record: crate::cli::RecordArgs,
}

/// What the dev host lets grants reach: `--egress-allow` and every address
/// or CIDR a loaded project's `[dev]` egress grants name.
fn egress_allowed(flag: &[String], loaded: &[Loaded]) -> Result<crate::egress::grants::Allowed> {
    let mut patterns = flag.to_vec();
    for l in loaded {
        if let Ok(dev) = spec::dev_spec(l.project.name(), &l.project.dir, &l.project.config.dev) {
            patterns.extend(
                dev.egress
                    .iter()
                    .filter(|g| g.host.parse::<ipnet::IpNet>().is_ok() || g.host.parse::<std::net::IpAddr>().is_ok())
                    .map(|g| g.host.clone()),
            );
        }
    }
    crate::egress::grants::Allowed::parse(&patterns).map_err(|e| anyhow::anyhow!("--egress-allow: {e}"))
}

/// `--timeout`: a duration, or (deprecated) a number of seconds.
fn timeout(text: &str) -> Result<Duration, super::BadDuration> {
    match text.parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => super::duration(text),
    }
}

/// Log lines of the host below warnings only (RUST_LOG overrides): the
/// table is what `operon dev` shows.
pub fn init_logging(ansi: bool) {
    // The client's own errors while the control plane starts (its probes
    // before the API server listens) are noise; the host reports what fails.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off,kube_client::client::tls=off")
    });
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}

/// One guest project built for the cluster: loaded as a Reconciler, or
/// held back while its fixtures fail.
pub(crate) struct Loaded {
    pub project: Project,
    /// The namespace of its Reconciler and sample parents.
    pub namespace: String,
    /// The file the Reconciler loads (`spec.module.path`); replaced only by
    /// a build whose fixtures pass.
    pub module_path: PathBuf,
    pub manifest: Manifest,
    /// Names of the sample parents applied into the namespace.
    pub samples: std::sync::Mutex<Vec<String>>,
    /// Why it is not loaded (its fixtures failed), or `None` once its
    /// Reconciler is applied.
    pub held: std::sync::Mutex<Option<String>>,
}

impl Loaded {
    /// Why the project is not loaded, if it is not.
    pub fn held(&self) -> Option<String> {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The sample parents' names.
    pub fn samples(&self) -> Vec<String> {
        self.samples.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Run `operon dev`.
pub fn run(args: Args, color: crate::cli::Color) -> Result<ExitCode> {
    let ui = Ui::new(color);
    let rt = tokio::runtime::Runtime::new()?;
    let roots = project_dirs(&args.dirs)?;
    // Operon's CRDs and every project's parent kind (its crd.yaml).
    let mut crds = operon_crds();
    for dir in &roots {
        if let Ok(p) = Project::open(dir) {
            for file in shared_files(&p, "crd.yaml") {
                for crd in read_objects::<CustomResourceDefinition>(&file)? {
                    if !crds.iter().any(|c| c.metadata.name == crd.metadata.name) {
                        crds.push(crd);
                    }
                }
            }
        }
    }

    // 1. The cluster.
    let (plane, kube_config) = match &args.kubeconfig {
        Some(path) => {
            let config = rt.block_on(async {
                let kubeconfig =
                    kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                    .await
                    .with_context(|| format!("using {}", path.display()))
            })?;
            ui.line(format!("cluster: {} (from {})", config.cluster_url, path.display()));
            (None, config)
        }
        None => {
            let assets = ui.step("control-plane binaries", |progress| operon_envtest::assets::ensure(progress))?;
            let mut options = operon_envtest::Options::with_workloads();
            options.assets = Some(assets);
            // CRDs given at start are known to the garbage collector at once.
            options.crds = crds.clone();
            let plane = ui
                .step("local control plane (etcd, kube-apiserver, scheduler, controllers, kwok nodes)", |_| {
                    operon_envtest::ControlPlane::start(options)
                })?;
            ui.line(format!("cluster: {}", plane.server()));
            let config = plane.config();
            (Some(plane), config)
        }
    };
    let kubeconfig = match (&plane, &args.kubeconfig) {
        (Some(plane), _) => Some(plane.kubeconfig_path().to_path_buf()),
        (None, given) => given.clone(),
    };
    let result = rt.block_on(dev(&ui, &args, &roots, &crds, kube_config, kubeconfig.as_deref()));
    ui.release_table();
    // The control plane stops here, after everything that talks to it.
    drop(rt);
    if let Some(plane) = plane {
        ui.line("stopping the local control plane");
        drop(plane);
    }
    result
}

/// Everything after the cluster exists.
async fn dev(
    ui: &Ui,
    args: &Args,
    roots: &[PathBuf],
    crds: &[CustomResourceDefinition],
    kube_config: kube::Config,
    kubeconfig: Option<&Path>,
) -> Result<ExitCode> {
    let client = kube::Client::try_from(kube_config.clone()).context("building the Kubernetes client")?;

    // 2. CRDs: Operon's and every project's parent kind.
    let names: Vec<String> = crds.iter().filter_map(|c| c.metadata.name.clone()).collect();
    let started = Instant::now();
    install_crds(&client, crds).await?;
    ui.line(format!("✓ CRDs served: {} ({:.1}s)", names.join(", "), started.elapsed().as_secs_f64()));

    // 3. Build every project whose toolchain is present.
    let state_dir = std::env::temp_dir().join(format!("operon-dev-{}", std::process::id()));
    std::fs::create_dir_all(&state_dir).with_context(|| format!("creating {}", state_dir.display()))?;
    let _cleanup = RemoveOnDrop(state_dir.clone());
    let runtime = Runtime::new(runtime::Config::default())?;
    let mut loaded = Vec::new();
    let mut skipped = Vec::new();
    for dir in roots {
        let project = match Project::open(dir) {
            Ok(p) => p,
            Err(e) => {
                skipped.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        let name = project.name().to_string();
        let built = tokio::task::block_in_place(|| {
            ui.step(&format!("build {name} ({})", project.config.lang), |progress| {
                project::build(&project, &project::BuildOptions::default(), progress)
            })
        });
        let built = match built {
            Ok(b) => b,
            Err(e) => {
                skipped.push(format!("{name}: {e}"));
                continue;
            }
        };
        let module_path = state_dir.join(format!("{name}.wasm"));
        std::fs::copy(&built.path, &module_path)
            .with_context(|| format!("copying {} to {}", built.path.display(), module_path.display()))?;
        let module = crate::cli::load(&runtime, &module_path, Limits::default())?;
        // The fixtures gate the first load as they gate every swap.
        let held = match tokio::task::block_in_place(|| watch::fixtures(&project, &module))? {
            watch::Verdict::Passed { passed, .. } => {
                ui.line(format!("✓ {name}: {passed} fixtures passed"));
                None
            }
            watch::Verdict::FixturesFailed { failed, output } => {
                ui.line(format!(
                    "✗ {name}: fixtures failed: {}; not loaded until they pass\n{}",
                    failed.join(", "),
                    output.trim_end()
                ));
                Some(format!("fixtures failed: {}", failed.join(", ")))
            }
        };
        let manifest = (**module.manifest()).clone();
        loaded.push(Loaded {
            namespace: format!("dev-{name}"),
            project,
            module_path,
            manifest,
            samples: Default::default(),
            held: std::sync::Mutex::new(held),
        });
    }
    for s in &skipped {
        ui.line(format!("skipped {s}"));
    }
    if loaded.is_empty() {
        bail!("no project was built, so there is nothing to run");
    }
    let held: Vec<String> =
        loaded.iter().filter_map(|l| l.held().map(|why| format!("{}: {why}", l.project.name()))).collect();
    if args.once && held.len() == loaded.len() {
        ui.line(format!("nothing loaded:\n  {}", held.join("\n  ")));
        return Ok(ExitCode::FAILURE);
    }

    // 4. One namespace per project: its Reconciler and the sample parents.
    for l in loaded.iter().filter(|l| l.held().is_none()) {
        load_project(ui, &client, l, !args.no_examples).await?;
    }
    ui.line(kubectl_hint(&client, &loaded, kubeconfig).await);

    // 5. The manager and the Reconciler lifecycle.
    let record = args.record.recorder()?;
    let config = manager::Config {
        server_addr: parse_addr(&args.metrics_bind_address)?,
        shutdown_timeout: Duration::from_secs(10),
        pipeline: crate::pipeline::Config {
            record,
            egress_allowed: egress_allowed(&args.egress_allow, &loaded)?,
            ..Default::default()
        },
        ..Default::default()
    };
    if let Some(dir) = &args.record.record {
        let example = loaded.first().map(|l| (l.manifest.for_kind.kind.to_lowercase(), l.namespace.clone()));
        let (kind, ns) = example.unwrap_or_default();
        ui.line(format!(
            "recording reconciles in {0} (fixtures for `operon test`); `operon explain {kind}/NAME -n {ns} --recordings {0}` \
             shows a parent's last reconciles",
            dir.display()
        ));
    }
    if let Some(addr) = config.server_addr
        && addr.port() != 0
    {
        ui.line(format!("metrics: http://{addr}/metrics"));
    }
    let manager = Manager::builder(client.clone())
        .config(config)
        .runtime(runtime.clone())
        .add(reconciler::Reconcilers::component(
            reconciler::Config {
                kube_config: Some(kube_config),
                selector: Some(format!("{FIELD_MANAGER}=true")),
                allow_module_paths: true,
                status_period: Duration::from_secs(1),
                path_poll: PATH_POLL,
                instance: FIELD_MANAGER.into(),
                ..Default::default()
            },
            Vec::new(),
        ))
        .build()
        .await?;
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let manager_task = tokio::spawn(manager.run(async move {
        tokio::select! {
            _ = crate::cli::wait_signal() => {}
            _ = finished => {}
        }
    }));

    // 6-8. The table, the watcher, and --once's verdict.
    let loaded = std::sync::Arc::new(loaded);
    let mut status = table::Status::new(client.clone(), loaded.clone());
    let baseline = if args.once { Vec::new() } else { watch::baseline(&loaded).await };
    let watcher = (!args.once).then(|| {
        let loader = watch::Loader { client: client.clone(), examples: !args.no_examples };
        tokio::spawn(watch::run(ui.clone(), runtime.clone(), loaded.clone(), loader, baseline))
    });
    if !args.once {
        ui.line("watching the projects' sources; Ctrl-C stops");
    }
    let deadline = Instant::now() + args.timeout;
    let outcome = loop {
        if manager_task.is_finished() {
            break None;
        }
        let snapshot = status.refresh(ui).await;
        if args.once {
            match &snapshot {
                Ok(s) if s.all_ready() => break Some(Ok(s.summary())),
                Ok(s) if Instant::now() >= deadline => break Some(Err(s.why_not_ready(&status))),
                Err(e) if Instant::now() >= deadline => break Some(Err(format!("cannot read the status: {e:#}"))),
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if let Some(w) = watcher {
        w.abort();
    }
    let _ = finish.send(());
    let managed = manager_task.await;
    ui.release_table();
    match managed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e).context("the manager failed"),
        Err(e) => bail!("the manager panicked: {e}"),
    }
    match outcome {
        None => Ok(ExitCode::SUCCESS),
        Some(Ok(summary)) if !held.is_empty() => {
            ui.line(format!("ready: {summary}"));
            ui.line(format!("not loaded:\n  {}", held.join("\n  ")));
            Ok(ExitCode::FAILURE)
        }
        Some(Ok(summary)) => {
            ui.line(format!("ready: {summary}"));
            Ok(ExitCode::SUCCESS)
        }
        Some(Err(why)) => {
            ui.line(format!("not ready within {:?}:\n{why}", args.timeout));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Apply a project's namespace, its Reconciler and (with `examples`) its
/// sample parents, and say so.
pub(crate) async fn load_project(ui: &Ui, client: &kube::Client, l: &Loaded, examples: bool) -> Result<()> {
    apply_namespace(client, &l.namespace).await?;
    spec::apply_reconciler(client, l, FIELD_MANAGER).await?;
    ui.line(format!(
        "Reconciler {}/{} ← {} ({} {})",
        l.namespace,
        l.project.name(),
        l.module_path.display(),
        l.manifest.for_kind.kind,
        l.manifest.for_kind.group
    ));
    if examples {
        let samples = apply_samples(client, l).await?;
        ui.line(format!("  samples in {}: {}", l.namespace, samples.join(", ")));
        *l.samples.lock().unwrap_or_else(|p| p.into_inner()) = samples;
    }
    *l.held.lock().unwrap_or_else(|p| p.into_inner()) = None;
    Ok(())
}

/// `kubectl get` of the Reconcilers and of the kinds the projects
/// reconcile and own, as the API server names them.
async fn kubectl_hint(client: &kube::Client, loaded: &[Loaded], kubeconfig: Option<&Path>) -> String {
    let mut names = vec!["reconcilers.operon.dev".to_string()];
    for l in loaded {
        for kind in std::iter::once(&l.manifest.for_kind).chain(&l.manifest.owns) {
            let key = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
            let Ok((ar, _)) = kube::discovery::pinned_kind(client, &key).await else { continue };
            let name = if ar.group.is_empty() { ar.plural } else { format!("{}.{}", ar.plural, ar.group) };
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let env = kubeconfig.map(|k| format!("KUBECONFIG={} ", k.display())).unwrap_or_default();
    format!("  kubectl: {env}kubectl get {} -A", names.join(","))
}

/// The Reconciler and ClusterReconciler CRDs.
fn operon_crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![reconciler::crd::Reconciler::crd(), reconciler::crd::ClusterReconciler::crd()]
}

/// The projects to run: the directories given, or the repository's
/// `guest-examples/*-webapp`.
fn project_dirs(given: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if !given.is_empty() {
        return Ok(given.to_vec());
    }
    let cwd = std::env::current_dir()?;
    let examples = cwd
        .ancestors()
        .map(|d| d.join("guest-examples"))
        .chain(std::iter::once(Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-examples")))
        .find(|d| d.is_dir())
        .context("no guest-examples directory here or above; name the project directories: operon dev DIR…")?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&examples)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("-webapp"))
                && p.join("operon.toml").is_file()
        })
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// `name` in the project directory, else beside its fixtures directory
/// (the examples share their CRD and samples in guest-examples/webapp).
fn shared_files(project: &Project, name: &str) -> Vec<PathBuf> {
    let mut candidates = vec![project.dir.join(name)];
    if let Some(parent) = project.fixtures().parent() {
        candidates.push(parent.join(name));
    }
    candidates.into_iter().filter(|p| p.is_file()).take(1).collect()
}

/// Every document of a YAML file.
fn read_objects<T: serde::de::DeserializeOwned>(file: &Path) -> Result<Vec<T>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let values: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).with_context(|| format!("parsing {}", file.display()))?;
    values
        .into_iter()
        .filter(|v| !v.is_null())
        .map(|v| serde_json::from_value(v).with_context(|| format!("an object in {}", file.display())))
        .collect()
}

/// Server-side apply the CRDs and wait until each is Established.
async fn install_crds(client: &kube::Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().context("a CRD without a name")?;
        let mut crd = crd.clone();
        crd.metadata.resource_version = None;
        api.patch(&name, &params, &Patch::Apply(&crd)).await.with_context(|| format!("applying CRD {name}"))?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let current = api.get(&name).await?;
            let established = current
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if Instant::now() > deadline {
                bail!("CRD {name} is not Established after 60s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

async fn apply_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        ..Default::default()
    };
    api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&ns))
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// The API resource of a kind, once the API server serves it.
pub(crate) async fn resource(client: &kube::Client, gvk: &Gvk) -> Result<ApiResource> {
    let gvk = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    let mut tries = 0;
    loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((ar, _)) => return Ok(ar),
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("{} is not served", gvk.kind)),
        }
    }
}

/// Apply the project's sample parents (objects of its reconciled kind in
/// example.yaml) into its namespace; returns their names.
async fn apply_samples(client: &kube::Client, l: &Loaded) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let for_kind = &l.manifest.for_kind;
    let ar = resource(client, for_kind).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &l.namespace, &ar);
    for file in shared_files(&l.project, "example.yaml") {
        for mut obj in read_objects::<DynamicObject>(&file)? {
            let Some(types) = &obj.types else { continue };
            let group = types.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            if group != for_kind.group || types.kind != for_kind.kind {
                continue;
            }
            let name = obj.metadata.name.clone().context("a sample without a name")?;
            obj.metadata.namespace = Some(l.namespace.clone());
            api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&obj))
                .await
                .with_context(|| format!("applying {} {}/{name}", types.kind, l.namespace))?;
            names.push(name);
        }
    }
    Ok(names)
}

/// `host:port`, or `0` for "do not serve".
fn parse_addr(text: &str) -> Result<Option<std::net::SocketAddr>> {
    if text == "0" {
        return Ok(None);
    }
    Ok(Some(text.parse().with_context(|| format!("bad bind address {text:?}"))?))
}

/// Removes a directory when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
