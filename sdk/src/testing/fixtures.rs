//! The request/expected fixtures of `operon test`, run natively from
//! `cargo test`.
//!
//! A fixture directory holds, per case, `NAME.yaml` (the request) and
//! `NAME.expected.yaml` (the outcome); `.yml` and `.json` work too. `get` and
//! `list` see the parent, the children, the related objects and `cluster`:
//!
//! ```yaml
//! # NAME.yaml
//! object: {apiVersion: ..., kind: ..., metadata: {...}, spec: {...}}  # the parent
//! children: []      # existing owned objects, any order; grouped by kind in manifest order
//! related: []       # objects of watched kinds
//! finalizing: false # default false
//! attempt: 0        # default 0
//! cluster: []       # objects that get/list see (optional)
//! ```
//!
//! ```yaml
//! # NAME.expected.yaml: an outcome ...
//! desired: [...]           # in the order the reconciler returns them
//! status: {...}            # or null: leave the status untouched
//! events: [{warning: false, reason: Created, message: ...}]
//! requeueAfterMs: 30000    # or null
//! finalized: false
//! # ... or a failure
//! error: {terminal: "message"}   # or {transient: "message"}
//! ```
//!
//! Objects are compared as JSON values (key order and YAML style do not
//! matter; list order does).
//!
//! ```no_run
//! # use operon_sdk::{Context, Failure, Gvk, Manifest, Outcome, Reconciler, Request};
//! # struct MyReconciler;
//! # impl Reconciler for MyReconciler {
//! #     type Object = serde_json::Value;
//! #     fn manifest() -> Manifest { Manifest::new("x", Gvk::new("", "v1", "ConfigMap")) }
//! #     fn reconcile(_: Request<serde_json::Value>, _: &Context) -> Result<Outcome, Failure> { Ok(Outcome::new()) }
//! # }
//! #[test]
//! fn fixtures() {
//!     operon_sdk::testing::fixtures::check_dir::<MyReconciler>(
//!         concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures"),
//!     );
//! }
//! ```
//!
//! Run with `OPERON_BLESS=1` to write the expected files from the current
//! outcomes instead of comparing; review every changed file before keeping it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{FakeCluster, RequestBuilder};
use crate::{Reconciler, raw};

/// The request file, `NAME.yaml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestFile {
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

/// One case of a fixture directory.
#[derive(Debug)]
pub struct Fixture {
    /// `NAME`.
    pub name: String,
    /// `NAME.yaml`.
    pub request_path: PathBuf,
    /// `NAME.expected.yaml`.
    pub expected_path: PathBuf,
    /// The WIT request, children grouped as the host groups them.
    pub request: raw::Request,
    /// The objects `get` and `list` see.
    pub cluster: FakeCluster,
}

impl Fixture {
    /// Reads `NAME.yaml` for the reconciler described by `manifest`.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or is not a request (unknown keys, a
    /// child of a kind the manifest does not own).
    pub fn load(request_path: &Path, manifest: &raw::Manifest) -> Result<Fixture, String> {
        let file_name = request_path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        let name = file_name.rsplit_once('.').map_or(file_name, |(stem, _)| stem);
        let text =
            std::fs::read_to_string(request_path).map_err(|error| format!("{}: {error}", request_path.display()))?;
        let file: RequestFile =
            serde_yaml::from_str(&text).map_err(|error| format!("{}: {error}", request_path.display()))?;
        // As in `operon test`: reads see the parent, the children, the related
        // objects and the `cluster` list.
        let mut cluster = FakeCluster::new();
        for object in [&file.object].into_iter().chain(&file.children).chain(&file.related).chain(&file.cluster) {
            let valid = object.get("apiVersion").is_some_and(Value::is_string)
                && object.get("kind").is_some_and(Value::is_string);
            if !valid {
                return Err(format!("{}: an object has no apiVersion or kind", request_path.display()));
            }
            cluster.objects.push(object.clone());
        }
        let builder = RequestBuilder {
            object: file.object,
            children: file.children,
            related: file.related,
            finalizing: file.finalizing,
            attempt: file.attempt,
        };
        let request = builder.try_build(manifest).map_err(|error| format!("{}: {error}", request_path.display()))?;
        let expected_path = ["yaml", "yml", "json"]
            .iter()
            .map(|extension| request_path.with_file_name(format!("{name}.expected.{extension}")))
            .find(|path| path.exists())
            .unwrap_or_else(|| request_path.with_file_name(format!("{name}.expected.yaml")));
        Ok(Fixture { name: name.to_owned(), request_path: request_path.to_owned(), expected_path, request, cluster })
    }

    /// Runs `R` on the request, through the same path as the component.
    pub fn run<R: Reconciler>(&self) -> Result<raw::Outcome, raw::Failure> {
        let namespace = serde_json::from_str::<Value>(&self.request.object)
            .ok()
            .and_then(|object| object["metadata"]["namespace"].as_str().map(str::to_owned));
        let host = self.cluster.scoped(namespace.as_deref());
        crate::run::reconcile::<R>(&host, self.request.clone())
    }
}

/// Every fixture in `dir` (files `*.yaml`, `*.yml` or `*.json` that are not
/// `*.expected.*`),
/// sorted by name.
///
/// # Errors
///
/// When the directory cannot be read or a request file is invalid.
pub fn load_dir(dir: &Path, manifest: &raw::Manifest) -> Result<Vec<Fixture>, String> {
    let entries = std::fs::read_dir(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
            [".yaml", ".yml", ".json"].iter().any(|extension| name.ends_with(extension))
                && !name.contains(".expected.")
                && path.is_file()
        })
        .collect();
    paths.sort();
    paths.iter().map(|path| Fixture::load(path, manifest)).collect()
}

/// The result of a reconcile in the shape of an expected file.
pub fn to_expected(result: &Result<raw::Outcome, raw::Failure>) -> Value {
    match result {
        Ok(outcome) => {
            let parse =
                |json: &str| serde_json::from_str::<Value>(json).unwrap_or_else(|_| Value::String(json.to_owned()));
            json!({
                "desired": outcome.desired.iter().map(|json| parse(json)).collect::<Vec<_>>(),
                "status": outcome.status.as_deref().map(parse),
                "events": outcome.events.iter().map(|event| json!({
                    "warning": event.warning,
                    "reason": event.reason,
                    "message": event.message,
                })).collect::<Vec<_>>(),
                "requeueAfterMs": outcome.requeue_after_ms,
                "finalized": outcome.finalized,
            })
        }
        Err(raw::Failure::Transient(message)) => json!({"error": {"transient": message}}),
        Err(raw::Failure::Terminal(message)) => json!({"error": {"terminal": message}}),
    }
}

/// Reads an expected file as a JSON value, with the outcome keys' defaults
/// filled in (`status: null`, `events: []`, `requeueAfterMs: null`,
/// `finalized: false`) so a file may leave them out.
///
/// # Errors
///
/// When the file cannot be read or parsed.
pub fn read_expected(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let mut value: Value = serde_yaml::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
    if let Value::Object(map) = &mut value
        && !map.contains_key("error")
    {
        let defaults: [(&str, Value); 5] = [
            ("desired", json!([])),
            ("status", Value::Null),
            ("events", json!([])),
            ("requeueAfterMs", Value::Null),
            ("finalized", json!(false)),
        ];
        for (key, default) in defaults {
            map.entry(key).or_insert(default);
        }
    }
    Ok(value)
}

/// Runs every fixture in `dir` through `R` and panics with every mismatch.
/// With the environment variable `OPERON_BLESS=1`, writes the expected files
/// instead.
///
/// # Panics
///
/// When a fixture cannot be loaded, or an outcome differs from its expected
/// file (the message shows both as YAML).
pub fn check_dir<R: Reconciler>(dir: impl AsRef<Path>) {
    let dir = dir.as_ref();
    let manifest = crate::run::manifest::<R>();
    let fixtures = load_dir(dir, &manifest).unwrap_or_else(|error| panic!("{error}"));
    assert!(!fixtures.is_empty(), "no fixtures in {}", dir.display());
    let bless = std::env::var_os("OPERON_BLESS").is_some_and(|value| value == "1");
    let mut report = String::new();
    for fixture in &fixtures {
        let actual = to_expected(&fixture.run::<R>());
        if bless {
            let text = to_yaml(&actual);
            std::fs::write(&fixture.expected_path, text)
                .unwrap_or_else(|error| panic!("{}: {error}", fixture.expected_path.display()));
            continue;
        }
        match read_expected(&fixture.expected_path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => {
                let _ = write!(
                    report,
                    "\n--- {}: expected\n{}--- actual\n{}",
                    fixture.name,
                    to_yaml(&expected),
                    to_yaml(&actual)
                );
            }
            Err(error) => {
                let _ = write!(report, "\n--- {}: {error}\n--- actual\n{}", fixture.name, to_yaml(&actual));
            }
        }
    }
    assert!(report.is_empty(), "fixtures in {} differ (OPERON_BLESS=1 rewrites them):{report}", dir.display());
}

/// YAML text of a value, keys in a reading order: an outcome's keys as in
/// the WIT record, then objects with `apiVersion`, `kind`, `metadata`, `spec`
/// first and the rest alphabetically.
pub fn to_yaml(value: &Value) -> String {
    const OUTCOME: &[&str] = &["error", "desired", "status", "events", "requeueAfterMs", "finalized"];
    serde_yaml::to_string(&ordered(value, OUTCOME)).unwrap_or_else(|error| format!("<not YAML: {error}>\n"))
}

/// Reorders object keys: `first` in that order, then the rest alphabetically
/// (serde_yaml keeps the order of its mapping).
fn ordered(value: &Value, first: &[&str]) -> serde_yaml::Value {
    const OBJECT: &[&str] = &["apiVersion", "kind", "name", "metadata", "spec"];
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            let rank = |key: &str| first.iter().position(|f| *f == key).unwrap_or(first.len());
            keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
            let mut out = serde_yaml::Mapping::new();
            for key in keys {
                out.insert(serde_yaml::Value::String(key.clone()), ordered(&map[key.as_str()], OBJECT));
            }
            serde_yaml::Value::Mapping(out)
        }
        Value::Array(items) => serde_yaml::Value::Sequence(items.iter().map(|item| ordered(item, OBJECT)).collect()),
        other => serde_yaml::to_value(other).unwrap_or(serde_yaml::Value::Null),
    }
}
