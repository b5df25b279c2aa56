//! From a Reconciler's spec to what its controller is built with: scope,
//! grants, selector, limits, CPU budget, the client that makes its writes.
//! Everything here is checked before a controller exists; a spec that
//! cannot be acted on is an [`InvalidSpec`] naming the field.

use super::PluginKey;
use super::crd::{self, PluginSpec};
use super::grants::{self, Placement};
use crate::contract::Selector;
use crate::pipeline::{self, Probation};
use crate::runtime::{InstancePolicy, Limits};
use std::time::Duration;

/// Why a spec cannot be acted on, naming the field and what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidSpec {
    /// The object does not read as the CRD says.
    #[error("the spec cannot be read: {0}; fix it to match the CRD's schema")]
    Unreadable(String),
    /// `spec.selector` uses an operator the host does not know.
    #[error("spec.selector: unknown operator {0:?} (use In, NotIn, Exists or DoesNotExist)")]
    Selector(String),
    /// `spec.selector` does not parse.
    #[error("spec.selector: {0}")]
    SelectorSyntax(String),
    /// `spec.limits.cpu` above the host's ceiling.
    #[error(
        "spec.limits.cpu asks for {asked}, above the host's ceiling of {ceiling} CPU (--max-guest-cpu): ask for less, or raise the ceiling on the host"
    )]
    Cpu {
        /// What was asked (`no limit` or `N CPU`).
        asked: String,
        /// The host's ceiling.
        ceiling: f64,
    },
    /// `spec.limits.maxOutput` above the host's ceiling.
    #[error(
        "spec.limits.maxOutput asks for {asked} bytes, above the host's ceiling of {ceiling} bytes (--max-guest-output): ask for less, or raise the ceiling on the host"
    )]
    MaxOutput {
        /// What was asked, in bytes.
        asked: u64,
        /// The host's ceiling, in bytes.
        ceiling: u64,
    },
    /// `spec.grants.egress` or `spec.credentials` cannot be used.
    #[error("{0}")]
    Egress(String),
    /// `spec.module.verify` names a key that cannot be used.
    #[error(transparent)]
    Verify(super::verify::Error),
    /// Credentials without a ServiceAccount to read them as.
    #[error(
        "spec.credentials needs spec.serviceAccountName: the host reads a credential's Secret as the plugin's ServiceAccount, never as itself"
    )]
    CredentialsNeedServiceAccount,
    /// The host requires a ServiceAccount.
    #[error(
        "this host requires spec.serviceAccountName on every Reconciler (--require-service-account): name a ServiceAccount whose Role allows the plugin's writes"
    )]
    ServiceAccountRequired,
    /// A ClusterReconciler's ServiceAccount needs its namespace.
    #[error("a ClusterReconciler's serviceAccountName must be namespace/name, not {0:?}")]
    ServiceAccountName(String),
    /// `spec.grants.conversion` on a plugin that does not see every
    /// namespace: a CRD's conversion runs for every object of the kind.
    #[error(
        "spec.grants.conversion: {0}; a CRD's conversion runs for every object of the kind, in every namespace and for \
         every tenant, so only a ClusterReconciler granted every namespace (spec.grants.namespaces: [\"*\"]) may hold it"
    )]
    Conversion(&'static str),
    /// No client could be built for the ServiceAccount.
    #[error("cannot build a client impersonating {user}: {reason}")]
    Client {
        /// The user impersonated.
        user: String,
        /// Why.
        reason: String,
    },
}

/// What a controller is built with, derived from the spec.
#[derive(Clone)]
pub struct Settings {
    /// Where the plugin acts.
    pub placement: Placement,
    /// The module controller's settings (name filled in by the executor).
    pub pipeline: pipeline::Config,
    /// The sandbox limits modules are loaded with.
    pub limits: Limits,
    /// The client making its writes (`None`: the host's own).
    pub client: Option<kube::Client>,
    /// The ServiceAccount impersonated, if any (for messages).
    pub user: Option<String>,
    /// Everything above that a running controller depends on: a change
    /// rebuilds the controller.
    pub fingerprint: String,
}

/// Settings of the lifecycle that derivation needs.
pub struct Host<'a> {
    /// The cluster connection, for impersonating clients.
    pub kube_config: Option<&'a kube::Config>,
    /// Every module controller starts from these.
    pub pipeline: &'a pipeline::Config,
    /// Refuse namespaced Reconcilers without a ServiceAccount.
    pub require_service_account: bool,
    /// The most a Reconciler's `spec.limits.maxOutput` may ask, in bytes
    /// (`--max-guest-output`): a tenant must not make the host lift
    /// answers of any size into its memory.
    pub max_output: u64,
}

/// Derive the settings of `spec` for `key`.
///
/// # Errors
/// [`InvalidSpec`] naming the field.
pub fn derive(key: &PluginKey, spec: &PluginSpec, host: &Host<'_>) -> Result<Settings, InvalidSpec> {
    let placement = key.placement();
    if let Some(verify) = &spec.module.verify {
        let namespace = match &placement {
            Placement::Namespaced(ns) => Some(ns.as_str()),
            Placement::Cluster => None,
        };
        super::verify::check_spec(verify, namespace).map_err(InvalidSpec::Verify)?;
    }
    let labels = spec.selector.as_ref().map(label_selector).transpose()?;
    let annotations = spec
        .annotation_selector
        .as_ref()
        .map(|s| label_selector(&s.as_label_selector()))
        .transpose()
        .map_err(|e| InvalidSpec::SelectorSyntax(format!("spec.annotationSelector: {e}")))?;
    let selector = pipeline::ParentSelector::of(labels, annotations);
    let cpu = guest_cpu(spec, host.pipeline)?;
    let (client, user) = writer_client(&placement, spec, host)?;
    if spec.grants.conversion {
        match &placement {
            Placement::Namespaced(_) => return Err(InvalidSpec::Conversion("a Reconciler may not hold it")),
            Placement::Cluster if !spec.grants.namespaces.iter().any(|n| n == "*") => {
                return Err(InvalidSpec::Conversion(
                    "this ClusterReconciler's namespaces do not cover every namespace",
                ));
            }
            Placement::Cluster => {}
        }
    }
    let (scope, grants) = grants::controller_settings(&placement, &spec.grants);
    let base = host.pipeline.clone();
    let probation = Probation {
        calls: spec.rollback.probation_calls.unwrap_or(base.probation.calls),
        max_failures: spec.rollback.max_failures.unwrap_or(base.probation.max_failures),
    };
    let mut controller = base.controller.clone();
    if let Some(n) = spec.limits.max_concurrent_reconciles {
        controller.max_concurrent_reconciles = n.max(1) as usize;
    }
    host.pipeline.egress_allowed.permits(&spec.grants.egress).map_err(|e| InvalidSpec::Egress(e.to_string()))?;
    let egress = egress(spec, &placement, client.as_ref(), &host.pipeline.egress_allowed)?;
    let pipeline = pipeline::Config {
        name: None,
        controller,
        parent_selector: selector,
        guest_cpu: cpu,
        scope,
        grants,
        probation,
        egress,
        resync: spec.resync_period_seconds.map(|s| Duration::from_secs(s.into())),
        synced: spec.synced_condition.unwrap_or(true),
        ..base
    };
    let limits = limits(spec);
    if limits.max_output as u64 > host.max_output {
        return Err(InvalidSpec::MaxOutput { asked: limits.max_output as u64, ceiling: host.max_output });
    }
    let fingerprint = serde_json::to_string(&(
        &spec.grants,
        &spec.limits,
        &spec.rollback,
        &spec.service_account_name,
        &spec.selector,
        &spec.credentials,
        &spec.resync_period_seconds,
        &spec.synced_condition,
        format!("{placement:?}"),
    ))
    .unwrap_or_default();
    Ok(Settings { placement, pipeline, limits, client, user, fingerprint })
}

/// The controller's egress from `spec.grants.egress` and
/// `spec.credentials`: `None` when it grants none.
fn egress(
    spec: &PluginSpec,
    placement: &Placement,
    client: Option<&kube::Client>,
    allowed: &crate::egress::grants::Allowed,
) -> Result<Option<std::sync::Arc<crate::egress::Settings>>, InvalidSpec> {
    use crate::egress::{Bounds, Settings, credentials::Credentials, grants::Rules};
    if spec.grants.egress.is_empty() && spec.credentials.is_empty() {
        return Ok(None);
    }
    let rules = Rules::compile(&spec.grants.egress).map_err(|e| InvalidSpec::Egress(e.to_string()))?;
    if !spec.credentials.is_empty() && client.is_none() {
        return Err(InvalidSpec::CredentialsNeedServiceAccount);
    }
    let namespace = match placement {
        Placement::Namespaced(ns) => Some(ns.as_str()),
        Placement::Cluster => None,
    };
    let credentials = Credentials::compile(&spec.credentials, namespace, client.cloned())
        .map_err(|e| InvalidSpec::Egress(e.to_string()))?;
    Ok(Some(std::sync::Arc::new(Settings { rules, credentials, bounds: Bounds::default(), allowed: allowed.clone() })))
}

/// Sandbox limits from the spec. The instance policy is the runtime's to
/// decide ([`InstancePolicy::Auto`]: WASI and large modules are pooled)
/// unless the spec chooses.
pub fn limits(spec: &PluginSpec) -> Limits {
    let mut limits = Limits::default();
    if let Some(t) = spec.limits.timeout.as_deref().and_then(parse_duration) {
        limits.timeout = t.min(Duration::from_secs(60));
    }
    if let Some(m) = spec.limits.memory.as_deref().and_then(parse_quantity) {
        limits.memory = m;
    }
    if let Some(m) = spec.limits.max_output.as_deref().and_then(parse_quantity) {
        limits.max_output = usize::try_from(m).unwrap_or(usize::MAX);
    }
    limits.instance_policy = match spec.limits.instance_policy {
        Some(crd::InstancePolicy::Fresh) => InstancePolicy::Fresh,
        Some(crd::InstancePolicy::Pooled) => InstancePolicy::Pooled,
        None => InstancePolicy::Auto,
    };
    limits
}

/// The controller's guest CPU budget: `spec.limits.cpu` within the host's
/// ceiling, else the host's default. (The schema refuses what does not
/// parse.)
///
/// # Errors
/// [`InvalidSpec::Cpu`] above the ceiling.
pub fn guest_cpu(spec: &PluginSpec, host: &pipeline::Config) -> Result<f64, InvalidSpec> {
    let Some(asked) = spec.limits.cpu.as_deref().and_then(pipeline::parse_cpu) else {
        return Ok(host.guest_cpu);
    };
    let ceiling = host.guest_cpu_max;
    if ceiling > 0.0 && (asked == 0.0 || asked > ceiling) {
        let asked = if asked == 0.0 { "no limit".to_string() } else { format!("{asked} CPU") };
        return Err(InvalidSpec::Cpu { asked, ceiling });
    }
    Ok(asked)
}

/// The client that makes the plugin's writes: the host's, or one
/// impersonating the Reconciler's ServiceAccount.
fn writer_client(
    placement: &Placement,
    spec: &PluginSpec,
    host: &Host<'_>,
) -> Result<(Option<kube::Client>, Option<String>), InvalidSpec> {
    let user = match (&spec.service_account_name, placement) {
        (None, Placement::Namespaced(_)) if host.require_service_account => {
            return Err(InvalidSpec::ServiceAccountRequired);
        }
        (None, _) => return Ok((None, None)),
        (Some(sa), Placement::Namespaced(ns)) => format!("system:serviceaccount:{ns}:{sa}"),
        (Some(sa), Placement::Cluster) => match sa.split_once('/') {
            Some((ns, name)) => format!("system:serviceaccount:{ns}:{name}"),
            None => return Err(InvalidSpec::ServiceAccountName(sa.clone())),
        },
    };
    let Some(config) = host.kube_config else {
        return Err(InvalidSpec::Client {
            user,
            reason: "this host was started without a kube config to impersonate with".into(),
        });
    };
    let mut config = config.clone();
    config.auth_info.impersonate = Some(user.clone());
    kube::Client::try_from(config)
        .map(|c| (Some(c), Some(user.clone())))
        .map_err(|e| InvalidSpec::Client { user, reason: e.to_string() })
}

/// `500ms`, `2s`.
fn parse_duration(text: &str) -> Option<Duration> {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    text.strip_suffix('s')?.parse().ok().map(Duration::from_secs)
}

/// A memory quantity as Kubernetes writes it with binary suffixes (`64Mi`,
/// `1Gi`, `512Ki`, or bytes), in bytes.
pub fn parse_quantity(text: &str) -> Option<u64> {
    let (digits, shift) = match text {
        t if t.ends_with("Ki") => (&t[..t.len() - 2], 10),
        t if t.ends_with("Mi") => (&t[..t.len() - 2], 20),
        t if t.ends_with("Gi") => (&t[..t.len() - 2], 30),
        t => (t, 0),
    };
    digits.parse::<u64>().ok()?.checked_shl(shift)
}

/// A Kubernetes `LabelSelector` as the contract's [`Selector`].
///
/// # Errors
/// An operator the selector syntax does not know, or a malformed selector.
pub fn label_selector(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Result<Selector, InvalidSpec> {
    let mut parts: Vec<String> = s.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => return Err(InvalidSpec::Selector(other.to_string())),
        });
    }
    Selector::parse(&parts.join(",")).map_err(|e| InvalidSpec::SelectorSyntax(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_should_parse_the_spec_and_leave_the_policy_to_the_runtime() {
        let mut spec = PluginSpec::default();
        spec.limits.timeout = Some("250ms".into());
        spec.limits.memory = Some("128Mi".into());
        let l = limits(&spec);
        assert_eq!(
            (l.timeout, l.memory, l.instance_policy),
            (Duration::from_millis(250), 128 << 20, InstancePolicy::Auto),
            "the runtime resolves Auto from the module's imports and size, for Reconcilers and files alike"
        );
        spec.limits.instance_policy = Some(crd::InstancePolicy::Fresh);
        assert_eq!(limits(&spec).instance_policy, InstancePolicy::Fresh, "unless the spec says");
        spec.limits.timeout = Some("600s".into());
        assert_eq!(limits(&spec).timeout, Duration::from_secs(60), "capped");
    }

    #[test]
    fn the_cpu_budget_should_come_from_the_spec_within_the_hosts_ceiling() {
        let mut spec = PluginSpec::default();
        let host = pipeline::Config { guest_cpu: 0.25, guest_cpu_max: 2.0, ..Default::default() };
        assert_eq!(guest_cpu(&spec, &host), Ok(0.25));
        spec.limits.cpu = Some("100m".into());
        assert_eq!(guest_cpu(&spec, &host), Ok(0.1));
        spec.limits.cpu = Some("2".into());
        assert_eq!(guest_cpu(&spec, &host), Ok(2.0), "up to the ceiling");
        for above in ["2001m", "0"] {
            spec.limits.cpu = Some(above.into());
            let refused = guest_cpu(&spec, &host).unwrap_err().to_string();
            assert!(refused.contains("above the host's ceiling of 2 CPU (--max-guest-cpu)"), "{refused}");
        }
        let unbounded = pipeline::Config { guest_cpu_max: 0.0, ..host };
        assert_eq!(guest_cpu(&spec, &unbounded), Ok(0.0), "0: no limit, where the host has no ceiling");
    }

    /// Conversion of a CRD runs for every object of the kind, in every
    /// namespace: only a ClusterReconciler granted every namespace may hold
    /// it, whatever the CRD's schema let through.
    #[test]
    fn conversion_should_be_granted_only_to_a_cluster_reconciler_of_every_namespace() {
        let pipeline = pipeline::Config::default();
        let host = Host { kube_config: None, pipeline: &pipeline, require_service_account: false, max_output: 4 << 20 };
        let mut spec = PluginSpec::default();
        spec.grants.conversion = true;
        let tenant = PluginKey::Reconciler(crate::cache::ObjectKey::new(Some("team-a"), "converter"));
        let refused = derive(&tenant, &spec, &host).err().unwrap().to_string();
        assert!(refused.contains("spec.grants.conversion") && refused.contains("ClusterReconciler"), "{refused}");
        let cluster = PluginKey::ClusterReconciler("converter".into());
        spec.grants.namespaces = vec!["team-a".into(), "team-b".into()];
        let refused = derive(&cluster, &spec, &host).err().unwrap().to_string();
        assert!(refused.contains("spec.grants.conversion") && refused.contains("namespaces"), "{refused}");
        spec.grants.namespaces = vec!["*".into()];
        assert!(derive(&cluster, &spec, &host).is_ok(), "a ClusterReconciler of every namespace may convert");
    }

    #[test]
    fn the_output_cap_should_come_from_the_spec_within_the_hosts_ceiling() {
        let key = PluginKey::Reconciler(crate::cache::ObjectKey::new(Some("shop"), "webapp"));
        let pipeline = pipeline::Config::default();
        let host =
            Host { kube_config: None, pipeline: &pipeline, require_service_account: false, max_output: 16 << 20 };
        let mut spec = PluginSpec::default();
        assert_eq!(derive(&key, &spec, &host).map(|s| s.limits.max_output), Ok(4 << 20), "4Mi by default");
        spec.limits.max_output = Some("16Mi".into());
        assert_eq!(derive(&key, &spec, &host).map(|s| s.limits.max_output), Ok(16 << 20), "up to the ceiling");
        spec.limits.max_output = Some("17Mi".into());
        let refused = derive(&key, &spec, &host).err().unwrap().to_string();
        assert!(refused.contains("spec.limits.maxOutput") && refused.contains("--max-guest-output"), "{refused}");
    }
}
