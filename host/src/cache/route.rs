//! Events routed, not broadcast: an informer delivers an event only to the
//! subscribers whose [`Interest`] can match its object, found through an
//! index by namespace and by required label — so the cost of an event grows
//! with the subscribers that may want it, not with every controller sharing
//! the informer (a thousand Reconcilers splitting one kind by a shard
//! label, or each granted its own namespaces).
//!
//! An interest is a necessary condition, never the whole filter: each
//! controller still applies its scope, selector and mappings to what it
//! receives.

use super::{CachedObject, ObjectEvent};
use std::collections::{BTreeSet, HashMap};
use tokio::sync::mpsc;

/// Which objects a subscriber may care about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interest {
    /// Objects of these namespaces; `None`: of every namespace.
    pub namespaces: Option<BTreeSet<String>>,
    /// Cluster-scoped objects too.
    pub cluster: bool,
    /// Only objects carrying this label with one of these values.
    pub label: Option<(String, BTreeSet<String>)>,
}

impl Interest {
    /// Every object.
    pub fn all() -> Interest {
        Interest { namespaces: None, cluster: true, label: None }
    }

    /// Whether `object` may be of interest.
    pub fn admits(&self, object: &CachedObject) -> bool {
        let in_scope = match (object.namespace(), &self.namespaces) {
            (None, _) => self.cluster,
            (Some(_), None) => true,
            (Some(ns), Some(set)) => set.contains(ns),
        };
        in_scope && self.label.as_ref().is_none_or(|(k, values)| object.label(k).is_some_and(|v| values.contains(v)))
    }
}

/// Where a subscriber is filed.
enum Filed {
    /// Under each value of its required label.
    Label(String, BTreeSet<String>),
    /// Under each of its namespaces (and with the cluster-scoped ones).
    Namespaces(BTreeSet<String>, bool),
    /// With those that get everything.
    Everyone,
}

impl Filed {
    fn of(interest: &Interest) -> Filed {
        match (&interest.label, &interest.namespaces) {
            (Some((k, values)), _) => Filed::Label(k.clone(), values.clone()),
            (None, Some(ns)) => Filed::Namespaces(ns.clone(), interest.cluster),
            (None, None) => Filed::Everyone,
        }
    }
}

struct Subscriber {
    tx: mpsc::UnboundedSender<ObjectEvent>,
    interest: Interest,
}

/// An informer's subscribers and their index.
#[derive(Default)]
pub(super) struct Subscribers {
    next: u64,
    by_id: HashMap<u64, Subscriber>,
    everyone: Vec<u64>,
    cluster: Vec<u64>,
    by_namespace: HashMap<String, Vec<u64>>,
    /// Label key → value → subscribers.
    by_label: HashMap<String, HashMap<String, Vec<u64>>>,
}

impl Subscribers {
    pub(super) fn add(&mut self, tx: mpsc::UnboundedSender<ObjectEvent>, interest: Interest) {
        let id = self.next;
        self.next += 1;
        match Filed::of(&interest) {
            Filed::Label(k, values) => {
                let by_value = self.by_label.entry(k).or_default();
                for v in values {
                    by_value.entry(v).or_default().push(id);
                }
            }
            Filed::Namespaces(namespaces, cluster) => {
                for ns in namespaces {
                    self.by_namespace.entry(ns).or_default().push(id);
                }
                if cluster {
                    self.cluster.push(id);
                }
            }
            Filed::Everyone => self.everyone.push(id),
        }
        self.by_id.insert(id, Subscriber { tx, interest });
    }

    /// Send `event` to every subscriber it may interest (through the
    /// index; an update goes by the old object too, so a subscriber hears
    /// of an object that stopped matching). Subscribers gone are dropped.
    pub(super) fn publish(&mut self, event: &ObjectEvent) {
        let (new, old) = match event {
            ObjectEvent::Applied { new, old, .. } => (new, old.as_ref()),
            ObjectEvent::Deleted(o) | ObjectEvent::Resync(o) => (o, None),
        };
        let mut ids: Vec<u64> = self.everyone.clone();
        for o in std::iter::once(new).chain(old) {
            match o.namespace() {
                Some(ns) => ids.extend(self.by_namespace.get(ns).into_iter().flatten()),
                None => ids.extend(&self.cluster),
            }
            for (k, v) in o.labels() {
                if let Some(found) = self.by_label.get(k).and_then(|by_value| by_value.get(v)) {
                    ids.extend(found);
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let mut gone = Vec::new();
        for id in ids {
            let Some(s) = self.by_id.get(&id) else { continue };
            let admitted = s.interest.admits(new) || old.is_some_and(|o| s.interest.admits(o));
            if admitted && s.tx.send(event.clone()).is_err() {
                gone.push(id);
            }
        }
        for id in gone {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: u64) {
        let Some(s) = self.by_id.remove(&id) else { return };
        let drop_id = |list: &mut Vec<u64>| list.retain(|x| *x != id);
        match Filed::of(&s.interest) {
            Filed::Label(k, values) => {
                if let Some(by_value) = self.by_label.get_mut(&k) {
                    for v in values {
                        if let Some(list) = by_value.get_mut(&v) {
                            drop_id(list);
                            if list.is_empty() {
                                by_value.remove(&v);
                            }
                        }
                    }
                    if by_value.is_empty() {
                        self.by_label.remove(&k);
                    }
                }
            }
            Filed::Namespaces(namespaces, cluster) => {
                for ns in namespaces {
                    if let Some(list) = self.by_namespace.get_mut(&ns) {
                        drop_id(list);
                        if list.is_empty() {
                            self.by_namespace.remove(&ns);
                        }
                    }
                }
                if cluster {
                    drop_id(&mut self.cluster);
                }
            }
            Filed::Everyone => drop_id(&mut self.everyone),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn object(ns: Option<&str>, name: &str, shard: Option<&str>) -> Arc<CachedObject> {
        let mut metadata = json!({"name": name, "resourceVersion": "1"});
        if let Some(ns) = ns {
            metadata["namespace"] = json!(ns);
        }
        if let Some(s) = shard {
            metadata["labels"] = json!({"shard": s});
        }
        Arc::new(CachedObject::from_value(json!({"apiVersion": "v1", "kind": "X", "metadata": metadata})).unwrap())
    }

    fn applied(new: Arc<CachedObject>, old: Option<Arc<CachedObject>>) -> ObjectEvent {
        ObjectEvent::Applied { old, new, initial: false }
    }

    fn shard(values: &[&str]) -> Interest {
        Interest { label: Some(("shard".into(), values.iter().map(|v| v.to_string()).collect())), ..Interest::all() }
    }

    fn namespaces(ns: &[&str]) -> Interest {
        Interest { namespaces: Some(ns.iter().map(|v| v.to_string()).collect()), cluster: false, label: None }
    }

    fn received(rx: &mut mpsc::UnboundedReceiver<ObjectEvent>) -> usize {
        std::iter::from_fn(|| rx.try_recv().ok()).count()
    }

    #[test]
    fn an_event_should_reach_only_the_subscribers_that_can_match_it() {
        let mut subs = Subscribers::default();
        let mut rxs: Vec<_> = (0..100)
            .map(|k| {
                let (tx, rx) = mpsc::unbounded_channel();
                subs.add(tx, shard(&[&k.to_string()]));
                rx
            })
            .collect();
        let (tx, mut every) = mpsc::unbounded_channel();
        subs.add(tx, Interest::all());
        let (tx, mut in_a) = mpsc::unbounded_channel();
        subs.add(tx, namespaces(&["a"]));

        subs.publish(&applied(object(Some("a"), "x", Some("7")), None));
        let counts: Vec<usize> = rxs.iter_mut().map(received).collect();
        assert_eq!(counts.iter().sum::<usize>(), 1);
        assert_eq!(counts[7], 1);
        assert_eq!((received(&mut every), received(&mut in_a)), (1, 1));

        // Relabelled from shard 7 to 8: both hear of it (7 to let it go).
        subs.publish(&applied(object(Some("b"), "x", Some("8")), Some(object(Some("b"), "x", Some("7")))));
        let counts: Vec<usize> = rxs.iter_mut().map(received).collect();
        assert_eq!((counts[7], counts[8], counts.iter().sum::<usize>()), (1, 1, 2));
        assert_eq!((received(&mut every), received(&mut in_a)), (1, 0), "namespace b is not a's");

        // Cluster-scoped objects reach only who asked for them.
        subs.publish(&ObjectEvent::Deleted(object(None, "node", None)));
        assert_eq!((received(&mut every), received(&mut in_a)), (1, 0));
    }

    #[test]
    fn a_subscriber_gone_should_be_dropped_from_the_index() {
        let mut subs = Subscribers::default();
        let (tx, rx) = mpsc::unbounded_channel();
        subs.add(tx, shard(&["1", "2"]));
        drop(rx);
        subs.publish(&ObjectEvent::Resync(object(Some("a"), "x", Some("2"))));
        assert_eq!(subs.len(), 0);
        assert!(subs.by_label.is_empty());
    }
}
