//! The Operon contract (`wit/reconciler.wit`) in plain Rust, for everything
//! that is not a guest: the host's runtime, cache, applier and Reconciler
//! controller, and the Rust SDK's test tools.
//!
//! **Invariant: this crate knows nothing of wasm, Kubernetes clients or the
//! host.** It is the vocabulary the rest share — kinds ([`Gvk`]), what a
//! module declares ([`Manifest`]), one reconcile's [`Request`] and
//! [`Outcome`], one admission [`Review`] and its [`Denial`], and
//! [label selectors](selector), the [rules](rules) an outcome must keep,
//! the [readiness] of an object, an [egress] call and its replay — so that each has one
//! implementation; and,
//! with the `fixtures` feature, the [fixture files](fixture) of `operon
//! test` and of the Rust SDK's `testing::fixtures`.

/// The WIT package guests are built against (see `wit/reconciler.wit`).
pub const WIT_PACKAGE: &str = "operon:reconciler";
/// The version of it this release's SDKs speak (and `operon build`
/// accepts of an SDK): `wit/reconciler.wit`.
pub const WIT_VERSION: &str = "0.2.0";
/// Every version of it the host runs, oldest first: a module of any of them
/// loads, and modules of different versions run side by side (0.1 is kept
/// in `wit/0.1/`, for the host only).
pub const WIT_VERSIONS_RUN: &[&str] = &["0.1.0", "0.2.0"];

/// Whether `found` is semver-compatible with `expected`, as caret
/// requirements say: the same major; for 0.x the same minor (for 0.0.x the
/// same patch). A leading `v` (Go's tags) is ignored. What the host accepts
/// of a module's WIT version, and what `operon build` accepts of an SDK's.
pub fn compatible(found: &str, expected: &str) -> bool {
    let parts = |v: &str| -> Option<[u64; 3]> {
        let core = v.trim_start_matches('v').split(['-', '+']).next()?;
        let mut it = core.split('.').map(|p| p.parse::<u64>().ok());
        Some([it.next()??, it.next()??, it.next()??])
    };
    let (Some(f), Some(e)) = (parts(found), parts(expected)) else { return false };
    match (f, e) {
        ([0, 0, fp], [0, 0, ep]) => fp == ep,
        ([0, fm, _], [0, em, _]) => fm == em,
        ([fmaj, ..], [emaj, ..]) => fmaj == emaj,
    }
}

mod admission;
pub mod egress;
mod types;

#[cfg(feature = "fixtures")]
pub mod fixture;
pub mod readiness;
pub mod rules;
pub mod selector;

pub use admission::{Denial, IMMUTABLE_BY_MUTATE, Operation, Review, UserInfo};
pub use readiness::{Readiness, ReadinessStatus};
pub use selector::Selector;
pub use types::{
    Event, Failed, Failure, Gvk, Manifest, Mapping, Outcome, ParentMetadata, Request, UpdateStrategy, Watch, field_at,
    observe_generation, requeue_after, rfc3339,
};

#[cfg(test)]
mod tests {
    use super::compatible;

    #[test]
    fn compatibility_should_follow_caret_rules() {
        assert!(compatible("0.1.0", "0.1.0"));
        assert!(compatible("0.1.3", "0.1.0"));
        assert!(compatible("v0.1.3", "0.1.0"), "Go's tags");
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(!compatible("0.0.1", "0.1.0"));
        assert!(!compatible("0.0.1", "0.0.2"));
        assert!(compatible("1.4.0", "1.0.0"));
        assert!(!compatible("2.0.0", "1.0.0"));
        assert!(!compatible("garbage", "0.1.0"));
    }
}
