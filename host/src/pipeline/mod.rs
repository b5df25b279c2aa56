//! The reconcile pipeline of a module: one user of the generic
//! [`controller`] machinery, whose reconcile is a guest call.
//!
//! For each parent key: finalizer → request from the cache → guest call
//! (with the shadow candidate, if any) → validate the whole outcome → apply
//! → what next (done, requeue-after, retry with backoff, stopped by the
//! sandbox, terminal).
//!
//! **Invariant: the pipeline never decides which version runs.** It runs
//! the version it is given ([`ModuleController::swap_module`],
//! [`ModuleController::set_candidate`]) and reports how a new version does
//! on probation ([`Notice`]); what is active, what is a candidate and what
//! was refused is decided by its owner (the Reconciler lifecycle).

mod budget;
mod call;
mod config;
mod handle;
mod host;
mod parent;
mod reader;
pub mod record;
mod request;
pub(crate) mod shadow;
pub mod synced;
mod triggers;

pub use budget::Ticket as GuestTicket;
pub use budget::{Budget, parse_cpu};
pub use config::{Config, Grants, ParentSelector, Probation, Protected, Scope};
pub use handle::SwapError;
pub use host::HostLimit;
pub use reader::CacheReader;

use crate::apply::{self, Applier, Policy};
use crate::cache::{Cache, CachedObject, Informer, ObjectKey, WatchKey};
use crate::contract::{Failed, Failure, Gvk, Manifest, Outcome};
use crate::controller::{self, Action, Context, Controller, Reconcile, Retry};
use crate::leader::Fence;
use crate::metrics::{ApplyOperation, GuestErrorKind, Metrics};
use crate::runtime::{CallError, Module};
use request::ReadSet;
pub use request::{MAX_RELATED_BYTES, RelatedTooLarge};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// A module's controller: the generic machinery around a [`Pipeline`].
pub type ModuleController = Controller<Pipeline>;

/// What a module's controller tells its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The version on probation failed more of its first reconciles than
    /// allowed. It keeps running until its owner replaces it.
    ProbationFailed {
        /// The digest that failed.
        digest: String,
        /// The failures that decided it.
        reason: String,
    },
    /// The version on probation passed its first reconciles.
    ProbationPassed {
        /// Its digest.
        digest: String,
    },
    /// A shadow candidate answered differently from the live version.
    ShadowDiffers {
        /// The object, and where the answers differ.
        sample: String,
    },
}

/// Why one reconcile of a parent failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The sandbox stopped the guest, or refused its answer.
    #[error("reconcile of {key} {source}")]
    Guest {
        /// The parent.
        key: ObjectKey,
        /// What the sandbox saw.
        #[source]
        source: CallError,
    },
    /// The guest failed, and asks to be retried.
    #[error("guest: {0}")]
    Transient(String),
    /// The guest failed, and asks not to be retried until the parent changes.
    #[error("guest: {0}")]
    Terminal(String),
    /// The outcome was refused, or writing it failed.
    #[error(transparent)]
    Apply(#[from] apply::Error),
    /// Adding or removing the finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] apply::Error),
    /// The parent's related objects pass what one request may carry; the
    /// guest is not called.
    #[error(transparent)]
    RelatedTooLarge(#[from] RelatedTooLarge),
}

impl Error {
    /// The HTTP status the API server answered a write with, if it did.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Apply(e) | Error::Finalizer(e) => e.status_code(),
            _ => None,
        }
    }
}

/// The first retry delay after the sandbox stopped a guest; it doubles per
/// failure of the parent, like any retry.
const SANDBOX_BACKOFF_BASE: Duration = Duration::from_secs(1);

/// One version of the module and what it reads.
#[derive(Clone)]
struct Version {
    module: Module,
    reads: Arc<ReadSet>,
}

/// The versions the pipeline calls.
struct Versions {
    /// What reconciles and writes.
    active: Version,
    /// Calls and failures of `active` while it is on probation.
    probation: Option<(u32, u32)>,
    /// A shadow candidate: called beside `active`, never applied.
    candidate: Option<Version>,
}

/// The reconcile of one module's controller.
pub struct Pipeline {
    name: String,
    versions: RwLock<Versions>,
    manifest: Arc<Manifest>,
    config: Config,
    policy: Policy,
    parents: Arc<Informer>,
    cache: Cache,
    applier: Applier,
    metrics: Arc<Metrics>,
    /// What the reconciles' guest calls may still spend (`None`: no limit).
    budget: Option<Arc<budget::Budget>>,
    /// What its admission and conversion calls may still spend: a budget
    /// of the same size, of their own, so that a flood of reviews (which
    /// anyone who reaches the webhook port may send) is refused without
    /// making the reconciles wait.
    admission_budget: Option<Arc<budget::Budget>>,
    /// When a reconcile last waited for a host-wide limit, and which.
    host_limited: Mutex<Option<(Instant, HostLimit)>>,
    /// Held while one of this controller's calls waits at the host's gate:
    /// the gate queues first come, first served, so a controller with 64
    /// workers would otherwise queue 64 calls ahead of every neighbour's.
    /// One waiting call per controller makes the gate take controllers in
    /// turn.
    at_gate: tokio::sync::Mutex<()>,
    /// Parents already warned about a requeue-after below the floor (one
    /// event per parent, not one per reconcile).
    warned_requeue: Mutex<HashSet<ObjectKey>>,
    notices: tokio::sync::broadcast::Sender<Notice>,
    shadow: shadow::Counters,
    /// Parents that left the selector holding the finalizer.
    leaving: parent::Leaving,
    /// Outbound HTTP its module may make (with no grants: every call is
    /// refused, naming the grant to add).
    egress: Arc<crate::egress::Policy>,
    /// The host's `Synced` condition on parents.
    synced: synced::Synced,
}

/// Build a module's controller and start (or join) the informers it needs,
/// so caches warm up even before this replica leads it. `client` makes its
/// writes; `events` records its events. With `probation`, the module starts
/// on probation (a new version replacing another).
pub fn build(
    module: Module,
    cache: &Cache,
    client: kube::Client,
    events: kube::Client,
    metrics: Arc<Metrics>,
    config: Config,
    probation: bool,
) -> ModuleController {
    let manifest = module.manifest().clone();
    let parents = cache.informer(WatchKey::new(manifest.for_kind.clone(), config.namespace.clone()));
    let reads = Arc::new(ReadSet::new(&manifest, &parents, cache, config.namespace.as_deref()));
    let name = config.name.clone().unwrap_or_else(|| manifest.name.clone());
    metrics.controller_started(&name, config.controller.max_concurrent_reconciles);
    let policy = Policy {
        controller: name.clone(),
        owns: manifest.owns.clone(),
        namespaces: config.grants.namespaces.clone(),
        cluster_scoped: config.grants.cluster_scoped,
        max_desired: config.max_desired,
        max_events: config.max_events,
    };
    let budget = budget::Budget::new(config.guest_cpu, config.guest_cpu_burst, module.limits().timeout).map(Arc::new);
    let admission_budget =
        budget::Budget::new(config.guest_cpu, config.guest_cpu_burst, module.limits().timeout).map(Arc::new);
    let leaving = parent::Leaving::default();
    let triggers = triggers::triggers(&config, &manifest, &parents, &reads, &leaving);
    let pipeline = Pipeline {
        synced: synced::Synced::new(config.synced, events.clone()),
        applier: Applier::new(client, events, &name, config.instance.clone()).with_event_budget(
            apply::events::Budget::for_controller(config.max_events, config.event_qps, config.event_burst),
            metrics.clone(),
            &name,
        ),
        name: name.clone(),
        versions: RwLock::new(Versions {
            active: Version { module, reads },
            probation: probation.then_some((0, 0)),
            candidate: None,
        }),
        manifest,
        policy,
        parents,
        cache: cache.clone(),
        metrics: metrics.clone(),
        budget,
        admission_budget,
        host_limited: Mutex::new(None),
        at_gate: tokio::sync::Mutex::new(()),
        warned_requeue: Mutex::new(HashSet::new()),
        notices: tokio::sync::broadcast::channel(64).0,
        shadow: shadow::Counters::default(),
        leaving,
        egress: Arc::new(crate::egress::Policy::new(
            name.clone(),
            config
                .egress
                .clone()
                .unwrap_or_else(|| Arc::new(crate::egress::Settings::none(config.egress_allowed.clone()))),
            metrics.clone(),
        )),
        config: config.clone(),
    };
    Controller::new(name, Arc::new(pipeline), triggers, config.controller, metrics)
}

impl Reconcile for Pipeline {
    type Key = ObjectKey;
    type Error = Error;

    fn reconcile(&self, key: &ObjectKey, ctx: &Context) -> impl Future<Output = Result<Action, Error>> + Send {
        async move {
            // The controller's own CPU budget, then the host's (every
            // controller's together).
            let mut tickets: Vec<budget::Ticket> = self.within_budget().await.into_iter().collect();
            tickets.extend(self.within_host_budget().await);
            let (active, candidate) = {
                let v = self.versions();
                (v.active.clone(), v.candidate.clone())
            };
            let span = tracing::info_span!("guest", digest = %active.module.info().digest);
            let result = self.reconcile_parent(&active, candidate, key, ctx, tickets).instrument(span).await;
            self.report_synced(key, &result, &ctx.fence).await;
            result
        }
    }

    fn informers(&self) -> Vec<Arc<Informer>> {
        let v = self.versions();
        let mut all = v.active.reads.informers();
        if let Some(c) = &v.candidate {
            all.extend(c.reads.informers());
        }
        all
    }

    fn error_policy(&self, error: &Error) -> Retry {
        match error {
            // A malformed or oversized answer is what this guest says for
            // this input: retrying the same input cannot help.
            Error::Guest { source: CallError::Malformed(_) | CallError::OutputTooLarge { .. }, .. } => Retry::Never,
            // An attempt that burned a whole deadline or filled its memory
            // will most likely do it again: back off from a second.
            Error::Guest { source: CallError::Timeout { .. } | CallError::MemoryExceeded { .. }, .. } => {
                Retry::BackoffFrom(SANDBOX_BACKOFF_BASE)
            }
            Error::Terminal(_) => Retry::Never,
            Error::Apply(e) if e.is_permanent() => Retry::Never,
            _ => Retry::Backoff,
        }
    }
}

impl Pipeline {
    fn versions(&self) -> std::sync::RwLockReadGuard<'_, Versions> {
        self.versions.read().unwrap_or_else(|p| p.into_inner())
    }

    fn versions_mut(&self) -> std::sync::RwLockWriteGuard<'_, Versions> {
        self.versions.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait while the guest calls' CPU budget is in debt; the admission
    /// to charge the call to (`None`: no budget).
    async fn within_budget(&self) -> Option<budget::Ticket> {
        let budget = self.budget.as_ref()?;
        loop {
            let quiet = !budget.throttled_within(Duration::from_secs(60));
            let wait = match budget.admit() {
                Ok(ticket) => return Some(ticket),
                Err(wait) => wait,
            };
            self.metrics.guest_throttled(&self.name, wait);
            if quiet {
                // Once per episode: a throttled controller is a slow or
                // looping guest, which its author needs to hear about, but
                // not on every reconcile.
                tracing::warn!(
                    controller = %self.name,
                    cpu = budget.cpu(),
                    "the guest's calls used more than their CPU budget of {} CPU; reconciles wait {wait:?}. \
                     Find the slow path (`operon test`, the guest call histogram) or raise the budget (spec.limits.cpu, --guest-cpu)",
                    budget.cpu()
                );
            }
            budget.wait(wait).await;
        }
    }

    async fn reconcile_parent(
        &self,
        active: &Version,
        candidate: Option<Version>,
        key: &ObjectKey,
        ctx: &Context,
        tickets: Vec<budget::Ticket>,
    ) -> Result<Action, Error> {
        let fence = &ctx.fence;
        if !self.config.scope.contains(key.namespace.as_deref()) {
            return Ok(Action::Done);
        }
        let Some(parent) = self.parents.store().get(key).cloned() else {
            // Deleted: Kubernetes garbage-collects the children.
            self.forget_leaving(key);
            return Ok(Action::Done);
        };
        // Outside the selector: another plugin's parent, not touched, or one
        // that left holding the finalizer, finalized as if deleted.
        let left = match &self.config.parent_selector {
            Some(selector) if !selector.matches(&parent) => {
                if !self.outside_selector(&parent, key, &active.module, fence).await? {
                    return Ok(Action::Done);
                }
                true
            }
            _ => {
                self.forget_leaving(key);
                false
            }
        };
        let finalizing = match &self.manifest.finalizer {
            _ if left => true,
            Some(f) if parent.is_deleting() => {
                if !parent.has_finalizer(f) {
                    return Ok(Action::Done);
                }
                true
            }
            Some(f) => {
                if parent::speaks_0_1(&active.module) && !parent.has_finalizer(f) {
                    self.applier.set_finalizer(&parent, f, true, fence).await.map_err(Error::Finalizer)?;
                }
                false
            }
            None if parent.is_deleting() => return Ok(Action::Done),
            None => false,
        };

        let children = active.reads.children(&parent);
        let rates = !parent::speaks_0_1(&active.module);
        let request = match active.reads.request(
            &parent,
            &children,
            finalizing,
            ctx.attempt,
            &self.config.scope,
            rates,
            self.config.max_related_bytes,
        ) {
            Ok(r) => r,
            Err(e) => {
                self.applier.event(&parent, true, "RelatedTooLarge", &e.to_string(), fence).await;
                return Err(e.into());
            }
        };
        let call = self.call_guest(active, candidate, key, &parent, request, finalizing, ctx, tickets).await?;
        let module = &active.module;
        let outcome = match call {
            Err(e) => {
                self.on_probation(module, Some(&e.to_string()));
                return Err(self.guest_error(&parent, key, e, fence).await);
            }
            Ok(Err(Failed { failure, status })) => {
                // The status the failure carries is written first, so the
                // parent tells the truth while the host backs off.
                if let Some(status) = &status {
                    match self.applier.status(&parent, status, fence).await {
                        Ok(written) => {
                            if written {
                                self.metrics.applied(&self.name, ApplyOperation::Status);
                            }
                        }
                        Err(apply::Error::NotLeading(e)) => {
                            tracing::info!("stopped writing: {e}");
                            return Ok(Action::Done);
                        }
                        Err(e) => tracing::warn!("the failure's status was not written: {e}"),
                    }
                }
                return Err(match failure {
                    Failure::Transient(m) => {
                        self.applier.event(&parent, true, "ReconcileFailed", &m, fence).await;
                        Error::Transient(m)
                    }
                    Failure::Terminal(m) => {
                        self.applier.event(&parent, true, "ReconcileTerminal", &m, fence).await;
                        Error::Terminal(m)
                    }
                });
            }
            Ok(Ok(outcome)) if left && outcome.finalized => parent::taken_back(outcome),
            Ok(Ok(outcome)) => outcome,
        };
        if let Err(e) = self.write(&parent, &active.reads, &children, &outcome, fence).await {
            if matches!(e, apply::Error::NotLeading(_)) {
                // Not an error of the parent: the next leader reconciles it.
                tracing::info!("stopped writing: {e}");
                return Ok(Action::Done);
            }
            let message = e.to_string();
            if e.is_permanent() {
                let reason = if matches!(e, apply::Error::Invalid(_)) { "InvalidOutcome" } else { "ApplyRefused" };
                if matches!(e, apply::Error::Invalid(_)) {
                    self.on_probation(module, Some(&message));
                }
                self.metrics.outcome_refused(&self.name);
                let note = format!("{message}; not retried until the object changes or the module is replaced");
                self.applier.event(&parent, true, reason, &note, fence).await;
            } else {
                self.applier.event(&parent, true, "ApplyFailed", &message, fence).await;
            }
            return Err(Error::Apply(e));
        }
        self.on_probation(module, None);
        if !finalizing {
            self.finalizer_released(&parent, &outcome, fence).await?;
        }
        if finalizing && outcome.finalized {
            if let Some(f) = &self.manifest.finalizer {
                self.applier.set_finalizer(&parent, f, false, fence).await.map_err(Error::Finalizer)?;
            }
            if left {
                self.forget_leaving(key);
                tracing::info!("finalized a parent that left the selector");
            }
            return Ok(Action::Done);
        }
        let asked = match outcome.requeue_after {
            Some(after) => Some(self.requeue_delay(&parent, key, after, fence).await),
            None => None,
        };
        Ok(next(asked, self.config.resync.map(crate::cache::jitter)))
    }

    /// Tell the parent how its reconcile ended (the `Synced` condition),
    /// if it is still one of this controller's parents.
    async fn report_synced(&self, key: &ObjectKey, result: &Result<Action, Error>, fence: &Fence) {
        if !self.config.scope.contains(key.namespace.as_deref()) {
            return;
        }
        let Some(parent) = self.parents.store().get(key).cloned() else { return };
        if self.config.parent_selector.as_ref().is_some_and(|s| !s.matches(&parent)) {
            return;
        }
        let want = synced::Want::of(result);
        self.synced.report(&self.applier, &self.manifest.for_kind, &parent, want, fence).await;
    }

    /// Count a call of `module` against its probation (`failure`: why it
    /// failed), and tell the owner once it passed or failed.
    fn on_probation(&self, module: &Module, failure: Option<&str>) {
        let Probation { calls: watched, max_failures } = self.config.probation;
        let mut v = self.versions_mut();
        if v.active.module.info().digest != module.info().digest {
            return; // swapped meanwhile: this call does not count for the new version
        }
        let Some((calls, failures)) = v.probation.as_mut() else { return };
        *calls += 1;
        if failure.is_some() {
            *failures += 1;
        }
        let (calls, failures) = (*calls, *failures);
        let digest = module.info().digest.clone();
        if failures > max_failures {
            v.probation = None;
            drop(v);
            let reason = format!(
                "{failures} of its first {calls} reconciles failed (more than the {max_failures} allowed); last: {}",
                failure.unwrap_or_default()
            );
            tracing::error!(controller = %self.name, %digest, "new version failed its probation: {reason}");
            let _ = self.notices.send(Notice::ProbationFailed { digest, reason });
        } else if calls >= watched {
            v.probation = None;
            drop(v);
            let _ = self.notices.send(Notice::ProbationPassed { digest });
        }
    }

    /// Compare the candidate's answer with the live one's.
    fn compare_shadow(
        &self,
        key: &ObjectKey,
        digest: &str,
        live: &Result<Result<Outcome, Failed>, CallError>,
        candidate: &Result<Result<Outcome, Failed>, CallError>,
    ) {
        let diff = shadow::differences(&shadow::answer(live), &shadow::answer(candidate), 6);
        let differing = self.shadow.record(diff.is_some());
        self.metrics.shadow_compared(&self.name, if diff.is_some() { "differ" } else { "same" });
        if let Some(diff) = diff {
            // The first difference, then one in a hundred: a sample, not a flood.
            if differing == 1 || differing.is_multiple_of(100) {
                let sample = format!("{key} (candidate {digest}): {diff}");
                tracing::info!(controller = %self.name, "shadow candidate differs: {sample}");
                let _ = self.notices.send(Notice::ShadowDiffers { sample });
            }
        }
    }

    /// The sandbox stopped the guest: count it, tell the parent.
    async fn guest_error(&self, parent: &CachedObject, key: &ObjectKey, e: CallError, fence: &Fence) -> Error {
        let kind = GuestErrorKind::from(&e);
        self.metrics.guest_failed(&self.name, kind);
        match kind {
            GuestErrorKind::Trap => self.metrics.reconcile_panicked(&self.name),
            GuestErrorKind::Timeout => self.metrics.reconcile_timed_out(&self.name),
            _ => {}
        }
        let error = Error::Guest { key: key.clone(), source: e };
        let message = error.to_string();
        if matches!(kind, GuestErrorKind::Malformed | GuestErrorKind::Oversized) {
            self.metrics.outcome_refused(&self.name);
            let note = format!("{message}; not retried until the object changes or the module is replaced");
            self.applier.event(parent, true, "InvalidOutcome", &note, fence).await;
        } else {
            self.applier.event(parent, true, "ReconcileError", &message, fence).await;
        }
        error
    }

    /// The requeue-after to honour: at least the floor. A guest asking for
    /// less is told once per parent.
    async fn requeue_delay(&self, parent: &CachedObject, key: &ObjectKey, asked: Duration, fence: &Fence) -> Duration {
        let floor = self.config.requeue_floor;
        if asked >= floor {
            return asked;
        }
        self.metrics.requeue_raised(&self.name);
        let first = {
            let mut warned = self.warned_requeue.lock().unwrap_or_else(|p| p.into_inner());
            if warned.len() > 10_000 {
                warned.clear();
            }
            warned.insert(key.clone())
        };
        if first {
            let message = format!(
                "the guest asked to requeue after {}ms; raised to the host's floor of {}ms (a shorter delay is a hot loop)",
                asked.as_millis(),
                floor.as_millis()
            );
            tracing::warn!(object = %key, "{message}");
            self.applier.event(parent, true, "RequeueTooSoon", &message, fence).await;
        }
        floor
    }

    async fn write(
        &self,
        parent: &CachedObject,
        reads: &ReadSet,
        existing: &[(Gvk, Arc<CachedObject>)],
        outcome: &Outcome,
        fence: &Fence,
    ) -> Result<(), apply::Error> {
        let scopes = self.applier.scopes(&self.manifest.owns).await?;
        let children = apply::validate(&self.policy, parent, outcome, |k| scopes.get(k).copied().unwrap_or(true))?;
        for child in &children {
            if let Some(why) = self.config.protected.why(&child.kind, &child.key) {
                return Err(crate::contract::rules::Refused(format!(
                    "{} {} may not be written by any plugin: {why}",
                    child.kind.kind, child.key
                ))
                .into());
            }
        }
        apply::check_ownership(parent, &children, self.config.grants.adopt, |kind, key| reads.owned_object(kind, key))?;
        if let Some(meta) = &outcome.parent_metadata {
            parent::check_metadata(meta, self.config.parent_selector.as_ref())?;
        }
        self.finalizer_asked(parent, outcome, fence).await?;
        if let Some(meta) = &outcome.parent_metadata {
            if self.applier.parent_metadata(parent, meta, fence).await? {
                self.metrics.applied(&self.name, ApplyOperation::Apply);
            }
        }
        let strategy = |kind: &Gvk| self.manifest.update_strategy(kind);
        let report =
            self.applier.apply(parent, &children, existing, outcome, self.config.grants.adopt, strategy, fence).await?;
        for _ in 0..report.applied {
            self.metrics.applied(&self.name, ApplyOperation::Apply);
        }
        for _ in 0..report.deleted + report.recreated {
            self.metrics.applied(&self.name, ApplyOperation::Delete);
        }
        if report.status_written {
            self.metrics.applied(&self.name, ApplyOperation::Status);
        }
        tracing::debug!(
            applied = report.applied,
            unchanged = report.unchanged,
            deleted = report.deleted,
            status = report.status_written,
            "reconciled"
        );
        Ok(())
    }
}

#[doc(hidden)]
pub use controller::Error as ControllerError;

/// When to reconcile a parent again after a successful reconcile: when the
/// guest asked (`asked`, after the host's floor and budget), or after the
/// resync period, whichever comes first; otherwise when something changes.
fn next(asked: Option<Duration>, resync: Option<Duration>) -> Action {
    match (asked, resync) {
        (Some(a), Some(r)) => Action::RequeueAfter(a.min(r)),
        (Some(after), None) | (None, Some(after)) => Action::RequeueAfter(after),
        (None, None) => Action::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_reconcile_should_be_the_sooner_of_the_guests_requeue_and_the_resync() {
        let s = Duration::from_secs;
        assert_eq!(next(None, None), Action::Done);
        assert_eq!(next(Some(s(5)), None), Action::RequeueAfter(s(5)));
        assert_eq!(next(None, Some(s(60))), Action::RequeueAfter(s(60)));
        assert_eq!(next(Some(s(5)), Some(s(60))), Action::RequeueAfter(s(5)));
        assert_eq!(next(Some(s(600)), Some(s(60))), Action::RequeueAfter(s(60)));
    }
}
