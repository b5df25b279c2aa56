//! Never leaving parents behind: the finalizer a module puts on its parents
//! is removed when nobody will act on it any more — the Reconciler is
//! deleted, its selector no longer matches the parent, or its new module
//! names another finalizer. Deletion of a parent then never hangs on a
//! plugin that is gone (controller-runtime leaves that to the user).
//!
//! A Reconciler whose module uses a finalizer carries one of the host's
//! own ([`RELEASE_FINALIZER`](super::RELEASE_FINALIZER)), so the host gets
//! to release the parents before the Reconciler disappears. What the
//! plugin would have cleaned up outside the cluster is not: the plugin is
//! gone (docs/reconcilers.md says so).

use super::PluginKey;
use super::settings::Settings;
use crate::apply::Applier;
use crate::cache::{CachedObject, WatchKey};
use crate::contract::Gvk;
use crate::leader::Fence;
use crate::manager::Manager;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use std::time::Duration;

/// Remove `finalizer` from every parent of `kind` in the plugin's scope
/// that `filter` (over the parent's labels) picks. Writes go through the
/// plugin's own client, within `fence`.
pub async fn release(
    manager: &Manager,
    kind: &Gvk,
    s: &Settings,
    finalizer: &str,
    fence: Fence,
    filter: impl Fn(&CachedObject) -> bool,
) {
    let informer = manager.cache().informer(WatchKey::new(kind.clone(), s.pipeline.namespace.clone()));
    if let Err(e) = informer.wait_synced(Duration::from_secs(30)).await {
        tracing::warn!(%kind, error = %e, "cannot release parents: their cache is not synced");
        return;
    }
    let client = s.client.clone().unwrap_or_else(|| manager.client().clone());
    let applier = Applier::new(client, manager.client().clone(), "operon-release", None);
    // Writes are locked on the version read: a parent changed meanwhile (its
    // controller adding another finalizer, say) is read again and retried.
    let (mut released, mut failed) = (0, Vec::new());
    for round in 0..10 {
        let parents: Vec<std::sync::Arc<CachedObject>> = informer
            .store()
            .iter()
            .filter(|p| s.pipeline.scope.contains(p.namespace()))
            .filter(|p| p.has_finalizer(finalizer))
            .filter(|p| filter(p))
            .cloned()
            .collect();
        if parents.is_empty() {
            break;
        }
        if round > 0 {
            tokio::time::sleep(Duration::from_millis(200 * round)).await;
        }
        failed.clear();
        for parent in &parents {
            match applier.set_finalizer(parent, finalizer, false, &fence).await {
                Ok(()) => released += 1,
                Err(e) => failed.push((parent.key(), e)),
            }
        }
        if failed.is_empty() {
            break;
        }
        // The cache catches up with the writes that won.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (parent, e) in &failed {
        tracing::warn!(%parent, %finalizer, error = %e, "could not release a parent");
    }
    tracing::info!(%kind, %finalizer, released, failed = failed.len(), "parents released");
}

/// Put the host's release finalizer on a Reconciler.
pub async fn hold(client: &kube::Client, key: &PluginKey, object: &CachedObject) {
    let mut finalizers: Vec<String> = object.finalizers().map(str::to_string).collect();
    if finalizers.iter().any(|f| f == super::RELEASE_FINALIZER) {
        return;
    }
    finalizers.push(super::RELEASE_FINALIZER.to_string());
    set(client, key, object, finalizers).await;
}

/// Take the host's release finalizer off a Reconciler being deleted: it
/// goes.
pub async fn let_go(client: &kube::Client, key: &PluginKey, object: &CachedObject) {
    let finalizers: Vec<String> =
        object.finalizers().filter(|f| *f != super::RELEASE_FINALIZER).map(str::to_string).collect();
    if finalizers.len() == object.finalizers().count() {
        return;
    }
    set(client, key, object, finalizers).await;
}

async fn set(client: &kube::Client, key: &PluginKey, object: &CachedObject, finalizers: Vec<String>) {
    let gvk = GroupVersionKind::gvk(super::GROUP, super::VERSION, key.kind().unwrap_or_default());
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = match object.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    // Locked on the version read: a concurrent change of the finalizers is
    // not overwritten (the next step sees it).
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version()}
    });
    if let Err(e) = api.patch(object.name(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        tracing::debug!(plugin = %key, error = %crate::client::describe(&e), "could not change the Reconciler's finalizers");
    }
}
