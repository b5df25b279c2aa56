//! `[dev]` of `operon.toml`: what `operon dev` needs to run the project as
//! a real plugin runs, which its manifest cannot say (who it calls, with
//! which credentials, as which ServiceAccount).

use serde::Deserialize;
use std::path::PathBuf;

/// `[dev]` of `operon.toml`: what a real plugin needs that its manifest
/// does not say, for the Reconciler `operon dev` applies. In a cluster
/// these are the Reconciler's `spec.grants.egress`, `spec.credentials` and
/// `spec.serviceAccountName`, written by whoever installs the plugin.
///
/// ```toml
/// [dev]
/// service_account = "dnsrecord"   # must exist in the dev namespace, with its RBAC
/// egress = [{ scheme = "http", host = "127.0.0.1", port = 8081 }]
///
/// [[dev.credentials]]
/// name = "pdns"                   # what the guest asks for
/// use = "header"                  # bearer | basic | header
/// header = "X-API-Key"
/// hosts = ["127.0.0.1"]
/// file = "pdns.key"               # a local file, written into a Secret of the dev namespace
/// # secret = { name = "pdns", key = "api-key" }   # or a Secret already there
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevConfig {
    /// `spec.serviceAccountName`: the plugin reads and writes as it.
    #[serde(default)]
    pub service_account: Option<String>,
    /// `spec.grants.egress`, each as the Reconciler takes it (`scheme`,
    /// `host`, `port`, `methods`, `paths`).
    #[serde(default)]
    pub egress: Vec<serde_json::Value>,
    /// `spec.credentials`, each from a local file or an existing Secret.
    #[serde(default)]
    pub credentials: Vec<DevCredential>,
}

/// One `[[dev.credentials]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevCredential {
    /// The name the guest asks for.
    pub name: String,
    /// `bearer`, `basic` or `header`.
    #[serde(rename = "use")]
    pub usage: String,
    /// The header, for `use = "header"`.
    #[serde(default)]
    pub header: Option<String>,
    /// The hosts it is sent to.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// A file (relative to the project) holding the value: `operon dev`
    /// writes it into a Secret of the dev namespace (one trailing newline
    /// dropped, as `echo` leaves one). Keep it out of version control.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An existing Secret of the dev namespace holding the value.
    #[serde(default)]
    pub secret: Option<DevSecretRef>,
}

/// `secret = { name, key }` of a `[[dev.credentials]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevSecretRef {
    /// The Secret.
    pub name: String,
    /// The key in its data.
    pub key: String,
}

#[cfg(test)]
mod tests {
    use crate::{PROJECT_FILE, Project};

    #[test]
    fn a_dev_table_should_carry_egress_credentials_and_a_service_account() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"
            name = "dns"
            lang = "rust"
            [dev]
            service_account = "dns"
            egress = [{ scheme = "http", host = "127.0.0.1", port = 8081 }]
            [[dev.credentials]]
            name = "pdns"
            use = "header"
            header = "X-API-Key"
            hosts = ["127.0.0.1"]
            file = "pdns.key"
            [[dev.credentials]]
            name = "other"
            use = "bearer"
            hosts = ["api.example.com"]
            secret = { name = "api", key = "token" }
        "#;
        std::fs::write(dir.path().join(PROJECT_FILE), text).unwrap();
        let dev = Project::open(dir.path()).unwrap().config.dev;
        assert_eq!(dev.service_account.as_deref(), Some("dns"));
        assert_eq!(dev.egress, [serde_json::json!({"scheme": "http", "host": "127.0.0.1", "port": 8081})]);
        assert_eq!(dev.credentials[0].file.as_deref(), Some(std::path::Path::new("pdns.key")));
        assert_eq!(dev.credentials[1].secret.as_ref().map(|s| s.key.as_str()), Some("token"));
        std::fs::write(dir.path().join(PROJECT_FILE), "name = \"dns\"\nlang = \"rust\"\n[dev]\ngrant = []\n").unwrap();
        assert!(Project::open(dir.path()).unwrap_err().to_string().contains("grant"), "a typo is an error");
        std::fs::write(dir.path().join(PROJECT_FILE), "name = \"dns\"\nlang = \"rust\"\n").unwrap();
        let dev = Project::open(dir.path()).unwrap().config.dev;
        assert!(dev.service_account.is_none() && dev.egress.is_empty() && dev.credentials.is_empty());
    }
}
