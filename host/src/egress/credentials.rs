//! Credentials by reference: a Reconciler's `spec.credentials` names
//! Secrets and how each is used; a guest asks for one by name and the host
//! adds it to the request. The value never enters the guest: it is read
//! with the plugin's own client (its ServiceAccount, when it has one), kept
//! in the host's memory for a few seconds (so a rotated Secret takes effect
//! without a restart), and blanked out of whatever an answer echoes.

use super::grants::{EgressGrant, Rules, Target};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
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

/// A credential that cannot be used, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.credentials[{index}]: {reason}")]
pub struct BadCredential {
    /// Which one.
    pub index: usize,
    /// What is wrong.
    pub reason: String,
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
    /// Compile `spec.credentials` for a plugin whose Secrets are in
    /// `namespace` (`None`: a ClusterReconciler, which names each Secret's
    /// namespace), read through `client`.
    ///
    /// # Errors
    /// [`BadCredential`] for a duplicate name, a missing header, no hosts,
    /// or a namespace where none may be named.
    pub fn compile(
        specs: &[Credential],
        namespace: Option<&str>,
        client: Option<kube::Client>,
    ) -> Result<Credentials, BadCredential> {
        let mut by_name = HashMap::new();
        for (index, spec) in specs.iter().enumerate() {
            let bad = |reason: String| BadCredential { index, reason };
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
            let hosts = Rules::compile(&grants).map_err(|e| bad(format!("hosts[{}]: {}", e.index, e.reason)))?;
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

    /// Whether `name` may be sent to `target`.
    ///
    /// # Errors
    /// Why not: an unknown name, or a host it is not for.
    pub fn check(&self, name: &str, target: &Target) -> Result<(), String> {
        let c = self.by_name.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            known.sort_unstable();
            format!(
                "no credential {name:?} in spec.credentials (it has: {})",
                if known.is_empty() { "none".into() } else { known.join(", ") }
            )
        })?;
        if c.hosts.covers(target) {
            Ok(())
        } else {
            Err(format!("credential {name:?} is not for {} (its hosts: {})", target.shown(), c.spec.hosts.join(", ")))
        }
    }

    /// Whether `name` may follow a redirect to `target`.
    pub fn goes_to(&self, name: &str, target: &Target) -> bool {
        self.by_name.get(name).is_some_and(|c| c.hosts.covers(target))
    }

    /// The header `name` sets, read from its Secret (kept [`SECRET_TTL`]).
    /// Awaits the read (the guest's call waits, holding no thread).
    ///
    /// # Errors
    /// The Secret or key is missing or unreadable (the message names them,
    /// never the value).
    pub async fn apply(&self, name: &str) -> Result<Applied, String> {
        let c = self.by_name.get(name).ok_or_else(|| format!("no credential {name:?}"))?;
        let value = self.value(c).await?;
        let text = String::from_utf8(value.clone())
            .map_err(|_| format!("credential {name:?}: the Secret's value is not UTF-8 text"))?;
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
            return Err(format!("credential {name:?}: the Secret's value cannot be sent in a header"));
        }
        let mut secrets = vec![text.clone().into_bytes()];
        if c.spec.usage == CredentialUse::Basic {
            secrets.push(base64::engine::general_purpose::STANDARD.encode(text.as_bytes()).into_bytes());
            if let Some((_, password)) = text.split_once(':')
                && password.len() >= 4
            {
                secrets.push(password.as_bytes().to_vec());
            }
        }
        secrets.retain(|s| !s.is_empty());
        Ok(Applied { header, value, secrets })
    }

    async fn value(&self, c: &Compiled) -> Result<Vec<u8>, String> {
        let key = format!("{}/{}/{}", c.namespace, c.spec.secret_ref.name, c.spec.secret_ref.key);
        if let Some((at, value)) = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key)
            && at.elapsed() < SECRET_TTL
        {
            return Ok(value.clone());
        }
        let where_ = format!("credential {:?}: Secret {}/{}", c.spec.name, c.namespace, c.spec.secret_ref.name);
        let client = self.client.clone().ok_or_else(|| format!("{where_}: this host reads no Secrets"))?;
        let api: kube::Api<Secret> = kube::Api::namespaced(client, &c.namespace);
        let name = c.spec.secret_ref.name.clone();
        let read = tokio::time::timeout(Duration::from_secs(5), api.get_opt(&name)).await;
        let secret = match read {
            Err(_) => return Err(format!("{where_}: not read within 5 s")),
            Ok(Err(e)) => return Err(format!("{where_}: cannot be read by the plugin ({e})")),
            Ok(Ok(None)) => return Err(format!("{where_} does not exist")),
            Ok(Ok(Some(s))) => s,
        };
        let value = secret
            .data
            .and_then(|mut d| d.remove(&c.spec.secret_ref.key))
            .map(|b| b.0)
            .ok_or_else(|| format!("{where_} has no key {:?}", c.spec.secret_ref.key))?;
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, (Instant::now(), value.clone()));
        Ok(value)
    }
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
        assert_eq!(c.check("pdns", &Target::Address("127.0.0.1".parse().unwrap())), Ok(()));
        assert_eq!(c.check("pdns", &Target::Name("a.dns.example".into())), Ok(()));
        assert!(c.check("pdns", &Target::Name("evil.example".into())).unwrap_err().contains("not for evil.example"));
        assert!(c.check("other", &Target::Name("a.dns.example".into())).unwrap_err().contains("it has: pdns"));
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
}
