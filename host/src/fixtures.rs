//! Offline guest tests (`operon test MODULE DIR`): run request fixtures
//! through a module, with no cluster, and compare each outcome with the
//! expected file beside it (golden tests).
//!
//! The files (`NAME.yaml` beside `NAME.expected.yaml`, and admission
//! reviews in `admission/`), how they are found, read and compared, are
//! [`operon_contract::fixture`]'s, shared with the Rust SDK's
//! `testing::fixtures`; this module runs them through a component.
//!
//! An outcome is also checked as the live controller would check it before
//! writing anything ([`operon_contract::rules`], what `apply::validate`
//! and `apply::check_ownership` call, with the policy `operon run --module`
//! gives the module, against the fixture's `cluster` and `related`
//! objects): an outcome the host would refuse fails the fixture, naming the
//! rule, whatever the expected file says. Every SDK's own runner applies
//! the same rules (`contract/rules/`).
//!
//! A fixture's `egress:` answers the guest's outbound calls (contract
//! 0.2), with no network ([`crate::contract::egress::Replay`]); a call it
//! does not hold fails the fixture, naming the call.
//!
//! # Admission fixtures
//!
//! An admission review goes through `mutate`, then (unless refused) through
//! `validate` with the mutated object, as the API server calls the two
//! webhooks, and the expected file holds the combined answer. A module that
//! does not export admission fails every admission fixture, saying so.

use crate::contract::fixture::{self, Case, ErrorKind, Kind, Observed, RequestFile, ReviewFile, Verdict};
use crate::contract::rules::{self, Refused};
use crate::contract::{Gvk, Outcome, Review, Selector};
use crate::runtime::{Module, ObjectReader, ReadError};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// Problems with the fixture files themselves (not test failures).
pub use crate::contract::fixture::Error;

/// The result of running a directory of fixtures.
#[derive(Debug, Default)]
pub struct Report {
    /// Fixtures whose outcome matched (with `--update`: whose expected file
    /// already said it).
    pub passed: usize,
    /// With `--update`: the expected files written (new or changed).
    pub written: Vec<std::path::PathBuf>,
    /// Fixture names that did not match, or could not run.
    pub failed: Vec<String>,
}

/// How [`run_dir_with`] runs and prints.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Write the expected files from the outcomes instead of comparing
    /// (`operon test --update`); an outcome the host would refuse is still
    /// a failure, and nothing is written for it.
    pub update: bool,
    /// Colour the verdicts and diffs (ANSI): only for a terminal, or
    /// `--color always`.
    pub color: bool,
}

/// Run every fixture in `dir` through `module`, writing a line per fixture
/// (and a diff per mismatch) to `out`, then `N passed, M failed`.
/// With `update`, expected files are (re)written instead of compared.
pub fn run_dir(module: &Module, dir: &Path, update: bool, out: &mut dyn Write) -> Result<Report, Error> {
    run_dir_with(module, dir, Options { update, color: false }, out)
}

/// [`run_dir`] with [`Options`]. With `update`, each line says what was
/// done (`wrote   NAME → FILE`, or `ok      NAME (unchanged)`), and the
/// last line counts them: `N written, M unchanged, K failed`.
pub fn run_dir_with(module: &Module, dir: &Path, options: Options, out: &mut dyn Write) -> Result<Report, Error> {
    let cases = fixture::discover(dir)?;
    let mut report = Report::default();
    let paint = Paint(options.color);
    let all = (cases.requests.iter().map(|c| (c, Kind::Reconcile)))
        .chain(cases.reviews.iter().map(|c| (c, Kind::Admission)))
        .chain(cases.conversions.iter().map(|c| (c, Kind::Conversion)));
    for (case, kind) in all {
        let (name, result) = match kind {
            Kind::Reconcile => (case.name.clone(), run_one(module, case, options.update)),
            Kind::Admission => {
                (format!("{}/{}", fixture::ADMISSION_DIR, case.name), run_review(module, case, options.update))
            }
            Kind::Conversion => {
                (format!("{}/{}", fixture::CONVERSION_DIR, case.name), run_conversion(module, case, options.update))
            }
        };
        let _ = match result {
            Ok(Concluded::Pass) if options.update => {
                report.passed += 1;
                writeln!(out, "{}      {name} (unchanged)", paint.green("ok"))
            }
            Ok(Concluded::Pass) => {
                report.passed += 1;
                writeln!(out, "{}      {name}", paint.green("ok"))
            }
            Ok(Concluded::Wrote) => {
                report.written.push(case.expected.clone());
                let file = case.expected.strip_prefix(dir).unwrap_or(&case.expected);
                writeln!(out, "{}   {name} → {}", paint.yellow("wrote"), file.display())
            }
            Ok(Concluded::Differs(diff)) => {
                report.failed.push(name.clone());
                writeln!(out, "{}  {name}\n{}", paint.red("FAILED"), paint.diff(&diff))
            }
            Err(e) => {
                report.failed.push(name.clone());
                writeln!(out, "{}  {name}: {e}", paint.red("FAILED"))
            }
        };
    }
    let _ = if options.update {
        writeln!(out, "{} written, {} unchanged, {} failed", report.written.len(), report.passed, report.failed.len())
    } else {
        writeln!(out, "{} passed, {} failed", report.passed, report.failed.len())
    };
    Ok(report)
}

/// ANSI colours, or none.
struct Paint(bool);

impl Paint {
    fn wrap(&self, code: &str, text: &str) -> String {
        if self.0 { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_string() }
    }
    fn green(&self, text: &str) -> String {
        self.wrap("32", text)
    }
    fn red(&self, text: &str) -> String {
        self.wrap("31", text)
    }
    fn yellow(&self, text: &str) -> String {
        self.wrap("33", text)
    }
    /// A unified diff with removed lines red and added lines green.
    fn diff(&self, diff: &str) -> String {
        if !self.0 {
            return diff.to_string();
        }
        diff.split_inclusive('\n')
            .map(|line| match line.as_bytes().first() {
                Some(b'-') if !line.starts_with("---") => self.red(line.trim_end_matches('\n')) + "\n",
                Some(b'+') if !line.starts_with("+++") => self.green(line.trim_end_matches('\n')) + "\n",
                _ => line.to_string(),
            })
            .collect()
    }
}

/// What became of one fixture.
enum Concluded {
    /// The outcome matched (or, updating, the file already said it).
    Pass,
    /// Updating: the expected file was written (new or changed).
    Wrote,
    /// A mismatch, a refused outcome, or a missing expected file.
    Differs(String),
}

/// Writes or checks the expected file of a case.
fn conclude(kind: Kind, case: &Case, actual: &Value, update: bool) -> Result<Concluded, Error> {
    let verdict = fixture::check(kind, &case.expected, actual);
    if update {
        if matches!(verdict, Ok(Verdict::Pass)) {
            return Ok(Concluded::Pass);
        }
        fixture::write_expected(kind, &case.expected, actual)?;
        return Ok(Concluded::Wrote);
    }
    Ok(match verdict? {
        Verdict::Pass => Concluded::Pass,
        Verdict::Differs(diff) => Concluded::Differs(diff),
        Verdict::Missing(actual) => Concluded::Differs(format!(
            "  no expected file {}; write it with `operon test --update`, then review it\n  got:\n{}",
            case.expected.display(),
            indent(&actual)
        )),
    })
}

/// One request fixture.
fn run_one(module: &Module, case: &Case, update: bool) -> Result<Concluded, Error> {
    let invalid = |reason: String| Error::Invalid { path: case.path.clone(), reason };
    let file = RequestFile::load(&case.path)?;
    let live = LiveCheck::of(&file);
    let request = file.request(&module.manifest().owns).map_err(invalid)?;
    let reader = FixtureReader { objects: file.visible(), namespace: file.namespace() };
    // Outbound calls are answered from the fixture's `egress`, never the network.
    let replay = Arc::new(crate::contract::egress::Replay::new(file.egress.clone()));
    let answered = module.reconcile_with(&request, Arc::new(reader), Some(replay.clone()));
    if let Some(unrecorded) = replay.verdict() {
        return Ok(Concluded::Differs(format!("  {unrecorded}")));
    }
    let observed = match answered {
        Ok(Ok(outcome)) => {
            if let Err(refused) = live.check(module.manifest(), &outcome) {
                return Ok(Concluded::Differs(format!("  {refused} (the live controller checks this before writing)")));
            }
            Observed::Outcome(outcome)
        }
        Ok(Err(crate::contract::Failed { failure, status })) => Observed::Error {
            error: match failure {
                crate::runtime::Failure::Transient(m) => ErrorKind::Transient(m),
                crate::runtime::Failure::Terminal(m) => ErrorKind::Terminal(m),
            },
            status,
        },
        Err(e) => Observed::Error { error: ErrorKind::Sandbox(e.to_string()), status: None },
    };
    conclude(Kind::Reconcile, case, &observed.to_value(), update)
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
    fn get(&self, kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<String>, ReadError> {
        Ok(self
            .in_scope(kind, namespace)
            .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
            .map(Value::to_string))
    }

    fn list(&self, kind: &Gvk, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<String>, ReadError> {
        let selector = Selector::parse(selector.unwrap_or_default()).map_err(|e| ReadError::Selector(e.to_string()))?;
        Ok(self.in_scope(kind, namespace).filter(|o| selector.matches_object(o)).map(Value::to_string).collect())
    }
}

/// What the live controller checks an outcome against: the parent, its
/// children (the host finds them by owner, so they are the parent's), and
/// the other objects of the fixture's cluster.
pub(crate) struct LiveCheck {
    parent: Value,
    children: Vec<Value>,
    others: Vec<Value>,
}

impl LiveCheck {
    pub(crate) fn of(f: &RequestFile) -> LiveCheck {
        let others = f.cluster.iter().chain(&f.related).cloned().collect();
        LiveCheck { parent: f.object.clone(), children: f.children.clone(), others }
    }

    /// The contract's rules with the policy of `operon run --module`
    /// ([`rules::check_offline`]: the controller's default grants and
    /// limits, then the ownership check): what the Rust SDK's runner calls
    /// too.
    pub(crate) fn check(&self, manifest: &crate::contract::Manifest, outcome: &Outcome) -> Result<(), Refused> {
        let reasons = outcome.events.iter().map(|e| e.reason.as_str());
        rules::check_offline(
            &manifest.name,
            &manifest.owns,
            &self.parent,
            &self.children,
            &self.others,
            &outcome.desired,
            reasons,
        )
    }
}

/// Mutate, then validate the mutated object: the combined answer, every
/// key present (`warnings`, `patched`), or `error` when the sandbox stopped
/// the guest.
fn admit(module: &Module, review: &Review, reader: Arc<dyn ObjectReader>) -> Value {
    // No webhook here: the module's own timeout bounds each call.
    let deadline = module.limits().timeout;
    let patched = match module.mutate(review, reader.clone(), deadline) {
        Ok(Ok(patched)) => patched,
        Ok(Err(denial)) => return fixture::admission_answer(Err(denial), None),
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
        Ok(result) => fixture::admission_answer(result, patched),
        Err(e) => serde_json::json!({ "error": format!("validate {e}") }),
    }
}

/// One admission fixture.
fn run_review(module: &Module, case: &Case, update: bool) -> Result<Concluded, Error> {
    if !module.admission() {
        return Ok(Concluded::Differs(format!(
            "  the module does not export {}/admission@{}: build it for the reconciler-with-admission world \
             (Rust: `operon_sdk::export!(MyReconciler with admission)`) or remove {}/",
            crate::runtime::WIT_PACKAGE,
            module.info().wit_version,
            fixture::ADMISSION_DIR
        )));
    }
    let (review, cluster) = ReviewFile::load(&case.path)?;
    let reader = FixtureReader { objects: cluster, namespace: review.namespace.clone() };
    let observed = admit(module, &review, Arc::new(reader));
    conclude(Kind::Admission, case, &observed, update)
}

/// One conversion fixture (contract 0.2's `convert`).
fn run_conversion(module: &Module, case: &Case, update: bool) -> Result<Concluded, Error> {
    if !module.conversion() {
        return Ok(Concluded::Differs(format!(
            "  the module does not export {}/conversion (contract 0.2): build it for the \
             reconciler-with-conversion world or remove {}/",
            crate::runtime::WIT_PACKAGE,
            fixture::CONVERSION_DIR
        )));
    }
    let file: fixture::ConversionFile = fixture::read(&case.path)?;
    let observed = match module.convert(&file.objects, &file.desired_api_version, std::time::Duration::from_secs(10)) {
        Ok(Ok(converted)) => serde_json::json!({ "converted": converted }),
        Ok(Err(refused)) => serde_json::json!({ "error": refused }),
        Err(e) => serde_json::json!({ "error": format!("sandbox: {e}") }),
    };
    conclude(Kind::Conversion, case, &observed, update)
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_the_live_controller_would_refuse_should_be_caught_naming_the_rule() {
        let fixture: RequestFile = fixture::parse(
            "object: {apiVersion: example.operon.dev/v1alpha1, kind: WebApp, metadata: {name: shop, namespace: a, uid: u1}}\n\
             children: [{apiVersion: v1, kind: Service, metadata: {name: shop, namespace: a}}]\n\
             cluster: [{apiVersion: v1, kind: Service, metadata: {name: taken, namespace: a,\n\
               ownerReferences: [{apiVersion: v1, kind: Other, name: o, uid: u2, controller: true}]}}]\n",
            false,
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
            updates: Vec::new(),
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

    /// One shared rule case (`contract/rules/cases/`), with its pad applied.
    pub(crate) fn rule_cases() -> Vec<(String, Value)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../contract/rules/cases");
        let mut cases: Vec<(String, Value)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .map(|p| {
                let case = rules::padded(serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap());
                (p.file_stem().unwrap().to_string_lossy().into_owned(), case)
            })
            .collect();
        cases.sort_by(|a, b| a.0.cmp(&b.0));
        assert!(cases.len() >= 10, "the shared cases are in {}", dir.display());
        cases
    }

    #[test]
    fn operon_test_should_give_every_shared_rule_case_its_verdict() {
        for (name, case) in rule_cases() {
            let file: RequestFile = serde_json::from_value(case["request"].clone()).unwrap();
            let manifest = crate::contract::Manifest {
                name: case["manifest"]["name"].as_str().unwrap().into(),
                for_kind: Gvk::of(&file.object).unwrap(),
                owns: serde_json::from_value(case["manifest"]["owns"].clone()).unwrap(),
                watches: Vec::new(),
                reads: Vec::new(),
                finalizer: None,
                updates: Vec::new(),
            };
            let outcome: Outcome = serde_json::from_value(case["outcome"].clone()).unwrap();
            let verdict = LiveCheck::of(&file).check(&manifest, &outcome).err().map(|r| r.0);
            assert_eq!(verdict.as_deref(), case["refused"].as_str(), "case {name}");
        }
    }

    #[test]
    fn the_offline_policy_should_be_what_operon_run_gives_a_module() {
        use crate::contract::rules::Policy;
        let config = crate::pipeline::Config::default();
        let p = Policy::offline("x", &[]);
        assert_eq!(p.namespaces, config.grants.namespaces);
        assert_eq!(
            (p.cluster_scoped, p.max_desired, p.max_events),
            (config.grants.cluster_scoped, config.max_desired, config.max_events)
        );
        assert!(!config.grants.adopt, "offline runners never adopt");
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
