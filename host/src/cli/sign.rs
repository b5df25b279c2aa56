//! `operon sign` and `operon verify`: what an author runs so that a host
//! requiring signatures (`spec.module.verify`, `--require-signed-modules`)
//! loads the module, and what anyone runs to check a signature the way the
//! host does. The formats are cosign's ([`crate::signing`]): `cosign
//! verify --key` accepts what `operon sign --oci` pushes, `cosign
//! verify-blob --key` what it writes beside a file, and the other way round.

use crate::reconciler::crd::{ModuleSource, OciSource};
use crate::reconciler::source::{self, Bounds};
use crate::reconciler::verify::{self, Trust};
use crate::signing::{self, PublicKey, SigningKey};
use anyhow::Context as _;
use std::path::{Path, PathBuf};

/// `operon sign`.
#[derive(Debug, Clone, clap::Args)]
pub struct SignArgs {
    /// The private key (PEM: PKCS#8 `PRIVATE KEY` or SEC1 `EC PRIVATE
    /// KEY`, ECDSA P-256, unencrypted).
    #[arg(long, value_name = "PATH", required_unless_present = "new_key", conflicts_with = "new_key")]
    pub key: Option<PathBuf>,
    /// Make a new key pair, NAME.key (mode 0600: keep it secret) and
    /// NAME.pub (what a Reconciler's `spec.module.verify` or the host's
    /// `--trusted-module-key` names), and sign with it.
    #[arg(long, value_name = "NAME")]
    pub new_key: Option<PathBuf>,
    /// Sign the module at this OCI reference, `registry/repository@sha256:…`:
    /// push the cosign signature artifact (`…:sha256-<hex>.sig`) beside it,
    /// keeping signatures already there. Plain HTTP for loopback registries
    /// only; no credentials.
    #[arg(long, value_name = "REFERENCE")]
    pub oci: Option<String>,
    /// Files to sign: each gets FILE.sig beside it (base64 of the DER
    /// signature, as `cosign sign-blob` writes).
    pub files: Vec<PathBuf>,
}

/// `operon verify`.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// A public key (PEM); repeat for several: a signature by any one will do.
    #[arg(long, value_name = "PATH", required = true)]
    pub key: Vec<PathBuf>,
    /// Check the cosign signature of the module at this OCI reference
    /// (`registry/repository@sha256:…`), as a host would before loading it.
    #[arg(long, value_name = "REFERENCE")]
    pub oci: Option<String>,
    /// Files to check, each against FILE.sig beside it.
    pub files: Vec<PathBuf>,
}

/// `operon sign`: the lines it prints.
pub async fn sign(args: SignArgs) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let key = match (&args.key, &args.new_key) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            SigningKey::from_pem(&text).with_context(|| format!("{}", path.display()))?
        }
        (None, Some(name)) => {
            let key = SigningKey::generate();
            let (private, public) = (name.with_extension("key"), name.with_extension("pub"));
            write_private(&private, &key.to_pem())?;
            std::fs::write(&public, key.public_key().to_pem())
                .with_context(|| format!("writing {}", public.display()))?;
            out.push(format!(
                "wrote {} (secret) and {} ({})",
                private.display(),
                public.display(),
                key.public_key().id()
            ));
            key
        }
        (None, None) => anyhow::bail!("give --key PATH, or --new-key NAME to make one"),
    };
    for file in &args.files {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let path = signature_path(file);
        std::fs::write(&path, key.sign(&bytes)).with_context(|| format!("writing {}", path.display()))?;
        out.push(format!("signed {} → {} (key {})", file.display(), path.display(), key.public_key().id()));
    }
    if let Some(reference) = &args.oci {
        out.push(sign_oci(&key, reference).await?);
    }
    if args.files.is_empty() && args.oci.is_none() && args.new_key.is_none() {
        anyhow::bail!("nothing to sign: give files, or --oci REFERENCE@DIGEST");
    }
    Ok(out)
}

/// `operon verify`: the lines it prints, or the first failure.
pub async fn verify(args: VerifyArgs) -> anyhow::Result<Vec<String>> {
    let mut keys = Vec::new();
    for path in &args.key {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        keys.push((
            path.display().to_string(),
            PublicKey::from_pem(&text).with_context(|| path.display().to_string())?,
        ));
    }
    let trust = [Trust { by: "operon verify --key", keys }];
    // Any file, not only a module: no module size bound here.
    let bounds = Bounds { max_bytes: usize::MAX, ..Bounds::default() };
    // Files and OCI artifacts only: no URL is fetched here.
    let allowed = crate::egress::grants::Allowed::public();
    let http = source::http_client(bounds, &allowed);
    let mut out = Vec::new();
    for file in &args.files {
        let path = file.display().to_string();
        let fetched = source::from_path(&path, bounds).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let module = ModuleSource { path: Some(path.clone()), ..Default::default() };
        verify::check(&http, &allowed, &module, &fetched, &trust, bounds).await?;
        out.push(format!("{path}: verified ({})", signature_path(file).display()));
    }
    if let Some(reference) = &args.oci {
        let oci = oci_source(reference)?;
        let fetched = source::Fetched { bytes: Vec::new(), digest: oci.digest.clone(), signature: None };
        let module = ModuleSource { oci: Some(oci), ..Default::default() };
        verify::check(&http, &allowed, &module, &fetched, &trust, bounds).await?;
        out.push(format!("{reference}: verified"));
    }
    if out.is_empty() {
        anyhow::bail!("nothing to verify: give files, or --oci REFERENCE@DIGEST");
    }
    Ok(out)
}

/// Where FILE's detached signature goes: FILE.sig.
fn signature_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// Write a private key readable by its owner only.
fn write_private(path: &Path, pem: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {} (an existing key is never overwritten)", path.display()))?;
    file.write_all(pem.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

/// `registry/repository@sha256:…` as an OCI source.
fn oci_source(reference: &str) -> anyhow::Result<OciSource> {
    let Some((name, digest)) = reference.split_once('@') else {
        anyhow::bail!("{reference}: give the module's manifest digest, REGISTRY/REPOSITORY@sha256:… (a tag can move)");
    };
    Ok(OciSource { reference: name.to_string(), digest: digest.to_string() })
}

/// Push a cosign signature of `reference`'s manifest: the simple signing
/// payload as a layer of the artifact tagged `sha256-<hex>.sig`, beside
/// the signatures already there.
async fn sign_oci(key: &SigningKey, reference: &str) -> anyhow::Result<String> {
    use oci_client::manifest::{OciDescriptor, OciImageManifest, OciManifest};
    use oci_client::secrets::RegistryAuth;
    let oci = oci_source(reference)?;
    let (client, base) = source::oci_client(&oci.reference).map_err(|e| anyhow::anyhow!("{e}"))?;
    let auth = RegistryAuth::Anonymous;
    client.store_auth_if_needed(base.resolve_registry(), &auth).await;
    let image = oci_client::Reference::with_digest(
        base.registry().to_string(),
        base.repository().to_string(),
        oci.digest.clone(),
    );
    // The manifest must exist: a signature of nothing helps nobody.
    client
        .pull_manifest_raw(
            &image,
            &auth,
            &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE, oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE],
        )
        .await
        .with_context(|| format!("{reference} is not in the registry"))?;
    let identity = format!("{}/{}", base.registry(), base.repository());
    let payload = signing::simple_signing_payload(&identity, &oci.digest);
    let signature = key.sign(&payload);
    let tag = signing::signature_tag(&oci.digest);
    let target =
        oci_client::Reference::with_tag(base.registry().to_string(), base.repository().to_string(), tag.clone());
    let mut layers: Vec<OciDescriptor> = match client.pull_image_manifest(&target, &auth).await {
        Ok((existing, _)) => existing.layers,
        Err(_) => Vec::new(),
    };
    let payload_digest = crate::runtime::digest(&payload);
    layers.retain(|l| {
        l.digest != payload_digest
            || l.annotations.as_ref().and_then(|a| a.get(signing::SIGNATURE_ANNOTATION)) != Some(&signature)
    });
    client.push_blob(&target, payload.clone(), &payload_digest).await.context("pushing the signature payload")?;
    layers.push(OciDescriptor {
        media_type: signing::SIMPLE_SIGNING_MEDIA_TYPE.into(),
        digest: payload_digest,
        size: payload.len() as i64,
        annotations: Some([(signing::SIGNATURE_ANNOTATION.to_string(), signature)].into()),
        ..Default::default()
    });
    // The config cosign writes: an image config whose layers are the payloads.
    let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "", "os": "", "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))?;
    let config_digest = crate::runtime::digest(&config);
    client.push_blob(&target, config.clone(), &config_digest).await.context("pushing the signature config")?;
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.into()),
        config: OciDescriptor {
            media_type: oci_client::manifest::IMAGE_CONFIG_MEDIA_TYPE.into(),
            digest: config_digest,
            size: config.len() as i64,
            ..Default::default()
        },
        layers,
        ..Default::default()
    };
    client
        .push_manifest(&target, &OciManifest::Image(manifest))
        .await
        .with_context(|| format!("pushing {identity}:{tag}"))?;
    Ok(format!("signed {reference} → {identity}:{tag} (key {})", key.public_key().id()))
}
