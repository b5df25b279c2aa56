//! Hot reload for `operon dev`: poll each project's source files; on a
//! change rebuild, run the project's fixtures (what `operon test` runs),
//! and only when they pass replace the module file the Reconciler loads.
//! The Reconciler's path source then swaps the new version in; a build or
//! fixture failure leaves the running version alone. A project held back
//! at start because its fixtures failed is loaded by its first build whose
//! fixtures pass.
//!
//! Polling mtimes rather than inotify: portable, no extra dependency, and
//! a second's latency is nothing next to a build.

use super::{Loaded, Ui};
use crate::project::{self, Project};
use crate::runtime::{Limits, Runtime};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How often sources are looked at.
const POLL: Duration = Duration::from_secs(1);

/// Directories that hold build outputs or dependencies, never sources.
const IGNORED_DIRS: &[&str] = &["target", "node_modules", "__pycache__", "dist", "build", ".git"];

/// Every source file's modification time.
pub(crate) type Fingerprint = BTreeMap<PathBuf, SystemTime>;

/// What the watcher needs to load a project held back at start.
pub(crate) struct Loader {
    pub client: kube::Client,
    /// Apply the sample parents too.
    pub examples: bool,
}

/// What every project's sources look like now: the baseline of [`run`],
/// taken before the loop says it watches, so a save right after is seen.
pub(crate) async fn baseline(loaded: &[Loaded]) -> Vec<Fingerprint> {
    let mut prints = Vec::new();
    for l in loaded {
        prints.push(fingerprint_of(&l.project.dir).await);
    }
    prints
}

/// Watch every project until aborted, from `prints` ([`baseline`]).
pub(crate) async fn run(
    ui: Ui,
    runtime: Runtime,
    loaded: Arc<Vec<Loaded>>,
    loader: Loader,
    mut prints: Vec<Fingerprint>,
) {
    loop {
        tokio::time::sleep(POLL).await;
        for (l, print) in loaded.iter().zip(prints.iter_mut()) {
            let now = fingerprint_of(&l.project.dir).await;
            if now == *print {
                continue;
            }
            let changed: Vec<String> = now
                .iter()
                .filter(|(p, t)| print.get(*p) != Some(*t))
                .map(|(p, _)| p.strip_prefix(&l.project.dir).unwrap_or(p).display().to_string())
                .chain(print.keys().filter(|p| !now.contains_key(*p)).map(|p| format!("{} (removed)", p.display())))
                .take(3)
                .collect();
            ui.line(format!("{}: changed {}; rebuilding", l.project.name(), changed.join(", ")));
            let contents = contents_of(&now).await;
            if rebuild(&ui, &runtime, l).await
                && l.held().is_some()
                && let Err(e) = super::load_project(&ui, &loader.client, l, loader.examples).await
            {
                ui.line(format!("✗ {}: could not load it: {e:#}", l.project.name()));
            }
            let after = fingerprint_of(&l.project.dir).await;
            *print = tokio::task::spawn_blocking(move || after_build(&now, &contents, after)).await.unwrap_or_default();
        }
    }
}

/// What a source file held when a build started, as a hash.
type Contents = BTreeMap<PathBuf, u64>;

async fn contents_of(print: &Fingerprint) -> Contents {
    let paths: Vec<PathBuf> = print.keys().cloned().collect();
    tokio::task::spawn_blocking(move || {
        paths.into_iter().filter_map(|p| Some((content_hash(&p)?, p))).map(|(h, p)| (p, h)).collect()
    })
    .await
    .unwrap_or_default()
}

fn content_hash(path: &Path) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let bytes = std::fs::read(path).ok()?;
    let mut hasher = std::hash::DefaultHasher::new();
    bytes.hash(&mut hasher);
    Some(hasher.finish())
}

/// The baseline after a build that started from `before` (whose files held
/// `contents`): what the build rewrote with the same content (generated
/// bindings, a `crd.yaml` from types) is not a change, but a save made
/// while it built is — the next look sees it and builds again.
fn after_build(before: &Fingerprint, contents: &Contents, after: Fingerprint) -> Fingerprint {
    // Removed while building: kept, so the removal shows too.
    let removed: Vec<(PathBuf, SystemTime)> =
        before.iter().filter(|(p, _)| !after.contains_key(*p)).map(|(p, t)| (p.clone(), *t)).collect();
    after
        .into_iter()
        .filter_map(|(path, modified)| {
            if before.get(&path) == Some(&modified) {
                return Some((path, modified));
            }
            let same = contents.get(&path).is_some_and(|&h| content_hash(&path) == Some(h));
            match (same, before.get(&path)) {
                (true, _) => Some((path, modified)),
                // Changed while building: keep what the build started from,
                // so the difference shows at the next look.
                (false, Some(&then)) => Some((path, then)),
                // New since the build started: left out, so it shows too.
                (false, None) => None,
            }
        })
        .chain(removed)
        .collect()
}

async fn fingerprint_of(dir: &Path) -> Fingerprint {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut print = Fingerprint::new();
        collect(&dir, &mut print);
        print
    })
    .await
    .unwrap_or_default()
}

fn collect(dir: &Path, print: &mut Fingerprint) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            if !name.starts_with('.') && !IGNORED_DIRS.contains(&name.as_str()) {
                collect(&path, print);
            }
        } else if !name.ends_with(".wasm")
            && !name.ends_with(".pyc")
            && !name.starts_with('.')
            && let Ok(modified) = entry.metadata().and_then(|m| m.modified())
        {
            print.insert(path, modified);
        }
    }
}

/// Build, test, and swap one project, printing what happened; whether the
/// new version passed and was put in place.
async fn rebuild(ui: &Ui, runtime: &Runtime, l: &Loaded) -> bool {
    let name = l.project.name().to_string();
    let staged = l.module_path.with_extension("next.wasm");
    let started = Instant::now();
    let (project, runtime, out) = (l.project.clone(), runtime.clone(), staged.clone());
    let result = tokio::task::spawn_blocking(move || build_and_test(&project, &runtime, &out)).await;
    let secs = started.elapsed().as_secs_f64();
    match result {
        Ok(Ok(Verdict::Passed { passed, digest })) => match std::fs::rename(&staged, &l.module_path) {
            Ok(()) => {
                ui.line(format!("✓ {name}: built and {passed} fixtures passed in {secs:.1}s; swapped in {digest}"));
                return true;
            }
            Err(e) => ui.line(format!("✗ {name}: could not replace {}: {e}", l.module_path.display())),
        },
        Ok(Ok(Verdict::FixturesFailed { failed, output })) => {
            ui.line(format!(
                "✗ {name}: fixtures failed: {}; the running version stays\n{}",
                failed.join(", "),
                output.trim_end()
            ));
        }
        Ok(Err(e)) => ui.line(format!("✗ {name}: build failed ({secs:.1}s): {e:#}; the running version stays")),
        Err(e) => ui.line(format!("✗ {name}: the build panicked: {e}")),
    }
    false
}

/// What a project's fixtures said.
pub(crate) enum Verdict {
    Passed { passed: usize, digest: String },
    FixturesFailed { failed: Vec<String>, output: String },
}

/// The same steps as `operon build` then `operon test --project`: the
/// component is written where `operon build` writes it (`dist/`, under the
/// project's build lock), so `operon test` beside the loop tests what the
/// loop built, and staged at `out` for the swap.
fn build_and_test(project: &Project, runtime: &Runtime, out: &Path) -> anyhow::Result<Verdict> {
    let options = project::BuildOptions { output: None, verbose: false, copy_to: Some(out.to_path_buf()) };
    project::build(project, &options, &mut |_| {})?;
    let module = crate::cli::load(runtime, out, Limits::default())?;
    fixtures(project, &module)
}

/// Run the project's fixtures through `module` (what `operon test` runs).
pub(crate) fn fixtures(project: &Project, module: &crate::runtime::Module) -> anyhow::Result<Verdict> {
    let mut output = Vec::new();
    let report = crate::fixtures::run_dir(module, &project.fixtures(), false, &mut output)?;
    if report.failed.is_empty() {
        Ok(Verdict::Passed { passed: report.passed, digest: module.info().digest.clone() })
    } else {
        // The report without the passing fixtures' lines.
        let output = String::from_utf8_lossy(&output)
            .lines()
            .filter(|l| !l.starts_with("ok "))
            .map(|l| format!("  {l}\n"))
            .collect();
        Ok(Verdict::FixturesFailed { failed: report.failed, output })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_should_see_sources_and_skip_build_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let write = |path: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        };
        for file in ["src/lib.rs", "operon.toml", "fixtures/a.yaml"] {
            write(file);
        }
        // Outputs, dependencies and editor files: a build writing them is not a change.
        for file in ["target/x.rlib", "node_modules/m/i.js", "app/__pycache__/a.pyc", "out.wasm", ".swp", ".git/HEAD"] {
            write(file);
        }
        let mut print = Fingerprint::new();
        collect(dir.path(), &mut print);
        let seen: Vec<String> =
            print.keys().map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string()).collect();
        assert_eq!(seen, ["fixtures/a.yaml", "operon.toml", "src/lib.rs"]);

        // A touched source changes it; a rebuilt output does not.
        write("out.wasm");
        let mut again = Fingerprint::new();
        collect(dir.path(), &mut again);
        assert_eq!(again, print);
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options().write(true).open(dir.path().join("src/lib.rs")).unwrap().set_modified(later).unwrap();
        let mut changed = Fingerprint::new();
        collect(dir.path(), &mut changed);
        assert_ne!(changed, print);
    }

    #[test]
    fn a_save_while_building_should_be_seen_and_a_rewrite_with_the_same_content_should_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let stamp = |name: &str, secs: u64| {
            std::fs::File::options()
                .write(true)
                .open(path(name))
                .unwrap()
                .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs))
                .unwrap();
        };
        for (name, text) in [("main.c", "v1"), ("crd.yaml", "kind: CRD"), ("other.c", "same")] {
            std::fs::write(path(name), text).unwrap();
            stamp(name, 0);
        }
        let mut before = Fingerprint::new();
        collect(dir.path(), &mut before);
        let contents: Contents = before.keys().map(|p| (p.clone(), content_hash(p).unwrap())).collect();

        // While it builds: the build rewrites crd.yaml as it was, the author
        // saves main.c and adds a file.
        std::fs::write(path("crd.yaml"), "kind: CRD").unwrap();
        stamp("crd.yaml", 10);
        std::fs::write(path("main.c"), "v2").unwrap();
        stamp("main.c", 10);
        std::fs::write(path("new.c"), "n").unwrap();
        std::fs::remove_file(path("other.c")).unwrap();
        let mut after = Fingerprint::new();
        collect(dir.path(), &mut after);

        let baseline = after_build(&before, &contents, after.clone());
        assert_eq!(baseline.get(&path("crd.yaml")), after.get(&path("crd.yaml")), "a same-content rewrite is absorbed");
        assert_eq!(baseline.get(&path("other.c")), before.get(&path("other.c")), "a removal while building shows");
        assert_ne!(baseline, after, "the save while building must show at the next look");
        assert_eq!(baseline.get(&path("main.c")), before.get(&path("main.c")), "main.c keeps the build's start");
        assert!(!baseline.contains_key(&path("new.c")), "a file added while building shows as new");
    }
}
