//! Go tools pinned in `deploy/tools/<name>` (helm, kustomize), built
//! through the Go module proxy into `~/.cache/operon/tools`
//! (`$OPERON_TOOLS_DIR`) — the cache `host/tests/all/deploy.rs` builds into
//! and reads, by the same rule: a cached binary is reused when the module
//! version it was built from (`go version -m`) is the one `go.mod` pins.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where built tools are cached.
fn dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("OPERON_TOOLS_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context("HOME is not set; set OPERON_TOOLS_DIR")?;
    Ok(PathBuf::from(home).join(".cache/operon/tools"))
}

/// The version of `module` that `deploy/tools/<name>/go.mod` requires.
fn pinned(name: &str, module: &str) -> Result<String> {
    let path = crate::root().join("deploy/tools").join(name).join("go.mod");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(module)).then(|| words.next().map(str::to_owned)).flatten()
        })
        .with_context(|| format!("{} does not require {module}", path.display()))
}

/// The version of `module` a Go binary was built from.
fn built(bin: &Path, module: &str) -> Option<String> {
    let out = Command::new("go").arg("version").arg("-m").arg(bin).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        (words.len() >= 3 && words[0] == "mod" && words[1] == module).then(|| words[2].to_owned())
    })
}

/// `name` (the `package` of `module`), built unless the cached one is the
/// pinned version.
fn go_tool(name: &str, module: &str, package: &str) -> Result<PathBuf> {
    let want = pinned(name, module)?;
    let dir = dir()?;
    let bin = dir.join(name);
    if bin.exists() && built(&bin, module).as_deref() == Some(want.as_str()) {
        return Ok(bin);
    }
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    eprintln!("xtask: building {name} ({module} {want}) through the Go module proxy into {}", bin.display());
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&tmp)
        .arg(package)
        .current_dir(crate::root().join("deploy/tools").join(name))
        .status()
        .context("running `go`: install Go 1.26+")?;
    if !status.success() {
        bail!("`go build {package}` failed ({status})");
    }
    std::fs::rename(&tmp, &bin)?;
    Ok(bin)
}

/// helm, as `deploy/tools/helm` pins it.
pub fn helm() -> Result<PathBuf> {
    go_tool("helm", "helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm")
}
