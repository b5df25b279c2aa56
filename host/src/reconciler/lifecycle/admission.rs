//! The plugin's webhooks as the plan says: registered while a version that
//! exports admission serves, removed otherwise; and its CRD's conversion
//! webhook while it is granted conversion.

use super::*;
use crate::webhook::{FailurePolicy as HookPolicy, Registration};

impl Lifecycle {
    /// Register, re-register or remove the plugin's webhooks as the plan
    /// says (a rebuilt controller is registered again: the routes call it).
    #[allow(clippy::too_many_arguments, reason = "one step's observations, passed once")]
    pub(super) async fn sync_admission(
        &self,
        key: &PluginKey,
        plugin: &Arc<Mutex<Plugin>>,
        leadership: &Leadership,
        observed: &Observed,
        settings: Option<&Settings>,
        plan: &Plan,
        rebuilt: bool,
    ) -> Result<(), StepError> {
        let Some(webhooks) = self.manager.webhooks() else { return Ok(()) };
        let (controller, registered) = {
            let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            (p.controller.clone(), p.admission.clone())
        };
        let want = match (plan.admission, &controller, &observed.spec, settings) {
            (true, Some(c), Ok(spec), Some(s)) => {
                spec.admission.as_ref().map(|a| registration(key, a, s, c, leadership))
            }
            _ => None,
        };
        match want {
            Some(reg) => {
                let fingerprint = format!("{:?}|{}", reg, reg.controller.module().info().digest);
                if registered.as_deref() == Some(fingerprint.as_str()) && !rebuilt {
                    return Ok(());
                }
                match webhooks.register(reg).await {
                    Ok(()) => {
                        let name = key.webhook_name(&self.name(key));
                        let new = registered.is_none();
                        {
                            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                            p.admission = Some(fingerprint);
                            p.admission_refused = None;
                        }
                        if new {
                            self.event(
                                key,
                                leadership,
                                false,
                                "AdmissionRegistered",
                                &format!(
                                    "validating and mutating webhooks operon-{name} serve {}",
                                    controller.map(|c| c.manifest().for_kind.to_string()).unwrap_or_default()
                                ),
                            );
                        }
                        Ok(())
                    }
                    Err(
                        e @ (crate::webhook::Error::NoAdmission { .. } | crate::webhook::Error::InvalidPlugin { .. }),
                    ) => {
                        let message = e.to_string();
                        let told =
                            plugin.lock().unwrap_or_else(|e| e.into_inner()).admission_refused.replace(message.clone());
                        if told.as_deref() != Some(message.as_str()) {
                            self.event(key, leadership, true, "AdmissionRefused", &message);
                        }
                        Ok(())
                    }
                    Err(e) => Err(StepError::Admission(e)),
                }
            }
            None => {
                if registered.is_some() {
                    let name = key.webhook_name(&self.name(key));
                    match webhooks.unregister(&name, leadership.is_leading()).await {
                        Ok(()) => plugin.lock().unwrap_or_else(|e| e.into_inner()).admission = None,
                        Err(e) => return Err(StepError::Admission(e)),
                    }
                }
                Ok(())
            }
        }
    }
}

impl Lifecycle {
    /// Serve the `for` CRD's conversion while the Reconciler is granted it
    /// and its controller runs; give the CRD its settings back otherwise.
    pub(super) async fn sync_conversion(
        &self,
        key: &PluginKey,
        plugin: &Arc<Mutex<Plugin>>,
        leadership: &Leadership,
        observed: &Observed,
    ) -> Result<(), StepError> {
        let Some(webhooks) = self.manager.webhooks() else { return Ok(()) };
        let (controller, registered) = {
            let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            (p.controller.clone(), p.conversion.clone())
        };
        let granted = matches!(&observed.spec, Ok(spec) if spec.grants.conversion) && observed.object.is_some();
        let name = key.webhook_name(&self.name(key));
        let leading = leadership.is_leading();
        match controller.filter(|_| granted) {
            Some(controller) => {
                let fingerprint = format!("{}|{leading}", controller.module().info().digest);
                if registered.as_deref() == Some(fingerprint.as_str()) {
                    return Ok(());
                }
                // A refusal that only time can lift (the holder goes) is
                // asked again now and then, not at every step.
                let wait = plugin.lock().unwrap_or_else(|e| e.into_inner()).conversion_refused.as_ref().map(|r| r.1);
                if wait.is_some_and(|at| std::time::Instant::now() < at) {
                    return Ok(());
                }
                let kind = controller.module().manifest().for_kind.clone();
                let client = self.manager.client().clone();
                let holds = move |holder: String| async move { holds_conversion(&client, &holder).await };
                let fence = leading.then(|| leadership.fence());
                match webhooks.register_conversion(&name, controller, fence.as_ref(), holds).await {
                    Ok(crd) => {
                        self.relist_converted(&kind);
                        let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                        if p.conversion.is_none() && leading {
                            drop(p);
                            self.event(
                                key,
                                leadership,
                                false,
                                "ConversionRegistered",
                                &format!("{crd} converts through this plugin"),
                            );
                            p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                        }
                        p.conversion = Some(fingerprint);
                        p.conversion_refused = None;
                        Ok(())
                    }
                    Err(
                        e @ (crate::webhook::Error::NoConversion { .. }
                        | crate::webhook::Error::InvalidPlugin { .. }
                        | crate::webhook::Error::ConversionNotAllowed { .. }
                        | crate::webhook::Error::ConversionHeld { .. }),
                    ) => {
                        let message = e.to_string();
                        let again = std::time::Instant::now() + CONVERSION_ASK_AGAIN;
                        let told = plugin
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .conversion_refused
                            .replace((message.clone(), again));
                        if told.as_ref().map(|t| t.0.as_str()) != Some(message.as_str()) {
                            self.event(key, leadership, true, "ConversionRefused", &message);
                        }
                        Ok(())
                    }
                    Err(e) => Err(StepError::Conversion(e)),
                }
            }
            None => {
                plugin.lock().unwrap_or_else(|e| e.into_inner()).conversion_refused = None;
                if registered.is_some() {
                    let fence = leading.then(|| leadership.fence());
                    let kind =
                        webhooks.unregister_conversion(&name, fence.as_ref()).await.map_err(StepError::Conversion)?;
                    if let Some(kind) = kind {
                        self.relist_converted(&kind);
                    }
                    plugin.lock().unwrap_or_else(|e| e.into_inner()).conversion = None;
                }
                Ok(())
            }
        }
    }

    /// A CRD whose conversion changed is served through new storage, but a
    /// watch opened before keeps the old one (and its converter) until the
    /// API server tears it down, a second or more later: objects it delivers
    /// meanwhile stay in the cache shown the old way. So every watch of the
    /// kind starts over once the new storage serves (the API server's own
    /// CRD informer sees the change within milliseconds).
    pub(super) fn relist_converted(&self, kind: &Gvk) {
        self.manager.cache().relist(&kind.group, &kind.kind, CONVERSION_SETTLED);
    }
}

/// How long a refused conversion waits before it is asked again (the
/// plugin holding the CRD may have gone by then).
const CONVERSION_ASK_AGAIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Whether the plugin a CRD's record names (`c.<name>`) still holds its
/// conversion: its ClusterReconciler exists, is not being deleted and is
/// granted conversion of every namespace. Any other name (a namespaced
/// Reconciler's, which may no longer hold it) does not; an API server that
/// cannot say counts as holding, so nothing is taken on a guess.
async fn holds_conversion(client: &kube::Client, holder: &str) -> bool {
    let Some(name) = holder.strip_prefix("c.") else { return false };
    let api: kube::Api<ClusterReconciler> = kube::Api::all(client.clone());
    match api.get_opt(name).await {
        Ok(Some(r)) => {
            let grants = &r.spec.plugin.grants;
            r.metadata.deletion_timestamp.is_none() && grants.conversion && grants.namespaces.iter().any(|n| n == "*")
        }
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(holder, error = %e, "cannot tell whether the CRD's converter still holds it");
            true
        }
    }
}

/// How long after a CRD's conversion changed its watches start over.
const CONVERSION_SETTLED: std::time::Duration = std::time::Duration::from_secs(2);

/// The webhook registration for `spec.admission`: a Reconciler's webhooks
/// see its own namespace only; a ClusterReconciler's, its granted
/// namespaces (every namespace for `*`), on top of the selectors the spec
/// asks for.
pub(in crate::reconciler) fn registration(
    key: &PluginKey,
    admission: &super::super::crd::Admission,
    s: &Settings,
    controller: &ModuleController,
    leadership: &Leadership,
) -> Registration {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    let name = key.webhook_name(&controller.manifest().name);
    let mut reg = Registration::new(name, controller.clone(), leadership.clone());
    reg.failure_policy = match admission.failure_policy {
        super::super::crd::FailurePolicy::Fail => HookPolicy::Fail,
        super::super::crd::FailurePolicy::Ignore => HookPolicy::Ignore,
    };
    if let Some(t) = admission.timeout_seconds {
        reg.timeout = std::time::Duration::from_secs(t.clamp(1, 30) as u64);
    }
    reg.object_selector = admission.object_selector.clone();
    reg.namespace_selector = admission.namespace_selector.clone();
    match (&s.placement, &s.pipeline.scope.namespaces) {
        (super::super::grants::Placement::Namespaced(ns), _) => reg.scope_namespace = Some(ns.clone()),
        (super::super::grants::Placement::Cluster, Some(namespaces)) => {
            let mut selector = reg.namespace_selector.take().unwrap_or_default();
            selector.match_expressions.get_or_insert_with(Vec::new).push(LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(namespaces.clone()),
            });
            reg.namespace_selector = Some(selector);
        }
        // Every namespace (`*`, or a module file without --namespace).
        (super::super::grants::Placement::Cluster, None) => {}
    }
    reg
}
