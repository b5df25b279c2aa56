//! The `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration`
//! of one plugin: built from its module's `for` kind and its settings,
//! written with server-side apply (field manager `operon`), deleted with it.
//!
//! Each configuration is named `operon-<plugin>` and holds one webhook,
//! `validate.<plugin>.operon.dev` or `mutate.<plugin>.operon.dev`, with one
//! rule: `CREATE` and `UPDATE` of the main resource (never `<plural>/status`,
//! so status writes of the reconciler never reach the guest; deletes are not
//! sent either, so a broken guest under `Fail` cannot block cleanup).

use super::{Endpoint, Error, FailurePolicy, Hook};
use crate::contract::Gvk;
use crate::leader::Fence;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use std::collections::BTreeMap;

/// The field manager of the configurations.
pub(super) const FIELD_MANAGER: &str = "operon";
/// The label every configuration carries, with the plugin's name.
pub(super) const PLUGIN_LABEL: &str = "operon.dev/plugin";
/// The annotation holding a hash of what the host applied: a configuration
/// whose annotation differs from what the host would apply now was changed
/// by someone else (or is stale) and is applied again.
pub(super) const APPLIED_ANNOTATION: &str = "operon.dev/applied";

/// What the configurations say about a plugin: the plain-data part of a
/// [`Plugin`](super::Plugin).
pub(super) struct Settings<'a> {
    pub name: &'a str,
    pub failure_policy: FailurePolicy,
    pub timeout: std::time::Duration,
    pub namespace_selector: Option<&'a LabelSelector>,
    pub object_selector: Option<&'a LabelSelector>,
    pub scope_namespace: Option<&'a str>,
}

/// Where the configurations point.
pub(super) struct Target<'a> {
    pub endpoint: &'a Endpoint,
    pub bound_port: u16,
    pub ca_bundle: Option<&'a [u8]>,
}

/// `operon-<plugin>`.
pub(super) fn name(plugin: &str) -> String {
    format!("operon-{plugin}")
}

/// Apply both configurations of `plugin`, each only while `fence` (the
/// plugin's leadership) is open just before it is sent: the decision to
/// write may be older than the lease.
pub(super) async fn apply(
    client: &kube::Client,
    plugin: &Settings<'_>,
    kind: &Gvk,
    plural: &str,
    namespaced: bool,
    target: &Target<'_>,
    fence: &Fence,
) -> Result<(), Error> {
    let (validating, mutating) = build(plugin, kind, plural, namespaced, target);
    let name = name(plugin.name);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let fenced = |source| Error::NotLeading { plugin: plugin.name.to_string(), source };
    fence.check().map_err(fenced)?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&name, &params, &Patch::Apply(&validating))
        .await
        .map_err(|source| Error::Api {
            action: "applying",
            resource: "ValidatingWebhookConfiguration",
            name: name.clone(),
            source,
        })?;
    fence.check().map_err(fenced)?;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&name, &params, &Patch::Apply(&mutating))
        .await
        .map_err(|source| Error::Api { action: "applying", resource: "MutatingWebhookConfiguration", name, source })?;
    Ok(())
}

/// Delete both configurations of `plugin`; absent ones are fine. With a
/// `fence`, each delete is sent only while it is open.
pub(super) async fn delete(client: &kube::Client, plugin: &str, fence: Option<&Fence>) -> Result<(), Error> {
    let name = name(plugin);
    let check = || match fence {
        Some(fence) => fence.check().map_err(|source| Error::NotLeading { plugin: plugin.to_string(), source }),
        None => Ok(()),
    };
    check()?;
    gone(Api::<ValidatingWebhookConfiguration>::all(client.clone()).delete(&name, &DeleteParams::default()).await)
        .map_err(|source| Error::Api {
            action: "deleting",
            resource: "ValidatingWebhookConfiguration",
            name: name.clone(),
            source,
        })?;
    check()?;
    gone(Api::<MutatingWebhookConfiguration>::all(client.clone()).delete(&name, &DeleteParams::default()).await)
        .map_err(|source| Error::Api { action: "deleting", resource: "MutatingWebhookConfiguration", name, source })?;
    Ok(())
}

/// A delete's result, with "not found" as success.
fn gone<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The two configurations, as they are applied.
pub(super) fn build(
    plugin: &Settings<'_>,
    kind: &Gvk,
    plural: &str,
    namespaced: bool,
    target: &Target<'_>,
) -> (ValidatingWebhookConfiguration, MutatingWebhookConfiguration) {
    let metadata = ObjectMeta {
        name: Some(name(plugin.name)),
        labels: Some(BTreeMap::from([
            ("app.kubernetes.io/managed-by".to_string(), "operon".to_string()),
            (PLUGIN_LABEL.to_string(), plugin.name.to_string()),
        ])),
        ..Default::default()
    };
    let rules = Some(vec![RuleWithOperations {
        api_groups: Some(vec![kind.group.clone()]),
        api_versions: Some(vec![kind.version.clone()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        // The main resource only: `webapps`, not `webapps/status`.
        resources: Some(vec![plural.to_string()]),
        scope: Some(if namespaced { "Namespaced" } else { "Cluster" }.into()),
    }]);
    let namespace_selector = namespace_selector(plugin);
    let timeout = Some(plugin.timeout.as_secs() as i32);
    let failure_policy = Some(plugin.failure_policy.as_str().to_string());
    let side_effects = "None".to_string();
    let versions = vec!["v1".to_string()];

    let validating = ValidatingWebhookConfiguration {
        metadata: metadata.clone(),
        webhooks: Some(vec![ValidatingWebhook {
            name: webhook_name(Hook::Validate, plugin.name),
            client_config: client_config(Hook::Validate, plugin.name, target),
            rules: rules.clone(),
            failure_policy: failure_policy.clone(),
            match_policy: Some("Equivalent".into()),
            namespace_selector: namespace_selector.clone(),
            object_selector: plugin.object_selector.cloned(),
            side_effects: side_effects.clone(),
            timeout_seconds: timeout,
            admission_review_versions: versions.clone(),
            match_conditions: None,
        }]),
    };
    let mutating = MutatingWebhookConfiguration {
        metadata,
        webhooks: Some(vec![MutatingWebhook {
            name: webhook_name(Hook::Mutate, plugin.name),
            client_config: client_config(Hook::Mutate, plugin.name, target),
            rules,
            failure_policy,
            match_policy: Some("Equivalent".into()),
            namespace_selector,
            object_selector: plugin.object_selector.cloned(),
            side_effects,
            timeout_seconds: timeout,
            admission_review_versions: versions,
            reinvocation_policy: Some("Never".into()),
            match_conditions: None,
        }]),
    };
    let mut pair = (validating, mutating);
    let hash = applied_hash(&pair);
    for metadata in [&mut pair.0.metadata, &mut pair.1.metadata] {
        metadata.annotations = Some(BTreeMap::from([(APPLIED_ANNOTATION.to_string(), hash.clone())]));
    }
    pair
}

/// A hash of the two configurations' content (before the annotation).
fn applied_hash(pair: &(ValidatingWebhookConfiguration, MutatingWebhookConfiguration)) -> String {
    let text = serde_json::to_string(pair).unwrap_or_default();
    crate::runtime::digest(text.as_bytes()).trim_start_matches("sha256:").chars().take(16).collect()
}

/// The annotation the configurations of these settings carry.
pub(super) fn expected_hash(
    plugin: &Settings<'_>,
    kind: &Gvk,
    plural: &str,
    namespaced: bool,
    target: &Target<'_>,
) -> String {
    let (validating, _) = build(plugin, kind, plural, namespaced, target);
    validating.metadata.annotations.and_then(|a| a.get(APPLIED_ANNOTATION).cloned()).unwrap_or_default()
}

/// `validate.<plugin>.operon.dev`: the name the API server puts in front of
/// a denial (`admission webhook "validate.webapp.operon.dev" denied the
/// request: ...`).
pub(super) fn webhook_name(hook: Hook, plugin: &str) -> String {
    format!("{}.{plugin}.operon.dev", hook.as_str())
}

fn client_config(hook: Hook, plugin: &str, target: &Target<'_>) -> WebhookClientConfig {
    client_config_at(&hook.path(plugin), target)
}

/// Where the API server calls `path` of this server (admission
/// configurations and CRD conversion share the shape).
pub(super) fn client_config_at(path: &str, target: &Target<'_>) -> WebhookClientConfig {
    let path = path.to_string();
    let ca_bundle = target.ca_bundle.map(|pem| ByteString(pem.to_vec()));
    match target.endpoint {
        Endpoint::Url { host, port } => {
            let host = if host.contains(':') { format!("[{host}]") } else { host.clone() };
            let port = port.unwrap_or(target.bound_port);
            WebhookClientConfig { url: Some(format!("https://{host}:{port}{path}")), service: None, ca_bundle }
        }
        Endpoint::Service { namespace, name, port } => WebhookClientConfig {
            url: None,
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path),
                port: Some(i32::from(*port)),
            }),
            ca_bundle,
        },
    }
}

/// The plugin's namespace selector, narrowed to its scope namespace (a
/// namespaced Reconciler acts only in its own).
fn namespace_selector(plugin: &Settings<'_>) -> Option<LabelSelector> {
    let Some(scope) = plugin.scope_namespace else { return plugin.namespace_selector.cloned() };
    let mut selector = plugin.namespace_selector.cloned().unwrap_or_default();
    selector.match_expressions.get_or_insert_with(Vec::new).push(LabelSelectorRequirement {
        key: "kubernetes.io/metadata.name".into(),
        operator: "In".into(),
        values: Some(vec![scope.to_string()]),
    });
    Some(selector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A kube client whose API server answers every request with an empty
    /// configuration of the kind asked for, and counts them.
    fn counting_client() -> (kube::Client, Arc<AtomicUsize>) {
        let sent = Arc::new(AtomicUsize::new(0));
        let counted = sent.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            counted.fetch_add(1, Ordering::SeqCst);
            let kind = if request.uri().path().contains("/mutatingwebhookconfigurations") {
                "MutatingWebhookConfiguration"
            } else {
                "ValidatingWebhookConfiguration"
            };
            let body = serde_json::to_vec(&serde_json::json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": "operon-webapp"}
            }))
            .unwrap();
            let response = http::Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(body))
                .unwrap();
            async move { Ok::<_, std::convert::Infallible>(response) }
        });
        (kube::Client::new(service, "default"), sent)
    }

    /// The keeper decides to write while this replica leads; the lease is
    /// lost before the write goes: nothing is sent, and the error says so.
    #[tokio::test]
    async fn a_write_decided_while_leading_is_not_sent_once_leadership_is_lost() {
        let (client, sent) = counting_client();
        let (leading, rx) = tokio::sync::watch::channel(true);
        let fence = Fence::new(rx, "operon-system/webapp");
        let endpoint = Endpoint::default();
        let target = Target { endpoint: &endpoint, bound_port: 9443, ca_bundle: None };
        let settings = Settings {
            name: "webapp",
            failure_policy: FailurePolicy::Fail,
            timeout: Duration::from_secs(5),
            namespace_selector: None,
            object_selector: None,
            scope_namespace: None,
        };
        let kind = Gvk::new("example.operon.dev", "v1alpha1", "WebApp");
        assert!(fence.is_open(), "decided while leading");
        leading.send_replace(false);
        let refused = apply(&client, &settings, &kind, "webapps", true, &target, &fence).await.unwrap_err();
        assert!(matches!(refused, Error::NotLeading { .. }), "{refused}");
        assert!(refused.to_string().contains("operon-system/webapp"), "{refused}");
        let refused = delete(&client, "webapp", Some(&fence)).await.unwrap_err();
        assert!(matches!(refused, Error::NotLeading { .. }), "{refused}");
        assert_eq!(sent.load(Ordering::SeqCst), 0, "a request left a replica that no longer leads");
        // Leading again, both configurations are written.
        leading.send_replace(true);
        apply(&client, &settings, &kind, "webapps", true, &target, &fence).await.unwrap();
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

    fn build_for(
        name: &str,
        failure_policy: FailurePolicy,
        scope_namespace: Option<&str>,
        endpoint: &Endpoint,
    ) -> (ValidatingWebhookConfiguration, MutatingWebhookConfiguration) {
        let target = Target { endpoint, bound_port: 9443, ca_bundle: Some(b"PEM") };
        let settings = Settings {
            name,
            failure_policy,
            timeout: Duration::from_secs(5),
            namespace_selector: None,
            object_selector: None,
            scope_namespace,
        };
        build(&settings, &Gvk::new("example.operon.dev", "v1alpha1", "WebApp"), "webapps", true, &target)
    }

    #[test]
    fn configurations_should_cover_the_main_resource_only() {
        let (validating, mutating) = build_for("webapp", FailurePolicy::Fail, None, &Endpoint::default());
        let hook = &validating.webhooks.as_ref().unwrap()[0];
        assert_eq!(hook.name, "validate.webapp.operon.dev");
        let rule = &hook.rules.as_ref().unwrap()[0];
        assert_eq!(rule.resources.as_deref(), Some(&["webapps".to_string()][..]), "never webapps/status");
        assert_eq!(rule.operations.as_deref(), Some(&["CREATE".to_string(), "UPDATE".to_string()][..]));
        assert_eq!(rule.api_groups.as_deref(), Some(&["example.operon.dev".to_string()][..]));
        assert_eq!(hook.client_config.url.as_deref(), Some("https://127.0.0.1:9443/validate/webapp"));
        assert_eq!(hook.client_config.ca_bundle, Some(ByteString(b"PEM".to_vec())));
        assert_eq!(hook.side_effects, "None");
        assert_eq!(hook.timeout_seconds, Some(5));
        let m = &mutating.webhooks.as_ref().unwrap()[0];
        assert_eq!(m.client_config.url.as_deref(), Some("https://127.0.0.1:9443/mutate/webapp"));
        assert_eq!(validating.metadata.name.as_deref(), Some("operon-webapp"));
        assert_eq!(validating.metadata.labels.as_ref().unwrap()[PLUGIN_LABEL], "webapp");
    }

    #[test]
    fn configurations_should_carry_the_failure_policy_and_scope() {
        let service = Endpoint::Service { namespace: "operon".into(), name: "operon-webhooks".into(), port: 443 };
        for policy in [FailurePolicy::Fail, FailurePolicy::Ignore] {
            let (validating, _) = build_for("shop.webapp", policy, Some("shop"), &service);
            let hook = &validating.webhooks.unwrap()[0];
            assert_eq!(hook.failure_policy.as_deref(), Some(policy.as_str()));
            let service = hook.client_config.service.as_ref().unwrap();
            assert_eq!(service.path.as_deref(), Some("/validate/shop.webapp"));
            assert_eq!(service.port, Some(443));
            let selector = hook.namespace_selector.as_ref().unwrap();
            let requirement = &selector.match_expressions.as_ref().unwrap()[0];
            assert_eq!(requirement.key, "kubernetes.io/metadata.name");
            assert_eq!(requirement.values.as_deref(), Some(&["shop".to_string()][..]));
        }
    }

    #[test]
    fn ipv6_hosts_should_be_bracketed_in_urls() {
        let (validating, _) =
            build_for("webapp", FailurePolicy::Fail, None, &Endpoint::Url { host: "::1".into(), port: Some(8443) });
        let url = validating.webhooks.unwrap()[0].client_config.url.clone().unwrap();
        assert_eq!(url, "https://[::1]:8443/validate/webapp");
    }
}
