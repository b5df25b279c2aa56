//! Where the configurations point when the API server calls a replica's
//! own address (`--webhook-url-host`; the default, `127.0.0.1`, names the
//! port each replica bound), and how a replica leaves that address.
//!
//! Every replica serves every plugin, so any live one will do. A replica
//! that serves a plugin points its configurations at itself when the
//! address they name stops answering — the replica there was killed, or it
//! is shutting down and its `/healthz` says so — without waiting for the
//! plugin's Lease to move: the API server's calls come back within a probe
//! period or two, not a lease duration. The write is conditional on the
//! configuration's `resourceVersion`, so of several replicas one wins; the
//! one that did tells it ([`Notice::Repointed`]).
//!
//! A replica that shuts down keeps serving until no configuration names its
//! address any more (another replica pointed them at itself) or its grace
//! (`--webhook-shutdown-grace`) is over; behind a Service, it serves for the
//! grace, while the Service's endpoints drop it.

use super::*;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::{Api, Patch, PatchParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How often the addresses the configurations name are probed.
const PROBE_PERIOD: Duration = Duration::from_millis(500);
/// How long a probe waits for a connection or an answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Consecutive failed probes after which an address counts as gone.
const DOWN_AFTER: u32 = 2;

/// What the host tells about its webhooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// This replica pointed a plugin's configurations at itself: the
    /// address they named stopped answering (its replica killed) or said
    /// it was shutting down.
    Repointed {
        /// The plugin (`r.<namespace>.<name>`, `c.<name>`, a module file's).
        plugin: String,
        /// The address they named.
        from: String,
        /// This replica's address.
        to: String,
        /// Why `from` was left.
        why: String,
        /// Since when `from` was seen failing (zero for one shutting down).
        down_for: Duration,
    },
}

/// What a probe of an address found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    Up,
    /// Its server is shutting down (`/healthz` answered 503).
    Leaving,
    Down(String),
}

/// An address's consecutive failed probes, since when.
#[derive(Debug, Clone)]
struct Failing {
    count: u32,
    since: tokio::time::Instant,
    why: String,
}

impl Webhooks {
    /// Mark this host as shutting down: `/healthz` answers 503 from now on,
    /// so the other replicas point the configurations elsewhere, and this
    /// one no longer points them at itself.
    pub fn leave(&self) {
        self.shared.leaving.send_replace(true);
    }

    /// Whether [`Webhooks::leave`] was called.
    pub fn leaving(&self) -> bool {
        *self.shared.leaving.borrow()
    }

    /// After [`Webhooks::leave`]: keep serving until the configurations no
    /// longer name this replica's address (`--webhook-url-host`), or until
    /// the grace counted from `left` is over (behind a Service: the grace,
    /// while its endpoints drop this Pod; with no plugin: not at all).
    pub async fn drain(&self, left: tokio::time::Instant) {
        let until = left + self.shared.shutdown_grace;
        let own = self.own_authority();
        loop {
            let named = match (&own, self.shared.configurations.get()) {
                (Some(own), Some(informers)) => informers.iter().any(|i| {
                    i.store().iter().any(|o| urls(&o.value()).iter().any(|u| authority(u).as_deref() == Some(own)))
                }),
                // Behind a Service, or before the keeper watched them.
                _ => !self.routes().is_empty(),
            };
            if !named {
                tracing::info!("no webhook configuration names this replica any more; stopping the webhook server");
                return;
            }
            if tokio::time::Instant::now() >= until {
                tracing::info!(grace = ?self.shared.shutdown_grace, "webhook grace over; stopping the webhook server");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `host:port` of this replica's own address, when the configurations
    /// name one (`--webhook-url-host`), not a Service.
    fn own_authority(&self) -> Option<String> {
        authority(&self.own_url("/")?)
    }

    /// This replica's URL for the path of `url` (`None` behind a Service).
    fn own_url(&self, url: &str) -> Option<String> {
        let path = url.parse::<axum::http::Uri>().ok().map_or_else(|| url.to_string(), |u| u.path().to_string());
        let ca = self.ca_bundle();
        config::client_config_at(&path, &self.target(ca.as_ref().map(|c| c.as_slice()))).url
    }

    /// Until `stop`: probe the addresses the plugins' configurations name,
    /// and point the configurations of a plugin this replica serves at
    /// itself when their address is gone.
    pub(super) async fn fail_over(self, informers: [Arc<crate::cache::Informer>; 2], stop: watch::Receiver<bool>) {
        if self.own_authority().is_none() {
            return; // behind a Service: Kubernetes moves the calls
        }
        let mut failing: HashMap<String, Failing> = HashMap::new();
        let mut tick = tokio::time::interval(PROBE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = stop;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tick.tick() => {}
            }
            if self.leaving() || !informers.iter().all(|i| i.is_synced()) {
                continue;
            }
            let Some(own) = self.own_authority() else { return };
            // Each address named by a configuration of a plugin served here.
            let mut named: HashMap<String, Vec<(usize, String, String)>> = HashMap::new();
            let routes: Vec<(String, bool)> = self.routes().iter().map(|(n, r)| (n.clone(), r.configured)).collect();
            for (plugin, configured) in routes {
                if !configured {
                    continue;
                }
                for (i, informer) in informers.iter().enumerate() {
                    let key = crate::cache::ObjectKey::new(None, &config::name(&plugin));
                    let Some(object) = informer.store().get(&key).cloned() else { continue };
                    for url in urls(&object.value()) {
                        if let Some(address) = authority(&url).filter(|a| *a != own) {
                            named.entry(address).or_default().push((i, plugin.clone(), url));
                        }
                    }
                }
            }
            failing.retain(|address, _| named.contains_key(address));
            for (address, uses) in named {
                let why = match probe(&address, self.ca_bundle().as_deref().map(Vec::as_slice)).await {
                    Probe::Up => {
                        failing.remove(&address);
                        continue;
                    }
                    Probe::Leaving => "its replica is shutting down".to_string(),
                    Probe::Down(why) => {
                        let f = failing.entry(address.clone()).or_insert_with(|| Failing {
                            count: 0,
                            since: tokio::time::Instant::now(),
                            why: why.clone(),
                        });
                        f.count += 1;
                        if f.count < DOWN_AFTER {
                            continue;
                        }
                        f.why.clone()
                    }
                };
                let down_for = failing.get(&address).map_or(Duration::ZERO, |f| f.since.elapsed());
                let mut moved = Vec::new();
                for (i, plugin, url) in uses {
                    let Some(to) = self.own_url(&url) else { continue };
                    match self.repoint(i, &plugin, &url, &to).await {
                        Ok(true) => moved.push((plugin, to)),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::debug!(%plugin, error = %crate::client::describe(&e), "configuration not re-pointed")
                        }
                    }
                }
                moved.sort();
                moved.dedup_by(|a, b| a.0 == b.0);
                for (plugin, to) in moved {
                    tracing::warn!(%plugin, from = %address, to = %own, %why, ?down_for, "pointed the webhook configurations at this replica: the address they named stopped answering");
                    let _ = self.shared.notices.send(Notice::Repointed {
                        plugin,
                        from: address.clone(),
                        to: authority(&to).unwrap_or_default(),
                        why: why.clone(),
                        down_for,
                    });
                }
                failing.remove(&address);
            }
        }
    }

    /// Point one configuration's webhook from `from` to `to`, if it still
    /// names `from` as cached: conditional on the resourceVersion seen, so
    /// another replica's write wins over ours (`Ok(false)`).
    async fn repoint(&self, which: usize, plugin: &str, from: &str, to: &str) -> Result<bool, kube::Error> {
        let Some(informers) = self.shared.configurations.get() else { return Ok(false) };
        let name = config::name(plugin);
        let Some(object) = informers[which].store().get(&crate::cache::ObjectKey::new(None, &name)).cloned() else {
            return Ok(false);
        };
        let value = object.value();
        let hooks: Vec<serde_json::Value> = value["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w.pointer("/clientConfig/url").and_then(|u| u.as_str()) == Some(from))
            .map(|w| serde_json::json!({"name": w["name"], "clientConfig": {"url": to}}))
            .collect();
        if hooks.is_empty() {
            return Ok(false);
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": object.resource_version()},
            "webhooks": hooks,
        });
        let params = PatchParams { field_manager: Some(config::FIELD_MANAGER.into()), ..PatchParams::default() };
        let client = self.shared.client.clone();
        let written = if which == 0 {
            Api::<ValidatingWebhookConfiguration>::all(client)
                .patch(&name, &params, &Patch::Strategic(patch))
                .await
                .map(|_| ())
        } else {
            Api::<MutatingWebhookConfiguration>::all(client)
                .patch(&name, &params, &Patch::Strategic(patch))
                .await
                .map(|_| ())
        };
        match written {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The `clientConfig.url`s of a configuration's webhooks.
fn urls(configuration: &serde_json::Value) -> Vec<String> {
    configuration["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.pointer("/clientConfig/url").and_then(|u| u.as_str()).map(str::to_string))
        .collect()
}

/// `host:port` of an `https://host:port/path` URL.
fn authority(url: &str) -> Option<String> {
    let uri: axum::http::Uri = url.parse().ok()?;
    let authority = uri.authority()?;
    Some(format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(443)))
}

/// Whether a webhook server answers at `address`: a connection is taken
/// (refused or timed out: down), and, where the CA is known, its
/// `/healthz` does not say it is shutting down. A server that asks for a
/// client certificate (`--webhook-client-ca-file`) counts as up once it
/// takes the connection.
async fn probe(address: &str, ca_bundle: Option<&[u8]>) -> Probe {
    let tcp = match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(address)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Probe::Down(format!("connecting: {e}")),
        Err(_) => return Probe::Down(format!("no connection within {PROBE_TIMEOUT:?}")),
    };
    let Some(ca) = ca_bundle else { return Probe::Up };
    let health = async {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca).flatten() {
            let _ = roots.add(cert);
        }
        let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        let host = address.rsplit_once(':').map_or(address, |(h, _)| h).trim_matches(['[', ']']);
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).ok()?;
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.ok()?;
        tls.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut head = [0u8; 16];
        let n = tls.read(&mut head).await.ok()?;
        Some(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 503"))
    };
    match tokio::time::timeout(PROBE_TIMEOUT, health).await {
        Ok(Some(true)) => Probe::Leaving,
        _ => Probe::Up,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_should_be_read_from_urls() {
        assert_eq!(authority("https://127.0.0.1:9443/validate/webapp").as_deref(), Some("127.0.0.1:9443"));
        assert_eq!(authority("https://[::1]:8443/mutate/x").as_deref(), Some("[::1]:8443"));
        assert_eq!(authority("https://webhooks.example.com/validate/x").as_deref(), Some("webhooks.example.com:443"));
    }

    #[tokio::test]
    async fn a_closed_port_should_be_down_and_an_open_one_up() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().to_string();
        assert_eq!(probe(&open, None).await, Probe::Up);
        drop(listener);
        assert!(matches!(probe(&open, None).await, Probe::Down(_)), "a port nobody listens on");
    }
}
