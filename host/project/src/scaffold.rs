//! `operon new`: a new guest project that passes `operon test` as it is.
//!
//! Every language's scaffold implements the same small reconciler, so they
//! share one CRD and one set of fixtures (`sdk/template/`): a `Greeting`
//! (`demo.operon.dev/v1alpha1`) wants a ConfigMap `<name>-greeting` holding
//! `spec.message`, and reports `status.observedGeneration` and
//! `status.published` (whether that ConfigMap exists). An empty message is a
//! terminal failure.
//!
//! A new project depends on its language's SDK package by name and version,
//! the language's normal way (`crate::sdk`): `Cargo.toml`, `pyproject.toml`,
//! `package.json`, `go.mod`, or pkg-config for C. With `vendor`, the SDK's
//! sources are copied into the project instead, so it builds offline with
//! nothing but the language's tools.

use super::{Error, Lang, lang};
use include_dir::{Dir, include_dir};
use std::path::Path;

/// The files every language's project has (rendered).
static COMMON: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../sdk/template");

/// A project being written.
pub struct Scaffold<'a> {
    /// The new project's directory.
    pub dir: &'a Path,
    /// Its name (also the controller's name): `[a-z][a-z0-9-]*`.
    pub name: &'a str,
    /// Its language.
    pub lang: Lang,
    /// Copy the SDK into the project instead of depending on its package.
    pub vendor: bool,
    /// More `{{key}}` substitutions, set by the language before it writes.
    pub vars: Vec<(&'static str, String)>,
}

impl Scaffold<'_> {
    /// The name as an identifier: `my-app` → `my_app`.
    pub fn ident(&self) -> String {
        self.name.replace('-', "_")
    }

    /// Replace `{{name}}`, `{{ident}}`, `{{lang}}`, `{{version}}` (the SDK
    /// release this operon names) and the language's [`Scaffold::vars`].
    pub fn render(&self, text: &str) -> String {
        let text = text
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
/// named `name` or after the directory; with `vendor`, the SDK's sources
/// are copied into it rather than named as a dependency.
///
/// # Errors
/// [`Error::NotEmpty`], a name that is not a valid controller name, or I/O.
pub fn scaffold(lang: Lang, dir: &Path, name: Option<&str>, vendor: bool) -> Result<(), Error> {
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
    let mut s = Scaffold { dir, name, lang, vendor, vars: Vec::new() };
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
    fn every_scaffold_should_fill_every_placeholder_and_vendor_only_when_asked() {
        let scratch = tempfile::tempdir().unwrap();
        for lang in Lang::ALL {
            for vendor in [false, true] {
                let dir = scratch.path().join(format!("{lang}-{vendor}"));
                scaffold(lang, &dir, Some("greeter"), vendor).unwrap();
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
}
