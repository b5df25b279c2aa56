//! The Reconciler `operon dev` applies for a project: grants that cover
//! exactly what its manifest asks for, and what `[dev]` of its
//! `operon.toml` adds — egress grants, credentials (a local file written
//! into a Secret of the dev namespace, or a Secret already there) and a
//! ServiceAccount — so a plugin that calls out runs in dev as it will in a
//! cluster, from the project alone. The host reads credentials only as the
//! plugin's ServiceAccount: with credentials and no `service_account`, dev
//! makes one named after the project, with a Role for what the manifest
//! asks and those Secrets.

use super::Loaded;
use crate::contract::{Gvk, Manifest};
use crate::egress::credentials::{Credential, SecretKeyRef};
use crate::egress::grants::EgressGrant;
use crate::reconciler::{self, crd::KindRef};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What is wrong with a project's `[dev]`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An entry does not say what the Reconciler would take.
    #[error("{file}: {field}: {reason}")]
    Invalid {
        /// The project's `operon.toml`.
        file: PathBuf,
        /// `dev.egress[0]`, `dev.credentials[1]`, ...
        field: String,
        /// What is wrong and what to write.
        reason: String,
    },
    /// A credential's file cannot be read.
    #[error("{file}: dev.credentials[{index}].file {path}: {source}")]
    File {
        /// The project's `operon.toml`.
        file: PathBuf,
        /// Which credential.
        index: usize,
        /// The file it names.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The API server refused what `operon dev` applied.
    #[error("applying {what}: {source}")]
    Apply {
        /// `Secret dev-x/x-dev-credentials`, `Reconciler dev-x/x`.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

/// Grants that cover exactly what the manifest asks for.
pub(super) fn grants_for(manifest: &Manifest) -> reconciler::crd::Grants {
    fn kind_ref(gvk: &Gvk) -> KindRef {
        KindRef { group: gvk.group.clone(), kind: gvk.kind.clone() }
    }
    fn dedup(mut v: Vec<KindRef>) -> Vec<KindRef> {
        v.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
        v.dedup();
        v
    }
    reconciler::crd::Grants {
        for_kinds: vec![kind_ref(&manifest.for_kind)],
        owns: dedup(manifest.owns.iter().map(kind_ref).collect()),
        reads: dedup(manifest.reads.iter().chain(manifest.watches.iter().map(|w| &w.kind)).map(kind_ref).collect()),
        ..Default::default()
    }
}

/// The Secret `operon dev` writes the file credentials of `project` into.
pub(super) fn secret_name(project: &str) -> String {
    format!("{project}-dev-credentials")
}

/// What `[dev]` adds to the Reconciler: its egress grants, its credentials
/// (those from files pointing at [`secret_name`]), the Secret data those
/// files make, and its ServiceAccount.
#[derive(Debug, Default, PartialEq)]
pub(super) struct DevSpec {
    pub egress: Vec<EgressGrant>,
    pub credentials: Vec<Credential>,
    pub secret_data: BTreeMap<String, Vec<u8>>,
    pub service_account: Option<String>,
}

/// Read `[dev]` of the project in `dir` named `project`.
pub(super) fn dev_spec(project: &str, dir: &Path, dev: &crate::project::DevConfig) -> Result<DevSpec, Error> {
    let file = dir.join(crate::project::PROJECT_FILE);
    let invalid = |field: String, reason: String| Error::Invalid { file: file.clone(), field, reason };
    let mut spec = DevSpec { service_account: dev.service_account.clone(), ..Default::default() };
    for (i, grant) in dev.egress.iter().enumerate() {
        let grant: EgressGrant = serde_json::from_value(grant.clone()).map_err(|e| {
            invalid(
                format!("dev.egress[{i}]"),
                format!("{e} (write {{ scheme = \"https\", host = \"api.example.com\", port = 443 }})"),
            )
        })?;
        spec.egress.push(grant);
    }
    for (i, c) in dev.credentials.iter().enumerate() {
        let field = format!("dev.credentials[{i}]");
        let secret_ref = match (&c.file, &c.secret) {
            (Some(path), None) => {
                let path = dir.join(path);
                let mut value = std::fs::read(&path).map_err(|source| Error::File {
                    file: file.clone(),
                    index: i,
                    path: path.clone(),
                    source,
                })?;
                if value.ends_with(b"\n") {
                    value.pop();
                }
                spec.secret_data.insert(c.name.clone(), value);
                SecretKeyRef { name: secret_name(project), key: c.name.clone(), ..Default::default() }
            }
            (None, Some(secret)) => {
                SecretKeyRef { name: secret.name.clone(), key: secret.key.clone(), ..Default::default() }
            }
            _ => {
                return Err(invalid(
                    field,
                    "name where the value is: `file = \"pdns.key\"` (a local file) or `secret = { name = \"pdns\", key = \"api-key\" }` \
                     (a Secret of the dev namespace), one of them"
                        .into(),
                ));
            }
        };
        let usage = serde_json::from_value(serde_json::Value::String(c.usage.clone()))
            .map_err(|_| invalid(format!("{field}.use"), format!("{:?}: use bearer, basic or header", c.usage)))?;
        spec.credentials.push(Credential {
            name: c.name.clone(),
            secret_ref,
            usage,
            header: c.header.clone(),
            hosts: c.hosts.clone(),
        });
    }
    Ok(spec)
}

/// Apply the project's Reconciler (and the Secret of its file credentials)
/// with field manager `manager`.
pub(super) async fn apply_reconciler(client: &kube::Client, l: &Loaded, manager: &str) -> anyhow::Result<()> {
    let name = l.project.name();
    let dev = dev_spec(name, &l.project.dir, &l.project.config.dev)?;
    let params = PatchParams::apply(manager).force();
    if !dev.secret_data.is_empty() {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(secret_name(name)),
                namespace: Some(l.namespace.clone()),
                ..Default::default()
            },
            data: Some(dev.secret_data.into_iter().map(|(k, v)| (k, k8s_openapi::ByteString(v))).collect()),
            ..Default::default()
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &l.namespace);
        secrets
            .patch(&secret_name(name), &params, &Patch::Apply(&secret))
            .await
            .map_err(|source| Error::Apply { what: format!("Secret {}/{}", l.namespace, secret_name(name)), source })?;
    }
    let mut grants = grants_for(&l.manifest);
    grants.egress = dev.egress;
    let mut spec = serde_json::json!({
        "module": {"path": l.module_path.display().to_string()},
        "grants": grants,
    });
    if !dev.credentials.is_empty() {
        spec["credentials"] = serde_json::to_value(&dev.credentials)?;
    }
    // The host reads a credential's Secret as the plugin, never as itself:
    // without a `service_account`, dev makes the plugin one, with a Role for
    // what its manifest asks and those Secrets.
    let service_account = match dev.service_account {
        Some(sa) => Some(sa),
        None if !dev.credentials.is_empty() => {
            apply_identity(client, l, manager, &dev.credentials).await?;
            Some(name.to_string())
        }
        None => None,
    };
    if let Some(sa) = service_account {
        spec["serviceAccountName"] = sa.into();
    }
    let reconciler: reconciler::crd::Reconciler = serde_json::from_value(serde_json::json!({
        "apiVersion": "operon.dev/v1alpha1",
        "kind": "Reconciler",
        "metadata": {"name": name, "namespace": l.namespace, "labels": {manager: "true"}},
        "spec": spec,
    }))?;
    let api: Api<reconciler::crd::Reconciler> = Api::namespaced(client.clone(), &l.namespace);
    api.patch(name, &params, &Patch::Apply(&reconciler))
        .await
        .map_err(|source| Error::Apply { what: format!("Reconciler {}/{name}", l.namespace), source })?;
    Ok(())
}

/// A Role rule for `gvk` (and its `sub`resources), as the API server names it.
async fn rule(client: &kube::Client, gvk: &Gvk, sub: &[&str], verbs: &[&str]) -> anyhow::Result<serde_json::Value> {
    let ar = super::resource(client, gvk).await?;
    let resources: Vec<String> =
        std::iter::once(ar.plural.clone()).chain(sub.iter().map(|s| format!("{}/{s}", ar.plural))).collect();
    Ok(serde_json::json!({"apiGroups": [ar.group], "resources": resources, "verbs": verbs}))
}

/// A ServiceAccount named after the project, and a Role (bound to it) for
/// what its manifest asks (its kind and status, the kinds it owns and reads,
/// events) and the Secrets its credentials name.
async fn apply_identity(
    client: &kube::Client,
    l: &Loaded,
    manager: &str,
    credentials: &[Credential],
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let name = l.project.name();
    let ns = &l.namespace;
    let m = &l.manifest;
    let mut rules = Vec::new();
    rules.push(rule(client, &m.for_kind, &["status"], &["get", "list", "watch", "patch", "update"]).await?);
    for kind in &m.owns {
        rules.push(rule(client, kind, &[], &["get", "list", "watch", "create", "update", "patch", "delete"]).await?);
    }
    for kind in m.reads.iter().chain(m.watches.iter().map(|w| &w.kind)) {
        rules.push(rule(client, kind, &[], &["get", "list", "watch"]).await?);
    }
    rules.push(
        serde_json::json!({"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}),
    );
    let secrets: Vec<&str> = credentials.iter().map(|c| c.secret_ref.name.as_str()).collect();
    rules.push(
        serde_json::json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": secrets, "verbs": ["get"]}),
    );
    let params = PatchParams::apply(manager).force();
    let apply_err = |what: &str| {
        let what = format!("{what} {ns}/{name}");
        move |source| Error::Apply { what, source }
    };
    let sa: ServiceAccount = serde_json::from_value(serde_json::json!({"metadata": {"name": name, "namespace": ns}}))?;
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .patch(name, &params, &Patch::Apply(&sa))
        .await
        .map_err(apply_err("ServiceAccount"))?;
    let role: Role =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "namespace": ns}, "rules": rules}))?;
    Api::<Role>::namespaced(client.clone(), ns)
        .patch(name, &params, &Patch::Apply(&role))
        .await
        .map_err(apply_err("Role"))?;
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }))?;
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .patch(name, &params, &Patch::Apply(&binding))
        .await
        .map_err(apply_err("RoleBinding"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(text: &str) -> crate::project::DevConfig {
        let table: toml::Table = text.parse().unwrap();
        table["dev"].clone().try_into().unwrap()
    }

    #[test]
    fn dev_should_give_egress_a_file_credential_a_secret_credential_and_a_service_account() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pdns.key"), "s3cret\n").unwrap();
        let spec = dev_spec(
            "dns",
            dir.path(),
            &dev(r#"
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
                name = "api"
                use = "bearer"
                hosts = ["api.example.com"]
                secret = { name = "api", key = "token" }
            "#),
        )
        .unwrap();
        assert_eq!(spec.service_account.as_deref(), Some("dns"));
        assert_eq!(spec.egress[0].host, "127.0.0.1");
        assert_eq!(spec.secret_data["pdns"], b"s3cret", "one trailing newline dropped");
        assert_eq!(
            (spec.credentials[0].secret_ref.name.as_str(), spec.credentials[0].secret_ref.key.as_str()),
            ("dns-dev-credentials", "pdns")
        );
        assert_eq!(
            (spec.credentials[1].secret_ref.name.as_str(), spec.credentials[1].secret_ref.key.as_str()),
            ("api", "token")
        );
    }

    #[test]
    fn a_bad_dev_table_should_name_the_field_and_what_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let err = |text: &str| dev_spec("x", dir.path(), &dev(text)).unwrap_err().to_string();
        let both = err("[dev]\n[[dev.credentials]]\nname = \"a\"\nuse = \"bearer\"\nhosts = []\n");
        assert!(both.contains("dev.credentials[0]") && both.contains("file = "), "{both}");
        let usage =
            err("[dev]\n[[dev.credentials]]\nname = \"a\"\nuse = \"token\"\nsecret = { name = \"s\", key = \"k\" }\n");
        assert!(usage.contains("dev.credentials[0].use") && usage.contains("bearer, basic or header"), "{usage}");
        let missing = err("[dev]\n[[dev.credentials]]\nname = \"a\"\nuse = \"bearer\"\nfile = \"nope.key\"\n");
        assert!(missing.contains("dev.credentials[0].file") && missing.contains("nope.key"), "{missing}");
        let egress = err("[dev]\negress = [{ hots = \"x\" }]\n");
        assert!(egress.contains("dev.egress[0]"), "{egress}");
    }
}
