//! Conversion webhooks (contract 0.2): a plugin whose module exports
//! `convert` and whose ClusterReconciler is granted conversion serves its
//! `for` CRD's conversion at `POST /convert/<plugin>`, and the replica that
//! leads it points the CRD's `spec.conversion` there — keeping the CRD's
//! own settings in the annotation [`BEFORE`], and putting them back when
//! the plugin goes. Calls read the controller's module when they start, as
//! admission calls do, so a swap changes the converter atomically.
//!
//! **Conversion is a cluster-wide power**: every object of the kind, in
//! every namespace, goes through the converter. So the host points only
//! the CRDs its operator allows (`--conversion-allow`, [`Allowed`]), and
//! **the CRD itself records which plugin converts it** ([`CONVERTED_BY`]):
//! one converter per CRD is decided from that record, not from a replica's
//! memory, so replicas agree; a plugin gives the CRD back only while the
//! record names it, so a refused plugin's clean-up never strips the
//! holder's webhook. Both writes carry the CRD's resourceVersion: two
//! replicas racing for one CRD, one wins and the other reads again.

use super::handler::{self, Warned};
use super::{Answer, Error, Webhooks, config};
use crate::contract::Gvk;
use crate::leader::Fence;
use crate::pipeline::ModuleController;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The CRD annotation holding its `spec.conversion` from before a plugin
/// took it over (JSON).
pub const BEFORE: &str = "operon.dev/conversion-before";

/// The CRD annotation naming the plugin its conversion is pointed at (the
/// plugin's webhook name, `c.<ClusterReconciler>`): the one record of who
/// converts a CRD.
pub const CONVERTED_BY: &str = "operon.dev/converted-by";

/// The deadline of one conversion call: well under the API server's 30 s
/// for conversion webhooks.
const DEADLINE: Duration = Duration::from_secs(10);

type Crd = k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The CRDs whose conversion the host may point at a plugin
/// (`--conversion-allow`): CRD names (`gadgets.example.com`), every CRD of
/// a group (`*.example.com`), or `*`. None by default: conversion reaches
/// every tenant of a kind, so the operator names the kinds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed(Vec<String>);

impl Allowed {
    /// Every CRD (`operon dev`, tests).
    pub fn all() -> Allowed {
        Allowed(vec!["*".into()])
    }

    /// From the flag's patterns.
    ///
    /// # Errors
    /// [`BadAllowed`] for a pattern that is neither `*`, `*.group` nor a
    /// CRD name (`plural.group`).
    pub fn parse(patterns: &[String]) -> Result<Allowed, BadAllowed> {
        let mut out = Vec::new();
        for p in patterns.iter().map(|p| p.trim().to_ascii_lowercase()).filter(|p| !p.is_empty()) {
            let name = p.strip_prefix("*.").unwrap_or(&p);
            let valid = p == "*"
                || (name.contains('.')
                    && name
                        .split('.')
                        .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')));
            if !valid {
                return Err(BadAllowed(p));
            }
            out.push(p);
        }
        Ok(Allowed(out))
    }

    /// Whether the host may point `crd`'s conversion at a plugin.
    pub fn permits(&self, crd: &str) -> bool {
        self.0.iter().any(|p| {
            p == "*"
                || p == crd
                || p.strip_prefix("*.").is_some_and(|group| crd.split_once('.').is_some_and(|(_, g)| g == group))
        })
    }
}

/// A `--conversion-allow` pattern that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--conversion-allow {0:?} must be a CRD name (plural.group), *.group or *")]
pub struct BadAllowed(String);

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
    /// leads it), point its `for` CRD's conversion at it — unless the CRD's
    /// record names another plugin for which `holds` answers true (it
    /// still exists and is granted conversion). A record naming a plugin
    /// that no longer holds is taken over. The fence is checked again just
    /// before the write.
    ///
    /// # Errors
    /// [`Error::NoConversion`] when the module does not export `convert`;
    /// [`Error::ConversionNotAllowed`] when the host's operator does not
    /// allow the CRD; [`Error::ConversionHeld`] when another plugin holds
    /// it; [`Error::Discovery`] when its kind is not served; [`Error::Crd`]
    /// when the CRD cannot be read or written (a conflict with another
    /// replica's write included: the next attempt reads it again).
    pub async fn register_conversion<F, Fut>(
        &self,
        name: &str,
        controller: ModuleController,
        leading: Option<&Fence>,
        holds: F,
    ) -> Result<String, Error>
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = bool>,
    {
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
        if !self.shared.conversion_allowed.permits(&crd) {
            return Err(Error::ConversionNotAllowed { plugin: name.to_string(), crd });
        }
        let current = if leading.is_some() {
            let api: Api<Crd> = Api::all(self.shared.client.clone());
            let current =
                api.get(&crd).await.map_err(|source| Error::Crd { action: "reading", name: crd.clone(), source })?;
            if let Some(holder) = holder(&current).filter(|h| h != name)
                && holds(holder.clone()).await
            {
                return Err(Error::ConversionHeld { plugin: name.to_string(), crd, holder });
            }
            Some(current)
        } else {
            None
        };
        // The route before the CRD points at it: the API server never calls
        // a path that is not served.
        let slots = self.conversions().get(name).map_or_else(
            || Arc::new(tokio::sync::Semaphore::new(self.shared.max_concurrent_per_plugin)),
            |r| r.slots.clone(),
        );
        let route = Route { controller, crd: crd.clone(), slots, warned: Arc::default() };
        let previous = self.conversions_mut().insert(name.to_string(), route);
        if let (Some(current), Some(fence)) = (current, leading)
            && let Err(e) = self.point_crd(name, &current, fence).await
        {
            match previous {
                Some(previous) => self.conversions_mut().insert(name.to_string(), previous),
                None => self.conversions_mut().remove(name),
            };
            return Err(e);
        }
        tracing::info!(plugin = %name, crd = %crd, leading = leading.is_some(), "conversion webhook registered");
        Ok(crd)
    }

    /// Stop serving `name`'s conversion; with `leading` (the fence of the
    /// plugin's leadership), and while the CRD's record names it, give the
    /// CRD its own conversion settings back, the fence checked just before
    /// the write (a CRD another plugin holds is left as it is). Returns the kind it
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

    /// Point `current`'s conversion at `plugin`, recording it, on the
    /// resourceVersion read.
    async fn point_crd(&self, plugin: &str, current: &Crd, fence: &Fence) -> Result<(), Error> {
        let crd = current.metadata.name.clone().unwrap_or_default();
        let api: Api<Crd> = Api::all(self.shared.client.clone());
        let annotations = current.metadata.annotations.clone().unwrap_or_default();
        let mut recorded = json!({CONVERTED_BY: plugin});
        if !annotations.contains_key(BEFORE) {
            let before = current.spec.conversion.as_ref().map(|c| serde_json::to_value(c).unwrap_or_default());
            let before = before.unwrap_or_else(|| json!({"strategy": "None"}));
            recorded[BEFORE] = Value::String(before.to_string());
        }
        let patch = json!({
            "metadata": {"annotations": recorded, "resourceVersion": current.metadata.resource_version},
            "spec": {"conversion": {
                "strategy": "Webhook",
                "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": self.client_config(plugin)},
            }},
        });
        fence.check().map_err(|source| Error::NotLeading { plugin: plugin.into(), source })?;
        api.patch(&crd, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|source| Error::Crd {
            action: "pointing",
            name: crd.clone(),
            source,
        })?;
        Ok(())
    }

    /// Give `crd` its settings from before, if its record names `plugin`.
    async fn restore_crd(&self, plugin: &str, crd: &str, fence: &Fence) -> Result<(), Error> {
        let api: Api<Crd> = Api::all(self.shared.client.clone());
        let api_error = |source| Error::Crd { action: "restoring", name: crd.into(), source };
        let current = match api.get_opt(crd).await.map_err(api_error)? {
            Some(c) => c,
            None => return Ok(()),
        };
        if holder(&current).as_deref() != Some(plugin) {
            tracing::info!(plugin, crd, holder = ?holder(&current), "the CRD's conversion is not this plugin's: left as it is");
            return Ok(());
        }
        let annotations = current.metadata.annotations.clone().unwrap_or_default();
        let Some(before) = annotations.get(BEFORE) else { return Ok(()) };
        let mut before: Value = serde_json::from_str(before).unwrap_or_else(|_| json!({"strategy": "None"}));
        // A merge patch keeps what it does not name: the webhook goes
        // unless the settings from before had one.
        if before.get("webhook").is_none() {
            before["webhook"] = Value::Null;
        }
        let patch = json!({
            "metadata": {"annotations": {BEFORE: null, CONVERTED_BY: null},
                "resourceVersion": current.metadata.resource_version},
            "spec": {"conversion": before},
        });
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

/// The plugin a CRD's conversion is pointed at, as the CRD records it: its
/// [`CONVERTED_BY`] annotation, or — for a CRD pointed by a host that did
/// not write that record yet — the plugin in the path of the webhook it
/// points at, while [`BEFORE`] shows a plugin took it.
fn holder(crd: &Crd) -> Option<String> {
    let annotations = crd.metadata.annotations.as_ref();
    if let Some(h) = annotations.and_then(|a| a.get(CONVERTED_BY)) {
        return Some(h.clone());
    }
    if !annotations.is_some_and(|a| a.contains_key(BEFORE)) {
        return None;
    }
    let config = crd.spec.conversion.as_ref()?.webhook.as_ref()?.client_config.as_ref()?;
    let path = match (&config.url, &config.service) {
        (Some(url), _) => url::Url::parse(url).ok()?.path().to_string(),
        (None, Some(service)) => service.path.clone()?,
        (None, None) => return None,
    };
    path.strip_prefix("/convert/").map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_allow_list_should_name_crds_groups_or_everything() {
        let allowed = Allowed::parse(&["gadgets.example.com".into(), "*.stable.example.org".into()]).unwrap();
        assert!(allowed.permits("gadgets.example.com"));
        assert!(allowed.permits("widgets.stable.example.org"));
        assert!(!allowed.permits("certificates.cert-manager.io"));
        assert!(!allowed.permits("gadgets.other.stable.example.org"), "a group, not its subdomains");
        assert!(!Allowed::default().permits("gadgets.example.com"), "none by default");
        assert!(Allowed::parse(&["*".into()]).unwrap().permits("certificates.cert-manager.io"));
        assert!(Allowed::parse(&["gadgets".into()]).is_err());
        assert!(Allowed::parse(&["*.".into()]).is_err());
    }

    #[test]
    fn the_crds_record_should_name_who_converts_it() {
        let crd = |annotations: Value, url: Option<&str>| -> Crd {
            let mut v = json!({"metadata": {"name": "gadgets.example.com", "annotations": annotations},
                "spec": {"group": "example.com", "scope": "Namespaced", "versions": [],
                    "names": {"plural": "gadgets", "kind": "Gadget"}}});
            if let Some(url) = url {
                v["spec"]["conversion"] = json!({"strategy": "Webhook",
                    "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": url}}});
            }
            serde_json::from_value(v).unwrap()
        };
        assert_eq!(holder(&crd(json!({CONVERTED_BY: "c.a"}), None)).as_deref(), Some("c.a"));
        assert_eq!(holder(&crd(json!({}), Some("https://127.0.0.1:9443/convert/c.b"))), None, "not a plugin's");
        assert_eq!(
            holder(&crd(json!({BEFORE: "{}"}), Some("https://127.0.0.1:9443/convert/c.b"))).as_deref(),
            Some("c.b"),
            "pointed before the record existed"
        );
    }
}
