//! [`Outcome`]: what a reconcile wants to exist, as a builder.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::failure::json_error_message;
use crate::{Failure, ObjectKind, raw};

pub use crate::raw::Event;

/// The JSON text of `value`. `serde_json::to_string` writes into its buffer
/// directly; `Value`'s `Display` (`value.to_string()`) goes through
/// `fmt::Formatter` for every piece and, measured in a guest
/// (`cargo xtask bench runtime` under `perf`), made serializing an outcome
/// a fifth of the whole reconcile.
pub(crate) fn to_json(value: &Value) -> String {
    // Serializing a `Value` cannot fail (its keys are strings).
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// Serializes `object` into a JSON map that carries `apiVersion` and `kind`,
/// filling them from `kind` (`(apiVersion, kind)`) when it lacks them.
///
/// # Errors
///
/// Terminal: the value does not serialize, is not a JSON object, or has no
/// `apiVersion`/`kind`.
pub(crate) fn to_object(object: impl Serialize, kind: Option<(&str, &str)>) -> Result<Map<String, Value>, Failure> {
    let value = serde_json::to_value(object).map_err(|error| {
        Failure::terminal(format!("cannot serialize a desired object: {}", json_error_message(&error)))
    })?;
    let Value::Object(mut map) = value else {
        return Err(Failure::terminal("a desired object must serialize to a JSON object"));
    };
    if let Some((api_version, kind)) = kind {
        map.entry("apiVersion").or_insert_with(|| api_version.into());
        map.entry("kind").or_insert_with(|| kind.into());
    }
    for field in ["apiVersion", "kind"] {
        if !map.get(field).is_some_and(Value::is_string) {
            let name = map.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("<unnamed>");
            return Err(Failure::terminal(format!(
                "desired object {name} has no {field}: set it, or implement ObjectKind for its type and use apply_kind"
            )));
        }
    }
    Ok(map)
}

/// What a reconcile wants: the children that should exist, the parent's new
/// status, events, when to run again and, while finalizing, whether clean-up
/// is done.
///
/// An outcome is the whole truth for the parent: children that exist but are
/// not [applied](Outcome::apply) are deleted, and the status replaces the
/// current one. Build it from the request alone, the same way every time
/// (reconciliation is level-based: the host may call again with the same
/// request at any time).
///
/// ```
/// use std::time::Duration;
/// use operon_sdk::Outcome;
/// use serde_json::json;
///
/// let outcome = Outcome::new()
///     .apply(json!({
///         "apiVersion": "v1",
///         "kind": "ConfigMap",
///         "metadata": {"name": "web-settings"},
///         "data": {"mode": "production"},
///     }))
///     .status(json!({"phase": "Pending"}))
///     .event("Configured", "wrote configmap web-settings")
///     .requeue_after(Duration::from_secs(30));
/// let raw = outcome.into_raw().unwrap();
/// assert_eq!(raw.desired.len(), 1);
/// assert_eq!(raw.requeue_after_ms, Some(30_000));
/// ```
///
/// # Errors
///
/// Builder methods do not fail on the spot: an object that cannot be used is
/// remembered, and [`into_raw`](Outcome::into_raw) (which the SDK calls when
/// `reconcile` returns) turns the first such problem into a terminal failure.
#[derive(Debug, Clone, Default)]
#[must_use = "an outcome does nothing until it is returned from reconcile"]
pub struct Outcome {
    desired: Vec<Map<String, Value>>,
    status: Option<Value>,
    events: Vec<Event>,
    requeue_after: Option<Duration>,
    requeue_at: Option<String>,
    finalized: bool,
    needs_finalizer: Option<bool>,
    parent_metadata: Option<raw::ParentMetadata>,
    error: Option<Failure>,
}

impl Outcome {
    /// An outcome that wants nothing: no children (every existing one is
    /// deleted), status untouched, no events.
    pub fn new() -> Outcome {
        Outcome::default()
    }

    /// Wants `object` to exist: the host sets its namespace to the parent's
    /// when missing, adds the controller ownerReference and server-side
    /// applies it. Its kind must be in [`Manifest::owns`].
    ///
    /// `object` is anything that serializes to a JSON object with
    /// `apiVersion` and `kind`: a k8s-openapi type (they always write both), a
    /// `serde_json::Value`, a struct of yours with those fields. For a struct
    /// that leaves them out, use [`apply_kind`](Outcome::apply_kind).
    ///
    /// [`Manifest::owns`]: crate::Manifest::owns
    pub fn apply(self, object: impl Serialize) -> Outcome {
        self.push_desired(to_object(object, None))
    }

    /// As [`apply`](Outcome::apply), filling `apiVersion` and `kind` from
    /// [`ObjectKind`] when the serialization lacks them.
    ///
    /// ```
    /// use operon_sdk::{ObjectKind, Outcome};
    ///
    /// #[derive(serde::Serialize)]
    /// struct Settings {
    ///     metadata: serde_json::Value,
    ///     data: std::collections::BTreeMap<String, String>,
    /// }
    ///
    /// impl ObjectKind for Settings {
    ///     const API_VERSION: &'static str = "v1";
    ///     const KIND: &'static str = "ConfigMap";
    /// }
    ///
    /// let settings = Settings { metadata: serde_json::json!({"name": "s"}), data: Default::default() };
    /// let raw = Outcome::new().apply_kind(settings).into_raw().unwrap();
    /// assert!(raw.desired[0].contains(r#""kind":"ConfigMap""#));
    /// ```
    pub fn apply_kind<K: ObjectKind + Serialize>(self, object: K) -> Outcome {
        self.push_desired(to_object(object, Some((K::API_VERSION, K::KIND))))
    }

    fn push_desired(mut self, object: Result<Map<String, Value>, Failure>) -> Outcome {
        match object {
            Ok(map) => self.desired.push(map),
            Err(failure) => {
                self.error.get_or_insert(failure);
            }
        }
        self
    }

    /// Sets the parent's new `status` (replacing the current one; written
    /// only when it differs). Without it the status is left untouched.
    ///
    /// Keep it deterministic: no clock readings, so that an unchanged cluster
    /// gives an unchanged status and no write.
    pub fn status(mut self, status: impl Serialize) -> Outcome {
        match serde_json::to_value(status) {
            Ok(value @ Value::Object(_)) => self.status = Some(value),
            Ok(_) => {
                self.error.get_or_insert(Failure::terminal("the status must serialize to a JSON object"));
            }
            Err(error) => {
                self.error.get_or_insert(Failure::terminal(format!(
                    "cannot serialize the status: {}",
                    json_error_message(&error)
                )));
            }
        }
        self
    }

    /// Records a `Normal` event on the parent. `reason` is UpperCamelCase
    /// (`Scaled`), `message` is for humans.
    pub fn event(self, reason: impl Into<String>, message: impl Into<String>) -> Outcome {
        self.push_event(false, reason.into(), message.into())
    }

    /// Records a `Warning` event on the parent.
    pub fn warning(self, reason: impl Into<String>, message: impl Into<String>) -> Outcome {
        self.push_event(true, reason.into(), message.into())
    }

    fn push_event(mut self, warning: bool, reason: String, message: String) -> Outcome {
        self.events.push(Event { warning, reason, message });
        self
    }

    /// Reconciles again after `delay` even if nothing changes (for example to
    /// poll something outside the cluster). Rounded down to milliseconds.
    pub fn requeue_after(mut self, delay: Duration) -> Outcome {
        self.requeue_after = Some(delay);
        self
    }

    /// Reconciles again at `at` even if nothing changes: for schedules,
    /// expiries and TTLs (contract 0.2). Measured from [`Request::now`]: a
    /// time already past means as soon as the host's floor allows; with
    /// [`requeue_after`](Outcome::requeue_after) too, the earlier wins.
    ///
    /// ```
    /// use operon_sdk::{Outcome, jiff::Timestamp};
    ///
    /// let at: Timestamp = "2026-11-26T09:30:00Z".parse().unwrap();
    /// let raw = Outcome::new().requeue_at(at).into_raw().unwrap();
    /// assert_eq!(raw.requeue_at.as_deref(), Some("2026-11-26T09:30:00.000Z"));
    /// ```
    ///
    /// [`Request::now`]: crate::Request::now
    pub fn requeue_at(mut self, at: jiff::Timestamp) -> Outcome {
        self.requeue_at = Some(operon_contract::rfc3339(at));
        self
    }

    /// Clean-up is complete: the host may remove the finalizer and let the
    /// parent go. Only meaningful when [`Request::finalizing`].
    ///
    /// [`Request::finalizing`]: crate::Request::finalizing
    pub fn finalized(mut self) -> Outcome {
        self.finalized = true;
        self
    }

    /// Whether this parent needs clean-up when it is deleted (contract
    /// 0.2): the host keeps the manifest's finalizer on it while outcomes
    /// say so, adding it now, and releases it when one says `false`.
    ///
    /// Unset, it is `true` when the manifest declares a
    /// [finalizer](crate::Manifest::finalizer) — every parent carries it, as
    /// under contract 0.1 — except in the answer to a finalizing request;
    /// a decorator that holds only some parents says it per parent.
    pub fn needs_finalizer(mut self, needs: bool) -> Outcome {
        self.needs_finalizer = Some(needs);
        self
    }

    /// Keeps the label `key=value` on the parent (contract 0.2): written by
    /// server-side apply under the plugin's field manager, so a label an
    /// outcome stops keeping is removed and labels others set are left
    /// alone. Nothing else of the parent is written. Keys under
    /// `operon.dev/` and the Reconciler selector's keys are refused.
    pub fn parent_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Outcome {
        self.parent_metadata.get_or_insert_with(empty_metadata).labels.push((key.into(), value.into()));
        self
    }

    /// Keeps the annotation `key=value` on the parent, as
    /// [`parent_label`](Outcome::parent_label) keeps a label.
    pub fn parent_annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Outcome {
        self.parent_metadata.get_or_insert_with(empty_metadata).annotations.push((key.into(), value.into()));
        self
    }

    /// Keeps no labels or annotations of this reconciler on the parent
    /// (removing the ones earlier outcomes kept), where an outcome without
    /// [`parent_label`](Outcome::parent_label) or
    /// [`parent_annotation`](Outcome::parent_annotation) leaves them alone.
    pub fn clear_parent_metadata(mut self) -> Outcome {
        self.parent_metadata = Some(empty_metadata());
        self
    }

    /// `needs_finalizer` when the reconciler did not say: what
    /// [`run::reconcile`](crate::run::reconcile) applies from the manifest.
    pub(crate) fn needs_finalizer_by_default(mut self, needs: bool) -> Outcome {
        self.needs_finalizer.get_or_insert(needs);
        self
    }

    /// The desired objects so far.
    pub fn desired(&self) -> &[Map<String, Value>] {
        &self.desired
    }

    /// The events so far.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Serializes into the WIT record.
    ///
    /// # Errors
    ///
    /// The first problem a builder method met (see [the type docs](Outcome#errors)).
    pub fn into_raw(self) -> Result<raw::Outcome, Failure> {
        if let Some(failure) = self.error {
            return Err(failure);
        }
        Ok(raw::Outcome {
            desired: self.desired.into_iter().map(|object| to_json(&Value::Object(object))).collect(),
            status: self.status.map(|status| to_json(&status)),
            events: self.events,
            requeue_after_ms: self.requeue_after.map(|delay| u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
            requeue_at: self.requeue_at,
            finalized: self.finalized,
            needs_finalizer: self.needs_finalizer.unwrap_or(false),
            parent_metadata: self.parent_metadata,
        })
    }
}

fn empty_metadata() -> raw::ParentMetadata {
    raw::ParentMetadata { labels: Vec::new(), annotations: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn apply_should_refuse_values_without_a_kind() {
        let outcome = Outcome::new().apply(json!({"apiVersion": "v1", "metadata": {"name": "x"}}));
        assert_eq!(
            outcome.into_raw().unwrap_err(),
            Failure::terminal(
                "desired object x has no kind: set it, or implement ObjectKind for its type and use apply_kind"
            )
        );
    }

    #[test]
    fn apply_should_fill_the_kind_of_typed_objects() {
        #[derive(Serialize)]
        struct Settings {
            metadata: Value,
        }
        impl ObjectKind for Settings {
            const API_VERSION: &'static str = "v1";
            const KIND: &'static str = "ConfigMap";
        }
        let raw = Outcome::new().apply_kind(Settings { metadata: json!({"name": "s"}) }).into_raw().unwrap();
        let object: Value = serde_json::from_str(&raw.desired[0]).unwrap();
        assert_eq!(object, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}}));
    }

    #[test]
    fn parent_metadata_should_be_kept_only_when_asked() {
        assert_eq!(Outcome::new().into_raw().unwrap().parent_metadata, None, "left alone");
        let raw = Outcome::new().parent_label("tier", "web").parent_annotation("note", "x").into_raw().unwrap();
        let kept = raw.parent_metadata.unwrap();
        assert_eq!(kept.labels, [("tier".to_owned(), "web".to_owned())]);
        assert_eq!(kept.annotations, [("note".to_owned(), "x".to_owned())]);
        let cleared = Outcome::new().clear_parent_metadata().into_raw().unwrap().parent_metadata.unwrap();
        assert!(cleared.labels.is_empty() && cleared.annotations.is_empty());
    }

    #[test]
    fn needs_finalizer_should_default_to_what_the_runner_says() {
        assert!(!Outcome::new().into_raw().unwrap().needs_finalizer);
        assert!(Outcome::new().needs_finalizer_by_default(true).into_raw().unwrap().needs_finalizer);
        let said = Outcome::new().needs_finalizer(false).needs_finalizer_by_default(true);
        assert!(!said.into_raw().unwrap().needs_finalizer, "an explicit answer wins");
    }

    #[test]
    fn status_should_be_an_object() {
        assert!(Outcome::new().status(3).into_raw().unwrap_err().is_terminal());
    }
}
