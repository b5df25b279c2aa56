//! [`Context`]: reads from the host's cache and logging, during one reconcile.

use std::fmt;

use serde::de::DeserializeOwned;

use crate::request::parse_object;
use crate::{Failure, Gvk, Host, HttpError, HttpRequest, HttpResponse, Level, ObjectKind, raw};

/// What a reconciler may do besides computing: read objects from the host's
/// cache (only kinds declared in [`Manifest::reads`], the parent's and the
/// owned kinds) and log.
///
/// Reads never reach the API server and never block on the network; the
/// cache may lag slightly, and the host reconciles again when it catches up.
///
/// ```no_run
/// # use operon_sdk::{Context, Failure};
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// fn settings(ctx: &Context) -> Result<ConfigMap, Failure> {
///     ctx.info("reading settings");
///     ctx.get::<ConfigMap>("settings")?
///         .ok_or_else(|| Failure::transient("configmap settings does not exist yet"))
/// }
/// ```
///
/// [`Manifest::reads`]: crate::Manifest::reads
pub struct Context<'a> {
    host: &'a dyn Host,
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

impl<'a> Context<'a> {
    /// A context over `host`. [`run::reconcile`](crate::run::reconcile)
    /// makes one; build your own only to call a reconcile function directly.
    pub fn new(host: &'a dyn Host) -> Context<'a> {
        Context { host }
    }

    /// The object of `K`'s kind called `name` in the parent's namespace (or
    /// cluster-scoped), `None` if it does not exist.
    ///
    /// # Errors
    ///
    /// Transient when the host refuses the read (the kind is not declared in
    /// the manifest or not granted: fix the manifest or the grants; the
    /// backoff retries meanwhile). Terminal when the object does not fit `K`.
    pub fn get<K: ObjectKind + DeserializeOwned>(&self, name: &str) -> Result<Option<K>, Failure> {
        self.get_kind(K::gvk(), None, name)
    }

    /// The object of `K`'s kind called `name` in `namespace`.
    ///
    /// # Errors
    ///
    /// As [`get`](Context::get).
    pub fn get_in<K: ObjectKind + DeserializeOwned>(&self, namespace: &str, name: &str) -> Result<Option<K>, Failure> {
        self.get_kind(K::gvk(), Some(namespace.to_owned()), name)
    }

    /// The object `reference` points at, parsed as `T` (for types without
    /// [`ObjectKind`], such as `serde_json::Value`).
    ///
    /// # Errors
    ///
    /// As [`get`](Context::get).
    pub fn get_ref<T: DeserializeOwned>(&self, reference: &raw::ObjectRef) -> Result<Option<T>, Failure> {
        match self.host.get(reference) {
            Ok(Some(json)) => parse_object(&json).map(Some),
            Ok(None) => Ok(None),
            Err(error) => Err(Failure::transient(format!("cannot get {} {}: {error}", reference.kind, reference.name))),
        }
    }

    fn get_kind<T: DeserializeOwned>(
        &self,
        kind: Gvk,
        namespace: Option<String>,
        name: &str,
    ) -> Result<Option<T>, Failure> {
        self.get_ref(&raw::ObjectRef { kind, namespace, name: name.to_owned() })
    }

    /// The objects of `K`'s kind in the parent's namespace (or
    /// cluster-scoped) whose labels match `label_selector`, in Kubernetes
    /// syntax (`app=web,tier!=db`, `env in (a,b)`, `!legacy`; empty: all).
    ///
    /// # Errors
    ///
    /// Transient when the host refuses the list (kind not declared or
    /// granted, malformed selector). Terminal when an object does not fit `K`.
    pub fn list<K: ObjectKind + DeserializeOwned>(&self, label_selector: &str) -> Result<Vec<K>, Failure> {
        self.list_of(&K::gvk(), None, label_selector)
    }

    /// The objects of `K`'s kind in `namespace` matching `label_selector`.
    ///
    /// # Errors
    ///
    /// As [`list`](Context::list).
    pub fn list_in<K: ObjectKind + DeserializeOwned>(
        &self,
        namespace: &str,
        label_selector: &str,
    ) -> Result<Vec<K>, Failure> {
        self.list_of(&K::gvk(), Some(namespace), label_selector)
    }

    /// The objects of `kind` in `namespace` (`None`: the parent's) matching
    /// `label_selector`, parsed as `T`.
    ///
    /// # Errors
    ///
    /// As [`list`](Context::list).
    pub fn list_of<T: DeserializeOwned>(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<T>, Failure> {
        let selector = (!label_selector.is_empty()).then_some(label_selector);
        let objects = self
            .host
            .list(kind, namespace, selector)
            .map_err(|error| Failure::transient(format!("cannot list {kind}: {error}")))?;
        objects.iter().map(|json| parse_object(json)).collect()
    }

    /// Writes a log line through the host's logger, which tags it with the
    /// controller and the parent.
    pub fn log(&self, level: Level, message: impl fmt::Display) {
        self.host.log(level, &message.to_string(), &[]);
    }

    /// Writes a log line with structured key/value fields.
    pub fn log_with(&self, level: Level, message: impl fmt::Display, fields: &[(&str, &dyn fmt::Display)]) {
        let fields: Vec<(String, String)> =
            fields.iter().map(|(key, value)| ((*key).to_owned(), value.to_string())).collect();
        self.host.log(level, &message.to_string(), &fields);
    }

    /// One outbound HTTP call, made by the host (contract 0.2's `egress`):
    /// only to what the Reconciler's `spec.grants.egress` allows, with a
    /// credential the host adds by name ([`HttpRequest::credential`]; its
    /// value never reaches the guest), within the reconcile's deadline.
    /// A non-2xx status is an answer, not an error.
    ///
    /// ```no_run
    /// # use operon_sdk::{Context, Failure, HttpRequest};
    /// fn zone(ctx: &Context) -> Result<serde_json::Value, Failure> {
    ///     let answer = ctx
    ///         .http(HttpRequest::get("http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.org.").credential("pdns"))
    ///         .map_err(|e| Failure::transient(format!("PowerDNS: {e}")))?;
    ///     answer.json().map_err(|e| Failure::transient(format!("PowerDNS answered {}: {e}", answer.status)))
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// Why no answer came ([`HttpError`]); its message says what to change
    /// when the host refused the call.
    pub fn http(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.host.fetch(&request)
    }

    /// Logs at debug level.
    pub fn debug(&self, message: impl fmt::Display) {
        self.log(Level::Debug, message);
    }

    /// Logs at info level.
    pub fn info(&self, message: impl fmt::Display) {
        self.log(Level::Info, message);
    }

    /// Logs at warn level.
    pub fn warn(&self, message: impl fmt::Display) {
        self.log(Level::Warn, message);
    }
}
