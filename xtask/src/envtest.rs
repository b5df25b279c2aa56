//! `cargo xtask envtest`.

use anyhow::{Result, bail};

pub fn run(args: &[&str]) -> Result<()> {
    bail!("`cargo xtask envtest {}` is not written yet", args.join(" "))
}
