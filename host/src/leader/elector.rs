//! The election's state machine over any [`Leases`] store: contend, lead,
//! renew, step down, release — with the pure decision ([`decide`]) apart
//! from the I/O around it, so the timing rules are tested as data.

use super::{Ability, Config, Error, Shards, Taken, Takeover};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// How the elector reads and writes its Lease: the API server, or a fake
/// in this module's tests, so the timing rules can run under virtual time.
pub(super) trait Leases {
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
pub(super) struct Elector<L> {
    pub(super) leases: L,
    pub(super) config: Config,
    pub(super) leading: watch::Sender<bool>,
    /// How we last took the Lease (set before `leading` turns true).
    pub(super) took: watch::Sender<Option<Takeover>>,
    /// The Lease as we last saw it, and since when.
    pub(super) observed: Option<Observed>,
    /// The Lease as we last wrote it, while we think we hold it: renewals
    /// start from it, skipping a read, and fail with 409 if anyone else
    /// wrote since.
    pub(super) held: Option<Lease>,
    /// Whether taking a free or expired Lease is allowed now.
    pub(super) gate: Option<std::sync::Arc<Shards>>,
    /// Whether this replica can do the unit's work (`None`: always). One
    /// still loading it leaves a free Lease to one that can; one that
    /// cannot also hands a held Lease over (see [`Elector::lead`]).
    pub(super) able: Option<watch::Receiver<Ability>>,
    /// Since when no Lease exists, as we saw it (for the deferral of a
    /// replica that cannot serve).
    pub(super) absent_since: Option<Instant>,
    /// Consecutive hand-overs for want of ability: each holds twice as
    /// long before the next, so replicas that all cannot serve pass the
    /// Lease around ever more slowly.
    pub(super) yields: u32,
}

/// The annotation a replica leaves on a Lease it hands over — it cannot
/// serve the unit, or it shuts down — valued with its identity: the others
/// take that Lease whatever their share (it is work nobody else is doing;
/// an excess is shed later to a replica under its share).
pub const YIELDED_ANNOTATION: &str = "operon.dev/yielded-by";

/// Most consecutive doublings of the hold of a replica that cannot serve.
const MAX_YIELD_DOUBLINGS: u32 = 4;

/// How [`Elector::lead`] ended.
pub(super) enum Ended {
    SteppedDown,
    /// This replica cannot serve the unit and another replica is live.
    Yielded,
    /// This replica holds more than its share; the Lease was counted as
    /// released already ([`Shards::try_shed`]).
    Shed,
    Shutdown,
}

/// The result of one [`Elector::try_acquire_or_renew`].
#[derive(Debug)]
pub(super) enum Outcome {
    /// We hold the Lease; our write was sent at `renewed_at`.
    Leading { renewed_at: Instant },
    /// Someone else holds it, or won a race for it (holder unknown then).
    Following { holder: Option<String> },
}

impl<L: Leases> Elector<L> {
    pub(super) fn new(leases: L, config: Config) -> Self {
        Self {
            leases,
            config,
            leading: watch::Sender::new(false),
            took: watch::Sender::new(None),
            observed: None,
            held: None,
            gate: None,
            able: None,
            absent_since: None,
            yields: 0,
        }
    }

    /// What this replica can do for the unit now.
    fn ability(&self) -> Ability {
        self.able.as_ref().map_or(Ability::Ready, |a| *a.borrow())
    }

    /// Whether another replica may be live to take a Lease we hand over
    /// (unknown without a gate: assumed).
    fn others_live(&self) -> bool {
        self.gate.as_ref().is_none_or(|g| g.replicas() > 1)
    }

    /// How long a replica that cannot serve holds the Lease before it hands
    /// it over: a lease duration, doubled by each consecutive hand-over.
    fn hold_while_unable(&self) -> Duration {
        self.config.lease_duration * 2u32.pow(self.yields.min(MAX_YIELD_DOUBLINGS))
    }

    pub(super) async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let lease = self.config.lease();
        info!(%lease, identity = %self.config.identity, "contending for leadership");
        loop {
            let Some(renewed_at) = self.stand_by(shutdown.as_mut()).await else {
                // A leader that stepped down may still hold the Lease on the
                // server; the release only succeeds if so.
                self.release(true).await;
                return;
            };
            self.leading.send_replace(true);
            info!(%lease, identity = %self.config.identity, "became leader");
            let ended = self.lead(renewed_at, shutdown.as_mut()).await;
            self.leading.send_replace(false);
            if let (Some(g), false) = (&self.gate, matches!(ended, Ended::Shed)) {
                g.released();
            }
            match ended {
                Ended::Shutdown => {
                    info!(%lease, "shutting down; no longer leading");
                    // Marked as handed over: a standby at its share takes
                    // it all the same, rather than after a recount.
                    self.release(true).await;
                    return;
                }
                Ended::Yielded => {
                    info!(%lease, "this replica cannot serve it; handing the lease to one that can");
                    self.yields = self.yields.saturating_add(1);
                    self.release(true).await;
                }
                Ended::Shed => {
                    info!(%lease, "this replica holds more than its share of leases; handing this one over");
                    self.release(false).await;
                }
                Ended::SteppedDown => {}
            }
        }
    }

    /// Tries every retry period until we hold the Lease, returning when our
    /// winning write was sent; `None` on shutdown.
    pub(super) async fn stand_by<F: Future<Output = ()>>(&mut self, mut shutdown: Pin<&mut F>) -> Option<Instant> {
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
    pub(super) async fn lead<F: Future<Output = ()>>(
        &mut self,
        mut renewed_at: Instant,
        mut shutdown: Pin<&mut F>,
    ) -> Ended {
        let lease = self.config.lease();
        let mut unable_since: Option<Instant> = None;
        let mut over_share_since: Option<Instant> = None;
        loop {
            // Unable to serve for a hold, with another replica live: hand
            // over (nobody else able, the Lease comes back after a deferral;
            // see `try_acquire_or_renew`).
            if !self.ability().hands_over() {
                unable_since = None;
                self.yields = 0;
            } else {
                let since = *unable_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.hold_while_unable() && self.others_live() {
                    return Ended::Yielded;
                }
            }
            // More than this replica's share for a lease duration: give
            // up the excess (the claims are atomic over its electors).
            if self.gate.as_ref().is_some_and(|g| g.over_share()) {
                let since = *over_share_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.config.lease_duration && self.gate.as_ref().is_some_and(|g| g.try_shed()) {
                    return Ended::Shed;
                }
            } else {
                over_share_since = None;
            }
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
    pub(super) async fn try_acquire_or_renew(&mut self) -> Result<Outcome, Error> {
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
        let held_by_other =
            self.observed.as_ref().is_some_and(|o| o.spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty()));
        // A replica that cannot serve yet (still loading) or at all takes a
        // free or expired Lease only once it has stayed so for another lease
        // duration: long enough for a replica that can serve (retrying every
        // retry period) to take it first. Then it takes it, so that someone
        // reports the unit's state. Alone, it takes it at once.
        if !self.ability().takes_at_once() && self.others_live() {
            let free_since = match &self.observed {
                None => *self.absent_since.get_or_insert(now),
                Some(o) if held_by_other => o.at + self.config.lease_duration,
                Some(o) => o.at,
            };
            if now.saturating_duration_since(free_since) < self.config.lease_duration {
                debug!(lease = %self.config.lease(), "free, but this replica cannot serve it; leaving it to one that can");
                return Ok(Outcome::Following { holder: None });
            }
        }
        if current.is_some() {
            self.absent_since = None;
        }
        // The share applies to free Leases (new, or released on a clean
        // shutdown); one whose holder stopped renewing is taken at once, so
        // a crashed replica's work moves within a lease duration, and so is
        // one handed over by a replica that cannot serve it.
        let yielded = current.as_ref().is_some_and(|l| {
            l.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(YIELDED_ANNOTATION))
                .is_some_and(|by| *by != self.config.identity)
        });
        let expired = held_by_other || yielded;
        let takeover = Takeover {
            from: match &current {
                Some(l) if held_by_other => l.spec.as_ref().and_then(|s| s.holder_identity.clone()),
                Some(l) => l.metadata.annotations.as_ref().and_then(|a| a.get(YIELDED_ANNOTATION)).cloned(),
                None => None,
            },
            how: match &current {
                None => Taken::Created,
                Some(_) if held_by_other => Taken::Expired,
                Some(_) if yielded => Taken::HandedOver,
                Some(_) => Taken::Released,
            },
        };
        // A slot of the share is taken before the write (and given back if
        // it fails), so electors of one replica racing for free Leases never
        // take more than the share between them.
        let slot = match &self.gate {
            Some(g) if expired => {
                g.acquired();
                true
            }
            Some(g) if g.try_acquire() => true,
            Some(_) => {
                debug!(lease = %self.config.lease(), "free, but this replica holds its share of leases; leaving it");
                return Ok(Outcome::Following { holder: None });
            }
            None => false,
        };
        let give_back = |gate: &Option<std::sync::Arc<Shards>>| {
            if let (true, Some(g)) = (slot, gate) {
                g.released();
            }
        };

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
            Some(mut lease) => {
                if let Some(a) = lease.metadata.annotations.as_mut() {
                    a.remove(YIELDED_ANNOTATION);
                }
                let lease = Lease { spec: Some(spec), ..lease };
                ("update", self.leases.update(&self.config.name, &lease).await)
            }
        };
        match written {
            Ok(written) => {
                if action == Action::Acquire {
                    info!(lease = %self.config.lease(), from = takeover.from.as_deref(), how = takeover.how.as_str(), "took over the lease");
                }
                self.took.send_replace(Some(takeover));
                Ok(self.wrote(written, renewed_at))
            }
            Err(e) if is_conflict(&e) => {
                give_back(&self.gate);
                debug!(lease = %self.config.lease(), "another replica wrote the lease first");
                Ok(Outcome::Following { holder: None })
            }
            Err(e) => {
                give_back(&self.gate);
                Err(self.api_error(verb, e))
            }
        }
    }

    pub(super) fn wrote(&mut self, written: Lease, renewed_at: Instant) -> Outcome {
        self.observed = Some(Observed { spec: written.spec.clone().unwrap_or_default(), at: renewed_at });
        self.held = Some(written);
        Outcome::Leading { renewed_at }
    }

    /// Hands the Lease over, if our last write still stands, so a standby
    /// need not wait for it to expire; `yielded` marks it as handed over
    /// ([`YIELDED_ANNOTATION`]: by a replica that cannot serve it or shuts
    /// down), so a standby takes it whatever its share.
    pub(super) async fn release(&mut self, yielded: bool) {
        let Some(mut held) = self.held.take() else {
            return;
        };
        let lease_name = self.config.lease();
        if yielded {
            held.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(YIELDED_ANNOTATION.to_string(), self.config.identity.clone());
        }
        let after = self.config.renew_deadline;
        let (leases, name, identity) = (&self.leases, &self.config.name, &self.config.identity);
        let released = async move {
            let lease = Lease { spec: Some(released_spec(held.spec.as_ref(), Timestamp::now())), ..held.clone() };
            match leases.update(name, &lease).await {
                // A renewal whose answer we never saw (cut short by the
                // shutdown) may have landed: still ours, it is released
                // as it now stands; another's, it is left alone.
                Err(e) if is_conflict(&e) => match leases.read(name).await? {
                    Some(now) if now.spec.as_ref().and_then(|s| s.holder_identity.as_ref()) == Some(identity) => {
                        let metadata = ObjectMeta { resource_version: now.metadata.resource_version, ..held.metadata };
                        let spec = released_spec(now.spec.as_ref(), Timestamp::now());
                        leases.update(name, &Lease { metadata, spec: Some(spec) }).await
                    }
                    _ => Err(e),
                },
                written => written,
            }
        };
        match tokio::time::timeout(after, released).await {
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

    pub(super) fn api_error(&self, action: &'static str, source: kube::Error) -> Error {
        Error::Api { action, lease: self.config.lease(), source }
    }

    pub(super) fn timeout(&self, after: Duration) -> Error {
        Error::Timeout { lease: self.config.lease(), after }
    }
}

/// A 409: someone wrote first (`Conflict`), or created first
/// (`AlreadyExists`). Either way we lost a race, which is no failure.
pub(super) fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// `error: cause: cause`, for one log line. Causes that a message already
/// quotes (kube's and hyper's often do) are not repeated.
pub(super) fn chain(error: &dyn StdError) -> String {
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
pub(super) struct Observed {
    pub(super) spec: LeaseSpec,
    /// When `spec` was first seen as it is. A Lease expires `leaseDuration`
    /// after this, never after its `renewTime`, which another machine's clock
    /// wrote.
    pub(super) at: Instant,
}

impl Observed {
    /// Keeps the old observation time while the record is unchanged; a change
    /// (a renewal, a new holder) restarts the clock.
    pub(super) fn update(previous: Option<Observed>, spec: LeaseSpec, now: Instant) -> Observed {
        match previous {
            Some(previous) if previous.spec == spec => previous,
            _ => Observed { spec, at: now },
        }
    }
}

/// What to do about the Lease as observed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Action {
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
pub(super) fn decide(observed: Option<&Observed>, identity: &str, fallback: Duration, now: Instant) -> Action {
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
pub(super) fn next_spec(action: &Action, current: Option<&LeaseSpec>, config: &Config, now: Timestamp) -> LeaseSpec {
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
pub(super) fn released_spec(current: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.cloned().unwrap_or_default()
    }
}
