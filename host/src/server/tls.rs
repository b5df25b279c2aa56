//! HTTPS for `/metrics`: the serving certificate (connections are taken
//! by the accept loop every listener shares, `connections.rs`).
//!
//! The certificate comes from a directory holding `tls.crt` and `tls.key`
//! (a mounted `kubernetes.io/tls` Secret, or cert-manager's), read again
//! when the files change, as controller-runtime's `certwatcher` does; or,
//! without one, it is self-signed at start (controller-runtime's default
//! too), which a scraper accepts with `insecure_skip_verify`.

use super::Error;
use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// How often, at most, a handshake checks the directory for new files.
const RECHECK: Duration = Duration::from_secs(10);

/// The serving certificate, re-read from its directory when it changes.
#[derive(Debug)]
pub(super) struct Certificate {
    dir: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Arc<CertifiedKey>,
    /// Modification times of `tls.crt` and `tls.key` when last read.
    read: Option<(SystemTime, SystemTime)>,
    checked: Instant,
}

impl Certificate {
    /// `tls.crt` and `tls.key` of `dir`, or a self-signed certificate for
    /// `localhost`, `127.0.0.1` and this host's name.
    pub(super) fn load(dir: Option<&Path>) -> Result<Certificate, Error> {
        let (current, read) = match dir {
            Some(dir) => (read_pair(dir)?, stamps(dir)),
            None => (self_signed()?, None),
        };
        let state = State { current: Arc::new(current), read, checked: Instant::now() };
        Ok(Certificate { dir: dir.map(Path::to_path_buf), state: Mutex::new(state) })
    }

    /// The certificate to present now; a changed pair in the directory is
    /// read first (a broken one is logged and the old one kept: Secrets are
    /// updated file by file).
    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(dir) = &self.dir
            && state.checked.elapsed() >= RECHECK
        {
            state.checked = Instant::now();
            let now = stamps(dir);
            if now.is_some() && now != state.read {
                match read_pair(dir) {
                    Ok(key) => {
                        state.current = Arc::new(key);
                        state.read = now;
                        tracing::info!(dir = %dir.display(), "metrics serving certificate reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "new metrics serving certificate not loaded; keeping the old one")
                    }
                }
            }
        }
        state.current.clone()
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn stamps(dir: &Path) -> Option<(SystemTime, SystemTime)> {
    let modified = |name: &str| std::fs::metadata(dir.join(name)).and_then(|m| m.modified()).ok();
    Some((modified("tls.crt")?, modified("tls.key")?))
}

fn read_pair(dir: &Path) -> Result<CertifiedKey, Error> {
    let fail = |why: String| {
        Error::Tls(format!("{}: {why} (--metrics-cert-path must hold tls.crt and tls.key)", dir.display()))
    };
    let read = |name: &str| std::fs::read(dir.join(name)).map_err(|e| fail(format!("cannot read {name}: {e}")));
    let (cert, key) = (read("tls.crt")?, read("tls.key")?);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .map_err(|e| fail(format!("tls.crt is not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(fail("tls.crt holds no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(&key).map_err(|e| fail(format!("tls.key is not a PEM private key: {e}")))?;
    CertifiedKey::from_der(chain, key, &ring::default_provider())
        .map_err(|e| fail(format!("tls.key does not fit tls.crt, or is of a kind rustls cannot use: {e}")))
}

fn self_signed() -> Result<CertifiedKey, Error> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    names.extend(std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()));
    let fail = |e: rcgen::Error| Error::Tls(format!("generating a self-signed certificate: {e}"));
    let generated = rcgen::generate_simple_self_signed(names).map_err(fail)?;
    let key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(generated.signing_key.serialize_der()));
    CertifiedKey::from_der(vec![generated.cert.der().clone()], key, &ring::default_provider())
        .map_err(|e| Error::Tls(format!("the generated certificate: {e}")))
}

/// rustls settings: TLS 1.2 and 1.3, HTTP/1.1 only (kubebuilder turns
/// HTTP/2 off on its metrics server too), no client certificates.
pub(super) fn server_config(certificate: Certificate) -> Result<Arc<rustls::ServerConfig>, Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(format!("configuring TLS: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(certificate));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap().self_signed(&key).unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        cert.pem()
    }

    #[test]
    fn without_a_directory_a_certificate_should_be_self_signed() {
        let certificate = Certificate::load(None).unwrap();
        assert_eq!(certificate.current().cert.len(), 1);
    }

    #[test]
    fn a_directory_should_say_what_is_missing_or_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let err = Certificate::load(Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("tls.crt") && err.contains("--metrics-cert-path"), "{err}");
        write_pair(dir.path(), "a");
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.path().join("tls.key"), other.serialize_pem()).unwrap();
        let err = Certificate::load(Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("does not fit"), "{err}");
    }

    #[test]
    fn a_rotated_pair_should_be_served_after_the_recheck_interval() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path(), "first");
        let certificate = Certificate::load(Some(dir.path())).unwrap();
        let first = certificate.current().cert[0].clone();
        // Another pair, with a later modification time.
        std::thread::sleep(Duration::from_millis(20));
        write_pair(dir.path(), "second");
        assert_eq!(certificate.current().cert[0], first, "not before the recheck interval");
        certificate.state.lock().unwrap().checked = Instant::now() - RECHECK;
        assert_ne!(certificate.current().cert[0], first, "the rotated pair is served");
    }
}
