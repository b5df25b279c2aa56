//! What the status of a Reconciler says: the plan's conditions, the
//! controller's health and counters, and the durable record — written by
//! the replica that leads it, only when something a reader sees changed.

use super::*;
use crate::reconciler::crd::{ProbationStatus, RefusedVersion, ShadowStatus};
use crate::reconciler::status::Want;
use kube::api::{Api, Patch, PatchParams};
use std::time::Duration;

impl Lifecycle {
    #[allow(clippy::too_many_arguments, reason = "one step's observations, passed once")]
    pub(super) async fn write_status(
        &self,
        key: &PluginKey,
        plugin: &Arc<Mutex<Plugin>>,
        leadership: &Leadership,
        observed: &Observed,
        facts: &SourceFacts,
        plan: &Plan,
        durable: &Durable,
    ) {
        let status = {
            let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            compute(&p, plan, durable, observed, facts, &self.manager.identity(), leadership.is_leading())
        };
        let Some(kind) = key.kind() else {
            return; // a module file: its log says it all
        };
        let written = plugin.lock().unwrap_or_else(|e| e.into_inner()).status_written;
        if !leadership.is_leading() || !due(&observed.status, &status, written.map(|at| at.elapsed())) {
            return;
        }
        let patch = serde_json::json!({
            "apiVersion": format!("{}/{}", crate::reconciler::GROUP, crate::reconciler::VERSION),
            "kind": kind,
            "status": status,
        });
        let params = PatchParams::apply(crate::reconciler::FIELD_MANAGER).force();
        let client = self.manager.client().clone();
        let result = match key {
            PluginKey::ClusterReconciler(name) => Api::<ClusterReconciler>::all(client)
                .patch_status(name, &params, &Patch::Apply(&patch))
                .await
                .map(|_| ()),
            PluginKey::Reconciler(k) => {
                Api::<Reconciler>::namespaced(client, k.namespace.as_deref().unwrap_or_default())
                    .patch_status(&k.name, &params, &Patch::Apply(&patch))
                    .await
                    .map(|_| ())
            }
            PluginKey::File(_) => Ok(()),
        };
        match result {
            // What this replica decided is in the status now: the status is
            // the record from here on.
            Ok(()) => {
                let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                p.local.clear();
                p.status_written = Some(std::time::Instant::now());
            }
            Err(e) => {
                tracing::debug!(plugin = %key, error = %crate::client::describe(&e), "could not write the status")
            }
        }
    }
}

/// How often a status whose only change is its counters (`reconciles`,
/// `errors`) is written; any other change is written at once. The metrics
/// (`controller_runtime_reconcile_total`, `…_errors_total`) are live.
pub(super) const COUNTERS_PERIOD: Duration = Duration::from_secs(30);

/// The status the plan, the controller and the record call for.
fn compute(
    p: &Plugin,
    plan: &Plan,
    durable: &Durable,
    observed: &Observed,
    facts: &SourceFacts,
    identity: &str,
    leading: bool,
) -> ReconcilerStatus {
    let controller = p.controller.as_ref();
    let active = plan.serve.as_ref().and_then(|s| p.modules.get(&s.digest)).map(|h| &h.module);
    let stats = controller.map(ModuleController::stats).unwrap_or_default();
    let degraded = plan.degraded.clone().unwrap_or_else(|| {
        let waits = Waits {
            cpu: controller.and_then(|c| c.throttled(Duration::from_secs(60))),
            host: controller.and_then(|c| c.host_limited(Duration::from_secs(60))),
        };
        health(&stats, waits)
    });
    let progressing = match (&plan.candidate, controller) {
        (Some(c), Some(ctrl)) => {
            let (compared, differing) = ctrl.shadow_counts();
            Want::yes(
                if differing > 0 { Reason::ShadowDiffers } else { Reason::Shadowing },
                format!("candidate {} compared on {compared} reconciles, {differing} differed", plan::short(c)),
            )
        }
        _ => Want::no(Reason::Loaded, "no candidate"),
    };
    let conditions = status::conditions(
        &observed.status.conditions,
        &[("Ready", plan.ready.clone()), ("Degraded", degraded), ("Progressing", progressing)],
        observed.generation,
    );
    let shadow = match (&plan.candidate, controller) {
        (Some(c), Some(ctrl)) => {
            let (compared, differing) = ctrl.shadow_counts();
            Some(ShadowStatus { candidate_digest: c.clone(), compared, differing })
        }
        _ => None,
    };
    let digest = active.map(|m| m.info().digest.clone());
    let source_digest = match &facts.source {
        Source::Holds(d) => Some(d.clone()),
        _ => observed.status.source_digest.clone(),
    };
    let last_swap_time = last_swap_time(p.last_swap.as_ref(), digest.as_deref(), &observed.status);
    ReconcilerStatus {
        observed_generation: observed.generation,
        kind: active.map(|m| m.manifest().for_kind.to_string()),
        short_digest: digest.as_deref().map(plan::short),
        source_digest: source_digest.filter(|s| Some(s) != digest.as_ref()),
        digest,
        conditions,
        last_swap_time,
        reconciles: stats.reconciles,
        errors: stats.errors,
        leader: Some(identity.to_string()).filter(|i| !i.is_empty() && leading),
        shadow,
        last_good_digest: durable.last_good.clone(),
        probation: durable
            .probation
            .as_ref()
            .map(|(digest, previous)| ProbationStatus { digest: digest.clone(), previous_digest: previous.clone() }),
        refused: durable
            .refused
            .iter()
            .map(|r| RefusedVersion {
                digest: r.digest.clone(),
                reason: r.reason.as_str().into(),
                message: r.message.clone(),
            })
            .collect(),
        retry: observed.retry.clone().or_else(|| observed.status.retry.clone()),
    }
}

/// When the version served last changed: the record's time while the
/// record names the version served here (a replica that takes over, or
/// started after the swap, swapped nothing), this replica's own time of the
/// swap otherwise.
fn last_swap_time(local: Option<&Time>, serving: Option<&str>, recorded: &ReconcilerStatus) -> Option<Time> {
    match (serving, recorded.digest.as_deref(), &recorded.last_swap_time) {
        (Some(serving), Some(digest), Some(at)) if serving == digest => Some(at.clone()),
        _ => local.cloned().or_else(|| recorded.last_swap_time.clone()),
    }
}

/// What a running controller's reconciles waited for in the last minute.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::reconciler) struct Waits {
    /// Its own CPU budget (in CPUs).
    pub cpu: Option<f64>,
    /// A host-wide limit.
    pub host: Option<crate::pipeline::HostLimit>,
}

/// The Degraded condition of a running controller: most reconciles failing
/// (`stats`), or its guest calls waiting in the last minute — for their
/// own CPU budget, or for a limit the whole host shares. A failure and a
/// wait at once (a slow guest hitting its deadline): the failure is the
/// reason, and the wait is said too. A last failure the API server refused
/// with 403 is `ApiForbidden` (the plugin's ServiceAccount lacks a role),
/// read from the error, not its text.
pub(in crate::reconciler) fn health(
    stats: &crate::controller::StatsSnapshot<crate::pipeline::Error>,
    waits: Waits,
) -> Want {
    let throttled = waits.cpu.map(|cpu| {
        (
            Reason::CpuThrottled,
            format!(
                "the module's calls used more than their CPU budget of {}m in the last minute; its reconciles wait",
                (cpu * 1000.0).round()
            ),
        )
    });
    let limited = waits.host.map(|limit| {
        (
            Reason::HostLimited,
            format!(
                "its reconciles waited for the host's shared {} ({}) in the last minute: every plugin on this host \
                 shares it; nothing is lost, they are late",
                limit.describe(),
                limit.flag()
            ),
        )
    });
    let wait = throttled.or(limited);
    match (&stats.last_error, wait) {
        (Some(e), wait) if stats.errors > 0 && stats.errors * 2 > stats.reconciles => {
            let forbidden = matches!(&**e, crate::controller::Error::Reconcile(e) if e.status_code() == Some(403));
            let reason = if forbidden { Reason::ApiForbidden } else { Reason::ReconcileErrors };
            let also = wait.map(|(_, t)| format!("; also, {t}")).unwrap_or_default();
            Want::yes(reason, format!("most reconciles fail; last: {e}{also}"))
        }
        (_, Some((reason, message))) => Want::yes(reason, message),
        (_, None) => Want::no(Reason::Loaded, "no problem"),
    }
}

/// Whether writing `new` would change nothing a reader sees (transition
/// times aside).
/// Whether `new` is to be written over `current`, the last write of this
/// replica `since` ago: any change at once, but counters alone
/// (`reconciles`, `errors`) at most every [`COUNTERS_PERIOD`]. At every
/// step they doubled the API server's writes of a busy host (a status
/// write per reconcile at a thousand Reconcilers: `cargo xtask bench fleet
/// --rings 1000`).
fn due(current: &ReconcilerStatus, new: &ReconcilerStatus, since: Option<Duration>) -> bool {
    if same(current, new) {
        return false;
    }
    let counted = ReconcilerStatus { reconciles: new.reconciles, errors: new.errors, ..current.clone() };
    !same(&counted, new) || since.is_none_or(|s| s >= COUNTERS_PERIOD)
}

fn same(current: &ReconcilerStatus, new: &ReconcilerStatus) -> bool {
    let strip = |s: &ReconcilerStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s.last_swap_time = None;
        s
    };
    strip(current) == strip(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{Error as ControllerError, StatsSnapshot};
    use crate::pipeline::Error as PipelineError;

    #[test]
    fn the_last_swap_time_should_be_the_records_while_it_names_the_version_served() {
        let at = |s: i64| Time(Timestamp::from_second(s).unwrap());
        let recorded =
            ReconcilerStatus { digest: Some("sha256:a".into()), last_swap_time: Some(at(100)), ..Default::default() };
        // This replica started (or took over) later: it swapped nothing.
        assert_eq!(last_swap_time(Some(&at(200)), Some("sha256:a"), &recorded), Some(at(100)));
        // It swapped to another version: its own time.
        assert_eq!(last_swap_time(Some(&at(200)), Some("sha256:b"), &recorded), Some(at(200)));
        // Nothing served here (yet): the record stands.
        assert_eq!(last_swap_time(None, None, &recorded), Some(at(100)));
        // The first version: this replica's time.
        assert_eq!(last_swap_time(Some(&at(200)), Some("sha256:a"), &ReconcilerStatus::default()), Some(at(200)));
    }

    #[test]
    fn counters_alone_should_be_written_at_most_every_period() {
        let current = ReconcilerStatus { reconciles: 10, digest: Some("sha256:a".into()), ..Default::default() };
        let counted = ReconcilerStatus { reconciles: 11, errors: 1, ..current.clone() };
        let recent = Some(Duration::from_secs(3));
        assert!(!due(&current, &current, None), "nothing changed");
        assert!(!due(&current, &counted, recent), "counters alone, written 3 s ago");
        assert!(due(&current, &counted, Some(COUNTERS_PERIOD)), "counters alone, the period passed");
        assert!(due(&current, &counted, None), "counters alone, never written by this replica");
        let swapped = ReconcilerStatus { digest: Some("sha256:b".into()), ..counted };
        assert!(due(&current, &swapped, recent), "another change goes at once, counters with it");
    }

    pub(super) fn failing(errors: u64, e: PipelineError) -> StatsSnapshot<PipelineError> {
        StatsSnapshot { reconciles: 10, errors, last_error: Some(Arc::new(ControllerError::Reconcile(e))) }
    }

    pub(super) fn forbidden() -> PipelineError {
        PipelineError::Apply(crate::apply::Error::Api {
            operation: "apply",
            target: "Deployment shop/web".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("deployments is forbidden", "Forbidden").with_code(403).boxed(),
            ),
        })
    }

    #[test]
    pub(super) fn degraded_should_name_failures_first_and_say_the_throttling_too() {
        let throttled = health(&failing(1, PipelineError::Transient("x".into())), cpu(0.01));
        assert_eq!((throttled.status, throttled.reason), (true, Reason::CpuThrottled));
        assert!(throttled.message.contains("CPU budget of 10m"), "{}", throttled.message);
        let both = health(&failing(9, PipelineError::Transient("timed out after 1s".into())), cpu(0.01));
        assert_eq!(both.reason, Reason::ReconcileErrors);
        assert!(
            both.message.contains("timed out after 1s") && both.message.contains("CPU budget of 10m"),
            "{}",
            both.message
        );
        let fine = health(&failing(1, PipelineError::Transient("x".into())), Waits::default());
        assert_eq!((fine.status, fine.reason), (false, Reason::Loaded));
        let host = Waits { host: Some(crate::pipeline::HostLimit::Memory), ..Waits::default() };
        let limited = health(&failing(1, PipelineError::Transient("x".into())), host);
        assert_eq!((limited.status, limited.reason), (true, Reason::HostLimited));
        assert!(limited.message.contains("--max-guest-memory-total"), "{}", limited.message);
    }

    fn cpu(cpu: f64) -> Waits {
        Waits { cpu: Some(cpu), host: None }
    }

    #[test]
    pub(super) fn a_403_from_the_api_server_should_be_api_forbidden_by_its_code_not_its_text() {
        assert_eq!(health(&failing(9, forbidden()), Waits::default()).reason, Reason::ApiForbidden);
        // A guest message that merely mentions the words is not.
        let mimic = PipelineError::Transient("apply: (403 Forbidden)".into());
        assert_eq!(health(&failing(9, mimic), Waits::default()).reason, Reason::ReconcileErrors);
    }
}
