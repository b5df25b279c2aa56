//! The serving certificate: read from a cert directory (a mounted Secret,
//! `tls.crt` and `tls.key`, reloaded when they change, as
//! controller-runtime's `CertWatcher` does) or generated at start (a CA and
//! a serving certificate for the endpoint's names, the CA going into the
//! webhook configurations).
//!
//! TLS is rustls with ring, the provider the kube client already uses.

use super::Error;
use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

/// How often a cert directory is checked for a rotated certificate.
const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// The serving certificate and what the API server must trust.
pub(super) struct Certs {
    pub resolver: Arc<Resolver>,
    /// PEM for the configurations' `caBundle`: the generated CA, or
    /// `ca.crt` of the cert directory; `None` leaves `caBundle` unset (a CA
    /// injector, or a CA the API server already trusts, fills the gap).
    pub ca_bundle: Option<Vec<u8>>,
}

impl Certs {
    /// A fresh CA and a serving certificate for `127.0.0.1`, `localhost` and
    /// `hosts`, valid for a year.
    pub fn generate(hosts: &[String]) -> Result<Certs, Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
            KeyUsagePurpose,
        };
        let fail = |e: rcgen::Error| Error::Certificate(format!("generating a self-signed certificate: {e}"));
        let ca_key = KeyPair::generate().map_err(fail)?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name.push(DnType::CommonName, "operon-webhook-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        ca.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        for host in hosts {
            if !names.contains(host) {
                names.push(host.clone());
            }
        }
        let key = KeyPair::generate().map_err(fail)?;
        let mut serving = CertificateParams::new(names).map_err(fail)?;
        serving.distinguished_name.push(DnType::CommonName, "operon-webhook");
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&key, &issuer).map_err(fail)?;

        let certified = certified_key(serving_cert.pem().as_bytes(), key.serialize_pem().as_bytes())?;
        Ok(Certs { resolver: Arc::new(Resolver::new(certified)), ca_bundle: Some(ca_cert.pem().into_bytes()) })
    }

    /// `tls.crt` and `tls.key` from `dir`, and `ca.crt` if present.
    pub fn from_dir(dir: &Path) -> Result<Certs, Error> {
        let certified = read_dir(dir)?;
        let ca_bundle = std::fs::read(dir.join("ca.crt")).ok();
        Ok(Certs { resolver: Arc::new(Resolver::new(certified)), ca_bundle })
    }

    /// The rustls configuration: HTTP/1.1, TLS 1.2 and 1.3. With
    /// `client_ca` (PEM), only a client presenting a certificate that CA
    /// signed gets past the handshake: the API server, when its
    /// `AdmissionConfiguration` gives it a client certificate for webhooks
    /// (`kubeConfigFile`). Without it, any client that reaches the port may
    /// send a review (the caps bound what that costs).
    pub fn server_config(&self, client_ca: Option<&[u8]>) -> Result<Arc<rustls::ServerConfig>, Error> {
        let provider = Arc::new(ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Certificate(format!("configuring TLS: {e}")))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(pem) => builder.with_client_cert_verifier(client_verifier(pem, provider)?),
        };
        let mut config = builder.with_cert_resolver(self.resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A verifier that accepts client certificates signed by a CA of `pem`.
fn client_verifier(
    pem: &[u8],
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, Error> {
    let bad = |why: String| Error::Certificate(format!("--webhook-client-ca-file: {why}"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| bad(format!("not PEM certificates: {e}")))?;
        roots.add(cert).map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| bad(e.to_string()))
}

fn read_dir(dir: &Path) -> Result<CertifiedKey, Error> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|e| {
            Error::Certificate(format!(
                "reading {}: {e} (--webhook-cert-dir must hold tls.crt and tls.key, as a kubernetes.io/tls Secret does)",
                path.display()
            ))
        })
    };
    certified_key(&read("tls.crt")?, &read("tls.key")?).map_err(|e| {
        Error::Certificate(format!(
            "{}: {}",
            dir.display(),
            e.to_string().trim_start_matches("webhook serving certificate: ")
        ))
    })
}

fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, Error> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Certificate(format!("tls.crt is not PEM certificates: {e}")))?;
    if chain.is_empty() {
        return Err(Error::Certificate("tls.crt holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| Error::Certificate(format!("tls.key is not a PEM private key: {e}")))?;
    let signing = ring::sign::any_supported_type(&key)
        .map_err(|e| Error::Certificate(format!("tls.key is not a usable key (RSA, ECDSA or Ed25519): {e}")))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| Error::Certificate(format!("tls.key does not belong to tls.crt: {e}")))?;
    Ok(certified)
}

/// Hands rustls the current certificate; swapped when the files change.
#[derive(Debug)]
pub(super) struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl Resolver {
    fn new(certified: CertifiedKey) -> Resolver {
        Resolver { current: RwLock::new(Arc::new(certified)) }
    }

    fn set(&self, certified: CertifiedKey) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(certified);
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }
}

/// Reload `dir`'s certificate when `tls.crt` or `tls.key` changes (a
/// rotated Secret), and hand `on_ca` a changed `ca.crt` (`ca` is the one in
/// use), until `stop`. A broken new pair is logged and the old one kept.
pub(super) async fn watch(
    dir: PathBuf,
    resolver: Arc<Resolver>,
    mut ca: Option<Vec<u8>>,
    on_ca: impl Fn(Vec<u8>),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let modified = |dir: &Path, name: &str| std::fs::metadata(dir.join(name)).and_then(|m| m.modified()).ok();
    let stamp = |dir: &Path| -> Option<(SystemTime, SystemTime)> {
        Some((modified(dir, "tls.crt")?, modified(dir, "tls.key")?))
    };
    let mut seen = stamp(&dir);
    let mut ca_seen = modified(&dir, "ca.crt");
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(RELOAD_EVERY) => {}
        }
        // The CA first: the API server must trust the new CA before the
        // server presents a certificate signed by it.
        let ca_now = modified(&dir, "ca.crt");
        if ca_now.is_some() && ca_now != ca_seen {
            match std::fs::read(dir.join("ca.crt")) {
                Ok(pem) if CertificateDer::pem_slice_iter(&pem).next().is_some_and(|c| c.is_ok()) => {
                    ca_seen = ca_now;
                    if ca.as_deref() != Some(pem.as_slice()) {
                        ca = Some(pem.clone());
                        on_ca(pem);
                        tracing::info!(dir = %dir.display(), "webhook CA bundle reloaded; re-applying the configurations");
                    }
                }
                // Half written: try again next time.
                _ => tracing::warn!(dir = %dir.display(), "new ca.crt not readable as PEM; keeping the old CA bundle"),
            }
        }
        let now = stamp(&dir);
        if now.is_none() || now == seen {
            continue;
        }
        match read_dir(&dir) {
            Ok(certified) => {
                resolver.set(certified);
                seen = now;
                tracing::info!(dir = %dir.display(), "webhook serving certificate reloaded");
            }
            // Secrets are updated file by file: try again next time.
            Err(e) => tracing::warn!(error = %e, "new webhook serving certificate not loaded; keeping the old one"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificates_should_load_and_carry_a_ca() {
        let certs = Certs::generate(&["operon-webhooks.operon.svc".into()]).unwrap();
        let ca = String::from_utf8(certs.ca_bundle.clone().unwrap()).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
        certs.server_config(None).unwrap();
    }

    #[test]
    fn a_cert_dir_should_say_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let err = Certs::from_dir(dir.path()).err().unwrap().to_string();
        assert!(err.contains("tls.crt") && err.contains("--webhook-cert-dir"), "{err}");
        std::fs::write(dir.path().join("tls.crt"), "garbage").unwrap();
        std::fs::write(dir.path().join("tls.key"), "garbage").unwrap();
        let err = Certs::from_dir(dir.path()).err().unwrap().to_string();
        assert!(err.contains("tls.crt holds no certificate"), "{err}");
    }

    #[test]
    fn a_cert_dir_should_load_a_matching_pair_and_its_ca() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("ca.crt"), cert.pem()).unwrap();
        let certs = Certs::from_dir(dir.path()).unwrap();
        assert_eq!(certs.ca_bundle.as_deref(), Some(cert.pem().as_bytes()));
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.path().join("tls.key"), other.serialize_pem()).unwrap();
        let err = Certs::from_dir(dir.path()).err().unwrap().to_string();
        assert!(err.contains("does not belong"), "{err}");
    }
}
