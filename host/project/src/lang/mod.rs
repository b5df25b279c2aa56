//! One module per language: how its projects are built and scaffolded.
//!
//! Each language module has two functions:
//! - `build(cx) -> Result<Vec<u8>, Error>`: run the language's toolchain in
//!   the project directory and return the component's bytes;
//! - `scaffold(s) -> Result<(), Error>`: write the language's files of a new
//!   project (source with a working minimal reconciler, the build file that
//!   names the vendored SDK, or its package with `--sdk registry`); the files
//!   every language shares are written by `scaffold.rs`;
//! - `sdk_version() -> String`: the version the SDK sources built into this
//!   binary carry (`crate::sdk`).

pub(crate) mod c;
pub(crate) mod go;
pub(crate) mod python;
pub(crate) mod rust;
pub(crate) mod typescript;

use super::scaffold::Scaffold;
use super::{BuildContext, Error};
use serde::Deserialize;
use std::fmt;
use std::str::FromStr;

/// A language guests can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    /// Rust with `operon-sdk`, built for `wasm32-unknown-unknown`.
    Rust,
    /// Python with componentize-py.
    Python,
    /// TypeScript compiled by `tsc`, componentized with componentize-js.
    #[serde(rename = "ts", alias = "typescript")]
    TypeScript,
    /// Go (`GOOS=wasip1`), bindings from wit-bindgen's Go generator.
    Go,
    /// C (clang's wasm32-wasi target, wasi-libc), bindings from wit-bindgen's C generator.
    C,
}

impl Lang {
    /// Every language, in the order the CLI lists them.
    pub const ALL: [Lang; 5] = [Lang::Rust, Lang::Python, Lang::TypeScript, Lang::Go, Lang::C];

    /// The name used in `operon.toml` and `--lang`.
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::TypeScript => "ts",
            Lang::Go => "go",
            Lang::C => "c",
        }
    }

    /// What an author must install to build this language, for errors and
    /// `operon new`'s closing message.
    pub fn requirements(self) -> &'static str {
        match self {
            Lang::Rust => rust::REQUIREMENTS,
            Lang::Python => python::REQUIREMENTS,
            Lang::TypeScript => typescript::REQUIREMENTS,
            Lang::Go => go::REQUIREMENTS,
            Lang::C => c::REQUIREMENTS,
        }
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Lang {
    type Err = String;

    fn from_str(s: &str) -> Result<Lang, String> {
        match s {
            "rust" | "rs" => Ok(Lang::Rust),
            "python" | "py" => Ok(Lang::Python),
            "ts" | "typescript" => Ok(Lang::TypeScript),
            "go" | "golang" => Ok(Lang::Go),
            "c" => Ok(Lang::C),
            other => Err(format!("unknown language {other:?}; use one of rust, python, ts, go, c")),
        }
    }
}

/// Build the project with its language's toolchain.
pub(super) fn build(cx: &mut BuildContext<'_>) -> Result<Vec<u8>, Error> {
    match cx.project.config.lang {
        Lang::Rust => rust::build(cx),
        Lang::Python => python::build(cx),
        Lang::TypeScript => typescript::build(cx),
        Lang::Go => go::build(cx),
        Lang::C => c::build(cx),
    }
}

/// Write the language's files of a new project.
pub(super) fn scaffold(lang: Lang, s: &mut Scaffold<'_>) -> Result<(), Error> {
    match lang {
        Lang::Rust => rust::scaffold(s),
        Lang::Python => python::scaffold(s),
        Lang::TypeScript => typescript::scaffold(s),
        Lang::Go => go::scaffold(s),
        Lang::C => c::scaffold(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_should_parse_from_their_names_and_aliases() {
        for lang in Lang::ALL {
            assert_eq!(lang.as_str().parse::<Lang>().unwrap(), lang);
            let toml_value: Lang = toml::Value::String(lang.as_str().into()).try_into().unwrap();
            assert_eq!(toml_value, lang);
        }
        assert_eq!("typescript".parse::<Lang>().unwrap(), Lang::TypeScript);
        assert!("cobol".parse::<Lang>().unwrap_err().contains("rust, python, ts, go, c"));
    }
}
