//! Leadership of a unit of work: whether this replica may run (and write
//! for) a Reconciler, a module file, or the process.
//!
//! A unit's leadership outlives the controllers that run under it: a
//! Reconciler whose controller is rebuilt (new manifest, new grants) keeps
//! its Lease, so a rebuild neither moves it to another replica nor leaves a
//! moment in which nobody knows who writes its status and events.

use super::{self as leader, Ability, Fence, LeaderElector, Shards, Takeover};
use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// How units lead, fixed when the manager is built.
#[derive(Clone)]
pub(crate) enum Mode {
    /// No election: this replica leads everything (the sender is kept so
    /// that "leading" never ends).
    Always(Arc<watch::Sender<bool>>),
    /// One Lease for the process: every unit follows it.
    Process { leading: watch::Receiver<bool>, lease: String },
    /// One Lease per unit, shared out over the replicas.
    PerUnit {
        client: kube::Client,
        config: leader::Config,
        shards: Arc<Shards>,
        metrics: Arc<Metrics>,
        elections: Arc<Elections>,
    },
}

/// Every unit election of a manager: stopped and waited for together on
/// shutdown, so that no Lease is left held because the process ended while
/// its release was on the wire.
#[derive(Debug)]
pub(crate) struct Elections {
    /// Set on shutdown: every election releases its Lease and ends.
    stopping: watch::Sender<bool>,
    /// Elections whose task has not ended yet.
    running: watch::Sender<usize>,
}

impl Default for Elections {
    fn default() -> Self {
        Elections { stopping: watch::Sender::new(false), running: watch::Sender::new(0) }
    }
}

impl Elections {
    /// Stop every election (each releases the Lease it holds) and wait for
    /// all of them to end, at most `timeout`. Returns how many had not
    /// ended by then.
    pub(crate) async fn stop_all(&self, timeout: Duration) -> usize {
        self.stopping.send_replace(true);
        let mut running = self.running.subscribe();
        let _ = tokio::time::timeout(timeout, running.wait_for(|n| *n == 0)).await;
        *running.borrow()
    }

    /// Counts one election task for as long as the guard lives.
    fn enter(self: &Arc<Self>) -> Running {
        self.running.send_modify(|n| *n += 1);
        Running(self.clone())
    }
}

/// One running election, counted in [`Elections`].
struct Running(Arc<Elections>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Whether this replica leads one unit, now and as it changes. Cheap to
/// clone: clones share the unit; when the last one is dropped, the unit's
/// Lease (if it has one) is released.
#[derive(Clone)]
pub struct Leadership {
    unit: Arc<Unit>,
}

struct Unit {
    name: String,
    /// `namespace/name` of the Lease, or what the unit follows.
    lease: String,
    leading: watch::Receiver<bool>,
    /// How this replica last came to lead it (per-unit Leases only).
    took: watch::Sender<Option<Takeover>>,
    election: Mutex<Option<Election>>,
    /// What this replica can do for the unit (its module loaded here, being
    /// loaded, or out of reach): one that is not ready leaves a free Lease
    /// to one that is ([`LeaderElector::with_ability`]).
    able: watch::Sender<Ability>,
    mode: Mode,
}

/// A unit's own election, while it runs.
struct Election {
    /// Set to stop contending: `Some(true)` also deletes the Lease.
    stop: watch::Sender<Option<bool>>,
    leading: watch::Sender<bool>,
    started: bool,
}

impl Drop for Unit {
    fn drop(&mut self) {
        if let Some(election) = self.election.lock().unwrap_or_else(|p| p.into_inner()).take() {
            election.stop.send_replace(Some(false));
        }
    }
}

impl Leadership {
    /// A unit that always leads (no election, or work every replica does).
    pub fn always(name: impl Into<String>) -> Leadership {
        Leadership::new(&name.into(), &Mode::Always(Arc::new(watch::channel(true).0)), Ability::Ready)
    }

    /// A unit led as `mode` says, this replica starting as `ability` says
    /// for it. A unit with a Lease of its own does not contend until
    /// [`Leadership::start`].
    pub(crate) fn new(name: &str, mode: &Mode, ability: Ability) -> Leadership {
        let (lease, leading, election) = match mode {
            Mode::Always(tx) => ("(no election)".to_string(), tx.subscribe(), None),
            Mode::Process { leading, lease } => (lease.clone(), leading.clone(), None),
            Mode::PerUnit { config, .. } => {
                let lease = leader::Config { name: leader::lease_name(&config.name, name), ..config.clone() };
                let (tx, rx) = watch::channel(false);
                let (stop, _) = watch::channel(None);
                (lease.qualified_name(), rx, Some(Election { stop, leading: tx, started: false }))
            }
        };
        Leadership {
            unit: Arc::new(Unit {
                name: name.to_string(),
                lease,
                leading,
                took: watch::Sender::new(None),
                election: Mutex::new(election),
                able: watch::Sender::new(ability),
                mode: mode.clone(),
            }),
        }
    }

    /// Start contending for the unit's own Lease (idempotent; nothing for
    /// units without one).
    pub(crate) fn start(&self) {
        let Mode::PerUnit { client, config, shards, metrics, elections } = &self.unit.mode else { return };
        let mut guard = self.unit.election.lock().unwrap_or_else(|p| p.into_inner());
        let Some(election) = guard.as_mut() else { return };
        if std::mem::replace(&mut election.started, true) {
            return; // already contending
        }
        let config = leader::Config { name: leader::lease_name(&config.name, &self.unit.name), ..config.clone() };
        let elector = match LeaderElector::new(client.clone(), config.clone()) {
            Ok(e) => e.with_gate(shards.clone()).with_ability(self.unit.able.subscribe()),
            Err(e) => {
                tracing::error!(unit = %self.unit.name, error = %e, "cannot elect a leader for this unit");
                return;
            }
        };
        let mut leading = elector.subscribe();
        let takeovers = elector.takeovers();
        let mut stop = election.stop.subscribe();
        let forward = election.leading.clone();
        let took = self.unit.took.clone();
        let (shards, metrics, lease, client) =
            (shards.clone(), metrics.clone(), self.unit.lease.clone(), client.clone());
        let running = elections.enter();
        let mut stopping = elections.stopping.subscribe();
        drop(guard);
        metrics.leader_status(&lease, false);
        tokio::spawn(async move {
            let _running = running;
            // Not before the live replicas were counted: a replica starting
            // beside others takes its share, not everything.
            tokio::select! {
                () = shards.counted() => {}
                _ = stop.wait_for(Option::is_some) => return,
                _ = stopping.wait_for(|s| *s) => return,
            }
            let (mut release, mut shutting_down) = (stop.clone(), stopping.clone());
            let election = elector.run(async move {
                tokio::select! {
                    _ = release.wait_for(Option::is_some) => {}
                    _ = shutting_down.wait_for(|s| *s) => {}
                }
            });
            tokio::pin!(election);
            let mut held = false;
            loop {
                tokio::select! {
                    () = &mut election => break,
                    changed = leading.changed() => {
                        if changed.is_err() { break }
                        let now = *leading.borrow();
                        if now != held {
                            held = now;
                            metrics.leader_status(&lease, now);
                        }
                        if now {
                            took.send_replace(takeovers.borrow().clone());
                        }
                        forward.send_replace(now);
                    }
                }
            }
            // The elector released the Lease (and its share) before returning.
            forward.send_replace(false);
            let _ = metrics.leader_election_master_status.remove_label_values(&[&lease]);
            // Retired: the Lease goes, unless another replica holds it
            // (released ones have no holder).
            if *stop.borrow_and_update() == Some(true) {
                let api: Api<Lease> = Api::namespaced(client, &config.namespace);
                let free = match api.get_opt(&config.name).await {
                    Ok(Some(l)) => {
                        l.spec.and_then(|s| s.holder_identity).is_none_or(|h| h.is_empty() || h == config.identity)
                    }
                    _ => false,
                };
                if free && let Err(e) = api.delete(&config.name, &DeleteParams::default()).await {
                    tracing::debug!(lease = %lease, error = %crate::client::describe(&e), "could not delete the lease");
                }
            }
        });
    }

    /// Stop contending and delete the unit's Lease, if this replica holds
    /// it: the unit is gone for good (a deleted Reconciler). Other handles
    /// see "not leading".
    pub fn retire(&self) {
        if let Some(election) = self.unit.election.lock().unwrap_or_else(|p| p.into_inner()).take() {
            election.stop.send_replace(Some(true));
        }
    }

    /// Say what this replica can do for the unit now ([`Ability`]). With a
    /// Lease of its own, a replica that is not ready (its module still
    /// loading here) takes a free one only when nobody ready did, and one
    /// that cannot serve at all (its module source unreachable from here,
    /// say) also hands the Lease to one that can; without, nothing changes.
    pub fn set_ability(&self, ability: Ability) {
        self.unit.able.send_if_modified(|now| std::mem::replace(now, ability) != ability);
    }

    /// What this replica said it can do for the unit.
    pub fn ability(&self) -> Ability {
        *self.unit.able.borrow()
    }

    /// How this replica last came to lead the unit (its own Lease only), as
    /// it changes: set before "leading" turns true.
    pub fn takeovers(&self) -> watch::Receiver<Option<Takeover>> {
        self.unit.took.subscribe()
    }

    /// The unit's name.
    pub fn name(&self) -> &str {
        &self.unit.name
    }

    /// The Lease it follows, as `namespace/name` (or a description).
    pub fn lease(&self) -> &str {
        &self.unit.lease
    }

    /// Whether this replica leads the unit now.
    pub fn is_leading(&self) -> bool {
        *self.unit.leading.borrow()
    }

    /// Leading, now and as it changes.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.unit.leading.clone()
    }

    /// The fence writes for this unit check.
    pub fn fence(&self) -> Fence {
        Fence::new(self.unit.leading.clone(), self.unit.lease.clone())
    }

    /// Whether this replica leads the unit within `timeout`: for
    /// bookkeeping (events, status) that must be written by the leader,
    /// also when the unit was just created and its election has not been
    /// decided yet.
    pub async fn leading_within(&self, timeout: Duration) -> bool {
        let mut rx = self.unit.leading.clone();
        matches!(tokio::time::timeout(timeout, rx.wait_for(|l| *l)).await, Ok(Ok(_)))
    }

    /// Resolves once this replica leads the unit (never, if it never does).
    pub(crate) async fn wait_leading(&self) {
        let mut rx = self.unit.leading.clone();
        if rx.wait_for(|l| *l).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A handle that does not keep the unit alive.
#[derive(Clone)]
pub(crate) struct WeakLeadership(std::sync::Weak<Unit>);

impl WeakLeadership {
    pub(crate) fn upgrade(&self) -> Option<Leadership> {
        self.0.upgrade().map(|unit| Leadership { unit })
    }
}

impl Leadership {
    pub(crate) fn downgrade(&self) -> WeakLeadership {
        WeakLeadership(Arc::downgrade(&self.unit))
    }

    /// Whether the unit has a Lease of its own.
    pub(crate) fn leased(&self) -> bool {
        matches!(self.unit.mode, Mode::PerUnit { .. })
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership").field("unit", &self.unit.name).field("lease", &self.unit.lease).finish()
    }
}
