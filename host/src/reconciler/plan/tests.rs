//! The lifecycle as a table: every row is a situation a Reconciler can be
//! in, and what the plan says to do about it. Rows named `defect_*` are the
//! lifecycle defects the review found (issue: the top floor rebuilt).

use super::*;

const P: &str = "sha256:pppppppppppppppp";
const X: &str = "sha256:xxxxxxxxxxxxxxxx";
const Y: &str = "sha256:yyyyyyyyyyyyyyyy";

/// A situation, built up row by row.
#[derive(Clone)]
struct Case {
    spec: Spec,
    deleting: bool,
    source: Source,
    load: Load,
    modules: BTreeMap<String, Module>,
    restores: BTreeMap<String, Restore>,
    durable: Durable,
    live: Live,
}

fn valid() -> Spec {
    Spec::Valid { paused: false, shadow: false, admission: false, webhooks_served: true }
}

fn module(digest: &str) -> Module {
    Module { digest: digest.into(), forbidden: None, overlaps: None, untrusted: None, admission: false }
}

impl Case {
    fn new() -> Case {
        Case {
            spec: valid(),
            deleting: false,
            source: Source::Pending,
            load: Load::Idle,
            modules: BTreeMap::new(),
            restores: BTreeMap::new(),
            durable: Durable::default(),
            live: Live::default(),
        }
    }

    /// `digest` is loaded here.
    fn loaded(mut self, digest: &str) -> Case {
        self.modules.insert(digest.into(), module(digest));
        self
    }

    /// The source holds `digest`.
    fn source(mut self, digest: &str) -> Case {
        self.source = Source::Holds(digest.into());
        self
    }

    /// The controller runs `digest`.
    fn serving(mut self, digest: &str) -> Case {
        self.live.serving = Some(digest.into());
        self.loaded(digest)
    }

    fn refused(mut self, digest: &str, reason: Reason) -> Case {
        self.durable.refused.push(Refusal {
            digest: digest.into(),
            reason,
            message: format!("{} refused", short(digest)),
        });
        self
    }

    fn shadow(mut self) -> Case {
        if let Spec::Valid { shadow, .. } = &mut self.spec {
            *shadow = true;
        }
        self
    }

    fn admission(mut self) -> Case {
        if let Spec::Valid { admission, .. } = &mut self.spec {
            *admission = true;
        }
        self
    }

    fn forbidden(mut self, digest: &str, why: &str) -> Case {
        self.modules.get_mut(digest).expect("loaded first").forbidden = Some(why.into());
        self
    }

    fn untrusted(mut self, digest: &str, why: &str) -> Case {
        self.modules.get_mut(digest).expect("loaded first").untrusted = Some(why.into());
        self
    }

    fn overlaps(mut self, digest: &str, other: &str) -> Case {
        self.modules.get_mut(digest).expect("loaded first").overlaps = Some(other.into());
        self
    }

    fn plan(&self) -> Plan {
        plan(&Inputs {
            spec: &self.spec,
            deleting: self.deleting,
            source: &self.source,
            load: &self.load,
            modules: &self.modules,
            restores: &self.restores,
            durable: &self.durable,
            live: &self.live,
        })
    }
}

fn serves(p: &Plan) -> Option<(&str, bool)> {
    p.serve.as_ref().map(|s| (s.digest.as_str(), s.probation))
}

fn event<'a>(p: &'a Plan, reason: &str) -> Option<&'a Event> {
    p.events.iter().find(|e| e.reason == reason)
}

#[test]
fn first_load_asks_for_the_bytes_then_serves_them_as_the_last_good_version() {
    let fetched = Case::new().source(X);
    let p = fetched.plan();
    assert_eq!((p.load.as_deref(), p.serve.as_ref()), (Some(X), None), "load what the source holds");
    assert_eq!(p.ready.reason, Reason::Loading);
    let p = fetched.loaded(X).plan();
    assert_eq!(serves(&p), Some((X, false)), "a first version is not on probation: nothing to roll back to");
    assert!(p.records.contains(&Record::LastGood(X.into())));
    assert!(event(&p, "ModuleLoaded").is_some());
    assert_eq!((p.ready.status, p.ready.reason), (true, Reason::Loaded));
}

#[test]
fn a_new_version_is_swapped_in_on_probation_with_the_old_one_to_go_back_to() {
    let p = Case::new().serving(P).source(X).loaded(X).plan();
    assert_eq!(serves(&p), Some((X, true)));
    assert!(p.records.contains(&Record::Probation { digest: X.into(), previous: Some(P.into()) }));
    assert!(event(&p, "ModuleSwapped").is_some());
    assert_eq!(p.ready.reason, Reason::Swapped);
}

#[test]
fn a_version_that_fails_to_load_is_refused_for_good_and_the_old_one_keeps_serving() {
    let mut c = Case::new().serving(P).source(X);
    c.load = Load::Failed { reason: Reason::InvalidModule, message: "not a component".into() };
    let p = c.plan();
    assert_eq!(serves(&p), Some((P, false)));
    assert!(matches!(&p.records[..], [Record::Refuse(r)] if r.digest == X && r.reason == Reason::InvalidModule));
    assert!(event(&p, "InvalidModule").is_some(), "told once, as it is recorded");
    let degraded = p.degraded.expect("degraded while the old version serves");
    assert_eq!((degraded.reason, p.ready.status), (Reason::InvalidModule, true));
    // Recorded: the next look neither loads it again nor tells it again.
    let mut again = Case::new().serving(P).source(X).refused(X, Reason::InvalidModule);
    again.live.problem = Some((Reason::InvalidModule, format!("{} refused", short(X))));
    let p = again.plan();
    assert_eq!((p.load.as_deref(), serves(&p)), (None, Some((P, false))));
    assert!(p.events.is_empty(), "{:?}", p.events);
}

#[test]
fn a_load_failure_that_depends_on_the_limits_is_not_recorded() {
    let mut c = Case::new().serving(P).source(X);
    c.load = Load::Failed { reason: Reason::InvalidSpec, message: "memory limit exceeds the host's".into() };
    let p = c.plan();
    assert!(p.records.is_empty(), "raising the limit must let the same bytes load");
    assert_eq!(serves(&p), Some((P, false)));
}

#[test]
fn a_trap_storm_rolls_back_to_the_previous_version() {
    // The controller reported the probation failed: the refusal is in the
    // durable record, the source still holds the bad bytes.
    let mut c = Case::new().serving(X).loaded(P).source(X).refused(X, Reason::RolledBack);
    c.durable.probation = Some((X.into(), Some(P.into())));
    let p = c.plan();
    assert_eq!(serves(&p), Some((P, false)));
    assert!(event(&p, "RolledBack").is_some());
    assert!(p.records.contains(&Record::EndProbation));
    let degraded = p.degraded.expect("degraded: the source holds a refused version");
    assert_eq!(degraded.reason, Reason::RolledBack);
}

#[test]
fn shadow_starts_beside_the_live_version_and_promotion_swaps_it_in() {
    let c = Case::new().serving(P).source(X).loaded(X).shadow();
    let p = c.plan();
    assert_eq!((serves(&p), p.candidate.as_deref()), (Some((P, false)), Some(X)));
    assert!(event(&p, "ShadowStarted").is_some());
    assert!(p.records.is_empty(), "a shadow is not a swap");
    // Differences are counted by the controller; the plan keeps shadowing.
    let mut shadowing = c.clone();
    shadowing.live.candidate = Some(X.into());
    let p = shadowing.plan();
    assert_eq!(p.candidate.as_deref(), Some(X));
    assert!(event(&p, "ShadowStarted").is_none(), "told once");
    // Promote: rollout back to immediate.
    let mut promoted = shadowing.clone();
    promoted.spec = valid();
    let p = promoted.plan();
    assert_eq!((serves(&p), p.candidate.as_deref()), (Some((X, true)), None));
    assert!(event(&p, "ShadowPromoted").is_some());
}

#[test]
fn narrowed_grants_stop_a_running_version_and_widened_ones_start_it() {
    let narrowed = Case::new().serving(P).source(P).forbidden(P, "owns v1 Secret (spec.grants.owns)");
    let p = narrowed.plan();
    assert_eq!(p.serve, None, "revocation takes effect at once");
    assert_eq!((p.ready.status, p.ready.reason), (false, Reason::Forbidden));
    assert!(event(&p, "Forbidden").is_some());
    let widened = Case::new().source(P).loaded(P);
    assert_eq!(serves(&widened.plan()), Some((P, false)));
}

#[test]
fn an_unsigned_first_version_never_serves_and_is_not_refused_for_good() {
    let why = "module m is not signed: no signature at r/m:sha256-x.sig";
    let mut c = Case::new();
    c.source = Source::Untrusted(why.into());
    let p = c.plan();
    assert_eq!((p.serve.as_ref(), p.load.as_ref()), (None, None), "nothing of it is loaded");
    assert_eq!((p.ready.status, p.ready.reason), (false, Reason::UntrustedModule));
    assert!(p.ready.message.contains("not signed"), "{}", p.ready.message);
    assert!(event(&p, "UntrustedModule").is_some_and(|e| e.warning), "a Warning event says so");
    assert!(p.records.is_empty(), "a signature may be published later: no durable refusal, {:?}", p.records);
}

#[test]
fn an_untrusted_new_version_leaves_the_verified_one_serving() {
    let mut c = Case::new().serving(P);
    c.source = Source::Untrusted("module x is not signed by a key spec.module.verify trusts".into());
    let p = c.plan();
    assert_eq!(serves(&p), Some((P, false)), "the verified version keeps serving, as with a digest mismatch");
    let degraded = p.degraded.clone().expect("Degraded says why the new version does not serve");
    assert_eq!((degraded.status, degraded.reason), (true, Reason::UntrustedModule));
    assert!(event(&p, "UntrustedModule").is_some());
}

#[test]
fn a_running_version_not_verified_under_the_keys_now_required_stops() {
    let c = Case::new().serving(P).source(P).untrusted(P, "module ppp was not verified against the keys now required");
    let p = c.plan();
    assert_eq!(p.serve, None, "a requirement added to the spec takes effect at once");
    assert_eq!((p.ready.status, p.ready.reason), (false, Reason::UntrustedModule));
    // Verified again: it serves.
    assert_eq!(serves(&Case::new().serving(P).source(P).plan()), Some((P, false)));
}

#[test]
fn an_overlapping_reconciler_waits_without_refusing_its_version_for_good() {
    let older = "Reconciler team-a/first (created earlier) reconciles example.operon.dev Thing in team-a";
    let c = Case::new().source(P).loaded(P).overlaps(P, older);
    let p = c.plan();
    assert_eq!(p.serve, None, "it never starts beside the older one");
    assert_eq!((p.ready.status, p.ready.reason), (false, Reason::Overlaps));
    assert!(p.ready.message.contains("team-a/first"), "{}", p.ready.message);
    assert!(p.records.is_empty(), "not a durable refusal: {:?}", p.records);
    // Running already (created later than one that loaded after it): it stops.
    let running = Case::new().serving(P).source(P).overlaps(P, older);
    assert_eq!(running.plan().serve, None);
    // The older one gone: it starts.
    assert_eq!(serves(&Case::new().source(P).loaded(P).plan()), Some((P, false)));
}

#[test]
fn paused_stops_everything_and_keeps_the_versions() {
    let mut c = Case::new().serving(P).source(X).loaded(X).admission();
    c.spec = Spec::Valid { paused: true, shadow: false, admission: true, webhooks_served: true };
    let p = c.plan();
    assert_eq!((p.serve.as_ref(), p.admission), (None, false));
    assert_eq!(p.ready.reason, Reason::Paused);
    assert!(
        p.records.contains(&Record::Probation { digest: X.into(), previous: Some(P.into()) }) || p.records.is_empty()
    );
}

#[test]
fn deleted_stops_and_cleans_up() {
    let mut c = Case::new().serving(P).source(P).admission();
    c.deleting = true;
    let p = c.plan();
    assert!(p.clean_up && p.serve.is_none() && !p.admission);
    assert_eq!(p.ready.reason, Reason::Deleting);
}

#[test]
fn an_invalid_spec_stops_the_controller_and_says_which_field() {
    let mut c = Case::new().serving(P).source(P);
    c.spec = Spec::Invalid("spec.limits.cpu asks for 4 CPU".into());
    let p = c.plan();
    assert!(p.serve.is_none());
    assert_eq!((p.ready.reason, p.ready.message.as_str()), (Reason::InvalidSpec, "spec.limits.cpu asks for 4 CPU"));
}

#[test]
fn a_source_that_cannot_be_reached_keeps_the_running_version() {
    let mut c = Case::new().serving(P);
    c.source = Source::Unavailable("registry timed out".into());
    let p = c.plan();
    assert_eq!(serves(&p), Some((P, false)));
    assert_eq!(p.degraded.map(|d| d.reason), Some(Reason::SourceUnavailable));
}

#[test]
fn admission_follows_the_version_that_serves() {
    let mut with = Case::new().serving(P).source(P).admission();
    with.modules.get_mut(P).unwrap().admission = true;
    assert!(with.plan().admission);
    let without = Case::new().serving(P).source(P).admission();
    let p = without.plan();
    assert!(!p.admission);
    assert!(event(&p, "AdmissionNotExported").is_some());
    let mut not_served = with.clone();
    not_served.spec = Spec::Valid { paused: false, shadow: false, admission: true, webhooks_served: false };
    let p = not_served.plan();
    assert!(!p.admission && event(&p, "AdmissionNotServed").is_some());
}

#[test]
fn defect_3_a_refused_digest_at_the_source_does_not_freeze_the_spec() {
    // The source holds a refused version; the admin narrows the grants of
    // the running one: the revocation takes effect.
    let c = Case::new().serving(P).source(X).refused(X, Reason::RolledBack).forbidden(P, "owns v1 Secret");
    let p = c.plan();
    assert_eq!(p.serve, None, "narrowed grants stop the running version even while the source is refused");
    // A settings change (ServiceAccount, limits) reconfigures the running one.
    let mut c = Case::new().serving(P).source(X).refused(X, Reason::RolledBack);
    c.live.settings_changed = true;
    let p = c.plan();
    assert_eq!(serves(&p), Some((P, false)));
    assert!(event(&p, "ControllerReconfigured").is_some());
    // Removing spec.admission is not ignored either.
    let mut c = Case::new().serving(P).source(X).refused(X, Reason::RolledBack);
    c.live.admission = true;
    assert!(!c.plan().admission);
}

#[test]
fn defect_4_a_rollback_is_durable_across_restarts_and_replicas() {
    // A restarted replica: nothing runs, the source holds the rolled-back
    // version, the record names the last good one.
    let mut c = Case::new().source(X).refused(X, Reason::RolledBack);
    c.durable.last_good = Some(P.into());
    let p = c.plan();
    assert_eq!(
        (p.serve.as_ref(), p.restore.as_deref(), p.load.as_deref()),
        (None, Some(P), None),
        "restore, never load X"
    );
    let p = c.clone().loaded(P).plan();
    assert_eq!(serves(&p), Some((P, false)), "the last good version serves, not the refused one");
    // Not available on this replica: say so, serve nothing.
    let mut missing = c.clone();
    missing.restores.insert(P.into(), Restore::Unavailable);
    let p = missing.plan();
    assert_eq!(p.serve, None);
    assert_eq!(p.ready.reason, Reason::RolledBack);
}

#[test]
fn defect_4_a_rollback_to_a_version_without_webhooks_removes_them() {
    let mut c = Case::new().serving(X).loaded(P).source(X).refused(X, Reason::RolledBack).admission();
    c.modules.get_mut(X).unwrap().admission = true;
    c.durable.probation = Some((X.into(), Some(P.into())));
    c.live.admission = true;
    let p = c.plan();
    assert_eq!(serves(&p), Some((P, false)));
    assert!(!p.admission, "P exports no admission: the webhooks go with X");
}

#[test]
fn defect_4_probation_continues_after_a_restart() {
    let mut c = Case::new().source(X).loaded(X);
    c.durable.probation = Some((X.into(), Some(P.into())));
    c.durable.last_good = Some(P.into());
    let p = c.plan();
    assert_eq!(serves(&p), Some((X, true)), "still on probation");
    assert_eq!(p.restore.as_deref(), Some(P), "with its fallback loaded back");
    assert!(!p.records.contains(&Record::EndProbation));
}

#[test]
fn defect_5_a_shadowed_candidate_never_goes_live_by_itself() {
    // Whatever the candidate's manifest (the executor builds it its own
    // reads), under shadow it only shadows.
    let p = Case::new().serving(P).source(X).loaded(X).shadow().plan();
    assert_eq!(serves(&p), Some((P, false)));
    // And a swap is always on probation, also when the manifest changed
    // (the executor rebuilds the controller with the probation flag).
    let p = Case::new().serving(P).source(Y).loaded(Y).plan();
    assert_eq!(serves(&p), Some((Y, true)));
}

#[test]
fn defect_5_a_version_that_fails_its_probation_is_refused_even_after_a_rebuild() {
    // Y (new manifest) trapped on every call: refused, and P comes back.
    let mut c = Case::new().serving(Y).loaded(P).source(Y).refused(Y, Reason::RolledBack);
    c.durable.probation = Some((Y.into(), Some(P.into())));
    assert_eq!(serves(&c.plan()), Some((P, false)));
}

#[test]
fn a_restart_while_shadowing_serves_the_good_version_and_shadows_the_candidate() {
    let mut c = Case::new().source(X).loaded(X).shadow();
    c.durable.last_good = Some(P.into());
    let p = c.plan();
    assert_eq!((p.serve.as_ref(), p.restore.as_deref()), (None, Some(P)));
    let p = c.loaded(P).plan();
    assert_eq!((serves(&p), p.candidate.as_deref()), (Some((P, false)), Some(X)));
}

#[test]
fn restoring_the_good_source_clears_the_rollback_from_ready() {
    // The admin put P back at the source after X was rolled back.
    let mut c = Case::new().serving(P).source(P).refused(X, Reason::RolledBack);
    c.durable.last_good = Some(P.into());
    let p = c.plan();
    assert_eq!(serves(&p), Some((P, false)));
    assert!(p.degraded.is_none() && p.problem.is_none(), "nothing is wrong any more: {:?}", p.problem);
    assert_eq!(p.ready.reason, Reason::Loaded);
}

#[test]
fn every_record_and_event_of_a_plan_is_stable_when_nothing_changes() {
    // Steady state: serving what the source holds, nothing recorded twice.
    let mut c = Case::new().serving(P).source(P);
    c.durable.last_good = Some(P.into());
    let p = c.plan();
    assert!(p.records.is_empty() && p.events.is_empty(), "{:?} {:?}", p.records, p.events);
}
