//! What a hand-over tells on the Reconciler: an event when this replica
//! comes to lead it (from whom, and how the Lease was free), and one when
//! this replica pointed the plugin's webhooks at itself because the address
//! they named stopped answering (admission was refused or let through
//! meanwhile, as its failure policy says).

use super::*;
use crate::leader::{Taken, Takeover};
use crate::webhook::Notice;

impl Lifecycle {
    /// Tell every time this replica comes to lead the plugin's unit, and
    /// look at the plugin again then (its status names the leader). The
    /// task ends with the unit.
    pub(super) fn watch_leadership(&self, key: &PluginKey, plugin: &Arc<Mutex<Plugin>>, leadership: &Leadership) {
        let mut takeovers = leadership.takeovers();
        let (unit, key2, tx) = (leadership.downgrade(), key.clone(), self.enqueue.clone());
        let (recorder, reference, identity) = (self.recorder.clone(), self.reference(key), self.manager.identity());
        let task = tokio::spawn(async move {
            while takeovers.changed().await.is_ok() {
                let Some(takeover) = takeovers.borrow_and_update().clone() else { continue };
                let Some(leadership) = unit.upgrade() else { return };
                let _ = tx.send(key2.clone());
                let (warning, message) = told(&identity, leadership.lease(), &takeover);
                match &reference {
                    Some(r) => publish(recorder.clone(), r.clone(), leadership, warning, "LeaderElected", message),
                    None => tracing::info!(plugin = %key2, "{message}"),
                }
            }
        });
        let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = p.leading.replace(task.abort_handle()) {
            old.abort();
        }
    }
}

/// The event of a take-over: whether it is a warning (the Lease had
/// expired: the plugin waited a lease duration), and what it says.
fn told(me: &str, lease: &str, t: &Takeover) -> (bool, String) {
    let from = t.from.as_deref().unwrap_or("the replica before");
    match t.how {
        Taken::Created => (false, format!("{me} leads this plugin (its Lease {lease} was new)")),
        Taken::Released => (
            false,
            format!(
                "{me} leads this plugin now: the replica before released its Lease {lease} (it held more than its share)"
            ),
        ),
        Taken::HandedOver => (
            false,
            format!(
                "{me} leads this plugin now: {from} handed its Lease {lease} over (it shut down, or could not serve it)"
            ),
        ),
        Taken::Expired => (
            true,
            format!(
                "{me} leads this plugin now: {from} stopped renewing its Lease {lease} for a lease duration (killed, \
                 cut off or paused); its reconciles and status waited until now"
            ),
        ),
    }
}

/// Tell, on the Reconciler, every time this replica pointed a plugin's
/// webhooks at itself because their address stopped answering. Written by
/// the replica that did it (one wins the conditional write), whether or not
/// it leads the plugin.
pub(super) fn tell_webhook_notices(
    mut notices: tokio::sync::broadcast::Receiver<Notice>,
    recorder: Arc<Recorder>,
    resources: Option<(Arc<Informer>, Option<Arc<Informer>>)>,
) {
    tokio::spawn(async move {
        loop {
            let notice = match notices.recv().await {
                Ok(n) => n,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let Notice::Repointed { plugin, from, to, why, down_for } = notice;
            let message = format!(
                "the webhooks named https://{from}, which stopped answering ({why}); the API server answered this \
                 plugin's admission calls as its failurePolicy says until this replica pointed them at https://{to}, \
                 {down_for:.1?} after the first failed look"
            );
            let Some(reference) = reference(&plugin, resources.as_ref()) else {
                tracing::warn!(%plugin, "{message}");
                continue;
            };
            let recorder = recorder.clone();
            if let Err(e) = recorder
                .publish(
                    &reference,
                    crate::apply::events::EventType::Warning,
                    "AdmissionUnreachable",
                    "Load",
                    &message,
                    &crate::leader::Fence::open(),
                )
                .await
            {
                tracing::debug!(%plugin, "could not record event: {e}");
            }
        }
    });
}

/// The Reconciler a webhook plugin name (`r.<namespace>.<name>`,
/// `c.<name>`) stands for, as cached.
fn reference(
    plugin: &str,
    resources: Option<&(Arc<Informer>, Option<Arc<Informer>>)>,
) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
    let (namespaced, cluster) = resources?;
    let (kind, key, informer) = if let Some(rest) = plugin.strip_prefix("r.") {
        let (ns, name) = rest.split_once('.')?;
        ("Reconciler", ObjectKey::new(Some(ns), name), namespaced)
    } else {
        let name = plugin.strip_prefix("c.")?;
        ("ClusterReconciler", ObjectKey::new(None, name), cluster.as_ref()?)
    };
    let object = informer.store().get(&key).cloned()?;
    Some(k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(format!("{}/{}", super::super::GROUP, super::super::VERSION)),
        kind: Some(kind.into()),
        name: Some(object.name().to_string()),
        namespace: object.namespace().map(str::to_string),
        uid: object.uid().map(str::to_string),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_over_should_say_from_whom_and_how() {
        let t = |how, from: Option<&str>| Takeover { how, from: from.map(str::to_string) };
        let (warning, message) = told("host-b_1", "ns/lease", &t(Taken::HandedOver, Some("host-a_2")));
        assert!(!warning && message.contains("host-a_2 handed its Lease ns/lease over"), "{message}");
        let (warning, message) = told("host-b_1", "ns/lease", &t(Taken::Expired, Some("host-a_2")));
        assert!(warning && message.contains("stopped renewing"), "{message}");
    }
}
