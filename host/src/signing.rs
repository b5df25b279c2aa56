//! Signatures of modules and release artifacts: ECDSA P-256 over SHA-256,
//! the scheme of cosign's default keys, in the two forms cosign writes.
//!
//! - **Detached** (`cosign sign-blob`): the base64 of a DER signature over
//!   the file's bytes, kept beside it as `FILE.sig`. URL, ConfigMap and
//!   path sources, and every file of a release, are signed so.
//! - **Simple signing** (`cosign sign` of an image): a small JSON payload
//!   naming the manifest digest, signed as above, stored in the registry as
//!   the layer of the artifact tagged `sha256-<hex>.sig`, the signature in
//!   the layer's `dev.cosignproject.cosign/signature` annotation.
//!
//! Keys are PEM: a public key as `PUBLIC KEY` (SPKI, what `cosign.pub`
//! holds), a private key as `PRIVATE KEY` (PKCS#8) or `EC PRIVATE KEY`
//! (SEC1), unencrypted. Transparency logs and keyless (Fulcio) signatures
//! are not read: a key is trusted because the spec or the host names it.

use base64::Engine as _;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePrivateKey as _, EncodePublicKey as _};
use sha2::Digest as _;

/// The media type of a simple signing payload layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation that carries the payload's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The `critical.type` of a simple signing payload.
pub const SIGNATURE_TYPE: &str = "cosign container image signature";
/// The most bytes a signature or a payload may have (they are a few hundred).
pub const MAX_SIGNATURE_BYTES: usize = 64 << 10;

/// Why a key or a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The text is not a P-256 public key.
    #[error(
        "not an ECDSA P-256 public key in PEM ({0}); give the `-----BEGIN PUBLIC KEY-----` block that \
         `operon sign --new-key` or `cosign generate-key-pair` writes"
    )]
    PublicKey(String),
    /// The text is not a P-256 private key.
    #[error(
        "not an unencrypted ECDSA P-256 private key in PEM ({0}); give a `PRIVATE KEY` (PKCS#8) or `EC PRIVATE KEY` \
         block, as `operon sign --new-key` or `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes"
    )]
    PrivateKey(String),
    /// The signature is not a DER ECDSA signature (base64 or raw).
    #[error("the signature is not an ECDSA signature (base64 of DER, as cosign writes): {0}")]
    Malformed(String),
    /// The signature does not verify with the key.
    #[error("the signature does not verify with key {key}")]
    Mismatch {
        /// The key's id.
        key: String,
    },
    /// The signed payload is not cosign's simple signing format.
    #[error("the signed payload is not a cosign simple signing payload: {0}")]
    Payload(String),
}

/// A public key that verifies signatures.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: p256::ecdsa::VerifyingKey,
    id: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.id)
    }
}

impl PublicKey {
    /// Read a PEM `PUBLIC KEY` (SPKI) of a P-256 key.
    ///
    /// # Errors
    /// [`Error::PublicKey`] for anything else (another curve, RSA, a private key).
    pub fn from_pem(text: &str) -> Result<PublicKey, Error> {
        let key =
            p256::ecdsa::VerifyingKey::from_public_key_pem(text.trim()).map_err(|e| Error::PublicKey(e.to_string()))?;
        Ok(PublicKey::new(key))
    }

    fn new(key: p256::ecdsa::VerifyingKey) -> PublicKey {
        let der = key.to_public_key_der().map(|d| d.as_bytes().to_vec()).unwrap_or_default();
        let id = format!("sha256:{}", &hex::encode(sha2::Sha256::digest(&der))[..16]);
        PublicKey { key, id }
    }

    /// How messages name the key: `sha256:` and the first 16 hex digits of
    /// the digest of its SPKI DER (`sha256sum` of `openssl pkey -pubin
    /// -outform DER`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key as PEM.
    pub fn to_pem(&self) -> String {
        self.key.to_public_key_pem(p256::pkcs8::LineEnding::LF).unwrap_or_default()
    }

    /// Check `signature` (base64 of DER as cosign writes it, or raw DER as
    /// `openssl dgst -sign` does) over `message`.
    ///
    /// # Errors
    /// [`Error::Malformed`], or [`Error::Mismatch`] naming this key.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), Error> {
        let signature = decode_signature(signature)?;
        self.key.verify(message, &signature).map_err(|_| Error::Mismatch { key: self.id.clone() })
    }
}

/// A signature's bytes: base64 text (whitespace ignored) or raw DER.
fn decode_signature(bytes: &[u8]) -> Result<p256::ecdsa::Signature, Error> {
    let text: Vec<u8> = bytes.iter().copied().filter(|b| !b.is_ascii_whitespace()).collect();
    let der = match base64::engine::general_purpose::STANDARD.decode(&text) {
        Ok(der) => der,
        Err(_) if bytes.first() == Some(&0x30) => bytes.to_vec(),
        Err(e) => return Err(Error::Malformed(format!("neither base64 nor DER: {e}"))),
    };
    p256::ecdsa::Signature::from_der(&der).map_err(|e| Error::Malformed(e.to_string()))
}

/// A private key that signs.
pub struct SigningKey {
    key: p256::ecdsa::SigningKey,
}

impl SigningKey {
    /// A new random key (the operating system's generator).
    pub fn generate() -> SigningKey {
        SigningKey { key: p256::ecdsa::SigningKey::random(&mut rand_core::OsRng) }
    }

    /// Read a PEM `PRIVATE KEY` (PKCS#8) or `EC PRIVATE KEY` (SEC1).
    ///
    /// # Errors
    /// [`Error::PrivateKey`], also for an encrypted key (cosign's own
    /// `ENCRYPTED SIGSTORE PRIVATE KEY`: sign with cosign itself then).
    pub fn from_pem(text: &str) -> Result<SigningKey, Error> {
        let text = text.trim();
        if text.contains("ENCRYPTED") {
            return Err(Error::PrivateKey(
                "the key is encrypted: sign with the tool that wrote it (cosign), or give an unencrypted key".into(),
            ));
        }
        if text.starts_with("-----BEGIN EC PRIVATE KEY-----") {
            let secret = p256::SecretKey::from_sec1_pem(text).map_err(|e| Error::PrivateKey(format!("SEC1: {e}")))?;
            return Ok(SigningKey { key: secret.into() });
        }
        let key = p256::ecdsa::SigningKey::from_pkcs8_pem(text).map_err(|e| Error::PrivateKey(e.to_string()))?;
        Ok(SigningKey { key })
    }

    /// The key as PKCS#8 PEM (keep it secret: whoever holds it signs).
    pub fn to_pem(&self) -> String {
        self.key.to_pkcs8_pem(p256::pkcs8::LineEnding::LF).map(|p| p.to_string()).unwrap_or_default()
    }

    /// Its public half.
    pub fn public_key(&self) -> PublicKey {
        PublicKey::new(*self.key.verifying_key())
    }

    /// Sign `message`: base64 of the DER signature over its SHA-256, as
    /// `cosign sign-blob` writes it.
    pub fn sign(&self, message: &[u8]) -> String {
        let signature: p256::ecdsa::Signature = self.key.sign(message);
        base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes())
    }
}

/// The tag of the signature artifact of manifest `digest` (`sha256:<hex>`),
/// where cosign looks: `sha256-<hex>.sig`.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// The simple signing payload for the manifest `digest` of the image at
/// `docker_reference` (`registry/repository`), as cosign writes it.
pub fn simple_signing_payload(docker_reference: &str, digest: &str) -> Vec<u8> {
    let payload = serde_json::json!({
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": digest},
            "type": SIGNATURE_TYPE,
        },
        "optional": null,
    });
    serde_json::to_vec(&payload).unwrap_or_default()
}

/// The manifest digest a simple signing payload vouches for.
///
/// # Errors
/// [`Error::Payload`] when it is not JSON of that format.
pub fn signed_digest(payload: &[u8]) -> Result<String, Error> {
    let value: serde_json::Value = serde_json::from_slice(payload).map_err(|e| Error::Payload(e.to_string()))?;
    let kind = value.pointer("/critical/type").and_then(|v| v.as_str());
    if kind != Some(SIGNATURE_TYPE) {
        return Err(Error::Payload(format!("critical.type is {kind:?}, not {SIGNATURE_TYPE:?}")));
    }
    value
        .pointer("/critical/image/docker-manifest-digest")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| Error::Payload("no critical.image.docker-manifest-digest".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_key_and_no_other() {
        let key = SigningKey::generate();
        let other = SigningKey::generate();
        let signature = key.sign(b"module bytes");
        let public = PublicKey::from_pem(&key.public_key().to_pem()).unwrap();
        assert_eq!(public.id(), key.public_key().id());
        public.verify(b"module bytes", signature.as_bytes()).unwrap();
        let err = public.verify(b"module bytez", signature.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::Mismatch { ref key } if key == public.id()), "{err}");
        let err = other.public_key().verify(b"module bytes", signature.as_bytes()).unwrap_err();
        assert!(err.to_string().contains(other.public_key().id()), "{err}");
    }

    #[test]
    fn a_private_key_reads_back_from_its_pem() {
        let key = SigningKey::generate();
        let again = SigningKey::from_pem(&key.to_pem()).unwrap();
        assert_eq!(again.public_key(), key.public_key());
        assert!(SigningKey::from_pem(&key.public_key().to_pem()).is_err(), "a public key does not sign");
        let err = PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----").unwrap_err();
        assert!(err.to_string().contains("cosign generate-key-pair"), "{err}");
    }

    /// A signature as `openssl dgst -sha256 -sign` writes it (raw DER), and
    /// one with line breaks, verify like cosign's base64.
    #[test]
    fn raw_der_and_wrapped_base64_signatures_are_read() {
        let key = SigningKey::generate();
        let b64 = key.sign(b"x");
        let der = base64::engine::general_purpose::STANDARD.decode(&b64).unwrap();
        key.public_key().verify(b"x", &der).unwrap();
        let wrapped = format!("{}\n{}\n", &b64[..10], &b64[10..]);
        key.public_key().verify(b"x", wrapped.as_bytes()).unwrap();
        assert!(matches!(key.public_key().verify(b"x", b"not a signature"), Err(Error::Malformed(_))));
    }

    /// The payload cosign writes for an image, and what is read back of it.
    #[test]
    fn a_simple_signing_payload_names_the_manifest_digest() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let payload = simple_signing_payload("registry.example/team/module", &digest);
        assert_eq!(signed_digest(&payload).unwrap(), digest);
        let text = String::from_utf8(payload).unwrap();
        assert!(text.contains(r#""docker-reference":"registry.example/team/module""#), "{text}");
        assert_eq!(signature_tag(&digest), format!("sha256-{}.sig", "ab".repeat(32)));
        let other = br#"{"critical":{"type":"something else","image":{"docker-manifest-digest":"sha256:00"}}}"#;
        assert!(matches!(signed_digest(other), Err(Error::Payload(_))));
    }

    /// A signature OpenSSL wrote (`openssl dgst -sha256 -sign k.pem`, the
    /// same ECDSA P-256 over SHA-256 in DER that cosign base64-encodes) over
    /// `hello` verifies with the key's public half read from OpenSSL's PEM,
    /// and the SEC1 private key OpenSSL wrote signs for that public key.
    #[test]
    fn a_signature_written_by_openssl_verifies() {
        let public = PublicKey::from_pem(OPENSSL_PUB).unwrap();
        public.verify(b"hello", OPENSSL_SIG.as_bytes()).unwrap();
        assert!(public.verify(b"hellO", OPENSSL_SIG.as_bytes()).is_err());
        let key = SigningKey::from_pem(OPENSSL_KEY).unwrap();
        assert_eq!(key.public_key(), public);
    }

    const OPENSSL_KEY: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIHqMw75uVyvKk0Ma0M3ZB2m+iEW7vAI1nbIZSeB3gk5roAoGCCqGSM49
AwEHoUQDQgAEL1Q5yYfQejOzhsFKJAQsfar5bFVbAgVJNTyex/CglG5uglfNZfjj
cgy8JRwuw/Gf/Z5gp5+sVVD/SCW2gTYETw==
-----END EC PRIVATE KEY-----";
    const OPENSSL_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEL1Q5yYfQejOzhsFKJAQsfar5bFVb
AgVJNTyex/CglG5uglfNZfjjcgy8JRwuw/Gf/Z5gp5+sVVD/SCW2gTYETw==
-----END PUBLIC KEY-----";
    const OPENSSL_SIG: &str =
        "MEUCIDgx6Dj0OBKJoPkHHXfpq4e2uJA2gPDc0W0J+sdbDj/8AiEAjCFt8SFDu4zcprBGA5i2cofQYSyTn29PW7U926Y/Yy0=";
}
