//! `cargo xtask cluster up|down`: a local control plane for development.
//!
//! `up` provisions the binaries (as `cargo xtask envtest`), builds the
//! `operon-envtest` binary and starts `operon-envtest serve` detached, in a
//! process group of its own so Ctrl-C in this terminal leaves it running.
//!
//! The dev cluster runs workloads by default (`--workloads`: the deployment
//! and replicaset controllers, kube-scheduler and kwok with fake Nodes; see
//! `operon_envtest::Options::workloads`): an operator's Deployments become
//! Available and its status can say so, as on a real cluster, for about two
//! more processes' worth of memory and a second more at start.
//! `--no-workloads` gives the bare control plane the tests use by default.
//! State lives in `target/operon-dev/` (logs in `serve.log` and
//! `<binary>.log`, the pid in `pid`); the kubeconfig is copied to
//! `target/operon-dev.kubeconfig`. `down` sends SIGTERM and waits.

use anyhow::{Context, Result, bail};
use operon_envtest::assets;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: cargo xtask cluster up [--workloads | --no-workloads] [--nodes N]
       cargo xtask cluster down

  --workloads     (the default) also run the deployment and replicaset
                  controllers, kube-scheduler and kwok, so Deployments become
                  Available on fake Nodes
  --no-workloads  only etcd, kube-apiserver and the garbage-collector and
                  namespace controllers
  --nodes N       how many fake Nodes (default 3)";

pub fn run(args: &[&str]) -> Result<()> {
    let paths = Paths::new();
    match args {
        ["up", flags @ ..] => up(&paths, &serve_flags(flags)?),
        ["down"] => down(&paths),
        _ => bail!("{USAGE}"),
    }
}

/// The `operon-envtest serve` flags for `up`'s flags.
fn serve_flags(flags: &[&str]) -> Result<Vec<String>> {
    let mut workloads = true;
    let mut nodes = None;
    let mut flags = flags.iter();
    while let Some(&flag) = flags.next() {
        match flag {
            "--workloads" => workloads = true,
            "--no-workloads" => workloads = false,
            "--nodes" => {
                let count = flags.next().with_context(|| format!("--nodes needs a number\n\n{USAGE}"))?;
                let count: usize = count.parse().with_context(|| format!("--nodes {count}: not a number"))?;
                nodes = Some(count);
            }
            _ => bail!("unexpected argument {flag:?}\n\n{USAGE}"),
        }
    }
    let mut serve = Vec::new();
    match (workloads, nodes) {
        (true, nodes) => {
            serve.push("--workloads".to_owned());
            if let Some(count) = nodes {
                serve.extend(["--nodes".to_owned(), count.to_string()]);
            }
        }
        (false, None) => {}
        (false, Some(_)) => bail!("--nodes needs workloads; drop --no-workloads\n\n{USAGE}"),
    }
    Ok(serve)
}

struct Paths {
    target: PathBuf,
    state: PathBuf,
    pid: PathBuf,
    kubeconfig: PathBuf,
}

impl Paths {
    fn new() -> Self {
        let target = crate::cargo_target();
        let state = target.join("operon-dev");
        Self { pid: state.join("pid"), kubeconfig: target.join("operon-dev.kubeconfig"), state, target }
    }
}

fn up(paths: &Paths, serve_flags: &[String]) -> Result<()> {
    if let Some(pid) = running(paths)? {
        println!("already running (pid {pid}); `cargo xtask cluster down` first to start it with other flags");
        print_usage(paths);
        return Ok(());
    }
    let started = Instant::now();
    let assets = assets::ensure(&mut |line| eprintln!("envtest: {line}"))?;

    eprintln!("cluster: building operon-envtest");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(crate::root())
        .args(["build", "--quiet", "-p", "operon-envtest", "--bin", "operon-envtest"])
        .status()
        .context("could not run cargo")?;
    if !status.success() {
        bail!("building operon-envtest failed ({status})");
    }
    let bin = paths.target.join("debug").join("operon-envtest");

    std::fs::create_dir_all(&paths.state).with_context(|| format!("could not create {}", paths.state.display()))?;
    let ready = paths.state.join("ready");
    let _ = std::fs::remove_file(&ready);
    let log_path = paths.state.join("serve.log");
    let log = std::fs::File::create(&log_path).with_context(|| format!("could not create {}", log_path.display()))?;
    let mut child = Command::new(&bin)
        .arg("serve")
        .arg("--state-dir")
        .arg(&paths.state)
        .args(serve_flags)
        .env(assets::ASSETS_ENV, &assets)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Out of this terminal's process group: Ctrl-C here must not stop it.
        .process_group(0)
        .spawn()
        .with_context(|| format!("could not start {}", bin.display()))?;
    std::fs::write(&paths.pid, format!("{}\n", child.id()))?;

    eprintln!("cluster: starting (log: {})", log_path.display());
    let deadline = Instant::now() + Duration::from_secs(180);
    while !ready.exists() {
        if let Some(status) = child.try_wait()? {
            let _ = std::fs::remove_file(&paths.pid);
            bail!(
                "operon-envtest serve exited ({status}) before it was ready:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "operon-envtest serve (pid {}) not ready after 180s; see {} or run \
                 `cargo xtask cluster down`",
                child.id(),
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::copy(paths.state.join("kubeconfig"), &paths.kubeconfig)
        .with_context(|| format!("could not write {}", paths.kubeconfig.display()))?;
    let server = std::fs::read_to_string(&ready)?;
    println!("control plane up in {:.1?} at {} (pid {})", started.elapsed(), server.trim(), child.id());
    print_usage(paths);
    Ok(())
}

fn print_usage(paths: &Paths) {
    println!(
        "  export KUBECONFIG={}\n  kubectl get namespaces\n  cargo xtask cluster down   # stops it; logs stay in {}",
        paths.kubeconfig.display(),
        paths.state.display()
    );
}

fn down(paths: &Paths) -> Result<()> {
    let Some(pid) = running(paths)? else {
        let _ = std::fs::remove_file(&paths.kubeconfig);
        println!("no control plane running");
        return Ok(());
    };
    signal("TERM", pid)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) {
        if Instant::now() > deadline {
            eprintln!("cluster: pid {pid} ignored SIGTERM for 30s; killing it");
            signal("KILL", pid)?;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_file(&paths.pid);
    let _ = std::fs::remove_file(&paths.kubeconfig);
    println!("control plane stopped (pid {pid}); logs in {}", paths.state.display());
    Ok(())
}

/// The pid of a running `operon-envtest serve` from the pid file; removes a
/// stale pid file.
fn running(paths: &Paths) -> Result<Option<u32>> {
    let Ok(text) = std::fs::read_to_string(&paths.pid) else {
        return Ok(None);
    };
    let pid: u32 = text.trim().parse().with_context(|| format!("{} does not hold a pid", paths.pid.display()))?;
    if alive(pid) && is_ours(pid) {
        return Ok(Some(pid));
    }
    let _ = std::fs::remove_file(&paths.pid);
    Ok(None)
}

/// Whether `pid` runs. A zombie does not: once its parent is gone it waits
/// for init to reap it, which can take seconds.
fn alive(pid: u32) -> bool {
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) state ...`; comm may hold spaces, so look after `)`.
        return stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'));
    }
    Command::new("kill").args(["-0", &pid.to_string()]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Whether `pid` is an `operon-envtest` process, so a reused pid is never
/// signalled. Where `/proc` is missing, trusts the pid file.
fn is_ours(pid: u32) -> bool {
    let cmdline = Path::new("/proc").join(pid.to_string()).join("cmdline");
    match std::fs::read(&cmdline) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).contains("operon-envtest"),
        Err(_) => !Path::new("/proc/self").exists(),
    }
}

fn signal(name: &str, pid: u32) -> Result<()> {
    let status =
        Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status().context("could not run `kill`")?;
    if !status.success() && alive(pid) {
        bail!("`kill -{name} {pid}` failed ({status})");
    }
    Ok(())
}
