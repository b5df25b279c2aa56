//! The certificates a throwaway control plane needs, made fresh per start.
//!
//! One CA signs both the API server's serving certificate (for `127.0.0.1`
//! and `localhost`) and an admin client certificate in `system:masters`, so
//! clients authenticate with TLS alone and RBAC never gets in the way. Keys
//! are ECDSA P-256, which Go and rustls both accept. A separate key signs
//! service-account tokens, as kube-apiserver insists on one.

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// Files written by [`Pki::write`], all PEM.
#[derive(Clone, Debug)]
pub(crate) struct PkiFiles {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

/// Freshly generated key material, in memory until written.
pub(crate) struct Pki {
    ca_cert: String,
    ca_der: Vec<u8>,
    serving_cert: String,
    serving_key: String,
    admin_cert: String,
    admin_key: String,
    service_account_key: String,
    service_account_pub: String,
}

/// The user name the admin certificate carries.
pub(crate) const ADMIN_USER: &str = "operon-envtest-admin";

impl Pki {
    pub fn generate() -> Result<Self> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = dn("operon-envtest-ca", None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
            // The `kubernetes` Service, should anything inside ask for it.
            "10.0.0.1".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
        ])?;
        serving.distinguished_name = dn("kube-apiserver", None);
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::default();
        admin.distinguished_name = dn(ADMIN_USER, Some("system:masters"));
        admin.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = admin.signed_by(&admin_key, &ca)?;

        let service_account = KeyPair::generate()?;

        Ok(Self {
            ca_cert: ca_cert.pem(),
            ca_der: ca_cert.der().to_vec(),
            serving_cert: serving_cert.pem(),
            serving_key: serving_key.serialize_pem(),
            admin_cert: admin_cert.pem(),
            admin_key: admin_key.serialize_pem(),
            service_account_key: service_account.serialize_pem(),
            service_account_pub: service_account.public_key_pem(),
        })
    }

    /// The CA certificate, DER-encoded, for clients' trust roots.
    pub fn ca_der(&self) -> &[u8] {
        &self.ca_der
    }

    /// Writes every file into `dir` (created if needed).
    pub fn write(&self, dir: &Path) -> Result<PkiFiles> {
        std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
        let put = |name: &str, pem: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, pem).with_context(|| format!("could not write {}", path.display()))?;
            Ok(path)
        };
        Ok(PkiFiles {
            ca_cert: put("ca.crt", &self.ca_cert)?,
            serving_cert: put("apiserver.crt", &self.serving_cert)?,
            serving_key: put("apiserver.key", &self.serving_key)?,
            admin_cert: put("admin.crt", &self.admin_cert)?,
            admin_key: put("admin.key", &self.admin_key)?,
            service_account_key: put("sa.key", &self.service_account_key)?,
            service_account_pub: put("sa.pub", &self.service_account_pub)?,
        })
    }
}

fn dn(common_name: &str, organization: Option<&str>) -> rcgen::DistinguishedName {
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(organization) = organization {
        dn.push(DnType::OrganizationName, organization);
    }
    dn
}
