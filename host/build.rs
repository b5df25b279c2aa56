//! `operon new` embeds the SDKs and templates under `sdk/` with
//! `include_dir!`, which cargo does not track: rebuild when they change, so
//! a scaffold never carries a stale SDK.

fn main() {
    println!("cargo:rerun-if-changed=../sdk");
    println!("cargo:rerun-if-changed=../wit");
}
