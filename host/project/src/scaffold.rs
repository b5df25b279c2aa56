//! `operon new`: a new guest project that passes `operon test` as it is.
//!
//! Every language's scaffold implements the same small reconciler, so they
//! share one CRD and one set of fixtures (`sdk/template/`): a `Greeting`
//! (`demo.operon.dev/v1alpha1`) wants a ConfigMap `<name>-greeting` holding
//! `spec.message`, and reports `status.observedGeneration` and
//! `status.published` (whether that ConfigMap exists). An empty message is a
//! terminal failure.
//!
//! **The SDK is vendored by default.** A new project carries its
//! language's SDK, copied from this binary, and names it by local path
//! (`SdkSource::Vendored`): it builds on a fresh machine with nothing but
//! the language's tools, and no SDK name is ever resolved from a public
//! registry, where none is published yet (`crate::sdk::Package::published`)
//! and whoever claimed the name first would run code in every new project.
//! `SdkSource::Registry` (`operon new --sdk registry`) names the package
//! in the language's normal way instead (`Cargo.toml`, `pyproject.toml`,
//! `package.json`, `go.mod`, or pkg-config for C), for a registry or mirror
//! that serves it.
//!
//! `operon new --group G --version V --kind K` names the parent kind as
//! kubebuilder's `create api` does: every rendered file (the CRD, the
//! sample, the fixtures and the source) is written with that kind instead
//! of `Greeting`, so the project passes its fixtures as it is, whatever
//! the kind.

use super::{Error, Lang, lang};
use include_dir::{Dir, include_dir};
use std::path::Path;

/// The files every language's project has (rendered).
static COMMON: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/template");

/// The kind a new project reconciles (`operon new --group --version --kind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentKind {
    /// API group, e.g. `demo.operon.dev`.
    pub group: String,
    /// API version, e.g. `v1alpha1`.
    pub version: String,
    /// Kind, UpperCamelCase, e.g. `Greeting`.
    pub kind: String,
}

impl Default for ParentKind {
    fn default() -> Self {
        ParentKind { group: "demo.operon.dev".into(), version: "v1alpha1".into(), kind: "Greeting".into() }
    }
}

impl ParentKind {
    /// Check the three names as the API server would take them.
    ///
    /// # Errors
    /// [`Error::Project`] naming the flag and the rule.
    pub fn check(&self, dir: &Path) -> Result<(), Error> {
        let fail = |reason: String| Err(Error::Project { path: dir.to_path_buf(), reason });
        let dns_label = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && s.starts_with(|c: char| c.is_ascii_lowercase())
                && !s.ends_with('-')
        };
        if !self.group.contains('.') || !self.group.split('.').all(dns_label) {
            return fail(format!(
                "--group {:?} must be a DNS subdomain with a dot, such as demo.example.com (custom kinds need their own group)",
                self.group
            ));
        }
        let version_ok = self.version.strip_prefix('v').is_some_and(|rest| {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && matches!(&rest[digits..], "" | "alpha1" | "alpha2" | "alpha3" | "beta1" | "beta2" | "beta3")
        });
        if !version_ok {
            return fail(format!("--version {:?} must look like v1, v1beta1 or v1alpha1", self.version));
        }
        let kind_ok = self.kind.starts_with(|c: char| c.is_ascii_uppercase())
            && self.kind.len() <= 63
            && self.kind.bytes().all(|b| b.is_ascii_alphanumeric());
        if !kind_ok {
            return fail(format!("--kind {:?} must be UpperCamelCase letters and digits, such as WebApp", self.kind));
        }
        Ok(())
    }

    /// The resource name: the lowercase kind, pluralised as kubebuilder
    /// does for regular English nouns (`Policy` → `policies`, `Class` →
    /// `classes`).
    pub fn plural(&self) -> String {
        let lower = self.kind.to_lowercase();
        if let Some(stem) = lower.strip_suffix('y')
            && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
        {
            return format!("{stem}ies");
        }
        if lower.ends_with(['s', 'x', 'z']) || lower.ends_with("ch") || lower.ends_with("sh") {
            return format!("{lower}es");
        }
        format!("{lower}s")
    }

    /// `WebApp` → `WEB_APP`.
    fn constant(&self) -> String {
        let mut out = String::new();
        for (i, c) in self.kind.chars().enumerate() {
            if i > 0 && c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }

    /// Write the template's `Greeting` (`demo.operon.dev/v1alpha1`) as this
    /// kind, in every spelling the templates use.
    fn render(&self, text: &str) -> String {
        let default = ParentKind::default();
        if *self == default {
            return text.to_string();
        }
        let plural = self.plural();
        let mut title = plural.clone();
        title.replace_range(..1, &self.kind[..1]);
        text.replace(&default.group, &self.group)
            .replace(&default.version, &self.version)
            .replace("Greetings", &title)
            .replace("greetings", &plural)
            .replace("GREETING", &self.constant())
            .replace("Greeting", &self.kind)
            .replace("greeting", &self.kind.to_lowercase())
    }
}

/// Where a new project's SDK comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SdkSource {
    /// Copied into the project from this binary and named by local path:
    /// builds offline, resolves no SDK name from any registry.
    #[default]
    Vendored,
    /// Named as a package of the language's registry (crates.io, PyPI, npm,
    /// the Go module proxy, the C archive through pkg-config), which must
    /// serve it: none of them does for an unpublished release.
    Registry,
}

/// A project being written.
pub struct Scaffold<'a> {
    /// The new project's directory.
    pub dir: &'a Path,
    /// Its name (also the controller's name): `[a-z][a-z0-9-]*`.
    pub name: &'a str,
    /// Its language.
    pub lang: Lang,
    /// Copy the SDK into the project ([`SdkSource::Vendored`]) rather than
    /// name its package.
    pub vendor: bool,
    /// More `{{key}}` substitutions, set by the language before it writes.
    pub vars: Vec<(&'static str, String)>,
    /// The kind it reconciles.
    pub parent: &'a ParentKind,
}

impl Scaffold<'_> {
    /// The name as an identifier: `my-app` → `my_app`.
    pub fn ident(&self) -> String {
        self.name.replace('-', "_")
    }

    /// Replace `{{name}}`, `{{ident}}`, `{{lang}}`, `{{version}}` (the SDK
    /// release this operon names) and the language's [`Scaffold::vars`], and
    /// write the template's `Greeting` as the project's kind.
    pub fn render(&self, text: &str) -> String {
        let text = self
            .parent
            .render(text)
            .replace("{{name}}", self.name)
            .replace("{{ident}}", &self.ident())
            .replace("{{lang}}", self.lang.as_str())
            .replace("{{version}}", crate::sdk::VERSION);
        self.vars.iter().fold(text, |text, (key, value)| text.replace(&format!("{{{{{key}}}}}"), value))
    }

    /// Set the substitution of `{{key}}`.
    pub fn set(&mut self, key: &'static str, value: impl Into<String>) {
        self.vars.push((key, value.into()));
    }

    /// Write one file, rendered, at `rel` inside the project.
    pub fn write(&self, rel: &str, text: &str) -> Result<(), Error> {
        self.write_bytes(rel, self.render(text).as_bytes())
    }

    /// Write one file as it is.
    pub fn write_bytes(&self, rel: &str, bytes: &[u8]) -> Result<(), Error> {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(Error::io(parent))?;
        }
        std::fs::write(&path, bytes).map_err(Error::io(&path))
    }

    /// Write every file of an embedded directory under `dest`, rendered when
    /// `render` (templates) or verbatim (vendored SDK sources).
    pub fn write_dir(&self, dir: &Dir<'_>, dest: &str, render: bool) -> Result<(), Error> {
        for file in dir.files() {
            // Stored without the dot, so it does not apply inside this repository.
            let path = file.path();
            let rel = match path.file_name().and_then(|n| n.to_str()) {
                Some("gitignore") => Path::new(dest).join(path.with_file_name(".gitignore")),
                _ => Path::new(dest).join(path),
            };
            let rel = rel.to_string_lossy();
            match (render, file.contents_utf8()) {
                (true, Some(text)) => self.write(&rel, text)?,
                _ => self.write_bytes(&rel, file.contents())?,
            }
        }
        for sub in dir.dirs() {
            self.write_dir(sub, dest, render)?;
        }
        Ok(())
    }
}

/// Create a project for `lang` in `dir` (which must not exist or be empty),
/// named `name` or after the directory, reconciling `Greeting`, with its SDK
/// from `sdk`.
///
/// # Errors
/// [`Error::NotEmpty`], a name that is not a valid controller name, or I/O.
pub fn scaffold(lang: Lang, dir: &Path, name: Option<&str>, sdk: SdkSource) -> Result<(), Error> {
    scaffold_kind(lang, dir, name, sdk, &ParentKind::default())
}

/// [`scaffold`] for a project reconciling `parent`.
///
/// # Errors
/// As [`scaffold`], and a kind the API server would not take
/// ([`ParentKind::check`]).
pub fn scaffold_kind(
    lang: Lang,
    dir: &Path,
    name: Option<&str>,
    sdk: SdkSource,
    parent: &ParentKind,
) -> Result<(), Error> {
    parent.check(dir)?;
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Error::NotEmpty(dir.to_path_buf()));
    }
    let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name = name.unwrap_or(&dir_name);
    let valid = name.len() <= 50
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.ends_with('-');
    if !valid {
        return Err(Error::Project {
            path: dir.to_path_buf(),
            reason: format!(
                "{name:?} cannot name a reconciler: use up to 50 lowercase letters, digits and `-`, starting with a letter (or pass --name)"
            ),
        });
    }
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let vendor = sdk == SdkSource::Vendored;
    let mut s = Scaffold { dir, name, lang, vendor, vars: Vec::new(), parent };
    s.write_dir(&COMMON, "", true)?;
    lang::scaffold(lang, &mut s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `dir`, with its text (binary files skipped).
    fn texts(dir: &Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                texts(&path, out);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path, text));
            }
        }
    }

    #[test]
    fn every_scaffold_should_fill_every_placeholder_and_vendor_unless_the_registry_is_asked() {
        let scratch = tempfile::tempdir().unwrap();
        for lang in Lang::ALL {
            for source in [SdkSource::Registry, SdkSource::Vendored] {
                let vendor = source == SdkSource::Vendored;
                let dir = scratch.path().join(format!("{lang}-{vendor}"));
                scaffold(lang, &dir, Some("greeter"), source).unwrap();
                let mut files = Vec::new();
                texts(&dir, &mut files);
                // The vendored SDKs' own sources are copied, not rendered.
                let rendered = files.iter().filter(|(p, _)| {
                    !["operon-sdk", "operon_sdk", "operon-contract"].iter().any(|d| p.starts_with(dir.join(d)))
                });
                for (path, text) in rendered {
                    let placeholder = text.match_indices("{{").find(|(i, _)| {
                        let rest = &text[i + 2..];
                        let name = rest.find("}}").map(|end| &rest[..end]).unwrap_or_default();
                        !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    });
                    assert!(placeholder.is_none(), "{}: a placeholder is left:\n{text}", path.display());
                }
                let vendored = ["operon-sdk", "operon_sdk"].iter().any(|d| dir.join(d).exists());
                assert_eq!(vendored, vendor, "{lang} vendor={vendor}");
                let names_version = files.iter().any(|(_, t)| t.contains(crate::sdk::VERSION));
                assert!(names_version, "{lang} vendor={vendor}: no file names the SDK release");
            }
        }
    }

    #[test]
    fn a_kind_should_be_written_in_every_spelling_the_templates_use() {
        let widget = ParentKind { group: "shop.example.com".into(), version: "v1".into(), kind: "WebApp".into() };
        let text = "greetings.demo.operon.dev: Greeting (demo.operon.dev/v1alpha1), GREETING, GreetingReconciler, \
                    hello-greeting, Greetings";
        assert_eq!(
            widget.render(text),
            "webapps.shop.example.com: WebApp (shop.example.com/v1), WEB_APP, WebAppReconciler, hello-webapp, Webapps"
        );
        assert_eq!(ParentKind::default().render(text), text);
    }

    #[test]
    fn plurals_and_checks_should_follow_the_api_servers_rules() {
        let kind = |k: &str| ParentKind { kind: k.into(), ..ParentKind::default() };
        assert_eq!(kind("Policy").plural(), "policies");
        assert_eq!(kind("Gateway").plural(), "gateways");
        assert_eq!(kind("Class").plural(), "classes");
        assert_eq!(kind("Greeting").plural(), "greetings");
        let dir = Path::new("x");
        assert!(kind("webApp").check(dir).unwrap_err().to_string().contains("UpperCamelCase"));
        let group = ParentKind { group: "nodots".into(), ..ParentKind::default() };
        assert!(group.check(dir).unwrap_err().to_string().contains("--group"));
        let version = ParentKind { version: "1".into(), ..ParentKind::default() };
        assert!(version.check(dir).unwrap_err().to_string().contains("--version"));
        assert!(ParentKind::default().check(dir).is_ok());
    }

    #[test]
    fn a_default_scaffold_should_name_its_sdk_by_local_path_and_no_registry_package() {
        let scratch = tempfile::tempdir().unwrap();
        for lang in Lang::ALL {
            let dir = scratch.path().join(lang.as_str());
            scaffold(lang, &dir, Some("greeter"), SdkSource::default()).unwrap();
            let read = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap();
            match lang {
                Lang::Rust => {
                    let manifest: toml::Table = read("Cargo.toml").parse().unwrap();
                    assert_eq!(manifest["dependencies"]["operon-sdk"]["path"].as_str(), Some("operon-sdk"));
                    assert_eq!(manifest["dev-dependencies"]["operon-sdk"]["path"].as_str(), Some("operon-sdk"));
                }
                Lang::Python => {
                    let pyproject: toml::Table = read("pyproject.toml").parse().unwrap();
                    let deps = pyproject["project"].get("dependencies").and_then(|d| d.as_array());
                    assert!(
                        deps.is_none_or(|d| !d.iter().any(|d| d.as_str().is_some_and(|d| d.contains("operon")))),
                        "{pyproject:?}"
                    );
                }
                Lang::TypeScript => {
                    let package: serde_json::Value = serde_json::from_str(&read("package.json")).unwrap();
                    assert_eq!(package["dependencies"]["@operon/sdk"], "file:./operon-sdk");
                    assert!(read("package-lock.json").contains("\"@operon/sdk\": \"file:./operon-sdk\""));
                }
                Lang::Go => {
                    let go_mod = read("go.mod");
                    assert!(go_mod.contains(&format!("replace {} => ./operon-sdk", crate::sdk::GO_MODULE)), "{go_mod}");
                    assert!(!read("go.sum").contains(crate::sdk::GO_MODULE), "no sum for a module never fetched");
                }
                Lang::C => assert!(!read("Makefile").contains("pkg-config"), "{}", read("Makefile")),
            }
        }
    }
}
