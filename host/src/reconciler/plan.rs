//! The lifecycle of one Reconciler as a pure function: from what is known
//! about it — its spec, what its source holds, which module versions are
//! loaded, what was decided before (the durable record in its status) and
//! what runs in this process — to what should run, what to record, which
//! events to tell and what the status says.
//!
//! Every decision of the lifecycle is made here and nowhere else: load,
//! swap on probation, start or stop a shadow, promote, roll back, refuse,
//! re-grant, stop, clean up. The executor (`lifecycle.rs`) only observes and
//! carries the plan out, so each decision is a row of the table test at the
//! bottom of this file.
//!
//! **Invariant: a refused digest never serves again** (until an
//! administrator asks for a retry), on any replica: refusals are durable.
//! **Invariant: a spec change always takes effect**: nothing about the
//! source (pending, unavailable, refused) short-circuits grants, scope,
//! limits, pause or admission.

use super::status::{Reason, Want};
use std::collections::BTreeMap;

/// The spec, as far as the plan needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// The spec cannot be acted on (the message says which field).
    Invalid(String),
    /// A spec the host can act on.
    Valid {
        /// `spec.paused`.
        paused: bool,
        /// `spec.rollout: shadow`.
        shadow: bool,
        /// Whether `spec.admission` asks for webhooks.
        admission: bool,
        /// Whether this host serves webhooks at all.
        webhooks_served: bool,
    },
}

/// What the module source holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Not fetched yet.
    Pending,
    /// Could not be fetched (retried with backoff).
    Unavailable(String),
    /// Will not be fetched until the spec changes (a digest mismatch, a
    /// refused URL or path).
    Refused(String),
    /// Fetched, but not signed as `spec.module.verify` or the host
    /// requires (nothing of it was loaded).
    Untrusted(String),
    /// These bytes.
    Holds(String),
}

/// What is known of one loaded module version, checked against the
/// current spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Its digest.
    pub digest: String,
    /// Why the current grants (or placement) do not allow it, if they do not.
    pub forbidden: Option<String>,
    /// The older Reconciler that already reconciles its kind in the same
    /// namespaces, if one does (it may not serve meanwhile).
    pub overlaps: Option<String>,
    /// Why its signature is not known good under the keys now required
    /// (they changed since it loaded, or it was restored from this host's
    /// store), if so: it may not serve until verified again.
    pub untrusted: Option<String>,
    /// Whether it exports `validate`/`mutate`.
    pub admission: bool,
}

impl Module {
    /// Why it may not serve now (not for good: the grants or the other
    /// Reconciler may change), if so.
    pub fn blocked(&self) -> Option<(Reason, &String)> {
        match (&self.untrusted, &self.forbidden, &self.overlaps) {
            (Some(why), _, _) => Some((Reason::UntrustedModule, why)),
            (None, Some(why), _) => Some((Reason::Forbidden, why)),
            (None, None, Some(why)) => Some((Reason::Overlaps, why)),
            (None, None, None) => None,
        }
    }
}

/// The load of the source's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Load {
    /// Not asked for.
    Idle,
    /// Under way.
    Loading,
    /// Loaded (also in [`Inputs::modules`]).
    Loaded,
    /// Failed for a reason that the same bytes will always have.
    Failed {
        /// The condition reason.
        reason: Reason,
        /// What went wrong and what to do.
        message: String,
    },
}

/// Loading a version back from this host's own store (a rollback after a
/// restart, when only the digest is known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restore {
    /// Not asked for, or done (then in [`Inputs::modules`]).
    Idle,
    /// Under way.
    Loading,
    /// This replica does not have it.
    Unavailable,
}

/// One refusal in the durable record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The digest refused.
    pub digest: String,
    /// Why, as a condition reason.
    pub reason: Reason,
    /// What happened.
    pub message: String,
}

/// What was decided before, by this or another replica: the Reconciler's
/// status (merged with what this replica decided but has not seen written
/// back yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Durable {
    /// Digests that never serve again.
    pub refused: Vec<Refusal>,
    /// Where a rollback goes.
    pub last_good: Option<String>,
    /// A version on probation, and the one it replaced.
    pub probation: Option<(String, Option<String>)>,
}

impl Durable {
    /// The refusal of `digest`, if it is refused.
    pub fn refusal(&self, digest: &str) -> Option<&Refusal> {
        self.refused.iter().find(|r| r.digest == digest)
    }
}

/// What runs in this process for the Reconciler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// The digest its controller runs, if a controller runs.
    pub serving: Option<String>,
    /// The shadow candidate's digest.
    pub candidate: Option<String>,
    /// Whether its webhooks are registered.
    pub admission: bool,
    /// The last problem the status reported (so a problem is told once).
    pub problem: Option<(Reason, String)>,
    /// The running controller was built with other settings than the spec
    /// asks for now (grants, scope, limits, ServiceAccount, selector).
    pub settings_changed: bool,
}

/// Everything the plan looks at.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// The spec.
    pub spec: &'a Spec,
    /// The Reconciler is being deleted.
    pub deleting: bool,
    /// What the source holds.
    pub source: &'a Source,
    /// The load of the source's digest.
    pub load: &'a Load,
    /// Module versions loaded in this process, by digest.
    pub modules: &'a BTreeMap<String, Module>,
    /// Versions being restored from this host's store, by digest.
    pub restores: &'a BTreeMap<String, Restore>,
    /// What was decided before.
    pub durable: &'a Durable,
    /// What runs here now.
    pub live: &'a Live,
}

/// What should run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serve {
    /// The version.
    pub digest: String,
    /// Whether it is new and its first reconciles are watched.
    pub probation: bool,
}

/// A change to the durable record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Never serve this digest again.
    Refuse(Refusal),
    /// This version is on probation, replacing that one.
    Probation {
        /// The new version.
        digest: String,
        /// The version it replaced.
        previous: Option<String>,
    },
    /// No version is on probation any more.
    EndProbation,
    /// This version is good: rollbacks go here.
    LastGood(String),
}

/// An event to record on the Reconciler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Warning or Normal.
    pub warning: bool,
    /// The reason (CamelCase).
    pub reason: &'static str,
    /// The note.
    pub message: String,
}

/// The plan: what should be, and what to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The version the controller should run (`None`: no controller).
    pub serve: Option<Serve>,
    /// The shadow candidate to run beside it.
    pub candidate: Option<String>,
    /// Whether the webhooks should be registered.
    pub admission: bool,
    /// Load the source's bytes (this digest).
    pub load: Option<String>,
    /// Load this digest back from this host's store.
    pub restore: Option<String>,
    /// Changes to the durable record.
    pub records: Vec<Record>,
    /// Events to record.
    pub events: Vec<Event>,
    /// The `Ready` condition.
    pub ready: Want,
    /// A problem for `Degraded` while a version serves (`None`: health
    /// decides).
    pub degraded: Option<Want>,
    /// The problem as reported (for [`Live::problem`]).
    pub problem: Option<(Reason, String)>,
    /// Release what the Reconciler holds (finalizers on its parents, its
    /// Lease): it is being deleted.
    pub clean_up: bool,
}

impl Plan {
    fn idle(ready: Want) -> Plan {
        Plan {
            serve: None,
            candidate: None,
            admission: false,
            load: None,
            restore: None,
            records: Vec::new(),
            events: Vec::new(),
            ready,
            degraded: None,
            problem: None,
            clean_up: false,
        }
    }
}

/// The event of a version that keeps serving under a changed spec.
fn reconfigured(digest: &str) -> Event {
    Event {
        warning: false,
        reason: "ControllerReconfigured",
        message: format!("{} serves with the new spec (grants, scope, limits or ServiceAccount)", short(digest)),
    }
}

/// The first 12 hex digits of a digest.
pub fn short(digest: &str) -> String {
    digest.trim_start_matches("sha256:").chars().take(12).collect()
}

/// Decide.
pub fn plan(i: &Inputs<'_>) -> Plan {
    let restore = |d: &str| i.restores.get(d).cloned().unwrap_or(Restore::Idle);
    if i.deleting {
        let mut p = Plan::idle(Want::no(Reason::Deleting, "the Reconciler is being deleted: its controller stopped"));
        p.clean_up = true;
        return p;
    }
    let (paused, shadow, admission, webhooks_served) = match i.spec {
        Spec::Invalid(message) => {
            let mut p = Plan::idle(Want::no(Reason::InvalidSpec, message.clone()));
            p.problem = Some((Reason::InvalidSpec, message.clone()));
            return p;
        }
        Spec::Valid { paused, shadow, admission, webhooks_served } => (*paused, *shadow, *admission, *webhooks_served),
    };
    let mut p = Plan::idle(Want::no(Reason::Loading, "the module is being fetched and loaded"));

    // 1. What the source offers, if it may serve.
    let mut problem: Option<(Reason, String)> = None;
    let offered: Option<&Module> = match i.source {
        Source::Pending => None,
        Source::Unavailable(m) | Source::Refused(m) => {
            problem = Some((Reason::SourceUnavailable, m.clone()));
            None
        }
        Source::Untrusted(m) => {
            problem = Some((Reason::UntrustedModule, m.clone()));
            None
        }
        Source::Holds(digest) => match i.durable.refusal(digest) {
            Some(r) => {
                problem = Some((r.reason, r.message.clone()));
                None
            }
            None => match (i.load, i.modules.get(digest)) {
                (_, Some(m)) => match m.blocked() {
                    Some((reason, why)) => {
                        problem = Some((reason, why.clone()));
                        None
                    }
                    None => Some(m),
                },
                (Load::Failed { reason, message }, None) => {
                    if reason.is_durable() {
                        p.records.push(Record::Refuse(Refusal {
                            digest: digest.clone(),
                            reason: *reason,
                            message: message.clone(),
                        }));
                    }
                    problem = Some((*reason, message.clone()));
                    None
                }
                (Load::Idle, None) => {
                    p.load = Some(digest.clone());
                    None
                }
                (Load::Loading | Load::Loaded, None) => None,
            },
        },
    };

    // 2. Which version serves.
    let current = i.live.serving.as_ref().and_then(|d| i.modules.get(d));
    let serving_ok = |m: &Module| i.durable.refusal(&m.digest).is_none() && m.blocked().is_none();
    let resumed_probation = |digest: &str| i.durable.probation.as_ref().is_some_and(|(d, _)| d == digest);
    match (current, offered) {
        (Some(c), Some(o)) if c.digest == o.digest => {
            p.serve = Some(Serve { digest: c.digest.clone(), probation: false });
            if i.live.settings_changed {
                p.events.push(reconfigured(&c.digest));
            }
        }
        (Some(c), Some(o)) if serving_ok(c) && shadow => {
            p.serve = Some(Serve { digest: c.digest.clone(), probation: false });
            p.candidate = Some(o.digest.clone());
            if i.live.candidate.as_deref() != Some(o.digest.as_str()) {
                p.events.push(Event {
                    warning: false,
                    reason: "ShadowStarted",
                    message: format!(
                        "{} runs beside the live {} without writing; set spec.rollout: immediate to promote it",
                        short(&o.digest),
                        short(&c.digest)
                    ),
                });
            }
        }
        (Some(c), Some(o)) => {
            // A new version: swapped in on probation (a promoted shadow too).
            p.serve = Some(Serve { digest: o.digest.clone(), probation: true });
            let previous = if serving_ok(c) { Some(c.digest.clone()) } else { i.durable.last_good.clone() };
            p.records.push(Record::Probation { digest: o.digest.clone(), previous });
            let promoted = i.live.candidate.as_deref() == Some(o.digest.as_str());
            p.events.push(Event {
                warning: false,
                reason: if promoted { "ShadowPromoted" } else { "ModuleSwapped" },
                message: format!("{} → {}; on probation for its first reconciles", short(&c.digest), short(&o.digest)),
            });
        }
        (None, Some(o)) => {
            // A first load, a restart, or a version allowed again.
            match (&i.durable.last_good, shadow) {
                (Some(good), true) if *good != o.digest && i.durable.refusal(good).is_none() => {
                    // Restarted while shadowing: the good version serves,
                    // the candidate runs beside it.
                    match (i.modules.get(good), restore(good)) {
                        (Some(g), _) if g.blocked().is_none() => {
                            p.serve = Some(Serve { digest: g.digest.clone(), probation: false });
                            p.candidate = Some(o.digest.clone());
                        }
                        (Some(_), _) | (None, Restore::Unavailable) => {
                            p.serve = Some(Serve { digest: o.digest.clone(), probation: false });
                        }
                        (None, Restore::Idle) => p.restore = Some(good.clone()),
                        (None, Restore::Loading) => {}
                    }
                }
                _ => {
                    let probation = resumed_probation(&o.digest);
                    p.serve = Some(Serve { digest: o.digest.clone(), probation });
                    if probation
                        && let Some((_, Some(prev))) = &i.durable.probation
                        && !i.modules.contains_key(prev)
                        && restore(prev) == Restore::Idle
                    {
                        // Resumed probation: have its fallback at hand.
                        p.restore = Some(prev.clone());
                    }
                    if !probation && i.durable.last_good.as_deref() != Some(o.digest.as_str()) {
                        p.records.push(Record::LastGood(o.digest.clone()));
                    }
                    p.events.push(Event {
                        warning: false,
                        reason: "ModuleLoaded",
                        message: format!(
                            "{} serves{}",
                            short(&o.digest),
                            if probation { " (still on probation)" } else { "" }
                        ),
                    });
                }
            }
        }
        (Some(c), None) if serving_ok(c) => {
            // The source offers nothing new that may serve: the running
            // version keeps serving, with the spec as it is now.
            p.serve = Some(Serve { digest: c.digest.clone(), probation: false });
            if i.live.settings_changed {
                p.events.push(reconfigured(&c.digest));
            }
        }
        (Some(c), None) => {
            // The running version may not serve any more: refused (it
            // failed its probation) or forbidden (grants narrowed).
            let refusal = i.durable.refusal(&c.digest);
            if let Some(r) = refusal {
                problem = Some((r.reason, r.message.clone()));
            } else if let Some((reason, why)) = c.blocked() {
                problem = Some((reason, why.clone()));
            }
            if refusal.is_some() {
                let fallback = i
                    .durable
                    .probation
                    .as_ref()
                    .filter(|(d, _)| *d == c.digest)
                    .and_then(|(_, prev)| prev.clone())
                    .or_else(|| i.durable.last_good.clone())
                    .filter(|d| *d != c.digest && i.durable.refusal(d).is_none());
                match fallback {
                    Some(f) => match (i.modules.get(&f), restore(&f)) {
                        (Some(m), _) if m.blocked().is_none() => {
                            p.serve = Some(Serve { digest: f.clone(), probation: false });
                            p.events.push(Event {
                                warning: true,
                                reason: "RolledBack",
                                message: format!(
                                    "{} was rolled back to {}: {}",
                                    short(&c.digest),
                                    short(&f),
                                    refusal.map(|r| r.message.as_str()).unwrap_or_default()
                                ),
                            });
                        }
                        (None, Restore::Idle) => p.restore = Some(f.clone()),
                        (None, Restore::Loading) => {
                            // Keep the refused version until its fallback is
                            // loaded (a moment): stopping now would leave no
                            // controller and no webhooks in between.
                            p.serve = Some(Serve { digest: c.digest.clone(), probation: false });
                        }
                        _ => {
                            problem = Some((
                                Reason::RolledBack,
                                format!(
                                    "{}; the version to roll back to ({}) is not available on this replica: publish a fixed version",
                                    refusal.map(|r| r.message.as_str()).unwrap_or_default(),
                                    short(&f)
                                ),
                            ));
                        }
                    },
                    None => {
                        problem = Some((
                            refusal.map_or(Reason::RolledBack, |r| r.reason),
                            format!(
                                "{}; there is no earlier version to roll back to: publish a fixed version",
                                refusal.map(|r| r.message.as_str()).unwrap_or_default()
                            ),
                        ));
                    }
                }
            }
        }
        (None, None) => {
            // Nothing serves and the source offers nothing that may (a
            // restart with a refused or forbidden version at the source, or
            // the source gone): the last good version serves, if this
            // replica has it.
            let good = i.durable.last_good.as_ref().filter(|g| i.durable.refusal(g).is_none());
            if let (Some(_), Some(good)) = (&problem, good) {
                match (i.modules.get(good), restore(good)) {
                    (Some(m), _) if m.blocked().is_none() => {
                        p.serve = Some(Serve { digest: good.clone(), probation: false });
                    }
                    (None, Restore::Idle) => p.restore = Some(good.clone()),
                    _ => {}
                }
            }
        }
    }
    if let (Some(s), Some(c)) = (&p.serve, &p.candidate)
        && s.digest == *c
    {
        p.candidate = None;
    }
    let on_probation = i.durable.probation.as_ref().map(|(d, _)| d);
    if on_probation.is_some()
        && !p.records.iter().any(|r| matches!(r, Record::Probation { .. }))
        && p.serve.as_ref().is_some_and(|s| Some(&s.digest) != on_probation)
    {
        p.records.push(Record::EndProbation);
    }

    // 3. Paused: everything stays loaded, nothing runs.
    if paused {
        p.serve = None;
        p.candidate = None;
        p.ready = Want::no(Reason::Paused, "spec.paused is true: nothing is reconciled; set it to false to resume");
        p.problem = problem;
        return p;
    }

    // 4. Admission follows what serves (a rollback to a version without
    // webhooks removes them).
    if let Some(s) = &p.serve
        && admission
    {
        let exported = i.modules.get(&s.digest).is_some_and(|m| m.admission);
        match (webhooks_served, exported) {
            (true, true) => p.admission = true,
            (false, _) => p.events.push(Event {
                warning: true,
                reason: "AdmissionNotServed",
                message: "spec.admission is set, but this host serves no webhooks: start `operon run` with \
                          --webhook-bind-address (the Helm chart and deploy/operon.yaml do)"
                    .into(),
            }),
            (true, false) => p.events.push(Event {
                warning: true,
                reason: "AdmissionNotExported",
                message: format!(
                    "spec.admission is set, but module {} does not export operon:reconciler/admission: build it \
                     for the reconciler-with-admission world, or remove spec.admission",
                    short(&s.digest)
                ),
            }),
        }
    }

    // 5. What the status and events say.
    if let Some((reason, message)) = &problem
        && i.live.problem.as_ref() != Some(&(*reason, message.clone()))
        && !p.records.iter().any(|r| matches!(r, Record::Refuse(_)))
        && reason.warns()
    {
        p.events.push(Event { warning: true, reason: reason.as_str(), message: message.clone() });
    }
    for r in &p.records {
        if let Record::Refuse(refusal) = r {
            p.events.push(Event { warning: true, reason: refusal.reason.as_str(), message: refusal.message.clone() });
        }
    }
    match (&p.serve, &problem) {
        (Some(s), Some((reason, message))) => {
            p.ready = Want::yes(Reason::Loaded, format!("{} serves", short(&s.digest)));
            p.degraded = Some(Want::yes(*reason, format!("{message}; {} keeps serving", short(&s.digest))));
        }
        (Some(s), None) => {
            let reason = if s.probation || i.durable.probation.as_ref().is_some_and(|(d, _)| *d == s.digest) {
                Reason::Swapped
            } else {
                Reason::Loaded
            };
            p.ready = Want::yes(reason, format!("{} serves", short(&s.digest)));
        }
        (None, Some((reason, message))) => p.ready = Want::no(*reason, message.clone()),
        (None, None) => {}
    }
    p.problem = problem;
    p
}

#[cfg(test)]
mod tests;
