//! Leader election over a `coordination.k8s.io/v1` Lease, so that of several
//! replicas of the host exactly one reconciles while the others stand by with
//! warm caches, ready to take over when the leader stops renewing.
//!
//! The protocol is client-go's `leaderelection` (what controller-runtime's
//! manager uses), so Operon replicas and Go tooling read the same Lease the
//! same way:
//!
//! - A candidate creates the Lease if there is none, and takes it over when it
//!   is released (no holder) or when it has not changed for
//!   `leaseDurationSeconds` **by the candidate's own clock**, counted from
//!   when the candidate saw it change. `renewTime` is written for humans and
//!   never compared with the local clock, so skew between machines does not
//!   matter; only the rate at which clocks run does.
//! - Every write is conditional on the `resourceVersion` the writer read, so
//!   of two candidates racing for an expired Lease only one succeeds.
//! - The leader renews every [`Config::retry_period`]. If it has not renewed
//!   for [`Config::renew_deadline`], counted from when it *sent* its last
//!   successful renewal, it stops leading. As the renew deadline is shorter
//!   than the lease duration, it says so before any standby may take over.
//! - On shutdown the leader releases the Lease, so a standby takes over within
//!   one retry period instead of one lease duration.
//!
//! Callers watch [`LeaderElector::subscribe`] and do their writes only while
//! it says `true`; the same channel feeds the `leader_election_master_status`
//! metric.

mod ability;
mod elector;
mod fence;
mod leadership;
mod shards;

pub use ability::Ability;
pub use elector::YIELDED_ANNOTATION;
use elector::*;
pub use fence::{Fence, NotLeading};
pub use leadership::Leadership;
pub(crate) use leadership::{Mode, WeakLeadership};
pub use shards::{MEMBER_LABEL, Membership, READY_ANNOTATION, Shards, lease_name};

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::sync::watch;

/// Where the Lease lives, who we are, and the protocol's three timings.
///
/// The defaults (15 s / 10 s / 2 s) are client-go's and controller-runtime's.
/// [`LeaderElector::new`] checks the invariants listed on [`Config::validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Namespace of the Lease, usually the host's own.
    pub namespace: String,
    /// Name of the Lease. Replicas contend for the work if and only if they
    /// use the same namespace and name.
    pub name: String,
    /// What this replica writes as `holderIdentity`. Must differ between
    /// replicas: two replicas with one identity would both believe they hold
    /// the Lease. Defaults to [`default_identity`].
    pub identity: String,
    /// How long a standby waits, after it last saw the Lease change, before
    /// it takes over. Written to `leaseDurationSeconds`, hence whole seconds.
    pub lease_duration: Duration,
    /// How long the leader keeps failing to renew before it stops leading.
    /// `lease_duration - renew_deadline` is the time its caller has to stop
    /// writing before a standby may start.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby looks at the Lease.
    pub retry_period: Duration,
}

impl Config {
    /// The client-go defaults (lease 15 s, renew deadline 10 s, retry 2 s)
    /// for the Lease `namespace/name`, with a fresh [`default_identity`].
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Checks what the protocol's safety rests on.
    ///
    /// # Errors
    ///
    /// - [`Error::Empty`] if the namespace, name or identity is empty;
    /// - [`Error::LeaseDuration`] unless the lease duration is a whole number
    ///   of seconds, at least one, as the Lease stores seconds;
    /// - [`Error::Timings`] unless `0 < retry_period < renew_deadline <
    ///   lease_duration`: a renew deadline as long as the lease would let a
    ///   standby start before the leader stops, and a retry period as long as
    ///   the renew deadline would allow a single attempt per deadline.
    pub fn validate(&self) -> Result<(), Error> {
        for (field, value) in [("namespace", &self.namespace), ("name", &self.name), ("identity", &self.identity)] {
            if value.is_empty() {
                return Err(Error::Empty { field });
            }
        }
        let whole_seconds =
            self.lease_duration.subsec_nanos() == 0 && (1..=i32::MAX as u64).contains(&self.lease_duration.as_secs());
        if !whole_seconds {
            return Err(Error::LeaseDuration(self.lease_duration));
        }
        if self.retry_period.is_zero()
            || self.retry_period >= self.renew_deadline
            || self.renew_deadline >= self.lease_duration
        {
            return Err(Error::Timings {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }

    /// `namespace/name` of the Lease.
    pub fn qualified_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn lease(&self) -> String {
        self.qualified_name()
    }
}

/// `<hostname>_<random hex>`, as client-go users conventionally build it.
///
/// The hostname (a Pod's name, in a cluster) tells a human which replica
/// leads; the suffix keeps two electors in one process, or a restarted
/// process, from sharing an identity and so from both believing they lead.
pub fn default_identity() -> String {
    use std::hash::{BuildHasher, Hasher, RandomState};

    let hostname = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "operon".to_owned());
    // RandomState is seeded from the OS; the time and pid only add variety.
    let mut hasher = RandomState::new().build_hasher();
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    hasher.write_u128(since_epoch.as_nanos());
    hasher.write_u32(std::process::id());
    format!("{hostname}_{:016x}", hasher.finish())
}

/// How this replica came to hold a Lease: what a hand-over event tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    /// The replica that held it before, when known.
    pub from: Option<String>,
    /// How it was free to take.
    pub how: Taken,
}

/// How a Lease was free to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// There was none: created.
    Created,
    /// Its holder released it (it shed an excess over its share).
    Released,
    /// Its holder handed it over: it shut down, or could not serve.
    HandedOver,
    /// Its holder stopped renewing it for a lease duration (killed, cut
    /// off, or paused).
    Expired,
}

impl Taken {
    /// In a sentence: "released", "handed over", "expired", "created".
    pub fn as_str(self) -> &'static str {
        match self {
            Taken::Created => "created",
            Taken::Released => "released",
            Taken::HandedOver => "handed over",
            Taken::Expired => "expired",
        }
    }
}

/// What can go wrong in leader election.
///
/// Configuration errors come from [`LeaderElector::new`]. Request errors are
/// not returned: [`LeaderElector::run`] logs them and tries again, since an
/// API server that is down now is usually back soon, and the protocol already
/// decides what not being able to reach it means.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A [`Config`] field naming the Lease or the holder is empty.
    #[error("leader election {field} is empty; set it in leader::Config")]
    Empty {
        /// `namespace`, `name` or `identity`.
        field: &'static str,
    },
    /// The lease duration cannot be written to `leaseDurationSeconds`.
    #[error("lease duration {0:?} is not a whole number of seconds of at least 1s; the Lease stores seconds")]
    LeaseDuration(Duration),
    /// The timings do not satisfy `0 < retry period < renew deadline < lease
    /// duration`, without which a leader could still act after a standby took
    /// over.
    #[error(
        "leader election needs 0 < retry period ({retry_period:?}) < renew deadline ({renew_deadline:?}) < lease duration ({lease_duration:?}), or a leader could act after another took over"
    )]
    Timings {
        /// [`Config::lease_duration`].
        lease_duration: Duration,
        /// [`Config::renew_deadline`].
        renew_deadline: Duration,
        /// [`Config::retry_period`].
        retry_period: Duration,
    },
    /// A request about the Lease failed (logged, then retried).
    #[error("could not {action} lease {lease}")]
    Api {
        /// `read`, `create`, `update` or `release`.
        action: &'static str,
        /// `namespace/name`.
        lease: String,
        /// What the client or the API server said.
        #[source]
        source: kube::Error,
    },
    /// A request about the Lease got no answer in time (logged, then
    /// retried).
    #[error("no answer about lease {lease} within {after:?}; is the API server reachable?")]
    Timeout {
        /// `namespace/name`.
        lease: String,
        /// How long we waited.
        after: Duration,
    },
}

/// Contends for a Lease and reports, on a watch channel, whether this
/// replica leads.
///
/// ```no_run
/// # async fn example(client: kube::Client) -> Result<(), operon::leader::Error> {
/// use operon::leader::{Config, LeaderElector};
///
/// let elector = LeaderElector::new(client, Config::new("operon-system", "operon"))?;
/// let mut is_leader = elector.subscribe();
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let election = tokio::spawn(elector.run(async move {
///     let _ = stopped.await;
/// }));
/// is_leader.wait_for(|leading| *leading).await.ok();
/// // ... reconcile while `*is_leader.borrow()`, stop when it turns false ...
/// // Stop the guarded work first, then release the Lease:
/// let _ = stop.send(());
/// election.await.ok();
/// # Ok(())
/// # }
/// ```
///
/// # Guarantees
///
/// - Of several electors that find the Lease free or expired at once, at most
///   one wins: every write carries the `resourceVersion` it was based on, so
///   the API server rejects all but the first.
/// - The channel says `true` only while the last successful renewal was
///   *sent* less than [`Config::renew_deadline`] ago. It turns `false` at that
///   deadline even if a request hangs, and at once if a read shows another
///   holder. Standbys wait [`Config::lease_duration`] from when they *saw*
///   that renewal, which is later, so the old leader's `false` comes at least
///   `lease_duration - renew_deadline` before a new leader's `true`.
/// - A standby's wait is measured on its own monotonic clock; clock offsets
///   between machines do not matter.
/// - On shutdown the channel turns `false` before the Lease is released. The
///   release is conditional on nobody having written the Lease since our last
///   write, so it never clears a Lease someone else has taken meanwhile.
/// - After stepping down the elector keeps contending: a leader cut off from
///   the API server leads again once it can renew, if nobody took over.
///
/// # Caveats
///
/// - The `false` is a notification, not a fence: the caller must stop writing
///   within `lease_duration - renew_deadline` (5 s by default) of it, and
///   must have stopped its guarded work before triggering `shutdown`, as the
///   release lets a standby start at once (the same contract as client-go's
///   `ReleaseOnCancel`).
/// - The guarantees assume clocks run at about the same rate on all replicas
///   (not that they agree on the time), and that a replica's process is not
///   paused, e.g. by a stopped VM, for longer than that same margin.
/// - A shutdown that interrupts a request in flight does not know whether the
///   request took effect; a Lease it left held simply expires.
/// - `preferredHolder` and `strategy` (coordinated leader election) are kept
///   as found but not acted on.
#[doc(alias = "leaderelection")]
#[doc(alias = "LeaderElection")]
pub struct LeaderElector {
    elector: Elector<Api<Lease>>,
}

impl LeaderElector {
    /// An elector for `config`'s Lease, not yet contending: see
    /// [`run`](Self::run).
    ///
    /// # Errors
    ///
    /// [`Config::validate`]'s.
    pub fn new(client: Client, config: Config) -> Result<Self, Error> {
        config.validate()?;
        let leases = Api::namespaced(client, &config.namespace);
        Ok(Self { elector: Elector::new(leases, config) })
    }

    /// Whether this replica leads, now and as it changes; starts `false`.
    ///
    /// The value stays readable after [`run`](Self::run) returns, and is then
    /// `false`.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.elector.leading.subscribe()
    }

    /// How this replica last came to lead ([`Takeover`]), as it changes:
    /// set before [`subscribe`](Self::subscribe) turns `true`.
    pub fn takeovers(&self) -> watch::Receiver<Option<Takeover>> {
        self.elector.took.subscribe()
    }

    /// The configuration, e.g. for the `name` label of
    /// `leader_election_master_status`.
    pub fn config(&self) -> &Config {
        &self.elector.config
    }

    /// Take (or create) the Lease only while `gate` says so; renewing a Lease
    /// already held is never gated. Used to spread per-controller leases
    /// over replicas ([`Shards`]).
    pub fn with_gate(mut self, gate: std::sync::Arc<Shards>) -> Self {
        self.elector.gate = Some(gate);
        self
    }

    /// What this replica can do for the Lease's work, as it changes
    /// ([`Ability`]). Until it is ready, it takes a free or expired Lease
    /// only after the others had a lease duration to take it; while it
    /// cannot serve at all, it also hands a Lease it holds over (marked
    /// [`YIELDED_ANNOTATION`], so the others take it whatever their share)
    /// after a lease duration, doubled at each consecutive hand-over —
    /// unless no other replica is live. Someone always leads, so someone
    /// reports the unit's state; one that is ready leads when there is one.
    pub fn with_ability(mut self, able: watch::Receiver<Ability>) -> Self {
        self.elector.able = Some(able);
        self
    }

    /// Contends for the Lease, leads while it can renew, and stands by
    /// otherwise, until `shutdown` completes; then releases the Lease if it
    /// still holds it (waiting at most the renew deadline) and returns.
    ///
    /// Never returns early: failed requests are logged and retried every
    /// retry period. Dropping the future (e.g. aborting its task) stops the
    /// election without a release, like a crash; others then take over once
    /// the Lease expires.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        self.elector.run(shutdown).await;
    }
}

#[cfg(test)]
mod tests;
