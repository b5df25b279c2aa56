//! Where a Reconciler's module comes from: a ConfigMap, a URL, an OCI
//! artifact or a file on the host — fetched, and checked against the digest
//! the Reconciler pins, before anything else sees the bytes.
//!
//! **Invariant: bytes from a URL or a registry are used only if their
//! digest is the one in the spec.** A ConfigMap or a file is trusted as far
//! as whoever may write it (RBAC on the ConfigMap, the host's filesystem).

use super::crd::{ModuleSource, OciSource, UrlSource};
use crate::cache::CachedObject;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Largest module accepted from any source.
pub const MAX_MODULE_BYTES: usize = 64 << 20;
/// How long a download may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a module could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The ConfigMap does not exist (yet) or lacks the key.
    #[error("{0}")]
    Missing(String),
    /// The source could not be reached or read.
    #[error("{0}")]
    Unavailable(String),
    /// What was fetched is not what the spec pins.
    #[error("digest mismatch: the spec pins {expected}, the source served {found}; nothing was loaded")]
    DigestMismatch {
        /// The pinned digest.
        expected: String,
        /// The digest of the bytes served.
        found: String,
    },
    /// The URL is not allowed.
    #[error("{0}")]
    Refused(String),
}

/// A module's bytes and their digest.
#[derive(Clone)]
pub struct Fetched {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>`.
    pub digest: String,
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fetched({} bytes, {})", self.bytes.len(), self.digest)
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The digest a source pins, when it pins one (URL, OCI): a module with this
/// digest already loaded need not be fetched again.
pub fn pinned(source: &ModuleSource) -> Option<String> {
    if let Some(url) = &source.url {
        return Some(format!("sha256:{}", url.sha256));
    }
    source.oci.as_ref().map(|o| format!("oci:{}", o.digest))
}

/// The module in a ConfigMap's `binaryData[key]` (as the cache holds it).
///
/// # Errors
/// [`Error::Missing`] naming the ConfigMap and key, or saying to use
/// `binaryData` when the key is in `data`.
pub fn from_config_map(config_map: Option<&CachedObject>, name: &str, key: &str) -> Result<Fetched, Error> {
    let Some(cm) = config_map else {
        return Err(Error::Missing(format!(
            "ConfigMap {name} does not exist in the Reconciler's namespace; create it with `kubectl create configmap {name} --from-file={key}=module.wasm`"
        )));
    };
    let value = cm.value();
    if let Some(text) = value.pointer(&format!("/binaryData/{}", escape(key))).and_then(|v| v.as_str()) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| Error::Unavailable(format!("ConfigMap {name} binaryData[{key}] is not base64: {e}")))?;
        if bytes.len() > MAX_MODULE_BYTES {
            return Err(Error::Unavailable(format!(
                "ConfigMap {name} binaryData[{key}] exceeds {MAX_MODULE_BYTES} bytes"
            )));
        }
        let digest = digest(&bytes);
        return Ok(Fetched { bytes, digest });
    }
    if value.pointer(&format!("/data/{}", escape(key))).is_some() {
        return Err(Error::Missing(format!(
            "ConfigMap {name} has {key} in data, which holds text; a module is binary: put it in binaryData (kubectl create configmap --from-file does)"
        )));
    }
    Err(Error::Missing(format!("ConfigMap {name} has no binaryData[{key}]")))
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A file on the host.
///
/// # Errors
/// [`Error::Unavailable`] with the I/O error.
pub async fn from_path(path: &str) -> Result<Fetched, Error> {
    let meta = tokio::fs::metadata(path).await.map_err(|e| Error::Unavailable(format!("reading {path}: {e}")))?;
    if meta.len() > MAX_MODULE_BYTES as u64 {
        return Err(Error::Unavailable(format!("{path} exceeds {MAX_MODULE_BYTES} bytes")));
    }
    let bytes = tokio::fs::read(path).await.map_err(|e| Error::Unavailable(format!("reading {path}: {e}")))?;
    let digest = digest(&bytes);
    Ok(Fetched { bytes, digest })
}

/// Whether plain HTTP may be used for `host`: loopback, or a Service inside
/// the cluster (`*.svc`, `*.svc.cluster.local`). Anything else must be HTTPS.
pub fn plain_http_allowed(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host == "localhost" {
        return true;
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    host.ends_with(".svc") || host.ends_with(".svc.cluster.local")
}

/// Download a module and check its SHA-256.
///
/// # Errors
/// [`Error::Refused`] for plain HTTP to the outside, [`Error::Unavailable`]
/// when the server cannot be reached or answers an error,
/// [`Error::DigestMismatch`].
pub async fn from_url(http: &reqwest::Client, source: &UrlSource) -> Result<Fetched, Error> {
    let url = reqwest::Url::parse(&source.href)
        .map_err(|e| Error::Refused(format!("spec.module.url.href {:?} is not a URL: {e}", source.href)))?;
    match url.scheme() {
        "https" => {}
        "http" if url.host_str().is_some_and(plain_http_allowed) => {}
        "http" => {
            return Err(Error::Refused(format!(
                "plain HTTP is allowed only to loopback or in-cluster *.svc hosts, not {}; use https://",
                url.host_str().unwrap_or_default()
            )));
        }
        other => return Err(Error::Refused(format!("unsupported URL scheme {other:?}; use https://"))),
    }
    let unavailable = |e: reqwest::Error| Error::Unavailable(format!("fetching {url}: {e}"));
    let response = http.get(url.clone()).timeout(FETCH_TIMEOUT).send().await.map_err(unavailable)?;
    if !response.status().is_success() {
        return Err(Error::Unavailable(format!("fetching {url}: the server answered {}", response.status())));
    }
    if response.content_length().is_some_and(|n| n > MAX_MODULE_BYTES as u64) {
        return Err(Error::Unavailable(format!("{url} is larger than {MAX_MODULE_BYTES} bytes")));
    }
    let mut bytes = Vec::new();
    let mut response = response;
    while let Some(chunk) = response.chunk().await.map_err(unavailable)? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_MODULE_BYTES {
            return Err(Error::Unavailable(format!("{url} is larger than {MAX_MODULE_BYTES} bytes")));
        }
    }
    let found = digest(&bytes);
    let expected = format!("sha256:{}", source.sha256);
    if found != expected {
        return Err(Error::DigestMismatch { expected, found });
    }
    Ok(Fetched { bytes, digest: found })
}

/// Media types of a WebAssembly layer, as the tools that push modules use
/// them (`wkg`/OCI Wasm artifacts, wasm-to-oci).
const WASM_LAYER_TYPES: &[&str] = &[
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
];

/// Pull a module from an OCI registry by manifest digest. Plain HTTP is used
/// for loopback and in-cluster registries only.
///
/// # Errors
/// [`Error::Unavailable`] (registry, auth, no wasm layer),
/// [`Error::DigestMismatch`] when the layer or manifest does not match.
pub async fn from_oci(source: &OciSource) -> Result<Fetched, Error> {
    use oci_client::secrets::RegistryAuth;
    use oci_client::{Client, Reference, client::ClientConfig, client::ClientProtocol};
    let base: Reference = source
        .reference
        .parse()
        .map_err(|e| Error::Refused(format!("spec.module.oci.reference {:?}: {e}", source.reference)))?;
    let reference =
        Reference::with_digest(base.registry().to_string(), base.repository().to_string(), source.digest.clone());
    let registry_host = base.registry().split(':').next().unwrap_or_default().to_string();
    let protocol = if plain_http_allowed(&registry_host) {
        ClientProtocol::HttpsExcept(vec![base.registry().to_string()])
    } else {
        ClientProtocol::Https
    };
    let client = Client::new(ClientConfig { protocol, ..ClientConfig::default() });
    let unavailable = |e: oci_client::errors::OciDistributionError| {
        Error::Unavailable(format!("pulling {}@{}: {e}", source.reference, source.digest))
    };
    let (manifest, manifest_digest) =
        tokio::time::timeout(FETCH_TIMEOUT, client.pull_image_manifest(&reference, &RegistryAuth::Anonymous))
            .await
            .map_err(|_| {
                Error::Unavailable(format!("pulling {}: no answer within {FETCH_TIMEOUT:?}", source.reference))
            })?
            .map_err(unavailable)?;
    if manifest_digest != source.digest {
        return Err(Error::DigestMismatch { expected: source.digest.clone(), found: manifest_digest });
    }
    let layer = select_wasm_layer(&manifest).ok_or_else(|| {
        Error::Unavailable(format!(
            "{}@{} has no WebAssembly layer (media types {})",
            source.reference,
            source.digest,
            WASM_LAYER_TYPES.join(", ")
        ))
    })?;
    if layer.size > MAX_MODULE_BYTES as i64 {
        return Err(Error::Unavailable(format!("the module layer is larger than {MAX_MODULE_BYTES} bytes")));
    }
    let mut bytes = Vec::new();
    client.pull_blob(&reference, layer, &mut bytes).await.map_err(unavailable)?;
    let found = digest(&bytes);
    if found != layer.digest {
        return Err(Error::DigestMismatch { expected: layer.digest.clone(), found });
    }
    Ok(Fetched { bytes, digest: found })
}

/// The layer holding the module: the one with a WebAssembly media type.
pub fn select_wasm_layer(
    manifest: &oci_client::manifest::OciImageManifest,
) -> Option<&oci_client::manifest::OciDescriptor> {
    manifest.layers.iter().find(|l| WASM_LAYER_TYPES.contains(&l.media_type.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_http_only_to_loopback_and_cluster_services() {
        for ok in ["127.0.0.1", "localhost", "[::1]", "modules.operon-system.svc", "m.ns.svc.cluster.local"] {
            assert!(plain_http_allowed(ok), "{ok}");
        }
        for no in ["example.com", "10.0.0.1", "svc.example.com", "evil.svc.example.com"] {
            assert!(!plain_http_allowed(no), "{no}");
        }
    }

    #[tokio::test]
    async fn urls_to_the_outside_must_be_https() {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder().build().unwrap();
        let source = UrlSource { href: "http://example.com/m.wasm".into(), sha256: "0".repeat(64) };
        let err = from_url(&http, &source).await.unwrap_err();
        assert!(matches!(err, Error::Refused(ref m) if m.contains("https://")), "{err}");
    }

    #[test]
    fn a_config_map_module_must_be_binary_data() {
        let cm = |data: serde_json::Value| {
            let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "namespace": "a"}});
            for (k, x) in data.as_object().unwrap() {
                v[k] = x.clone();
            }
            CachedObject::from_value(v).unwrap()
        };
        let ok = cm(json!({"binaryData": {"module.wasm": "AGFzbQ=="}}));
        let fetched = from_config_map(Some(&ok), "m", "module.wasm").unwrap();
        assert_eq!(fetched.bytes, b"\0asm");
        assert_eq!(fetched.digest, digest(b"\0asm"));
        let text = cm(json!({"data": {"module.wasm": "hello"}}));
        let err = from_config_map(Some(&text), "m", "module.wasm").unwrap_err().to_string();
        assert!(err.contains("binaryData"), "{err}");
        let err = from_config_map(None, "m", "module.wasm").unwrap_err().to_string();
        assert!(err.contains("kubectl create configmap m --from-file=module.wasm"), "{err}");
    }

    #[test]
    fn the_wasm_layer_should_be_found_by_media_type() {
        // A manifest as `oras push` / `wkg oci push` records it.
        let manifest: oci_client::manifest::OciImageManifest = serde_json::from_value(json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": format!("sha256:{}", "1".repeat(64)), "size": 2},
            "layers": [{"mediaType": "application/wasm", "digest": format!("sha256:{}", "2".repeat(64)), "size": 1234}]
        }))
        .unwrap();
        let layer = select_wasm_layer(&manifest).unwrap();
        assert_eq!(layer.size, 1234);
    }
}
