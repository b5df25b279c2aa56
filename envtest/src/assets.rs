//! Where the control-plane binaries come from.
//!
//! Tests never build anything: they [`find`] `etcd`, `kube-apiserver` and
//! `kube-controller-manager` in `KUBEBUILDER_ASSETS` or in the user cache,
//! and fail with instructions when neither has them. [`ensure`] (behind
//! `cargo xtask envtest`) fills the cache by building the pinned versions from
//! the Go module proxy, once per machine.
//!
//! The directory layout is setup-envtest's: one flat directory holding the
//! executables, so a directory from setup-envtest works too (it lacks
//! `kube-controller-manager`, which only [`Options::controller_manager`]
//! needs).
//!
//! [`Options::controller_manager`]: crate::Options::controller_manager

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The Kubernetes release the binaries are built from; matches the
/// `k8s-openapi` feature (`v1_34`) the workspace compiles against.
pub const KUBERNETES_VERSION: &str = "1.34.4";

/// The etcd release; Kubernetes 1.34 is tested against etcd 3.6.
pub const ETCD_VERSION: &str = "3.6.16";

/// Name of the etcd executable.
pub const ETCD: &str = "etcd";
/// Name of the API server executable.
pub const KUBE_APISERVER: &str = "kube-apiserver";
/// Name of the controller manager executable.
pub const KUBE_CONTROLLER_MANAGER: &str = "kube-controller-manager";

/// The environment variable naming a directory of prebuilt binaries, as with
/// controller-runtime's envtest and setup-envtest.
pub const ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";

/// The Go modules pinning what [`ensure`] builds. They are compiled into this
/// crate so a build never depends on, or writes to, the source tree.
const GO_MODULES: &[GoModule] = &[
    GoModule {
        dir: "etcd",
        go_mod: include_str!("../go/etcd/go.mod"),
        go_sum: include_str!("../go/etcd/go.sum"),
        builds: &[(ETCD, "go.etcd.io/etcd/server/v3")],
        // etcd's version is a constant in its source.
        version_ldflags: "",
    },
    GoModule {
        dir: "kubernetes",
        go_mod: include_str!("../go/kubernetes/go.mod"),
        go_sum: include_str!("../go/kubernetes/go.sum"),
        builds: &[
            (KUBE_APISERVER, "k8s.io/kubernetes/cmd/kube-apiserver"),
            (KUBE_CONTROLLER_MANAGER, "k8s.io/kubernetes/cmd/kube-controller-manager"),
        ],
        // What Kubernetes' own build (hack/lib/version.sh) stamps in; without
        // it `/version` says v0.0.0-master and clients cannot tell the minor.
        version_ldflags: concat!(
            "-X k8s.io/component-base/version.gitVersion=v1.34.4",
            " -X k8s.io/component-base/version.gitMajor=1",
            " -X k8s.io/component-base/version.gitMinor=34",
            " -X k8s.io/component-base/version.gitTreeState=clean",
            " -X k8s.io/client-go/pkg/version.gitVersion=v1.34.4",
            " -X k8s.io/client-go/pkg/version.gitMajor=1",
            " -X k8s.io/client-go/pkg/version.gitMinor=34",
            " -X k8s.io/client-go/pkg/version.gitTreeState=clean",
        ),
    },
];

struct GoModule {
    dir: &'static str,
    go_mod: &'static str,
    go_sum: &'static str,
    /// (executable name, Go package) pairs built in this module.
    builds: &'static [(&'static str, &'static str)],
    /// Extra `-ldflags`, after `-s -w`.
    version_ldflags: &'static str,
}

/// The cache directory for the pinned versions:
/// `$XDG_CACHE_HOME/operon/envtest/<k8s>-etcd<etcd>` (or under `~/.cache`).
///
/// A new pin gets a new directory, so a stale cache is never used.
pub fn cache_dir() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .context("neither XDG_CACHE_HOME nor HOME is set, so there is no cache directory for the envtest binaries; set KUBEBUILDER_ASSETS")?;
            PathBuf::from(home).join(".cache")
        }
    };
    Ok(base.join("operon").join("envtest").join(format!("{KUBERNETES_VERSION}-etcd{ETCD_VERSION}")))
}

/// The binaries `dir` lacks, among `names`.
fn missing(dir: &Path, names: &[&'static str]) -> Vec<&'static str> {
    names.iter().copied().filter(|name| !dir.join(name).is_file()).collect()
}

fn assets_env() -> Option<PathBuf> {
    std::env::var_os(ASSETS_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Finds a directory holding `etcd`, `kube-apiserver` and, if
/// `controller_manager`, `kube-controller-manager`. Never builds.
///
/// Looks in `KUBEBUILDER_ASSETS` first, then in [`cache_dir`].
///
/// # Errors
///
/// When neither holds the binaries; the message says to run
/// `cargo xtask envtest` or to set `KUBEBUILDER_ASSETS`.
pub fn find(controller_manager: bool) -> Result<PathBuf> {
    let names: &[&'static str] =
        if controller_manager { &[ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER] } else { &[ETCD, KUBE_APISERVER] };
    let mut tried = Vec::new();
    if let Some(dir) = assets_env() {
        let lacks = missing(&dir, names);
        if lacks.is_empty() {
            return Ok(dir);
        }
        tried.push(format!("{ASSETS_ENV}={} lacks {}", dir.display(), lacks.join(", ")));
    }
    let cache = cache_dir()?;
    let lacks = missing(&cache, names);
    if lacks.is_empty() {
        return Ok(cache);
    }
    tried.push(format!("the cache {} lacks {}", cache.display(), lacks.join(", ")));
    bail!(
        "no control-plane binaries for operon-envtest: {}.\n\
         Run `cargo xtask envtest` once (builds Kubernetes {KUBERNETES_VERSION} and etcd \
         {ETCD_VERSION} with Go into the cache, a few minutes), or point {ASSETS_ENV} at a \
         directory holding {}.",
        tried.join("; "),
        names.join(", ")
    )
}

/// Makes sure the three binaries exist and returns their directory, building
/// them into [`cache_dir`] if needed. `progress` receives one line per step.
///
/// Uses `KUBEBUILDER_ASSETS` when it holds all three. Otherwise builds with
/// the `go` on `PATH` (or `$GO`), fetching modules through the Go module
/// proxy (`GOPROXY`), with `-trimpath`, `CGO_ENABLED=0` and `-ldflags=-s -w`.
///
/// # Guarantees
///
/// The binaries are built in a temporary directory beside the cache entry and
/// moved into place with one rename, so an interrupted build leaves no
/// half-filled cache. Concurrent calls may both build; the first rename wins.
///
/// # Errors
///
/// When Go is missing or a build fails (e.g. the proxy is unreachable); the
/// message carries Go's output and says how to supply `KUBEBUILDER_ASSETS`.
pub fn ensure(progress: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let all = [ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER];
    if let Some(dir) = assets_env() {
        let lacks = missing(&dir, &all);
        if lacks.is_empty() {
            progress(&format!("using {ASSETS_ENV}={}", dir.display()));
            return Ok(dir);
        }
        progress(&format!("{ASSETS_ENV}={} lacks {}; using the cache instead", dir.display(), lacks.join(", ")));
    }
    let cache = cache_dir()?;
    if missing(&cache, &all).is_empty() {
        return Ok(cache);
    }
    build(&cache, progress).map_err(|e| {
        e.context(format!(
            "could not build the envtest binaries. Alternatively put {} in a directory \
             and set {ASSETS_ENV} to it (Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION} \
             or close)",
            all.join(", ")
        ))
    })?;
    Ok(cache)
}

fn go_program() -> OsString {
    std::env::var_os("GO").filter(|v| !v.is_empty()).unwrap_or_else(|| "go".into())
}

fn build(cache: &Path, progress: &mut dyn FnMut(&str)) -> Result<()> {
    let go = go_program();
    let version = Command::new(&go).arg("version").output().map_err(|e| {
        anyhow::anyhow!(
            "`{}` did not run ({e}): building needs Go 1.26 or newer on PATH (or its path in $GO)",
            go.to_string_lossy()
        )
    })?;
    if !version.status.success() {
        bail!("`{} version` failed: {}", go.to_string_lossy(), String::from_utf8_lossy(&version.stderr).trim());
    }
    progress(&format!(
        "building Kubernetes {KUBERNETES_VERSION} and etcd {ETCD_VERSION} into {} with {}; \
         the first build takes several minutes",
        cache.display(),
        String::from_utf8_lossy(&version.stdout).trim()
    ));

    let parent = cache.parent().context("the cache directory has no parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("could not create {}", parent.display()))?;
    // Same filesystem as the final directory, so the rename below is atomic.
    let staging = tempfile::Builder::new()
        .prefix(".building-")
        .tempdir_in(parent)
        .with_context(|| format!("could not create a build directory in {}", parent.display()))?;
    let bin = staging.path().join("bin");
    std::fs::create_dir(&bin)?;

    let started = Instant::now();
    for module in GO_MODULES {
        let src = staging.path().join(module.dir);
        std::fs::create_dir(&src)?;
        std::fs::write(src.join("go.mod"), module.go_mod)?;
        std::fs::write(src.join("go.sum"), module.go_sum)?;
        for (name, package) in module.builds {
            progress(&format!("go build {package}"));
            let step = Instant::now();
            let output = Command::new(&go)
                .current_dir(&src)
                .args(["build", "-trimpath", "-o"])
                .arg(bin.join(name))
                .arg(format!("-ldflags=-s -w {}", module.version_ldflags))
                .arg(package)
                .env("CGO_ENABLED", "0")
                // The pins are go.mod/go.sum as committed: never rewrite them.
                .env("GOFLAGS", "-mod=readonly -buildvcs=false")
                .output()
                .with_context(|| format!("could not run `go build {package}`"))?;
            if !output.status.success() {
                bail!(
                    "`go build {package}` failed ({}):\n{}\n\
                     Is the Go module proxy reachable (GOPROXY={})?",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim(),
                    std::env::var("GOPROXY").unwrap_or_else(|_| "default".into())
                );
            }
            progress(&format!("built {name} in {:.0?}", step.elapsed()));
        }
    }

    let all = [ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER];
    if cache.exists() && !missing(cache, &all).is_empty() {
        // Left by hand or by an older layout: not ours to trust.
        std::fs::remove_dir_all(cache)
            .with_context(|| format!("could not remove the incomplete {}", cache.display()))?;
    }
    match std::fs::rename(&bin, cache) {
        Ok(()) => {}
        // Another build finished first; its binaries are as good as ours.
        Err(_) if missing(cache, &all).is_empty() => {}
        Err(e) => {
            return Err(e).with_context(|| format!("could not move the binaries to {}", cache.display()));
        }
    }
    drop(staging);
    progress(&format!("built all in {:.0?}", started.elapsed()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_modules_pin_the_versions_named_in_rust() {
        let [etcd, kubernetes] = GO_MODULES else { panic!("expected the etcd and kubernetes modules") };
        assert!(etcd.go_mod.contains(&format!("go.etcd.io/etcd/server/v3 v{ETCD_VERSION}")));
        assert!(kubernetes.go_mod.contains(&format!("k8s.io/kubernetes v{KUBERNETES_VERSION}")));
        let minor = KUBERNETES_VERSION.split('.').nth(1).unwrap();
        assert!(
            kubernetes.go_mod.contains(&format!("k8s.io/api => k8s.io/api v0.{minor}.")),
            "staging modules follow the same minor"
        );
        assert!(kubernetes.version_ldflags.contains(&format!("gitVersion=v{KUBERNETES_VERSION} ")));
        assert!(kubernetes.version_ldflags.contains(&format!("gitMinor={minor} ")));
    }

    #[test]
    fn cache_dir_is_keyed_by_both_versions() {
        let dir = cache_dir().unwrap();
        let leaf = dir.file_name().unwrap().to_string_lossy();
        assert_eq!(leaf, format!("{KUBERNETES_VERSION}-etcd{ETCD_VERSION}"));
    }
}
