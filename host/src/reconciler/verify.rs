//! Modules verified before they load: a Reconciler's `spec.module.verify`
//! and the host's `--require-signed-modules` name public keys, and a module
//! loads only with a signature by one of them — a cosign signature for an
//! OCI source, a detached one for a URL, ConfigMap or path source (formats
//! in [`crate::signing`]).
//!
//! **Invariant: with keys required, no byte of a module reaches the engine
//! before a signature by one of those keys over exactly these bytes (for
//! OCI: over a payload naming exactly the pinned manifest, which names the
//! layer by digest) was checked.** The Reconciler's keys and the host's
//! must both be satisfied: a Reconciler can add a requirement, never lift
//! or replace the host's.

use super::crd::{ModuleSource, ModuleVerify, OciSource, UrlSource};
use super::source::{self, Bounds, Fetched, Got};
use crate::egress::grants::Allowed;
use crate::signing::{self, PublicKey};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most signatures read from one OCI signature artifact.
const MAX_OCI_SIGNATURES: usize = 16;

/// Why a module is not trusted, or could not be checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No signature where the source keeps it (it may be published later).
    #[error("{0}")]
    Unsigned(String),
    /// Signatures found, none by a required key over these bytes.
    #[error("{0}")]
    Untrusted(String),
    /// The keys could not be read (a ConfigMap missing, a PEM that is not
    /// a key).
    #[error("{0}")]
    Keys(String),
    /// The signature could not be fetched (registry or server unreachable).
    #[error("{0}")]
    Unavailable(String),
}

impl Error {
    /// The refusal as the loader reports it: unavailable signatures are
    /// retried like unavailable modules; missing ones and unreadable keys
    /// with the same backoff (a signature or a key may be published later);
    /// a signature that does not verify only when the spec changes.
    pub fn into_source(self) -> source::Error {
        match self {
            Error::Unavailable(m) => source::Error::Unavailable(m),
            Error::Unsigned(message) | Error::Keys(message) => source::Error::Untrusted { message, retry: true },
            Error::Untrusted(message) => source::Error::Untrusted { message, retry: false },
        }
    }
}

/// Keys one party requires: a signature by any one of them will do.
#[derive(Debug, Clone)]
pub struct Trust {
    /// Who requires it, for messages.
    pub by: &'static str,
    /// Each key, with where it was named.
    pub keys: Vec<(String, PublicKey)>,
}

impl Trust {
    /// `key sha256:… (where), …` for messages.
    fn describe(&self) -> String {
        let keys: Vec<String> = self.keys.iter().map(|(at, k)| format!("key {} ({at})", k.id())).collect();
        keys.join(", ")
    }
}

/// The host's policy: `--require-signed-modules` with the keys of
/// `--trusted-module-key`. Fixed for the process's life.
#[derive(Debug, Clone, Default)]
pub struct HostPolicy {
    required: Option<Arc<Trust>>,
}

/// Who the host's requirement is, in messages.
const HOST: &str = "this host (--require-signed-modules)";
/// Who a Reconciler's requirement is, in messages.
const SPEC: &str = "spec.module.verify";

impl HostPolicy {
    /// Every module must be signed by one of the keys in `paths` (PEM
    /// files, or directories whose `*.pub` and `*.pem` files are read, as a
    /// mounted ConfigMap holds them).
    ///
    /// # Errors
    /// [`Error::Keys`] naming the file, or when no key is found.
    pub fn require(paths: &[PathBuf]) -> Result<HostPolicy, Error> {
        let mut keys = Vec::new();
        for path in paths {
            for file in key_files(path)? {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| Error::Keys(format!("--trusted-module-key {}: {e}", file.display())))?;
                let key = PublicKey::from_pem(&text)
                    .map_err(|e| Error::Keys(format!("--trusted-module-key {}: {e}", file.display())))?;
                keys.push((file.display().to_string(), key));
            }
        }
        if keys.is_empty() {
            return Err(Error::Keys(
                "--require-signed-modules needs at least one --trusted-module-key (a PEM public key, or a directory of them)"
                    .into(),
            ));
        }
        Ok(HostPolicy { required: Some(Arc::new(Trust { by: HOST, keys })) })
    }

    /// The host's requirement, if it has one.
    pub fn trust(&self) -> Option<&Trust> {
        self.required.as_deref()
    }
}

/// The PEM files of `path`: itself, or a directory's `*.pub` and `*.pem`.
fn key_files(path: &Path) -> Result<Vec<PathBuf>, Error> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| Error::Keys(format!("--trusted-module-key {}: {e}", path.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "pub" || x == "pem"))
        .collect();
    files.sort();
    Ok(files)
}

/// What identifies a requirement: a module verified under one is verified
/// under the same again, never under another.
pub fn fingerprint(host: &HostPolicy, verify: Option<&ModuleVerify>) -> Option<String> {
    if host.required.is_none() && verify.is_none() {
        return None;
    }
    let host_keys: Vec<&str> = host.trust().map(|t| t.keys.iter().map(|(_, k)| k.id()).collect()).unwrap_or_default();
    Some(format!("{host_keys:?} {}", serde_json::to_string(&verify).unwrap_or_default()))
}

/// What a spec's `verify` can be checked for before anything is fetched:
/// inline keys parse; a Reconciler names ConfigMaps of its own namespace
/// only, a ClusterReconciler names their namespace.
///
/// # Errors
/// [`Error::Keys`] naming the field.
pub fn check_spec(verify: &ModuleVerify, namespace: Option<&str>) -> Result<(), Error> {
    for (i, key) in verify.keys.iter().enumerate() {
        if let Some(pem) = &key.pem {
            PublicKey::from_pem(pem).map_err(|e| Error::Keys(format!("spec.module.verify.keys[{i}].pem: {e}")))?;
        }
        if let Some(cm) = &key.config_map {
            match (namespace, cm.namespace.as_deref()) {
                (Some(own), Some(other)) if own != other => {
                    return Err(Error::Keys(format!(
                        "spec.module.verify.keys[{i}].configMap.namespace: a Reconciler reads keys of its own namespace \
                         only ({own}), not {other}; copy the key there, or use a ClusterReconciler"
                    )));
                }
                (None, None) => {
                    return Err(Error::Keys(format!(
                        "spec.module.verify.keys[{i}].configMap.namespace: a ClusterReconciler must name the \
                         ConfigMap's namespace"
                    )));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The keys a spec names, read: inline ones, and ConfigMaps' (`namespace`:
/// a Reconciler's own).
///
/// # Errors
/// [`Error::Keys`] naming the key that could not be read;
/// [`Error::Unavailable`] when the API server cannot be asked.
pub async fn resolve(client: &kube::Client, namespace: Option<&str>, verify: &ModuleVerify) -> Result<Trust, Error> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let mut keys = Vec::new();
    for (i, key) in verify.keys.iter().enumerate() {
        let at = format!("spec.module.verify.keys[{i}]");
        if let Some(pem) = &key.pem {
            keys.push((at.clone(), PublicKey::from_pem(pem).map_err(|e| Error::Keys(format!("{at}.pem: {e}")))?));
        }
        let Some(cm) = &key.config_map else { continue };
        let ns = cm.namespace.as_deref().or(namespace).unwrap_or_default();
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), ns);
        let found = api
            .get_opt(&cm.name)
            .await
            .map_err(|e| Error::Unavailable(format!("{at}: ConfigMap {ns}/{} could not be read: {e}", cm.name)))?;
        let Some(found) = found else {
            return Err(Error::Keys(format!(
                "{at}: ConfigMap {ns}/{} does not exist; create it with `kubectl create configmap {} -n {ns} \
                 --from-file={}=cosign.pub`",
                cm.name, cm.name, cm.key
            )));
        };
        let text = found
            .data
            .as_ref()
            .and_then(|d| d.get(&cm.key).cloned())
            .or_else(|| {
                let bytes = found.binary_data.as_ref()?.get(&cm.key)?;
                String::from_utf8(bytes.0.clone()).ok()
            })
            .ok_or_else(|| Error::Keys(format!("{at}: ConfigMap {ns}/{} has no key {}", cm.name, cm.key)))?;
        let where_ = format!("{at}, ConfigMap {ns}/{} key {}", cm.name, cm.key);
        keys.push((where_.clone(), PublicKey::from_pem(&text).map_err(|e| Error::Keys(format!("{where_}: {e}")))?));
    }
    Ok(Trust { by: SPEC, keys })
}

/// Every requirement on a plugin's module: the host's, then the spec's.
///
/// # Errors
/// As [`resolve`].
pub async fn required(
    host: &HostPolicy,
    client: &kube::Client,
    namespace: Option<&str>,
    verify: Option<&ModuleVerify>,
) -> Result<Vec<Trust>, Error> {
    let mut trusts: Vec<Trust> = host.trust().cloned().into_iter().collect();
    if let Some(v) = verify {
        trusts.push(resolve(client, namespace, v).await?);
    }
    Ok(trusts)
}

/// One signature found for a module.
struct Candidate {
    /// What was signed (the module's bytes, or a simple signing payload).
    message: Vec<u8>,
    /// The signature as stored.
    signature: Vec<u8>,
    /// For a payload, the manifest digest it names (`Err`: unreadable).
    names: Option<Result<String, signing::Error>>,
}

/// Where a source's signature is looked for, and how to make one.
struct Subject {
    /// The module, for messages.
    what: String,
    /// Where its signature is kept.
    looked: String,
    /// The command that signs it.
    sign: String,
    /// The digest a payload must name (OCI), if any.
    digest: Option<String>,
}

/// Check that `fetched`, from `source`, is signed as every one of `trusts`
/// requires.
///
/// # Errors
/// [`Error::Unsigned`] when no signature is found, [`Error::Untrusted`]
/// when none verifies, [`Error::Unavailable`] when it could not be fetched.
pub async fn check(
    http: &reqwest::Client,
    allowed: &Allowed,
    module: &ModuleSource,
    fetched: &Fetched,
    trusts: &[Trust],
    bounds: Bounds,
) -> Result<(), Error> {
    if trusts.is_empty() {
        return Ok(());
    }
    let (subject, candidates) = match (&module.oci, &module.url) {
        (Some(oci), _) => oci_signatures(oci, bounds).await?,
        (None, Some(url)) => {
            let (subject, signature) = url_signature(http, allowed, url, bounds).await?;
            let candidates = signature
                .map(|signature| Candidate { message: fetched.bytes.clone(), signature, names: None })
                .into_iter()
                .collect();
            (subject, candidates)
        }
        (None, None) => (detached_subject(module), detached(fetched)),
    };
    let keys: Vec<String> = trusts.iter().map(Trust::describe).collect();
    if candidates.is_empty() {
        return Err(Error::Unsigned(format!(
            "module {} is not signed: no signature at {}; {} requires a signature by {}: sign it with the private half \
             of one of them (`{}`); the host looks again with backoff",
            subject.what,
            subject.looked,
            trusts.iter().map(|t| t.by).collect::<Vec<_>>().join(" and "),
            keys.join("; "),
            subject.sign,
        )));
    }
    for trust in trusts {
        let mut why = Vec::new();
        let verified = candidates.iter().any(|c| {
            match (&c.names, &subject.digest) {
                (Some(Err(e)), _) => {
                    why.push(e.to_string());
                    return false;
                }
                (Some(Ok(named)), Some(digest)) if named != digest => {
                    why.push(format!("a signature of another manifest ({named})"));
                    return false;
                }
                _ => {}
            }
            trust.keys.iter().any(|(_, k)| k.verify(&c.message, &c.signature).is_ok())
        });
        if !verified {
            if why.is_empty() {
                why.push(if subject.digest.is_some() {
                    "its signatures are by other keys".to_string()
                } else {
                    "the signature does not verify: the bytes changed after they were signed, or another key signed them"
                        .to_string()
                });
            }
            why.dedup();
            return Err(Error::Untrusted(format!(
                "module {} is not signed by a key {} trusts ({}): {}; nothing was loaded (sign this version with one \
                 of those keys: `{}`)",
                subject.what,
                trust.by,
                trust.describe(),
                why.join("; "),
                subject.sign,
            )));
        }
    }
    Ok(())
}

/// A ConfigMap or path source: where its detached signature is.
fn detached_subject(module: &ModuleSource) -> Subject {
    let (what, looked) = match (&module.config_map, &module.path) {
        (Some(cm), _) => (
            format!("ConfigMap {} key {}", cm.name, cm.key),
            format!("key {}.sig of the same ConfigMap (data or binaryData)", cm.key),
        ),
        (None, Some(path)) => (path.clone(), format!("{path}.sig")),
        (None, None) => ("(no source)".into(), "(nowhere)".into()),
    };
    Subject { what, looked, sign: "operon sign --key KEY module.wasm".into(), digest: None }
}

fn detached(fetched: &Fetched) -> Vec<Candidate> {
    fetched
        .signature
        .iter()
        .map(|s| Candidate { message: fetched.bytes.clone(), signature: s.clone(), names: None })
        .collect()
}

/// A URL source's signature: the same URL with `.sig` added to its path.
async fn url_signature(
    http: &reqwest::Client,
    allowed: &Allowed,
    url: &UrlSource,
    bounds: Bounds,
) -> Result<(Subject, Option<Vec<u8>>), Error> {
    let mut sig = source::checked_url(&url.href, "spec.module.url.href", allowed, bounds)
        .await
        .map_err(|e| Error::Unavailable(e.to_string()))?;
    let path = format!("{}.sig", sig.path());
    sig.set_path(&path);
    let subject = Subject {
        what: url.href.clone(),
        looked: sig.to_string(),
        sign: "operon sign --key KEY module.wasm".into(),
        digest: None,
    };
    let signature = match source::get(http, &sig, signing::MAX_SIGNATURE_BYTES, bounds).await {
        Ok(Got::Bytes(signature)) => Some(signature),
        Ok(Got::NotFound) => None,
        Err(source::Error::TooLarge { .. }) => {
            return Err(Error::Untrusted(format!(
                "{sig} is larger than a signature ({} bytes at most)",
                signing::MAX_SIGNATURE_BYTES
            )));
        }
        Err(e) => return Err(Error::Unavailable(format!("the signature of {}: {e}", url.href))),
    };
    Ok((subject, signature))
}

/// An OCI source's cosign signatures: the layers of the artifact tagged
/// `sha256-<digest>.sig` in the same repository.
async fn oci_signatures(oci: &OciSource, bounds: Bounds) -> Result<(Subject, Vec<Candidate>), Error> {
    use oci_client::secrets::RegistryAuth;
    let (client, base) = source::oci_client(&oci.reference).map_err(|e| Error::Unavailable(e.to_string()))?;
    let tag = signing::signature_tag(&oci.digest);
    let reference =
        oci_client::Reference::with_tag(base.registry().to_string(), base.repository().to_string(), tag.clone());
    let subject = Subject {
        what: format!("{}@{}", oci.reference, oci.digest),
        looked: format!("{}/{}:{tag}", base.registry(), base.repository()),
        sign: format!(
            "operon sign --key KEY --oci {}/{}@{}, or cosign sign --key cosign.key …",
            base.registry(),
            base.repository(),
            oci.digest
        ),
        digest: Some(oci.digest.clone()),
    };
    let unavailable = |e: &dyn std::fmt::Display| Error::Unavailable(format!("pulling {}: {e}", subject.looked));
    let started = tokio::time::Instant::now();
    let pulled = tokio::time::timeout(bounds.timeout, client.pull_image_manifest(&reference, &RegistryAuth::Anonymous))
        .await
        .map_err(|_| unavailable(&"not finished within the host's --module-fetch-timeout"))?;
    let manifest = match pulled {
        Ok((manifest, _)) => manifest,
        Err(e) if not_found(&e) => return Ok((subject, Vec::new())),
        Err(e) => return Err(unavailable(&e)),
    };
    let mut candidates = Vec::new();
    let layers = manifest.layers.iter().filter(|l| l.media_type == signing::SIMPLE_SIGNING_MEDIA_TYPE);
    for layer in layers.take(MAX_OCI_SIGNATURES) {
        let Some(signature) = layer.annotations.as_ref().and_then(|a| a.get(signing::SIGNATURE_ANNOTATION)) else {
            continue;
        };
        if layer.size < 0 || layer.size as usize > signing::MAX_SIGNATURE_BYTES {
            continue;
        }
        let mut sink = source::Capped::new(signing::MAX_SIGNATURE_BYTES);
        let left = bounds.timeout.saturating_sub(started.elapsed());
        let blob = tokio::time::timeout(left, client.pull_blob(&reference, layer, &mut sink))
            .await
            .map_err(|_| unavailable(&"not finished within the host's --module-fetch-timeout"))?;
        if sink.over() {
            continue;
        }
        blob.map_err(|e| unavailable(&e))?;
        let payload = sink.into_bytes();
        if crate::runtime::digest(&payload) != layer.digest {
            continue;
        }
        let names = Some(signing::signed_digest(&payload));
        candidates.push(Candidate { message: payload, signature: signature.as_bytes().to_vec(), names });
    }
    Ok((subject, candidates))
}

/// Whether a registry's answer means "no such manifest".
fn not_found(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode as C};
    match e {
        E::ImageManifestNotFoundError(_) => true,
        E::ServerError { code, .. } => *code == 404,
        E::RegistryError { envelope, .. } => {
            envelope.errors.iter().any(|e| matches!(e.code, C::ManifestUnknown | C::NameUnknown | C::NotFound))
        }
        _ => false,
    }
}
