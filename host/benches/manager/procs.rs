//! The contenders as processes: starting and stopping them, telling when
//! they are ready, reading their resource use from `/proc`, scraping their
//! `/metrics`, and collecting the times at which they start reconciles.

use anyhow::{Context as _, Result, bail};
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::Kind;

/// Wall-clock time in nanoseconds since the epoch: the one clock every
/// process on the machine shares.
pub fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

/// Reconcile starts reported by the contenders: (object, wall-clock ns).
/// Operon's object is `namespace/name`, kube-rs's
/// `WebApp.v1alpha1.example.operon.dev/name.namespace`, the Go
/// controller's `namespace/name`.
#[derive(Default)]
pub struct Starts {
    seen: Mutex<Vec<(String, i128)>>,
}

impl Starts {
    pub fn record(&self, object: String, at: i128) {
        self.seen.lock().unwrap().push((object, at));
    }

    /// The first reconcile start of `name` at or after `after`.
    pub fn first_after(&self, name: &str, after: i128) -> Option<i128> {
        let (end, dotted) = (format!("/{name}"), format!("/{name}."));
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|(o, t)| *t >= after && (o.ends_with(&end) || o.contains(&dotted))).map(|(_, t)| *t).min()
    }

    pub fn len(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

// ---------------------------------------------------------------------------
// /proc

/// What `/proc/<pid>` says about one process.
#[derive(Clone, Copy, Default, Debug)]
pub struct ProcStats {
    /// VmRSS, bytes.
    pub rss: u64,
    /// VmHWM (peak RSS), bytes.
    pub hwm: u64,
    /// utime + stime of all its threads, seconds.
    pub cpu: f64,
}

/// `/proc/<pid>/status` and `/proc/<pid>/stat`; zeros if the process is gone.
pub fn proc_stats(pid: u32) -> ProcStats {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3;
    // utime and stime are fields 14 and 15, in USER_HZ (100 on Linux).
    let rest: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
    let ticks = |i: usize| rest.get(i - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    ProcStats { rss: field("VmRSS:"), hwm: field("VmHWM:"), cpu: (ticks(14) + ticks(15)) as f64 / 100.0 }
}

/// Busy CPU seconds of the whole machine (all CPUs: user, nice, system,
/// irq, softirq, steal) from `/proc/stat`.
pub fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> =
        stat.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal
    [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| ticks.get(i)).sum::<u64>() as f64 / 100.0
}

// ---------------------------------------------------------------------------
// HTTP (plain, loopback)

/// GET `path` from `addr`: (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let chunked = head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding: chunked"));
    Ok((code, if chunked { dechunk(body) } else { body.to_string() }))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The sum of the samples of `name` whose labels include `labels`, from
/// Prometheus text.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            if n != name {
                return None;
            }
            let ok = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            ok.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

// ---------------------------------------------------------------------------
// OTLP receiver: Operon's reconcile spans

/// Receives OTLP/HTTP protobuf span exports and records the start of every
/// `reconcile` span (its `object` attribute and `start_time_unix_nano`: the
/// wall-clock time at which the worker opened the span).
pub fn otlp_receiver(starts: Arc<Starts>) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let base = format!("http://{}", listener.local_addr()?);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let starts = starts.clone();
            std::thread::spawn(move || serve_otlp(stream, &starts));
        }
    });
    Ok(base)
}

fn serve_otlp(stream: TcpStream, starts: &Starts) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message as _;
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if reader.get_mut().write_all(ok).is_err() {
            return;
        }
        let Ok(request) = ExportTraceServiceRequest::decode(body.as_slice()) else { continue };
        let spans = request.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans);
        for span in spans.filter(|s| s.name == "reconcile") {
            let object = span.attributes.iter().find(|kv| kv.key == "object").and_then(|kv| {
                match kv.value.as_ref()?.value.as_ref()? {
                    Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                }
            });
            if let Some(object) = object {
                starts.record(object, span.start_time_unix_nano as i128);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Watchdog

/// Kills the contender processes if this program dies without stopping
/// them (as operon-envtest does for the control plane): a `sh` reading pids
/// until its stdin closes.
pub struct Watchdog {
    child: Child,
    pids: ChildStdin,
}

impl Watchdog {
    pub fn start() -> Result<Watchdog> {
        let script = "trap '' INT HUP\npids=\nwhile read -r pid; do pids=\"$pids $pid\"; done\n\
                      if [ -n \"$pids\" ]; then kill -KILL $pids 2>/dev/null; fi\n";
        let mut child = Command::new("sh")
            .args(["-c", script, "bench-manager-watchdog"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the watchdog (sh)")?;
        let pids = child.stdin.take().context("watchdog stdin")?;
        Ok(Watchdog { child, pids })
    }

    fn watch(&mut self, pid: u32) {
        let _ = writeln!(self.pids, "{pid}").and_then(|()| self.pids.flush());
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Every contender was stopped already; don't let it kill reused pids.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Contenders

/// The programs the benchmark runs.
pub struct Bins {
    /// `operon` (this package's binary, built by cargo for the bench).
    pub operon: PathBuf,
    /// `target/guests/rust-webapp.wasm`.
    pub wasm: PathBuf,
    /// This benchmark's own executable (the native controller is a hidden
    /// mode of it).
    pub native: PathBuf,
    /// The controller-runtime program, built with `go build`.
    pub go: PathBuf,
}

/// How to start one contender.
pub struct Launch<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub workers: usize,
    pub kubeconfig: &'a Path,
    /// Report reconcile starts (Operon: OTLP span export; kube-rs: a line
    /// per `reconciling object` span; Go: a debug log line).
    pub instrumented: bool,
    /// Where the process's output goes.
    pub log: PathBuf,
    pub starts: Arc<Starts>,
    /// Operon's OTLP receiver.
    pub otlp: &'a str,
}

/// One running contender.
pub struct Contender {
    pub kind: Kind,
    child: Child,
    stdin: Option<ChildStdin>,
    metrics: Option<SocketAddr>,
    ready: Arc<AtomicBool>,
    counts: Option<mpsc::Receiver<String>>,
    log: PathBuf,
}

impl Contender {
    pub fn spawn(launch: Launch<'_>, bins: &Bins, watchdog: &mut Watchdog) -> Result<Contender> {
        let port = free_port()?;
        let metrics_addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let mut cmd;
        match launch.kind {
            Kind::Operon => {
                cmd = Command::new(&bins.operon);
                cmd.arg("run")
                    .arg("--module")
                    .arg(&bins.wasm)
                    .args(["--namespace", launch.namespace])
                    .args(["--max-concurrent-reconciles", &launch.workers.to_string()])
                    .args(["--metrics-bind-address", &metrics_addr.to_string(), "--metrics-secure=false"])
                    .args(["--health-probe-bind-address", "0"])
                    .env("RUST_LOG", "info");
                if launch.instrumented {
                    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", launch.otlp)
                        .env("OTEL_SERVICE_NAME", "operon-bench")
                        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
                } else {
                    cmd.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT").env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
                }
            }
            Kind::Native => {
                cmd = Command::new(&bins.native);
                cmd.args([crate::NATIVE_MODE, "--namespace", launch.namespace])
                    .args(["--workers", &launch.workers.to_string()]);
                if launch.instrumented {
                    cmd.arg("--record-starts");
                }
            }
            Kind::Go => {
                cmd = Command::new(&bins.go);
                cmd.arg(format!("--kubeconfig={}", launch.kubeconfig.display()))
                    .arg(format!("--namespace={}", launch.namespace))
                    .arg(format!("--max-concurrent-reconciles={}", launch.workers))
                    .arg(format!("--metrics-bind-address={metrics_addr}"))
                    .arg("--health-probe-bind-address=0")
                    .arg("--zap-encoder=json")
                    .arg("--zap-time-encoding=nanos");
                if launch.instrumented {
                    // Development mode: debug level and no log sampling, so
                    // that every "reconcile start" line is written.
                    cmd.args(["--zap-devel=true", "--zap-log-level=debug"]);
                } else {
                    cmd.args(["--zap-devel=false", "--zap-log-level=info"]);
                }
            }
        }
        cmd.env("KUBECONFIG", launch.kubeconfig).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
        watchdog.watch(child.id());
        let log = Arc::new(Mutex::new(
            std::fs::File::create(&launch.log).with_context(|| format!("creating {}", launch.log.display()))?,
        ));
        let ready = Arc::new(AtomicBool::new(false));
        let (counts_tx, counts_rx) = mpsc::channel();
        let kind = launch.kind;
        for (stream, name) in [
            (Box::new(child.stdout.take().context("stdout")?) as Box<dyn std::io::Read + Send>, "stdout"),
            (Box::new(child.stderr.take().context("stderr")?), "stderr"),
        ] {
            let (log, ready, starts, counts_tx) =
                (log.clone(), ready.clone(), launch.starts.clone(), counts_tx.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    parse_line(kind, &line, &ready, &starts, &counts_tx);
                    let _ = writeln!(log.lock().unwrap(), "{name}: {line}");
                }
            });
        }
        let stdin = child.stdin.take();
        Ok(Contender {
            kind,
            child,
            // Operon and Go ignore their stdin; the native controller stops
            // when it closes.
            stdin,
            metrics: (kind != Kind::Native).then_some(metrics_addr),
            ready,
            counts: (kind == Kind::Native).then_some(counts_rx),
            log: launch.log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until the contender's caches have synced and its workers run:
    /// Operon's `/readyz`, the Go controller's "Starting workers" log line,
    /// the native controller's "ready" line (after its stores are ready).
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("{} exited ({status}) before it was ready; log {}", self.kind.label(), self.log.display());
            }
            let ready = match (self.kind, self.metrics) {
                (Kind::Operon, Some(addr)) => http_get(addr, "/readyz").is_ok_and(|(code, _)| code == 200),
                _ => self.ready.load(Ordering::SeqCst),
            };
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{} not ready after {timeout:?}; log {}", self.kind.label(), self.log.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stats(&self) -> ProcStats {
        proc_stats(self.pid())
    }

    /// Reconciles (all results), reconcile errors, and writes by kind, from
    /// the contender itself: `/metrics` for Operon and Go, a `counts` request
    /// on stdin for the native controller.
    pub fn counts(&mut self) -> Result<Counts> {
        if let Some(addr) = self.metrics {
            let (code, text) = http_get(addr, "/metrics")?;
            if code != 200 {
                bail!("{} /metrics answered {code}", self.kind.label());
            }
            let c = |name: &str, labels: &[(&str, &str)]| metric(&text, name, labels) as u64;
            let w = [("controller", "webapp")];
            let reconciles = c("controller_runtime_reconcile_total", &w);
            let errors = c("controller_runtime_reconcile_errors_total", &w);
            return Ok(match self.kind {
                Kind::Operon => Counts {
                    reconciles,
                    errors,
                    finalizer: None,
                    apply: c("operon_apply_total", &[("controller", "webapp"), ("operation", "apply")]),
                    status: c("operon_apply_total", &[("controller", "webapp"), ("operation", "status")]),
                },
                _ => Counts {
                    reconciles,
                    errors,
                    finalizer: Some(c("webapp_writes_total", &[("operation", "finalizer")])),
                    apply: c("webapp_writes_total", &[("operation", "apply")]),
                    status: c("webapp_writes_total", &[("operation", "status")]),
                },
            });
        }
        let (stdin, rx) = (self.stdin.as_mut().context("no stdin")?, self.counts.as_ref().context("no counts")?);
        writeln!(stdin, "counts")?;
        stdin.flush()?;
        let line = rx.recv_timeout(Duration::from_secs(10)).context("the native controller did not answer")?;
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let g = |k: &str| v[k].as_u64().unwrap_or(0);
        Ok(Counts {
            reconciles: g("reconciles"),
            errors: g("errors"),
            finalizer: Some(g("finalizer")),
            apply: g("apply"),
            status: g("status"),
        })
    }

    /// SIGTERM (or, for the native controller, closing its stdin), then
    /// wait up to 30 s before SIGKILL.
    pub fn stop(mut self) -> Result<()> {
        drop(self.stdin.take());
        if self.kind != Kind::Native {
            let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("bench: {} did not stop within 30 s; killing it", self.kind.label());
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

/// Counts a contender reports about itself.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub reconciles: u64,
    pub errors: u64,
    /// Finalizer writes (Operon does not count them; the benchmark counts
    /// the parents that carry the finalizer instead).
    pub finalizer: Option<u64>,
    pub apply: u64,
    pub status: u64,
}

fn parse_line(kind: Kind, line: &str, ready: &AtomicBool, starts: &Starts, counts: &mpsc::Sender<String>) {
    match kind {
        Kind::Operon => {}
        Kind::Native => {
            if line == "ready" {
                ready.store(true, Ordering::SeqCst);
            } else if let Some(rest) = line.strip_prefix("start ") {
                if let Some((at, object)) = rest.split_once(' ')
                    && let Ok(at) = at.parse::<i128>()
                {
                    starts.record(object.to_string(), at);
                }
            } else if let Some(json) = line.strip_prefix("counts ") {
                let _ = counts.send(json.to_string());
            }
        }
        Kind::Go => {
            if line.contains("Starting workers") {
                ready.store(true, Ordering::SeqCst);
            } else if line.contains("\"reconcile start\"")
                && let Ok(v) = serde_json::from_str::<HashMap<String, serde_json::Value>>(line)
                && let (Some(ts), Some(object)) =
                    (v.get("ts").and_then(|t| t.as_i64()), v.get("object").and_then(|o| o.as_str()))
            {
                starts.record(object.to_string(), ts as i128);
            }
        }
    }
}
