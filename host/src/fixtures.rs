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
//!
//! An outcome is also checked as the live controller would check it before
//! writing anything ([`apply::validate`] with the policy `operon run
//! --module` gives the module, then [`apply::check_ownership`] against the
//! fixture's `cluster` and `related` objects): an outcome the host would
//! refuse fails the fixture, naming the rule, whatever the expected file says.
//!
//! # Admission fixtures
//!
//! A subdirectory `admission/` of the fixtures directory holds admission
//! reviews for modules of the `reconciler-with-admission` world, named the
//! same way (`NAME.yaml` beside `NAME.expected.yaml`); `operon test MODULE
//! DIR` runs both kinds. A review goes through `mutate`, then (unless
//! refused) through `validate` with the mutated object, as the API server
//! calls the two webhooks, and the expected file holds the combined answer.
//! A module that does not export admission fails every admission fixture,
//! saying so.
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
//! # or, when the sandbox stopped the guest (the failure policy then answers):
//! error: "validate trapped: ..."
//! ```

use crate::apply;
use crate::cache::{CachedObject, ObjectKey};
use crate::contract::{Denial, Gvk, Operation, Outcome, Request, Review, Selector, UserInfo};
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
    let admission_dir = dir.join(ADMISSION_DIR);
    let mut reviews: Vec<PathBuf> = if admission_dir.is_dir() {
        std::fs::read_dir(&admission_dir)
            .map_err(io(&admission_dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_request_file(p))
            .collect()
    } else {
        Vec::new()
    };
    reviews.sort();
    if fixtures.is_empty() && reviews.is_empty() {
        return Err(Error::Invalid {
            path: dir.to_path_buf(),
            reason: "no fixtures (*.yaml, *.yml or *.json other than *.expected.*)".into(),
        });
    }
    let mut report = Report::default();
    let cases = fixtures.into_iter().map(|p| (p, false)).chain(reviews.into_iter().map(|p| (p, true)));
    for (path, admission) in cases {
        let name = if admission { format!("{ADMISSION_DIR}/{}", stem(&path)) } else { stem(&path) };
        let result = if admission { run_review(module, &path, update) } else { run_one(module, &path, update) };
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
    let live = LiveCheck::of(&fixture);
    let (request, reader) = build_request(module, fixture).map_err(invalid)?;
    let observed = match module.reconcile(&request, Arc::new(reader)) {
        Ok(Ok(outcome)) => {
            if let Err(refused) = live.check(module.manifest(), &outcome) {
                return Ok(Some(format!("  {refused} (the live controller checks this before writing)")));
            }
            Observed::Outcome(outcome)
        }
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

/// What the live controller checks an outcome against: the parent, its
/// children (the host finds them by owner, so they are the parent's), and
/// the other objects of the fixture's cluster.
struct LiveCheck {
    parent: Value,
    children: Vec<Value>,
    others: Vec<Value>,
}

impl LiveCheck {
    fn of(f: &Fixture) -> LiveCheck {
        let others = f.cluster.iter().chain(&f.related).cloned().collect();
        LiveCheck { parent: f.object.clone(), children: f.children.clone(), others }
    }

    /// `apply::validate` with the policy of `operon run --module` (the
    /// controller's default grants and limits), then the ownership check.
    fn check(&self, manifest: &crate::contract::Manifest, outcome: &Outcome) -> Result<(), apply::ValidationError> {
        let parent = CachedObject::from_value(self.parent.clone())
            .map_err(|e| apply::ValidationError(format!("the fixture's object: {e}")))?;
        let config = crate::controller::Config::default();
        let policy = apply::Policy {
            controller: manifest.name.clone(),
            owns: manifest.owns.clone(),
            namespaces: config.grants.namespaces.clone(),
            cluster_scoped: config.grants.cluster_scoped,
            max_desired: config.max_desired,
            max_events: config.max_events,
        };
        let children = apply::validate(&policy, &parent, outcome, |kind| !cluster_scoped(kind))?;
        let is = |o: &Value, kind: &Gvk, key: &ObjectKey| {
            Gvk::of(o).as_ref() == Some(kind)
                && o.pointer("/metadata/name").and_then(Value::as_str) == Some(key.name.as_str())
                && o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .is_none_or(|ns| key.namespace.as_deref() == Some(ns))
        };
        apply::check_ownership(&parent, &children, config.grants.adopt, |kind, key| {
            if self.children.iter().any(|c| is(c, kind, key)) {
                return None;
            }
            let other = self.others.iter().find(|o| is(o, kind, key))?;
            CachedObject::from_value(other.clone()).ok().map(Arc::new)
        })
    }
}

/// Kinds that are cluster-scoped, for the offline check (the live host asks
/// discovery); any other kind, custom ones included, counts as namespaced.
fn cluster_scoped(kind: &Gvk) -> bool {
    matches!(
        (kind.group.as_str(), kind.kind.as_str()),
        ("", "Namespace" | "Node" | "PersistentVolume")
            | ("rbac.authorization.k8s.io", "ClusterRole" | "ClusterRoleBinding")
            | ("storage.k8s.io", "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | ("scheduling.k8s.io", "PriorityClass")
            | ("networking.k8s.io", "IngressClass")
            | ("node.k8s.io", "RuntimeClass")
            | ("certificates.k8s.io", "CertificateSigningRequest")
            | ("admissionregistration.k8s.io", _)
    )
}

/// The subdirectory of admission fixtures.
const ADMISSION_DIR: &str = "admission";

/// An admission fixture, `admission/NAME.yaml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewFixture {
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
    kind: Option<Gvk>,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    user_info: Option<UserInfo>,
    #[serde(default)]
    dry_run: bool,
}

/// The review a fixture describes, with what it leaves out filled in.
fn review_of(file: ReviewFile) -> Result<Review, String> {
    let op = file.operation.as_deref().unwrap_or("CREATE");
    let operation = Operation::parse(op)
        .ok_or_else(|| format!("review.operation {op:?} must be CREATE, UPDATE, DELETE or CONNECT"))?;
    let shown = file.object.as_ref().or(file.old_object.as_ref());
    let text = |pointer: &str| shown.and_then(|o| o.pointer(pointer)).and_then(Value::as_str).map(str::to_string);
    let kind = match file.kind {
        Some(kind) => kind,
        None => shown.and_then(Gvk::of).ok_or("review.kind is missing and the object has no apiVersion and kind")?,
    };
    Ok(Review {
        uid: file.uid.unwrap_or_else(|| "00000000-0000-0000-0000-000000000000".into()),
        operation,
        kind,
        sub_resource: file.sub_resource,
        namespace: file.namespace.or_else(|| text("/metadata/namespace")),
        name: file.name.or_else(|| text("/metadata/name")).unwrap_or_default(),
        object: file.object.as_ref().map(Value::to_string),
        old_object: file.old_object.as_ref().map(Value::to_string),
        user_info: file.user_info.unwrap_or_else(|| UserInfo {
            username: "fixture".into(),
            uid: String::new(),
            groups: vec!["system:authenticated".into()],
        }),
        dry_run: file.dry_run,
    })
}

/// Mutate, then validate the mutated object: the combined answer, every
/// key present (`warnings`, `patched`), or `error` when the sandbox stopped
/// the guest.
fn admit(module: &Module, review: &Review, reader: Arc<dyn ObjectReader>) -> Value {
    // No webhook here: the module's own timeout bounds each call.
    let deadline = module.limits().timeout;
    let patched = match module.mutate(review, reader.clone(), deadline) {
        Ok(Ok(patched)) => patched,
        Ok(Err(denial)) => return answer(Err(denial), None),
        Err(e) => return serde_json::json!({ "error": format!("mutate {e}") }),
    };
    let mutated;
    let review = match &patched {
        Some(object) => {
            mutated = Review { object: Some(object.to_string()), ..review.clone() };
            &mutated
        }
        None => review,
    };
    match module.validate(review, reader, deadline) {
        Ok(result) => answer(result, patched),
        Err(e) => serde_json::json!({ "error": format!("validate {e}") }),
    }
}

fn answer(result: Result<Vec<String>, Denial>, patched: Option<Value>) -> Value {
    match result {
        Ok(warnings) => serde_json::json!({"allowed": true, "warnings": warnings, "patched": patched}),
        Err(denial) => {
            let mut v =
                serde_json::json!({"allowed": false, "message": denial.message, "warnings": [], "patched": patched});
            if let Some(code) = denial.code {
                v["code"] = code.into();
            }
            v
        }
    }
}

/// One admission fixture: `Ok(None)` when the answer matches.
fn run_review(module: &Module, path: &Path, update: bool) -> Result<Option<String>, Error> {
    if !module.admission() {
        return Ok(Some(format!(
            "  the module does not export {}/admission@{}: build it for the reconciler-with-admission world \
             (Rust: `operon_sdk::export!(MyReconciler with admission)`) or remove {}/",
            crate::runtime::WIT_PACKAGE,
            crate::runtime::WIT_VERSION,
            ADMISSION_DIR
        )));
    }
    let invalid = |reason: String| Error::Invalid { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.into(), source })?;
    let fixture: ReviewFixture = serde_yaml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let review = review_of(fixture.review).map_err(invalid)?;
    let reader = FixtureReader { objects: fixture.cluster, namespace: review.namespace.clone() };
    let observed = admit(module, &review, Arc::new(reader));
    let expected_file = expected_path(path);
    if update {
        let written = value_yaml(&without_defaults(observed));
        std::fs::write(&expected_file, written).map_err(|source| Error::Io { path: expected_file, source })?;
        return Ok(None);
    }
    let actual = value_yaml(&observed);
    let Ok(expected_text) = std::fs::read_to_string(&expected_file) else {
        return Ok(Some(format!(
            "  no expected file {}; write it with `operon test --update`, then review it\n  got:\n{}",
            expected_file.display(),
            indent(&actual)
        )));
    };
    let mut expected: Value = serde_yaml::from_str(&expected_text).map_err(|e| Error::Invalid {
        path: expected_file.clone(),
        reason: format!("not an admission answer ({e})"),
    })?;
    if let Value::Object(map) = &mut expected
        && !map.contains_key("error")
    {
        map.entry("warnings").or_insert_with(|| Value::Array(Vec::new()));
        map.entry("patched").or_insert(Value::Null);
    }
    if expected == observed {
        return Ok(None);
    }
    Ok(Some(diff(&value_yaml(&expected), &actual)))
}

/// An answer as written to an expected file: `warnings` and `patched` only
/// when they say something.
fn without_defaults(mut answer: Value) -> Value {
    if let Value::Object(map) = &mut answer {
        if map.get("warnings").and_then(Value::as_array).is_some_and(Vec::is_empty) {
            map.remove("warnings");
        }
        if map.get("patched").is_some_and(Value::is_null) {
            map.remove("patched");
        }
    }
    answer
}

/// YAML of an admission answer, keys in a reading order.
fn value_yaml(answer: &Value) -> String {
    const ORDER: [&str; 6] = ["error", "allowed", "message", "code", "warnings", "patched"];
    let mut out = serde_yaml::Mapping::new();
    if let Value::Object(map) = answer {
        for key in ORDER.iter().filter(|k| map.contains_key(**k)) {
            let value = serde_yaml::to_value(&map[*key]).unwrap_or(serde_yaml::Value::Null);
            out.insert(serde_yaml::Value::String((*key).to_string()), value);
        }
    }
    serde_yaml::to_string(&out).unwrap_or_else(|e| format!("<unprintable: {e}>"))
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
    fn reviews_should_default_from_their_object() {
        let file: ReviewFixture = serde_yaml::from_str(
            "review:\n  operation: update\n  object: {apiVersion: example.operon.dev/v1alpha1, kind: WebApp, \
             metadata: {name: shop, namespace: default}}\n  oldObject: {apiVersion: example.operon.dev/v1alpha1, \
             kind: WebApp, metadata: {name: shop, namespace: default}}\n",
        )
        .unwrap();
        let review = review_of(file.review).unwrap();
        assert_eq!(review.operation, Operation::Update);
        assert_eq!(review.kind, Gvk::new("example.operon.dev", "v1alpha1", "WebApp"));
        assert_eq!((review.namespace.as_deref(), review.name.as_str()), (Some("default"), "shop"));
        assert_eq!(review.user_info.username, "fixture");
        let delete: ReviewFixture =
            serde_yaml::from_str("review: {operation: DELETE, oldObject: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}}")
                .unwrap();
        let review = review_of(delete.review).unwrap();
        assert_eq!((review.object, review.name.as_str(), review.namespace), (None, "c", None));
        let bad: ReviewFixture = serde_yaml::from_str("review: {operation: PATCH, object: {}}").unwrap();
        assert!(review_of(bad.review).unwrap_err().contains("PATCH"));
        assert!(serde_yaml::from_str::<ReviewFixture>("review: {objet: {}}").is_err(), "typos are errors");
    }

    #[test]
    fn answers_should_be_written_without_their_defaults() {
        let allowed = answer(Ok(vec![]), None);
        assert_eq!(value_yaml(&without_defaults(allowed)), "allowed: true\n");
        let denied = answer(Err(Denial { message: "no".into(), code: Some(422) }), None);
        assert_eq!(value_yaml(&without_defaults(denied)), "allowed: false\nmessage: no\ncode: 422\n");
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
    fn outcomes_the_live_controller_would_refuse_should_be_caught_naming_the_rule() {
        let fixture: Fixture = serde_yaml::from_str(
            "object: {apiVersion: example.operon.dev/v1alpha1, kind: WebApp, metadata: {name: shop, namespace: a, uid: u1}}\n\
             children: [{apiVersion: v1, kind: Service, metadata: {name: shop, namespace: a}}]\n\
             cluster: [{apiVersion: v1, kind: Service, metadata: {name: taken, namespace: a,\n\
               ownerReferences: [{apiVersion: v1, kind: Other, name: o, uid: u2, controller: true}]}}]\n",
        )
        .unwrap();
        let live = LiveCheck::of(&fixture);
        let manifest = crate::contract::Manifest {
            name: "webapp".into(),
            for_kind: Gvk::new("example.operon.dev", "v1alpha1", "WebApp"),
            owns: vec![Gvk::new("", "v1", "Service")],
            watches: Vec::new(),
            reads: Vec::new(),
            finalizer: None,
        };
        let service =
            |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}});
        let outcome = |desired: Vec<Value>| Outcome { desired, ..Outcome::default() };
        assert!(live.check(&manifest, &outcome(vec![service("shop")])).is_ok(), "its own child");
        let err = live.check(&manifest, &outcome(vec![service("taken")])).unwrap_err().to_string();
        assert!(err.contains("controlled by Other o") && err.contains("never taken over"), "{err}");
        let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let err = live.check(&manifest, &outcome(vec![secret])).unwrap_err().to_string();
        assert!(err.contains("not among the kinds webapp may write"), "{err}");
        let err = live.check(&manifest, &outcome(vec![service("Bad_Name")])).unwrap_err().to_string();
        assert!(err.contains("DNS subdomain"), "{err}");
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
