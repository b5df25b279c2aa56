//! `operon new` embeds the SDKs and templates under `sdk/` (and, for Rust,
//! the contract crate and the workspace manifest) with `include_dir!` and
//! `include_str!`, which cargo does not track: rebuild when they change, so
//! a scaffold never carries a stale SDK.

fn main() {
    println!("cargo:rerun-if-changed=../sdk");
    println!("cargo:rerun-if-changed=../wit");
    println!("cargo:rerun-if-changed=../contract/Cargo.toml");
    println!("cargo:rerun-if-changed=../contract/src");
    println!("cargo:rerun-if-changed=../Cargo.toml");
}
