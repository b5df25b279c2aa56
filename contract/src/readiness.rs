//! The readiness of one Kubernetes object, by the rules of kstatus
//! (sigs.k8s.io/cli-utils `pkg/kstatus/status`): whether the cluster has
//! caught up with what the object asks for.
//!
//! The host computes it once for each child it hands a guest, so that no SDK
//! re-implements the rules and every guest sees the same verdict.
//!
//! The order of the checks is kstatus's: deletion, then the generation the
//! controller has observed, then the abnormal-true conditions (`Stalled`,
//! `Reconciling`) any controller may set, then the rules of a built-in kind,
//! else the generic rules for custom resources (a `Ready` condition, or
//! nothing to wait for). Where kstatus looks at the clock (a Pod's
//! scheduling window) this does not: the verdict depends on the object only.
//! A field of the wrong type makes the verdict [`Unknown`](ReadinessStatus::Unknown),
//! naming the field; nothing here panics.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// kstatus's status values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReadinessStatus {
    /// The cluster has caught up: the object is ready.
    Current,
    /// Still being reconciled; expected to become `Current` in time.
    InProgress,
    /// Reconciling has failed or stopped making progress.
    Failed,
    /// Being deleted.
    Terminating,
    /// The object is malformed, so its readiness cannot be told.
    Unknown,
}

impl ReadinessStatus {
    /// kstatus's spelling: `Current`, `InProgress`, `Failed`, `Terminating`,
    /// `Unknown` (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            ReadinessStatus::Current => "Current",
            ReadinessStatus::InProgress => "InProgress",
            ReadinessStatus::Failed => "Failed",
            ReadinessStatus::Terminating => "Terminating",
            ReadinessStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ReadinessStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object's readiness: the status and why, in a short human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    /// The verdict.
    pub status: ReadinessStatus,
    /// Why, e.g. `Available: 1/3` or `Deployment is available. Replicas: 3`.
    pub message: String,
}

impl Readiness {
    /// A verdict stated rather than computed (tests that fix a child's
    /// readiness).
    pub fn new(status: ReadinessStatus, message: impl Into<String>) -> Readiness {
        Readiness { status, message: message.into() }
    }

    /// The readiness of `object` (a whole Kubernetes object as JSON).
    pub fn of(object: &Value) -> Readiness {
        if !object.is_object() {
            return unknown("object is not a JSON object");
        }
        compute(object).unwrap_or_else(|Malformed(message)| unknown(message))
    }

    /// The readiness of an object given as JSON text, as guests and the wire
    /// carry it; text that is not a JSON object is `Unknown`.
    ///
    /// Only the fields the rules read are kept (a Deployment's pod template
    /// is skipped, not built): rating is a fraction of parsing the whole
    /// object. Text whose fields are not of the expected shapes takes the
    /// whole parse, so the verdict is always [`Readiness::of`]'s.
    pub fn of_json(text: &str) -> Readiness {
        // Only an object takes the narrow parse (serde would read an array
        // as a struct's fields in order).
        if text.trim_start().starts_with('{')
            && let Ok(narrow) = serde_json::from_str::<Narrow>(text)
        {
            return Readiness::of(&narrow.into_value());
        }
        match serde_json::from_str::<Value>(text) {
            Ok(object) => Readiness::of(&object),
            Err(e) => unknown(format!("object is not JSON: {e}")),
        }
    }
}

/// The fields of an object the rules read (see `compute` and the kinds'
/// rules); every other field is skipped while parsing.
#[derive(serde::Deserialize)]
struct Narrow {
    #[serde(rename = "apiVersion")]
    api_version: Option<Value>,
    kind: Option<Value>,
    metadata: Option<NarrowMeta>,
    spec: Option<NarrowSpec>,
    status: Option<Value>,
}

#[derive(serde::Deserialize)]
struct NarrowMeta {
    generation: Option<Value>,
    #[serde(rename = "deletionTimestamp")]
    deletion_timestamp: Option<Value>,
}

#[derive(serde::Deserialize)]
struct NarrowSpec {
    replicas: Option<Value>,
    #[serde(rename = "progressDeadlineSeconds")]
    progress_deadline_seconds: Option<Value>,
    #[serde(rename = "updateStrategy")]
    update_strategy: Option<Value>,
    #[serde(rename = "type")]
    type_: Option<Value>,
}

impl Narrow {
    fn into_value(self) -> Value {
        let mut object = serde_json::Map::new();
        let put = |map: &mut serde_json::Map<String, Value>, key: &str, v: Option<Value>| {
            if let Some(v) = v {
                map.insert(key.to_string(), v);
            }
        };
        put(&mut object, "apiVersion", self.api_version);
        put(&mut object, "kind", self.kind);
        if let Some(m) = self.metadata {
            let mut meta = serde_json::Map::new();
            put(&mut meta, "generation", m.generation);
            put(&mut meta, "deletionTimestamp", m.deletion_timestamp);
            object.insert("metadata".into(), Value::Object(meta));
        }
        if let Some(s) = self.spec {
            let mut spec = serde_json::Map::new();
            put(&mut spec, "replicas", s.replicas);
            put(&mut spec, "progressDeadlineSeconds", s.progress_deadline_seconds);
            put(&mut spec, "updateStrategy", s.update_strategy);
            put(&mut spec, "type", s.type_);
            object.insert("spec".into(), Value::Object(spec));
        }
        put(&mut object, "status", self.status);
        Value::Object(object)
    }
}

/// Whether every given readiness is `Current` (true for none): a parent
/// whose children are all ready.
pub fn all_current<'a>(r: impl IntoIterator<Item = &'a Readiness>) -> bool {
    r.into_iter().all(|r| r.status == ReadinessStatus::Current)
}

/// A field of the wrong type, named in the message; becomes `Unknown`.
struct Malformed(String);

/// A verdict, or the field that prevented one.
type Verdict = Result<Readiness, Malformed>;

fn verdict(status: ReadinessStatus, message: impl Into<String>) -> Verdict {
    Ok(Readiness { status, message: message.into() })
}

fn current(message: impl Into<String>) -> Verdict {
    verdict(ReadinessStatus::Current, message)
}

fn in_progress(message: impl Into<String>) -> Verdict {
    verdict(ReadinessStatus::InProgress, message)
}

fn failed(message: impl Into<String>) -> Verdict {
    verdict(ReadinessStatus::Failed, message)
}

fn unknown(message: impl Into<String>) -> Readiness {
    Readiness { status: ReadinessStatus::Unknown, message: message.into() }
}

fn compute(o: &Value) -> Verdict {
    let kind = text(o, "kind")?.ok_or_else(|| Malformed("kind is missing".into()))?;
    let api_version = text(o, "apiVersion")?.ok_or_else(|| Malformed("apiVersion is missing".into()))?;
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);

    if text(o, "metadata.deletionTimestamp")?.is_some_and(|t| !t.is_empty()) {
        return verdict(ReadinessStatus::Terminating, "object is being deleted");
    }
    if let (Some(generation), Some(observed)) = (int(o, "metadata.generation")?, int(o, "status.observedGeneration")?)
        && generation > observed
    {
        return in_progress(format!("status.observedGeneration {observed} is behind metadata.generation {generation}"));
    }

    // Any controller may say it is stuck or busy; kstatus trusts that first.
    let conditions = conditions(o)?;
    if let Some(c) = true_condition(&conditions, "Stalled") {
        return failed(c.describe());
    }
    if let Some(c) = true_condition(&conditions, "Reconciling") {
        return in_progress(c.describe());
    }

    match (group, kind) {
        ("apps" | "extensions", "Deployment") => deployment(o, &conditions),
        ("apps", "StatefulSet") => stateful_set(o),
        ("apps" | "extensions", "DaemonSet") => daemon_set(o),
        ("apps" | "extensions", "ReplicaSet") => replica_set(o, &conditions),
        ("", "Pod") => pod(o, &conditions),
        ("batch", "Job") => job(o, &conditions),
        ("", "PersistentVolumeClaim") => persistent_volume_claim(o),
        ("", "Service") => service(o),
        ("policy", "PodDisruptionBudget") => pod_disruption_budget(o),
        ("", "Namespace") => namespace(o),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => custom_resource_definition(&conditions),
        ("", "ConfigMap" | "Secret" | "ServiceAccount") | ("batch", "CronJob") => {
            current(format!("{kind} has nothing to wait for"))
        }
        _ => generic(&conditions),
    }
}

/// Custom resources: a `Ready` condition if there is one, else nothing to
/// wait for (`Stalled` and `Reconciling` were looked at already).
fn generic(conditions: &[Condition<'_>]) -> Verdict {
    match find(conditions, "Ready") {
        Some(c) if c.status == "True" => current(if c.message.is_empty() { "Resource is Ready" } else { c.message }),
        Some(c) => in_progress(c.describe()),
        None => current("Resource is current"),
    }
}

fn deployment(o: &Value, conditions: &[Condition<'_>]) -> Verdict {
    let progressing = find(conditions, "Progressing");
    if let Some(c) = progressing
        && c.reason == "ProgressDeadlineExceeded"
    {
        return failed(with_detail("Progress deadline exceeded", c.message));
    }
    let want = int_or(o, "spec.replicas", 1)?; // the controller's default
    let replicas = int_or(o, "status.replicas", 0)?;
    let updated = int_or(o, "status.updatedReplicas", 0)?;
    let ready = int_or(o, "status.readyReplicas", 0)?;
    let available = int_or(o, "status.availableReplicas", 0)?;
    if want > replicas {
        return in_progress(format!("Replicas: {replicas}/{want}"));
    }
    if want > updated {
        return in_progress(format!("Updated: {updated}/{want}"));
    }
    if replicas > want {
        return in_progress(format!("Pending termination: {}", replicas.saturating_sub(want)));
    }
    if updated > available {
        return in_progress(format!("Available: {available}/{updated}"));
    }
    if want > ready {
        return in_progress(format!("Ready: {ready}/{want}"));
    }
    // Without a deadline the controller never marks a rollout complete
    // (it stores "none" as i32::MAX), so there is nothing to wait for.
    let deadline = int(o, "spec.progressDeadlineSeconds")?;
    let complete = deadline.is_none_or(|d| d == i64::from(i32::MAX))
        || progressing.is_some_and(|c| c.status == "True" && c.reason == "NewReplicaSetAvailable");
    if !complete {
        return in_progress("Rollout not complete: new ReplicaSet not available");
    }
    if true_condition(conditions, "Available").is_none() {
        return in_progress("Deployment not Available");
    }
    current(format!("Deployment is available. Replicas: {replicas}"))
}

/// StatefulSets set no conditions: only the counts and revisions tell.
fn stateful_set(o: &Value) -> Verdict {
    // With OnDelete the user replaces pods; the controller waits for nothing.
    if text(o, "spec.updateStrategy.type")? == Some("OnDelete") {
        return current("StatefulSet uses the OnDelete update strategy");
    }
    let want = int_or(o, "spec.replicas", 1)?;
    let replicas = int_or(o, "status.replicas", 0)?;
    let ready = int_or(o, "status.readyReplicas", 0)?;
    let current_replicas = int_or(o, "status.currentReplicas", 0)?;
    let updated = int_or(o, "status.updatedReplicas", 0)?;
    if want > replicas {
        return in_progress(format!("Replicas: {replicas}/{want}"));
    }
    if want > ready {
        return in_progress(format!("Ready: {ready}/{want}"));
    }
    if replicas > want {
        return in_progress(format!("Pending termination: {}", replicas.saturating_sub(want)));
    }
    // A partition holds back the pods below it: only those above must update.
    if let Some(partition) = int(o, "spec.updateStrategy.rollingUpdate.partition")? {
        let expected = want.saturating_sub(partition).max(0);
        if updated < expected {
            return in_progress(format!("Updated: {updated}/{expected}"));
        }
        return current(format!("Partition rollout complete. Updated: {updated}"));
    }
    if want > current_replicas {
        return in_progress(format!("Current: {current_replicas}/{want}"));
    }
    let current_revision = text(o, "status.currentRevision")?.unwrap_or("");
    let update_revision = text(o, "status.updateRevision")?.unwrap_or("");
    if current_revision != update_revision {
        return in_progress(format!("Waiting for revision {update_revision} to replace {current_revision}"));
    }
    current(format!("All replicas scheduled as expected. Replicas: {replicas}"))
}

fn daemon_set(o: &Value) -> Verdict {
    // The controller always writes observedGeneration: without it, it has
    // not looked at this DaemonSet yet and the counts mean nothing.
    if int(o, "status.observedGeneration")?.is_none() {
        return in_progress("DaemonSet status.observedGeneration not set yet");
    }
    let Some(desired) = int(o, "status.desiredNumberScheduled")? else {
        return in_progress("DaemonSet status.desiredNumberScheduled not set yet");
    };
    let scheduled = int_or(o, "status.currentNumberScheduled", 0)?;
    let updated = int_or(o, "status.updatedNumberScheduled", 0)?;
    let available = int_or(o, "status.numberAvailable", 0)?;
    let ready = int_or(o, "status.numberReady", 0)?;
    if desired > scheduled {
        return in_progress(format!("Current: {scheduled}/{desired}"));
    }
    if desired > updated {
        return in_progress(format!("Updated: {updated}/{desired}"));
    }
    if desired > available {
        return in_progress(format!("Available: {available}/{desired}"));
    }
    if desired > ready {
        return in_progress(format!("Ready: {ready}/{desired}"));
    }
    current(format!("All replicas scheduled as expected. Replicas: {desired}"))
}

fn replica_set(o: &Value, conditions: &[Condition<'_>]) -> Verdict {
    // kstatus keeps this InProgress: the controller retries failed creations.
    if let Some(c) = true_condition(conditions, "ReplicaFailure") {
        return in_progress(with_detail("Replica failure", c.message));
    }
    let want = int_or(o, "spec.replicas", 1)?;
    let replicas = int_or(o, "status.replicas", 0)?;
    let labelled = int_or(o, "status.fullyLabeledReplicas", 0)?;
    let available = int_or(o, "status.availableReplicas", 0)?;
    let ready = int_or(o, "status.readyReplicas", 0)?;
    if want > labelled {
        return in_progress(format!("Labelled: {labelled}/{want}"));
    }
    if want > available {
        return in_progress(format!("Available: {available}/{want}"));
    }
    if want > ready {
        return in_progress(format!("Ready: {ready}/{want}"));
    }
    if replicas > want {
        return in_progress(format!("Pending termination: {}", replicas.saturating_sub(want)));
    }
    current(format!("ReplicaSet is available. Replicas: {replicas}"))
}

fn pod(o: &Value, conditions: &[Condition<'_>]) -> Verdict {
    let phase = text(o, "status.phase")?;
    match phase {
        Some("Succeeded") => return current("Pod has completed successfully"),
        Some("Failed") => return failed("Pod has completed, but not successfully"),
        Some("Running") if true_condition(conditions, "Ready").is_some() => return current("Pod is Ready"),
        _ => {}
    }
    // A crash-looping container (init containers keep the Pod Pending)
    // will not get better by waiting.
    let mut looping = Vec::new();
    for field in ["status.initContainerStatuses", "status.containerStatuses"] {
        for (i, status) in list(o, field)?.iter().enumerate() {
            let at = format!("{field}[{i}]");
            if text(status, "state.waiting.reason").map_err(|e| e.within(&at))? == Some("CrashLoopBackOff") {
                looping.push(text(status, "name").map_err(|e| e.within(&at))?.unwrap_or("?"));
            }
        }
    }
    if !looping.is_empty() {
        return failed(format!("Containers in CrashLoopBackOff: {}", looping.join(", ")));
    }
    match phase {
        Some("Running") => in_progress("Pod is running but is not Ready"),
        Some("Pending") => match find(conditions, "PodScheduled") {
            Some(c) if c.status == "False" && c.reason == "Unschedulable" => {
                in_progress(with_detail("Pod has not been scheduled", c.message))
            }
            _ => in_progress("Pod is in the Pending phase"),
        },
        None => in_progress("Pod phase not reported yet"),
        Some("Unknown") => verdict(ReadinessStatus::Unknown, "Pod phase is Unknown: its node cannot be reached"),
        Some(other) => Err(Malformed(format!("status.phase {other:?} is not a Pod phase"))),
    }
}

fn job(o: &Value, conditions: &[Condition<'_>]) -> Verdict {
    let succeeded = int_or(o, "status.succeeded", 0)?;
    let active = int_or(o, "status.active", 0)?;
    let failures = int_or(o, "status.failed", 0)?;
    if true_condition(conditions, "Complete").is_some() {
        return current(format!("Job completed. Succeeded: {succeeded}"));
    }
    if let Some(c) = true_condition(conditions, "Failed") {
        return failed(with_detail(&format!("Job failed ({failures} pods failed)"), c.message));
    }
    // A suspended Job waits on purpose, not on the cluster.
    if true_condition(conditions, "Suspended").is_some() {
        return current("Job is suspended");
    }
    in_progress(format!("Job in progress. Active: {active}, succeeded: {succeeded}, failed: {failures}"))
}

fn persistent_volume_claim(o: &Value) -> Verdict {
    match text(o, "status.phase")? {
        Some("Bound") => current("PVC is Bound"),
        // Its volume is gone; no controller brings it back.
        Some("Lost") => failed("PVC has lost its volume"),
        phase => in_progress(format!("PVC is not Bound. Phase: {}", phase.unwrap_or("none"))),
    }
}

fn service(o: &Value) -> Verdict {
    if text(o, "spec.type")? == Some("LoadBalancer") && list(o, "status.loadBalancer.ingress")?.is_empty() {
        return in_progress("Waiting for the load balancer's ingress");
    }
    current("Service is ready")
}

fn pod_disruption_budget(o: &Value) -> Verdict {
    if int(o, "status.observedGeneration")?.is_none() {
        return in_progress("PodDisruptionBudget not observed yet");
    }
    let healthy = int_or(o, "status.currentHealthy", 0)?;
    let desired = int_or(o, "status.desiredHealthy", 0)?;
    if healthy < desired {
        return in_progress(format!("Healthy: {healthy}/{desired}"));
    }
    current(format!("PodDisruptionBudget is satisfied. Healthy: {healthy}, desired: {desired}"))
}

fn namespace(o: &Value) -> Verdict {
    if text(o, "status.phase")? == Some("Terminating") {
        return verdict(ReadinessStatus::Terminating, "Namespace is terminating");
    }
    current("Namespace is active")
}

fn custom_resource_definition(conditions: &[Condition<'_>]) -> Verdict {
    if let Some(c) = find(conditions, "NamesAccepted")
        && c.status == "False"
    {
        return failed(c.describe());
    }
    match find(conditions, "Established") {
        Some(c) if c.status == "True" => current("CRD is established"),
        Some(c) if c.status == "False" && c.reason != "Installing" => failed(c.describe()),
        _ => in_progress("CRD is being installed"),
    }
}

/// One entry of `status.conditions`.
struct Condition<'v> {
    kind: &'v str,
    status: &'v str,
    reason: &'v str,
    message: &'v str,
}

impl Condition<'_> {
    /// The condition's own message, or what it says in its fields.
    fn describe(&self) -> String {
        match (self.message, self.reason) {
            ("", "") => format!("{} is {}", self.kind, self.status),
            ("", reason) => format!("{} is {}: {reason}", self.kind, self.status),
            (message, _) => message.to_string(),
        }
    }
}

fn conditions(o: &Value) -> Result<Vec<Condition<'_>>, Malformed> {
    list(o, "status.conditions")?
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let at = format!("status.conditions[{i}]");
            if !c.is_object() {
                return Err(Malformed(format!("{at} is not an object")));
            }
            let field = |name| text(c, name).map_err(|e| e.within(&at));
            Ok(Condition {
                kind: field("type")?.ok_or_else(|| Malformed(format!("{at}.type is missing")))?,
                status: field("status")?.unwrap_or("Unknown"),
                reason: field("reason")?.unwrap_or(""),
                message: field("message")?.unwrap_or(""),
            })
        })
        .collect()
}

fn find<'a, 'v>(conditions: &'a [Condition<'v>], kind: &str) -> Option<&'a Condition<'v>> {
    conditions.iter().find(|c| c.kind == kind)
}

fn true_condition<'a, 'v>(conditions: &'a [Condition<'v>], kind: &str) -> Option<&'a Condition<'v>> {
    find(conditions, kind).filter(|c| c.status == "True")
}

fn with_detail(summary: &str, detail: &str) -> String {
    if detail.is_empty() { summary.to_string() } else { format!("{summary}: {detail}") }
}

impl Malformed {
    /// The same problem, with the field named from an outer object.
    fn within(self, at: &str) -> Malformed {
        Malformed(format!("{at}.{}", self.0))
    }
}

/// The value at a dotted path; absent or `null` is `None`; a step through
/// something other than an object is malformed.
fn get<'v>(o: &'v Value, path: &str) -> Result<Option<&'v Value>, Malformed> {
    let mut at = o;
    let mut walked: usize = 0;
    for key in path.split('.') {
        let Some(map) = at.as_object() else {
            return Err(Malformed(format!("{} is not an object", &path[..walked.saturating_sub(1)])));
        };
        match map.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(next) => at = next,
        }
        walked += key.len() + 1;
    }
    Ok(Some(at))
}

fn int(o: &Value, path: &str) -> Result<Option<i64>, Malformed> {
    get(o, path)?.map(|v| v.as_i64().ok_or_else(|| Malformed(format!("{path} is not an integer")))).transpose()
}

fn int_or(o: &Value, path: &str, default: i64) -> Result<i64, Malformed> {
    Ok(int(o, path)?.unwrap_or(default))
}

fn text<'v>(o: &'v Value, path: &str) -> Result<Option<&'v str>, Malformed> {
    get(o, path)?.map(|v| v.as_str().ok_or_else(|| Malformed(format!("{path} is not a string")))).transpose()
}

fn list<'v>(o: &'v Value, path: &str) -> Result<&'v [Value], Malformed> {
    match get(o, path)? {
        None => Ok(&[]),
        Some(v) => v.as_array().map(Vec::as_slice).ok_or_else(|| Malformed(format!("{path} is not a list"))),
    }
}

#[cfg(test)]
mod tests {
    use super::ReadinessStatus::{Current, Failed, InProgress, Terminating, Unknown};
    use super::*;
    use serde_json::json;

    fn obj(api_version: &str, kind: &str, spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": "x", "namespace": "default", "generation": 2},
            "spec": spec,
            "status": status,
        })
    }

    fn deploy(spec: Value, status: Value) -> Value {
        obj("apps/v1", "Deployment", spec, status)
    }

    /// A Deployment's conditions when its rollout is done.
    fn rolled_out() -> Value {
        json!([
            {"type": "Available", "status": "True"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
        ])
    }

    fn dep_status(replicas: i64, updated: i64, ready: i64, available: i64) -> Value {
        json!({
            "observedGeneration": 2, "replicas": replicas, "updatedReplicas": updated,
            "readyReplicas": ready, "availableReplicas": available, "conditions": rolled_out(),
        })
    }

    fn sts(spec: Value, status: Value) -> Value {
        obj("apps/v1", "StatefulSet", spec, status)
    }

    fn sts_status(replicas: i64, ready: i64, current: i64, updated: i64, revisions: (&str, &str)) -> Value {
        json!({
            "observedGeneration": 2, "replicas": replicas, "readyReplicas": ready,
            "currentReplicas": current, "updatedReplicas": updated,
            "currentRevision": revisions.0, "updateRevision": revisions.1,
        })
    }

    fn ds(desired: i64, scheduled: i64, updated: i64, available: i64, ready: i64) -> Value {
        obj(
            "apps/v1",
            "DaemonSet",
            json!({}),
            json!({
                "observedGeneration": 2, "desiredNumberScheduled": desired,
                "currentNumberScheduled": scheduled, "updatedNumberScheduled": updated,
                "numberAvailable": available, "numberReady": ready,
            }),
        )
    }

    fn rs(want: i64, labelled: i64, available: i64, ready: i64, replicas: i64) -> Value {
        obj(
            "apps/v1",
            "ReplicaSet",
            json!({"replicas": want}),
            json!({
                "observedGeneration": 2, "replicas": replicas, "fullyLabeledReplicas": labelled,
                "availableReplicas": available, "readyReplicas": ready,
            }),
        )
    }

    fn pod(status: Value) -> Value {
        obj("v1", "Pod", json!({}), status)
    }

    fn job(status: Value) -> Value {
        obj("batch/v1", "Job", json!({}), status)
    }

    fn custom(conditions: Value) -> Value {
        obj("example.com/v1", "Widget", json!({}), json!({"observedGeneration": 2, "conditions": conditions}))
    }

    /// Every fixture of the table: name, object, expected status, a piece of
    /// the expected message.
    fn table() -> Vec<(&'static str, Value, ReadinessStatus, &'static str)> {
        let crash = |field: &str| {
            pod(json!({
                "phase": if field == "containerStatuses" { "Running" } else { "Pending" },
                field: [{"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
            }))
        };
        vec![
            // Generic properties, before any kind's rules.
            (
                "deletion",
                {
                    let mut d = deploy(json!({"replicas": 1}), dep_status(1, 1, 1, 1));
                    d["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
                    d
                },
                Terminating,
                "object is being deleted",
            ),
            (
                "observedGeneration behind",
                {
                    let mut d = deploy(json!({"replicas": 1}), dep_status(1, 1, 1, 1));
                    d["status"]["observedGeneration"] = json!(1);
                    d
                },
                InProgress,
                "status.observedGeneration 1 is behind metadata.generation 2",
            ),
            (
                "Stalled on a built-in kind",
                obj(
                    "v1",
                    "Service",
                    json!({}),
                    json!({"conditions": [{"type": "Stalled", "status": "True", "message": "stuck"}]}),
                ),
                Failed,
                "stuck",
            ),
            // Deployment.
            (
                "deployment available",
                deploy(json!({"replicas": 3}), dep_status(3, 3, 3, 3)),
                Current,
                "Deployment is available. Replicas: 3",
            ),
            ("deployment default replicas", deploy(json!({}), dep_status(1, 1, 1, 1)), Current, "Replicas: 1"),
            (
                "deployment scaling up",
                deploy(json!({"replicas": 3}), dep_status(1, 1, 1, 1)),
                InProgress,
                "Replicas: 1/3",
            ),
            ("deployment updating", deploy(json!({"replicas": 3}), dep_status(3, 2, 3, 3)), InProgress, "Updated: 2/3"),
            (
                "deployment old pods",
                deploy(json!({"replicas": 3}), dep_status(4, 3, 3, 3)),
                InProgress,
                "Pending termination: 1",
            ),
            (
                "deployment unavailable",
                deploy(json!({"replicas": 3}), dep_status(3, 3, 3, 1)),
                InProgress,
                "Available: 1/3",
            ),
            ("deployment unready", deploy(json!({"replicas": 3}), dep_status(3, 3, 2, 3)), InProgress, "Ready: 2/3"),
            (
                "deployment rollout not complete",
                deploy(json!({"replicas": 1, "progressDeadlineSeconds": 600}), {
                    let mut s = dep_status(1, 1, 1, 1);
                    s["conditions"][1]["reason"] = json!("ReplicaSetUpdated");
                    s
                }),
                InProgress,
                "Rollout not complete",
            ),
            (
                "deployment not Available",
                deploy(json!({"replicas": 1}), {
                    let mut s = dep_status(1, 1, 1, 1);
                    s["conditions"][0]["status"] = json!("False");
                    s
                }),
                InProgress,
                "Deployment not Available",
            ),
            (
                "deployment deadline exceeded",
                deploy(json!({"replicas": 3}), {
                    let mut s = dep_status(3, 1, 1, 1);
                    s["conditions"][1] = json!({"type": "Progressing", "status": "False",
                        "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet x has timed out"});
                    s
                }),
                Failed,
                "Progress deadline exceeded: ReplicaSet x has timed out",
            ),
            // StatefulSet.
            (
                "statefulset ready",
                sts(json!({"replicas": 2}), sts_status(2, 2, 2, 2, ("r1", "r1"))),
                Current,
                "Replicas: 2",
            ),
            (
                "statefulset scaling",
                sts(json!({"replicas": 2}), sts_status(1, 1, 1, 1, ("r1", "r1"))),
                InProgress,
                "Replicas: 1/2",
            ),
            (
                "statefulset unready",
                sts(json!({"replicas": 2}), sts_status(2, 1, 2, 2, ("r1", "r1"))),
                InProgress,
                "Ready: 1/2",
            ),
            (
                "statefulset rolling",
                sts(json!({"replicas": 2}), sts_status(2, 2, 1, 1, ("r1", "r2"))),
                InProgress,
                "Current: 1/2",
            ),
            (
                "statefulset revision",
                sts(json!({"replicas": 2}), sts_status(2, 2, 2, 2, ("r1", "r2"))),
                InProgress,
                "revision r2",
            ),
            (
                "statefulset partition pending",
                sts(
                    json!({"replicas": 4, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
                    sts_status(4, 4, 3, 1, ("r1", "r2")),
                ),
                InProgress,
                "Updated: 1/2",
            ),
            (
                "statefulset partition done",
                sts(
                    json!({"replicas": 4, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
                    sts_status(4, 4, 2, 2, ("r1", "r2")),
                ),
                Current,
                "Partition rollout complete",
            ),
            (
                "statefulset OnDelete",
                sts(json!({"replicas": 2, "updateStrategy": {"type": "OnDelete"}}), sts_status(0, 0, 0, 0, ("", ""))),
                Current,
                "OnDelete",
            ),
            // DaemonSet.
            ("daemonset ready", ds(3, 3, 3, 3, 3), Current, "Replicas: 3"),
            ("daemonset scheduling", ds(3, 2, 2, 2, 2), InProgress, "Current: 2/3"),
            ("daemonset updating", ds(3, 3, 2, 3, 3), InProgress, "Updated: 2/3"),
            ("daemonset unavailable", ds(3, 3, 3, 1, 3), InProgress, "Available: 1/3"),
            ("daemonset unready", ds(3, 3, 3, 3, 2), InProgress, "Ready: 2/3"),
            (
                "daemonset not observed",
                obj("apps/v1", "DaemonSet", json!({}), json!({})),
                InProgress,
                "observedGeneration not set",
            ),
            // ReplicaSet.
            ("replicaset ready", rs(2, 2, 2, 2, 2), Current, "ReplicaSet is available. Replicas: 2"),
            ("replicaset unavailable", rs(2, 2, 1, 2, 2), InProgress, "Available: 1/2"),
            ("replicaset extra", rs(2, 2, 2, 2, 3), InProgress, "Pending termination: 1"),
            (
                "replicaset failure",
                obj(
                    "apps/v1",
                    "ReplicaSet",
                    json!({"replicas": 1}),
                    json!({"conditions": [{"type": "ReplicaFailure", "status": "True", "message": "quota"}]}),
                ),
                InProgress,
                "Replica failure: quota",
            ),
            // Pod.
            ("pod succeeded", pod(json!({"phase": "Succeeded"})), Current, "completed successfully"),
            ("pod failed", pod(json!({"phase": "Failed"})), Failed, "not successfully"),
            (
                "pod ready",
                pod(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})),
                Current,
                "Pod is Ready",
            ),
            (
                "pod running unready",
                pod(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]})),
                InProgress,
                "not Ready",
            ),
            ("pod pending", pod(json!({"phase": "Pending"})), InProgress, "Pending"),
            (
                "pod unschedulable",
                pod(json!({"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]})),
                InProgress,
                "not been scheduled: 0/3 nodes",
            ),
            ("pod no phase", pod(json!({})), InProgress, "phase not reported"),
            ("pod crash loop", crash("containerStatuses"), Failed, "CrashLoopBackOff: app"),
            ("pod init crash loop", crash("initContainerStatuses"), Failed, "CrashLoopBackOff: app"),
            ("pod phase Unknown", pod(json!({"phase": "Unknown"})), Unknown, "node"),
            // Job.
            (
                "job complete",
                job(json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})),
                Current,
                "Job completed",
            ),
            (
                "job failed",
                job(
                    json!({"failed": 6, "conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]}),
                ),
                Failed,
                "Job failed (6 pods failed): BackoffLimitExceeded",
            ),
            (
                "job running",
                job(json!({"active": 1, "startTime": "2024-01-01T00:00:00Z"})),
                InProgress,
                "Job in progress",
            ),
            (
                "job suspended",
                job(json!({"conditions": [{"type": "Suspended", "status": "True"}]})),
                Current,
                "suspended",
            ),
            // PersistentVolumeClaim.
            ("pvc bound", obj("v1", "PersistentVolumeClaim", json!({}), json!({"phase": "Bound"})), Current, "Bound"),
            (
                "pvc pending",
                obj("v1", "PersistentVolumeClaim", json!({}), json!({"phase": "Pending"})),
                InProgress,
                "Phase: Pending",
            ),
            ("pvc lost", obj("v1", "PersistentVolumeClaim", json!({}), json!({"phase": "Lost"})), Failed, "lost"),
            // Service.
            (
                "service clusterip",
                obj("v1", "Service", json!({"type": "ClusterIP"}), json!({})),
                Current,
                "Service is ready",
            ),
            (
                "service lb waiting",
                obj("v1", "Service", json!({"type": "LoadBalancer"}), json!({"loadBalancer": {}})),
                InProgress,
                "load balancer",
            ),
            (
                "service lb ready",
                obj(
                    "v1",
                    "Service",
                    json!({"type": "LoadBalancer"}),
                    json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}),
                ),
                Current,
                "Service is ready",
            ),
            // PodDisruptionBudget.
            (
                "pdb satisfied",
                obj(
                    "policy/v1",
                    "PodDisruptionBudget",
                    json!({}),
                    json!({"observedGeneration": 2, "currentHealthy": 3, "desiredHealthy": 2}),
                ),
                Current,
                "Healthy: 3, desired: 2",
            ),
            (
                "pdb short",
                obj(
                    "policy/v1",
                    "PodDisruptionBudget",
                    json!({}),
                    json!({"observedGeneration": 2, "currentHealthy": 1, "desiredHealthy": 2}),
                ),
                InProgress,
                "Healthy: 1/2",
            ),
            (
                "pdb unobserved",
                obj("policy/v1", "PodDisruptionBudget", json!({}), json!({})),
                InProgress,
                "not observed",
            ),
            // Kinds without status.
            ("configmap", json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {}}), Current, "ConfigMap"),
            ("secret", json!({"apiVersion": "v1", "kind": "Secret"}), Current, "Secret"),
            ("serviceaccount", json!({"apiVersion": "v1", "kind": "ServiceAccount"}), Current, "ServiceAccount"),
            ("namespace", obj("v1", "Namespace", json!({}), json!({"phase": "Active"})), Current, "active"),
            (
                "namespace terminating",
                obj("v1", "Namespace", json!({}), json!({"phase": "Terminating"})),
                Terminating,
                "terminating",
            ),
            // CustomResourceDefinition.
            (
                "crd established",
                obj(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    json!({}),
                    json!({"conditions": [{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]}),
                ),
                Current,
                "established",
            ),
            (
                "crd names rejected",
                obj(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    json!({}),
                    json!({"conditions": [{"type": "NamesAccepted", "status": "False", "reason": "NameConflict"}]}),
                ),
                Failed,
                "NamesAccepted is False: NameConflict",
            ),
            // Custom resources: the generic rules.
            (
                "custom ready",
                custom(json!([{"type": "Ready", "status": "True", "message": "all good"}])),
                Current,
                "all good",
            ),
            (
                "custom not ready",
                custom(json!([{"type": "Ready", "status": "False", "reason": "Waiting", "message": "db starting"}])),
                InProgress,
                "db starting",
            ),
            (
                "custom ready unknown",
                custom(json!([{"type": "Ready", "status": "Unknown"}])),
                InProgress,
                "Ready is Unknown",
            ),
            (
                "custom not ready and stalled",
                custom(
                    json!([{"type": "Ready", "status": "False"}, {"type": "Stalled", "status": "True", "message": "bad spec"}]),
                ),
                Failed,
                "bad spec",
            ),
            (
                "custom reconciling",
                custom(
                    json!([{"type": "Ready", "status": "True"}, {"type": "Reconciling", "status": "True", "reason": "Scaling"}]),
                ),
                InProgress,
                "Reconciling is True: Scaling",
            ),
            (
                "custom stalled false",
                custom(json!([{"type": "Stalled", "status": "False"}])),
                Current,
                "Resource is current",
            ),
            (
                "custom no conditions",
                obj("example.com/v1", "Widget", json!({}), json!({})),
                Current,
                "Resource is current",
            ),
            (
                "custom no status",
                json!({"apiVersion": "example.com/v1", "kind": "Widget"}),
                Current,
                "Resource is current",
            ),
            // Malformed input: Unknown, naming the field.
            ("not an object", json!([1, 2]), Unknown, "not a JSON object"),
            ("no kind", json!({"apiVersion": "v1"}), Unknown, "kind is missing"),
            ("kind not a string", json!({"apiVersion": "v1", "kind": 3}), Unknown, "kind is not a string"),
            (
                "generation not an integer",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generation": "2"}, "status": {"observedGeneration": 1}}),
                Unknown,
                "metadata.generation is not an integer",
            ),
            (
                "metadata not an object",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": "x"}),
                Unknown,
                "metadata is not an object",
            ),
            (
                "replicas not an integer",
                deploy(json!({"replicas": "three"}), dep_status(3, 3, 3, 3)),
                Unknown,
                "spec.replicas is not an integer",
            ),
            ("conditions not a list", custom(json!({"type": "Ready"})), Unknown, "status.conditions is not a list"),
            ("condition not an object", custom(json!(["Ready"])), Unknown, "status.conditions[0] is not an object"),
            (
                "condition without type",
                custom(json!([{"status": "True"}])),
                Unknown,
                "status.conditions[0].type is missing",
            ),
            (
                "condition status not a string",
                custom(json!([{"type": "Ready", "status": true}])),
                Unknown,
                "status.conditions[0].status is not a string",
            ),
            (
                "container status malformed",
                pod(json!({"phase": "Running", "containerStatuses": [{"name": "app", "state": {"waiting": 1}}]})),
                Unknown,
                "status.containerStatuses[0].state.waiting is not an object",
            ),
            ("pod phase invented", pod(json!({"phase": "Dancing"})), Unknown, "status.phase \"Dancing\""),
        ]
    }

    #[test]
    fn readiness_should_follow_each_kinds_rules() {
        for (name, object, status, message) in table() {
            let r = Readiness::of(&object);
            assert_eq!(r.status, status, "{name}: {r:?}");
            assert!(r.message.contains(message), "{name}: message {:?} should contain {message:?}", r.message);
        }
    }

    #[test]
    fn the_narrow_parse_should_judge_as_the_whole_object_does() {
        for (name, object, _, _) in table() {
            assert_eq!(Readiness::of_json(&object.to_string()), Readiness::of(&object), "{name}");
        }
        let array = r#"[{"apiVersion": "v1"}, "Pod", null, null, null]"#;
        assert_eq!(Readiness::of_json(array).status, Unknown);
    }

    #[test]
    fn of_json_should_parse_then_judge() {
        let r = Readiness::of_json(r#"{"apiVersion": "v1", "kind": "ConfigMap"}"#);
        assert_eq!(r.status, Current);
        for text in ["", "not json", "[]", "3", "null"] {
            let r = Readiness::of_json(text);
            assert_eq!(r.status, Unknown, "{text:?}");
            assert!(r.message.starts_with("object is not"), "{text:?}: {}", r.message);
        }
    }

    #[test]
    fn status_should_serialise_in_kstatus_spelling() {
        for s in [Current, InProgress, Failed, Terminating, Unknown] {
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
            assert_eq!(s.to_string(), s.as_str());
        }
        let r = Readiness { status: InProgress, message: "Ready: 1/2".into() };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v, json!({"status": "InProgress", "message": "Ready: 1/2"}));
        assert_eq!(serde_json::from_value::<Readiness>(v).unwrap(), r);
    }

    #[test]
    fn all_current_should_need_every_one() {
        let ready = Readiness { status: Current, message: String::new() };
        let busy = Readiness { status: InProgress, message: String::new() };
        assert!(all_current([]));
        assert!(all_current([&ready, &ready]));
        assert!(!all_current(&[ready, busy]));
    }

    /// Replace each value in `v`, one at a time, by each of `garbage`, and
    /// call `f` on every result.
    fn mutations(v: &Value, garbage: &[Value], f: &mut dyn FnMut(Value)) {
        fn walk(root: &Value, at: &mut Vec<String>, garbage: &[Value], f: &mut dyn FnMut(Value)) {
            let here = at.iter().fold(root, |v, k| match v {
                Value::Array(a) => &a[k.parse::<usize>().unwrap()],
                _ => &v[k.as_str()],
            });
            for g in garbage {
                let mut copy = root.clone();
                let slot = at.iter().fold(&mut copy, |v, k| match v {
                    Value::Array(a) => &mut a[k.parse::<usize>().unwrap()],
                    _ => &mut v[k.as_str()],
                });
                *slot = g.clone();
                f(copy);
            }
            let keys: Vec<String> = match here {
                Value::Object(m) => m.keys().cloned().collect(),
                Value::Array(a) => (0..a.len()).map(|i| i.to_string()).collect(),
                _ => vec![],
            };
            for k in keys {
                at.push(k);
                walk(root, at, garbage, f);
                at.pop();
            }
        }
        walk(v, &mut Vec::new(), garbage, f);
    }

    #[test]
    fn readiness_should_never_panic() {
        let garbage = [
            json!(null),
            json!(true),
            json!("x"),
            json!(""),
            json!(-1),
            json!(1.5),
            json!(i64::MIN),
            json!(i64::MAX),
            json!(u64::MAX),
            json!([]),
            json!([1, "x", null]),
            json!({}),
        ];
        let mut seen = 0;
        for (_, object, _, _) in table() {
            mutations(&object, &garbage, &mut |mutated| {
                let r = Readiness::of(&mutated);
                assert!(!r.message.is_empty(), "{mutated}: empty message");
                seen += 1;
            });
        }
        assert!(seen > 1000, "only {seen} mutations");
    }
}
