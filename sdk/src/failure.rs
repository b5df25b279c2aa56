//! [`Failure`]: why a reconcile produced no outcome.

use std::fmt::{self, Write as _};

use serde::Serialize;
use serde_json::Value;

use crate::raw;

/// Why a reconcile produced no outcome. Nothing of the outcome is written
/// — except, when the failure carries one, the parent's status
/// ([`with_status`](Failure::with_status)).
///
/// - [transient](Failure::transient): may succeed later (a dependency is
///   not ready, a related object is missing). The host retries with
///   per-object exponential backoff (5 ms doubling up to 1000 s);
///   [`Request::attempt`] counts the failures in a row.
/// - [terminal](Failure::terminal): retrying cannot help (the spec is
///   invalid). The host records a warning event and does not retry until
///   the object changes.
///
/// `?` converts a [`serde_json::Error`] into a terminal failure. Turn any other
/// error into a failure with `map_err(Failure::transient)` or
/// `map_err(Failure::terminal)`:
///
/// ```
/// use operon_sdk::Failure;
///
/// fn port(text: &str) -> Result<u16, Failure> {
///     text.parse::<u16>().map_err(|e| Failure::terminal(format!("spec.port {text:?}: {e}")))
/// }
/// assert!(port("http").unwrap_err().is_terminal());
/// ```
///
/// [`Request::attempt`]: crate::Request::attempt
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    terminal: bool,
    message: String,
    status: Option<Value>,
}

impl Failure {
    /// A failure the host retries with backoff.
    pub fn transient(message: impl fmt::Display) -> Failure {
        Failure { terminal: false, message: message.to_string(), status: None }
    }

    /// A failure the host does not retry until the object changes.
    pub fn terminal(message: impl fmt::Display) -> Failure {
        Failure { terminal: true, message: message.to_string(), status: None }
    }

    /// The parent's status to write before the host backs off (contract
    /// 0.2), so the parent tells the truth while it waits — a `Ready`
    /// condition `False` with the reason, as `r.Status().Update` in a
    /// controller-runtime error path. Written like [`Outcome::status`]
    /// (only when it differs; the host sets `observedGeneration`); nothing
    /// else is written.
    ///
    /// A status that does not serialize to a JSON object is dropped, and
    /// the message says so.
    ///
    /// ```
    /// use operon_sdk::Failure;
    /// use serde_json::json;
    ///
    /// let failure = Failure::terminal("spec.port must be 1-65535")
    ///     .with_status(json!({"conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec"}]}));
    /// assert_eq!(failure.status().unwrap()["conditions"][0]["reason"], "InvalidSpec");
    /// ```
    ///
    /// [`Outcome::status`]: crate::Outcome::status
    pub fn with_status(mut self, status: impl Serialize) -> Failure {
        match serde_json::to_value(status) {
            Ok(value @ Value::Object(_)) => self.status = Some(value),
            Ok(_) => self.message.push_str(" (its status is not a JSON object and was dropped)"),
            Err(error) => {
                let _ = write!(self.message, " (its status was dropped: {})", json_error_message(&error));
            }
        }
        self
    }

    /// Whether retrying cannot help.
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The status this failure carries, if any.
    pub fn status(&self) -> Option<&Value> {
        self.status.as_ref()
    }

    /// Prefixes the message with `context: `, keeping the kind.
    ///
    /// ```
    /// let failure = operon_sdk::Failure::transient("not found").context("secret db-password");
    /// assert_eq!(failure.message(), "secret db-password: not found");
    /// ```
    pub fn context(mut self, context: impl fmt::Display) -> Failure {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.terminal { "terminal" } else { "transient" };
        write!(f, "{kind} failure: {}", self.message)
    }
}

impl std::error::Error for Failure {}

/// JSON that does not fit the Rust type will not fit it on a retry either:
/// a terminal failure. The position in the JSON text is dropped (the text is
/// the host's serialization, not something the author wrote).
impl From<serde_json::Error> for Failure {
    fn from(error: serde_json::Error) -> Failure {
        Failure::terminal(json_error_message(&error))
    }
}

impl From<Failure> for raw::Failure {
    fn from(failure: Failure) -> raw::Failure {
        let detail = raw::FailureDetail {
            message: failure.message,
            status: failure.status.map(|status| crate::outcome::to_json(&status)),
        };
        if failure.terminal { raw::Failure::Terminal(detail) } else { raw::Failure::Transient(detail) }
    }
}

impl From<raw::Failure> for Failure {
    fn from(failure: raw::Failure) -> Failure {
        let (terminal, detail) = match failure {
            raw::Failure::Transient(detail) => (false, detail),
            raw::Failure::Terminal(detail) => (true, detail),
        };
        let status = detail.status.and_then(|text| serde_json::from_str(&text).ok());
        Failure { terminal, message: detail.message, status }
    }
}

/// serde_json's message without its ` at line L column C` suffix.
pub(crate) fn json_error_message(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    match text.strip_suffix(&suffix) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_should_be_terminal_without_a_position() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code, reason = "only deserialized")]
        struct Spec {
            image: String,
        }
        let error = serde_json::from_str::<Spec>("{\"replicas\": 1}").unwrap_err();
        assert_eq!(Failure::from(error), Failure::terminal("missing field `image`"));
    }

    #[test]
    fn a_status_should_cross_with_the_failure() {
        let failure = Failure::transient("waiting").with_status(serde_json::json!({"phase": "Waiting"}));
        let raw::Failure::Transient(detail) = raw::Failure::from(failure.clone()) else { panic!("transient") };
        assert_eq!(detail.status.as_deref(), Some(r#"{"phase":"Waiting"}"#));
        assert_eq!(Failure::from(raw::Failure::Transient(detail)), failure);
        let dropped = Failure::terminal("bad").with_status(3);
        assert!(dropped.status().is_none());
        assert!(dropped.message().starts_with("bad (its status"), "{}", dropped.message());
    }
}
