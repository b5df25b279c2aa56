//! The fixture format of `operon test` and of the Rust SDK's
//! `testing::fixtures`: one implementation of the files, for both runners.
//!
//! A fixture directory holds, per case, a request file `NAME.yaml` and its
//! expected file `NAME.expected.yaml` (`.yml` and `.json` work too); a
//! subdirectory [`ADMISSION_DIR`] holds admission reviews named the same
//! way, and [`CONVERSION_DIR`] conversion cases. Every other subdirectory
//! (`recorded/`, say) holds more request fixtures, named by their path
//! (`recorded/live-create`): a fixture is never skipped for where it is.
//!
//! ```yaml
//! # NAME.yaml
//! object: {apiVersion: ..., kind: ..., metadata: {...}, spec: {...}}  # the parent
//! children: []      # existing owned objects, any order; grouped by kind in manifest order
//! related: []       # objects of watched kinds
//! finalizing: false # default false
//! attempt: 0        # default 0
//! cluster: []       # objects that get/list see (optional)
//! egress:           # outbound HTTP calls and their answers (optional; contract 0.2)
//! - request: {method: GET, url: https://dns.example/api/zones/a., credential: pdns}
//!   response: {status: 200, headers: {content-type: application/json}, body: '{...}'}
//! - request: {method: DELETE, url: https://dns.example/api/zones/b.}
//!   error: {timeout: "no answer in 10s"}   # denied, invalid, unreachable, tooLarge, budget
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
//! error: {terminal: "message"}   # or {transient: ...}, or {sandbox: ...} (operon test only)
//! ```
//!
//! ```yaml
//! # admission/NAME.yaml
//! review:
//!   operation: CREATE       # CREATE (default), UPDATE, DELETE or CONNECT
//!   object: {...}           # the object as it would be stored; none for DELETE
//!   oldObject: {...}        # the stored object, for UPDATE and DELETE
//!   # Optional; defaults in brackets:
//!   # kind: {group, version, kind}   [the object's (or oldObject's) apiVersion and kind]
//!   # namespace, name                [the object's (or oldObject's) metadata]
//!   # subResource                    [none]
//!   # uid                            [00000000-0000-0000-0000-000000000000]
//!   # userInfo: {username, uid, groups}  [fixture, "", [system:authenticated]]
//!   # dryRun                         [false]
//! cluster: []               # objects the guest's get/list see (optional)
//! ```
//!
//! ```yaml
//! # admission/NAME.expected.yaml
//! allowed: false
//! message: "spec.replicas must be between 0 and 50, not 51"  # only when refused
//! code: 422                 # only when the guest gave a code (none means 403)
//! warnings: []              # [] when left out
//! patched: {...}            # the whole object mutate returned; null (unchanged) when left out
//! # or, when the sandbox stopped the guest (operon test only):
//! error: "validate trapped: ..."
//! ```
//!
//! Outcomes and answers are compared as JSON values (key order and YAML
//! style do not matter; list order does); a mismatch is shown as a unified
//! diff of both in YAML ([`check`]).
//!
//! YAML is read as YAML 1.2: only `true` and `false` are booleans (`on`,
//! `yes`, `y` stay strings, as Kubernetes reads them in JSON).

use crate::{Denial, Gvk, Operation, Outcome, Request, Review, UserInfo};
use serde::de::DeserializeOwned;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The subdirectory of admission fixtures.
pub const ADMISSION_DIR: &str = "admission";
/// The subdirectory of conversion cases (contract 0.2's `convert`): each
/// `NAME.yaml` holds `desiredAPIVersion` and `objects`, and its expected
/// file `converted` (the objects) or `error` (the refusal or the sandbox's
/// verdict).
pub const CONVERSION_DIR: &str = "conversion";

/// The extensions of fixture files, in the order an expected file is looked for.
pub const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

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

impl Error {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io { path: path.to_path_buf(), source }
    }

    fn invalid(path: &Path, reason: impl Into<String>) -> Error {
        Error::Invalid { path: path.to_path_buf(), reason: reason.into() }
    }
}

// ---------------------------------------------------------------------------
// Discovery

/// One case of a fixture directory: a request (or review) file and where its
/// expected file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// `NAME`: the file name without its extension.
    pub name: String,
    /// `NAME.yaml` (or `.yml`, `.json`).
    pub path: PathBuf,
    /// The existing `NAME.expected.{yaml,yml,json}`, else the
    /// `NAME.expected.yaml` to write.
    pub expected: PathBuf,
}

impl Case {
    /// The case of a request or review file.
    pub fn of(path: &Path) -> Case {
        Case { name: case_name(path), path: path.to_path_buf(), expected: expected_path(path) }
    }
}

/// The cases of a fixture directory: request fixtures, then admission ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cases {
    /// `DIR/NAME.yaml`, sorted by file name.
    pub requests: Vec<Case>,
    /// `DIR/admission/NAME.yaml`, sorted by file name; none without the subdirectory.
    pub reviews: Vec<Case>,
    /// `DIR/conversion/NAME.yaml`, sorted by file name; none without the subdirectory.
    pub conversions: Vec<Case>,
}

/// Whether `path` is a request (or review) file: a file `*.yaml`, `*.yml` or
/// `*.json` that is not `*.expected.*`.
pub fn is_case_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let ext_ok = EXTENSIONS.iter().any(|e| name.strip_suffix(e).is_some_and(|s| s.ends_with('.')));
    ext_ok && !name.contains(".expected.") && path.is_file()
}

/// `NAME` of `NAME.yaml`.
pub fn case_name(path: &Path) -> String {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.rsplit_once('.').map_or(name, |(s, _)| s).to_string()
}

/// Where the expected file of a case is: an existing
/// `NAME.expected.{yaml,yml,json}`, else the `NAME.expected.yaml` to write.
pub fn expected_path(path: &Path) -> PathBuf {
    let name = case_name(path);
    EXTENSIONS
        .iter()
        .map(|ext| path.with_file_name(format!("{name}.expected.{ext}")))
        .find(|p| p.exists())
        .unwrap_or_else(|| path.with_file_name(format!("{name}.expected.yaml")))
}

/// The cases directly in `dir`, sorted by file name.
///
/// # Errors
///
/// When the directory cannot be read.
pub fn cases_in(dir: &Path) -> Result<Vec<Case>, Error> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(Error::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_case_file(p))
        .collect();
    paths.sort();
    Ok(paths.iter().map(|p| Case::of(p)).collect())
}

/// The cases in `dir` and, after them, in each of its subdirectories
/// (depth first, sorted by name; hidden ones and those named in `skip`
/// left out), each named by its path below `dir` (`recorded/live-create`).
///
/// # Errors
///
/// When a directory cannot be read.
pub fn cases_under(dir: &Path, skip: &[&str]) -> Result<Vec<Case>, Error> {
    let mut cases = cases_in(dir)?;
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(Error::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| !n.starts_with('.') && !skip.contains(&n)))
        .collect();
    subdirs.sort();
    for sub in subdirs {
        let prefix = sub.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for mut case in cases_under(&sub, &[])? {
            case.name = format!("{prefix}/{}", case.name);
            cases.push(case);
        }
    }
    Ok(cases)
}

/// Every case of a fixture directory: requests in `dir` and in every
/// subdirectory but `admission/` and `conversion/`, whose reviews and
/// conversion cases come apart ([`cases_under`]).
///
/// # Errors
///
/// When a directory cannot be read, or there is no case at all.
pub fn discover(dir: &Path) -> Result<Cases, Error> {
    let requests = cases_under(dir, &[ADMISSION_DIR, CONVERSION_DIR])?;
    let admission = dir.join(ADMISSION_DIR);
    let reviews = if admission.is_dir() { cases_under(&admission, &[])? } else { Vec::new() };
    let conversion = dir.join(CONVERSION_DIR);
    let conversions = if conversion.is_dir() { cases_under(&conversion, &[])? } else { Vec::new() };
    if requests.is_empty() && reviews.is_empty() && conversions.is_empty() {
        return Err(Error::invalid(dir, "no fixtures (*.yaml, *.yml or *.json other than *.expected.*)"));
    }
    Ok(Cases { requests, reviews, conversions })
}

// ---------------------------------------------------------------------------
// Parsing

/// Parses fixture text: JSON when `json`, else YAML 1.2 (strict booleans).
///
/// # Errors
///
/// The parser's message.
pub fn parse<T: DeserializeOwned>(text: &str, json: bool) -> Result<T, String> {
    if json {
        return serde_json::from_str(text).map_err(|e| e.to_string());
    }
    serde_saphyr::from_str_with_options(text, serde_saphyr::options! { strict_booleans: true })
        .map_err(|e| e.to_string())
}

/// Reads and parses a fixture file (JSON for `*.json`, else YAML).
///
/// # Errors
///
/// When the file cannot be read or parsed into `T`.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let json = path.extension().is_some_and(|e| e == "json");
    parse(&text, json).map_err(|reason| Error::invalid(path, reason))
}

/// A request fixture, `NAME.yaml`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RequestFile {
    /// The parent.
    pub object: Value,
    /// Existing owned objects, in any order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Value>,
    /// Objects of watched kinds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<Value>,
    /// The parent is being deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finalizing: bool,
    /// Failures in a row before this call.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
    /// Other objects that `get` and `list` see.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster: Vec<Value>,
    /// The host's clock for this call (RFC 3339, contract 0.2's
    /// `request.now`). Absent: the Unix epoch, so a fixture never depends
    /// on when it runs; set it when the guest reads the time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
    /// The guest's outbound HTTP calls and their answers (contract 0.2's
    /// `egress`), as `operon run --record` writes them: replayed with no
    /// network, and a call not held here fails the fixture
    /// ([`crate::egress::Replay`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<crate::egress::Exchange>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RequestFile {
    /// Reads a request file; every object in it must have an `apiVersion`
    /// and a `kind`.
    ///
    /// # Errors
    ///
    /// When the file cannot be read, is not a request, or shows an object
    /// without a kind.
    pub fn load(path: &Path) -> Result<RequestFile, Error> {
        let file: RequestFile = read(path)?;
        if let Some(what) = file.kindless() {
            return Err(Error::invalid(path, format!("{what} has no apiVersion or kind")));
        }
        Ok(file)
    }

    /// The first object without an `apiVersion` and `kind`, named by where it is.
    fn kindless(&self) -> Option<String> {
        if Gvk::of(&self.object).is_none() {
            return Some("object".into());
        }
        let lists = [("children", &self.children), ("related", &self.related), ("cluster", &self.cluster)];
        lists
            .into_iter()
            .find_map(|(key, list)| list.iter().position(|o| Gvk::of(o).is_none()).map(|i| format!("{key}[{i}]")))
    }

    /// The request, children grouped by `owns` (the manifest's owned kinds)
    /// as the host groups them ([`group_children`]).
    ///
    /// # Errors
    ///
    /// When a child is not of an owned kind, or `now` is not a time.
    pub fn request(&self, owns: &[Gvk]) -> Result<Request, String> {
        let now = match &self.now {
            None => jiff::Timestamp::UNIX_EPOCH,
            Some(text) => text
                .parse::<jiff::Timestamp>()
                .map_err(|e| format!("now: {text:?} is not an RFC 3339 time such as 2026-01-01T00:00:00Z ({e})"))?,
        };
        Ok(Request {
            object: self.object.to_string(),
            children: group_children(owns, &self.children)?,
            related: self.related.iter().map(Value::to_string).collect(),
            finalizing: self.finalizing,
            attempt: self.attempt,
            now,
            generation: self.object.pointer("/metadata/generation").and_then(Value::as_i64),
            readiness: Vec::new(),
        })
    }

    /// The parent's namespace: what a read without a namespace means.
    pub fn namespace(&self) -> Option<String> {
        self.object.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_string)
    }

    /// Every object `get` and `list` see: the parent, the children, the
    /// related objects and `cluster`.
    pub fn visible(&self) -> Vec<Value> {
        std::iter::once(&self.object).chain(&self.children).chain(&self.related).chain(&self.cluster).cloned().collect()
    }
}

/// Children grouped as the host groups them: one group per kind of `owns`,
/// in that order (empty groups included), each group sorted by namespace
/// then name.
///
/// # Errors
///
/// When a child has no kind, or a kind not in `owns`.
pub fn group_children(owns: &[Gvk], children: &[Value]) -> Result<Vec<(Gvk, Vec<String>)>, String> {
    let mut groups: Vec<(Gvk, Vec<String>)> = owns.iter().map(|k| (k.clone(), Vec::new())).collect();
    fn text<'v>(c: &'v Value, key: &str) -> &'v str {
        c.get("metadata").and_then(|m| m.get(key)).and_then(Value::as_str).unwrap_or_default()
    }
    let mut sorted: Vec<(usize, &Value)> = children.iter().enumerate().collect();
    sorted.sort_by(|(_, a), (_, b)| {
        (text(a, "namespace"), text(a, "name")).cmp(&(text(b, "namespace"), text(b, "name")))
    });
    for (i, child) in sorted {
        let kind = Gvk::of(child).ok_or_else(|| format!("children[{i}] lacks apiVersion or kind"))?;
        let Some(group) = groups.iter_mut().find(|(k, _)| *k == kind) else {
            let name = match text(child, "namespace") {
                "" => text(child, "name").to_string(),
                ns => format!("{ns}/{}", text(child, "name")),
            };
            return Err(format!("children[{i}] ({name}) is a {kind}, which the module does not own"));
        };
        group.1.push(child.to_string());
    }
    Ok(groups)
}

/// An admission fixture, `admission/NAME.yaml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewFile {
    /// The review, as written.
    pub review: ReviewSpec,
    /// Objects that `get` and `list` see.
    #[serde(default)]
    pub cluster: Vec<Value>,
}

/// The `review` of an admission fixture: what it leaves out is defaulted
/// by [`ReviewSpec::to_review`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct ReviewSpec {
    #[serde(default)]
    pub operation: Option<String>,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(default)]
    pub old_object: Option<Value>,
    #[serde(default)]
    pub kind: Option<Gvk>,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub user_info: Option<UserInfo>,
    #[serde(default)]
    pub dry_run: bool,
}

impl ReviewFile {
    /// Reads an admission fixture and makes its review.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or is not a review (unknown keys, an
    /// unknown operation, no kind).
    pub fn load(path: &Path) -> Result<(Review, Vec<Value>), Error> {
        let file: ReviewFile = read(path)?;
        let review = file.review.to_review().map_err(|reason| Error::invalid(path, reason))?;
        Ok((review, file.cluster))
    }
}

impl ReviewSpec {
    /// The review this describes, with what it leaves out filled in.
    ///
    /// # Errors
    ///
    /// An unknown operation, or no kind given and none on the object.
    pub fn to_review(&self) -> Result<Review, String> {
        let op = self.operation.as_deref().unwrap_or("CREATE");
        let operation = Operation::parse(op)
            .ok_or_else(|| format!("review.operation {op:?} must be CREATE, UPDATE, DELETE or CONNECT"))?;
        let shown = self.object.as_ref().or(self.old_object.as_ref());
        let text = |pointer: &str| shown.and_then(|o| o.pointer(pointer)).and_then(Value::as_str).map(str::to_string);
        let kind = match &self.kind {
            Some(kind) => kind.clone(),
            None => {
                shown.and_then(Gvk::of).ok_or("review.kind is missing and the object has no apiVersion and kind")?
            }
        };
        Ok(Review {
            uid: self.uid.clone().unwrap_or_else(|| "00000000-0000-0000-0000-000000000000".into()),
            operation,
            kind,
            sub_resource: self.sub_resource.clone(),
            namespace: self.namespace.clone().or_else(|| text("/metadata/namespace")),
            name: self.name.clone().or_else(|| text("/metadata/name")).unwrap_or_default(),
            object: self.object.as_ref().map(Value::to_string),
            old_object: self.old_object.as_ref().map(Value::to_string),
            user_info: self.user_info.clone().unwrap_or_else(|| UserInfo {
                username: "fixture".into(),
                uid: String::new(),
                groups: vec!["system:authenticated".into()],
            }),
            dry_run: self.dry_run,
        })
    }
}

// ---------------------------------------------------------------------------
// Outcomes and answers

/// What a reconcile produced, in the shape of an expected file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Observed {
    /// The guest failed, or the sandbox stopped it.
    Error {
        /// Which, and its message.
        error: ErrorKind,
        /// The parent's status the failure carries (contract 0.2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<Value>,
    },
    /// The guest answered.
    Outcome(Outcome),
}

/// How a reconcile failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum ErrorKind {
    /// The guest's transient failure.
    Transient(String),
    /// The guest's terminal failure.
    Terminal(String),
    /// The sandbox stopped the guest (trap, timeout, memory, malformed).
    Sandbox(String),
}

impl Observed {
    /// As a JSON value: every key of an outcome present.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({ "error": { "sandbox": e.to_string() } }))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorFile {
    error: ErrorKind,
    #[serde(default)]
    status: Option<Value>,
}

/// What an expected file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A reconcile's [`Observed`] outcome or error.
    Reconcile,
    /// An admission answer ([`admission_answer`]).
    Admission,
    /// A conversion's answer: `converted` objects, or `error`.
    Conversion,
}

/// A conversion fixture, `conversion/NAME.yaml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConversionFile {
    /// The version to convert to, `group/version`.
    #[serde(rename = "desiredAPIVersion")]
    pub desired_api_version: String,
    /// The objects, as the API server sends them.
    pub objects: Vec<Value>,
}

/// Reads an expected file as the JSON value a run is compared with, what
/// the file leaves out filled in: an outcome's `desired: []`, `status:
/// null`, `events: []`, `requeueAfterMs: null`, `finalized: false`; an
/// answer's `warnings: []`, `patched: null`.
///
/// # Errors
///
/// When the file cannot be read or is not of the `kind`'s shape (unknown
/// keys are errors: a typo must not pass as an empty outcome).
pub fn read_expected(kind: Kind, path: &Path) -> Result<Value, Error> {
    let value: Value = read(path)?;
    match kind {
        Kind::Reconcile => expected_outcome(value).map_err(|reason| Error::invalid(path, reason)),
        Kind::Admission => expected_answer(value).map_err(|reason| Error::invalid(path, reason)),
        Kind::Conversion => match &value {
            Value::Object(map) if map.len() == 1 && (map.contains_key("converted") || map.contains_key("error")) => {
                Ok(value)
            }
            _ => Err(Error::invalid(path, "not a conversion answer: `converted: [objects]` or `error: message`")),
        },
    }
}

fn expected_outcome(value: Value) -> Result<Value, String> {
    let observed = if value.get("error").is_some() {
        serde_json::from_value::<ErrorFile>(value).map(|f| Observed::Error { error: f.error, status: f.status })
    } else {
        serde_json::from_value::<Outcome>(value).map(Observed::Outcome)
    };
    observed.map(|o| o.to_value()).map_err(|e| format!("not an outcome or `error:` ({e})"))
}

fn expected_answer(mut value: Value) -> Result<Value, String> {
    let Value::Object(map) = &mut value else {
        return Err("not an admission answer (a mapping with `allowed`, or `error`)".into());
    };
    if !map.contains_key("error") {
        if !map.get("allowed").is_some_and(Value::is_boolean) {
            return Err("not an admission answer: `allowed: true|false` (or `error`) is missing".into());
        }
        map.entry("warnings").or_insert_with(|| Value::Array(Vec::new()));
        map.entry("patched").or_insert(Value::Null);
    }
    Ok(value)
}

/// The combined answer of an admission fixture (mutate, then validate),
/// every key present (`warnings`, `patched`) for comparison.
pub fn admission_answer(result: Result<Vec<String>, Denial>, patched: Option<Value>) -> Value {
    match result {
        Ok(warnings) => json!({"allowed": true, "warnings": warnings, "patched": patched}),
        Err(denial) => {
            let mut v = json!({"allowed": false, "message": denial.message, "warnings": [], "patched": patched});
            if let Some(code) = denial.code {
                v["code"] = code.into();
            }
            v
        }
    }
}

/// What is written to an expected file: for an admission answer,
/// `warnings` and `patched` only when they say something.
fn to_write(kind: Kind, actual: &Value) -> Value {
    let mut written = actual.clone();
    if let (Kind::Admission, Value::Object(map)) = (kind, &mut written) {
        if map.get("warnings").and_then(Value::as_array).is_some_and(Vec::is_empty) {
            map.remove("warnings");
        }
        if map.get("patched").is_some_and(Value::is_null) {
            map.remove("patched");
        }
    }
    written
}

/// Writes `actual` as the expected file (YAML, keys in reading order).
///
/// # Errors
///
/// When the file cannot be written.
pub fn write_expected(kind: Kind, path: &Path, actual: &Value) -> Result<(), Error> {
    std::fs::write(path, expected_to_yaml(kind, actual)).map_err(Error::io(path))
}

/// The text [`write_expected`] writes: `actual` as an expected file of
/// `kind` holds it.
pub fn expected_to_yaml(kind: Kind, actual: &Value) -> String {
    to_yaml(&to_write(kind, actual))
}

/// How a run compares with its expected file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The same JSON value.
    Pass,
    /// Different: a unified diff, expected → actual, of both in YAML.
    Differs(String),
    /// There is no expected file; the actual value in YAML.
    Missing(String),
}

/// Compares `actual` with the expected file of a case.
///
/// # Errors
///
/// When the expected file exists but cannot be read or parsed.
pub fn check(kind: Kind, expected: &Path, actual: &Value) -> Result<Verdict, Error> {
    if !expected.exists() {
        return Ok(Verdict::Missing(to_yaml(actual)));
    }
    let expected = read_expected(kind, expected)?;
    Ok(compare(&expected, actual).map_or(Verdict::Pass, Verdict::Differs))
}

/// `None` when equal as JSON values; else a unified diff, expected →
/// actual, of both in YAML.
pub fn compare(expected: &Value, actual: &Value) -> Option<String> {
    (expected != actual).then(|| diff(&to_yaml(expected), &to_yaml(actual)))
}

// ---------------------------------------------------------------------------
// Writing

/// YAML text of a value, keys in a reading order: an outcome's (and an
/// answer's) keys as in the WIT records, then objects with `apiVersion`,
/// `kind`, `name`, `metadata`, `spec` first and the rest alphabetically.
pub fn to_yaml(value: &Value) -> String {
    const TOP: &[&str] = &[
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
    serde_saphyr::to_string(&Ordered { value, first: TOP }).unwrap_or_else(|e| format!("<not YAML: {e}>\n"))
}

/// YAML text of a request fixture (as `operon run --record` writes one):
/// the parent first, then what came with it, the reads and the calls.
pub fn request_to_yaml(file: &RequestFile) -> String {
    const TOP: &[&str] = &["object", "children", "related", "finalizing", "attempt", "now", "cluster", "egress"];
    let value = serde_json::to_value(file).unwrap_or_default();
    serde_saphyr::to_string(&Ordered { value: &value, first: TOP }).unwrap_or_else(|e| format!("<not YAML: {e}>\n"))
}

/// A value serialized with its object keys reordered: `first` in that
/// order, then the rest alphabetically.
struct Ordered<'a> {
    value: &'a Value,
    first: &'static [&'static str],
}

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const OBJECT: &[&str] = &["apiVersion", "kind", "name", "metadata", "spec"];
        match self.value {
            Value::Object(map) => {
                let rank = |key: &str| self.first.iter().position(|f| *f == key).unwrap_or(self.first.len());
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
                let mut out = s.serialize_map(Some(keys.len()))?;
                for key in keys {
                    out.serialize_entry(key, &Ordered { value: &map[key.as_str()], first: OBJECT })?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Ordered { value: item, first: OBJECT })?;
                }
                out.end()
            }
            other => other.serialize(s),
        }
    }
}

/// A unified diff of two texts by lines, expected → actual, with three
/// lines of context (the format of `diff -u`).
pub fn diff(expected: &str, actual: &str) -> String {
    const CONTEXT: usize = 3;
    let a: Vec<&str> = expected.split_inclusive('\n').collect();
    let b: Vec<&str> = actual.split_inclusive('\n').collect();
    let ops = line_ops(&a, &b);
    let mut out = String::from("--- expected\n+++ actual\n");
    // Hunks: runs of changes with up to 2 * CONTEXT equal lines between them.
    let changed: Vec<usize> =
        ops.iter().enumerate().filter(|(_, op)| !matches!(op, Op::Same(..))).map(|(i, _)| i).collect();
    let mut i = 0;
    while i < changed.len() {
        let mut j = i;
        while j + 1 < changed.len() && changed[j + 1] - changed[j] <= 2 * CONTEXT + 1 {
            j += 1;
        }
        let start = changed[i].saturating_sub(CONTEXT);
        let end = (changed[j] + CONTEXT + 1).min(ops.len());
        let hunk = &ops[start..end];
        let (a_start, b_start) = position(&ops[..start]);
        let a_len = hunk.iter().filter(|op| !matches!(op, Op::Insert(_))).count();
        let b_len = hunk.iter().filter(|op| !matches!(op, Op::Delete(_))).count();
        out.push_str(&format!("@@ -{} +{} @@\n", range(a_start, a_len), range(b_start, b_len)));
        for op in hunk {
            let (sign, line) = match *op {
                Op::Same(x) => (' ', a[x]),
                Op::Delete(x) => ('-', a[x]),
                Op::Insert(y) => ('+', b[y]),
            };
            out.push(sign);
            out.push_str(line);
            if !line.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
        i = j + 1;
    }
    out
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Same(usize),
    Delete(usize),
    Insert(usize),
}

/// Lines of `a` and `b` before `ops`.
fn position(ops: &[Op]) -> (usize, usize) {
    ops.iter().fold((0, 0), |(x, y), op| match op {
        Op::Same(..) => (x + 1, y + 1),
        Op::Delete(_) => (x + 1, y),
        Op::Insert(_) => (x, y + 1),
    })
}

/// A hunk range: `start,len` (1-based), `start` alone for one line.
fn range(before: usize, len: usize) -> String {
    match len {
        1 => format!("{}", before + 1),
        0 => format!("{before},0"),
        _ => format!("{},{len}", before + 1),
    }
}

/// The edit script from `a` to `b` by a longest common subsequence of
/// lines (common prefix and suffix taken off first; fixtures are small).
fn line_ops(a: &[&str], b: &[&str]) -> Vec<Op> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (am, bm) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let (n, m) = (am.len(), bm.len());
    // lcs[i][j]: the LCS length of am[i..] and bm[j..].
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * (m + 1) + j] = if am[i] == bm[j] {
                lcs[(i + 1) * (m + 1) + j + 1] + 1
            } else {
                lcs[(i + 1) * (m + 1) + j].max(lcs[i * (m + 1) + j + 1])
            };
        }
    }
    let mut ops: Vec<Op> = (0..prefix).map(Op::Same).collect();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && am[i] == bm[j] {
            ops.push(Op::Same(prefix + i));
            i += 1;
            j += 1;
        } else if j == m || (i < n && lcs[(i + 1) * (m + 1) + j] >= lcs[i * (m + 1) + j + 1]) {
            ops.push(Op::Delete(prefix + i));
            i += 1;
        } else {
            ops.push(Op::Insert(prefix + j));
            j += 1;
        }
    }
    ops.extend((a.len() - suffix..a.len()).map(Op::Same));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn outcome(text: &str) -> Result<Value, String> {
        expected_outcome(parse(text, false)?)
    }

    #[test]
    fn expected_outcomes_should_read_outcomes_and_errors_with_defaults() {
        let o = outcome("desired: []\nfinalized: true\n").unwrap();
        assert_eq!(o, json!({"desired": [], "status": null, "events": [], "requeueAfterMs": null, "finalized": true}));
        let e = outcome("error:\n  terminal: bad spec\n").unwrap();
        assert_eq!(e, json!({"error": {"terminal": "bad spec"}}));
        let err = outcome("desird: []\n").unwrap_err();
        assert!(err.contains("desird"), "typos must not pass as an empty outcome: {err}");
        assert!(outcome("error: {fatal: x}\n").is_err());
        // The host's form of an outcome compares equal with the file's.
        let host =
            Observed::Outcome(Outcome { requeue_after: Some(Duration::from_millis(30000)), ..Outcome::default() });
        assert_eq!(outcome("requeueAfterMs: 30000\n").unwrap(), host.to_value());
    }

    #[test]
    fn yaml_should_be_read_as_yaml_1_2() {
        let v: Value =
            parse("a: on\nb: yes\nc: y\nd: true\ne: 2\nf: 2.5\ng: '2'\ni: null\nj: ~\nk: off\n", false).unwrap();
        assert_eq!(
            v,
            json!({"a": "on", "b": "yes", "c": "y", "d": true, "e": 2, "f": 2.5, "g": "2", "i": null, "j": null, "k": "off"})
        );
        // Integers stay integers, so they equal what a guest returns in JSON.
        assert_eq!(v["e"], serde_json::from_str::<Value>("2").unwrap());
        // JSON files are JSON; a JSON text is YAML too.
        let j: Value = parse("{\"a\": [1, \"on\"]}", true).unwrap();
        assert_eq!(j, parse::<Value>("{\"a\": [1, \"on\"]}", false).unwrap());
        assert!(parse::<RequestFile>("", false).is_err(), "an empty request file is an error");
    }

    #[test]
    fn yaml_written_should_read_back_the_same_value() {
        let v = json!({"desired": [{"spec": {"x": "on", "y": "yes", "n": "2", "t": "true", "e": "", "nl": "a\nb",
                        "z": null, "b": false, "f": 1.5, "i": -3}, "kind": "K", "apiVersion": "v1",
                        "metadata": {"name": "a"}}], "status": null, "events": [], "finalized": false});
        let text = to_yaml(&v);
        assert!(text.starts_with("desired:\n"), "{text}");
        assert!(text.find("apiVersion").unwrap() < text.find("kind").unwrap(), "{text}");
        assert!(text.find("metadata").unwrap() < text.find("spec").unwrap(), "{text}");
        assert_eq!(parse::<Value>(&text, false).unwrap(), v, "{text}");
    }

    #[test]
    fn admission_answers_should_be_written_without_their_defaults() {
        let allowed = admission_answer(Ok(vec![]), None);
        assert_eq!(to_yaml(&to_write(Kind::Admission, &allowed)), "allowed: true\n");
        let denied = admission_answer(Err(Denial { message: "too many".into(), code: Some(422) }), None);
        assert_eq!(to_yaml(&to_write(Kind::Admission, &denied)), "allowed: false\nmessage: too many\ncode: 422\n");
        // Strings YAML 1.1 would read as booleans are quoted.
        let no = admission_answer(Err(Denial { message: "no".into(), code: None }), None);
        assert_eq!(to_yaml(&to_write(Kind::Admission, &no)), "allowed: false\nmessage: \"no\"\n");
        assert_eq!(expected_answer(parse("allowed: true\n", false).unwrap()).unwrap(), allowed);
        assert!(expected_answer(parse("alowed: true\n", false).unwrap()).is_err());
    }

    #[test]
    fn reviews_should_default_from_their_object() {
        let file: ReviewFile = parse(
            "review:\n  operation: update\n  object: {apiVersion: example.operon.dev/v1alpha1, kind: WebApp, \
             metadata: {name: shop, namespace: default}}\n  oldObject: {apiVersion: example.operon.dev/v1alpha1, \
             kind: WebApp, metadata: {name: shop, namespace: default}}\n",
            false,
        )
        .unwrap();
        let review = file.review.to_review().unwrap();
        assert_eq!(review.operation, Operation::Update);
        assert_eq!(review.kind, Gvk::new("example.operon.dev", "v1alpha1", "WebApp"));
        assert_eq!((review.namespace.as_deref(), review.name.as_str()), (Some("default"), "shop"));
        assert_eq!(review.user_info.username, "fixture");
        let delete: ReviewFile = parse(
            "review: {operation: DELETE, oldObject: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}}",
            false,
        )
        .unwrap();
        let review = delete.review.to_review().unwrap();
        assert_eq!((review.object, review.name.as_str(), review.namespace), (None, "c", None));
        let bad: ReviewFile = parse("review: {operation: PATCH, object: {}}", false).unwrap();
        assert!(bad.review.to_review().unwrap_err().contains("PATCH"));
        assert!(parse::<ReviewFile>("review: {objet: {}}", false).is_err(), "typos are errors");
    }

    #[test]
    fn children_should_be_grouped_by_owned_kind_in_manifest_order() {
        let owns = [Gvk::new("apps", "v1", "Deployment"), Gvk::new("", "v1", "Service"), Gvk::new("", "v1", "Secret")];
        let obj = |kind: &str, api: &str, ns: &str, name: &str| json!({"apiVersion": api, "kind": kind, "metadata": {"namespace": ns, "name": name}});
        let children = [
            obj("Service", "v1", "a", "z"),
            obj("Deployment", "apps/v1", "b", "a"),
            obj("Service", "v1", "a", "b"),
            obj("Deployment", "apps/v1", "a", "y"),
        ];
        let groups = group_children(&owns, &children).unwrap();
        let names: Vec<(String, Vec<String>)> = groups
            .iter()
            .map(|(k, objs)| {
                let names = objs
                    .iter()
                    .map(|o| {
                        serde_json::from_str::<Value>(o).unwrap()["metadata"]["name"].as_str().unwrap().to_string()
                    })
                    .collect();
                (k.kind.clone(), names)
            })
            .collect();
        assert_eq!(
            names,
            [
                ("Deployment".to_string(), vec!["y".to_string(), "a".to_string()]),
                ("Service".to_string(), vec!["b".to_string(), "z".to_string()]),
                ("Secret".to_string(), vec![]),
            ]
        );
        let err = group_children(&owns, &[obj("ConfigMap", "v1", "a", "c")]).unwrap_err();
        assert!(err.contains("children[0] (a/c) is a v1 ConfigMap, which the module does not own"), "{err}");
        assert!(group_children(&owns, &[json!({"metadata": {}})]).unwrap_err().contains("lacks apiVersion"));
    }

    #[test]
    fn request_files_should_name_objects_without_a_kind() {
        let file: RequestFile = parse(
            "object: {apiVersion: v1, kind: ConfigMap}\ncluster: [{apiVersion: v1, kind: Secret}, {a: 1}]\n",
            false,
        )
        .unwrap();
        assert_eq!(file.kindless().as_deref(), Some("cluster[1]"));
        assert_eq!(file.visible().len(), 3);
        assert!(parse::<RequestFile>("object: {}\nchildern: []\n", false).is_err(), "typos are errors");
    }

    #[test]
    fn discovery_should_pair_sort_and_skip_expected_files() {
        let dir = std::env::temp_dir().join(format!("operon-contract-fixtures-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(ADMISSION_DIR)).unwrap();
        for f in ["b.json", "a.yaml", "a.expected.yaml", "c.yml", "c.expected.json", "notes.txt", "x.yamlx"] {
            std::fs::write(dir.join(f), "{}").unwrap();
        }
        std::fs::write(dir.join("admission/r.yaml"), "{}").unwrap();
        let cases = discover(&dir).unwrap();
        let names: Vec<&str> = cases.requests.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(cases.requests[0].expected, dir.join("a.expected.yaml"));
        assert_eq!(cases.requests[1].expected, dir.join("b.expected.yaml"), "the file to write");
        assert_eq!(cases.requests[2].expected, dir.join("c.expected.json"));
        assert_eq!(cases.reviews, [Case::of(&dir.join("admission/r.yaml"))]);
        let empty = dir.join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(discover(&empty).unwrap_err().to_string().contains("no fixtures"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fixtures_in_a_subdirectory_should_be_discovered_named_by_their_path() {
        let dir = std::env::temp_dir().join(format!("operon-contract-nested-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["recorded/old", "admission", ".hidden"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        for f in ["top.yaml", "recorded/live.yaml", "recorded/live.expected.yaml", "recorded/old/a.yaml"] {
            std::fs::write(dir.join(f), "{}").unwrap();
        }
        std::fs::write(dir.join("admission/r.yaml"), "{}").unwrap();
        std::fs::write(dir.join(".hidden/h.yaml"), "{}").unwrap();
        let cases = discover(&dir).unwrap();
        let names: Vec<&str> = cases.requests.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["top", "recorded/live", "recorded/old/a"]);
        assert_eq!(cases.requests[1].expected, dir.join("recorded/live.expected.yaml"));
        assert_eq!(cases.reviews.len(), 1, "admission reviews are not requests");
        // A directory of nothing but nested fixtures is not empty.
        let nested = discover(&dir.join("recorded")).unwrap();
        assert_eq!(nested.requests.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_mismatch_should_show_a_unified_diff() {
        let expected = json!({"desired": [{"spec": {"replicas": 30, "image": "a"}}], "finalized": false});
        let actual = json!({"desired": [{"spec": {"replicas": 3, "image": "a"}}], "finalized": false});
        assert_eq!(compare(&expected, &expected.clone()), None);
        let d = compare(&expected, &actual).unwrap();
        assert!(d.starts_with("--- expected\n+++ actual\n@@ -1,5 +1,5 @@\n"), "{d}");
        assert!(d.lines().any(|l| l == "-    replicas: 30"), "{d}");
        assert!(d.lines().any(|l| l == "+    replicas: 3"), "{d}");
        // Two changes far apart are two hunks; context is three lines.
        let a: String = (0..20).map(|i| format!("{i}\n")).collect();
        let b: String = (0..20)
            .map(|i| match i {
                2 => "two\n".to_string(),
                17 => "seventeen\n".to_string(),
                _ => format!("{i}\n"),
            })
            .collect();
        let d = diff(&a, &b);
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
        assert!(d.contains("@@ -1,6 +1,6 @@\n 0\n 1\n-2\n+two\n 3\n 4\n 5\n"), "{d}");
        assert!(d.contains("@@ -15,6 +15,6 @@\n"), "{d}");
        assert_eq!(diff("a\n", "a\n"), "--- expected\n+++ actual\n");
        assert_eq!(diff("", "x\n"), "--- expected\n+++ actual\n@@ -0,0 +1 @@\n+x\n");
    }
}
