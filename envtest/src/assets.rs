//! Where the control-plane binaries come from.
//!
//! Tests never build anything: they [`find`] `etcd`, `kube-apiserver` and,
//! as their options need, `kube-controller-manager`, `kube-scheduler` and
//! `kwok` in `KUBEBUILDER_ASSETS` or in the user cache, and fail with
//! instructions when neither has them. [`ensure`] (behind
//! `cargo xtask envtest`) fills the cache by building the pinned versions of
//! all five from the Go module proxy, once per machine.
//!
//! The directory layout is setup-envtest's: one flat directory holding the
//! executables, so a directory from setup-envtest works too. It lacks
//! `kube-controller-manager`, which only [`Options::controller_manager`]
//! needs, and `kube-scheduler` and `kwok`, which only
//! [`Options::workloads`] needs.
//!
//! [`Options::controller_manager`]: crate::Options::controller_manager
//! [`Options::workloads`]: crate::Options::workloads

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

/// The kwok release (`sigs.k8s.io/kwok`) that plays the kubelet for fake
/// Nodes; see [`Options::workloads`](crate::Options::workloads).
pub const KWOK_VERSION: &str = "0.8.0";

/// Name of the etcd executable.
pub const ETCD: &str = "etcd";
/// Name of the API server executable.
pub const KUBE_APISERVER: &str = "kube-apiserver";
/// Name of the controller manager executable.
pub const KUBE_CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// Name of the scheduler executable.
pub const KUBE_SCHEDULER: &str = "kube-scheduler";
/// Name of the kwok controller executable (kwok's `cmd/kwok`).
pub const KWOK: &str = "kwok";

/// Every binary [`ensure`] provides, in build order.
pub const ALL: [&str; 5] = [ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK];

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
            (KUBE_SCHEDULER, "k8s.io/kubernetes/cmd/kube-scheduler"),
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
    GoModule {
        dir: "kwok",
        go_mod: include_str!("../go/kwok/go.mod"),
        go_sum: include_str!("../go/kwok/go.sum"),
        builds: &[(KWOK, "sigs.k8s.io/kwok/cmd/kwok")],
        // kwok's version is a constant in its source.
        version_ldflags: "",
    },
];

/// kwok's default stages (what `kwokctl` installs), which the `kwok` binary
/// does not carry: without them it refuses to start. See the file's header.
pub(crate) const KWOK_STAGES: &str = include_str!("../go/kwok/stages.yaml");

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
/// `$XDG_CACHE_HOME/operon/envtest/<k8s>-etcd<etcd>-kwok<kwok>` (or under
/// `~/.cache`).
///
/// A new pin gets a new directory, so a stale cache is never used.
pub fn cache_dir() -> Result<PathBuf> {
    Ok(cache_root()?.join(format!("{KUBERNETES_VERSION}-etcd{ETCD_VERSION}-kwok{KWOK_VERSION}")))
}

/// The cache directory of the layout before kwok and kube-scheduler:
/// `etcd`, `kube-apiserver` and `kube-controller-manager` of the same pins.
/// [`ensure`] reuses its binaries rather than building them again.
fn previous_cache_dir() -> Result<PathBuf> {
    Ok(cache_root()?.join(format!("{KUBERNETES_VERSION}-etcd{ETCD_VERSION}")))
}

fn cache_root() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .context("neither XDG_CACHE_HOME nor HOME is set, so there is no cache directory for the envtest binaries; set KUBEBUILDER_ASSETS")?;
            PathBuf::from(home).join(".cache")
        }
    };
    Ok(base.join("operon").join("envtest"))
}

/// The binaries `dir` lacks, among `names`.
fn missing<'a>(dir: &Path, names: &[&'a str]) -> Vec<&'a str> {
    names.iter().copied().filter(|name| !dir.join(name).is_file()).collect()
}

fn assets_env() -> Option<PathBuf> {
    std::env::var_os(ASSETS_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// What to do about a missing binary, for error messages.
fn how_to_get(names: &[&str]) -> String {
    let mut hints = vec![format!(
        "Run `cargo xtask envtest` once (builds Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION} \
         and kwok {KWOK_VERSION} with Go into the cache, a few minutes), or point {ASSETS_ENV} at a \
         directory holding {}.",
        names.join(", ")
    )];
    if names.contains(&KUBE_SCHEDULER) || names.contains(&KWOK) {
        hints.push(
            "kube-scheduler and kwok are needed only by `Options::workloads`; setup-envtest's \
             directories do not have them: build kube-scheduler from k8s.io/kubernetes/cmd/kube-scheduler \
             and kwok from sigs.k8s.io/kwok/cmd/kwok, or use the cache."
                .to_owned(),
        );
    }
    hints.join("\n")
}

/// Finds a directory holding every binary in `names` (e.g.
/// `[ETCD, KUBE_APISERVER]`). Never builds.
///
/// Looks in `KUBEBUILDER_ASSETS` first, then in [`cache_dir`].
///
/// # Errors
///
/// When neither holds them all; the message names what each lacks and says
/// to run `cargo xtask envtest` or to set `KUBEBUILDER_ASSETS`.
pub fn find(names: &[&str]) -> Result<PathBuf> {
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
    bail!("no control-plane binaries for operon-envtest: {}.\n{}", tried.join("; "), how_to_get(names))
}

/// Fails unless `dir`, given explicitly (see
/// [`Options::assets`](crate::Options::assets)), holds every binary in
/// `names`.
pub(crate) fn check(dir: &Path, names: &[&str]) -> Result<()> {
    let lacks = missing(dir, names);
    if !lacks.is_empty() {
        bail!("the envtest assets directory {} lacks {}.\n{}", dir.display(), lacks.join(", "), how_to_get(names));
    }
    Ok(())
}

/// Makes sure all five binaries ([`ALL`]) exist and returns their directory,
/// building what is missing into [`cache_dir`]. `progress` receives one line
/// per step, naming each binary as it is built.
///
/// Uses `KUBEBUILDER_ASSETS` when it holds all five. Otherwise builds with
/// the `go` on `PATH` (or `$GO`), fetching modules through the Go module
/// proxy (`GOPROXY`), with `-trimpath`, `CGO_ENABLED=0` and `-ldflags=-s -w`.
/// Binaries of the same pins in the cache of the previous layout (without
/// kube-scheduler and kwok) are reused, not rebuilt.
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
    if let Some(dir) = assets_env() {
        let lacks = missing(&dir, &ALL);
        if lacks.is_empty() {
            progress(&format!("using {ASSETS_ENV}={}", dir.display()));
            return Ok(dir);
        }
        progress(&format!("{ASSETS_ENV}={} lacks {}; using the cache instead", dir.display(), lacks.join(", ")));
    }
    let cache = cache_dir()?;
    if missing(&cache, &ALL).is_empty() {
        return Ok(cache);
    }
    build(&cache, &previous_cache_dir()?, progress).map_err(|e| {
        e.context(format!(
            "could not build the envtest binaries. Alternatively put {} in a directory \
             and set {ASSETS_ENV} to it (Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION}, \
             kwok {KWOK_VERSION} or close)",
            ALL.join(", ")
        ))
    })?;
    Ok(cache)
}

fn go_program() -> OsString {
    std::env::var_os("GO").filter(|v| !v.is_empty()).unwrap_or_else(|| "go".into())
}

/// Builds every binary into `cache`, copying those that `previous` (a cache
/// of the same etcd and Kubernetes pins) already holds.
fn build(cache: &Path, previous: &Path, progress: &mut dyn FnMut(&str)) -> Result<()> {
    let parent = cache.parent().context("the cache directory has no parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("could not create {}", parent.display()))?;
    // Same filesystem as the final directory, so the rename below is atomic.
    let staging = tempfile::Builder::new()
        .prefix(".building-")
        .tempdir_in(parent)
        .with_context(|| format!("could not create a build directory in {}", parent.display()))?;
    let bin = staging.path().join("bin");
    std::fs::create_dir(&bin)?;

    // The previous layout's binaries are the same pins; a hard link costs
    // nothing and survives the removal of the old directory.
    for name in [ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER] {
        let old = previous.join(name);
        if old.is_file() {
            std::fs::hard_link(&old, bin.join(name))
                .or_else(|_| std::fs::copy(&old, bin.join(name)).map(drop))
                .with_context(|| format!("could not reuse {}", old.display()))?;
            progress(&format!("reusing {name} from {}", previous.display()));
        }
    }
    let to_build: Vec<(&GoModule, &str, &str)> = GO_MODULES
        .iter()
        .flat_map(|module| module.builds.iter().map(move |(name, package)| (module, *name, *package)))
        .filter(|(_, name, _)| !bin.join(name).is_file())
        .collect();

    let started = Instant::now();
    if !to_build.is_empty() {
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
        let names: Vec<&str> = to_build.iter().map(|(_, name, _)| *name).collect();
        progress(&format!(
            "building {} (Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION}, kwok {KWOK_VERSION}) into {} \
             with {}; the first build takes several minutes",
            names.join(", "),
            cache.display(),
            String::from_utf8_lossy(&version.stdout).trim()
        ));
        for (index, (module, name, package)) in to_build.iter().enumerate() {
            let src = staging.path().join(module.dir);
            if !src.exists() {
                std::fs::create_dir(&src)?;
                std::fs::write(src.join("go.mod"), module.go_mod)?;
                std::fs::write(src.join("go.sum"), module.go_sum)?;
            }
            progress(&format!("[{}/{}] building {name} (go build {package})", index + 1, to_build.len()));
            let step = Instant::now();
            let output = Command::new(&go)
                .current_dir(&src)
                .args(["build", "-trimpath", "-o"])
                .arg(bin.join(name))
                .arg(format!("-ldflags=-s -w {}", module.version_ldflags))
                .arg(package)
                .env("CGO_ENABLED", "0")
                // The pins are go.mod/go.sum as committed: never rewrite them.
                // The module and build caches (about 0.8 and 2.9 GB) live
                // and go with the staging directory: only the binaries are
                // kept, and a machine's disk is not spent on a cache that
                // serves only the next change of the pins.
                .env("GOFLAGS", "-mod=readonly -buildvcs=false -modcacherw")
                .env("GOCACHE", staging.path().join("go-build"))
                .env("GOMODCACHE", staging.path().join("go-mod"))
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

    if cache.exists() && !missing(cache, &ALL).is_empty() {
        // Left by hand or by an older layout: not ours to trust.
        std::fs::remove_dir_all(cache)
            .with_context(|| format!("could not remove the incomplete {}", cache.display()))?;
    }
    match std::fs::rename(&bin, cache) {
        Ok(()) => {}
        // Another build finished first; its binaries are as good as ours.
        Err(_) if missing(cache, &ALL).is_empty() => {}
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
        let [etcd, kubernetes, kwok] = GO_MODULES else { panic!("expected the etcd, kubernetes and kwok modules") };
        assert!(etcd.go_mod.contains(&format!("go.etcd.io/etcd/server/v3 v{ETCD_VERSION}")));
        assert!(kubernetes.go_mod.contains(&format!("k8s.io/kubernetes v{KUBERNETES_VERSION}")));
        assert!(kwok.go_mod.contains(&format!("sigs.k8s.io/kwok v{KWOK_VERSION}")));
        let minor = KUBERNETES_VERSION.split('.').nth(1).unwrap();
        assert!(
            kubernetes.go_mod.contains(&format!("k8s.io/api => k8s.io/api v0.{minor}.")),
            "staging modules follow the same minor"
        );
        assert!(kubernetes.version_ldflags.contains(&format!("gitVersion=v{KUBERNETES_VERSION} ")));
        assert!(kubernetes.version_ldflags.contains(&format!("gitMinor={minor} ")));
    }

    #[test]
    fn every_binary_is_built_by_exactly_one_module_and_named_as_a_go_tool() {
        for name in ALL {
            let builders: Vec<_> = GO_MODULES
                .iter()
                .flat_map(|m| m.builds.iter().map(move |(n, package)| (m, *n, *package)))
                .filter(|(_, n, _)| *n == name)
                .collect();
            let [(module, _, package)] = builders[..] else { panic!("{name} is built by {} modules", builders.len()) };
            // `tool` lines keep `go mod tidy` from dropping the package's
            // dependencies from go.sum.
            assert!(
                module.go_mod.contains(&format!("\t{package}\n"))
                    || module.go_mod.contains(&format!("tool {package}\n"))
            );
        }
    }

    #[test]
    fn kwok_stages_match_the_pinned_version_and_cover_nodes_and_pods() {
        assert!(KWOK_STAGES.contains(&format!("sigs.k8s.io/kwok v{KWOK_VERSION}")));
        for stage in ["node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete"] {
            assert!(KWOK_STAGES.contains(&format!("  name: {stage}\n")), "{stage} is missing");
        }
    }

    #[test]
    fn cache_dir_is_keyed_by_every_version() {
        let dir = cache_dir().unwrap();
        let leaf = dir.file_name().unwrap().to_string_lossy();
        assert_eq!(leaf, format!("{KUBERNETES_VERSION}-etcd{ETCD_VERSION}-kwok{KWOK_VERSION}"));
        assert_eq!(previous_cache_dir().unwrap().parent(), dir.parent());
    }
}
