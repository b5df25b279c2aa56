//! The Operon contract (`wit/reconciler.wit`) in plain Rust, for everything
//! that is not a guest: the host's runtime, cache, applier and Reconciler
//! controller, and the Rust SDK's test tools.
//!
//! **Invariant: this crate knows nothing of wasm, Kubernetes clients or the
//! host.** It is the vocabulary the rest share — kinds ([`Gvk`]), what a
//! module declares ([`Manifest`]), one reconcile's [`Request`] and
//! [`Outcome`], one admission [`Review`] and its [`Denial`], and
//! [label selectors](selector), the [rules](rules) an outcome must keep —
//! so that each has one implementation; and,
//! with the `fixtures` feature, the [fixture files](fixture) of `operon
//! test` and of the Rust SDK's `testing::fixtures`.

/// The WIT package guests are built against (see `wit/reconciler.wit`).
pub const WIT_PACKAGE: &str = "operon:reconciler";
/// The version of it this release speaks.
pub const WIT_VERSION: &str = "0.1.0";

mod admission;
mod types;

#[cfg(feature = "fixtures")]
pub mod fixture;
pub mod rules;
pub mod selector;

pub use admission::{Denial, IMMUTABLE_BY_MUTATE, Operation, Review, UserInfo};
pub use selector::Selector;
pub use types::{Event, Failure, Gvk, Manifest, Mapping, Outcome, Request, Watch};
