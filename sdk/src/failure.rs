//! [`Failure`]: why a reconcile produced no outcome.

use std::fmt;

use crate::raw;

/// Why a reconcile produced no outcome. Nothing of the reconcile is written.
///
/// - [`Failure::Transient`]: may succeed later (a dependency is not ready, a
///   related object is missing). The host retries with per-object
///   exponential backoff (5 ms doubling up to 1000 s); [`Request::attempt`]
///   counts the failures in a row.
/// - [`Failure::Terminal`]: retrying cannot help (the spec is invalid). The
///   host records a warning event and does not retry until the object
///   changes.
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
pub enum Failure {
    /// Retry with backoff.
    Transient(String),
    /// Do not retry until the object changes.
    Terminal(String),
}

impl Failure {
    /// A failure the host retries with backoff.
    pub fn transient(message: impl fmt::Display) -> Failure {
        Failure::Transient(message.to_string())
    }

    /// A failure the host does not retry until the object changes.
    pub fn terminal(message: impl fmt::Display) -> Failure {
        Failure::Terminal(message.to_string())
    }

    /// Whether retrying cannot help.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Failure::Terminal(_))
    }

    /// The message.
    pub fn message(&self) -> &str {
        match self {
            Failure::Transient(message) | Failure::Terminal(message) => message,
        }
    }

    /// Prefixes the message with `context: `, keeping the kind.
    ///
    /// ```
    /// let failure = operon_sdk::Failure::transient("not found").context("secret db-password");
    /// assert_eq!(failure.message(), "secret db-password: not found");
    /// ```
    pub fn context(self, context: impl fmt::Display) -> Failure {
        match self {
            Failure::Transient(message) => Failure::Transient(format!("{context}: {message}")),
            Failure::Terminal(message) => Failure::Terminal(format!("{context}: {message}")),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Transient(message) => write!(f, "transient failure: {message}"),
            Failure::Terminal(message) => write!(f, "terminal failure: {message}"),
        }
    }
}

impl std::error::Error for Failure {}

/// JSON that does not fit the Rust type will not fit it on a retry either:
/// a terminal failure. The position in the JSON text is dropped (the text is
/// the host's serialization, not something the author wrote).
impl From<serde_json::Error> for Failure {
    fn from(error: serde_json::Error) -> Failure {
        Failure::Terminal(json_error_message(&error))
    }
}

impl From<Failure> for raw::Failure {
    fn from(failure: Failure) -> raw::Failure {
        match failure {
            Failure::Transient(message) => raw::Failure::Transient(message),
            Failure::Terminal(message) => raw::Failure::Terminal(message),
        }
    }
}

impl From<raw::Failure> for Failure {
    fn from(failure: raw::Failure) -> Failure {
        match failure {
            raw::Failure::Transient(message) => Failure::Transient(message),
            raw::Failure::Terminal(message) => Failure::Terminal(message),
        }
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
}
