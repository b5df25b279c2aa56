//! What puts a module controller's keys on its queue: its parents (`for`,
//! with the default predicate), their children (`owns`), and the declared
//! `watches` (through the parents' reference and selector index for the
//! mappings that read a field of the parent).

use super::request::ReadSet;
use super::{Config, parent};
use crate::cache::{Informer, Interest, ObjectEvent, ObjectKey};
use crate::contract::Manifest;
use crate::controller::index::ParentIndex;
use crate::controller::{Enqueue, Trigger, mapping};
use std::sync::Arc;

/// The triggers of a module's controller: its parents (`for`, with the
/// default predicate), their children (`owns`), and the declared `watches`
/// — each dropping keys outside the controller's scope and selector.
pub(super) fn triggers(
    config: &Config,
    manifest: &Manifest,
    parents: &Arc<Informer>,
    reads: &ReadSet,
    leaving: &parent::Leaving,
) -> Vec<Trigger<ObjectKey>> {
    // Keys outside the scope are dropped here (and checked again when
    // reconciled): informers are shared, each controller sees its part. A
    // child's or a watched object's event may name a parent outside this
    // controller's selector (another Reconciler's share of the kind): drop
    // it here rather than as a no-op reconcile, or every sharer would
    // reconcile every parent.
    let keep = {
        let scope = config.scope.clone();
        let (parents, selector, leaving) = (parents.clone(), config.parent_selector.clone(), leaving.clone());
        Arc::new(move |e: &Enqueue| {
            let key = e.key();
            let left = || leaving.lock().unwrap_or_else(|p| p.into_inner()).contains(key);
            scope.contains(key.namespace.as_deref())
                && (left()
                    || !selector.as_ref().is_some_and(|s| parents.store().get(key).is_some_and(|p| !s.matches(p))))
        })
    };
    // What each informer routes to this controller: objects of its scope,
    // and parents that carry the label its selector requires (a thousand
    // Reconcilers splitting a kind by shard each hear of their share only).
    let in_scope = Interest {
        namespaces: config.scope.namespaces.as_ref().map(|n| n.iter().cloned().collect()),
        cluster: config.scope.cluster,
        label: None,
    };
    let parent_interest = Interest {
        label: config.parent_selector.as_ref().and_then(|s| s.labels.as_ref()).and_then(|l| {
            l.required_values().map(|(k, values)| (k.to_string(), values.into_iter().map(str::to_string).collect()))
        }),
        ..in_scope.clone()
    };
    // Children and watched objects: by namespace only (what they map to is
    // known after the mapping). Cluster-scoped ones may map to any parent.
    let related = Interest { cluster: true, ..in_scope };
    let mut triggers = Vec::new();
    // The parents' references and selectors, for the watches that read a
    // field of the parent: kept by the parents' own events (below).
    let indexes: Vec<Option<Arc<ParentIndex>>> =
        reads.watched.iter().map(|(w, _)| ParentIndex::new(&w.mapping).map(Arc::new)).collect();
    let filed: Vec<Arc<ParentIndex>> = indexes.iter().flatten().cloned().collect();
    let (k, selector, leaving) = (keep.clone(), config.parent_selector.clone(), leaving.clone());
    let finalizer = manifest.finalizer.clone();
    triggers.push(Trigger::events_of(parents.clone(), parent_interest, move |ev| {
        for index in &filed {
            match ev {
                ObjectEvent::Applied { new, .. } | ObjectEvent::Resync(new) => index.update(new),
                ObjectEvent::Deleted(gone) => index.remove(&gone.key()),
            }
        }
        let (object, _) = mapping::event_object(ev);
        if let Some(s) = &selector
            && !s.matches(object)
        {
            return parent::left_selector(ev, s, finalizer.as_deref(), &leaving)
                .map(Enqueue::Now)
                .into_iter()
                .filter(|e| k(e))
                .collect();
        }
        mapping::for_event(ev).into_iter().filter(|e| k(e)).collect()
    }));
    for (_, informer) in &reads.owned {
        let (k, kind, parents) = (keep.clone(), manifest.for_kind.clone(), parents.clone());
        triggers.push(Trigger::events_of(informer.clone(), related.clone(), move |ev| {
            // Unknown until discovery answered: namespaced is the common case.
            let namespaced = parents.namespaced().unwrap_or(true);
            mapping::owned_event(ev, &kind, namespaced).into_iter().filter(|e| k(e)).collect()
        }));
    }
    for ((watch, informer), index) in reads.watched.iter().zip(indexes) {
        let (k, mapping, parents) = (keep.clone(), watch.mapping.clone(), parents.clone());
        triggers.push(Trigger::events_of(informer.clone(), related.clone(), move |ev| {
            let parents_in = |ns: Option<&str>| parents.store().in_namespace(ns).iter().map(|p| p.key()).collect();
            mapping::watched_event(ev, &mapping, parents_in, index.as_deref()).into_iter().filter(|e| k(e)).collect()
        }));
    }
    triggers
}
