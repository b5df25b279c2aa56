//! Credentials by reference: a Reconciler's `spec.credentials` names
//! Secrets and how each is used; a guest asks for one by name and the host
//! adds it to the request. The value never enters the guest: it is read
//! with the plugin's own client (its ServiceAccount, when it has one), kept
//! in the host's memory for a few seconds (so a rotated Secret takes effect
//! without a restart), and blanked out of whatever an answer echoes.

use super::grants::{EgressGrant, Rules, Target};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use reqwest::Url;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a Secret's value is kept before it is read again: a rotation
/// takes effect within this.
pub const SECRET_TTL: Duration = Duration::from_secs(5);

/// What replaces a credential's value in answers.
pub const REDACTED: &str = "[redacted]";

/// `spec.credentials[]`.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Credential {
    /// The name a guest asks for (`credential: "pdns"`).
    pub name: String,
    /// The Secret and key holding the value.
    pub secret_ref: SecretKeyRef,
    /// How the value is sent: `bearer` (`Authorization: Bearer VALUE`),
    /// `basic` (`Authorization: Basic ...`, the value being `user:password`)
    /// or `header` (the header named by `header`, set to the value).
    #[serde(rename = "use")]
    pub usage: CredentialUse,
    /// The header, for `use: header` (e.g. `X-API-Key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The hosts it is sent to (as `spec.grants.egress` names hosts: a
    /// name, `*.domain`, an address or a CIDR); a call elsewhere naming it
    /// is refused, and a redirect elsewhere goes without it.
    pub hosts: Vec<String>,
}

/// `spec.credentials[].secretRef`.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret.
    pub name: String,
    /// Its namespace: only for a ClusterReconciler (a Reconciler's Secrets
    /// are in its own namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The key in its `data`.
    pub key: String,
}

/// `spec.credentials[].use`.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CredentialUse {
    /// `Authorization: Bearer VALUE`.
    #[default]
    Bearer,
    /// `Authorization: Basic base64(VALUE)`, VALUE being `user:password`.
    Basic,
    /// A header of its own.
    Header,
}

/// One credential, compiled.
struct Compiled {
    spec: Credential,
    hosts: Rules,
    namespace: String,
}

/// A plugin's credentials and the Secrets' values it has read.
pub struct Credentials {
    by_name: HashMap<String, Compiled>,
    /// Reads Secrets as the plugin.
    client: Option<kube::Client>,
    cache: Mutex<HashMap<String, (Instant, Vec<u8>)>>,
}

/// Why a credential cannot be compiled, sent or read. Messages name the
/// field or the Secret, never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A credential that cannot be used, naming the field.
    #[error("spec.credentials[{index}]: {reason}")]
    Bad {
        /// Which one.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The guest named a credential the spec does not have.
    #[error("no credential {name:?} in spec.credentials (it has: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// The credential is not for this host.
    #[error("credential {name:?} is not for {host} (its hosts: {hosts})")]
    NotFor {
        /// The credential.
        name: String,
        /// The host called.
        host: String,
        /// Where it may go.
        hosts: String,
    },
    /// A credential over plain HTTP.
    #[error(
        "credential {name:?} goes only over https, not to {url} (a grant of http to the host does not change \
         that; only a loopback address the operator opened is exempt, as its bytes never leave the host)"
    )]
    Plaintext {
        /// The credential.
        name: String,
        /// Where the call (or its redirect) went.
        url: String,
    },
    /// The Secret could not be read (in time), or its value cannot be sent.
    #[error("credential {name:?}: {reason}")]
    Unreadable {
        /// The credential.
        name: String,
        /// Why, naming the Secret and key.
        reason: String,
    },
}

/// A credential as a request carries it: the header and its value. Debug
/// shows neither.
pub struct Applied {
    /// The header's name, lowercased.
    pub header: String,
    /// The header's value.
    pub value: String,
    /// What to blank out of answers: the value, and the forms it is sent in.
    pub secrets: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Applied({}: {REDACTED})", self.header)
    }
}

impl Credentials {
    /// No credentials.
    pub fn none() -> Credentials {
        Credentials { by_name: HashMap::new(), client: None, cache: Mutex::default() }
    }

    /// Compile `spec.credentials` for a plugin whose Secrets are in
    /// `namespace` (`None`: a ClusterReconciler, which names each Secret's
    /// namespace), read through `client`.
    ///
    /// # Errors
    /// [`Error::Bad`] for a duplicate name, a missing header, no hosts,
    /// or a namespace where none may be named.
    pub fn compile(
        specs: &[Credential],
        namespace: Option<&str>,
        client: Option<kube::Client>,
    ) -> Result<Credentials, Error> {
        let mut by_name = HashMap::new();
        for (index, spec) in specs.iter().enumerate() {
            let bad = |reason: String| Error::Bad { index, reason };
            if spec.name.is_empty() {
                return Err(bad("name must not be empty".into()));
            }
            if by_name.contains_key(&spec.name) {
                return Err(bad(format!("the name {:?} is used twice", spec.name)));
            }
            if spec.usage == CredentialUse::Header {
                match spec.header.as_deref() {
                    None | Some("") => return Err(bad("use: header needs header: NAME".into())),
                    Some(h) if http::HeaderName::from_bytes(h.as_bytes()).is_err() => {
                        return Err(bad(format!("header {h:?} is not a header name")));
                    }
                    Some(h) if super::FORBIDDEN_HEADERS.contains(&h.to_ascii_lowercase().as_str()) => {
                        return Err(bad(format!("header {h:?} is the host's to set")));
                    }
                    Some(_) => {}
                }
            }
            if spec.hosts.is_empty() {
                return Err(bad("hosts must name where the credential may be sent".into()));
            }
            let grants: Vec<EgressGrant> =
                spec.hosts.iter().map(|h| EgressGrant { host: h.clone(), ..EgressGrant::default() }).collect();
            let hosts = Rules::compile(&grants).map_err(|e| match e {
                super::grants::Error::BadGrant { index, reason } => bad(format!("hosts[{index}]: {reason}")),
                other => bad(other.to_string()),
            })?;
            let namespace = match (namespace, &spec.secret_ref.namespace) {
                (Some(own), None) => own.to_string(),
                (Some(own), Some(other)) if other == own => own.to_string(),
                (Some(_), Some(_)) => {
                    return Err(bad("secretRef.namespace is for ClusterReconcilers: a Reconciler's Secrets are in its own namespace".into()));
                }
                (None, Some(ns)) => ns.clone(),
                (None, None) => return Err(bad("secretRef.namespace is required for a ClusterReconciler".into())),
            };
            by_name.insert(spec.name.clone(), Compiled { spec: spec.clone(), hosts, namespace });
        }
        Ok(Credentials { by_name, client, cache: Mutex::default() })
    }

    /// Whether `name` may be sent to `url`: a credential the spec has, for
    /// `url`'s host, over https (or to a loopback address `opened` allows:
    /// those bytes never leave the host).
    ///
    /// # Errors
    /// [`Error::Unknown`], [`Error::NotFor`] or [`Error::Plaintext`].
    pub fn check(&self, name: &str, url: &Url, target: &Target, opened: bool) -> Result<(), Error> {
        let c = self.by_name.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            known.sort_unstable();
            Error::Unknown {
                name: name.to_string(),
                known: if known.is_empty() { "none".into() } else { known.join(", ") },
            }
        })?;
        if !c.hosts.covers(target) {
            return Err(Error::NotFor { name: name.to_string(), host: target.shown(), hosts: c.spec.hosts.join(", ") });
        }
        let loopback = matches!(target, Target::Address(a) if super::special::canonical(*a).is_loopback());
        if url.scheme() != "https" && !(loopback && opened) {
            let mut shown = url.clone();
            shown.set_query(None);
            return Err(Error::Plaintext { name: name.to_string(), url: shown.to_string() });
        }
        Ok(())
    }

    /// Whether `name` may follow a redirect to `target`.
    pub fn goes_to(&self, name: &str, target: &Target) -> bool {
        self.by_name.get(name).is_some_and(|c| c.hosts.covers(target))
    }

    /// The header `name` sets, read from its Secret (kept [`SECRET_TTL`]),
    /// by `end` at the latest (the call's end). Awaits the read (the
    /// guest's call waits, holding no thread).
    ///
    /// # Errors
    /// [`Error::Unreadable`]: the Secret or key is missing, unreadable or
    /// not read by `end` (the message names them, never the value).
    pub async fn apply(&self, name: &str, end: Instant) -> Result<Applied, Error> {
        let unreadable = |reason: String| Error::Unreadable { name: name.to_string(), reason };
        let c = self.by_name.get(name).ok_or_else(|| unreadable("not in spec.credentials".into()))?;
        let value = self.value(c, end).await?;
        let text = String::from_utf8(value).map_err(|_| unreadable("the Secret's value is not UTF-8 text".into()))?;
        let text = text.trim_end_matches(['\r', '\n']).to_string();
        let (header, value) = match c.spec.usage {
            CredentialUse::Bearer => ("authorization".to_string(), format!("Bearer {text}")),
            CredentialUse::Basic => (
                "authorization".to_string(),
                format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(text.as_bytes())),
            ),
            CredentialUse::Header => (c.spec.header.clone().unwrap_or_default().to_ascii_lowercase(), text.clone()),
        };
        if http::HeaderValue::from_str(&value).is_err() {
            return Err(unreadable("the Secret's value cannot be sent in a header".into()));
        }
        let mut plain = vec![text.clone().into_bytes()];
        if c.spec.usage == CredentialUse::Basic {
            plain.push(base64::engine::general_purpose::STANDARD.encode(text.as_bytes()).into_bytes());
            if let Some((_, password)) = text.split_once(':')
                && password.len() >= 4
            {
                plain.push(password.as_bytes().to_vec());
            }
        }
        plain.retain(|s| !s.is_empty());
        let secrets = plain.iter().flat_map(|s| forms(s)).collect();
        Ok(Applied { header, value, secrets })
    }

    async fn value(&self, c: &Compiled, end: Instant) -> Result<Vec<u8>, Error> {
        let unreadable = |reason: String| Error::Unreadable { name: c.spec.name.clone(), reason };
        let key = format!("{}/{}/{}", c.namespace, c.spec.secret_ref.name, c.spec.secret_ref.key);
        if let Some((at, value)) = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key)
            && at.elapsed() < SECRET_TTL
        {
            return Ok(value.clone());
        }
        let where_ = format!("Secret {}/{}", c.namespace, c.spec.secret_ref.name);
        let client = self.client.clone().ok_or_else(|| unreadable(format!("{where_}: this host reads no Secrets")))?;
        let api: kube::Api<Secret> = kube::Api::namespaced(client, &c.namespace);
        let name = c.spec.secret_ref.name.clone();
        let within = READ_TIMEOUT.min(end.saturating_duration_since(Instant::now()));
        let read = tokio::time::timeout(within, api.get_opt(&name)).await;
        let secret = match read {
            Err(_) => {
                return Err(unreadable(format!(
                    "{where_}: not read within {} ms (the call's time)",
                    within.as_millis()
                )));
            }
            Ok(Err(e)) => return Err(unreadable(format!("{where_}: cannot be read by the plugin ({e})"))),
            Ok(Ok(None)) => return Err(unreadable(format!("{where_} does not exist"))),
            Ok(Ok(Some(s))) => s,
        };
        let value = secret
            .data
            .and_then(|mut d| d.remove(&c.spec.secret_ref.key))
            .map(|b| b.0)
            .ok_or_else(|| unreadable(format!("{where_} has no key {:?}", c.spec.secret_ref.key)))?;
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, (Instant::now(), value.clone()));
        Ok(value)
    }
}

/// The longest a Secret read waits (less when the call ends sooner).
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The forms a value may come back in from a server that echoes it in
/// another encoding the host did not choose: as sent, percent-encoded,
/// JSON-escaped, and in UTF-16 (both byte orders). The host also asks for
/// the identity encoding and strips ranges on a credentialed request
/// (`super::CREDENTIAL_STRIPPED`), and refuses a compressed or partial
/// answer to one.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![value.to_vec()];
    let percent = percent_encoding::percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string();
    out.push(percent.into_bytes());
    if let Ok(text) = std::str::from_utf8(value) {
        if let Ok(json) = serde_json::to_string(text) {
            out.push(json.trim_matches('"').as_bytes().to_vec());
        }
        out.push(text.encode_utf16().flat_map(u16::to_le_bytes).collect());
        out.push(text.encode_utf16().flat_map(u16::to_be_bytes).collect());
    }
    out.sort();
    out.dedup();
    out
}

/// `bytes` with every occurrence of each secret replaced by [`REDACTED`].
pub fn redact(bytes: &[u8], secrets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let mut next = Vec::with_capacity(out.len());
        let mut i = 0;
        while i < out.len() {
            if out[i..].starts_with(secret) {
                next.extend_from_slice(REDACTED.as_bytes());
                i += secret.len();
            } else {
                next.push(out[i]);
                i += 1;
            }
        }
        out = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(name: &str, usage: CredentialUse, header: Option<&str>, hosts: &[&str]) -> Credential {
        Credential {
            name: name.into(),
            secret_ref: SecretKeyRef { name: "s".into(), namespace: None, key: "k".into() },
            usage,
            header: header.map(str::to_string),
            hosts: hosts.iter().map(|h| (*h).to_string()).collect(),
        }
    }

    #[test]
    fn credentials_should_go_only_to_their_hosts_and_be_refused_when_malformed() {
        let c = Credentials::compile(
            &[credential("pdns", CredentialUse::Header, Some("X-API-Key"), &["127.0.0.1", "*.dns.example"])],
            Some("team"),
            None,
        )
        .unwrap();
        let check = |name: &str, url: &str| {
            let url = Url::parse(url).unwrap();
            c.check(name, &url, &super::super::grants::target(&url).unwrap(), true).map_err(|e| e.to_string())
        };
        assert_eq!(check("pdns", "http://127.0.0.1/"), Ok(()));
        assert_eq!(check("pdns", "https://a.dns.example/"), Ok(()));
        assert!(check("pdns", "https://evil.example/").unwrap_err().contains("not for evil.example"));
        assert!(check("other", "https://a.dns.example/").unwrap_err().contains("it has: pdns"));
        let bad = |c: Credential, ns: Option<&str>| Credentials::compile(&[c], ns, None).err().unwrap().to_string();
        assert!(bad(credential("x", CredentialUse::Header, None, &["a.example"]), Some("t")).contains("header"));
        assert!(
            bad(credential("x", CredentialUse::Header, Some("Host"), &["a.example"]), Some("t")).contains("host's")
        );
        assert!(bad(credential("x", CredentialUse::Bearer, None, &[]), Some("t")).contains("hosts"));
        assert!(
            bad(credential("x", CredentialUse::Bearer, None, &["a.example"]), None).contains("namespace is required")
        );
        let mut other = credential("x", CredentialUse::Bearer, None, &["a.example"]);
        other.secret_ref.namespace = Some("kube-system".into());
        assert!(bad(other, Some("t")).contains("own namespace"));
    }

    #[test]
    fn redaction_should_blank_every_occurrence() {
        let secrets = vec![b"s3cret".to_vec(), b"czNjcmV0".to_vec()];
        let out = redact(b"key=s3cret; again s3cret, b64 czNjcmV0.", &secrets);
        assert_eq!(String::from_utf8(out).unwrap(), "key=[redacted]; again [redacted], b64 [redacted].");
    }

    /// A credential goes only over https: a grant of http to its host, or
    /// a same-host redirect to http, does not change that; a loopback
    /// address the operator opened is the one exception.
    #[test]
    fn a_credential_should_go_only_over_https() {
        let c = Credentials::compile(
            &[credential("api", CredentialUse::Bearer, None, &["api.example.com", "127.0.0.1", "10.0.0.1"])],
            Some("team"),
            None,
        )
        .unwrap();
        let check = |url: &str, opened: bool| {
            let url = Url::parse(url).unwrap();
            c.check("api", &url, &super::super::grants::target(&url).unwrap(), opened).map_err(|e| e.to_string())
        };
        assert_eq!(check("https://api.example.com/x", false), Ok(()));
        let refused = check("http://api.example.com/x?token=1", false).unwrap_err();
        assert!(refused.contains("goes only over https") && !refused.contains("token"), "{refused}");
        assert!(check("http://10.0.0.1/x", true).is_err(), "a private address is a network all the same");
        assert!(check("http://127.0.0.1/x", false).is_err(), "loopback the operator did not open");
        assert_eq!(check("http://127.0.0.1/x", true), Ok(()));
    }

    /// A Secret read that hangs ends with the call, not 5 s later.
    #[tokio::test]
    async fn a_secret_read_should_end_with_the_call() {
        crate::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Accepts and never answers.
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                open.push(s);
            }
        });
        let client =
            kube::Client::try_from(kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap())).unwrap();
        let c = Credentials::compile(
            &[credential("api", CredentialUse::Bearer, None, &["a.example"])],
            Some("t"),
            Some(client),
        )
        .unwrap();
        let started = Instant::now();
        let refused = c.apply("api", started + Duration::from_millis(300)).await.unwrap_err().to_string();
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
        assert!(refused.contains("not read within"), "{refused}");
        held.abort();
    }

    #[test]
    fn redaction_should_cover_the_encodings_an_echo_may_use() {
        let secrets = forms(b"k3y/\"x");
        let utf16: Vec<u8> = "k3y/\"x".encode_utf16().flat_map(u16::to_le_bytes).collect();
        for echoed in [b"k3y%2F%22x".to_vec(), b"k3y/\\\"x".to_vec(), utf16] {
            let out = redact(&echoed, &secrets);
            assert_eq!(out, REDACTED.as_bytes(), "{echoed:?}");
        }
    }
}
