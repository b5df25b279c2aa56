//! `cargo xtask guests`.

use anyhow::{Result, bail};

pub fn run(args: &[&str]) -> Result<()> {
    bail!("`cargo xtask guests {}` is not written yet", args.join(" "))
}
