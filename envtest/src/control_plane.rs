//! Starting, reaching and stopping one control plane.

use crate::assets;
use crate::certs::{Pki, PkiFiles};
use crate::kubeconfig;
use crate::process::{Process, Watchdog};
use anyhow::{Context, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{Condition, conditions};
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
    /// namespace deletion happen. Nothing else runs: no Pods get scheduled,
    /// no ReplicaSets scale, no service-account tokens appear.
    pub controller_manager: bool,
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
}

impl Default for Options {
    fn default() -> Self {
        Self { controller_manager: false, dir: None, assets: None, timeout: Duration::from_secs(90), crds: Vec::new() }
    }
}

impl Options {
    /// The default options plus kube-controller-manager.
    pub fn with_controller_manager() -> Self {
        Self { controller_manager: true, ..Self::default() }
    }

    /// These options plus a CRD to install at start; see [`Options::crds`].
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }
}

/// A running etcd and kube-apiserver (and optionally
/// kube-controller-manager) on loopback ports, reachable as a cluster admin.
///
/// # Guarantees
///
/// The binaries die with this process: on [`Drop`], and also when the
/// process exits without running destructors (a `static`, a panic that
/// aborts, a signal). See the `process` module.
///
/// # Caveats
///
/// No nodes and no scheduler: Pods stay Pending. Only the controllers named
/// in [`Options::controller_manager`] run.
#[doc(alias = "envtest")]
pub struct ControlPlane {
    watchdog: Option<Watchdog>,
    /// How each process was started (binary and arguments), to restart it.
    commands: Vec<(&'static str, PathBuf, Vec<String>)>,
    /// In start order: etcd, kube-apiserver, kube-controller-manager.
    processes: Vec<Process>,
    dir: Dir,
    server: String,
    ca_der: Vec<u8>,
    pki: PkiFiles,
    kubeconfig_path: PathBuf,
    kubeconfig: String,
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
    /// answers `ok` (and the controller manager's `/healthz`, if asked for).
    ///
    /// Blocks the calling thread for a few seconds; fine from inside an async
    /// test, as the waiting happens on a thread of its own.
    ///
    /// # Errors
    ///
    /// When the binaries cannot be found (the message says to run
    /// `cargo xtask envtest`), or one of them exits or is not ready within
    /// [`Options::timeout`]; the message then ends with its log.
    pub fn start(options: Options) -> Result<Self> {
        let assets = match &options.assets {
            Some(dir) => dir.clone(),
            None => assets::find(options.controller_manager)?,
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
        let [etcd_port, peer_port, apiserver_port, kcm_port] = free_ports()?;
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let kubeconfig_path = root.join("kubeconfig");
        let kubeconfig = kubeconfig::render(&server, &files)?;
        std::fs::write(&kubeconfig_path, &kubeconfig)
            .with_context(|| format!("could not write {}", kubeconfig_path.display()))?;

        let mut plane = Self {
            watchdog: Some(watchdog),
            commands: Vec::new(),
            processes: Vec::new(),
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
                "--log-level=warn".into(),
            ],
        )?;
        let etcd_addr = SocketAddr::from(([127, 0, 0, 1], etcd_port));
        plane.wait("etcd to accept connections", deadline(), || async move {
            TcpStream::connect_timeout(&etcd_addr, Duration::from_millis(200)).map(drop).map_err(|e| e.to_string())
        })?;

        let pki = plane.pki.clone();
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
                // A /16: room for a Service per object in tests and benchmarks
                // with thousands of parents.
                "--service-cluster-ip-range=10.0.0.0/16".into(),
                "--allow-privileged=true".into(),
                // Needs the service-account controller, which does not run.
                "--disable-admission-plugins=ServiceAccount".into(),
                // Loopback addresses are not valid Endpoints for `kubernetes`.
                "--endpoint-reconciler-type=none".into(),
            ],
        )?;
        let config = plane.config();
        plane.wait("kube-apiserver /readyz", deadline(), || get(config.clone(), "/readyz"))?;
        if !options.crds.is_empty() {
            let crds = options.crds.clone();
            plane.wait("the CRDs to be Established", deadline(), || install(config.clone(), crds.clone()))?;
        }

        if options.controller_manager {
            let kubeconfig = plane.kubeconfig_path.display().to_string();
            plane.spawn(
                assets::KUBE_CONTROLLER_MANAGER,
                assets,
                vec![
                    format!("--kubeconfig={kubeconfig}"),
                    format!("--authentication-kubeconfig={kubeconfig}"),
                    format!("--authorization-kubeconfig={kubeconfig}"),
                    "--controllers=garbage-collector-controller,namespace-controller".into(),
                    "--leader-elect=false".into(),
                    "--bind-address=127.0.0.1".into(),
                    format!("--secure-port={kcm_port}"),
                    format!("--cert-dir={}", root.join("pki").join("kcm").display()),
                ],
            )?;
            let mut healthz =
                kube::Config::new(format!("https://127.0.0.1:{kcm_port}").parse().expect("a loopback URL parses"));
            // Its serving certificate is self-signed, made at start.
            healthz.accept_invalid_certs = true;
            plane.wait("kube-controller-manager /healthz", deadline(), || get(healthz.clone(), "/healthz"))?;
        }
        Ok(plane)
    }

    fn spawn(&mut self, name: &'static str, assets: &Path, args: Vec<String>) -> Result<()> {
        let watchdog = self.watchdog.as_mut().expect("the watchdog lives until drop");
        let process = Process::spawn(name, &assets.join(name), &args, self.dir.path(), watchdog)?;
        self.processes.push(process);
        self.commands.push((name, assets.join(name), args));
        Ok(())
    }

    /// Stop kube-apiserver, wait `down_for`, and start it again with the
    /// same port, certificates and etcd, then wait until it is ready.
    /// Clients see refused connections, then a server whose watch cache
    /// starts over, as after a crash or an upgrade. Objects survive (etcd
    /// keeps running).
    ///
    /// # Errors
    /// If the API server does not come back within `timeout`.
    pub fn restart_apiserver(&mut self, down_for: Duration, timeout: Duration) -> Result<()> {
        let index = self
            .processes
            .iter()
            .position(|p| p.name() == assets::KUBE_APISERVER)
            .context("no kube-apiserver in this control plane")?;
        let (name, binary, args) = self
            .commands
            .iter()
            .find(|(n, _, _)| *n == assets::KUBE_APISERVER)
            .cloned()
            .context("kube-apiserver was not started by this control plane")?;
        self.processes[index].stop();
        std::thread::sleep(down_for);
        let watchdog = self.watchdog.as_mut().expect("the watchdog lives until drop");
        self.processes[index] = Process::spawn(name, &binary, &args, self.dir.path(), watchdog)?;
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
        let processes = &mut self.processes;
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
    /// (`etcd.log`, `kube-apiserver.log`, `kube-controller-manager.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process ids of the running binaries, in start order (etcd,
    /// kube-apiserver, kube-controller-manager); for diagnostics.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(Process::id).collect()
    }

    /// The last `lines` lines of each binary's log, for a failing test's
    /// message.
    pub fn logs(&self, lines: usize) -> String {
        self.processes
            .iter()
            .map(|p| format!("--- last lines of {}.log:\n{}", p.name(), p.tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The watchdog first, so it cannot act on pids reaped below.
        drop(self.watchdog.take());
        for process in self.processes.iter_mut().rev() {
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
