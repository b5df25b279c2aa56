//! Starting, reaching and stopping one control plane.

use crate::assets;
use crate::certs::{Pki, PkiFiles};
use crate::kubeconfig;
use crate::process::{Process, Watchdog};
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, conditions};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Set to `1` to keep the temporary directory (certificates, kubeconfig,
/// etcd data, logs) after the control plane stops; its path is printed.
pub const KEEP_ENV: &str = "OPERON_ENVTEST_KEEP";

/// How to start a [`ControlPlane`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Also run kube-controller-manager with only the garbage-collector and
    /// namespace controllers, so ownerReference cascading deletion and
    /// namespace deletion happen. Nothing else runs unless
    /// [`workloads`](Self::workloads) is set: no Pods get scheduled, no
    /// ReplicaSets scale, no service-account tokens appear.
    pub controller_manager: bool,
    /// Make workloads progress as on a real cluster: a Deployment gets its
    /// ReplicaSet and Pods, the Pods are scheduled onto fake Nodes and
    /// become Running and Ready, and the Deployment becomes Available.
    /// Implies [`controller_manager`](Self::controller_manager).
    ///
    /// This adds:
    /// - the deployment and replicaset controllers to kube-controller-manager;
    /// - kube-scheduler, with the default profile;
    /// - kwok, which plays the kubelet for the [`nodes`](Self::nodes) fake
    ///   Nodes it creates, with kwok's default stages: a bound Pod becomes
    ///   Running and Ready at once, a Job's Pod then Succeeded, and a deleted
    ///   Pod goes at once (there is no kubelet to wait for).
    ///
    /// Pods need no ServiceAccount, so the serviceaccount and token
    /// controllers stay off: the `ServiceAccount` admission plugin is
    /// disabled in every mode, so Pods get neither a default
    /// `serviceAccountName` checked against existing accounts nor a token
    /// volume, and fake Nodes mount nothing anyway. Likewise no Endpoints,
    /// EndpointSlices, Jobs or StatefulSets controllers: add them here when a
    /// test needs them, not before, since each costs CPU on every change.
    ///
    /// Needs `kube-scheduler` and `kwok` beside the other binaries; the
    /// cache that `cargo xtask envtest` fills has them, setup-envtest's
    /// directories do not.
    pub workloads: bool,
    /// How many fake Nodes to create with [`workloads`](Self::workloads):
    /// 3 by default, at most 100. Each has room for 10 000 Pods, 10 000 CPUs
    /// and 64 TiB of memory, so capacity never decides a test; several
    /// Nodes let spreading and anti-affinity behave.
    pub nodes: usize,
    /// Keep state here instead of in a new temporary directory. The
    /// `pki/` and `etcd/` subdirectories are wiped on start, so every start
    /// is a fresh cluster; the directory itself survives [`Drop`].
    pub dir: Option<PathBuf>,
    /// Where the binaries are; by default [`assets::find`] decides.
    pub assets: Option<PathBuf>,
    /// How long each binary may take to become ready.
    pub timeout: Duration,
    /// CustomResourceDefinitions to install, and wait for, before the
    /// controller manager starts. The garbage collector discovers new kinds
    /// only every 30 seconds, so ownerReferences to a kind installed later
    /// take that long to be honoured.
    pub crds: Vec<CustomResourceDefinition>,
    /// More kube-apiserver flags, after the harness's own (e.g.
    /// `--admission-control-config-file=…`, for a test of what the API
    /// server presents to webhooks).
    pub apiserver_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            controller_manager: false,
            workloads: false,
            nodes: 3,
            dir: None,
            assets: None,
            timeout: Duration::from_secs(90),
            crds: Vec::new(),
            apiserver_args: Vec::new(),
        }
    }
}

impl Options {
    /// The default options plus kube-controller-manager.
    pub fn with_controller_manager() -> Self {
        Self { controller_manager: true, ..Self::default() }
    }

    /// The default options plus everything that makes Deployments and their
    /// Pods progress; see [`Options::workloads`].
    pub fn with_workloads() -> Self {
        Self { controller_manager: true, workloads: true, ..Self::default() }
    }

    /// These options with `count` fake Nodes; see [`Options::nodes`].
    pub fn nodes(mut self, count: usize) -> Self {
        self.nodes = count;
        self
    }

    /// These options plus a CRD to install at start; see [`Options::crds`].
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }

    /// These options plus one kube-apiserver flag; see
    /// [`Options::apiserver_args`].
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// The binaries these options need, in start order.
    fn binaries(&self) -> Vec<&'static str> {
        let mut names = vec![assets::ETCD, assets::KUBE_APISERVER];
        if self.controller_manager || self.workloads {
            names.push(assets::KUBE_CONTROLLER_MANAGER);
        }
        if self.workloads {
            names.extend([assets::KUBE_SCHEDULER, assets::KWOK]);
        }
        names
    }
}

/// A running etcd and kube-apiserver (and optionally
/// kube-controller-manager, kube-scheduler and kwok) on loopback ports,
/// reachable as a cluster admin.
///
/// # Guarantees
///
/// The binaries die with this process: on [`Drop`], and also when the
/// process exits without running destructors (a `static`, a panic that
/// aborts, a signal). See the `process` module.
///
/// # Caveats
///
/// Unless [`Options::workloads`] is set, there are no Nodes and no
/// scheduler: Pods stay Pending. Only the controllers named in
/// [`Options::controller_manager`] and [`Options::workloads`] run.
#[doc(alias = "envtest")]
pub struct ControlPlane {
    watchdog: Option<Watchdog>,
    /// How each process was started, to restart it.
    commands: Vec<Spawned>,
    /// In start order: etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler, kwok. Behind a lock so that [`ControlPlane::stop`]
    /// can stop them through a shared reference.
    processes: std::sync::Mutex<Vec<Process>>,
    dir: Dir,
    server: String,
    ca_der: Vec<u8>,
    pki: PkiFiles,
    kubeconfig_path: PathBuf,
    kubeconfig: String,
}

/// How a process was started.
#[derive(Clone)]
struct Spawned {
    name: &'static str,
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

enum Dir {
    /// Removed on drop.
    Temp(tempfile::TempDir),
    /// Kept: `OPERON_ENVTEST_KEEP` or [`Options::dir`].
    Kept(PathBuf),
}

impl Dir {
    fn path(&self) -> &Path {
        match self {
            Dir::Temp(dir) => dir.path(),
            Dir::Kept(path) => path,
        }
    }
}

impl ControlPlane {
    /// Starts a control plane and waits until the API server's `/readyz`
    /// answers `ok` (and the controller manager's and scheduler's `/healthz`,
    /// and every fake Node is Ready, if asked for).
    ///
    /// Blocks the calling thread for a few seconds; fine from inside an async
    /// test, as the waiting happens on a thread of its own.
    ///
    /// # Errors
    ///
    /// When the binaries cannot be found (the message names the missing ones
    /// and says to run `cargo xtask envtest`), or one of them exits or is not
    /// ready within [`Options::timeout`]; the message then ends with its log.
    pub fn start(options: Options) -> Result<Self> {
        if options.workloads && !(1..=MAX_NODES).contains(&options.nodes) {
            bail!("Options::nodes is {}; with workloads it must be between 1 and {MAX_NODES}", options.nodes);
        }
        let binaries = options.binaries();
        let assets = match &options.assets {
            Some(dir) => {
                assets::check(dir, &binaries)?;
                dir.clone()
            }
            None => assets::find(&binaries)?,
        };
        // Free ports are picked before the binaries bind them, so another
        // process can take one in between; that is rare, and worth a retry.
        let mut attempt = 1;
        loop {
            match Self::start_once(&options, &assets) {
                Err(e) if attempt < 3 && format!("{e:#}").contains("address already in use") => {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    fn start_once(options: &Options, assets: &Path) -> Result<Self> {
        let dir = match &options.dir {
            Some(dir) => {
                for stale in ["pki", "etcd"] {
                    let path = dir.join(stale);
                    if path.exists() {
                        std::fs::remove_dir_all(&path)
                            .with_context(|| format!("could not clear {}", path.display()))?;
                    }
                }
                std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
                Dir::Kept(dir.clone())
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("operon-envtest-")
                    .tempdir()
                    .context("could not create a temporary directory for the control plane")?;
                if keep() {
                    let path = temp.keep();
                    eprintln!("operon-envtest: {KEEP_ENV}=1, keeping {}", path.display());
                    Dir::Kept(path)
                } else {
                    Dir::Temp(temp)
                }
            }
        };
        let root = dir.path().to_path_buf();
        let watchdog = Watchdog::start(match &dir {
            Dir::Temp(temp) => Some(temp.path()),
            Dir::Kept(_) => None,
        })?;

        let pki = Pki::generate().context("could not generate certificates")?;
        let files = pki.write(&root.join("pki"))?;
        let [etcd_port, peer_port, apiserver_port, kcm_port, scheduler_port] = free_ports()?;
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let kubeconfig_path = root.join("kubeconfig");
        let kubeconfig = kubeconfig::render(&server, &files)?;
        std::fs::write(&kubeconfig_path, &kubeconfig)
            .with_context(|| format!("could not write {}", kubeconfig_path.display()))?;

        let mut plane = Self {
            watchdog: Some(watchdog),
            commands: Vec::new(),
            processes: std::sync::Mutex::new(Vec::new()),
            dir,
            server,
            ca_der: pki.ca_der().to_vec(),
            pki: files,
            kubeconfig_path,
            kubeconfig,
        };
        let deadline = || Instant::now() + options.timeout;

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        plane.spawn(
            assets::ETCD,
            assets,
            vec![
                "--name=envtest".into(),
                format!("--data-dir={}", root.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=envtest={peer_url}"),
                // Durability is worthless in a throwaway cluster; speed is not.
                "--unsafe-no-fsync=true".into(),
                // 8 GiB instead of 2: 10 000 custom objects with 30 000
                // children, their managedFields and the revisions kept until
                // the API server compacts (every 5 minutes) pass 2 GiB under
                // churn, and then every write fails with "database space
                // exceeded". A quota, not an allocation: the file grows as
                // needed.
                "--quota-backend-bytes=8589934592".into(),
                "--log-level=warn".into(),
            ],
            Vec::new(),
        )?;
        let etcd_addr = SocketAddr::from(([127, 0, 0, 1], etcd_port));
        plane.wait("etcd to accept connections", deadline(), || async move {
            TcpStream::connect_timeout(&etcd_addr, Duration::from_millis(200)).map(drop).map_err(|e| e.to_string())
        })?;

        let pki = plane.pki.clone();
        // Needs the service-account controller, which does not run.
        let mut disabled_admission = vec!["ServiceAccount"];
        if options.workloads {
            // It taints each new Node not-ready, and only the node-lifecycle
            // controller, which does not run, would lift the taint: the fake
            // Nodes would never take a Pod.
            disabled_admission.push("TaintNodesByCondition");
        }
        plane.spawn(
            assets::KUBE_APISERVER,
            assets,
            vec![
                "--advertise-address=127.0.0.1".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={apiserver_port}"),
                format!("--etcd-servers={etcd_url}"),
                format!("--cert-dir={}", root.join("pki").display()),
                format!("--tls-cert-file={}", pki.serving_cert.display()),
                format!("--tls-private-key-file={}", pki.serving_key.display()),
                format!("--client-ca-file={}", pki.ca_cert.display()),
                "--authorization-mode=RBAC".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", pki.service_account_pub.display()),
                format!("--service-account-signing-key-file={}", pki.service_account_key.display()),
                // A /16: 65 534 ClusterIPs, room for a Service per object in
                // tests and benchmarks with more than 10 000 parents (the
                // common /24 holds 254). Pods of fake Nodes get addresses
                // from 10.128.0.0/9, apart from this. No flag speeds up
                // allocation: 1.34 takes one lock around each ClusterIP's
                // IPAddress create, so Services come at ~100 a second.
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--allow-privileged=true".into(),
                format!("--disable-admission-plugins={}", disabled_admission.join(",")),
                // Loopback addresses are not valid Endpoints for `kubernetes`.
                "--endpoint-reconciler-type=none".into(),
                // The default 400 + 200 are the total seats that API Priority
                // and Fairness shares out, and a client outside
                // system:masters (an operator under test with its own
                // identity) gets only a slice of them; tens of thousands of
                // creates from such a client would be throttled with 429s.
                // The admin certificate is exempt either way.
                "--max-requests-inflight=3000".into(),
                "--max-mutating-requests-inflight=1000".into(),
                // An hour by default. Each scheduled Pod and each scaled
                // ReplicaSet leaves an Event; at scale they would be most of
                // etcd. A test that looks at Events looks within minutes.
                "--event-ttl=15m".into(),
                // No `--watch-cache-sizes`: since 1.19 the watch cache grows
                // with the event rate on its own, and a watcher that still
                // falls behind gets 410 Gone and re-lists, which clients must
                // handle anyway.
            ]
            .into_iter()
            .chain(options.apiserver_args.iter().cloned())
            .collect(),
            Vec::new(),
        )?;
        let config = plane.config();
        plane.wait("kube-apiserver /readyz", deadline(), || get(config.clone(), "/readyz"))?;
        if !options.crds.is_empty() {
            let crds = options.crds.clone();
            plane.wait("the CRDs to be Established", deadline(), || install(config.clone(), crds.clone()))?;
        }

        let kubeconfig = plane.kubeconfig_path.display().to_string();
        if options.controller_manager || options.workloads {
            let mut controllers = vec!["garbage-collector-controller", "namespace-controller"];
            if options.workloads {
                controllers.extend(["deployment-controller", "replicaset-controller"]);
            }
            plane.spawn(
                assets::KUBE_CONTROLLER_MANAGER,
                assets,
                vec![
                    format!("--kubeconfig={kubeconfig}"),
                    format!("--authentication-kubeconfig={kubeconfig}"),
                    format!("--authorization-kubeconfig={kubeconfig}"),
                    format!("--controllers={}", controllers.join(",")),
                    "--leader-elect=false".into(),
                    "--bind-address=127.0.0.1".into(),
                    format!("--secure-port={kcm_port}"),
                    format!("--cert-dir={}", root.join("pki").join("kcm").display()),
                    // The default 20 requests a second would take 25 minutes
                    // to garbage-collect 30 000 children, or to create 20 000
                    // Pods. The API server on loopback takes far more.
                    format!("--kube-api-qps={COMPONENT_QPS}"),
                    format!("--kube-api-burst={COMPONENT_BURST}"),
                ],
                Vec::new(),
            )?;
            let healthz = self_signed(kcm_port);
            plane.wait("kube-controller-manager /healthz", deadline(), || get(healthz.clone(), "/healthz"))?;
        }

        if options.workloads {
            // A configuration file, as the `--kube-api-qps` flags of the
            // scheduler are deprecated; it names the kubeconfig itself.
            let scheduler_config = root.join("kube-scheduler.yaml");
            std::fs::write(&scheduler_config, scheduler_config_yaml(&plane.kubeconfig_path)?)
                .with_context(|| format!("could not write {}", scheduler_config.display()))?;
            plane.spawn(
                assets::KUBE_SCHEDULER,
                assets,
                vec![
                    format!("--config={}", scheduler_config.display()),
                    format!("--authentication-kubeconfig={kubeconfig}"),
                    format!("--authorization-kubeconfig={kubeconfig}"),
                    "--bind-address=127.0.0.1".into(),
                    format!("--secure-port={scheduler_port}"),
                    format!("--cert-dir={}", root.join("pki").join("scheduler").display()),
                ],
                Vec::new(),
            )?;
            let healthz = self_signed(scheduler_port);
            plane.wait("kube-scheduler /healthz", deadline(), || get(healthz.clone(), "/healthz"))?;

            let kwok_dir = root.join("kwok");
            std::fs::create_dir_all(&kwok_dir).with_context(|| format!("could not create {}", kwok_dir.display()))?;
            let stages = kwok_dir.join("kwok.yaml");
            std::fs::write(&stages, assets::KWOK_STAGES)
                .with_context(|| format!("could not write {}", stages.display()))?;
            plane.spawn(
                assets::KWOK,
                assets,
                vec![
                    format!("--kubeconfig={kubeconfig}"),
                    format!("--config={}", stages.display()),
                    // Only the Nodes made below; a test's own Node stays its own.
                    format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
                    // As kwokctl does: Leases in kube-node-lease, as a kubelet
                    // keeps them.
                    "--node-lease-duration-seconds=40".into(),
                ],
                // Its work directory holds a `kwok.yaml` it loads by default:
                // ours, not one in the user's ~/.kwok.
                vec![("KWOK_WORKDIR".into(), kwok_dir.display().to_string())],
            )?;
            let nodes = options.nodes;
            plane.wait(&format!("{nodes} fake Nodes to be Ready"), deadline(), || {
                fake_nodes_ready(config.clone(), nodes)
            })?;
        }
        Ok(plane)
    }

    fn spawn(
        &mut self,
        name: &'static str,
        assets: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Result<()> {
        let spawned = Spawned { name, binary: assets.join(name), args, env };
        let watchdog = self.watchdog.as_mut().expect("the watchdog lives until drop");
        let process = Process::spawn(name, &spawned.binary, &spawned.args, &spawned.env, self.dir.path(), watchdog)?;
        self.processes_mut().push(process);
        self.commands.push(spawned);
        Ok(())
    }

    /// Stop kube-apiserver, wait `down_for`, and start it again with the
    /// same port, certificates and etcd, then wait until it is ready.
    /// Clients see refused connections, then a server whose watch cache
    /// starts over, as after a crash or an upgrade. Objects survive (etcd
    /// keeps running), and the other processes (controller manager,
    /// scheduler, kwok) keep running and reconnect on their own, as they
    /// would in a real cluster.
    ///
    /// # Errors
    /// If the API server does not come back within `timeout`.
    pub fn restart_apiserver(&mut self, down_for: Duration, timeout: Duration) -> Result<()> {
        let index = self
            .processes_mut()
            .iter()
            .position(|p| p.name() == assets::KUBE_APISERVER)
            .context("no kube-apiserver in this control plane")?;
        let spawned = self
            .commands
            .iter()
            .find(|c| c.name == assets::KUBE_APISERVER)
            .cloned()
            .context("kube-apiserver was not started by this control plane")?;
        self.processes_mut()[index].stop();
        std::thread::sleep(down_for);
        let watchdog = self.watchdog.as_mut().expect("the watchdog lives until drop");
        let process =
            Process::spawn(spawned.name, &spawned.binary, &spawned.args, &spawned.env, self.dir.path(), watchdog)?;
        self.processes_mut()[index] = process;
        let config = self.config();
        self.wait("kube-apiserver /readyz after a restart", Instant::now() + timeout, || get(config.clone(), "/readyz"))
    }

    /// Polls `probe` until it succeeds, failing early if a process exits.
    fn wait<F: Future<Output = Result<(), String>>>(
        &mut self,
        what: &str,
        deadline: Instant,
        mut probe: impl FnMut() -> F + Send,
    ) -> Result<()> {
        let processes = self.processes.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        on_own_thread(move || async move {
            loop {
                for process in processes.iter_mut() {
                    process.check().with_context(|| format!("while waiting for {what}"))?;
                }
                let last = match probe().await {
                    Ok(()) => return Ok(()),
                    Err(e) => e,
                };
                if Instant::now() > deadline {
                    let logs = processes
                        .iter()
                        .map(|p| format!("--- last lines of {}.log:\n{}", p.name(), p.tail(25)))
                        .collect::<Vec<_>>()
                        .join("\n");
                    bail!("timed out waiting for {what} (last answer: {last})\n{logs}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    /// A fresh client, authenticated as a cluster admin (`system:masters`).
    ///
    /// Make one per test: a `kube::Client` belongs to the tokio runtime it
    /// was made on, and each `#[tokio::test]` has its own.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or if the TLS configuration is rejected.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config())
            .unwrap_or_else(|e| panic!("could not make a client for {}: {e}", self.server))
    }

    /// The client configuration behind [`client`](Self::client), to adjust
    /// (timeouts, impersonation) before making a client.
    pub fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.server.parse().expect("a loopback URL parses"));
        config.root_cert = Some(vec![self.ca_der.clone()]);
        config.auth_info.client_certificate = Some(self.pki.admin_cert.display().to_string());
        config.auth_info.client_key = Some(self.pki.admin_key.display().to_string());
        config
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Path of an admin kubeconfig, e.g. for `kubectl --kubeconfig` or a
    /// process under test. It refers to certificate files beside it.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The contents of [`kubeconfig_path`](Self::kubeconfig_path).
    pub fn kubeconfig(&self) -> &str {
        &self.kubeconfig
    }

    /// The directory holding certificates, etcd data and the binaries' logs
    /// (`etcd.log`, `kube-apiserver.log`, `kube-controller-manager.log`,
    /// `kube-scheduler.log`, `kwok.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process ids of the running binaries, in start order (etcd,
    /// kube-apiserver, then those the options asked for:
    /// kube-controller-manager, kube-scheduler, kwok); for diagnostics.
    pub fn pids(&self) -> Vec<u32> {
        self.processes().iter().map(Process::id).collect()
    }

    /// The last `lines` lines of each running binary's log, in start order,
    /// for a failing test's message.
    pub fn logs(&self, lines: usize) -> String {
        self.processes()
            .iter()
            .map(|p| format!("--- last lines of {}.log:\n{}", p.name(), p.tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl ControlPlane {
    /// Stop every binary (as [`Drop`] does) while others may still hold a
    /// reference: what a shared control plane nobody uses any more does
    /// (`shared_named`). Clients of it then see refused connections. Its
    /// etcd data goes at once; the rest of its directory when it is dropped
    /// (or the process exits: the watchdog removes it).
    pub fn stop(&self) {
        for process in self.processes().iter_mut().rev() {
            process.stop();
        }
        // etcd's write-ahead log alone preallocates 64 MiB.
        let _ = std::fs::remove_dir_all(self.dir.path().join("etcd"));
    }

    fn processes(&self) -> std::sync::MutexGuard<'_, Vec<Process>> {
        self.processes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn processes_mut(&mut self) -> &mut Vec<Process> {
        self.processes.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The watchdog first, so it cannot act on pids reaped below.
        drop(self.watchdog.take());
        for process in self.processes_mut().iter_mut().rev() {
            process.stop();
        }
        if let Dir::Kept(path) = &self.dir
            && keep()
        {
            eprintln!("operon-envtest: kept {}", path.display());
        }
        // A `Dir::Temp` is removed when the field drops, after this.
    }
}

fn keep() -> bool {
    std::env::var(KEEP_ENV).is_ok_and(|v| v == "1")
}

/// `GET path` with `config`; `Ok` on a 2xx answer.
async fn get(config: kube::Config, path: &str) -> Result<(), String> {
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let request = http::Request::get(path).body(Vec::new()).map_err(|e| e.to_string())?;
    client.request_text(request).await.map(drop).map_err(|e| e.to_string())
}

/// Applies `crds` and succeeds once all are Established.
async fn install(config: kube::Config, crds: Vec<CustomResourceDefinition>) -> Result<(), String> {
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let api = kube::Api::<CustomResourceDefinition>::all(client);
    let apply = PatchParams::apply("operon-envtest").force();
    for crd in &crds {
        let name = crd.metadata.name.as_deref().ok_or("a CRD without a name")?;
        let applied =
            api.patch(name, &apply, &Patch::Apply(crd)).await.map_err(|e| format!("applying CRD {name}: {e}"))?;
        if !conditions::is_crd_established().matches_object(Some(&applied)) {
            return Err(format!("CRD {name} is not Established yet"));
        }
    }
    Ok(())
}

/// The Service ClusterIP range; see the API server's flags.
const SERVICE_CIDR: &str = "10.0.0.0/16";

/// Requests a second, and burst, that kube-controller-manager and
/// kube-scheduler may send; see their flags.
const COMPONENT_QPS: u32 = 1000;
const COMPONENT_BURST: u32 = 2000;

/// The annotation by which kwok picks the Nodes it manages.
const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// The most fake Nodes: each takes a /16 of 10.128.0.0/9 for its Pods.
const MAX_NODES: usize = 100;

/// The name of the `index`th fake Node.
fn fake_node_name(index: usize) -> String {
    format!("kwok-node-{index}")
}

/// The `index`th fake Node, as a kubelet would register it, plus kwok's
/// annotation. No taints, so any Pod fits; a Pod CIDR of its own, so the
/// addresses kwok hands out do not collide with ClusterIPs.
fn fake_node(index: usize) -> Node {
    let name = fake_node_name(index);
    let labels = [
        ("kubernetes.io/hostname", name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("type", "kwok"),
    ];
    let capacity: BTreeMap<String, Quantity> = [("cpu", "10k"), ("memory", "64Ti"), ("pods", "10k")]
        .into_iter()
        .map(|(resource, amount)| (resource.to_owned(), Quantity(amount.to_owned())))
        .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()),
            annotations: Some(BTreeMap::from([
                (KWOK_NODE_ANNOTATION.to_owned(), "fake".to_owned()),
                // No TTL on cached objects for this Node, as kwok's own docs set.
                ("node.alpha.kubernetes.io/ttl".to_owned(), "0".to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(format!("10.{}.0.0/16", 128 + index)),
            pod_cidrs: Some(vec![format!("10.{}.0.0/16", 128 + index)]),
            ..NodeSpec::default()
        }),
        // Kept on create, as for a kubelet's registration; kwok fills in the
        // rest (conditions, addresses, nodeInfo).
        status: Some(NodeStatus {
            allocatable: Some(capacity.clone()),
            capacity: Some(capacity),
            ..NodeStatus::default()
        }),
    }
}

/// Creates the fake Nodes that do not exist yet, and succeeds once kwok has
/// made every one Ready.
async fn fake_nodes_ready(config: kube::Config, count: usize) -> Result<(), String> {
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let api = kube::Api::<Node>::all(client);
    let mut not_ready = Vec::new();
    for index in 0..count {
        let name = fake_node_name(index);
        let node = match api.get_opt(&name).await.map_err(|e| format!("getting Node {name}: {e}"))? {
            Some(node) => node,
            None => {
                api.create(&PostParams::default(), &fake_node(index))
                    .await
                    .map_err(|e| format!("creating Node {name}: {e}"))?;
                not_ready.push(name);
                continue;
            }
        };
        let ready = node
            .status
            .and_then(|status| status.conditions)
            .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if !ready {
            not_ready.push(name);
        }
    }
    if not_ready.is_empty() { Ok(()) } else { Err(format!("not Ready yet: {}", not_ready.join(", "))) }
}

/// kube-scheduler's configuration: the kubeconfig, no leader election, and
/// the same request rate as the controller manager (its default, 50 a
/// second, binds 20 000 Pods in 7 minutes).
fn scheduler_config_yaml(kubeconfig: &Path) -> Result<String> {
    // One plain or quoted scalar, never a block: it is put inline below.
    let kubeconfig = serde_saphyr::to_string_with_options(
        &kubeconfig.display().to_string(),
        serde_saphyr::ser_options! { prefer_block_scalars: false },
    )?;
    let kubeconfig = kubeconfig.trim_end();
    Ok(format!(
        r"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
  qps: {COMPONENT_QPS}
  burst: {COMPONENT_BURST}
leaderElection:
  leaderElect: false
"
    ))
}

/// A client configuration for a component's own HTTPS port on loopback,
/// whose serving certificate is self-signed at start.
fn self_signed(port: u16) -> kube::Config {
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().expect("a loopback URL parses"));
    config.accept_invalid_certs = true;
    config
}

/// Runs the future `make` returns to completion on a new thread with its own
/// runtime, so that blocking on it is fine even from inside another runtime.
fn on_own_thread<T: Send, F: Future<Output = T>>(make: impl FnOnce() -> F + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime builds")
                    .block_on(make())
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Distinct free loopback ports, held open together while picking so that
/// no two are the same.
fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("could not find a free loopback port")?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}
