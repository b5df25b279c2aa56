//! The admin kubeconfig, for `kubectl` and for processes under test.

use crate::certs::PkiFiles;
use anyhow::{Context, Result};
use kube::config::{AuthInfo, Cluster, Context as KubeContext, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};

const NAME: &str = "operon-envtest";

/// A kubeconfig for `server` authenticating with the admin certificate. It
/// names the certificate files rather than embedding them, so it stays
/// short enough to read.
pub(crate) fn render(server: &str, pki: &PkiFiles) -> Result<String> {
    let path = |p: &std::path::Path| Some(p.display().to_string());
    let config = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: NAME.into(),
            cluster: Some(Cluster {
                server: Some(server.into()),
                certificate_authority: path(&pki.ca_cert),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: NAME.into(),
            auth_info: Some(AuthInfo {
                client_certificate: path(&pki.admin_cert),
                client_key: path(&pki.admin_key),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: NAME.into(),
            context: Some(KubeContext {
                cluster: NAME.into(),
                user: Some(NAME.into()),
                namespace: Some("default".into()),
                ..KubeContext::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(NAME.into()),
        ..Kubeconfig::default()
    };
    // Plain scalars only (no folded `>` blocks for long paths): what every
    // kubeconfig reader, Go's included, reads the same way.
    serde_saphyr::to_string_with_options(&config, serde_saphyr::ser_options! { prefer_block_scalars: false })
        .context("could not serialize the kubeconfig")
}
