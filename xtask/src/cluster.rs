//! `cargo xtask cluster`.

use anyhow::{Result, bail};

pub fn run(args: &[&str]) -> Result<()> {
    bail!("`cargo xtask cluster {}` is not written yet", args.join(" "))
}
