//! Run reconcilers natively, without wasm and without a cluster.
//!
//! [`reconcile`] goes through [`run::reconcile`](crate::run::reconcile), the
//! function the component export calls, with a [`FakeCluster`] standing in
//! for the host's cache: what passes here passes in the component (barring
//! differences between native code and wasm, such as integer widths of
//! `usize`).
//!
//! Every outcome is also checked as the host checks it before writing
//! anything ([`operon_contract::rules`], the host's own code: owned kinds,
//! namespaces, names, sizes, ownership of the cluster's objects, with the
//! policy of `operon run --module`). An outcome the host would refuse makes
//! [`reconcile`] panic naming the rule; [`try_reconcile`] returns it.
//!
//! ```
//! use operon_sdk::testing::{self, FakeCluster};
//! # use operon_sdk::{Context, Failure, Gvk, Manifest, Outcome, Reconciler, Request};
//! # use serde_json::{json, Value};
//! # struct Mirror;
//! # impl Reconciler for Mirror {
//! #     type Object = Value;
//! #     fn manifest() -> Manifest {
//! #         Manifest::new("mirror", Gvk::new("", "v1", "ConfigMap")).reads(Gvk::new("", "v1", "Secret"))
//! #     }
//! #     fn reconcile(req: Request<Value>, ctx: &Context) -> Result<Outcome, Failure> {
//! #         let secrets: Vec<Value> = ctx.list_of(&Gvk::new("", "v1", "Secret"), None, "team=web")?;
//! #         Ok(Outcome::new().status(json!({"secrets": secrets.len()})))
//! #     }
//! # }
//!
//! let cluster = FakeCluster::new()
//!     .with(json!({"apiVersion": "v1", "kind": "Secret",
//!                  "metadata": {"name": "a", "namespace": "shop", "labels": {"team": "web"}}}))
//!     .with(json!({"apiVersion": "v1", "kind": "Secret",
//!                  "metadata": {"name": "b", "namespace": "other", "labels": {"team": "web"}}}));
//! let request = testing::request(json!({
//!     "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "namespace": "shop"},
//! }))
//! .build::<Mirror>();
//! let outcome = testing::reconcile::<Mirror>(&cluster, request).unwrap();
//! assert_eq!(outcome.status.unwrap()["secrets"], 1); // only the parent's namespace
//! ```

mod selector;

#[cfg(feature = "fixtures")]
pub mod fixtures;

use std::sync::Mutex;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::request::Head;
use serde::Serialize;

use crate::admission::{Operation, UserInfo};
use crate::outcome::to_object;
use crate::{Denial, Event, Failure, Gvk, Host, Level, ObjectKind, Readiness, ReadinessStatus, Reconciler, raw};

pub use operon_contract::rules::Refused;
pub use selector::{Selector, SelectorError};

/// An in-memory stand-in for the host's cache: the objects that
/// [`Context::get`] and [`Context::list`] see.
///
/// A read without a namespace means the parent's namespace (as in the host)
/// when it goes through [`reconcile`]; used directly as a [`Host`], it means
/// any namespace. Cluster-scoped objects (no `metadata.namespace`) match any
/// namespace. Unlike the host, the fake lets every kind be read: check
/// [`Manifest::reads`] yourself.
///
/// [`Context::get`]: crate::Context::get
/// [`Context::list`]: crate::Context::list
/// [`Manifest::reads`]: crate::Manifest::reads
#[derive(Debug, Default)]
pub struct FakeCluster {
    objects: Vec<Value>,
    logs: Mutex<Vec<LogLine>>,
    /// Outbound calls are answered from these recorded exchanges
    /// ([`FakeCluster::with_egress`]); none by default.
    egress: operon_contract::egress::Replay,
}

/// A line logged through [`Context::log`](crate::Context::log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Severity.
    pub level: Level,
    /// Text.
    pub message: String,
    /// Structured fields.
    pub fields: Vec<(String, String)>,
}

impl FakeCluster {
    /// An empty cluster.
    pub fn new() -> FakeCluster {
        FakeCluster::default()
    }

    /// Adds an object (with `apiVersion`, `kind` and `metadata.name`).
    ///
    /// # Panics
    ///
    /// When `object` cannot be used as an object (it must serialize to a JSON object with `apiVersion` and `kind`).
    pub fn with(mut self, object: impl Serialize) -> FakeCluster {
        self.insert(object);
        self
    }

    /// Adds an object.
    ///
    /// # Panics
    ///
    /// As [`with`](FakeCluster::with).
    pub fn insert(&mut self, object: impl Serialize) {
        match to_object(object, None) {
            Ok(map) => self.objects.push(Value::Object(map)),
            Err(failure) => panic!("FakeCluster::insert: {}", failure.message()),
        }
    }

    /// Answers [`Context::http`](crate::Context::http) calls from these
    /// recorded exchanges, as `operon test` does ([`Replay`]): each call
    /// takes the first unused exchange with the same method, URL, body and
    /// credential; any other call is answered `not-recorded`, and
    /// [`FakeCluster::unrecorded_calls`] names it.
    ///
    /// [`Replay`]: operon_contract::egress::Replay
    pub fn with_egress(mut self, exchanges: Vec<crate::Exchange>) -> FakeCluster {
        self.egress = operon_contract::egress::Replay::new(exchanges);
        self
    }

    /// Why the calls made so far fail a test, if one was not recorded.
    pub fn unrecorded_calls(&self) -> Option<String> {
        self.egress.verdict()
    }

    /// Removes and returns what was logged so far.
    pub fn take_logs(&self) -> Vec<LogLine> {
        std::mem::take(&mut *self.logs.lock().unwrap_or_else(|poison| poison.into_inner()))
    }

    fn scoped<'a>(&'a self, namespace: Option<&'a str>) -> Scoped<'a> {
        Scoped { cluster: self, namespace }
    }
}

/// A [`FakeCluster`] read on behalf of a parent in `namespace`.
struct Scoped<'a> {
    cluster: &'a FakeCluster,
    namespace: Option<&'a str>,
}

impl Scoped<'_> {
    fn candidates<'s>(
        &'s self,
        kind: &'s Gvk,
        namespace: Option<&'s str>,
    ) -> impl Iterator<Item = (&'s Value, Head)> + 's {
        let namespace = namespace.or(self.namespace);
        self.cluster.objects.iter().filter_map(move |object| {
            let head = Head::deserialize_from(object)?;
            let in_namespace = match (namespace, head.metadata.namespace.as_deref()) {
                (Some(wanted), Some(actual)) => wanted == actual,
                _ => true,
            };
            (kind.matches(&head.api_version, &head.kind) && in_namespace).then_some((object, head))
        })
    }
}

impl Host for Scoped<'_> {
    fn log(&self, level: Level, message: &str, fields: &[(String, String)]) {
        let line = LogLine { level, message: message.to_owned(), fields: fields.to_vec() };
        self.cluster.logs.lock().unwrap_or_else(|poison| poison.into_inner()).push(line);
    }

    fn get(&self, reference: &raw::ObjectRef) -> Result<Option<String>, String> {
        Ok(self
            .candidates(&reference.kind, reference.namespace.as_deref())
            .find(|(_, head)| head.metadata.name == reference.name)
            .map(|(object, _)| object.to_string()))
    }

    fn list(&self, kind: &Gvk, namespace: Option<&str>, label_selector: Option<&str>) -> Result<Vec<String>, String> {
        let selector = Selector::parse(label_selector.unwrap_or("")).map_err(|error| error.to_string())?;
        let mut found: Vec<(&Value, Head)> =
            self.candidates(kind, namespace).filter(|(_, head)| selector.matches(&head.metadata.labels)).collect();
        found.sort_by(|(_, a), (_, b)| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(found.into_iter().map(|(object, _)| object.to_string()).collect())
    }

    fn fetch(&self, request: &crate::HttpRequest) -> Result<crate::HttpResponse, crate::HttpError> {
        self.cluster.egress.fetch(request)
    }
}

impl Host for FakeCluster {
    fn fetch(&self, request: &crate::HttpRequest) -> Result<crate::HttpResponse, crate::HttpError> {
        self.egress.fetch(request)
    }

    fn log(&self, level: Level, message: &str, fields: &[(String, String)]) {
        self.scoped(None).log(level, message, fields);
    }

    fn get(&self, reference: &raw::ObjectRef) -> Result<Option<String>, String> {
        self.scoped(None).get(reference)
    }

    fn list(&self, kind: &Gvk, namespace: Option<&str>, label_selector: Option<&str>) -> Result<Vec<String>, String> {
        self.scoped(None).list(kind, namespace, label_selector)
    }
}

impl Head {
    fn deserialize_from(object: &Value) -> Option<Head> {
        <Head as serde::Deserialize>::deserialize(object).ok()
    }
}

/// Starts a request for `parent` (a full object, with `apiVersion`, `kind`
/// and `metadata`).
///
/// # Panics
///
/// When `parent` cannot be used as an object (it must serialize to a JSON object with `apiVersion` and `kind`).
pub fn request(parent: impl Serialize) -> RequestBuilder {
    match to_object(parent, None) {
        Ok(object) => RequestBuilder {
            object: Value::Object(object),
            children: Vec::new(),
            related: Vec::new(),
            finalizing: false,
            attempt: 0,
            now: EPOCH.to_owned(),
        },
        Err(failure) => panic!("testing::request: {}", failure.message()),
    }
}

/// Builds a [`raw::Request`] the way the host does. Made by [`request`].
#[derive(Debug, Clone)]
#[must_use = "call build::<YourReconciler>()"]
pub struct RequestBuilder {
    object: Value,
    /// Each child, with the readiness the test states (else rated).
    children: Vec<(Value, Option<Readiness>)>,
    related: Vec<Value>,
    finalizing: bool,
    attempt: u32,
    now: String,
}

/// The time of a request that does not set one: the Unix epoch, as a fixture
/// without `now:`, so no test depends on when it runs.
pub const EPOCH: &str = "1970-01-01T00:00:00.000Z";

impl RequestBuilder {
    /// Adds an existing child (of a kind in `manifest.owns`).
    ///
    /// # Panics
    ///
    /// When `child` cannot be used as an object (it must serialize to a JSON object with `apiVersion` and `kind`).
    /// Its readiness is rated as the host rates it (kstatus's rules, from
    /// `operon_contract::readiness`).
    pub fn child(mut self, child: impl Serialize) -> RequestBuilder {
        match to_object(child, None) {
            Ok(object) => self.children.push((Value::Object(object), None)),
            Err(failure) => panic!("RequestBuilder::child: {}", failure.message()),
        }
        self
    }

    /// Adds an existing child with the readiness the test states, instead
    /// of the one its fields give.
    ///
    /// # Panics
    ///
    /// As [`child`](RequestBuilder::child).
    pub fn child_with_readiness(mut self, child: impl Serialize, readiness: Readiness) -> RequestBuilder {
        match to_object(child, None) {
            Ok(object) => self.children.push((Value::Object(object), Some(readiness))),
            Err(failure) => panic!("RequestBuilder::child_with_readiness: {}", failure.message()),
        }
        self
    }

    /// Sets the host's clock for this call (RFC 3339, as
    /// `2026-11-26T09:00:00.000Z`); the default is [`EPOCH`].
    pub fn now(mut self, now: impl Into<String>) -> RequestBuilder {
        self.now = now.into();
        self
    }

    /// Adds a related object (of a watched kind).
    ///
    /// # Panics
    ///
    /// When `object` cannot be used as an object (it must serialize to a JSON object with `apiVersion` and `kind`).
    pub fn related(mut self, object: impl Serialize) -> RequestBuilder {
        match to_object(object, None) {
            Ok(object) => self.related.push(Value::Object(object)),
            Err(failure) => panic!("RequestBuilder::related: {}", failure.message()),
        }
        self
    }

    /// Marks the parent as being deleted.
    pub fn finalizing(mut self, finalizing: bool) -> RequestBuilder {
        self.finalizing = finalizing;
        self
    }

    /// Sets how many times in a row the parent failed before.
    pub fn attempt(mut self, attempt: u32) -> RequestBuilder {
        self.attempt = attempt;
        self
    }

    /// The WIT request for `R`: children grouped by kind in the order of
    /// `R::manifest().owns` (empty groups included), each group sorted by
    /// namespace then name, as the host does.
    ///
    /// # Panics
    ///
    /// When a child is not of a kind `R` owns.
    pub fn build<R: Reconciler>(self) -> raw::Request {
        match self.try_build(&R::manifest().into_raw()) {
            Ok(request) => request,
            Err(message) => panic!("RequestBuilder::build: {message}"),
        }
    }

    /// As [`build`](RequestBuilder::build), against a manifest.
    ///
    /// # Errors
    ///
    /// When a child is not of a kind the manifest owns.
    pub fn try_build(self, manifest: &raw::Manifest) -> Result<raw::Request, String> {
        let mut groups: Vec<raw::Children> =
            manifest.owns.iter().map(|kind| raw::Children { kind: kind.clone(), objects: Vec::new() }).collect();
        let mut children: Vec<(Head, Value, Option<Readiness>)> = self
            .children
            .into_iter()
            .map(|(child, rated)| (Head::deserialize_from(&child).unwrap_or_default(), child, rated))
            .collect();
        children.sort_by(|(a, ..), (b, ..)| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        for (head, child, rated) in children {
            let Some(group) = groups.iter_mut().find(|group| group.kind.matches(&head.api_version, &head.kind)) else {
                return Err(format!(
                    "child {} ({} {}) is not of a kind the manifest owns",
                    head.describe(),
                    head.api_version,
                    head.kind
                ));
            };
            let rated = rated.unwrap_or_else(|| Readiness::of(&child));
            group.objects.push(raw::Child { object: child.to_string(), readiness: raw_readiness(rated) });
        }
        Ok(raw::Request {
            object: self.object.to_string(),
            children: groups,
            related: self.related.iter().map(Value::to_string).collect(),
            finalizing: self.finalizing,
            attempt: self.attempt,
            now: self.now,
        })
    }
}

/// A [`raw::Outcome`] parsed back into JSON values, for assertions.
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciled {
    /// The desired objects, in the order the reconciler applied them.
    pub desired: Vec<Value>,
    /// The new status, `None` to leave it untouched.
    pub status: Option<Value>,
    /// The events.
    pub events: Vec<Event>,
    /// When to reconcile again.
    pub requeue_after: Option<Duration>,
    /// When to reconcile again, as a time (RFC 3339).
    pub requeue_at: Option<String>,
    /// Whether clean-up is complete.
    pub finalized: bool,
    /// Whether the parent keeps the manifest's finalizer.
    pub needs_finalizer: bool,
    /// The labels and annotations kept on the parent, if the outcome says.
    pub parent_metadata: Option<raw::ParentMetadata>,
}

impl Reconciled {
    /// Parses a raw outcome.
    ///
    /// # Panics
    ///
    /// When an object is not JSON (never the case for an outcome made by
    /// this SDK).
    pub fn from_raw(outcome: raw::Outcome) -> Reconciled {
        let parse = |json: &str| serde_json::from_str::<Value>(json).expect("the outcome holds JSON");
        Reconciled {
            desired: outcome.desired.iter().map(|json| parse(json)).collect(),
            status: outcome.status.as_deref().map(parse),
            events: outcome.events,
            requeue_after: outcome.requeue_after_ms.map(Duration::from_millis),
            requeue_at: outcome.requeue_at,
            finalized: outcome.finalized,
            needs_finalizer: outcome.needs_finalizer,
            parent_metadata: outcome.parent_metadata,
        }
    }

    /// The desired object of `kind` (`Deployment`) called `name`.
    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.desired.iter().find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
    }

    /// The desired object of `K`'s kind called `name`, typed.
    ///
    /// # Panics
    ///
    /// When it does not deserialize into `K`.
    pub fn get<K: ObjectKind + DeserializeOwned>(&self, name: &str) -> Option<K> {
        let kind = K::gvk();
        let object = self.desired.iter().find(|object| {
            kind.matches(object["apiVersion"].as_str().unwrap_or(""), object["kind"].as_str().unwrap_or(""))
                && object["metadata"]["name"] == name
        })?;
        Some(serde_json::from_value(object.clone()).unwrap_or_else(|error| panic!("desired {kind} {name}: {error}")))
    }
}

/// Runs `R` on `request` natively, through [`run::reconcile`](crate::run::reconcile)
/// with `cluster` as the host (reads without a namespace use the parent's).
///
/// # Errors
///
/// The reconcile's failure.
///
/// # Panics
///
/// When the host would refuse the outcome (the message names the rule):
/// see [`try_reconcile`].
pub fn reconcile<R: Reconciler>(cluster: &FakeCluster, request: raw::Request) -> Result<Reconciled, Failure> {
    match try_reconcile::<R>(cluster, request) {
        Ok(result) => result,
        Err(refused) => panic!("testing::reconcile: {refused} (the host checks this before writing)"),
    }
}

/// As [`reconcile`], and the outcome checked as the host checks it before
/// writing (see [the module](self)): `Err` when the host would refuse it.
///
/// # Errors
///
/// The rule the outcome breaks.
pub fn try_reconcile<R: Reconciler>(
    cluster: &FakeCluster,
    request: raw::Request,
) -> Result<Result<Reconciled, Failure>, Refused> {
    let head: Head = serde_json::from_str(&request.object).unwrap_or_default();
    let host = cluster.scoped(head.metadata.namespace.as_deref());
    let manifest = crate::run::manifest::<R>();
    let children: Vec<Value> = request
        .children
        .iter()
        .flat_map(|group| group.objects.iter().filter_map(|child| serde_json::from_str(&child.object).ok()))
        .collect();
    let parent: Value = serde_json::from_str(&request.object).unwrap_or_default();
    match crate::run::reconcile::<R>(&host, request) {
        Ok(outcome) => {
            check_outcome(&manifest, &parent, &children, &cluster.objects, &outcome)?;
            Ok(Ok(Reconciled::from_raw(outcome)))
        }
        Err(failure) => Ok(Err(Failure::from(failure))),
    }
}

/// The host's checks of an outcome before it writes anything
/// ([`operon_contract::rules`] with the policy of `operon run --module`):
/// `children` are the parent's (never a take-over), `cluster` the other
/// objects a child could be written over.
///
/// # Errors
///
/// The rule the outcome breaks.
pub fn check_outcome(
    manifest: &raw::Manifest,
    parent: &Value,
    children: &[Value],
    cluster: &[Value],
    outcome: &raw::Outcome,
) -> Result<(), Refused> {
    let kind = |k: &Gvk| operon_contract::Gvk::new(&k.group, &k.version, &k.kind);
    let owns: Vec<operon_contract::Gvk> = manifest.owns.iter().map(kind).collect();
    let desired: Vec<Value> = outcome
        .desired
        .iter()
        .map(|json| serde_json::from_str(json).map_err(|e| Refused(format!("a desired object is not JSON: {e}"))))
        .collect::<Result<_, _>>()?;
    let reasons = outcome.events.iter().map(|e| e.reason.as_str());
    operon_contract::rules::check_offline(&manifest.name, &owns, parent, children, cluster, &desired, reasons)
}

/// Starts an admission review of `object` (a full object, with
/// `apiVersion`, `kind` and `metadata`): a `CREATE` by user `test`, unless
/// changed with [`ReviewBuilder::update`] or [`ReviewBuilder::delete`].
///
/// ```
/// use operon_sdk::testing::{self, FakeCluster};
/// # use operon_sdk::{AdmissionReview, Context, Denial, Failure, Gvk, Manifest, Outcome, Reconciler, Request};
/// # use serde_json::{json, Value};
/// # struct Named;
/// # impl Reconciler for Named {
/// #     type Object = Value;
/// #     fn manifest() -> Manifest { Manifest::new("named", Gvk::new("", "v1", "ConfigMap")) }
/// #     fn reconcile(_: Request<Value>, _: &Context) -> Result<Outcome, Failure> { Ok(Outcome::new()) }
/// #     fn validate(review: AdmissionReview, _: &Context) -> Result<Vec<String>, Denial> {
/// #         if review.name.starts_with("cm-") { Ok(vec![]) } else { Err(Denial::new("names start with cm-")) }
/// #     }
/// # }
/// let review = testing::review(json!({
///     "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "shop"},
/// }))
/// .build();
/// let denial = testing::validate::<Named>(&FakeCluster::new(), review).unwrap_err();
/// assert_eq!(denial.message(), "names start with cm-");
/// ```
///
/// # Panics
///
/// When `object` cannot be used as an object (it must serialize to a JSON
/// object with `apiVersion` and `kind`).
pub fn review(object: impl Serialize) -> ReviewBuilder {
    match to_object(object, None) {
        Ok(object) => ReviewBuilder {
            operation: Operation::Create,
            object: Some(Value::Object(object)),
            old_object: None,
            user_info: UserInfo { username: "test".into(), uid: String::new(), groups: vec![] },
            dry_run: false,
        },
        Err(failure) => panic!("testing::review: {}", failure.message()),
    }
}

/// Builds a [`raw::Review`] the way the host does: kind, namespace and name
/// from the object. Made by [`review`].
#[derive(Debug, Clone)]
#[must_use = "call build()"]
pub struct ReviewBuilder {
    operation: Operation,
    object: Option<Value>,
    old_object: Option<Value>,
    user_info: UserInfo,
    dry_run: bool,
}

impl ReviewBuilder {
    /// An `UPDATE` from `old` to the object.
    ///
    /// # Panics
    ///
    /// When `old` cannot be used as an object.
    pub fn update(mut self, old: impl Serialize) -> ReviewBuilder {
        match to_object(old, None) {
            Ok(old) => self.old_object = Some(Value::Object(old)),
            Err(failure) => panic!("ReviewBuilder::update: {}", failure.message()),
        }
        self.operation = Operation::Update;
        self
    }

    /// A `DELETE` of the object: it becomes the old object, and the review
    /// has none.
    pub fn delete(mut self) -> ReviewBuilder {
        self.old_object = self.object.take().or(self.old_object);
        self.operation = Operation::Delete;
        self
    }

    /// Sets the operation as is (`CONNECT`, say).
    pub fn operation(mut self, operation: Operation) -> ReviewBuilder {
        self.operation = operation;
        self
    }

    /// Who asks.
    pub fn user(mut self, username: &str, groups: &[&str]) -> ReviewBuilder {
        self.user_info.username = username.to_owned();
        self.user_info.groups = groups.iter().map(|g| (*g).to_owned()).collect();
        self
    }

    /// Marks the request as a dry run.
    pub fn dry_run(mut self, dry_run: bool) -> ReviewBuilder {
        self.dry_run = dry_run;
        self
    }

    /// The WIT review.
    pub fn build(self) -> raw::Review {
        let shown = self.object.as_ref().or(self.old_object.as_ref());
        let head = shown.and_then(Head::deserialize_from).unwrap_or_default();
        let (group, version) = head.api_version.rsplit_once('/').unwrap_or(("", head.api_version.as_str()));
        raw::Review {
            uid: "00000000-0000-0000-0000-000000000000".into(),
            operation: self.operation.into_raw(),
            kind: Gvk::new(group, version, head.kind.as_str()),
            sub_resource: None,
            namespace: head.metadata.namespace.clone(),
            name: head.metadata.name.clone(),
            object: self.object.as_ref().map(Value::to_string),
            old_object: self.old_object.as_ref().map(Value::to_string),
            user_info: raw::UserInfo {
                username: self.user_info.username,
                uid: self.user_info.uid,
                groups: self.user_info.groups,
            },
            dry_run: self.dry_run,
        }
    }
}

/// Runs `R::validate` natively, through [`run::validate`](crate::run::validate)
/// with `cluster` as the host (reads without a namespace use the review's).
///
/// # Errors
///
/// The reconciler's denial.
pub fn validate<R: Reconciler>(cluster: &FakeCluster, review: raw::Review) -> Result<Vec<String>, Denial> {
    let namespace = review.namespace.clone();
    let host = cluster.scoped(namespace.as_deref());
    crate::run::validate::<R>(&host, review).map_err(Denial::from)
}

/// Runs `R::mutate` natively, through [`run::mutate`](crate::run::mutate):
/// the mutated object, parsed back, or `None`.
///
/// # Errors
///
/// The reconciler's denial.
///
/// # Panics
///
/// When the mutated object is not JSON (never the case for this SDK).
pub fn mutate<R: Reconciler>(cluster: &FakeCluster, review: raw::Review) -> Result<Option<Value>, Denial> {
    let namespace = review.namespace.clone();
    let host = cluster.scoped(namespace.as_deref());
    let mutated = crate::run::mutate::<R>(&host, review).map_err(Denial::from)?;
    Ok(mutated.map(|json| serde_json::from_str(&json).expect("the mutated object is JSON")))
}

/// The WIT form of a readiness (what the host hands a guest), for tests
/// and benchmarks that build requests themselves.
pub fn raw_readiness(rated: Readiness) -> raw::Readiness {
    let status = match rated.status {
        ReadinessStatus::Current => raw::ReadinessStatus::Current,
        ReadinessStatus::InProgress => raw::ReadinessStatus::InProgress,
        ReadinessStatus::Failed => raw::ReadinessStatus::Failed,
        ReadinessStatus::Terminating => raw::ReadinessStatus::Terminating,
        ReadinessStatus::Unknown => raw::ReadinessStatus::Unknown,
    };
    raw::Readiness { status, message: rated.message }
}

/// Runs `R::convert` natively on `objects` (full objects), through the
/// path the component's `convert` export takes.
///
/// # Errors
///
/// The reconciler's refusal.
pub fn convert<R: Reconciler>(objects: &[Value], desired_api_version: &str) -> Result<Vec<Value>, String> {
    let texts = objects.iter().map(Value::to_string).collect();
    let converted = crate::run::convert::<R>(texts, desired_api_version)?;
    Ok(converted.iter().map(|json| serde_json::from_str(json).expect("the SDK writes JSON")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AdmissionReview, Context, Manifest, Outcome, Request};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
    use serde_json::json;

    struct Reader;

    /// Reads what the tests put in the cluster and reports it as status.
    impl Reconciler for Reader {
        type Object = Value;
        fn manifest() -> Manifest {
            Manifest::new("reader", ConfigMap::gvk()).reads(Secret::gvk()).reads(Namespace::gvk())
        }
        fn reconcile(_: Request<Value>, ctx: &Context) -> Result<Outcome, Failure> {
            let here = ctx.get::<Secret>("a")?.is_some();
            let there = ctx.get_in::<Secret>("other", "a")?.is_some();
            let namespace = ctx.get::<Namespace>("shop")?.is_some();
            let web: Vec<String> =
                ctx.list::<Secret>("team=web")?.into_iter().filter_map(|s| s.metadata.name).collect();
            let all_web = ctx.list_in::<Secret>("other", "")?.len();
            ctx.log_with(Level::Info, "read", &[("secrets", &web.len())]);
            Ok(Outcome::new()
                .status(json!({"here": here, "there": there, "namespace": namespace, "web": web, "other": all_web})))
        }
    }

    fn secret(namespace: &str, name: &str, team: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace, "labels": {"team": team}}})
    }

    #[test]
    fn reads_should_default_to_the_parents_namespace() {
        let cluster = FakeCluster::new()
            .with(secret("shop", "b", "web"))
            .with(secret("shop", "a", "web"))
            .with(secret("shop", "c", "db"))
            .with(secret("other", "a", "web"))
            .with(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
        let parent = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": "shop"}});
        let outcome = reconcile::<Reader>(&cluster, request(parent).build::<Reader>()).unwrap();
        assert_eq!(
            outcome.status.unwrap(),
            json!({"here": true, "there": true, "namespace": true, "web": ["a", "b"], "other": 1})
        );
        let logs = cluster.take_logs();
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0].fields, [("secrets".to_owned(), "2".to_owned())]);
        assert!(cluster.take_logs().is_empty());
    }

    #[test]
    fn a_malformed_selector_should_be_a_transient_failure() {
        let cluster = FakeCluster::new();
        let error = cluster.list(&Secret::gvk(), None, Some("team in (web")).unwrap_err();
        assert!(error.contains("unclosed parenthesis"), "{error}");
        let context = Context::new(&cluster);
        assert!(!context.list::<Secret>("team in (web").unwrap_err().is_terminal());
    }

    std::thread_local! {
        /// The shared rule case [`Case`] answers with.
        static CASE: std::cell::RefCell<Value> = const { std::cell::RefCell::new(Value::Null) };
    }

    /// Returns the current case's outcome, with its manifest.
    struct Case;

    impl Reconciler for Case {
        type Object = Value;
        fn manifest() -> Manifest {
            CASE.with_borrow(|case| {
                let text = |k: &Value, f: &str| k[f].as_str().unwrap_or_default().to_owned();
                let owns = case["manifest"]["owns"].as_array().unwrap().iter();
                let owns = owns.map(|k| Gvk::new(text(k, "group"), text(k, "version"), text(k, "kind")));
                let name = case["manifest"]["name"].as_str().unwrap();
                owns.into_iter().fold(Manifest::new(name, Gvk::new("rules.operon.dev", "v1", "Case")), Manifest::owns)
            })
        }
        fn reconcile(_: Request<Value>, _: &Context) -> Result<Outcome, Failure> {
            let outcome = CASE.with_borrow(|case| case["outcome"].clone());
            let desired = outcome["desired"].as_array().cloned().unwrap_or_default();
            let events = outcome["events"].as_array().cloned().unwrap_or_default();
            let outcome = desired.into_iter().fold(Outcome::new(), Outcome::apply);
            Ok(events.iter().fold(outcome, |o, e| {
                o.event(e["reason"].as_str().unwrap_or_default(), e["message"].as_str().unwrap_or_default())
            }))
        }
    }

    #[test]
    fn the_runner_should_give_every_shared_rule_case_the_hosts_verdict() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../contract/rules/cases");
        let mut ran = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let case =
                operon_contract::rules::padded(serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap());
            CASE.with_borrow_mut(|c| *c = case.clone());
            let field = |key: &str| case["request"][key].as_array().cloned().unwrap_or_default();
            let cluster =
                field("cluster").into_iter().chain(field("related")).fold(FakeCluster::new(), FakeCluster::with);
            let request =
                field("children").into_iter().fold(request(case["request"]["object"].clone()), RequestBuilder::child);
            let verdict = try_reconcile::<Case>(&cluster, request.build::<Case>());
            let refused = match verdict {
                Ok(Ok(_)) => None,
                Ok(Err(failure)) => panic!("{}: the reconcile failed: {}", path.display(), failure.message()),
                Err(refused) => Some(refused.0),
            };
            assert_eq!(refused.as_deref(), case["refused"].as_str(), "{}", path.display());
            ran += 1;
        }
        assert!(ran >= 10, "the shared cases are in {}", dir.display());
    }

    #[test]
    fn build_should_refuse_children_of_kinds_not_owned() {
        let parent = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}});
        let error =
            request(parent).child(secret("shop", "a", "web")).try_build(&Reader::manifest().into_raw()).unwrap_err();
        assert_eq!(error, "child Secret shop/a (v1 Secret) is not of a kind the manifest owns");
    }

    /// Refuses ConfigMaps without data, defaults a label, reads a Secret.
    struct Gate;

    impl Reconciler for Gate {
        type Object = Value;
        fn manifest() -> Manifest {
            Manifest::new("gate", ConfigMap::gvk()).reads(Secret::gvk())
        }
        fn reconcile(_: Request<Value>, _: &Context) -> Result<Outcome, Failure> {
            Ok(Outcome::new())
        }
        fn validate(review: AdmissionReview, ctx: &Context) -> Result<Vec<String>, Denial> {
            if review.operation == Operation::Delete {
                return Ok(vec![format!("deleting {}", review.name)]);
            }
            let object = review.object.unwrap_or_default();
            if object.get("data").is_none() {
                return Err(Denial::new("data must be set").code(422));
            }
            let secret = ctx.get::<Secret>("a").map_err(|f| Denial::new(f.message()))?;
            Ok(if secret.is_some() { vec![] } else { vec!["secret a is missing".into()] })
        }
        fn mutate(review: AdmissionReview, _: &Context) -> Result<Option<Value>, Denial> {
            let mut object = review.object.unwrap_or_default();
            if object["metadata"]["labels"]["team"].is_string() {
                return Ok(None);
            }
            object["metadata"]["labels"] = json!({"team": "web"});
            Ok(Some(object))
        }
    }

    fn config_map(data: bool) -> Value {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "shop"}});
        if data {
            cm["data"] = json!({"k": "v"});
        }
        cm
    }

    #[test]
    fn validate_should_see_the_review_and_the_cluster() {
        let cluster = FakeCluster::new().with(secret("shop", "a", "web"));
        assert_eq!(validate::<Gate>(&cluster, review(config_map(true)).build()), Ok(vec![]));
        assert_eq!(
            validate::<Gate>(&FakeCluster::new(), review(config_map(true)).build()),
            Ok(vec!["secret a is missing".to_owned()])
        );
        let denial = validate::<Gate>(&cluster, review(config_map(false)).build()).unwrap_err();
        assert_eq!((denial.message(), denial.status_code()), ("data must be set", 422));
        let deleting = review(config_map(true)).delete().build();
        assert_eq!(deleting.object, None);
        assert_eq!(deleting.name, "cm");
        assert_eq!(validate::<Gate>(&cluster, deleting), Ok(vec!["deleting cm".to_owned()]));
    }

    #[test]
    fn mutate_should_return_the_whole_object_or_nothing() {
        let mutated = mutate::<Gate>(&FakeCluster::new(), review(config_map(true)).build()).unwrap().unwrap();
        assert_eq!(mutated["metadata"]["labels"]["team"], "web");
        assert_eq!(mutated["data"]["k"], "v");
        let again = review(mutated.clone()).update(config_map(true)).build();
        assert_eq!(again.operation, raw::Operation::Update);
        assert_eq!(mutate::<Gate>(&FakeCluster::new(), again), Ok(None));
    }

    #[test]
    fn the_default_admission_should_allow_and_change_nothing() {
        let built = review(secret("shop", "a", "web")).build();
        assert_eq!(built.kind, Secret::gvk());
        assert_eq!(validate::<Reader>(&FakeCluster::new(), built.clone()), Ok(vec![]));
        assert_eq!(mutate::<Reader>(&FakeCluster::new(), built), Ok(None));
    }
}
