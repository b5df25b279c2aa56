//! A real OCI registry on loopback: Debian's `docker-registry` (the CNCF
//! distribution registry), serving plain HTTP on a free `127.0.0.1` port and
//! storing under a directory the caller chooses. Tests push and pull module
//! artifacts, the operon image and the Helm chart through it, and
//! `cargo xtask image` pushes the image into one whose storage the image
//! test serves again.

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running registry; stopped when dropped.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    addr: String,
    storage: PathBuf,
}

impl Registry {
    /// Starts a registry storing under `storage` (created if missing; what
    /// an earlier registry stored there is served again) and waits until it
    /// answers `GET /v2/`.
    ///
    /// # Errors
    ///
    /// `docker-registry` is not installed (the error says how to install
    /// it), or it does not answer within 30 s (its log is in the error).
    pub fn start(storage: &Path) -> Result<Registry> {
        std::fs::create_dir_all(storage).with_context(|| format!("creating {}", storage.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let config = storage.join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                storage.join("data").display()
            ),
        )?;
        let log = storage.join("registry.log");
        let file = std::fs::File::create(&log)?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file))
            .spawn()
            .context(
                "starting docker-registry: install it with `apt-get install docker-registry` (Debian's package)",
            )?;
        let mut registry = Registry { child, addr: format!("127.0.0.1:{port}"), storage: storage.to_path_buf() };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !registry.answers() {
            if let Some(status) = registry.child.try_wait()? {
                bail!("docker-registry exited ({status}):\n{}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            if Instant::now() > deadline {
                bail!(
                    "docker-registry did not answer on {} within 30 s:\n{}",
                    registry.addr,
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(registry)
    }

    /// `127.0.0.1:PORT`, for references such as `127.0.0.1:PORT/operon:0.1.0`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The storage directory.
    pub fn storage(&self) -> &Path {
        &self.storage
    }

    fn answers(&self) -> bool {
        let Ok(mut stream) =
            TcpStream::connect_timeout(&self.addr.parse().expect("an address"), Duration::from_millis(200))
        else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = format!("GET /v2/ HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.addr);
        let mut answer = String::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_string(&mut answer).is_ok()
            && answer.starts_with("HTTP/1.1 200")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
