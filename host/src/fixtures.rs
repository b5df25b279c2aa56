//! Offline guest tests (`operon test MODULE DIR`): run request fixtures
//! through a module, with no cluster, and compare each outcome with the
//! expected file beside it (golden tests).
//!
//! A fixture `NAME.yaml` (or `.json`) holds `object`, `children` (a flat
//! list; grouped by kind here, as the host does), `related`, `finalizing`,
//! `attempt`, and `cluster`: objects the guest's `get`/`list` see. The
//! expected file `NAME.expected.yaml` holds the outcome
//! (`desired`, `status`, `events`, `requeueAfterMs`, `finalized`) or
//! `error: {transient|terminal|sandbox: message}`.

use crate::contract::{Gvk, Outcome, Request, Selector};
use crate::runtime::{Module, ObjectReader};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Problems with the fixture files themselves (not test failures).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A fixture is not valid YAML/JSON of the expected shape.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// One request fixture as written by a guest author.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    object: Value,
    #[serde(default)]
    children: Vec<Value>,
    #[serde(default)]
    related: Vec<Value>,
    #[serde(default)]
    finalizing: bool,
    #[serde(default)]
    attempt: u32,
    #[serde(default)]
    cluster: Vec<Value>,
}

/// What a reconcile produced, in the form expected files are written in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Observed {
    Error { error: ErrorKind },
    Outcome(Outcome),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
enum ErrorKind {
    Transient(String),
    Terminal(String),
    /// The sandbox stopped the guest (trap, timeout, memory, malformed).
    Sandbox(String),
}

/// The result of running a directory of fixtures.
#[derive(Debug, Default)]
pub struct Report {
    /// Fixtures whose outcome matched.
    pub passed: usize,
    /// Fixture names that did not match, or could not run.
    pub failed: Vec<String>,
}

/// Run every fixture in `dir` through `module`, writing a line per fixture
/// (and a diff per mismatch) to `out`, then `N passed, M failed`.
/// With `update`, expected files are (re)written instead of compared.
pub fn run_dir(module: &Module, dir: &Path, update: bool, out: &mut dyn Write) -> Result<Report, Error> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_request_file(p))
        .collect();
    fixtures.sort();
    if fixtures.is_empty() {
        return Err(Error::Invalid {
            path: dir.to_path_buf(),
            reason: "no fixtures (*.yaml, *.yml or *.json other than *.expected.*)".into(),
        });
    }
    let mut report = Report::default();
    for path in fixtures {
        let name = stem(&path);
        let result = run_one(module, &path, update);
        let _ = match result {
            Ok(None) => {
                report.passed += 1;
                writeln!(out, "ok      {name}")
            }
            Ok(Some(diff)) => {
                report.failed.push(name.clone());
                writeln!(out, "FAILED  {name}\n{diff}")
            }
            Err(e) => {
                report.failed.push(name.clone());
                writeln!(out, "FAILED  {name}: {e}")
            }
        };
    }
    let _ = writeln!(out, "{} passed, {} failed", report.passed, report.failed.len());
    Ok(report)
}

fn is_request_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let ext_ok = [".yaml", ".yml", ".json"].iter().any(|e| name.ends_with(e));
    ext_ok && !name.contains(".expected.") && p.is_file()
}

fn stem(p: &Path) -> String {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.rsplit_once('.').map_or(name, |(s, _)| s).to_string()
}

/// Where the expected file of a fixture is (an existing one, else the
/// `.expected.yaml` to write).
fn expected_path(fixture: &Path) -> PathBuf {
    let dir = fixture.parent().unwrap_or(Path::new("."));
    let name = stem(fixture);
    ["yaml", "yml", "json"]
        .iter()
        .map(|ext| dir.join(format!("{name}.expected.{ext}")))
        .find(|p| p.exists())
        .unwrap_or_else(|| dir.join(format!("{name}.expected.yaml")))
}

/// `Ok(None)` when the outcome matches, `Ok(Some(diff))` when not.
fn run_one(module: &Module, path: &Path, update: bool) -> Result<Option<String>, Error> {
    let invalid = |reason: String| Error::Invalid { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.into(), source })?;
    let fixture: Fixture = serde_yaml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let (request, reader) = build_request(module, fixture).map_err(invalid)?;
    let observed = match module.reconcile(&request, Arc::new(reader)) {
        Ok(Ok(outcome)) => Observed::Outcome(outcome),
        Ok(Err(crate::runtime::Failure::Transient(m))) => Observed::Error { error: ErrorKind::Transient(m) },
        Ok(Err(crate::runtime::Failure::Terminal(m))) => Observed::Error { error: ErrorKind::Terminal(m) },
        Err(e) => Observed::Error { error: ErrorKind::Sandbox(e.to_string()) },
    };
    let actual = to_yaml(&observed);
    let expected_file = expected_path(path);
    if update {
        std::fs::write(&expected_file, &actual).map_err(|source| Error::Io { path: expected_file, source })?;
        return Ok(None);
    }
    let expected_text = match std::fs::read_to_string(&expected_file) {
        Ok(t) => t,
        Err(_) => {
            return Ok(Some(format!(
                "  no expected file {}; write it with `operon test --update`, then review it\n  got:\n{}",
                expected_file.display(),
                indent(&actual)
            )));
        }
    };
    let expected: Observed = serde_yaml::from_str(&expected_text).map_err(|e| Error::Invalid {
        path: expected_file.clone(),
        reason: format!("not an outcome or `error:` ({e})"),
    })?;
    if expected == observed {
        return Ok(None);
    }
    Ok(Some(diff(&to_yaml(&expected), &actual)))
}

/// Group children by the module's owned kinds, as the host does, and build
/// a reader over everything the fixture shows.
fn build_request(module: &Module, f: Fixture) -> Result<(Request, FixtureReader), String> {
    let manifest = module.manifest();
    let parent_ns = f.object.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_string);
    let mut groups: Vec<(Gvk, Vec<String>)> = manifest.owns.iter().map(|k| (k.clone(), Vec::new())).collect();
    let mut children = f.children.clone();
    children.sort_by_key(|c| {
        let md = |k: &str| c.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or_default().to_string();
        (md("namespace"), md("name"))
    });
    for (i, child) in children.iter().enumerate() {
        let kind = Gvk::of(child).ok_or_else(|| format!("children[{i}] lacks apiVersion or kind"))?;
        let group = groups
            .iter_mut()
            .find(|(k, _)| *k == kind)
            .ok_or_else(|| format!("children[{i}] is a {kind}, which the module does not own"))?;
        group.1.push(child.to_string());
    }
    let request = Request {
        object: f.object.to_string(),
        children: groups,
        related: f.related.iter().map(Value::to_string).collect(),
        finalizing: f.finalizing,
        attempt: f.attempt,
    };
    let mut visible = vec![f.object];
    visible.extend(f.children);
    visible.extend(f.related);
    visible.extend(f.cluster);
    Ok((request, FixtureReader { objects: visible, namespace: parent_ns }))
}

/// The cluster as a fixture shows it.
struct FixtureReader {
    objects: Vec<Value>,
    namespace: Option<String>,
}

impl FixtureReader {
    fn in_scope<'a>(&'a self, kind: &'a Gvk, namespace: Option<&'a str>) -> impl Iterator<Item = &'a Value> + 'a {
        let ns = namespace.map(str::to_string).or_else(|| self.namespace.clone());
        self.objects.iter().filter(move |o| {
            let o_ns = o.pointer("/metadata/namespace").and_then(Value::as_str);
            Gvk::of(o).as_ref() == Some(kind) && (o_ns.is_none() || o_ns == ns.as_deref())
        })
    }
}

impl ObjectReader for FixtureReader {
    fn get(&self, kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<String>, String> {
        Ok(self
            .in_scope(kind, namespace)
            .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
            .map(Value::to_string))
    }

    fn list(&self, kind: &Gvk, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<String>, String> {
        let selector = Selector::parse(selector.unwrap_or_default()).map_err(|e| e.to_string())?;
        Ok(self.in_scope(kind, namespace).filter(|o| selector.matches_object(o)).map(Value::to_string).collect())
    }
}

fn to_yaml(observed: &Observed) -> String {
    serde_yaml::to_string(observed).unwrap_or_else(|e| format!("<unprintable: {e}>"))
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// A unified diff, expected → actual.
fn diff(expected: &str, actual: &str) -> String {
    similar::TextDiff::from_lines(expected, actual)
        .unified_diff()
        .context_radius(3)
        .header("expected", "actual")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observed_reads_outcomes_and_errors() {
        let o: Observed = serde_yaml::from_str("desired: []\nfinalized: true\n").unwrap();
        assert!(matches!(o, Observed::Outcome(Outcome { finalized: true, .. })));
        let e: Observed = serde_yaml::from_str("error:\n  terminal: bad spec\n").unwrap();
        assert_eq!(e, Observed::Error { error: ErrorKind::Terminal("bad spec".into()) });
        assert!(serde_yaml::from_str::<Observed>("desird: []\n").is_err(), "typos must not pass as an empty outcome");
    }

    #[test]
    fn request_files_exclude_expected_ones() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["a.yaml", "a.expected.yaml", "b.json", "notes.txt"] {
            std::fs::write(dir.path().join(f), "{}").unwrap();
        }
        let mut found: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| is_request_file(p))
            .map(|p| stem(&p))
            .collect();
        found.sort();
        assert_eq!(found, ["a", "b"]);
    }

    #[test]
    fn fixture_reader_scopes_by_kind_namespace_and_labels() {
        let cm = |ns: &str, name: &str, app: &str| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": ns, "name": name, "labels": {"app": app}}})
        };
        let reader = FixtureReader {
            objects: vec![cm("a", "one", "web"), cm("a", "two", "db"), cm("b", "three", "web")],
            namespace: Some("a".into()),
        };
        let kind = Gvk::new("", "v1", "ConfigMap");
        assert_eq!(reader.list(&kind, None, None).unwrap().len(), 2);
        assert_eq!(reader.list(&kind, None, Some("app=web")).unwrap().len(), 1);
        assert_eq!(reader.list(&kind, Some("b"), None).unwrap().len(), 1);
        assert!(reader.get(&kind, None, "three").unwrap().is_none());
        assert!(reader.get(&Gvk::new("", "v1", "Secret"), None, "one").unwrap().is_none());
    }
}
