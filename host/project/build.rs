//! `operon new` embeds the SDKs and templates under `sdk/` (and, for Rust,
//! the contract crate and the workspace manifest) with `include_dir!` and
//! `include_str!`. Cargo tracks neither a directory that `include_dir!`
//! reads nor, before the macro runs again, a file added to it: rebuild this
//! crate when any embedded path changes, so a scaffold never carries a stale
//! SDK. A test (`every_embedded_path_should_be_watched`) holds this list to
//! the macros in `src/`.

/// Every path `src/` embeds, relative to this crate.
const EMBEDDED: &[&str] = &[
    "../../.ci/run",
    "../../Cargo.toml",
    "../../contract/Cargo.toml",
    "../../contract/src",
    "../../sdk/Cargo.toml",
    "../../sdk/c",
    "../../sdk/go",
    "../../sdk/go-template",
    "../../sdk/python/operon_sdk",
    "../../sdk/python/template",
    "../../sdk/rust-template",
    "../../sdk/src",
    "../../sdk/template",
    "../../sdk/typescript/package.json",
    "../../sdk/typescript/src",
    "../../sdk/typescript/template",
    "../../wit/reconciler.wit",
];

fn main() {
    for path in EMBEDDED {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
