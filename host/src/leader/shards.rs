//! Spreading controllers over replicas: one Lease per controller, and a cap
//! on how many of them one replica takes, so that N replicas share the work
//! instead of the fastest taking everything.
//!
//! Kubernetes is the only coordinator. Each replica keeps a *membership*
//! Lease of its own (labelled `operon.dev/replica-of=<group>`), renewed every
//! retry period, saying whether the replica is ready (`operon.dev/ready`:
//! its caches synced and its Reconcilers loaded, as `/readyz` says).
//! Counting the recently renewed ones gives the live replicas: a replica
//! contends for a free controller Lease (new, or released) only while it
//! holds fewer than `ceil(controllers / live replicas)`. A Lease whose
//! holder stopped renewing, or that its holder handed over,
//! is taken regardless, by whichever survivor tries first, so a crashed
//! replica's controllers move within one lease duration plus one retry
//! period (and end up split between the survivors roughly evenly, as their
//! retries interleave). A replica that holds more than its share among the
//! *ready* replicas for a lease duration — the share shrank as replicas
//! became ready, or replicas that started together each counted too few —
//! hands the excess over, and the others take it; a replica still starting
//! is not counted there, so nobody sheds a Lease to it before it can take
//! it. (An excess that lasts less, as when survivors take a
//! crashed replica's expired Leases before its membership has aged out of
//! the count, is kept.) The membership Lease of a replica that stopped
//! renewing long ago (killed, so it never deleted its own) is deleted by
//! the others.
//!
//! # Caveats
//! Liveness is judged from `renewTime` against this replica's clock (bounded
//! skew between nodes is assumed, as for Kubernetes node heartbeats); a
//! replica that misjudges only takes a few leases more or less than its
//! share for a while — never a Lease someone holds.

use super::Config;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, Preconditions};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The label that marks membership Leases, valued with the group name.
pub const MEMBER_LABEL: &str = "operon.dev/replica-of";

/// The annotation of a membership Lease that says whether its replica is
/// ready (`"true"` or `"false"`); a member without it (an older release)
/// counts as ready.
pub const READY_ANNOTATION: &str = "operon.dev/ready";

/// How many lease durations after its last renewal a membership Lease is
/// deleted by the others (its replica was killed, or lost for that long:
/// one that comes back writes it again).
const STALE_MEMBER_LEASES: u32 = 3;

/// How many controller Leases this replica holds and may hold.
///
/// Two caps: a free Lease is taken only below `ceil(controllers / live
/// replicas)`, and Leases are shed only above `ceil(controllers / ready
/// replicas)`. A replica still starting counts for the first, so replicas
/// that start together split the work; it does not count for the second,
/// so nobody sheds a Lease to it before it can take it.
#[derive(Debug)]
pub struct Shards {
    /// Leases held, and free ones being taken right now.
    held: AtomicUsize,
    /// Free Leases are taken below this.
    cap: AtomicUsize,
    /// Held Leases beyond this are shed.
    keep: AtomicUsize,
    /// Live replicas at the last count, this one included.
    replicas: AtomicUsize,
    /// Ready replicas among them.
    ready: AtomicUsize,
    /// Whether the live replicas were counted once: no Lease is taken
    /// before (a replica starting beside others must not take them all).
    counted: tokio::sync::watch::Sender<bool>,
}

impl Default for Shards {
    fn default() -> Self {
        Shards {
            held: AtomicUsize::new(0),
            cap: AtomicUsize::new(usize::MAX),
            keep: AtomicUsize::new(usize::MAX),
            replicas: AtomicUsize::new(0),
            ready: AtomicUsize::new(0),
            counted: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl Shards {
    /// Whether one more controller Lease may be taken.
    pub fn may_acquire(&self) -> bool {
        self.held.load(Ordering::SeqCst) < self.cap.load(Ordering::SeqCst)
    }

    /// Take one slot of the share for a free Lease about to be written, if
    /// one is left: atomically, so electors contending at once cannot all
    /// see room for themselves. Give it back with [`Shards::released`] if
    /// the write fails.
    pub fn try_acquire(&self) -> bool {
        let cap = self.cap.load(Ordering::SeqCst);
        self.held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| (h < cap).then_some(h + 1)).is_ok()
    }

    /// Resolves once the live replicas were counted.
    pub async fn counted(&self) {
        let mut rx = self.counted.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// This replica started leading one more controller.
    pub fn acquired(&self) {
        self.held.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether this replica holds more Leases than its share among the
    /// ready replicas.
    pub fn over_share(&self) -> bool {
        self.held.load(Ordering::SeqCst) > self.keep.load(Ordering::SeqCst)
    }

    /// Claim one held Lease to give up, if this replica holds more than its
    /// share among the ready replicas (the share shrank: replicas became
    /// ready, or it counted too few at its start). Atomic, so the electors
    /// of one replica shed only the excess between them; the claim counts
    /// the Lease as released.
    pub fn try_shed(&self) -> bool {
        let keep = self.keep.load(Ordering::SeqCst);
        self.held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| (h > keep).then(|| h - 1)).is_ok()
    }

    /// This replica stopped leading one controller.
    pub fn released(&self) {
        let _ = self.held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| h.checked_sub(1));
    }

    /// Controller Leases held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// The current cap on taking free Leases.
    pub fn cap(&self) -> usize {
        self.cap.load(Ordering::SeqCst)
    }

    /// Live replicas at the last count, this one included (0 before the
    /// first).
    pub fn replicas(&self) -> usize {
        self.replicas.load(Ordering::SeqCst)
    }

    /// Ready replicas at the last count (0 before the first).
    pub fn ready(&self) -> usize {
        self.ready.load(Ordering::SeqCst)
    }

    /// Set the caps from the number of controllers and live replicas, all
    /// of them ready.
    pub fn set_share(&self, controllers: usize, replicas: usize) {
        self.set_counts(controllers, replicas, replicas);
    }

    /// Set the caps from the number of controllers, of live replicas, and
    /// of the `ready` ones among them (none ready: nothing is shed).
    pub fn set_counts(&self, controllers: usize, replicas: usize, ready: usize) {
        let share = |n: usize| controllers.div_ceil(n.max(1)).max(1);
        self.cap.store(share(replicas), Ordering::SeqCst);
        self.keep.store(if ready == 0 { usize::MAX } else { share(ready).max(share(replicas)) }, Ordering::SeqCst);
        self.replicas.store(replicas, Ordering::SeqCst);
        self.ready.store(ready, Ordering::SeqCst);
        self.counted.send_replace(true);
    }
}

/// This replica's membership Lease and the count of live replicas.
pub struct Membership {
    api: Api<Lease>,
    config: Config,
    group: String,
    name: String,
}

impl Membership {
    /// Membership of `group` (the controller Leases' prefix), with the
    /// namespace, identity and timings of `config`.
    pub fn new(client: kube::Client, config: Config, group: &str) -> Membership {
        let name = format!("{group}-replica-{}", stable_hash(&config.identity, 16));
        Membership { api: Api::namespaced(client, &config.namespace), config, group: group.to_string(), name }
    }

    /// Renew our Lease (saying whether `ready()`) and recount every retry
    /// period, setting `shards`' cap from `controllers()`; until `shutdown`,
    /// then delete our Lease.
    pub async fn run(
        self,
        shards: Arc<Shards>,
        controllers: impl Fn() -> usize,
        ready: impl Fn() -> bool,
        shutdown: impl Future<Output = ()>,
    ) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut tick = tokio::time::interval(self.config.retry_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.as_mut() => break,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.renew(ready()).await {
                tracing::warn!(lease = %self.name, error = %crate::client::describe(&e), "could not renew replica membership");
                continue;
            }
            match self.live().await {
                Ok(Count { live, ready }) => {
                    let before = shards.cap();
                    shards.set_counts(controllers(), live, ready);
                    if shards.cap() != before {
                        tracing::info!(
                            replicas = live,
                            ready,
                            controllers = controllers(),
                            cap = shards.cap(),
                            held = shards.held(),
                            "controller share changed"
                        );
                    }
                }
                Err(e) => tracing::warn!(error = %crate::client::describe(&e), "could not count live replicas"),
            }
        }
        let _ = self.api.delete(&self.name, &DeleteParams::default()).await;
    }

    async fn renew(&self, ready: bool) -> kube::Result<()> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                labels: Some([(MEMBER_LABEL.to_string(), self.group.clone())].into()),
                annotations: Some([(READY_ANNOTATION.to_string(), ready.to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.lease_duration.as_secs() as i32),
                renew_time: Some(MicroTime(Timestamp::now())),
                ..LeaseSpec::default()
            }),
        };
        let params = PatchParams::apply("operon-membership").force();
        self.api.patch(&self.name, &params, &Patch::Apply(&lease)).await.map(|_| ())
    }

    /// Replicas whose membership was renewed within the lease duration, and
    /// the ready ones among them; membership Leases not renewed for
    /// [`STALE_MEMBER_LEASES`] lease durations are deleted on the way.
    async fn live(&self) -> kube::Result<Count> {
        let selector = format!("{MEMBER_LABEL}={}", self.group);
        let leases = self.api.list(&ListParams::default().labels(&selector)).await?;
        let now = Timestamp::now();
        let mut count = Count { live: 0, ready: 0 };
        for lease in &leases.items {
            let Some(renewed) = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()) else { continue };
            let age = now.duration_since(renewed.0).as_secs_f64();
            if age <= self.config.lease_duration.as_secs_f64() {
                count.live += 1;
                let ready = lease.metadata.annotations.as_ref().and_then(|a| a.get(READY_ANNOTATION));
                count.ready += usize::from(ready.is_none_or(|r| r != "false"));
            } else if age > (self.config.lease_duration * STALE_MEMBER_LEASES).as_secs_f64() {
                self.delete_stale(lease).await;
            }
        }
        // This replica renewed just before: at least it is live.
        count.live = count.live.max(1);
        Ok(count)
    }

    /// Delete a membership Lease nobody renewed for long, unless it changed
    /// since it was read (its replica came back).
    async fn delete_stale(&self, lease: &Lease) {
        let Some(name) = lease.metadata.name.as_deref() else { return };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: lease.metadata.resource_version.clone(),
                uid: lease.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => tracing::info!(lease = name, "deleted the membership Lease of a replica gone for good"),
            Err(e) => {
                tracing::debug!(lease = name, error = %crate::client::describe(&e), "stale membership Lease not deleted")
            }
        }
    }
}

/// Live and ready replicas, as counted from their membership Leases.
struct Count {
    live: usize,
    ready: usize,
}

/// The first `digits` hex digits of the SHA-256 of `text`: the same in
/// every build and release (std's `DefaultHasher` is not), so replicas of
/// different versions name a Lease alike during a rolling update.
fn stable_hash(text: &str, digits: usize) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(text.as_bytes())).chars().take(digits).collect()
}

/// The Lease name of a controller in a group: readable, valid, unique, and
/// stable across releases.
pub fn lease_name(group: &str, controller: &str) -> String {
    let readable: String = controller
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .take(40)
        .collect();
    format!("{group}-{}-{}", readable.trim_matches('-'), stable_hash(controller, 8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_should_be_the_fair_share_rounded_up() {
        let s = Shards::default();
        assert!(s.may_acquire(), "a lone replica takes everything until it has counted");
        s.set_share(30, 3);
        assert_eq!(s.cap(), 10);
        for _ in 0..10 {
            s.acquired();
        }
        assert!(!s.may_acquire());
        s.set_share(30, 2);
        assert_eq!(s.cap(), 15);
        assert!(s.may_acquire(), "a replica fewer: the survivors take more");
        s.set_share(31, 3);
        assert_eq!(s.cap(), 11);
        s.released();
        assert_eq!(s.held(), 9);
    }

    #[test]
    fn a_replica_still_starting_should_not_make_the_others_shed() {
        let s = Shards::default();
        // Four units, three live replicas of which two are ready: take two
        // at most, and keep two.
        s.set_counts(4, 3, 2);
        assert_eq!(s.cap(), 2);
        s.acquired();
        s.acquired();
        assert!(!s.over_share() && !s.try_shed());
        // One of the ready ones left, handing its two over to this one:
        // four held, the starting one not ready yet — kept.
        s.acquired();
        s.acquired();
        s.set_counts(4, 2, 1);
        assert!(!s.over_share(), "nothing is shed to a replica that cannot take it yet");
        // Now it is ready: the excess goes.
        s.set_counts(4, 2, 2);
        assert!(s.over_share());
        assert!(s.try_shed() && s.try_shed() && !s.try_shed());
        // Nobody ready (a cold start): nothing is shed.
        s.set_counts(4, 3, 0);
        assert!(!s.over_share());
    }

    #[test]
    fn lease_names_should_be_valid_and_distinct() {
        let a = lease_name("operon", "team-a/WebApp");
        let b = lease_name("operon", "team-b/WebApp");
        assert_ne!(a, b);
        assert!(a.starts_with("operon-team-a-webapp-"), "{a}");
        assert!(a.len() <= 63 && a.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
    }

    #[test]
    fn lease_names_should_not_change_between_builds() {
        // Fixed: a replica of the next release must name the same Lease,
        // or a rolling update gives one controller two leaders.
        assert_eq!(lease_name("operon", "team-a/WebApp"), "operon-team-a-webapp-63aa4f37");
    }
}
