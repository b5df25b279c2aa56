//! Host-side forms of the WIT types: owned, serde-serialisable, with objects
//! parsed to JSON. Conversions from the generated bindings live in `guest`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// A Kubernetes kind: group, version, kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gvk {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
}

impl Gvk {
    /// Build from parts.
    pub fn new(group: &str, version: &str, kind: &str) -> Gvk {
        Gvk { group: group.into(), version: version.into(), kind: kind.into() }
    }

    /// The `apiVersion` field for this kind: `group/version`, or `version`
    /// for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The kind of a JSON object, from its `apiVersion` and `kind`.
    pub fn of(object: &Value) -> Option<Gvk> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Some(Gvk::new(group, version, kind))
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind)
    }
}

/// How events on a watched kind map to parent keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mapping {
    /// The label with this name holds the parent's name.
    Label(String),
    /// The annotation with this name holds `namespace/name` or `name`.
    Annotation(String),
    /// Every parent in the watched object's namespace.
    AllInNamespace,
    /// The parent's field at this dotted path names the watched object
    /// (`name` or `namespace/name`). Contract 0.2.
    Reference(String),
    /// The parent's field at this dotted path is a label selector over the
    /// watched kind in the parent's namespace. Contract 0.2.
    Selector(String),
}

impl Mapping {
    /// The dotted path into the parent, for the mappings that read one.
    pub fn parent_path(&self) -> Option<&str> {
        match self {
            Mapping::Reference(p) | Mapping::Selector(p) => Some(p),
            Mapping::Label(_) | Mapping::Annotation(_) | Mapping::AllInNamespace => None,
        }
    }
}

/// The value at a dotted path (`spec.configRef.name`) of a JSON object.
pub fn field_at<'v>(object: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(object, |v, key| v.get(key))
}

/// A watched kind and its mapping to parents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watch {
    /// The watched kind.
    pub kind: Gvk,
    /// How its events become parent keys.
    pub mapping: Mapping,
}

/// How the host changes an existing child of one owned kind (contract 0.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateStrategy {
    /// Server-side apply over the live object.
    #[default]
    InPlace,
    /// Apply; when a field is immutable, delete and create anew.
    Recreate,
    /// Never change an existing child; create missing ones.
    OnDelete,
}

/// What a module says it is (the WIT `manifest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Controller name.
    pub name: String,
    /// The parent kind.
    #[serde(rename = "for")]
    pub for_kind: Gvk,
    /// Kinds of children the module may return.
    pub owns: Vec<Gvk>,
    /// Kinds whose changes trigger reconciles of parents.
    pub watches: Vec<Watch>,
    /// Kinds the module may read through `host.get`/`host.list`.
    pub reads: Vec<Gvk>,
    /// The finalizer the host adds to parents, if any.
    pub finalizer: Option<String>,
    /// Update strategies of owned kinds (contract 0.2); others in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updates: Vec<(Gvk, UpdateStrategy)>,
}

impl Manifest {
    /// How children of `kind` are updated.
    pub fn update_strategy(&self, kind: &Gvk) -> UpdateStrategy {
        self.updates.iter().find(|(k, _)| k == kind).map(|(_, s)| *s).unwrap_or_default()
    }
}

impl Manifest {
    /// Whether the module may read objects of `kind`: the parent's kind, the
    /// owned kinds, watched kinds and declared reads.
    pub fn may_read(&self, kind: &Gvk) -> bool {
        &self.for_kind == kind
            || self.owns.contains(kind)
            || self.reads.contains(kind)
            || self.watches.iter().any(|w| &w.kind == kind)
    }

    /// Check what the host relies on: a usable name, distinct owned kinds,
    /// a qualified finalizer. Returns a description of the first problem.
    pub fn validate(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 63
            && self.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok {
            return Err(format!("manifest name {:?} must be 1-63 characters of [a-z0-9-]", self.name));
        }
        for gvk in std::iter::once(&self.for_kind).chain(&self.owns).chain(&self.reads) {
            if gvk.version.is_empty() || gvk.kind.is_empty() {
                return Err(format!("manifest names a kind with an empty version or kind: {gvk:?}"));
            }
        }
        if self.owns.contains(&self.for_kind) {
            return Err(format!("manifest owns its own parent kind {}", self.for_kind));
        }
        for (kind, _) in &self.updates {
            if !self.owns.contains(kind) {
                return Err(format!("manifest sets an update strategy for {kind}, which it does not own"));
            }
        }
        for w in &self.watches {
            if let Some(path) = w.mapping.parent_path()
                && (path.is_empty() || path.split('.').any(str::is_empty))
            {
                return Err(format!(
                    "watch of {} names the parent field {path:?}: use a dotted path such as spec.configRef.name",
                    w.kind
                ));
            }
        }
        if let Some(f) = &self.finalizer
            && !f.contains('/')
        {
            return Err(format!("finalizer {f:?} must be domain-qualified, e.g. example.com/cleanup"));
        }
        Ok(())
    }
}

/// One reconcile request, host side: objects as JSON text, ready to cross.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The parent object.
    pub object: String,
    /// Owned children, one group per kind in `manifest.owns` order.
    pub children: Vec<(Gvk, Vec<String>)>,
    /// Related objects from watched kinds.
    pub related: Vec<String>,
    /// The parent carries the finalizer and is being deleted or no longer
    /// matches the Reconciler's selector.
    pub finalizing: bool,
    /// Failures in a row before this call.
    pub attempt: u32,
    /// The host's clock when the reconcile began (contract 0.2's `now`).
    pub now: jiff::Timestamp,
    /// The parent's `metadata.generation`, for the `observedGeneration` the
    /// host writes for 0.2 modules.
    pub generation: Option<i64>,
    /// Each child's readiness, in the shape of `children`, when the host
    /// rated them already (its cache rates an object version once); empty,
    /// or of another shape, means rated when the request crosses.
    pub readiness: Vec<Vec<crate::Readiness>>,
}

impl Request {
    /// `now` as the contract spells it: RFC 3339 in UTC with milliseconds.
    pub fn now_text(&self) -> String {
        rfc3339(self.now)
    }
}

/// A time as the contract spells it: RFC 3339 in UTC with milliseconds,
/// `2026-11-26T04:05:06.789Z`.
pub fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// An event the guest asked to record on the parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// UpperCamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// A guest's answer, parsed and checked to be well-formed JSON objects.
/// Whether the objects are *allowed* is checked later against the grants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Outcome {
    /// Children that should exist.
    pub desired: Vec<Value>,
    /// New status of the parent, if any.
    pub status: Option<Value>,
    /// Events to record.
    pub events: Vec<Event>,
    /// Run again after this delay.
    #[serde(rename = "requeueAfterMs", with = "millis", default)]
    pub requeue_after: Option<Duration>,
    /// Clean-up done; the finalizer may be removed.
    pub finalized: bool,
    /// Whether the parent needs the manifest's finalizer (contract 0.2;
    /// `None`: 0.1, where every parent carries it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_finalizer: Option<bool>,
    /// Labels and annotations the guest keeps on its parent (contract 0.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_metadata: Option<ParentMetadata>,
}

/// Labels and annotations a guest keeps on its parent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParentMetadata {
    /// Labels, by key.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Annotations, by key.
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// A failure with what it may carry (contract 0.2): the parent's status to
/// write before backing off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    /// Transient or terminal, and why.
    pub failure: Failure,
    /// The parent's new status, if the guest gave one.
    pub status: Option<Value>,
}

impl From<Failure> for Failed {
    fn from(failure: Failure) -> Failed {
        Failed { failure, status: None }
    }
}

impl Failure {
    /// Why, for people.
    pub fn message(&self) -> &str {
        match self {
            Failure::Transient(m) | Failure::Terminal(m) => m,
        }
    }
}

/// The guest's own verdict that it could not reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Failure {
    /// Retry with backoff.
    Transient(String),
    /// Do not retry until the object changes.
    Terminal(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Transient(m) => write!(f, "transient failure: {m}"),
            Failure::Terminal(m) => write!(f, "terminal failure: {m}"),
        }
    }
}

/// When to reconcile again, from an outcome's `requeue-after-ms` and (0.2)
/// `requeue-at`, the latter measured from the request's `now`: the earlier
/// of the two wins, and a time already past is zero (the host's floor
/// applies later). The host and the SDKs' fixture runners read an outcome
/// through this one rule.
///
/// # Errors
///
/// When `at` is not an RFC 3339 time.
pub fn requeue_after(
    after_ms: Option<u64>,
    at: Option<&str>,
    now: jiff::Timestamp,
) -> Result<Option<Duration>, String> {
    let after = after_ms.map(Duration::from_millis);
    let at = match at {
        None => None,
        Some(text) => {
            let at = text.parse::<jiff::Timestamp>().map_err(|e| {
                format!("requeue-at {text:?} is not an RFC 3339 time such as 2026-01-01T00:00:00Z ({e})")
            })?;
            Some(Duration::try_from(now.duration_until(at)).unwrap_or(Duration::ZERO))
        }
    };
    Ok(match (after, at) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// A status as a 0.2 host writes it: `observedGeneration` set to the
/// parent's `generation` unless the guest set it (a status that is not a
/// JSON object is left as it is, for the caller to refuse).
pub fn observe_generation(status: &mut Value, generation: Option<i64>) {
    if let (Value::Object(map), Some(generation)) = (status, generation) {
        map.entry("observedGeneration").or_insert(generation.into());
    }
}

/// `Option<Duration>` as optional whole milliseconds, named `requeueAfterMs`
/// in fixtures to match the WIT field.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
