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

mod fence;
mod shards;

pub use fence::{Fence, NotLeading};
pub use shards::{MEMBER_LABEL, Membership, Shards, lease_name};

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

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

/// How the elector reads and writes its Lease: the API server, or a fake
/// in this module's tests, so the timing rules can run under virtual time.
trait Leases {
    /// The Lease, or `None` if there is none.
    fn read(&self, name: &str) -> impl Future<Output = kube::Result<Option<Lease>>> + Send;
    /// Creates the Lease; fails with 409 if it exists.
    fn insert(&self, lease: &Lease) -> impl Future<Output = kube::Result<Lease>> + Send;
    /// Replaces the Lease; fails with 409 if its `resourceVersion` is stale.
    fn update(&self, name: &str, lease: &Lease) -> impl Future<Output = kube::Result<Lease>> + Send;
}

impl Leases for Api<Lease> {
    async fn read(&self, name: &str) -> kube::Result<Option<Lease>> {
        self.get_opt(name).await
    }

    async fn insert(&self, lease: &Lease) -> kube::Result<Lease> {
        self.create(&PostParams::default(), lease).await
    }

    async fn update(&self, name: &str, lease: &Lease) -> kube::Result<Lease> {
        self.replace(name, &PostParams::default(), lease).await
    }
}

/// The election's state machine, over any [`Leases`].
struct Elector<L> {
    leases: L,
    config: Config,
    leading: watch::Sender<bool>,
    /// The Lease as we last saw it, and since when.
    observed: Option<Observed>,
    /// The Lease as we last wrote it, while we think we hold it: renewals
    /// start from it, skipping a read, and fail with 409 if anyone else
    /// wrote since.
    held: Option<Lease>,
    /// Whether taking a free or expired Lease is allowed now.
    gate: Option<std::sync::Arc<Shards>>,
}

/// How [`Elector::lead`] ended.
enum Ended {
    SteppedDown,
    Shutdown,
}

/// The result of one [`Elector::try_acquire_or_renew`].
#[derive(Debug)]
enum Outcome {
    /// We hold the Lease; our write was sent at `renewed_at`.
    Leading { renewed_at: Instant },
    /// Someone else holds it, or won a race for it (holder unknown then).
    Following { holder: Option<String> },
}

impl<L: Leases> Elector<L> {
    fn new(leases: L, config: Config) -> Self {
        Self { leases, config, leading: watch::Sender::new(false), observed: None, held: None, gate: None }
    }

    async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let lease = self.config.lease();
        info!(%lease, identity = %self.config.identity, "contending for leadership");
        loop {
            let Some(renewed_at) = self.stand_by(shutdown.as_mut()).await else {
                // A leader that stepped down may still hold the Lease on the
                // server; the release only succeeds if so.
                self.release().await;
                return;
            };
            self.leading.send_replace(true);
            info!(%lease, identity = %self.config.identity, "became leader");
            let ended = self.lead(renewed_at, shutdown.as_mut()).await;
            self.leading.send_replace(false);
            if let Ended::Shutdown = ended {
                info!(%lease, "shutting down; no longer leading");
                self.release().await;
                return;
            }
        }
    }

    /// Tries every retry period until we hold the Lease, returning when our
    /// winning write was sent; `None` on shutdown.
    async fn stand_by<F: Future<Output = ()>>(&mut self, mut shutdown: Pin<&mut F>) -> Option<Instant> {
        let lease = self.config.lease();
        let mut last_holder = None;
        loop {
            let attempt = tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew());
            let result = tokio::select! {
                biased;
                () = shutdown.as_mut() => return None,
                result = attempt => result,
            };
            match result.unwrap_or_else(|_| Err(self.timeout(self.config.renew_deadline))) {
                Ok(Outcome::Leading { renewed_at }) => return Some(renewed_at),
                Ok(Outcome::Following { holder }) => {
                    if holder.is_some() && holder != last_holder {
                        info!(%lease, holder = holder.as_deref(), "another replica leads; standing by");
                        last_holder = holder;
                    }
                }
                Err(e) => {
                    warn!(%lease, error = %chain(&e), "could not contend for leadership; retrying")
                }
            }
            tokio::select! {
                biased;
                () = shutdown.as_mut() => return None,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
    }

    /// Renews every retry period until shutdown, until renewing has failed
    /// for the renew deadline, or until someone else holds the Lease.
    async fn lead<F: Future<Output = ()>>(&mut self, mut renewed_at: Instant, mut shutdown: Pin<&mut F>) -> Ended {
        let lease = self.config.lease();
        loop {
            let deadline = renewed_at + self.config.renew_deadline;
            let wake = (Instant::now() + self.config.retry_period).min(deadline);
            tokio::select! {
                biased;
                () = shutdown.as_mut() => return Ended::Shutdown,
                () = tokio::time::sleep_until(wake) => {}
            }
            if Instant::now() >= deadline {
                warn!(%lease, renew_deadline = ?self.config.renew_deadline, "could not renew within the renew deadline; stepping down");
                return Ended::SteppedDown;
            }
            let attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew());
            let result = tokio::select! {
                biased;
                () = shutdown.as_mut() => return Ended::Shutdown,
                result = attempt => result,
            };
            match result {
                Ok(Ok(Outcome::Leading { renewed_at: at })) => {
                    debug!(%lease, "renewed");
                    renewed_at = at;
                }
                Ok(Ok(Outcome::Following { holder })) => {
                    warn!(%lease, holder = holder.as_deref(), "the lease was taken by another replica; stepping down");
                    return Ended::SteppedDown;
                }
                Ok(Err(e)) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    warn!(%lease, error = %chain(&e), ?left, "could not renew; retrying until the renew deadline");
                }
                Err(_) => {
                    warn!(%lease, renew_deadline = ?self.config.renew_deadline, "renewal got no answer within the renew deadline; stepping down");
                    return Ended::SteppedDown;
                }
            }
        }
    }

    /// One round of the protocol: renew what we hold, or read the Lease and
    /// create, take over or leave it as [`decide`] says.
    async fn try_acquire_or_renew(&mut self) -> Result<Outcome, Error> {
        // Holding it, we renew from our own last write without reading: one
        // request per period, and a 409 if anything changed in between.
        if let Some(held) = self.held.clone() {
            let renewed_at = Instant::now();
            let spec = next_spec(&Action::Renew, held.spec.as_ref(), &self.config, Timestamp::now());
            let lease = Lease { spec: Some(spec), ..held };
            match self.leases.update(&self.config.name, &lease).await {
                Ok(written) => return Ok(self.wrote(written, renewed_at)),
                Err(e) if is_conflict(&e) => {
                    debug!(lease = %self.config.lease(), "the lease changed since we last wrote it; reading it");
                    self.held = None;
                }
                Err(e) => {
                    self.held = None;
                    return Err(self.api_error("update", e));
                }
            }
        }

        let current = self.leases.read(&self.config.name).await.map_err(|e| self.api_error("read", e))?;
        let now = Instant::now();
        let current_spec = current.as_ref().map(|lease| lease.spec.clone().unwrap_or_default());
        self.observed = current_spec.map(|spec| Observed::update(self.observed.take(), spec, now));
        let action = decide(self.observed.as_ref(), &self.config.identity, self.config.lease_duration, now);
        if let Action::Wait { holder, .. } = action {
            return Ok(Outcome::Following { holder: Some(holder) });
        }
        // The share applies to free Leases (new, or released on a clean
        // shutdown); one whose holder stopped renewing is taken at once, so
        // a crashed replica's work moves within a lease duration.
        let expired =
            self.observed.as_ref().is_some_and(|o| o.spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty()));
        if !expired && self.gate.as_ref().is_some_and(|g| !g.may_acquire()) {
            debug!(lease = %self.config.lease(), "free, but this replica holds its share of leases; leaving it");
            return Ok(Outcome::Following { holder: None });
        }

        let spec =
            next_spec(&action, current.as_ref().and_then(|lease| lease.spec.as_ref()), &self.config, Timestamp::now());
        let renewed_at = Instant::now();
        let (verb, written) = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                ("create", self.leases.insert(&lease).await)
            }
            // Keeps the metadata we read, resourceVersion included: that is
            // what makes the take-over conditional.
            Some(lease) => {
                let lease = Lease { spec: Some(spec), ..lease };
                ("update", self.leases.update(&self.config.name, &lease).await)
            }
        };
        match written {
            Ok(written) => {
                if action == Action::Acquire {
                    info!(lease = %self.config.lease(), "took over a released or expired lease");
                }
                Ok(self.wrote(written, renewed_at))
            }
            Err(e) if is_conflict(&e) => {
                debug!(lease = %self.config.lease(), "another replica wrote the lease first");
                Ok(Outcome::Following { holder: None })
            }
            Err(e) => Err(self.api_error(verb, e)),
        }
    }

    fn wrote(&mut self, written: Lease, renewed_at: Instant) -> Outcome {
        self.observed = Some(Observed { spec: written.spec.clone().unwrap_or_default(), at: renewed_at });
        self.held = Some(written);
        Outcome::Leading { renewed_at }
    }

    /// Hands the Lease over, if our last write still stands, so a standby
    /// need not wait for it to expire.
    async fn release(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        let lease_name = self.config.lease();
        let lease = Lease { spec: Some(released_spec(held.spec.as_ref(), Timestamp::now())), ..held };
        let after = self.config.renew_deadline;
        match tokio::time::timeout(after, self.leases.update(&self.config.name, &lease)).await {
            Ok(Ok(_)) => info!(lease = %lease_name, "released the lease"),
            Ok(Err(e)) if is_conflict(&e) => {
                info!(lease = %lease_name, "the lease changed since our last renewal; leaving it as it is");
            }
            Ok(Err(e)) => warn!(
                lease = %lease_name,
                error = %chain(&self.api_error("release", e)),
                "could not release; others take over once it expires"
            ),
            Err(_) => warn!(
                lease = %lease_name,
                error = %chain(&self.timeout(after)),
                "could not release; others take over once it expires"
            ),
        }
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> Error {
        Error::Api { action, lease: self.config.lease(), source }
    }

    fn timeout(&self, after: Duration) -> Error {
        Error::Timeout { lease: self.config.lease(), after }
    }
}

/// A 409: someone wrote first (`Conflict`), or created first
/// (`AlreadyExists`). Either way we lost a race, which is no failure.
fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// `error: cause: cause`, for one log line. Causes that a message already
/// quotes (kube's and hyper's often do) are not repeated.
fn chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// What a candidate last saw of the Lease, and since when by its own clock.
#[derive(Clone, Debug, PartialEq)]
struct Observed {
    spec: LeaseSpec,
    /// When `spec` was first seen as it is. A Lease expires `leaseDuration`
    /// after this, never after its `renewTime`, which another machine's clock
    /// wrote.
    at: Instant,
}

impl Observed {
    /// Keeps the old observation time while the record is unchanged; a change
    /// (a renewal, a new holder) restarts the clock.
    fn update(previous: Option<Observed>, spec: LeaseSpec, now: Instant) -> Observed {
        match previous {
            Some(previous) if previous.spec == spec => previous,
            _ => Observed { spec, at: now },
        }
    }
}

/// What to do about the Lease as observed.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    /// There is no Lease: create one naming us.
    Create,
    /// Nobody holds it, or its holder has not renewed in time: take it over,
    /// counting a transition.
    Acquire,
    /// We hold it: extend it.
    Renew,
    /// Someone else holds it and may still be acting: wait until `expires`
    /// (if it has not changed by then).
    Wait { holder: String, expires: Instant },
}

/// The protocol's decision, given what we observed and when, who we are, and
/// the lease duration to assume if the record states none.
fn decide(observed: Option<&Observed>, identity: &str, fallback: Duration, now: Instant) -> Action {
    let Some(observed) = observed else {
        return Action::Create;
    };
    let holder = observed.spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() {
        return Action::Acquire;
    }
    if holder == identity {
        return Action::Renew;
    }
    // A record without a usable duration gets ours rather than none: waiting
    // too long is safe, taking over too early is not.
    let duration = observed
        .spec
        .lease_duration_seconds
        .and_then(|seconds| u64::try_from(seconds).ok())
        .filter(|seconds| *seconds > 0)
        .map_or(fallback, Duration::from_secs);
    let expires = observed.at + duration;
    if now >= expires { Action::Acquire } else { Action::Wait { holder: holder.to_owned(), expires } }
}

/// The record to write for `action` (never [`Action::Wait`]), based on the
/// current one; fields this protocol does not own are kept.
fn next_spec(action: &Action, current: Option<&LeaseSpec>, config: &Config, now: Timestamp) -> LeaseSpec {
    let current = current.cloned().unwrap_or_default();
    let (acquire_time, lease_transitions) = match action {
        Action::Renew => (current.acquire_time.clone().or(Some(MicroTime(now))), current.lease_transitions.or(Some(0))),
        Action::Acquire => (Some(MicroTime(now)), Some(current.lease_transitions.unwrap_or(0) + 1)),
        Action::Create | Action::Wait { .. } => (Some(MicroTime(now)), Some(0)),
    };
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        // Validated to fit.
        lease_duration_seconds: Some(config.lease_duration.as_secs() as i32),
        acquire_time,
        renew_time: Some(MicroTime(now)),
        lease_transitions,
        ..current
    }
}

/// A record nobody holds, as client-go's release writes it (a one-second
/// duration, for readers that do not treat an empty holder as free).
fn released_spec(current: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    const LEASE: Duration = Duration::from_secs(15);
    const RENEW: Duration = Duration::from_secs(10);
    const RETRY: Duration = Duration::from_secs(2);

    fn config(identity: &str) -> Config {
        Config { identity: identity.to_owned(), ..Config::new("operon-system", "operon") }
    }

    fn held_by(holder: &str, renewed: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(renewed)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    fn seen(spec: LeaseSpec, at: Instant) -> Option<Observed> {
        Some(Observed { spec, at })
    }

    // --- The decision, given what was observed and when ---

    #[test]
    fn a_missing_lease_should_be_created() {
        assert_eq!(decide(None, "me", LEASE, Instant::now()), Action::Create);
    }

    #[test]
    fn a_released_lease_should_be_taken_at_once() {
        let now = Instant::now();
        let released = released_spec(Some(&held_by("other", Timestamp::now())), Timestamp::now());
        assert_eq!(decide(seen(released, now).as_ref(), "me", LEASE, now), Action::Acquire);
    }

    #[test]
    fn our_own_lease_should_be_renewed_even_if_we_saw_it_long_ago() {
        let then = Instant::now();
        let observed = seen(held_by("me", Timestamp::now()), then);
        assert_eq!(decide(observed.as_ref(), "me", LEASE, then + LEASE * 10), Action::Renew);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_lease_should_expire_a_lease_duration_after_it_was_seen_to_change() {
        let first_seen = Instant::now();
        let spec = held_by("other", Timestamp::now());
        let mut observed = Observed::update(None, spec.clone(), first_seen);

        tokio::time::advance(LEASE - Duration::from_millis(1)).await;
        observed = Observed::update(Some(observed), spec, Instant::now());
        assert_eq!(
            decide(Some(&observed), "me", LEASE, Instant::now()),
            Action::Wait { holder: "other".to_owned(), expires: first_seen + LEASE },
            "an unchanged record keeps the time it was first seen"
        );

        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(decide(Some(&observed), "me", LEASE, Instant::now()), Action::Acquire);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_seen_should_restart_the_wait() {
        let mut observed = Observed::update(None, held_by("other", Timestamp::now()), Instant::now());
        tokio::time::advance(LEASE - RETRY).await;
        let renewed = held_by("other", Timestamp::now() + Duration::from_secs(1));
        observed = Observed::update(Some(observed), renewed, Instant::now());
        tokio::time::advance(RETRY).await;
        assert!(
            matches!(decide(Some(&observed), "me", LEASE, Instant::now()), Action::Wait { .. }),
            "the wait counts from the renewal we saw, not from the first record"
        );
    }

    #[test]
    fn a_renew_time_from_a_skewed_clock_should_not_shorten_the_wait() {
        // The holder's clock says it renewed long ago; we just saw the record.
        let now = Instant::now();
        let long_ago = Timestamp::UNIX_EPOCH;
        let observed = seen(held_by("other", long_ago), now);
        assert!(matches!(
            decide(observed.as_ref(), "me", LEASE, now + LEASE - Duration::from_millis(1)),
            Action::Wait { .. }
        ));
    }

    #[test]
    fn a_record_without_a_duration_should_get_ours() {
        let now = Instant::now();
        let spec = LeaseSpec { lease_duration_seconds: None, ..held_by("other", Timestamp::now()) };
        let observed = seen(spec, now);
        assert!(matches!(decide(observed.as_ref(), "me", LEASE, now + RENEW), Action::Wait { .. }));
        assert_eq!(decide(observed.as_ref(), "me", LEASE, now + LEASE), Action::Acquire);
    }

    // --- The records written ---

    #[test]
    fn taking_over_should_count_a_transition_and_renewing_should_not() {
        let before = Timestamp::now();
        let now = before + Duration::from_secs(20);
        let current = held_by("other", before);

        let taken = next_spec(&Action::Acquire, Some(&current), &config("me"), now);
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.lease_duration_seconds, Some(15));

        let later = now + Duration::from_secs(2);
        let renewed = next_spec(&Action::Renew, Some(&taken), &config("me"), later);
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, Some(MicroTime(now)));
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));

        let created = next_spec(&Action::Create, None, &config("me"), now);
        assert_eq!(created.lease_transitions, Some(0));
    }

    #[test]
    fn a_release_should_clear_the_holder_and_keep_the_count() {
        let released = released_spec(Some(&held_by("me", Timestamp::now())), Timestamp::now());
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_transitions, Some(3));
        assert_eq!(released.lease_duration_seconds, Some(1));
    }

    // --- Configuration ---

    #[test]
    fn the_defaults_should_be_client_gos_and_valid() {
        let config = Config::new("ns", "name");
        assert_eq!((config.lease_duration, config.renew_deadline, config.retry_period), (LEASE, RENEW, RETRY));
        config.validate().unwrap();
        assert_ne!(config.identity, Config::new("ns", "name").identity, "identities are unique");
    }

    #[test]
    fn timings_that_would_let_two_lead_should_be_rejected() {
        let cases = [(LEASE, LEASE, RETRY), (LEASE, RENEW, RENEW), (LEASE, RENEW, Duration::ZERO)];
        for (lease_duration, renew_deadline, retry_period) in cases {
            let config = Config { lease_duration, renew_deadline, retry_period, ..config("me") };
            assert!(
                matches!(config.validate(), Err(Error::Timings { .. })),
                "{lease_duration:?} {renew_deadline:?} {retry_period:?}"
            );
        }
        let fractional = Config { lease_duration: Duration::from_millis(15_500), ..config("me") };
        assert!(matches!(fractional.validate(), Err(Error::LeaseDuration(_))));
        let nameless = Config { name: String::new(), ..config("me") };
        assert!(matches!(nameless.validate(), Err(Error::Empty { field: "name" })));
    }

    // --- The loop, against a fake API server, in virtual time ---

    /// An in-memory Lease store shared by handles, each of which can be cut
    /// off: its requests then hang, as through a network partition.
    #[derive(Clone, Default)]
    struct Fake {
        store: Arc<Mutex<Store>>,
        cut: Arc<AtomicBool>,
    }

    #[derive(Default)]
    struct Store {
        lease: Option<Lease>,
        version: u64,
    }

    impl Fake {
        /// Another client of the same store, with its own connection.
        fn client(&self) -> Fake {
            Fake { store: self.store.clone(), cut: Arc::default() }
        }

        fn cut(&self) {
            self.cut.store(true, Ordering::SeqCst);
        }

        async fn network(&self) {
            if self.cut.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        }

        fn lease(&self) -> Lease {
            self.store.lock().unwrap().lease.clone().expect("a lease")
        }

        /// Writes unconditionally, as a human with kubectl might.
        fn overwrite(&self, spec: LeaseSpec) {
            let mut store = self.store.lock().unwrap();
            store.version += 1;
            let version = store.version.to_string();
            let lease = store.lease.as_mut().expect("a lease");
            lease.spec = Some(spec);
            lease.metadata.resource_version = Some(version);
        }

        fn write(store: &mut Store, lease: &Lease) -> Lease {
            store.version += 1;
            let mut lease = lease.clone();
            lease.metadata.resource_version = Some(store.version.to_string());
            store.lease = Some(lease.clone());
            lease
        }
    }

    fn conflict() -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code: 409,
            reason: "Conflict".to_owned(),
            ..kube::core::Status::default()
        }))
    }

    impl Leases for Fake {
        async fn read(&self, _name: &str) -> kube::Result<Option<Lease>> {
            self.network().await;
            Ok(self.store.lock().unwrap().lease.clone())
        }

        async fn insert(&self, lease: &Lease) -> kube::Result<Lease> {
            self.network().await;
            let mut store = self.store.lock().unwrap();
            if store.lease.is_some() {
                return Err(conflict());
            }
            Ok(Self::write(&mut store, lease))
        }

        async fn update(&self, _name: &str, lease: &Lease) -> kube::Result<Lease> {
            self.network().await;
            let mut store = self.store.lock().unwrap();
            let current = store.lease.as_ref().and_then(|l| l.metadata.resource_version.clone());
            if current != lease.metadata.resource_version {
                return Err(conflict());
            }
            Ok(Self::write(&mut store, lease))
        }
    }

    /// A running elector: its channel, and ways to stop it.
    struct Candidate {
        leading: watch::Receiver<bool>,
        task: JoinHandle<()>,
        stop: Option<oneshot::Sender<()>>,
    }

    fn start(leases: Fake, identity: &str) -> Candidate {
        let elector = Elector::new(leases, config(identity));
        let leading = elector.leading.subscribe();
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(elector.run(async move {
            let _ = stopped.await;
        }));
        Candidate { leading, task, stop: Some(stop) }
    }

    impl Candidate {
        fn leads(&self) -> bool {
            *self.leading.borrow()
        }

        /// Waits for the channel to say `leading`; returns when, in virtual
        /// time.
        async fn until(&mut self, leading: bool) -> Instant {
            self.leading.wait_for(|now| *now == leading).await.unwrap();
            Instant::now()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_elector_should_create_the_lease_and_lead_at_once() {
        let fake = Fake::default();
        let start_at = Instant::now();
        let mut a = start(fake.client(), "a");
        assert_eq!(a.until(true).await, start_at);
        let spec = fake.lease().spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn two_electors_should_never_lead_at_once() {
        let fake = Fake::default();
        let mut a = start(fake.client(), "a");
        let b = start(fake.client(), "b");
        a.until(true).await;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(a.leads() && !b.leads(), "a took it first and keeps renewing");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_off_leader_should_step_down_at_the_renew_deadline_and_before_a_standby_leads() {
        let fake = Fake::default();
        let a_network = fake.client();
        let mut a = start(a_network.clone(), "a");
        let started = a.until(true).await;
        let mut b = start(fake.client(), "b");

        // a renews at +0, +2, +4; cut at +5, its renewal at +6 hangs.
        tokio::time::sleep(Duration::from_secs(5)).await;
        a_network.cut();
        let last_renewal = started + Duration::from_secs(4);

        let stepped_down = a.until(false).await;
        assert_eq!(stepped_down, last_renewal + RENEW, "the hanging request did not delay it");
        let b_leads = b.until(true).await;
        assert!(
            b_leads >= stepped_down + (LEASE - RENEW),
            "b must wait out the lease it saw renewed at +4 or later: stepped down {:?}, b leads {:?}",
            stepped_down - started,
            b_leads - started
        );
        assert!(b_leads <= last_renewal + LEASE + 2 * RETRY);
        assert_eq!(fake.lease().spec.unwrap().lease_transitions, Some(1));
        assert!(!a.leads());
    }

    #[tokio::test(start_paused = true)]
    async fn a_killed_leader_should_be_replaced_after_the_lease_duration() {
        let fake = Fake::default();
        let mut a = start(fake.client(), "a");
        let started = a.until(true).await;
        let mut b = start(fake.client(), "b");
        tokio::time::sleep(Duration::from_secs(3)).await;
        a.task.abort();
        let killed = Instant::now();

        let b_leads = b.until(true).await;
        // a last renewed at +2; b saw that at +2 (same instant) or at its next look.
        let last_renewal = started + Duration::from_secs(2);
        assert!(b_leads >= last_renewal + LEASE, "b took over {:?} after the kill", b_leads - killed);
        assert!(b_leads <= last_renewal + LEASE + 2 * RETRY);
        assert_eq!(fake.lease().spec.unwrap().holder_identity.as_deref(), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_should_step_down_first_then_release_so_a_standby_leads_at_its_next_look() {
        let fake = Fake::default();
        let mut a = start(fake.client(), "a");
        a.until(true).await;
        let mut b = start(fake.client(), "b");
        tokio::time::sleep(Duration::from_secs(7)).await;

        let stopped_at = Instant::now();
        a.stop.take().unwrap().send(()).unwrap();
        assert_eq!(a.until(false).await, stopped_at);
        a.task.await.unwrap();
        assert_eq!(fake.lease().spec.unwrap().holder_identity, None, "released");

        let b_leads = b.until(true).await;
        assert!(b_leads <= stopped_at + RETRY, "b took {:?}", b_leads - stopped_at);
        assert_eq!(fake.lease().spec.unwrap().lease_transitions, Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_lease_is_taken_should_step_down_at_its_next_renewal() {
        let fake = Fake::default();
        let mut a = start(fake.client(), "a");
        let started = a.until(true).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        fake.overwrite(held_by("thief", Timestamp::now()));

        let stepped_down = a.until(false).await;
        assert_eq!(stepped_down, started + 2 * RETRY, "at the renewal after the theft");
        // It stands by, then takes over at its first look after the thief's
        // record has stood unchanged for a lease duration.
        let back = a.until(true).await;
        assert!(back >= stepped_down + LEASE && back <= stepped_down + LEASE + RETRY);
        assert_eq!(fake.lease().spec.unwrap().lease_transitions, Some(4));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_while_standing_by_should_leave_the_lease_alone() {
        let fake = Fake::default();
        let mut a = start(fake.client(), "a");
        a.until(true).await;
        let mut b = start(fake.client(), "b");
        tokio::time::sleep(RETRY).await;
        let before = fake.lease();
        b.stop.take().unwrap().send(()).unwrap();
        (&mut b.task).await.unwrap();
        assert!(!b.leads());
        assert!(a.leads());
        assert_eq!(fake.lease().spec.unwrap().holder_identity, before.spec.unwrap().holder_identity);
    }
}
