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
//! # Admission fixtures
//!
//! A subdirectory `admission/` holds admission reviews, with the same
//! naming. The review goes through `mutate`, then (unless refused) through
//! `validate` with the mutated object, as the API server calls the webhooks;
//! the expected file is the combined answer:
//!
//! ```yaml
//! # admission/NAME.yaml
//! review:
//!   operation: CREATE           # CREATE (default), UPDATE, DELETE or CONNECT
//!   object: {...}               # the object as it would be stored (none for DELETE)
//!   oldObject: {...}            # for UPDATE and DELETE
//!   # optional, defaulted from the object (or oldObject):
//!   # kind: {group, version, kind}, namespace, name, subResource,
//!   # uid, userInfo: {username, uid, groups}, dryRun: false
//! cluster: []                   # objects that get/list see (optional)
//! ```
//!
//! ```yaml
//! # admission/NAME.expected.yaml
//! allowed: false
//! message: "spec.replicas must be between 0 and 50, not 51"   # when refused
//! code: 422                     # only when the guest gave one (none means 403)
//! warnings: []                  # default []
//! patched: {...}                # the object mutate returned; default null (unchanged)
//! ```
//!
//! `operon test` reads the same files; there, a guest the sandbox stopped
//! shows as `error: "validate trapped: ..."`.
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
use crate::{Denial, Gvk, Reconciler, raw};

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
    let admission_dir = dir.join("admission");
    let reviews = if admission_dir.is_dir() {
        load_admission_dir(&admission_dir).unwrap_or_else(|error| panic!("{error}"))
    } else {
        Vec::new()
    };
    assert!(!fixtures.is_empty() || !reviews.is_empty(), "no fixtures in {}", dir.display());
    let bless = std::env::var_os("OPERON_BLESS").is_some_and(|value| value == "1");
    let mut report = String::new();
    for fixture in &reviews {
        let actual = fixture.run::<R>();
        if bless {
            std::fs::write(&fixture.expected_path, to_yaml(&admission_to_write(&actual)))
                .unwrap_or_else(|error| panic!("{}: {error}", fixture.expected_path.display()));
            continue;
        }
        match read_admission_expected(&fixture.expected_path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => {
                let _ = write!(
                    report,
                    "\n--- admission/{}: expected\n{}--- actual\n{}",
                    fixture.name,
                    to_yaml(&expected),
                    to_yaml(&actual)
                );
            }
            Err(error) => {
                let _ = write!(report, "\n--- admission/{}: {error}\n--- actual\n{}", fixture.name, to_yaml(&actual));
            }
        }
    }
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

/// An admission fixture file, `admission/NAME.yaml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdmissionFile {
    review: ReviewFile,
    #[serde(default)]
    cluster: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReviewFile {
    #[serde(default)]
    operation: Option<String>,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    old_object: Option<Value>,
    #[serde(default)]
    kind: Option<GvkFile>,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    user_info: Option<UserInfoFile>,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GvkFile {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct UserInfoFile {
    username: String,
    uid: String,
    groups: Vec<String>,
}

/// One case of an `admission/` directory.
#[derive(Debug)]
pub struct AdmissionFixture {
    /// `NAME`.
    pub name: String,
    /// `NAME.expected.yaml`.
    pub expected_path: PathBuf,
    /// The WIT review, with what the file leaves out filled in.
    pub review: raw::Review,
    /// The objects `get` and `list` see.
    pub cluster: FakeCluster,
}

impl AdmissionFixture {
    /// Reads `admission/NAME.yaml`.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or is not a review (unknown keys, an
    /// unknown operation, no object to take the kind from).
    pub fn load(path: &Path) -> Result<AdmissionFixture, String> {
        let file_name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        let name = file_name.rsplit_once('.').map_or(file_name, |(stem, _)| stem);
        let fail = |error: String| format!("{}: {error}", path.display());
        let text = std::fs::read_to_string(path).map_err(|error| fail(error.to_string()))?;
        let file: AdmissionFile = serde_yaml::from_str(&text).map_err(|error| fail(error.to_string()))?;
        let review = review_from_file(file.review).map_err(fail)?;
        let mut cluster = FakeCluster::new();
        for object in file.cluster {
            cluster.objects.push(object);
        }
        let expected_path = ["yaml", "yml", "json"]
            .iter()
            .map(|extension| path.with_file_name(format!("{name}.expected.{extension}")))
            .find(|path| path.exists())
            .unwrap_or_else(|| path.with_file_name(format!("{name}.expected.yaml")));
        Ok(AdmissionFixture { name: name.to_owned(), expected_path, review, cluster })
    }

    /// Runs `R::mutate`, then `R::validate` on the mutated object (unless
    /// refused), through the same path as the component; the answer in the
    /// shape of an expected file.
    pub fn run<R: Reconciler>(&self) -> Value {
        let host = self.cluster.scoped(self.review.namespace.as_deref());
        let patched = match crate::run::mutate::<R>(&host, self.review.clone()) {
            Ok(patched) => patched,
            Err(denial) => return admission_answer(Err(denial.into()), None),
        };
        let mut review = self.review.clone();
        if let Some(object) = &patched {
            review.object = Some(object.clone());
        }
        let patched = patched.map(|json| serde_json::from_str(&json).unwrap_or(Value::String(json)));
        admission_answer(crate::run::validate::<R>(&host, review).map_err(Denial::from), patched)
    }
}

/// The review a fixture describes, defaults filled in as `operon test` does.
fn review_from_file(file: ReviewFile) -> Result<raw::Review, String> {
    let operation = match file.operation.as_deref().unwrap_or("CREATE").to_ascii_uppercase().as_str() {
        "CREATE" => raw::Operation::Create,
        "UPDATE" => raw::Operation::Update,
        "DELETE" => raw::Operation::Delete,
        "CONNECT" => raw::Operation::Connect,
        other => return Err(format!("unknown operation {other:?} (CREATE, UPDATE, DELETE or CONNECT)")),
    };
    let shown = file.object.as_ref().or(file.old_object.as_ref());
    let text = |value: Option<&Value>, key: &str| {
        value.and_then(|v| v.pointer(key)).and_then(Value::as_str).map(str::to_owned)
    };
    let kind = match file.kind {
        Some(kind) => Gvk::new(kind.group, kind.version, kind.kind),
        None => {
            let api_version = text(shown, "/apiVersion").unwrap_or_default();
            let kind = text(shown, "/kind").ok_or("review.kind is missing and the object has no kind")?;
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version.as_str()));
            Gvk::new(group, version, kind)
        }
    };
    let user = file.user_info.unwrap_or_else(|| UserInfoFile {
        username: "fixture".into(),
        uid: String::new(),
        groups: vec!["system:authenticated".into()],
    });
    Ok(raw::Review {
        uid: file.uid.unwrap_or_else(|| "00000000-0000-0000-0000-000000000000".into()),
        operation,
        kind,
        sub_resource: file.sub_resource,
        namespace: file.namespace.or_else(|| text(shown, "/metadata/namespace")),
        name: file.name.or_else(|| text(shown, "/metadata/name")).unwrap_or_default(),
        object: file.object.as_ref().map(Value::to_string),
        old_object: file.old_object.as_ref().map(Value::to_string),
        user_info: raw::UserInfo { username: user.username, uid: user.uid, groups: user.groups },
        dry_run: file.dry_run,
    })
}

/// Every admission fixture in `dir`, sorted by name.
///
/// # Errors
///
/// When the directory cannot be read or a review file is invalid.
pub fn load_admission_dir(dir: &Path) -> Result<Vec<AdmissionFixture>, String> {
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
    paths.iter().map(|path| AdmissionFixture::load(path)).collect()
}

/// The combined answer of an admission fixture, every key present
/// (`warnings` and `patched` included) for comparison.
fn admission_answer(result: Result<Vec<String>, Denial>, patched: Option<Value>) -> Value {
    match result {
        Ok(warnings) => json!({"allowed": true, "warnings": warnings, "patched": patched}),
        Err(denial) => {
            let mut answer = json!({"allowed": false, "message": denial.message(), "warnings": [], "patched": patched});
            if let Some(code) = raw::Denial::from(denial).code {
                answer["code"] = json!(code);
            }
            answer
        }
    }
}

/// The answer as written to an expected file: `warnings` and `patched` only
/// when they say something.
fn admission_to_write(answer: &Value) -> Value {
    let mut written = answer.clone();
    if let Value::Object(map) = &mut written {
        if map.get("warnings").is_some_and(|w| w.as_array().is_some_and(Vec::is_empty)) {
            map.remove("warnings");
        }
        if map.get("patched").is_some_and(Value::is_null) {
            map.remove("patched");
        }
    }
    written
}

/// Reads an admission expected file with `warnings: []` and `patched: null`
/// filled in when left out.
///
/// # Errors
///
/// When the file cannot be read or parsed.
pub fn read_admission_expected(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let mut value: Value = serde_yaml::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
    if let Value::Object(map) = &mut value
        && !map.contains_key("error")
    {
        map.entry("warnings").or_insert(json!([]));
        map.entry("patched").or_insert(Value::Null);
    }
    Ok(value)
}

/// YAML text of a value, keys in a reading order: an outcome's keys as in
/// the WIT record, then objects with `apiVersion`, `kind`, `metadata`, `spec`
/// first and the rest alphabetically.
pub fn to_yaml(value: &Value) -> String {
    const OUTCOME: &[&str] = &[
        "error",
        "desired",
        "status",
        "events",
        "requeueAfterMs",
        "finalized",
        "allowed",
        "message",
        "code",
        "warnings",
        "patched",
    ];
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
