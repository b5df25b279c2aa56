//! `cargo xtask docs`: write the generated references in `docs/reference/`
//! (a unit test of `operon::cli::reference` fails when they are stale). The
//! host writes them itself (`operon reference --out-dir`), so xtask does not
//! link the host.

use anyhow::{Context, Result, bail};
use std::process::Command;

pub fn run() -> Result<()> {
    let dir = crate::root().join("docs/reference");
    let status = Command::new(env!("CARGO"))
        .current_dir(crate::root())
        .args(["run", "--quiet", "-p", "operon", "--", "reference", "--out-dir"])
        .arg(&dir)
        .status()
        .context("running `cargo run -p operon -- reference`")?;
    if !status.success() {
        bail!("`operon reference --out-dir {}` failed", dir.display());
    }
    Ok(())
}
