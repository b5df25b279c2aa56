//! A real PowerDNS Authoritative server for the egress tests: `pdns_server`
//! (Debian's pdns-server 4.7 with pdns-backend-sqlite3) in a temporary
//! directory, on loopback ports of its own, with its HTTP API on.
//!
//! ```ignore
//! let Some(mut pdns) = Pdns::start().await else { return }; // skipped: not installed
//! pdns.create_zone("example.org.").await;
//! // ... a DnsRecord whose spec.server is pdns.api(), a Secret holding pdns.key() ...
//! assert_eq!(pdns.rrset("example.org.", "www.example.org.", "A").await, Some(vec!["192.0.2.1".into()]));
//! pdns.stop();                 // an outage: the API refuses connections
//! pdns.restart().await;        // the same ports and data again
//! ```
//!
//! Nothing of a system instance is used or touched: the configuration is
//! written to the temporary directory and read from there alone
//! (`--config-dir`), the database and control socket live there too, and
//! the DNS and API ports are free loopback ports picked for each server (a
//! Debian install may run its own `pdns` service on port 53 and 8081).
//!
//! Without `pdns_server` (or `sqlite3`, or the gsqlite3 schema) the test is
//! skipped with a message and counted as skipped (`common::skip`) — unless
//! `OPERON_REQUIRE_PDNS=1` (CI, which installs them), where it fails instead.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable that makes a missing PowerDNS a failure.
pub const REQUIRE: &str = "OPERON_REQUIRE_PDNS";

/// Where Debian's pdns-backend-sqlite3 puts the schema (and where other
/// packagings do).
const SCHEMAS: [&str; 2] =
    ["/usr/share/pdns-backend-sqlite3/schema/schema.sqlite3.sql", "/usr/share/doc/pdns/schema.sqlite3.sql"];

/// How long a start may take before the test fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `pdns_server` (killed on drop, its directory removed).
pub struct Pdns {
    dir: tempfile::TempDir,
    binary: PathBuf,
    api_port: u16,
    dns_port: u16,
    key: String,
    child: Option<Child>,
    client: reqwest::Client,
}

impl Pdns {
    /// A new server with an empty database, answering its API on
    /// [`api`](Pdns::api) once this returns; `None` (after saying why on
    /// stderr) when PowerDNS is not installed and [`REQUIRE`] is not `1`.
    pub async fn start() -> Option<Pdns> {
        let (binary, sqlite3, schema) = match tools() {
            Ok(found) => found,
            Err(missing) => {
                super::skip::skip(
                    REQUIRE,
                    &format!("{missing}; install pdns-server, pdns-backend-sqlite3 and sqlite3 to run this test"),
                );
                return None;
            }
        };
        operon::install_crypto_provider();
        let dir = tempfile::Builder::new().prefix("operon-pdns-").tempdir().expect("a temporary directory");
        let database = dir.path().join("pdns.sqlite3");
        let status = Command::new(&sqlite3)
            .arg(&database)
            .stdin(std::fs::File::open(&schema).unwrap_or_else(|e| panic!("{}: {e}", schema.display())))
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", sqlite3.display()));
        assert!(status.success(), "sqlite3 {} < {}: {status}", database.display(), schema.display());
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let key = format!("operon-test-{:x}{:x}", std::process::id(), nanos);
        let client = reqwest::Client::builder().no_proxy().build().expect("an HTTP client");
        let mut pdns = Pdns { dir, binary, api_port: 0, dns_port: 0, key, child: None, client };
        // Free ports are picked, then released for pdns_server to bind: a
        // test elsewhere may take one in between, so a start that could
        // not bind is tried again with other ports.
        for attempt in 1..=3 {
            (pdns.api_port, pdns.dns_port) = free_ports();
            pdns.write_config();
            match pdns.launch().await {
                Ok(()) => return Some(pdns),
                Err(why) if attempt < 3 && why.contains("bind") => eprintln!("pdns_server: {why}; trying other ports"),
                Err(why) => panic!("pdns_server did not start: {why}"),
            }
        }
        unreachable!()
    }

    /// The API's base URL, `http://127.0.0.1:PORT` (no trailing slash): a
    /// DnsRecord's `spec.server`, and what an egress grant names
    /// (scheme `http`, host `127.0.0.1`, this port).
    pub fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.api_port)
    }

    /// The API's port.
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// The API key (`X-API-Key`): what a credential's Secret holds.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The server's output so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// One API call with the key: `path` under the base URL (e.g.
    /// `/api/v1/servers/localhost/zones`), the answer's status and its body
    /// as JSON (`Value::String` of the text when it is not JSON, `Null`
    /// when empty).
    ///
    /// # Panics
    /// When no answer comes (the server is stopped or died).
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let mut request =
            self.client.request(method.clone(), format!("{}{path}", self.api())).header("X-API-Key", &self.key);
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(serde_json::to_vec(body).unwrap());
        }
        let response = request
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\npdns_server's log:\n{}", self.log()));
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap_or_else(|e| panic!("{method} {path}: reading the answer: {e}"));
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, value)
    }

    /// Creates the (native) zone `zone` (`example.org.`, the trailing dot
    /// optional) with the name server `ns1.ZONE`.
    ///
    /// # Panics
    /// When the API refuses (e.g. the zone exists).
    pub async fn create_zone(&self, zone: &str) {
        let zone = absolute(zone);
        let body = json!({"name": zone, "kind": "Native", "nameservers": [format!("ns1.{zone}")]});
        let (status, answer) = self.call("POST", "/api/v1/servers/localhost/zones", Some(&body)).await;
        assert_eq!(status, 201, "creating zone {zone}: {answer}");
    }

    /// The contents of the records of the rrset `name` `rrtype` in `zone`
    /// (names with or without the trailing dot), sorted, as the API gives
    /// them (`192.0.2.1`, `"some text"`, `target.example.org.`); `None`
    /// when there is no such rrset.
    ///
    /// # Panics
    /// When the zone does not exist or the API fails.
    pub async fn rrset(&self, zone: &str, name: &str, rrtype: &str) -> Option<Vec<String>> {
        self.rrset_with_ttl(zone, name, rrtype).await.map(|(_, records)| records)
    }

    /// [`rrset`](Pdns::rrset) with the rrset's TTL.
    pub async fn rrset_with_ttl(&self, zone: &str, name: &str, rrtype: &str) -> Option<(u64, Vec<String>)> {
        let (zone, name) = (absolute(zone), absolute(name));
        let path = format!("/api/v1/servers/localhost/zones/{zone}?rrset_name={name}&rrset_type={rrtype}");
        let (status, answer) = self.call("GET", &path, None).await;
        assert_eq!(status, 200, "GET {path}: {answer}");
        let rrsets = answer["rrsets"].as_array().cloned().unwrap_or_default();
        let rrset = rrsets.iter().find(|r| {
            r["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(&name)) && r["type"].as_str() == Some(rrtype)
        })?;
        let mut records: Vec<String> = rrset["records"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["content"].as_str().map(str::to_owned))
            .collect();
        records.sort();
        Some((rrset["ttl"].as_u64().unwrap_or_default(), records))
    }

    /// Stops the server (killed; the database stays): its API refuses
    /// connections until [`restart`](Pdns::restart).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped server again, on the same ports with the same
    /// data, and waits for its API.
    ///
    /// # Panics
    /// When it is running, or does not come up (e.g. a port was taken
    /// meanwhile).
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "pdns_server is running: stop() it first");
        if let Err(why) = self.launch().await {
            panic!("pdns_server did not start again on ports {} and {}: {why}", self.api_port, self.dns_port);
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("pdns.log")
    }

    fn write_config(&self) {
        let dir = self.dir.path();
        let config = format!(
            "\
# Written by host/tests/all/common/pdns.rs: nothing is read from /etc.
launch=gsqlite3
gsqlite3-database={database}
local-address=127.0.0.1
local-port={dns_port}
api=yes
api-key={key}
webserver=yes
webserver-address=127.0.0.1
webserver-port={api_port}
webserver-allow-from=127.0.0.0/8
socket-dir={dir}
daemon=no
guardian=no
write-pid=no
disable-syslog=yes
# No lookups of its own on the network (the security status poll).
security-poll-suffix=
# No caches: what the API wrote is what DNS answers at once.
cache-ttl=0
negquery-cache-ttl=0
query-cache-ttl=0
zone-cache-refresh-interval=0
# Small: a test server answers a few queries.
receiver-threads=1
distributor-threads=1
",
            database = dir.join("pdns.sqlite3").display(),
            dns_port = self.dns_port,
            api_port = self.api_port,
            key = self.key,
            dir = dir.display(),
        );
        std::fs::write(dir.join("pdns.conf"), config).expect("writing pdns.conf");
    }

    /// Spawns pdns_server and waits until its API answers; the reason and
    /// the log when it does not.
    async fn launch(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("{}: {e}", self.log_path().display()))?;
        let child = Command::new(&self.binary)
            .arg(format!("--config-dir={}", self.dir.path().display()))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("running {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return Err(format!("it exited ({status}); its log:\n{}", self.log()));
            }
            let answer = self
                .client
                .get(format!("{}/api/v1/servers/localhost", self.api()))
                .header("X-API-Key", &self.key)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            match answer {
                Ok(r) if r.status().is_success() => return Ok(()),
                // Another server on this port (it does not know the key).
                Ok(r) if r.status().as_u16() == 401 => {
                    self.stop();
                    return Err(format!("port {} answers for another server (bind)", self.api_port));
                }
                _ => {}
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!("its API did not answer in {START_TIMEOUT:?}; its log:\n{}", self.log()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Pdns {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `pdns_server`, `sqlite3` and the gsqlite3 schema, or what is missing.
fn tools() -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let binary = find_program("pdns_server", &["/usr/sbin", "/usr/local/sbin"])
        .ok_or("pdns_server is not installed (not on PATH, nor in /usr/sbin)")?;
    let sqlite3 = find_program("sqlite3", &[]).ok_or("sqlite3 is not installed (not on PATH)")?;
    let schema = SCHEMAS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| format!("the gsqlite3 schema is not installed (none of {})", SCHEMAS.join(", ")))?;
    Ok((binary, sqlite3, schema))
}

/// `name` on `PATH`, else in one of `extra` (sbin is not on every user's PATH).
fn find_program(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// An API port (TCP) and a DNS port (free for TCP and UDP) on 127.0.0.1.
fn free_ports() -> (u16, u16) {
    let api = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    loop {
        let dns = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = dns.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return (api.local_addr().unwrap().port(), port);
        }
    }
}

/// `name` with its trailing dot.
fn absolute(name: &str) -> String {
    if name.ends_with('.') { name.to_owned() } else { format!("{name}.") }
}
