//! The request/expected fixtures of `operon test`, run natively from
//! `cargo test`.
//!
//! A fixture directory holds, per case, `NAME.yaml` (the request) and
//! `NAME.expected.yaml` (the outcome); `.yml` and `.json` work too, a
//! subdirectory `admission/` holds admission reviews named the same way and
//! `conversion/` conversion cases; every other subdirectory holds more
//! requests, named by their path (`recorded/live-create`).
//! The format, how the files are found, read and compared, is
//! [`operon_contract::fixture`]'s, shared with `operon test`: both runners
//! read the same files the same way. In short:
//!
//! ```yaml
//! # NAME.yaml
//! object: {apiVersion: ..., kind: ..., metadata: {...}, spec: {...}}  # the parent
//! children: []      # existing owned objects, any order; grouped by kind in manifest order
//! related: []       # objects of watched kinds
//! finalizing: false # default false
//! attempt: 0        # default 0
//! cluster: []       # objects that get/list see (optional)
//! now: "2026-11-26T09:00:00Z"  # the host's clock; default the Unix epoch
//! egress: []        # recorded HTTP calls and answers, replayed (a call not held fails)
//! ```
//!
//! Each child is rated as the host rates it (`operon_contract::readiness`).
//!
//! ```yaml
//! # NAME.expected.yaml: an outcome ...
//! desired: [...]           # in the order the reconciler returns them
//! status: {...}            # or null: leave the status untouched
//! events: [{warning: false, reason: Created, message: ...}]
//! requeueAfterMs: 30000    # or null (a requeue-at, measured from `now`)
//! finalized: false
//! needsFinalizer: true
//! parentMetadata: {labels: {}, annotations: {}}   # when the outcome keeps some
//! # ... or a failure, with the status it carries
//! error: {terminal: "message"}   # or {transient: "message"}
//! status: {...}
//! ```
//!
//! A subdirectory `conversion/` holds conversion requests
//! (`desiredAPIVersion`, `objects`) and their answers (`converted: [...]`
//! or `error: message`).
//!
//! Objects are compared as JSON values (key order and YAML style do not
//! matter; list order does); a mismatch shows as a unified diff. An
//! admission review goes through `mutate`, then (unless refused) through
//! `validate` with the mutated object, as the API server calls the
//! webhooks; its expected file is the combined answer (`allowed`,
//! `message`, `code`, `warnings`, `patched`).
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

use operon_contract as contract;
use operon_contract::fixture::{
    self, Case, ConversionFile, ErrorKind, Kind, Observed, RequestFile, ReviewFile, Verdict,
};
use serde_json::{Value, json};

use super::FakeCluster;
use crate::{Gvk, Reconciler, raw};

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
    /// The parent, its children, and the other objects (`cluster` and
    /// `related`), for the host's checks of an outcome.
    live: (Value, Vec<Value>, Vec<Value>),
}

impl Fixture {
    /// Reads `NAME.yaml` for the reconciler described by `manifest`.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or is not a request (unknown keys, an
    /// object without a kind, a child of a kind the manifest does not own).
    pub fn load(request_path: &Path, manifest: &raw::Manifest) -> Result<Fixture, String> {
        let case = Case::of(request_path);
        let file = RequestFile::load(request_path).map_err(|error| error.to_string())?;
        let owns: Vec<contract::Gvk> = manifest.owns.iter().map(from_raw_gvk).collect();
        let request = file.request(&owns).map_err(|error| format!("{}: {error}", request_path.display()))?;
        let mut cluster = FakeCluster::new().with_egress(file.egress.clone());
        cluster.objects = file.visible();
        let others = file.cluster.iter().chain(&file.related).cloned().collect();
        let live = (file.object.clone(), file.children.clone(), others);
        let now = request.now_text();
        let request = raw::Request {
            object: request.object,
            children: request
                .children
                .into_iter()
                .map(|(kind, objects)| raw::Children {
                    kind: to_raw_gvk(kind),
                    // Rated as the host rates them (one set of rules).
                    objects: objects
                        .into_iter()
                        .map(|object| {
                            let readiness = super::raw_readiness(contract::Readiness::of_json(&object));
                            raw::Child { object, readiness }
                        })
                        .collect(),
                })
                .collect(),
            related: request.related,
            finalizing: request.finalizing,
            attempt: request.attempt,
            now,
        };
        Ok(Fixture { name: case.name, request_path: case.path, expected_path: case.expected, request, cluster, live })
    }

    /// Whether the host would refuse `outcome` for this fixture (see
    /// [`check_outcome`](super::check_outcome)): `operon test` fails such a
    /// fixture whatever its expected file says, and so does [`check_dir`].
    ///
    /// # Errors
    ///
    /// The rule the outcome breaks.
    pub fn check(&self, manifest: &raw::Manifest, outcome: &raw::Outcome) -> Result<(), super::Refused> {
        let (parent, children, others) = &self.live;
        super::check_outcome(manifest, parent, children, others, outcome)
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

fn from_raw_gvk(kind: &Gvk) -> contract::Gvk {
    contract::Gvk::new(&kind.group, &kind.version, &kind.kind)
}

fn to_raw_gvk(kind: contract::Gvk) -> Gvk {
    Gvk::new(kind.group, kind.version, kind.kind)
}

/// Every fixture in `dir` and its subdirectories but `admission/` and
/// `conversion/` (files `*.yaml`, `*.yml` or `*.json` that are not
/// `*.expected.*`), sorted by name, a subdirectory's after `dir`'s own.
///
/// # Errors
///
/// When the directory cannot be read or a request file is invalid.
pub fn load_dir(dir: &Path, manifest: &raw::Manifest) -> Result<Vec<Fixture>, String> {
    let skip = [fixture::ADMISSION_DIR, fixture::CONVERSION_DIR];
    let cases = fixture::cases_under(dir, &skip).map_err(|error| error.to_string())?;
    cases.iter().map(|case| Fixture::load(&case.path, manifest)).collect()
}

/// The result of a reconcile of `request` in the shape of an expected file,
/// read as the host reads it (`operon_contract`'s rules: `requeue-at`
/// measured from the request's `now`, `observedGeneration` set on a status).
pub fn to_expected(result: &Result<raw::Outcome, raw::Failure>, request: &raw::Request) -> Value {
    let parse = |json: &str| serde_json::from_str::<Value>(json).unwrap_or_else(|_| Value::String(json.to_owned()));
    let generation = parse(&request.object)["metadata"]["generation"].as_i64();
    let status = |text: Option<&str>| {
        text.map(|text| {
            let mut status = parse(text);
            contract::observe_generation(&mut status, generation);
            status
        })
    };
    let observed = match result {
        Ok(outcome) => {
            let now = request.now.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let requeue_after =
                match contract::requeue_after(outcome.requeue_after_ms, outcome.requeue_at.as_deref(), now) {
                    Ok(after) => after,
                    Err(message) => return json!({"error": {"sandbox": format!("malformed outcome: {message}")}}),
                };
            Observed::Outcome(contract::Outcome {
                desired: outcome.desired.iter().map(|json| parse(json)).collect(),
                status: status(outcome.status.as_deref()),
                events: outcome
                    .events
                    .iter()
                    .map(|e| contract::Event {
                        warning: e.warning,
                        reason: e.reason.clone(),
                        message: e.message.clone(),
                    })
                    .collect(),
                requeue_after,
                finalized: outcome.finalized,
                needs_finalizer: Some(outcome.needs_finalizer),
                parent_metadata: outcome.parent_metadata.as_ref().map(|m| contract::ParentMetadata {
                    labels: m.labels.iter().cloned().collect(),
                    annotations: m.annotations.iter().cloned().collect(),
                }),
            })
        }
        Err(raw::Failure::Transient(detail)) => Observed::Error {
            error: ErrorKind::Transient(detail.message.clone()),
            status: status(detail.status.as_deref()),
        },
        Err(raw::Failure::Terminal(detail)) => Observed::Error {
            error: ErrorKind::Terminal(detail.message.clone()),
            status: status(detail.status.as_deref()),
        },
    };
    observed.to_value()
}

/// Reads an expected file as a JSON value, with the outcome keys' defaults
/// filled in (`desired: []`, `status: null`, `events: []`,
/// `requeueAfterMs: null`, `finalized: false`) so a file may leave them out.
///
/// # Errors
///
/// When the file cannot be read or is not an outcome or `error:` (unknown
/// keys included).
pub fn read_expected(path: &Path) -> Result<Value, String> {
    fixture::read_expected(Kind::Reconcile, path).map_err(|error| error.to_string())
}

/// Runs every fixture in `dir` through `R` and panics with every mismatch.
/// With the environment variable `OPERON_BLESS=1`, writes the expected files
/// instead.
///
/// # Panics
///
/// When a fixture cannot be loaded, or an outcome differs from its expected
/// file (the message shows a diff of both as YAML).
pub fn check_dir<R: Reconciler>(dir: impl AsRef<Path>) {
    let dir = dir.as_ref();
    let manifest = crate::run::manifest::<R>();
    let cases = fixture::discover(dir).unwrap_or_else(|error| panic!("{error}"));
    let load = |case: &Case| Fixture::load(&case.path, &manifest);
    let fixtures = cases.requests.iter().map(load).collect::<Result<Vec<_>, _>>().unwrap_or_else(|e| panic!("{e}"));
    let load = |case: &Case| AdmissionFixture::load(&case.path);
    let reviews = cases.reviews.iter().map(load).collect::<Result<Vec<_>, _>>().unwrap_or_else(|e| panic!("{e}"));
    let bless = std::env::var_os("OPERON_BLESS").is_some_and(|value| value == "1");
    let mut report = String::new();
    let mut refused = Vec::new();
    let mut reconciled = Vec::new();
    for f in &fixtures {
        let result = f.run::<R>();
        if let Some(unrecorded) = f.cluster.unrecorded_calls() {
            let _ = write!(report, "\n--- {}: {unrecorded}", f.name);
            continue;
        }
        match result.as_ref().map(|outcome| f.check(&manifest, outcome)) {
            Ok(Err(refusal)) => refused.push((f.name.clone(), refusal)),
            _ => reconciled.push((f.name.clone(), &f.expected_path, Kind::Reconcile, to_expected(&result, &f.request))),
        }
    }
    for (name, refusal) in &refused {
        let _ = write!(report, "\n--- {name}: {refusal} (the host checks this before writing)");
    }
    let conversions = cases
        .conversions
        .iter()
        .map(|case| {
            let file: ConversionFile = fixture::read(&case.path).unwrap_or_else(|error| panic!("{error}"));
            let answer = match super::convert::<R>(&file.objects, &file.desired_api_version) {
                Ok(converted) => json!({ "converted": converted }),
                Err(refused) => json!({ "error": refused }),
            };
            (format!("{}/{}", fixture::CONVERSION_DIR, case.name), &case.expected, Kind::Conversion, answer)
        })
        .collect::<Vec<_>>();
    let runs = reviews
        .iter()
        .map(|f| (format!("{}/{}", fixture::ADMISSION_DIR, f.name), &f.expected_path, Kind::Admission, f.run::<R>()))
        .chain(reconciled)
        .chain(conversions);
    for (name, expected, kind, actual) in runs {
        if bless {
            fixture::write_expected(kind, expected, &actual).unwrap_or_else(|error| panic!("{error}"));
            continue;
        }
        match fixture::check(kind, expected, &actual) {
            Ok(Verdict::Pass) => {}
            Ok(Verdict::Differs(diff)) => {
                let _ = write!(report, "\n--- {name}:\n{diff}");
            }
            Ok(Verdict::Missing(actual)) => {
                let _ = write!(report, "\n--- {name}: no expected file {}\n--- actual\n{actual}", expected.display());
            }
            Err(error) => {
                let _ = write!(report, "\n--- {name}: {error}\n--- actual\n{}", to_yaml(&actual));
            }
        }
    }
    assert!(report.is_empty(), "fixtures in {} differ (OPERON_BLESS=1 rewrites them):{report}", dir.display());
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
        let case = Case::of(path);
        let (review, objects) = ReviewFile::load(path).map_err(|error| error.to_string())?;
        let mut cluster = FakeCluster::new();
        cluster.objects = objects;
        Ok(AdmissionFixture { name: case.name, expected_path: case.expected, review: to_raw_review(review), cluster })
    }

    /// Runs `R::mutate`, then `R::validate` on the mutated object (unless
    /// refused), through the same path as the component; the answer in the
    /// shape of an expected file.
    pub fn run<R: Reconciler>(&self) -> Value {
        let host = self.cluster.scoped(self.review.namespace.as_deref());
        let patched = match crate::run::mutate::<R>(&host, self.review.clone()) {
            Ok(patched) => patched,
            Err(denial) => return fixture::admission_answer(Err(to_contract_denial(denial)), None),
        };
        let mut review = self.review.clone();
        if let Some(object) = &patched {
            review.object = Some(object.clone());
        }
        let patched = patched.map(|json| serde_json::from_str(&json).unwrap_or(Value::String(json)));
        let result = crate::run::validate::<R>(&host, review).map_err(to_contract_denial);
        fixture::admission_answer(result, patched)
    }
}

fn to_contract_denial(denial: raw::Denial) -> contract::Denial {
    contract::Denial { message: denial.message, code: denial.code }
}

fn to_raw_review(review: contract::Review) -> raw::Review {
    let operation = match review.operation {
        contract::Operation::Create => raw::Operation::Create,
        contract::Operation::Update => raw::Operation::Update,
        contract::Operation::Delete => raw::Operation::Delete,
        contract::Operation::Connect => raw::Operation::Connect,
    };
    let user = review.user_info;
    raw::Review {
        uid: review.uid,
        operation,
        kind: to_raw_gvk(review.kind),
        sub_resource: review.sub_resource,
        namespace: review.namespace,
        name: review.name,
        object: review.object,
        old_object: review.old_object,
        user_info: raw::UserInfo { username: user.username, uid: user.uid, groups: user.groups },
        dry_run: review.dry_run,
    }
}

/// Every admission fixture in `dir` and its subdirectories, sorted by name.
///
/// # Errors
///
/// When the directory cannot be read or a review file is invalid.
pub fn load_admission_dir(dir: &Path) -> Result<Vec<AdmissionFixture>, String> {
    let cases = fixture::cases_under(dir, &[]).map_err(|error| error.to_string())?;
    cases.iter().map(|case| AdmissionFixture::load(&case.path)).collect()
}

/// Reads an admission expected file with `warnings: []` and `patched: null`
/// filled in when left out.
///
/// # Errors
///
/// When the file cannot be read or parsed.
pub fn read_admission_expected(path: &Path) -> Result<Value, String> {
    fixture::read_expected(Kind::Admission, path).map_err(|error| error.to_string())
}

/// YAML text of a value, keys in a reading order: an outcome's keys as in
/// the WIT record, then objects with `apiVersion`, `kind`, `metadata`, `spec`
/// first and the rest alphabetically.
pub fn to_yaml(value: &Value) -> String {
    fixture::to_yaml(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AdmissionReview, Context, Denial, Failure, Manifest, Outcome, Request};

    /// Wants a Secret named after the parent; refuses reviews of objects
    /// without `data`.
    struct Echo;

    impl Reconciler for Echo {
        type Object = Value;
        fn manifest() -> Manifest {
            Manifest::new("echo", Gvk::new("", "v1", "ConfigMap")).owns(Gvk::new("", "v1", "Secret"))
        }
        fn reconcile(req: Request<Value>, _: &Context) -> Result<Outcome, Failure> {
            let name = req.object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let children = req.raw_children(&Gvk::new("", "v1", "Secret")).len();
            Ok(Outcome::new()
                .apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}))
                .status(json!({"children": children, "mode": "on"})))
        }
        fn validate(review: AdmissionReview, _: &Context) -> Result<Vec<String>, Denial> {
            match review.object.as_ref().and_then(|o| o.get("data")) {
                Some(_) => Ok(vec![]),
                None => Err(Denial::new("data is required").code(422)),
            }
        }
    }

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::env::temp_dir().join(format!("operon-sdk-fixtures-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("admission")).unwrap();
            Dir(dir)
        }
        fn write(&self, file: &str, text: &str) -> &Dir {
            std::fs::write(self.0.join(file), text).unwrap();
            self
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const REQUEST: &str = "object: {apiVersion: v1, kind: ConfigMap, metadata: {name: shop, namespace: a}}\n\
                           children: [{apiVersion: v1, kind: Secret, metadata: {name: shop, namespace: a}}]\n";
    const EXPECTED: &str = "desired:\n- {apiVersion: v1, kind: Secret, metadata: {name: shop}}\n\
                            status: {children: 1, mode: 'on'}\n\
                            needsFinalizer: false\n";

    fn panic_message(dir: &Path) -> Option<String> {
        let dir = dir.to_path_buf();
        let result = std::panic::catch_unwind(move || check_dir::<Echo>(&dir));
        result.err().map(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
    }

    #[test]
    fn check_dir_should_pass_matching_fixtures_and_show_a_diff_otherwise() {
        let dir = Dir::new("check");
        dir.write("shop.yaml", REQUEST).write("shop.expected.yaml", EXPECTED);
        dir.write("admission/empty.yaml", "review: {object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}}\n");
        dir.write("admission/empty.expected.yaml", "allowed: false\nmessage: data is required\ncode: 422\n");
        assert_eq!(panic_message(&dir.0), None);

        dir.write("shop.expected.yaml", &EXPECTED.replace("children: 1", "children: 2"));
        let message = panic_message(&dir.0).expect("a wrong expectation must fail");
        assert!(message.contains("--- shop:"), "{message}");
        assert!(message.lines().any(|l| l.starts_with('-') && l.contains("children: 2")), "{message}");
        assert!(message.lines().any(|l| l.starts_with('+') && l.contains("children: 1")), "{message}");

        dir.write("shop.expected.yaml", "desird: []\n");
        let message = panic_message(&dir.0).expect("a typo must fail");
        assert!(message.contains("desird"), "{message}");

        std::fs::remove_file(dir.0.join("shop.expected.yaml")).unwrap();
        let message = panic_message(&dir.0).expect("a missing expected file must fail");
        assert!(message.contains("no expected file"), "{message}");

        dir.write("admission/empty.expected.yaml", "allowed: true\n");
        let message = panic_message(&dir.0).expect("a wrong answer must fail");
        assert!(message.contains("+message: data is required"), "{message}");
    }

    #[test]
    fn fixtures_should_be_read_as_operon_test_reads_them() {
        let dir = Dir::new("load");
        dir.write("b.yaml", REQUEST).write("a.json", "{\"object\": {\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\"}}");
        dir.write("a.expected.json", "{}").write("notes.txt", "");
        let manifest = crate::run::manifest::<Echo>();
        let fixtures = load_dir(&dir.0, &manifest).unwrap();
        let names: Vec<&str> = fixtures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(fixtures[0].expected_path, dir.0.join("a.expected.json"));
        assert_eq!(fixtures[1].expected_path, dir.0.join("b.expected.yaml"));
        assert_eq!(fixtures[1].request.children.len(), 1);
        assert_eq!(fixtures[1].request.children[0].objects.len(), 1);

        dir.write("c.yaml", "object: {apiVersion: v1, kind: ConfigMap}\nchildren: [{apiVersion: v1, kind: Pod}]\n");
        let error = load_dir(&dir.0, &manifest).unwrap_err();
        assert!(error.contains("c.yaml") && error.contains("does not own"), "{error}");
    }
}
