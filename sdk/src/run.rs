//! The one code path from a WIT request to a WIT outcome, shared by the
//! component export and native callers (tests, benchmarks).
//!
//! [`export!`](crate::export) calls these functions with the WIT imports as the
//! [`Host`]; [`testing`](crate::testing) calls them with a
//! [`FakeCluster`](crate::testing::FakeCluster). Anything that runs natively
//! through them runs the same in the component.

use crate::{AdmissionReview, Context, Host, Reconciler, Request, raw};

/// The `manifest` export: `R::manifest()` as the WIT record.
pub fn manifest<R: Reconciler>() -> raw::Manifest {
    R::manifest().into_raw()
}

/// The `reconcile` export: parses the parent as `R::Object`, calls
/// `R::reconcile` with a [`Context`] over `host`, serializes the outcome.
///
/// ```
/// use operon_sdk::{raw, run, testing::FakeCluster};
/// # use operon_sdk::{Context, Failure, Gvk, Manifest, Outcome, Reconciler, Request};
/// # struct Noop;
/// # impl Reconciler for Noop {
/// #     type Object = serde_json::Value;
/// #     fn manifest() -> Manifest { Manifest::new("noop", Gvk::new("", "v1", "ConfigMap")) }
/// #     fn reconcile(_: Request<serde_json::Value>, _: &Context) -> Result<Outcome, Failure> { Ok(Outcome::new()) }
/// # }
///
/// let request = raw::Request {
///     object: r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"default"}}"#.into(),
///     children: vec![],
///     related: vec![],
///     finalizing: false,
///     attempt: 0,
///     now: "2026-11-26T09:00:00.000Z".into(),
/// };
/// let outcome = run::reconcile::<Noop>(&FakeCluster::new(), request).unwrap();
/// assert!(outcome.desired.is_empty());
/// ```
///
/// # Errors
///
/// The reconciler's [`Failure`](crate::Failure); a terminal failure when the
/// parent does not fit `R::Object` or the outcome cannot be serialized.
///
/// # Panics
///
/// When `R::reconcile` panics. Inside a component a panic is a trap, which
/// the host reports as a failed reconcile.
pub fn reconcile<R: Reconciler>(host: &dyn Host, request: raw::Request) -> Result<raw::Outcome, raw::Failure> {
    let finalizing = request.finalizing;
    let request = Request::<R::Object>::from_raw(request)?;
    let context = Context::new(host);
    let outcome = R::reconcile(request, &context)?;
    // A manifest's finalizer is kept on every parent unless the outcome
    // says otherwise (contract 0.1's behaviour); a finalizing answer lets it go.
    let needs = !finalizing && R::manifest().finalizer_name().is_some();
    Ok(outcome.needs_finalizer_by_default(needs).into_raw()?)
}

/// The `convert` export: parses the objects, calls `R::convert`,
/// serializes the answers.
///
/// # Errors
///
/// The reconciler's refusal, or an object that is not JSON.
///
/// # Panics
///
/// When `R::convert` panics (a trap in the component: the API server is
/// told the conversion failed).
pub fn convert<R: Reconciler>(objects: Vec<String>, desired_api_version: &str) -> Result<Vec<String>, String> {
    let objects = objects
        .iter()
        .enumerate()
        .map(|(i, json)| {
            serde_json::from_str(json)
                .map_err(|e| format!("object {i} is not JSON: {}", crate::failure::json_error_message(&e)))
        })
        .collect::<Result<Vec<serde_json::Value>, String>>()?;
    let converted = R::convert(objects, desired_api_version)?;
    Ok(converted.iter().map(crate::outcome::to_json).collect())
}

/// The `validate` export: parses the review, calls `R::validate` with a
/// [`Context`] over `host`.
///
/// # Errors
///
/// The reconciler's [`Denial`](crate::Denial).
///
/// # Panics
///
/// When `R::validate` panics (a trap in the component: the host answers per
/// the webhook's failure policy).
pub fn validate<R: Reconciler>(host: &dyn Host, review: raw::Review) -> Result<Vec<String>, raw::Denial> {
    let review = AdmissionReview::from_raw(review)?;
    Ok(R::validate(review, &Context::new(host))?)
}

/// The `mutate` export: parses the review, calls `R::mutate` with a
/// [`Context`] over `host`, serializes the mutated object.
///
/// # Errors
///
/// The reconciler's [`Denial`](crate::Denial).
///
/// # Panics
///
/// As [`validate`].
pub fn mutate<R: Reconciler>(host: &dyn Host, review: raw::Review) -> Result<Option<String>, raw::Denial> {
    let review = AdmissionReview::from_raw(review)?;
    Ok(R::mutate(review, &Context::new(host))?.map(|object| crate::outcome::to_json(&object)))
}
