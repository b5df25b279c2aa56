//! One `operon run --reconcilers` process as a replica of a Deployment runs
//! it, for the suites that need several (the lifecycle across replicas,
//! hand-overs): it acts on the Reconcilers labelled for its test
//! (`operon.dev/test=<namespace>`), scraped on its own metrics port,
//! stopped with SIGTERM or SIGKILL, killed when dropped, its log's tail
//! shown when its test fails.
//!
//! The process is the binary under test, or `$OPERON_BIN` when set (to run
//! the scenarios against another build): the flags are those every build
//! takes.

use super::{eventually, free_port, http_get};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// The `operon` binary replicas run.
pub fn operon_bin() -> PathBuf {
    std::env::var_os("OPERON_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_operon")))
}

/// Whether that binary serves /metrics over HTTPS by default (and so takes
/// `--metrics-secure=false`); older builds serve plain HTTP.
fn secure_by_default() -> bool {
    static SECURE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SECURE.get_or_init(|| {
        let help = Command::new(operon_bin()).args(["run", "--help"]).output().expect("running operon run --help");
        String::from_utf8_lossy(&help.stdout).contains("--metrics-secure")
    })
}

/// A serving certificate for 127.0.0.1 and its CA, in a directory as a
/// mounted Secret holds them (`tls.crt`, `tls.key`, `ca.crt`): what the
/// replicas of the Helm chart share.
pub fn cert_dir() -> tempfile::TempDir {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca_cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    dir
}

/// How a replica is started: [`Replica::options`], then [`Options::start`].
pub struct Options<'a> {
    plane: &'a operon_envtest::ControlPlane,
    suite: &'a str,
    name: &'a str,
    ns: &'a str,
    /// `--leader-elect --lease-per-reconciler` with this lease and retry
    /// period (Leases in the test's namespace).
    leases: Option<(Duration, Duration)>,
    certs: Option<&'a Path>,
    extra: Vec<&'a str>,
    log_filter: &'a str,
}

impl<'a> Options<'a> {
    /// Per-Reconciler Leases of `lease` (renew deadline ¾ of it) renewed
    /// every `retry`.
    pub fn leases(mut self, lease: Duration, retry: Duration) -> Self {
        self.leases = Some((lease, retry));
        self
    }

    /// Serve webhooks with the certificates in `certs` (from [`cert_dir`])
    /// at `https://127.0.0.1:<its own port>` (the default
    /// `--webhook-url-host`).
    pub fn webhooks(mut self, certs: Option<&'a Path>) -> Self {
        self.certs = certs;
        self
    }

    /// More flags.
    pub fn args(mut self, extra: &[&'a str]) -> Self {
        self.extra.extend_from_slice(extra);
        self
    }

    /// `RUST_LOG` unless `$OPERON_TEST_LOG` says otherwise.
    pub fn log_filter(mut self, filter: &'a str) -> Self {
        self.log_filter = filter;
        self
    }

    pub fn start(self) -> Replica {
        let (metrics, webhooks) = (free_port(), free_port());
        let log = std::env::temp_dir().join(format!("operon-{}-{}-{}.log", self.suite, self.ns, self.name));
        let mut cmd = Command::new(operon_bin());
        cmd.args(["run", "--reconcilers", "--reconciler-selector", &format!("operon.dev/test={}", self.ns)])
            // The operator opens loopback, where the tests serve modules.
            .arg("--egress-allow=*,127.0.0.1")
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}"), "--health-probe-bind-address", "0"]);
        if secure_by_default() {
            cmd.arg("--metrics-secure=false");
        }
        if let Some((lease, retry)) = self.leases {
            // The duration flags in the units every build takes.
            let (renew, retry) = ((lease * 3 / 4).as_millis().to_string(), retry.as_millis().to_string());
            cmd.args(["--leader-elect", "--lease-per-reconciler", "--leader-election-namespace", self.ns])
                .args(["--lease-duration-secs", &lease.as_secs().to_string()])
                .args(["--renew-deadline-ms", &renew, "--retry-period-ms", &retry]);
        }
        if let Some(dir) = self.certs {
            cmd.args(["--webhook-bind-address", &format!("127.0.0.1:{webhooks}")])
                .args(["--webhook-cert-dir", dir.to_str().unwrap()]);
        }
        let child = cmd
            .args(&self.extra)
            .env("KUBECONFIG", self.plane.kubeconfig_path())
            .env("HOSTNAME", self.name)
            .env("RUST_LOG", std::env::var("OPERON_TEST_LOG").unwrap_or_else(|_| self.log_filter.into()))
            .env("OPERON_LOG_FORMAT", "text")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting operon");
        Replica { name: self.name.into(), child, metrics, webhooks, log }
    }
}

/// One running replica.
pub struct Replica {
    pub name: String,
    child: Child,
    /// Its metrics (and `/readyz`) port.
    pub metrics: u16,
    /// Its webhook port (bound when started with [`Options::webhooks`]).
    pub webhooks: u16,
    pub log: PathBuf,
}

impl Replica {
    /// A replica named `name` (its `HOSTNAME`) of `suite`'s test in `ns`,
    /// against `plane`.
    pub fn options<'a>(
        plane: &'a operon_envtest::ControlPlane,
        suite: &'a str,
        name: &'a str,
        ns: &'a str,
    ) -> Options<'a> {
        Options { plane, suite, name, ns, leases: None, certs: None, extra: Vec::new(), log_filter: "info,kube=warn" }
    }

    /// `/readyz` answered 200; `None` while it cannot be reached.
    pub async fn ready(&self) -> Option<bool> {
        let r = http_get(format!("http://127.0.0.1:{}/readyz", self.metrics)).await.ok()?;
        Some(r.status().is_success())
    }

    /// Until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        eventually(&format!("{} ready", self.name), Duration::from_secs(60), || async {
            self.ready().await.filter(|r| *r)
        })
        .await;
    }

    /// The sum of a metric family's series matching `filter`; `None` when
    /// the endpoint cannot be scraped.
    pub async fn metric(&self, family: &str, filter: &str) -> Option<f64> {
        let text = self.scrape().await?;
        Some(
            text.lines()
                .filter(|l| l.starts_with(family) && l.contains(filter))
                .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
                .sum(),
        )
    }

    /// Whether a series of `family` matching `filter` is exported (`None`
    /// when the endpoint cannot be scraped).
    pub async fn has_series(&self, family: &str, filter: &str) -> Option<bool> {
        let text = self.scrape().await?;
        Some(text.lines().any(|l| l.starts_with(family) && l.contains(filter)))
    }

    async fn scrape(&self) -> Option<String> {
        let r = http_get(format!("http://127.0.0.1:{}/metrics", self.metrics)).await.ok()?;
        r.text().await.ok()
    }

    /// Send SIGTERM (a rolling update's stop).
    pub fn signal_term(&self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
    }

    /// Wait for the process to end, at most 60 s.
    pub async fn exited(&mut self) -> ExitStatus {
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{} did not stop within 60 s after SIGTERM; log: {}", self.name, self.log.display());
    }

    /// SIGTERM, and wait for the process to end.
    pub async fn terminate(&mut self) -> ExitStatus {
        self.signal_term();
        self.exited().await
    }

    /// SIGKILL: no release of anything.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test shows what each replica said (CI keeps no files).
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!("---- the last {} lines of {}'s log ({}):", tail.len(), self.name, self.log.display());
            for line in tail {
                eprintln!("{}", line.chars().take(600).collect::<String>());
            }
        }
    }
}
