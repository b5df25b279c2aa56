//! Conversion webhooks (contract 0.2): a plugin whose module exports
//! `convert` and whose Reconciler is granted conversion serves its `for`
//! CRD's conversion at `POST /convert/<plugin>`, and the replica that leads
//! it points the CRD's `spec.conversion` there — keeping the CRD's own
//! settings in the annotation [`BEFORE`], and putting them back when the
//! plugin goes. Calls read the controller's module when they start, as
//! admission calls do, so a swap changes the converter atomically.

use super::handler::{self, Warned};
use super::{Answer, Error, Webhooks, config};
use crate::contract::Gvk;
use crate::leader::Fence;
use crate::pipeline::ModuleController;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The CRD annotation holding its `spec.conversion` from before a plugin
/// took it over (JSON).
pub const BEFORE: &str = "operon.dev/conversion-before";

/// The deadline of one conversion call: well under the API server's 30 s
/// for conversion webhooks.
const DEADLINE: Duration = Duration::from_secs(10);

type Crd = k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// One plugin's conversion route, with its own places (the admission
/// caps' per-plugin figure) and refusal log.
#[derive(Clone)]
pub(super) struct Route {
    pub controller: ModuleController,
    pub crd: String,
    pub slots: Arc<tokio::sync::Semaphore>,
    pub warned: Arc<Warned>,
}

impl Webhooks {
    /// Serve `POST /convert/<name>` from `controller`'s module and, with
    /// `leading` (the fence of the plugin's leadership, while this replica
    /// leads it), point its `for` CRD's conversion at it: the fence is
    /// checked again just before the write.
    ///
    /// # Errors
    /// [`Error::NoConversion`] when the module does not export `convert`;
    /// [`Error::Discovery`] when its kind is not served; [`Error::Crd`] when
    /// the CRD cannot be read or written.
    pub async fn register_conversion(
        &self,
        name: &str,
        controller: ModuleController,
        leading: Option<&Fence>,
    ) -> Result<String, Error> {
        let module = controller.module();
        if !module.conversion() {
            return Err(Error::NoConversion { plugin: name.to_string() });
        }
        let kind = module.manifest().for_kind.clone();
        let gvk = kube::api::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let (resource, _) = kube::discovery::pinned_kind(&self.shared.client, &gvk)
            .await
            .map_err(|source| Error::Discovery { plugin: name.to_string(), kind: kind.to_string(), source })?;
        let crd = format!("{}.{}", resource.plural, kind.group);
        // One converter per CRD: two would take the CRD from each other, and
        // the first to go would give it back under the other.
        let other = self.conversions().iter().find(|(n, r)| *n != name && r.crd == crd).map(|(n, _)| n.clone());
        if let Some(other) = other {
            return Err(Error::InvalidPlugin {
                plugin: name.to_string(),
                reason: format!(
                    "{crd} is already converted by plugin {other}: grant conversion to one Reconciler of a kind"
                ),
            });
        }
        let slots = self.conversions().get(name).map_or_else(
            || Arc::new(tokio::sync::Semaphore::new(self.shared.max_concurrent_per_plugin)),
            |r| r.slots.clone(),
        );
        let route = Route { controller, crd: crd.clone(), slots, warned: Arc::default() };
        self.conversions_mut().insert(name.to_string(), route);
        if let Some(fence) = leading {
            self.point_crd(name, &crd, fence).await?;
        }
        tracing::info!(plugin = %name, crd = %crd, "conversion webhook registered");
        Ok(crd)
    }

    /// Stop serving `name`'s conversion; with `leading` (the fence of the
    /// plugin's leadership), give its CRD its own conversion settings back,
    /// the fence checked just before the write. Returns the kind it
    /// converted, if it served one.
    ///
    /// # Errors
    /// [`Error::Crd`] when the CRD cannot be written (the route is kept, so
    /// the CRD never points at a path that is not served).
    pub async fn unregister_conversion(&self, name: &str, leading: Option<&Fence>) -> Result<Option<Gvk>, Error> {
        let Some(route) = self.conversions().get(name).cloned() else { return Ok(None) };
        if let Some(fence) = leading {
            self.restore_crd(name, &route.crd, fence).await?;
        }
        self.conversions_mut().remove(name);
        tracing::info!(plugin = %name, crd = %route.crd, "conversion webhook unregistered");
        Ok(Some(route.controller.module().manifest().for_kind.clone()))
    }

    async fn point_crd(&self, plugin: &str, crd: &str, fence: &Fence) -> Result<(), Error> {
        let api: Api<Crd> = Api::all(self.shared.client.clone());
        let api_error = |source| Error::Crd { action: "pointing", name: crd.into(), source };
        let current = api.get(crd).await.map_err(api_error)?;
        let mut patch = json!({"spec": {"conversion": {
            "strategy": "Webhook",
            "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": self.client_config(plugin)},
        }}});
        let annotations = current.metadata.annotations.unwrap_or_default();
        if !annotations.contains_key(BEFORE) {
            let before = current.spec.conversion.map(|c| serde_json::to_value(c).unwrap_or_default());
            let before = before.unwrap_or_else(|| json!({"strategy": "None"}));
            patch["metadata"] = json!({"annotations": {BEFORE: before.to_string()}});
        }
        fence.check().map_err(|source| Error::NotLeading { plugin: plugin.into(), source })?;
        api.patch(crd, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(api_error)?;
        Ok(())
    }

    async fn restore_crd(&self, plugin: &str, crd: &str, fence: &Fence) -> Result<(), Error> {
        let api: Api<Crd> = Api::all(self.shared.client.clone());
        let api_error = |source| Error::Crd { action: "restoring", name: crd.into(), source };
        let current = match api.get_opt(crd).await.map_err(api_error)? {
            Some(c) => c,
            None => return Ok(()),
        };
        let annotations = current.metadata.annotations.unwrap_or_default();
        let Some(before) = annotations.get(BEFORE) else { return Ok(()) };
        let mut before: Value = serde_json::from_str(before).unwrap_or_else(|_| json!({"strategy": "None"}));
        // A merge patch keeps what it does not name: the webhook goes
        // unless the settings from before had one.
        if before.get("webhook").is_none() {
            before["webhook"] = Value::Null;
        }
        let patch = json!({"metadata": {"annotations": {BEFORE: null}}, "spec": {"conversion": before}});
        fence.check().map_err(|source| Error::NotLeading { plugin: plugin.into(), source })?;
        api.patch(crd, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(api_error)?;
        Ok(())
    }

    fn client_config(&self, plugin: &str) -> Value {
        let ca = self.ca_bundle();
        let target = self.target(ca.as_ref().map(|c| c.as_slice()));
        serde_json::to_value(config::client_config_at(&format!("/convert/{plugin}"), &target)).unwrap_or_default()
    }

    fn conversions(&self) -> std::sync::RwLockReadGuard<'_, std::collections::HashMap<String, Route>> {
        self.shared.conversions.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn conversions_mut(&self) -> std::sync::RwLockWriteGuard<'_, std::collections::HashMap<String, Route>> {
        self.shared.conversions.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Answer one ConversionReview for `plugin`: the converted objects, or a
    /// `Failure` result whose message names the plugin (what the API server
    /// shows). A request it cannot read is a 400. Calls are bounded as
    /// admission calls are (`handler::admit`: the per-plugin and total caps,
    /// the plugin's CPU budget; a refusal is a 429) and run on threads of
    /// their own, never tokio's blocking pool.
    pub async fn answer_conversion(&self, plugin: &str, body: &[u8]) -> Result<Value, Answer> {
        let unreadable = |why: String| Answer::error(400, why);
        let review: Value =
            serde_json::from_slice(body).map_err(|e| unreadable(format!("not a ConversionReview: {e}")))?;
        let request = review.get("request").ok_or_else(|| unreadable("a ConversionReview without a request".into()))?;
        let uid = request.get("uid").cloned().unwrap_or(Value::Null);
        let desired = request
            .get("desiredAPIVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| unreadable("no desiredAPIVersion".into()))?
            .to_string();
        let objects = request.get("objects").and_then(Value::as_array).cloned().unwrap_or_default();
        let answer = |result: Value, converted: Vec<Value>| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": {"uid": uid, "result": result, "convertedObjects": converted}})
        };
        let failure = |message: String| answer(json!({"status": "Failure", "message": message}), Vec::new());
        let Some(route) = self.conversions().get(plugin).cloned() else {
            return Ok(failure(format!("operon: no plugin {plugin} converts here")));
        };
        let caps = handler::Caps {
            plugin,
            controller: &route.controller,
            slots: &route.slots,
            warned: &route.warned,
            consequence: "the API server fails the request that needed the conversion",
        };
        let places = handler::admit(self, &caps, &format!("/convert/{plugin}"))?;
        let module = route.controller.module();
        // The host's gate (shared with every reconcile), awaited without a
        // thread, within the deadline.
        let Ok(admitted) = tokio::time::timeout(DEADLINE, module.admit()).await else {
            return Ok(failure(format!(
                "plugin {plugin} could not convert: the host's guest calls were all busy for {DEADLINE:?}"
            )));
        };
        let span = tracing::debug_span!("conversion", plugin = %plugin, desired = %desired);
        let called = handler::on_own_thread(places, span, move || admitted.convert(&objects, &desired, DEADLINE)).await;
        Ok(match called {
            Ok(Ok(converted)) => answer(json!({"status": "Success"}), converted),
            Ok(Err(refused)) => failure(format!("plugin {plugin} refused the conversion: {refused}")),
            Err(e) => failure(format!("plugin {plugin} could not convert: {e}")),
        })
    }
}
