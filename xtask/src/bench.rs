//! `cargo xtask bench`.

use anyhow::{Result, bail};

pub fn run(args: &[&str]) -> Result<()> {
    bail!("`cargo xtask bench {}` is not written yet", args.join(" "))
}
