//! What a guest may change of its own parent besides the status: the
//! host's finalizer, and (contract 0.2) labels and annotations.
//!
//! The finalizer: a 0.1 module's finalizer goes on every
//! parent in scope; a 0.2 module's only on the parents whose outcomes say
//! `needs-finalizer` (added before anything of that outcome is written,
//! so no external state exists without it), and it is released when an
//! outcome stops saying it, or when the guest answers `finalized`. A parent
//! that leaves the Reconciler's selector holding it is finalized as a
//! deleted one (as Metacontroller finalizes a decorated object that no
//! longer matches), and once finalized keeps nothing of the plugin's: its
//! children and `parent-metadata` go before the finalizer — so a
//! decorator's parent that opts out keeps no decoration.

use super::{Error, ParentSelector, Pipeline};
use crate::cache::{CachedObject, ObjectEvent, ObjectKey};
use crate::contract::rules::Refused;
use crate::contract::{Outcome, ParentMetadata};
use crate::leader::Fence;
use crate::runtime::Module;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Parents that left the selector while carrying the finalizer, queued to
/// be finalized. Only a change seen leaving counts: a parent never
/// selected is another Reconciler's (a shard of the same module shares the
/// finalizer's name), and its finalizer is not ours to take.
pub(super) type Leaving = Arc<Mutex<HashSet<ObjectKey>>>;

/// Whether the module speaks contract 0.1: every parent carries its
/// finalizer, and its children cross without their readiness.
pub(super) fn speaks_0_1(module: &Module) -> bool {
    operon_contract::compatible(&module.info().wit_version, operon_contract::WIT_VERSIONS_RUN[0])
}

/// The parent an event takes out of `selector` while it carries
/// `finalizer`: noted in `leaving`, and its key returned to be queued.
pub(super) fn left_selector(
    event: &ObjectEvent,
    selector: &ParentSelector,
    finalizer: Option<&str>,
    leaving: &Leaving,
) -> Option<ObjectKey> {
    let ObjectEvent::Applied { old: Some(old), new, .. } = event else { return None };
    let finalizer = finalizer?;
    let left = selector.matches(old) && !selector.matches(new);
    if !left || !new.has_finalizer(finalizer) {
        return None;
    }
    let key = new.key();
    leaving.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone());
    Some(key)
}

/// The `finalized` outcome of a parent that left the selector: nothing of
/// the plugin's stays on a parent no Reconciler of it acts on any more — no
/// child, no label or annotation of `parent-metadata` — whatever the guest
/// listed (an answer that leaves its metadata alone, say).
pub(super) fn taken_back(outcome: Outcome) -> Outcome {
    Outcome { desired: Vec::new(), parent_metadata: Some(ParentMetadata::default()), ..outcome }
}

/// Refuse labels and annotations a guest may not set on its parent: the
/// host's own (`operon.dev/`), and labels the Reconciler's selector reads
/// (a plugin does not choose which Reconciler acts on a parent).
pub(super) fn check_metadata(meta: &ParentMetadata, selector: Option<&ParentSelector>) -> Result<(), Refused> {
    let keys = meta.labels.keys().map(|k| ("label", k)).chain(meta.annotations.keys().map(|k| ("annotation", k)));
    for (what, key) in keys {
        if key.starts_with("operon.dev/") {
            return Err(Refused(format!("parent-metadata sets the {what} {key:?}: operon.dev keys are the host's")));
        }
        let read = match what {
            "label" => selector.is_some_and(|s| s.reads_label(key)),
            _ => selector.is_some_and(|s| s.reads_annotation(key)),
        };
        if read {
            return Err(Refused(format!(
                "parent-metadata sets the {what} {key:?}, which the Reconciler's selector reads: a plugin does not \
                 choose which Reconciler acts on a parent"
            )));
        }
    }
    Ok(())
}

impl Pipeline {
    /// A parent outside the selector: whether it left holding the finalizer
    /// and its guest is to finalize it. A 0.1 module's `finalizing` means a
    /// deletion, so its finalizer is released without a call. A parent not
    /// seen leaving is not ours.
    pub(super) async fn outside_selector(
        &self,
        parent: &CachedObject,
        key: &ObjectKey,
        module: &Module,
        fence: &Fence,
    ) -> Result<bool, Error> {
        let left = self.leaving.lock().unwrap_or_else(|p| p.into_inner()).contains(key);
        let held = self.manifest.finalizer.as_deref().filter(|f| parent.has_finalizer(f));
        match (left, held) {
            (false, _) => Ok(false),
            (true, None) => {
                self.forget_leaving(key);
                Ok(false)
            }
            (true, Some(_)) if !speaks_0_1(module) => Ok(true),
            (true, Some(f)) => {
                self.applier.set_finalizer(parent, f, false, fence).await.map_err(Error::Finalizer)?;
                self.forget_leaving(key);
                tracing::info!(finalizer = %f, "released the finalizer of a parent that left the selector");
                Ok(false)
            }
        }
    }

    /// The parent `key` is selected, gone or finalized: no longer leaving.
    pub(super) fn forget_leaving(&self, key: &ObjectKey) {
        self.leaving.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    /// Once an outcome is checked, before anything of it is written: add
    /// the finalizer it asks for.
    pub(super) async fn finalizer_asked(
        &self,
        parent: &CachedObject,
        outcome: &Outcome,
        fence: &Fence,
    ) -> Result<(), crate::apply::Error> {
        if let (Some(f), Some(true)) = (&self.manifest.finalizer, outcome.needs_finalizer)
            && !parent.has_finalizer(f)
            && !parent.is_deleting()
        {
            self.applier.set_finalizer(parent, f, true, fence).await?;
        }
        Ok(())
    }

    /// After an outcome is written: release the finalizer it no longer
    /// asks for.
    pub(super) async fn finalizer_released(
        &self,
        parent: &CachedObject,
        outcome: &Outcome,
        fence: &Fence,
    ) -> Result<(), Error> {
        if let (Some(f), Some(false)) = (&self.manifest.finalizer, outcome.needs_finalizer)
            && parent.has_finalizer(f)
            && !parent.is_deleting()
        {
            self.applier.set_finalizer(parent, f, false, fence).await.map_err(Error::Finalizer)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ParentMetadata {
        let map = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ParentMetadata { labels: map(labels), annotations: map(annotations) }
    }

    use crate::contract::Selector;

    #[test]
    fn a_guest_should_not_set_the_hosts_keys_or_the_labels_that_select_its_parent() {
        let selector = ParentSelector::of(Some(Selector::parse("shard=a").unwrap()), None).unwrap();
        assert!(check_metadata(&meta(&[("example.com/exposed", "true")], &[("note", "x")]), Some(&selector)).is_ok());
        let host = check_metadata(&meta(&[], &[("operon.dev/applied", "x")]), None).unwrap_err();
        assert!(host.0.contains("operon.dev keys are the host's"), "{}", host.0);
        let moved = check_metadata(&meta(&[("shard", "b")], &[]), Some(&selector)).unwrap_err();
        assert!(moved.0.contains("selector"), "{}", moved.0);
        // The same key as an annotation selects nothing.
        assert!(check_metadata(&meta(&[], &[("shard", "b")]), Some(&selector)).is_ok());
        // ... unless an annotation selector reads it.
        let decorated = ParentSelector::of(None, Some(Selector::parse("example.com/expose").unwrap())).unwrap();
        let unmarked = check_metadata(&meta(&[], &[("example.com/expose", "no")]), Some(&decorated)).unwrap_err();
        assert!(unmarked.0.contains("the annotation \"example.com/expose\""), "{}", unmarked.0);
    }

    #[test]
    fn a_parent_that_left_should_keep_no_child_or_metadata_once_finalized() {
        let event = crate::contract::Event { warning: false, reason: "Undecorated".into(), message: "done".into() };
        let answer = Outcome {
            desired: vec![serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kept"}})],
            status: Some(serde_json::json!({"phase": "Released"})),
            events: vec![event.clone()],
            finalized: true,
            parent_metadata: None,
            ..Outcome::default()
        };
        let taken = taken_back(answer);
        assert!(taken.desired.is_empty(), "a child kept on a parent nobody reconciles");
        assert_eq!(taken.parent_metadata, Some(ParentMetadata::default()), "its labels and annotations removed");
        assert!(taken.finalized);
        assert_eq!(taken.status, Some(serde_json::json!({"phase": "Released"})), "the guest's status still written");
        assert_eq!(taken.events, vec![event]);
    }
}
