//! The SDK packages: what each language's projects depend on, under which
//! name, from which registry, and whether a version of it speaks this
//! operon's contract.
//!
//! **One version for everything.** The host, the contract crate and the five
//! SDKs share the release's version, [`VERSION`] (the workspace's
//! `[workspace.package] version`; `cargo xtask version` writes it into every
//! package manifest, and a test fails when one differs). Its minor (its
//! major from 1.0 on) is the WIT package's: an SDK `0.1.x` speaks
//! `operon:reconciler@0.1`, and a project that asks for `~0.1.0` keeps
//! building components every 0.1 host runs.
//!
//! The versions [`packages`] reports are read from the SDK sources built
//! into this binary, the same files `operon new` vendors into a project, so
//! `operon version` shows what a project gets either way.
//!
//! **Nothing is published yet.** No release of any SDK is on its registry
//! ([`PUBLISHED`] is empty): the names below are the ones the project will
//! publish under, and `operon new` vendors the SDK rather than name one of
//! them (a name nobody has claimed is a dependency-confusion risk).

use crate::Lang;
use include_dir::{Dir, include_dir};
use sha2::{Digest, Sha256};

/// The release this operon belongs to; every SDK package carries it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The Go SDK's module path. Stable: `operon.dev` serves the `go-import`
/// meta tag that points at the repository, whose `sdk/go` directory is the
/// module (version tags `sdk/go/vX.Y.Z`).
pub const GO_MODULE: &str = "operon.dev/sdk/go";

/// The Go SDK's module, as published: every file of `sdk/go`.
pub(crate) static GO_SDK: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/go");

/// The languages whose SDK package of this release is published on its
/// registry. None yet: until a release pipeline publishes them, every
/// package name in [`packages`] is unclaimed there.
pub const PUBLISHED: &[Lang] = &[];

/// One language's SDK package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// The language.
    pub lang: Lang,
    /// The package's name in its registry.
    pub name: &'static str,
    /// Its version, as the SDK sources in this binary say.
    pub version: String,
    /// Where authors get it.
    pub registry: &'static str,
    /// How a new project asks for it (the language's own syntax).
    pub requirement: String,
    /// Whether this release of it is on [`Package::registry`] ([`PUBLISHED`]).
    pub published: bool,
}

/// Every language's SDK package, in [`Lang::ALL`] order.
pub fn packages() -> Vec<Package> {
    Lang::ALL.iter().map(|&lang| package(lang)).collect()
}

/// The SDK package of `lang`.
pub fn package(lang: Lang) -> Package {
    let v = VERSION;
    let (name, version, registry, requirement) = match lang {
        Lang::Rust => {
            ("operon-sdk", crate::lang::rust::sdk_version(), "crates.io", format!("operon-sdk = \"{v}\" (Cargo.toml)"))
        }
        Lang::Python => {
            ("operon-sdk", crate::lang::python::sdk_version(), "PyPI", format!("\"operon-sdk~={v}\" (pyproject.toml)"))
        }
        Lang::TypeScript => (
            "@operon/sdk",
            crate::lang::typescript::sdk_version(),
            "npm",
            format!("\"@operon/sdk\": \"^{v}\" (package.json)"),
        ),
        Lang::Go => (
            GO_MODULE,
            crate::lang::go::sdk_version(),
            "the Go module proxy (tags sdk/go/vX.Y.Z)",
            format!("require {GO_MODULE} v{v} (go.mod)"),
        ),
        Lang::C => (
            "operon-sdk",
            crate::lang::c::sdk_version(),
            "the release archive operon-sdk-c-X.Y.Z.tar.gz (pkg-config operon-sdk)",
            format!("pkg-config 'operon-sdk >= {v}'"),
        ),
    };
    Package { lang, name, version, registry, requirement, published: PUBLISHED.contains(&lang) }
}

/// The string literal that follows `prefix` on one of `text`'s lines.
pub(crate) fn quoted_after(text: &str, prefix: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(prefix)?;
        let rest = rest.trim_start().strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_string())
    })
}

/// Whether an SDK of `version` speaks the WIT contract this operon builds
/// against ([`operon_contract::compatible`] with
/// [`operon_contract::WIT_VERSION`]).
pub fn speaks_contract(version: &str) -> bool {
    operon_contract::compatible(version, operon_contract::WIT_VERSION)
}

/// The error for an SDK that speaks another contract.
pub(crate) fn contract_mismatch(lang: Lang, found: &str, path: std::path::PathBuf) -> crate::Error {
    let p = package(lang);
    crate::Error::Project {
        path,
        reason: format!(
            "this project builds against {} {found}, which does not speak {}@{} (the contract this operon \
             builds and runs): depend on {} instead, or use the operon release that matches the SDK",
            p.name,
            operon_contract::WIT_PACKAGE,
            operon_contract::WIT_VERSION,
            p.requirement
        ),
    }
}

/// Refuse a copy of the SDK (vendored by `operon new`, or named with `sdk =`
/// in `operon.toml`) whose `file` carries a version, the string literal
/// after `prefix`, that does not speak this operon's contract.
pub(crate) fn check_copy(lang: Lang, file: &std::path::Path, prefix: &str) -> Result<(), crate::Error> {
    let text = std::fs::read_to_string(file).map_err(crate::Error::io(file))?;
    let found = quoted_after(&text, prefix).unwrap_or_default();
    if !speaks_contract(&found) {
        return Err(contract_mismatch(lang, &found, file.to_path_buf()));
    }
    Ok(())
}

/// The files of the Go module `GO_MODULE@v<version>`, as its module zip

/// holds them: `(path inside the zip, contents)`, sorted by path. Every
/// regular file of `sdk/go` (it holds no nested module and no `vendor/`).
pub fn go_module_files(version: &str) -> Vec<(String, &'static [u8])> {
    fn walk(dir: &'static Dir<'static>, prefix: &str, out: &mut Vec<(String, &'static [u8])>) {
        for file in dir.files() {
            out.push((format!("{prefix}/{}", file.path().to_string_lossy()), file.contents()));
        }
        for sub in dir.dirs() {
            walk(sub, prefix, out);
        }
    }
    let mut files = Vec::new();
    walk(&GO_SDK, &format!("{GO_MODULE}@v{version}"), &mut files);
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// The two `go.sum` lines of the Go SDK at `version` (the module and its
/// `go.mod`), as Go computes them: the module's over its zip's files, the
/// `go.mod`'s over that one file named plainly `go.mod` (cmd/go's
/// `goModSum`).
pub fn go_sum_lines(version: &str) -> String {
    let files = go_module_files(version);
    let go_mod = GO_SDK.get_file("go.mod").map(|f| f.contents()).unwrap_or_default();
    let mod_file = [("go.mod".to_string(), go_mod)];
    format!("{GO_MODULE} v{version} {}\n{GO_MODULE} v{version}/go.mod {}\n", hash1(&files), hash1(&mod_file))
}

/// `golang.org/x/mod/sumdb/dirhash.Hash1`: SHA-256 over the lines
/// `"<sha256 hex>  <name>\n"` of the files sorted by name, base64, `h1:`.
fn hash1(files: &[(String, &[u8])]) -> String {
    use base64::Engine as _;
    let mut sorted: Vec<&(String, &[u8])> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut summary = String::new();
    for (name, bytes) in sorted {
        summary.push_str(&format!("{}  {name}\n", hex::encode(Sha256::digest(bytes))));
    }
    format!("h1:{}", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(summary.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sdk_should_carry_this_release_and_speak_its_contract() {
        for p in packages() {
            assert_eq!(p.version, VERSION, "{:?}: the {} sources say {}", p.lang, p.name, p.version);
            assert!(speaks_contract(&p.version), "{:?} {} vs WIT {}", p.lang, p.version, operon_contract::WIT_VERSION);
        }
    }

    #[test]
    fn hash1_should_be_gos_dirhash() {
        // Go's own answer: dirhash.Hash1 of these two files (golang.org/x/mod v0.41.0).
        let files = [
            ("m@v1.0.0/go.mod".to_string(), b"module m\n".as_slice()),
            ("m@v1.0.0/a.go".to_string(), b"package m\n".as_slice()),
        ];
        assert_eq!(hash1(&files), "h1:exj742mZOS+hMSya0MBBswVVh9ip8vZgmJ15akDldiY=");
    }

    #[test]
    fn go_sum_lines_should_hash_every_file_of_the_module_and_its_go_mod() {
        let lines = go_sum_lines(VERSION);
        let mut it = lines.lines();
        assert!(it.next().unwrap().starts_with(&format!("{GO_MODULE} v{VERSION} h1:")));
        assert!(it.next().unwrap().starts_with(&format!("{GO_MODULE} v{VERSION}/go.mod h1:")));
        let names: Vec<String> = go_module_files(VERSION).into_iter().map(|(n, _)| n).collect();
        assert!(names.contains(&format!("{GO_MODULE}@v{VERSION}/go.mod")), "{names:?}");
        assert!(names.contains(&format!("{GO_MODULE}@v{VERSION}/internal/wit/doc.go")), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("/template/")), "the scaffold is not part of the module: {names:?}");
    }
}
