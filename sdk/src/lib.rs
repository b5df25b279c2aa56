//! Write [Operon](https://github.com/operon-dev/operon) reconcilers in Rust.
//!
//! A reconciler is a pure function, compiled to a WebAssembly component: the
//! host hands it one object (the *parent*) with its children and related
//! objects, and it answers with the children that should exist, the parent's
//! status, events and when to run again. The host does all the I/O: it
//! watches the cluster, applies the answer with server-side apply, deletes
//! children that are no longer wanted, writes the status and records the
//! events.
//!
//! This crate turns that contract (the `operon:reconciler` WIT world) into
//! Rust types: implement [`Reconciler`], call [`export!`] once, build for
//! `wasm32-unknown-unknown`, and turn the module into a component with
//! `wasm-tools component new`.
//!
//! # The contract
//!
//! - **Level-based.** The host may call `reconcile` any number of times for the
//!   same object: when nothing changed, after a restart, twice in a row.
//!   Derive the answer from the [`Request`] alone; never keep state between
//!   calls (an instance may be fresh for every call).
//! - **Whole truth.** The [`Outcome`] lists *every* child that should exist;
//!   existing children it leaves out are deleted.
//! - **Deterministic.** Same request, same outcome: no clock readings (the
//!   time is an input, [`Request::now`]), no randomness, so an unchanged
//!   cluster causes no writes.
//! - **Failures.** A [transient](Failure::transient) failure is retried with
//!   backoff, a [terminal](Failure::terminal) one is not retried until the
//!   object changes; either may carry the parent's status
//!   ([`Failure::with_status`]).
//!
//! This release speaks contract 0.2 (`operon:reconciler@0.2.0`): the time
//! as an input, watches by reference and selector, each child's
//! [readiness](Request::readiness), failures with a status, update
//! strategies, parent labels and annotations, finalizers on demand,
//! [conversion](Reconciler::convert) and outbound HTTP through the host
//! ([`Context::http`]).
//!
//! # Example
//!
//! A `Greeting` custom resource that wants a ConfigMap holding its message:
//!
//! ```
//! use operon_sdk::{Context, Failure, Manifest, ObjectKind, Outcome, Reconciler, Request};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize)]
//! struct Greeting {
//!     spec: GreetingSpec,
//! }
//!
//! #[derive(Deserialize)]
//! struct GreetingSpec {
//!     message: String,
//! }
//!
//! impl ObjectKind for Greeting {
//!     const API_VERSION: &'static str = "example.operon.dev/v1";
//!     const KIND: &'static str = "Greeting";
//! }
//!
//! #[derive(Serialize)]
//! #[serde(rename_all = "camelCase")]
//! struct GreetingStatus {
//!     observed_generation: i64,
//!     published: bool,
//! }
//!
//! struct Greeter;
//!
//! impl Reconciler for Greeter {
//!     type Object = Greeting;
//!
//!     fn manifest() -> Manifest {
//!         Manifest::new("greeter", Greeting::gvk()).owns(ConfigMap::gvk())
//!     }
//!
//!     fn reconcile(req: Request<Greeting>, ctx: &Context) -> Result<Outcome, Failure> {
//!         if req.finalizing {
//!             return Ok(Outcome::new().finalized());
//!         }
//!         if req.object.spec.message.is_empty() {
//!             return Err(Failure::terminal("spec.message must not be empty"));
//!         }
//!         ctx.debug(format_args!("greeting {}", req.name()));
//!         let mut config_map = ConfigMap::default();
//!         config_map.metadata.name = Some(format!("{}-greeting", req.name()));
//!         config_map.data = Some([("message".to_owned(), req.object.spec.message.clone())].into());
//!         let published = !req.children::<ConfigMap>()?.is_empty();
//!         Ok(Outcome::new()
//!             .apply(config_map)
//!             .status(GreetingStatus { observed_generation: req.generation(), published }))
//!     }
//! }
//!
//! // In the guest crate: `operon_sdk::export!(Greeter);`
//!
//! // Natively, in a test: the same code path the component runs.
//! use operon_sdk::testing::{self, FakeCluster};
//! use serde_json::json;
//!
//! let request = testing::request(json!({
//!     "apiVersion": "example.operon.dev/v1",
//!     "kind": "Greeting",
//!     "metadata": {"name": "hello", "namespace": "default", "generation": 2},
//!     "spec": {"message": "hi"},
//! }))
//! .build::<Greeter>();
//! let outcome = testing::reconcile::<Greeter>(&FakeCluster::new(), request).unwrap();
//! assert_eq!(outcome.desired[0]["data"]["message"], "hi");
//! assert_eq!(outcome.status.unwrap()["observedGeneration"], 2);
//! ```
//!
//! # Admission
//!
//! The same reconciler may validate and default its parent kind before the
//! API server stores it: override [`Reconciler::validate`] and/or
//! [`Reconciler::mutate`] and export with `export!(MyReconciler with
//! admission)`. The host serves them as admission webhooks under the same
//! sandbox (see [`admission`]).
//!
//! # Building
//!
//! The guest crate is a `cdylib` (plus `rlib`, for native tests) built for
//! `wasm32-unknown-unknown`; `wasm-tools component new` (or
//! `cargo xtask guests` in the Operon repository) turns the module into a
//! component. It needs no WASI: the component imports only the host's
//! `operon:reconciler/host` interface.
//!
//! # Testing
//!
//! [`testing`] runs a reconciler natively through [`run::reconcile`], the
//! function the component export calls, with a [`testing::FakeCluster`]
//! answering `get` and `list`, and checks each outcome with the host's own
//! rules ([`operon_contract::rules`]: owned kinds, namespaces, names,
//! sizes, ownership), as `operon test` does. With the `fixtures` feature,
//! [`testing::fixtures`] runs the YAML fixtures of `operon test` from
//! `cargo test`.
//!
//! # Features
//!
//! - `k8s-openapi`: [`ObjectKind`] for every k8s-openapi resource type. The
//!   guest crate must enable one Kubernetes version feature of k8s-openapi.
//! - `fixtures`: [`testing::fixtures`] (`operon-contract`'s fixture files,
//!   and its YAML parser serde-saphyr).
//! - `arena` (default): in WebAssembly builds, the crate sets the global
//!   allocator to a 1 MiB bump arena in front of the standard one, so an
//!   instance that lives for one call never grows its memory (a fresh-instance
//!   reconcile of the WebApp example: 87 → 66 µs). Turn default features
//!   off to set your own `#[global_allocator]`.

pub mod admission;
#[cfg(any(test, all(target_arch = "wasm32", feature = "arena")))]
#[allow(unsafe_code, reason = "a global allocator hands out raw memory: its trait is unsafe")]
mod alloc;
#[doc(hidden)]
pub mod bindings;
mod context;
mod export;
mod failure;
mod host;
mod kind;
mod manifest;
mod outcome;
mod request;
pub mod run;
pub mod testing;

pub use admission::{AdmissionReview, Denial};
pub use context::Context;
pub use failure::Failure;
pub use host::{Host, Level};
pub use kind::{Gvk, ObjectKind};
pub use manifest::{Manifest, Mapping, UpdateStrategy};
pub use outcome::{Event, Outcome};
pub use request::{Metadata, Request};

/// The records of the WIT contract (`operon:reconciler/types`), as
/// wit-bindgen generates them: what crosses the component boundary.
///
/// Guest code rarely needs them; they are the input and output of
/// [`run::reconcile`] and of the host.
pub mod raw {
    pub use crate::bindings::admission::exports::operon::reconciler::admission::{Denial, Operation, Review, UserInfo};
    pub use crate::bindings::operon::reconciler::host::Level;
    pub use crate::bindings::operon::reconciler::types::{
        Child, Children, Event, Failure, FailureDetail, Gvk, Mapping, Object, ObjectRef, Outcome, OwnedUpdate,
        ParentMetadata, Readiness, ReadinessStatus, ReconcilerManifest as Manifest, Request, UpdateStrategy, Watch,
    };
}

/// The time type of [`Request::now`] and [`Outcome::requeue_at`].
pub use jiff;
/// Outbound HTTP through the host ([`Context::http`]): the request, its
/// answer, why none came, and a recorded exchange (fixtures' `egress:`).
pub use operon_contract::egress::{Exchange, HttpError, HttpRequest, HttpResponse};
/// A child's readiness, as the host computes it for every child it hands in
/// (kstatus's rules, from `operon_contract::readiness`: the same verdicts
/// in the host, `operon test` and this crate's [`testing`]).
pub use operon_contract::{Readiness, ReadinessStatus};

use serde::de::DeserializeOwned;

/// A reconciler: the kind it reconciles and how.
///
/// Implement it on a unit struct and [`export!`] it. Both functions are
/// associated functions, not methods: a reconciler has no state, because the
/// host may give every call a fresh instance.
///
/// See [the crate docs](crate#example) for a complete example.
pub trait Reconciler {
    /// The parent type: your custom resource's struct, a k8s-openapi type, or
    /// `serde_json::Value`. A parent that does not deserialize into it is a
    /// terminal failure naming the object and the field
    /// (`WebApp shop/web is invalid: missing field `image``).
    ///
    /// # Caveats
    ///
    /// That failure happens before `reconcile` runs, also while finalizing:
    /// a parent that no longer fits the type keeps its finalizer until it is
    /// fixed. Keep the type as lenient as the CRD schema (defaults for
    /// optional fields) and validate the rest in `reconcile`, after handling
    /// [`Request::finalizing`].
    type Object: DeserializeOwned;

    /// Describes the reconciler. Must be pure and cheap: the host calls it
    /// when it loads (and smoke-tests) the module.
    fn manifest() -> Manifest;

    /// Computes the desired state of one parent.
    ///
    /// Must be idempotent and must not depend on earlier calls: see
    /// [the contract](crate#the-contract).
    ///
    /// # Errors
    ///
    /// A [transient](Failure::transient) [`Failure`] to be retried with
    /// backoff, a [terminal](Failure::terminal) one to wait until the object
    /// changes. Nothing of the reconcile is written either way, except the
    /// status a failure carries.
    fn reconcile(req: Request<Self::Object>, ctx: &Context) -> Result<Outcome, Failure>;

    /// Accepts or refuses a create or update of a parent before the API
    /// server stores it; `Ok` may carry warnings, which `kubectl` prints.
    /// Called only when the component is exported `with admission`.
    ///
    /// Runs after [`mutate`](Reconciler::mutate), on the mutated object.
    /// Like `reconcile` it must be deterministic, and reads only what the
    /// manifest may read.
    ///
    /// The default accepts everything.
    ///
    /// ```
    /// # use operon_sdk::{AdmissionReview, Context, Denial, Failure, Gvk, Manifest, Outcome, Reconciler, Request};
    /// # struct Quota;
    /// # impl Reconciler for Quota {
    /// #     type Object = serde_json::Value;
    /// #     fn manifest() -> Manifest { Manifest::new("quota", Gvk::new("", "v1", "ConfigMap")) }
    /// #     fn reconcile(_: Request<serde_json::Value>, _: &Context) -> Result<Outcome, Failure> { Ok(Outcome::new()) }
    /// fn validate(review: AdmissionReview, _: &Context) -> Result<Vec<String>, Denial> {
    ///     let keys = review.object.as_ref().and_then(|o| o["data"].as_object()).map_or(0, |d| d.len());
    ///     if keys > 10 {
    ///         return Err(Denial::new(format!("at most 10 keys, not {keys}")));
    ///     }
    ///     Ok(if keys == 0 { vec!["no data".to_owned()] } else { Vec::new() })
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`Denial`]: the request is refused with its message (and code).
    fn validate(review: AdmissionReview, ctx: &Context) -> Result<Vec<String>, Denial> {
        let _ = (review, ctx);
        Ok(Vec::new())
    }

    /// Defaults or otherwise changes a parent before it is validated and
    /// stored: `Ok(Some(object))` is the whole object as it should be
    /// stored (the host sends the API server the difference as a JSON
    /// patch); `Ok(None)` leaves it unchanged. Called only when the
    /// component is exported `with admission`.
    ///
    /// The host refuses an object whose `apiVersion`, `kind`,
    /// `metadata.name` or `metadata.namespace` differ from the request's.
    ///
    /// The default changes nothing.
    ///
    /// # Errors
    ///
    /// A [`Denial`]: the request is refused with its message (and code).
    fn mutate(review: AdmissionReview, ctx: &Context) -> Result<Option<serde_json::Value>, Denial> {
        let _ = (review, ctx);
        Ok(None)
    }

    /// Converts every object to `desired_api_version` (`group/version`), in
    /// order: the CRD's conversion webhook, served by the host when the
    /// component is exported `with conversion` and the Reconciler is
    /// granted conversion (contract 0.2).
    ///
    /// Each answer keeps the object's `kind`, `metadata.name`,
    /// `metadata.namespace` and `metadata.uid` and carries the desired
    /// `apiVersion`; an object already at that version is returned as it
    /// is. Must be pure: it reads nothing ([`Context`] is not offered).
    ///
    /// The default refuses.
    ///
    /// # Errors
    ///
    /// Why the request is refused (the API server shows the message).
    fn convert(objects: Vec<serde_json::Value>, desired_api_version: &str) -> Result<Vec<serde_json::Value>, String> {
        let _ = objects;
        Err(format!("this reconciler does not convert objects (to {desired_api_version})"))
    }
}

/// The guest's allocator (the `arena` feature): see `alloc.rs`.
#[cfg(all(target_arch = "wasm32", feature = "arena"))]
#[global_allocator]
static ALLOCATOR: alloc::Arena = alloc::Arena::new();

#[doc(hidden)]
pub mod __private {
    //! Used by the expansion of [`export!`](crate::export); not public API.
    pub use crate::bindings;
    pub use crate::bindings::admission::exports::operon::reconciler::admission::Guest as Admission;
    pub use crate::bindings::conversion::exports::operon::reconciler::conversion::Guest as Conversion;
    pub use crate::bindings::exports::operon::reconciler::guest::Guest;
    pub use crate::host::WitHost;

    /// Make a panic say why before it traps: the component has no stderr
    /// (`wasm32-unknown-unknown`), so the hook sends `panicked at FILE:LINE:
    /// MESSAGE` through the host's `log` import at error level; the host
    /// keeps that line with the trap, so the parent's event, a rollback and
    /// `operon test` show it. Installed once per instance, by the exports.
    pub fn report_panics() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "Box<dyn Any>".to_owned());
                let line = match info.location() {
                    Some(at) => format!("panicked at {}:{}:{}: {message}", at.file(), at.line(), at.column()),
                    None => format!("panicked: {message}"),
                };
                crate::Host::log(&WitHost, crate::Level::Error, &line, &[]);
            }));
        });
    }
}
