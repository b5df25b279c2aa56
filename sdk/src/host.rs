//! [`Host`]: the host's read-only imports, as a trait.

use crate::raw::{Gvk, ObjectRef};
use operon_contract::egress::{HttpError, HttpRequest, HttpResponse};

pub use crate::raw::Level;

/// The calls a reconciler makes into the host: the `host` interface of the
/// WIT world, with objects as JSON text.
///
/// Inside a component the SDK implements it with the WIT imports; natively,
/// [`testing::FakeCluster`] implements it, so the same
/// [`run::reconcile`] runs in both. Guest code never sees it: it talks to
/// [`Context`].
///
/// [`testing::FakeCluster`]: crate::testing::FakeCluster
/// [`run::reconcile`]: crate::run::reconcile
/// [`Context`]: crate::Context
pub trait Host {
    /// Writes a log line through the host's logger.
    fn log(&self, level: Level, message: &str, fields: &[(String, String)]);

    /// One object, `Ok(None)` if it does not exist. A `None` namespace means
    /// the parent's namespace for namespaced kinds.
    ///
    /// # Errors
    ///
    /// The kind may not be read (not in the manifest) or is not known.
    fn get(&self, reference: &ObjectRef) -> Result<Option<String>, String>;

    /// Every object of `kind` in `namespace` (`None`: the parent's namespace
    /// for namespaced kinds) matching `label_selector` (`None`: all).
    ///
    /// # Errors
    ///
    /// The kind may not be read, is not known, or the selector is malformed.
    fn list(&self, kind: &Gvk, namespace: Option<&str>, label_selector: Option<&str>) -> Result<Vec<String>, String>;

    /// One outbound HTTP call through the host (the `egress` interface).
    ///
    /// # Errors
    ///
    /// Why no answer came: refused by the Reconciler's grants, timed out,
    /// unreachable, too large, over the reconcile's budget, or (replaying)
    /// not recorded.
    fn fetch(&self, request: &HttpRequest) -> Result<HttpResponse, HttpError>;
}

/// The host imports of the component. Only ever called inside a component:
/// on native targets wit-bindgen's import stubs are `unreachable!()`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct WitHost;

impl Host for WitHost {
    fn log(&self, level: Level, message: &str, fields: &[(String, String)]) {
        crate::bindings::operon::reconciler::host::log(level, message, fields);
    }

    fn get(&self, reference: &ObjectRef) -> Result<Option<String>, String> {
        crate::bindings::operon::reconciler::host::get(reference)
    }

    fn list(&self, kind: &Gvk, namespace: Option<&str>, label_selector: Option<&str>) -> Result<Vec<String>, String> {
        crate::bindings::operon::reconciler::host::list(kind, namespace, label_selector)
    }

    fn fetch(&self, request: &HttpRequest) -> Result<HttpResponse, HttpError> {
        use crate::bindings::operon::reconciler::egress as wit;
        let asked = wit::HttpRequest {
            method: request.method.clone(),
            url: request.url.clone(),
            headers: request.headers.clone(),
            body: request.body.clone(),
            credential: request.credential.clone(),
            timeout_ms: request.timeout_ms,
        };
        match wit::fetch(&asked) {
            Ok(r) => Ok(HttpResponse { status: r.status, headers: r.headers, body: r.body }),
            Err(e) => Err(match e {
                wit::HttpError::Denied(m) => HttpError::Denied(m),
                wit::HttpError::Invalid(m) => HttpError::Invalid(m),
                wit::HttpError::Timeout(m) => HttpError::Timeout(m),
                wit::HttpError::Unreachable(m) => HttpError::Unreachable(m),
                wit::HttpError::TooLarge(m) => HttpError::TooLarge(m),
                wit::HttpError::Budget(m) => HttpError::Budget(m),
                wit::HttpError::NotRecorded(m) => HttpError::NotRecorded(m),
            }),
        }
    }
}
