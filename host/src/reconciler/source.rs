//! Where a Reconciler's module comes from: a ConfigMap, a URL, an OCI
//! artifact or a file on the host — fetched, and checked against the digest
//! the Reconciler pins, before anything else sees the bytes.
//!
//! **Invariant: bytes from a URL or a registry are used only if their
//! digest is the one in the spec.** A ConfigMap or a file is trusted as far
//! as whoever may write it (RBAC on the ConfigMap, the host's filesystem).

use super::crd::{ModuleSource, OciSource, UrlSource};
use crate::egress::grants::Allowed;
use crate::egress::resolve::Lookups;
use base64::Engine as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Largest module accepted from any source, by default (`--max-module-size`).
pub const MAX_MODULE_BYTES: usize = 64 << 20;
/// How long a whole download may take, by default (`--module-fetch-timeout`).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a download may wait for its next bytes (at most the whole
/// download's time).
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// Bounds of every module download: no source can make the host wait or
/// buffer without limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most bytes of a module (`--max-module-size`).
    pub max_bytes: usize,
    /// Longest whole download (`--module-fetch-timeout`).
    pub timeout: Duration,
}

impl Bounds {
    /// How long a download may wait for its next bytes.
    pub fn read_timeout(&self) -> Duration {
        READ_TIMEOUT.min(self.timeout)
    }

    /// The refusal of a download that took too long.
    fn late(&self, what: &str) -> Error {
        Error::Unavailable(format!(
            "{what}: not finished within {:?} (the host's --module-fetch-timeout; a source this slow needs a \
             longer one, or a faster mirror)",
            self.timeout
        ))
    }
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { max_bytes: MAX_MODULE_BYTES, timeout: FETCH_TIMEOUT }
    }
}

/// The HTTP client of URL sources: every read bounded in time; names
/// resolved to public addresses and the special ones the operator opened
/// only ([`SourceResolver`]); redirects followed only where the first URL
/// could have gone (HTTPS, or plain HTTP to an address the operator
/// opened, or to loopback and in-cluster `*.svc` names, which the resolver
/// holds to opened addresses), so a source cannot be bounced to an
/// internal address.
pub fn http_client(bounds: Bounds, allowed: &Allowed) -> reqwest::Client {
    let opened = Arc::new(allowed.clone());
    let check = opened.clone();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= 5 {
            return attempt.error("more than 5 redirects");
        }
        let url = attempt.url();
        let address = match url.host() {
            Some(url::Host::Ipv4(a)) => Some(IpAddr::V4(a)),
            Some(url::Host::Ipv6(a)) => Some(IpAddr::V6(a)),
            _ => None,
        };
        if let Some(a) = address
            && check.special(a).is_some()
            && !check.opens(a)
        {
            let host = url.host_str().unwrap_or_default().to_string();
            return attempt.error(format!("a redirect to {host} was refused: {}", not_reachable(&host)));
        }
        let internal = address.is_some_and(|a| check.special(a).is_some())
            || url.host_str().is_some_and(|h| address.is_none() && plain_http_allowed(h));
        match url.scheme() {
            "https" => attempt.follow(),
            "http" if internal => attempt.follow(),
            other => {
                let why = format!(
                    "a redirect to {other}://{} was refused: module sources are fetched over HTTPS only \
                     (plain HTTP only to addresses the operator opened with --egress-allow)",
                    url.host_str().unwrap_or_default()
                );
                attempt.error(why)
            }
        }
    });
    reqwest::Client::builder()
        .redirect(policy)
        .no_proxy()
        .dns_resolver(Arc::new(SourceResolver { allowed: opened }))
        .read_timeout(bounds.read_timeout())
        .build()
        .unwrap_or_default()
}

/// The one refusal of a module URL the host may not fetch from: the same
/// whatever is there (a server, a closed port, nothing), since nothing
/// was tried.
fn not_reachable(host: &str) -> String {
    format!(
        "spec.module.url: {host} is not an address this host fetches modules from: only public addresses, and \
         the special ones (loopback, link-local, private, the cluster's) the operator opened with \
         --egress-allow; nothing was fetched"
    )
}

/// Resolves the names of module URLs to public addresses and the special
/// ones the operator opened, whatever a name answers when the connection is
/// made (DNS rebinding gets nowhere).
struct SourceResolver {
    allowed: Arc<Allowed>,
}

impl reqwest::dns::Resolve for SourceResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.allowed.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let end = std::time::Instant::now() + READ_TIMEOUT;
            let found = Lookups::system()
                .resolve(&host, 0, end)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            let kept: Vec<std::net::SocketAddr> =
                found.into_iter().filter(|a| allowed.special(a.ip()).is_none() || allowed.opens(a.ip())).collect();
            if kept.is_empty() {
                return Err(Box::new(Error::Refused(not_reachable(&host))) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Where `url` may be fetched from: `Ok(true)` when every address it
/// reaches is a special one the operator opened (plain HTTP is then
/// allowed: the bytes stay in the operator's network, and the digest pins
/// them), `Ok(false)` when they are public.
///
/// # Errors
/// [`Error::Refused`] for a special address the operator did not open,
/// with one message whatever is there; [`Error::Unavailable`] for a name
/// that does not resolve.
async fn reachable(url: &reqwest::Url, allowed: &Allowed, bounds: Bounds) -> Result<bool, Error> {
    let host = url.host_str().unwrap_or_default().to_string();
    let addresses: Vec<IpAddr> = match url.host() {
        Some(url::Host::Ipv4(a)) => vec![IpAddr::V4(a)],
        Some(url::Host::Ipv6(a)) => vec![IpAddr::V6(a)],
        Some(url::Host::Domain(name)) => {
            let end = std::time::Instant::now() + bounds.read_timeout();
            let port = url.port_or_known_default().unwrap_or(443);
            Lookups::system()
                .resolve(name, port, end)
                .await
                .map_err(|e| Error::Unavailable(format!("fetching {url}: {e}")))?
                .into_iter()
                .map(|a| a.ip())
                .collect()
        }
        None => return Err(Error::Refused(format!("spec.module.url.href {url} has no host"))),
    };
    if addresses.iter().any(|a| allowed.special(*a).is_some() && !allowed.opens(*a)) {
        return Err(Error::Refused(not_reachable(&host)));
    }
    Ok(!addresses.is_empty() && addresses.iter().all(|a| allowed.special(*a).is_some()))
}

/// Why a module could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The ConfigMap does not exist (yet) or lacks the key.
    #[error("{0}")]
    Missing(String),
    /// The source could not be reached or read.
    #[error("{0}")]
    Unavailable(String),
    /// What was fetched is not what the spec pins. The message does not
    /// say what was found: the status would tell a tenant the digest of
    /// whatever a URL it names serves (an internal address's, too).
    #[error(
        "digest mismatch: the spec pins {expected}, the source served other bytes; nothing was loaded \
         (pin the digest of the module you published)"
    )]
    DigestMismatch {
        /// The pinned digest.
        expected: String,
        /// The digest of the bytes served (for the host's log only).
        found: String,
    },
    /// The URL is not allowed.
    #[error("{0}")]
    Refused(String),
    /// The module is not signed as `spec.module.verify` or the host's
    /// `--require-signed-modules` asks (the message names the keys and
    /// what to do); `retry` when a signature may still be published.
    #[error("{message}")]
    Untrusted {
        /// What is wrong, which keys, what to do.
        message: String,
        /// Whether fetching again may find a signature.
        retry: bool,
    },
    /// The module is larger than the host accepts.
    #[error("{what} is larger than the {limit} bytes this host accepts (--max-module-size)")]
    TooLarge {
        /// What was fetched.
        what: String,
        /// The limit.
        limit: usize,
    },
}

/// A module's bytes and their digest.
#[derive(Clone)]
pub struct Fetched {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>`.
    pub digest: String,
    /// A detached signature kept beside the module, read with it: the key
    /// `<key>.sig` of its ConfigMap, the file `<path>.sig` (URL and OCI
    /// signatures are fetched only when one is required).
    pub signature: Option<Vec<u8>>,
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fetched({} bytes, {})", self.bytes.len(), self.digest)
    }
}

pub use crate::runtime::digest;

/// The digest a source pins, when it pins one (URL, OCI): a module with this
/// digest already loaded need not be fetched again.
pub fn pinned(source: &ModuleSource) -> Option<String> {
    if let Some(url) = &source.url {
        return Some(format!("sha256:{}", url.sha256));
    }
    source.oci.as_ref().map(|o| format!("oci:{}", o.digest))
}

/// The module in a ConfigMap's `binaryData[key]` (the object as JSON).
///
/// # Errors
/// [`Error::Missing`] naming the ConfigMap and key, or saying to use
/// `binaryData` when the key is in `data`.
pub fn from_config_map(
    config_map: Option<&serde_json::Value>,
    name: &str,
    key: &str,
    bounds: Bounds,
) -> Result<Fetched, Error> {
    let Some(value) = config_map else {
        return Err(missing_config_map(name, key));
    };
    if let Some(text) = value.pointer(&format!("/binaryData/{}", escape(key))).and_then(|v| v.as_str()) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| Error::Unavailable(format!("ConfigMap {name} binaryData[{key}] is not base64: {e}")))?;
        if bytes.len() > bounds.max_bytes {
            return Err(Error::TooLarge {
                what: format!("ConfigMap {name} binaryData[{key}]"),
                limit: bounds.max_bytes,
            });
        }
        let digest = digest(&bytes);
        let signature = config_map_signature(value, key);
        return Ok(Fetched { bytes, digest, signature });
    }
    if value.pointer(&format!("/data/{}", escape(key))).is_some() {
        return Err(Error::Missing(format!(
            "ConfigMap {name} has {key} in data, which holds text; a module is binary: put it in binaryData (kubectl create configmap --from-file does)"
        )));
    }
    Err(Error::Missing(format!("ConfigMap {name} has no binaryData[{key}]")))
}

/// The signature beside a ConfigMap's module: the key `<key>.sig`, in
/// `data` (the base64 text `cosign sign-blob` and `operon sign` write, which
/// `kubectl create configmap --from-file` puts there) or `binaryData`.
fn config_map_signature(value: &serde_json::Value, key: &str) -> Option<Vec<u8>> {
    let name = escape(&format!("{key}.sig"));
    if let Some(text) = value.pointer(&format!("/data/{name}")).and_then(|v| v.as_str()) {
        return Some(text.as_bytes().to_vec());
    }
    let text = value.pointer(&format!("/binaryData/{name}")).and_then(|v| v.as_str())?;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// The refusal of a ConfigMap source whose ConfigMap does not exist.
pub fn missing_config_map(name: &str, key: &str) -> Error {
    Error::Missing(format!(
        "ConfigMap {name} does not exist in the Reconciler's namespace; create it with `kubectl create configmap {name} --from-file={key}=module.wasm`"
    ))
}

/// The module in ConfigMap `namespace/name`'s `binaryData[key]`, read from
/// the API server: the cache holds module ConfigMaps' metadata only (a
/// megabyte each otherwise, for as long as the Reconciler lives).
///
/// # Errors
/// As [`from_config_map`]; [`Error::Unavailable`] when the API server
/// cannot be asked.
pub async fn from_config_map_api(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
    bounds: Bounds,
) -> Result<Fetched, Error> {
    let resource = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(client.clone(), namespace, &resource);
    let object =
        api.get_opt(name).await.map_err(|e| Error::Unavailable(format!("ConfigMap {name} could not be read: {e}")))?;
    from_config_map(object.as_ref().map(|o| &o.data), name, key, bounds)
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A file on the host.
///
/// # Errors
/// [`Error::Unavailable`] with the I/O error.
pub async fn from_path(path: &str, bounds: Bounds) -> Result<Fetched, Error> {
    let meta = tokio::fs::metadata(path).await.map_err(|e| Error::Unavailable(format!("reading {path}: {e}")))?;
    if meta.len() > bounds.max_bytes as u64 {
        return Err(Error::TooLarge { what: path.to_string(), limit: bounds.max_bytes });
    }
    let bytes = tokio::fs::read(path).await.map_err(|e| Error::Unavailable(format!("reading {path}: {e}")))?;
    let digest = digest(&bytes);
    let signature = match tokio::fs::read(format!("{path}.sig")).await {
        Ok(s) if s.len() <= crate::signing::MAX_SIGNATURE_BYTES => Some(s),
        _ => None,
    };
    Ok(Fetched { bytes, digest, signature })
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

/// What a bounded GET found.
pub enum Got {
    /// The body.
    Bytes(Vec<u8>),
    /// The server answered 404.
    NotFound,
}

/// A URL a module (or its signature) may be fetched from: a public address
/// over https, or a special address the operator opened (`--egress-allow`)
/// over https or plain HTTP. Whatever else a URL names is refused before
/// anything is sent, with one message (a tenant learns nothing of what
/// answers there).
///
/// # Errors
/// [`Error::Refused`] naming the field and the fix, for plain HTTP to the
/// outside or an address the operator did not open;
/// [`Error::Unavailable`] for a name that does not resolve.
pub async fn checked_url(href: &str, field: &str, allowed: &Allowed, bounds: Bounds) -> Result<reqwest::Url, Error> {
    let url = reqwest::Url::parse(href).map_err(|e| Error::Refused(format!("{field} {href:?} is not a URL: {e}")))?;
    match url.scheme() {
        "https" => {
            reachable(&url, allowed, bounds).await?;
        }
        "http" => {
            // Plain HTTP stays inside the operator's network: to an address
            // (or a loopback or `*.svc` name) that reaches only special
            // addresses the operator opened.
            let literal = matches!(url.host(), Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)));
            let internal =
                (literal || url.host_str().is_some_and(plain_http_allowed)) && reachable(&url, allowed, bounds).await?;
            if !internal {
                return Err(Error::Refused(format!(
                    "plain HTTP is allowed only to addresses the operator opened (loopback, in-cluster), not {}; \
                     use https://",
                    url.host_str().unwrap_or_default()
                )));
            }
        }
        other => return Err(Error::Refused(format!("unsupported URL scheme {other:?}; use https://"))),
    }
    Ok(url)
}

/// GET `url` with the bounds of module downloads: at most `max_bytes`,
/// within the fetch timeout, redirects only as [`http_client`] allows.
///
/// # Errors
/// [`Error::Unavailable`] (unreachable, an error status other than 404,
/// too slow), [`Error::TooLarge`].
pub async fn get(http: &reqwest::Client, url: &reqwest::Url, max_bytes: usize, bounds: Bounds) -> Result<Got, Error> {
    let unavailable = |e: reqwest::Error| {
        if e.is_timeout() {
            return Error::Unavailable(format!(
                "fetching {url}: the source sent nothing for {:?} and was given up (the host's \
                 --module-fetch-timeout bounds each wait, up to 15s, and the whole download)",
                bounds.read_timeout()
            ));
        }
        // The redirect policy's refusal is the cause to show, not "error
        // following redirect".
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        Error::Unavailable(format!("fetching {url}: {text}"))
    };
    let download = async {
        let mut response = http.get(url.clone()).send().await.map_err(unavailable)?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(Got::NotFound);
        }
        if !response.status().is_success() {
            return Err(Error::Unavailable(format!("fetching {url}: the server answered {}", response.status())));
        }
        let too_large = || Error::TooLarge { what: url.to_string(), limit: max_bytes };
        if response.content_length().is_some_and(|n| n > max_bytes as u64) {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unavailable)? {
            if bytes.len() + chunk.len() > max_bytes {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Got::Bytes(bytes))
    };
    tokio::time::timeout(bounds.timeout, download).await.map_err(|_| bounds.late(&format!("fetching {url}")))?
}

/// Download a module from where [`checked_url`] allows and check its
/// SHA-256.
///
/// # Errors
/// [`Error::Refused`] for plain HTTP to the outside or an address the
/// operator did not open, [`Error::Unavailable`] when the server cannot
/// be reached or answers an error, [`Error::DigestMismatch`].
pub async fn from_url(
    http: &reqwest::Client,
    source: &UrlSource,
    bounds: Bounds,
    allowed: &Allowed,
) -> Result<Fetched, Error> {
    let url = checked_url(&source.href, "spec.module.url.href", allowed, bounds).await?;
    let bytes = match get(http, &url, bounds.max_bytes, bounds).await? {
        Got::Bytes(bytes) => bytes,
        Got::NotFound => {
            return Err(Error::Unavailable(format!(
                "fetching {url}: the server answered {}",
                reqwest::StatusCode::NOT_FOUND
            )));
        }
    };
    let found = digest(&bytes);
    let expected = format!("sha256:{}", source.sha256);
    if found != expected {
        tracing::info!(%url, %expected, %found, "module source served other bytes than the spec pins");
        return Err(Error::DigestMismatch { expected, found });
    }
    Ok(Fetched { bytes, digest: found, signature: None })
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
pub async fn from_oci(source: &OciSource, bounds: Bounds) -> Result<Fetched, Error> {
    use oci_client::Reference;
    use oci_client::secrets::RegistryAuth;
    let (client, base) = oci_client(&source.reference)?;
    let reference =
        Reference::with_digest(base.registry().to_string(), base.repository().to_string(), source.digest.clone());
    let unavailable = |e: oci_client::errors::OciDistributionError| {
        Error::Unavailable(format!("pulling {}@{}: {e}", source.reference, source.digest))
    };
    let late = || bounds.late(&format!("pulling {}", source.reference));
    let started = tokio::time::Instant::now();
    let (manifest, manifest_digest) =
        tokio::time::timeout(bounds.timeout, client.pull_image_manifest(&reference, &RegistryAuth::Anonymous))
            .await
            .map_err(|_| late())?
            .map_err(unavailable)?;
    if manifest_digest != source.digest {
        tracing::info!(reference = %source.reference, expected = %source.digest, found = %manifest_digest,
            "registry served another manifest than the spec pins");
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
    let too_large =
        || Error::TooLarge { what: format!("{}@{}", source.reference, layer.digest), limit: bounds.max_bytes };
    if layer.size > bounds.max_bytes as i64 {
        return Err(too_large());
    }
    // The layer's declared size is the registry's word: the bytes are
    // counted as they come, and the whole pull is bounded in time.
    let mut sink = Capped::new(bounds.max_bytes);
    let left = bounds.timeout.saturating_sub(started.elapsed());
    let pulled =
        tokio::time::timeout(left, client.pull_blob(&reference, layer, &mut sink)).await.map_err(|_| late())?;
    if sink.over {
        return Err(too_large());
    }
    pulled.map_err(unavailable)?;
    let bytes = sink.bytes;
    let found = digest(&bytes);
    if found != layer.digest {
        tracing::info!(reference = %source.reference, expected = %layer.digest, %found,
            "registry served another layer than its manifest names");
        return Err(Error::DigestMismatch { expected: layer.digest.clone(), found });
    }
    Ok(Fetched { bytes, digest: found, signature: None })
}

/// A registry client for `reference` (`registry/repository[:tag]`), and the
/// reference parsed: plain HTTP for loopback and in-cluster registries only,
/// anonymous.
///
/// # Errors
/// [`Error::Refused`] when the reference does not parse.
pub fn oci_client(reference: &str) -> Result<(oci_client::Client, oci_client::Reference), Error> {
    use oci_client::client::{ClientConfig, ClientProtocol};
    let base: oci_client::Reference =
        reference.parse().map_err(|e| Error::Refused(format!("spec.module.oci.reference {reference:?}: {e}")))?;
    let registry_host = base.registry().split(':').next().unwrap_or_default().to_string();
    let protocol = if plain_http_allowed(&registry_host) {
        ClientProtocol::HttpsExcept(vec![base.registry().to_string()])
    } else {
        ClientProtocol::Https
    };
    Ok((oci_client::Client::new(ClientConfig { protocol, ..ClientConfig::default() }), base))
}

/// A sink for [`oci_client::Client::pull_blob`] that refuses to grow past
/// `max` bytes: a registry's declared sizes are its word only.
pub struct Capped {
    bytes: Vec<u8>,
    max: usize,
    over: bool,
}

impl Capped {
    /// An empty sink for at most `max` bytes.
    pub fn new(max: usize) -> Capped {
        Capped { bytes: Vec::new(), max, over: false }
    }

    /// Whether more than `max` bytes were offered.
    pub fn over(&self) -> bool {
        self.over
    }

    /// What was written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.max {
            self.over = true;
            return std::task::Poll::Ready(Err(std::io::Error::other("the module is larger than the host accepts")));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
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
        for href in ["http://example.com/m.wasm", "http://93.184.216.34/m.wasm"] {
            let source = UrlSource { href: href.into(), sha256: "0".repeat(64) };
            let err = from_url(&http, &source, Bounds::default(), &Allowed::public()).await.unwrap_err();
            assert!(matches!(err, Error::Refused(ref m) if m.contains("https://")), "{href}: {err}");
        }
    }

    /// A module URL at an internal address is refused before anything is
    /// sent, with one message whether a server answers there, the port is
    /// closed or nothing answers (no internal port scanner); where the
    /// operator opened the address, it is fetched.
    #[tokio::test]
    async fn a_module_url_at_an_internal_address_should_be_refused_alike_before_connecting() {
        crate::install_crypto_provider();
        let answering = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = answering.local_addr().unwrap().port();
        let accepted = tokio::spawn(async move { answering.accept().await.is_ok() });
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let public = Allowed::public();
        let http = http_client(Bounds::default(), &public);
        let mut messages = std::collections::BTreeSet::new();
        for href in [
            format!("https://127.0.0.1:{open}/m.wasm"),
            format!("https://127.0.0.1:{closed}/m.wasm"),
            format!("http://127.0.0.1:{open}/m.wasm"),
            "https://169.254.169.254/latest/m.wasm".to_string(),
            "https://[::ffff:10.0.0.1]/m.wasm".to_string(),
        ] {
            let source = UrlSource { href, sha256: "0".repeat(64) };
            let err = from_url(&http, &source, Bounds::default(), &public).await.unwrap_err();
            let Error::Refused(m) = err else { panic!("{err}") };
            assert!(m.contains("--egress-allow") && m.contains("nothing was fetched"), "{m}");
            messages.insert(m.replace(&open.to_string(), "").replace(&closed.to_string(), ""));
        }
        assert!(!accepted.is_finished(), "a connection was made to the internal server");
        let named = UrlSource { href: "https://localhost/m.wasm".into(), sha256: "0".repeat(64) };
        let err = from_url(&http, &named, Bounds::default(), &public).await.unwrap_err();
        assert!(matches!(err, Error::Refused(ref m) if m.contains("nothing was fetched")), "{err}");
        // Opened by the operator: fetched (here, a digest that does not match).
        let opened = Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap();
        let http = http_client(Bounds::default(), &opened);
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = server.local_addr().unwrap().port();
        let app = axum::Router::new().route("/m.wasm", axum::routing::get(|| async { "not a module" }));
        tokio::spawn(async move { axum::serve(server, app).await.unwrap() });
        let source = UrlSource { href: format!("http://127.0.0.1:{port}/m.wasm"), sha256: "0".repeat(64) };
        let err = from_url(&http, &source, Bounds::default(), &opened).await.unwrap_err();
        assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
    }

    #[test]
    fn a_config_map_module_must_be_binary_data() {
        let cm = |data: serde_json::Value| {
            let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "namespace": "a"}});
            for (k, x) in data.as_object().unwrap() {
                v[k] = x.clone();
            }
            v
        };
        let ok = cm(json!({"binaryData": {"module.wasm": "AGFzbQ=="}}));
        let fetched = from_config_map(Some(&ok), "m", "module.wasm", Bounds::default()).unwrap();
        assert_eq!(fetched.bytes, b"\0asm");
        assert_eq!(fetched.digest, digest(b"\0asm"));
        let text = cm(json!({"data": {"module.wasm": "hello"}}));
        let err = from_config_map(Some(&text), "m", "module.wasm", Bounds::default()).unwrap_err().to_string();
        assert!(err.contains("binaryData"), "{err}");
        let err = from_config_map(None, "m", "module.wasm", Bounds::default()).unwrap_err().to_string();
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
