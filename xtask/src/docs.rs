//! `cargo xtask docs`: write the generated references in `docs/reference/`
//! (a unit test of `operon::cli::reference` fails when they are stale).

use anyhow::{Context, Result};

pub fn run() -> Result<()> {
    let dir = crate::root().join("docs/reference");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, text) in operon::cli::reference::files() {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("docs: wrote {}", path.display());
    }
    Ok(())
}
