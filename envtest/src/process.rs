//! Child processes that never outlive the test process.
//!
//! Each binary writes stdout and stderr to `<name>.log` in the control
//! plane's directory, so a failed start can show why.
//!
//! Destructors are not enough to clean up: a control plane held in a
//! `static` is never dropped, and a test binary killed by a signal runs no
//! destructors at all. So every control plane has a [`Watchdog`]: a small
//! `sh` that holds the read end of a pipe and learns each child's pid through
//! it. When this process ends, however it ends, the kernel closes the write
//! end; the watchdog reads end-of-file, kills the children and removes the
//! temporary directory. On an orderly shutdown the watchdog is killed first,
//! so it never signals a pid that may have been reused.
//!
//! This needs no `unsafe` (unlike `PR_SET_PDEATHSIG` in `pre_exec`) and works
//! wherever there is a POSIX `sh`.

use anyhow::{Context, Result, bail};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};

/// A running binary of the control plane.
pub(crate) struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `program` with `args` and the extra environment variables
    /// `env`, output to `<log_dir>/<name>.log`, and tells `watchdog` about it.
    pub fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
        watchdog: &mut Watchdog,
    ) -> Result<Self> {
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("could not create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("could not start {}", program.display()))?;
        let process = Self { name, child, log };
        // On failure `process` is dropped, which kills it.
        watchdog.watch(process.child.id())?;
        Ok(process)
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Fails if the process has exited, with the end of its log.
    pub fn check(&mut self) -> Result<()> {
        if let Some(status) = self.exited() {
            bail!("{} exited ({status}); last lines of {}:\n{}", self.name, self.log.display(), self.tail(40));
        }
        Ok(())
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the process's output.
    pub fn tail(&self, lines: usize) -> String {
        tail_of(&self.log, lines)
    }

    /// Kills the process and waits for it, so the pid is reaped.
    pub fn stop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of a log file (or why it could not be read).
pub(crate) fn tail_of(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

/// Kills the children and removes the directory once this process is gone.
/// See the module docs.
pub(crate) struct Watchdog {
    child: Child,
    pids: ChildStdin,
}

/// Reads pids until end-of-file, then kills them and removes `$1` if set.
/// Ignores SIGINT and SIGHUP so that a Ctrl-C, which reaches the whole
/// process group, still leaves it alive to clean up after the test binary.
const WATCHDOG_SCRIPT: &str = r#"trap '' INT HUP
pids=
while read -r pid; do pids="$pids $pid"; done
if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null; fi
if [ -n "$1" ]; then rm -rf -- "$1"; fi
"#;

impl Watchdog {
    /// Starts a watchdog that will also remove `dir`, if given, when this
    /// process dies without cleaning up.
    pub fn start(dir: Option<&Path>) -> Result<Self> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("operon-envtest-watchdog")
            .arg(dir.map(Path::as_os_str).unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("could not start the watchdog (`sh`) that stops the control plane when this process ends")?;
        let pids = child.stdin.take().context("the watchdog has no stdin")?;
        Ok(Self { child, pids })
    }

    fn watch(&mut self, pid: u32) -> Result<()> {
        writeln!(self.pids, "{pid}")
            .and_then(|()| self.pids.flush())
            .context("could not hand a pid to the watchdog; it has died")
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Kill it rather than close its stdin: closing would make it kill
        // the children and remove the directory itself, racing our own
        // shutdown.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
