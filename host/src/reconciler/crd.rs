//! The `Reconciler` and `ClusterReconciler` resources (`operon.dev/v1alpha1`),
//! as Rust types. `deploy/crds/` is generated from them (`operon crds`), and
//! a test fails when the two drift apart.
//!
//! The schema carries the rules that span fields as CEL
//! (`x-kubernetes-validations`), so `kubectl apply` of a malformed
//! Reconciler is refused by the API server with a message naming the field.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A plugin: a WebAssembly module that reconciles one kind, in this
/// Reconciler's namespace only.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "operon.dev",
    version = "v1alpha1",
    kind = "Reconciler",
    namespaced,
    status = "ReconcilerStatus",
    shortname = "rec",
    category = "operon",
    derive = "PartialEq",
    derive = "Default",
    doc = "A reconciler plugin: a WebAssembly module that reconciles one kind within this namespace, with the grants and limits the host enforces.",
    printcolumn(name = "Kind", type_ = "string", json_path = ".status.kind", description = "The kind reconciled"),
    printcolumn(name = "Digest", type_ = "string", json_path = ".status.shortDigest", description = "The active module version"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Degraded", type_ = "string", json_path = ".status.conditions[?(@.type==\"Degraded\")].status", description = "True when a rollback or failing reconciles degrade it (the reason is in the condition)"),
    printcolumn(name = "Reconciles", type_ = "integer", json_path = ".status.reconciles"),
    printcolumn(name = "Errors", type_ = "integer", json_path = ".status.errors"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("!has(self.spec.grants) || !has(self.spec.grants.namespaces) || size(self.spec.grants.namespaces) == 0").message("spec.grants.namespaces is for ClusterReconcilers: a Reconciler acts only in its own namespace"),
    validation = Rule::new("!has(self.spec.grants) || !has(self.spec.grants.conversion) || !self.spec.grants.conversion").message("spec.grants.conversion is for ClusterReconcilers granted every namespace: a CRD's conversion runs for every object of the kind, in every namespace")
)]
#[serde(rename_all = "camelCase")]
pub struct ReconcilerSpec {
    #[serde(flatten)]
    pub plugin: PluginSpec,
}

/// A cluster-wide plugin: namespaces and cluster-scoped kinds only through
/// explicit grants.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "operon.dev",
    version = "v1alpha1",
    kind = "ClusterReconciler",
    status = "ReconcilerStatus",
    shortname = "crec",
    category = "operon",
    derive = "PartialEq",
    derive = "Default",
    doc = "A cluster-wide reconciler plugin: a WebAssembly module that reconciles one kind, in the namespaces and cluster-scoped kinds its grants allow.",
    printcolumn(name = "Kind", type_ = "string", json_path = ".status.kind", description = "The kind reconciled"),
    printcolumn(
        name = "Digest",
        type_ = "string",
        json_path = ".status.shortDigest",
        description = "The active module version"
    ),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(
        name = "Degraded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Degraded\")].status",
        description = "True when a rollback or failing reconciles degrade it (the reason is in the condition)"
    ),
    printcolumn(name = "Reconciles", type_ = "integer", json_path = ".status.reconciles"),
    printcolumn(name = "Errors", type_ = "integer", json_path = ".status.errors"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("!has(self.spec.grants) || !has(self.spec.grants.conversion) || !self.spec.grants.conversion || (has(self.spec.grants.namespaces) && '*' in self.spec.grants.namespaces)").message("spec.grants.conversion needs spec.grants.namespaces: ['*']: a CRD's conversion runs for every object of the kind, in every namespace")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReconcilerSpec {
    #[serde(flatten)]
    pub plugin: PluginSpec,
}

/// What both kinds of Reconciler say.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginSpec {
    /// Where the module comes from: exactly one source.
    pub module: ModuleSource,
    /// What the plugin may read and write. The module's manifest may ask for
    /// less, never more.
    #[serde(default)]
    pub grants: Grants,
    /// Sandbox limits.
    #[serde(default)]
    pub limits: Limits,
    /// How a new module version goes live.
    #[serde(default)]
    pub rollout: Rollout,
    /// When a new version counts as failed and is rolled back.
    #[serde(default)]
    pub rollback: Rollback,
    /// Stop reconciling (the module stays loaded; nothing is written).
    #[serde(default)]
    pub paused: bool,
    /// Reconcile only the parents whose labels match (several plugins
    /// sharing one kind, a canary on a few objects). Default: every parent
    /// in scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Reconcile only the parents whose annotations match, beside
    /// `selector` (a decorator that acts on the parents carrying an
    /// annotation, as Metacontroller's `annotationSelector`). A parent that
    /// stops matching while it holds the plugin's finalizer is finalized by
    /// the guest (a contract 0.2 module), then loses its children and
    /// parent metadata, then the finalizer. Default: every parent in scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<AnnotationSelector>,
    /// Reconcile every parent again this many seconds after its last
    /// successful reconcile, though nothing it watches changed
    /// (Metacontroller's `resyncPeriodSeconds`, controller-runtime's
    /// `SyncPeriod`): for a guest that reads what the host does not watch,
    /// such as an outside system through egress. Sooner when the guest asks
    /// to requeue sooner; spread by ±10% and by the controller's requeue
    /// budget. A parent that is gone is not resynced. Default: only when
    /// something changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604800))]
    pub resync_period_seconds: Option<u32>,
    /// Make every write of this plugin as this ServiceAccount (of the
    /// Reconciler's namespace; `namespace/name` for a ClusterReconciler), so
    /// Kubernetes RBAC bounds the plugin too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$') && size(self) <= 317").message("spec.serviceAccountName must be a ServiceAccount's name (namespace/name for a ClusterReconciler)"))]
    pub service_account_name: Option<String>,
    /// Serve the module's `validate`/`mutate` as admission webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// Secrets the module may use by name in its outbound calls: the host
    /// reads each with the plugin's ServiceAccount (required) and adds it
    /// to requests to the hosts listed; the module never sees the value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<crate::egress::credentials::Credential>,
    /// Write the host's `Synced` condition on each parent: `False` with the
    /// reason and message when a reconcile fails (the guest's failure, the
    /// sandbox's, a refused or failed write), `True` when one succeeds —
    /// so a parent whose own `Ready` is stale shows that its reconciles
    /// fail. Only on kinds whose CRD has a status subresource and a
    /// `status.conditions` list keyed by `type` (merged, never replacing
    /// the guest's conditions), as the plugin's ServiceAccount. Default
    /// true; `false` to leave parents' conditions to the guest alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_condition: Option<bool>,
}

/// A selector over annotations: `matchAnnotations` and `matchExpressions`
/// (`In`, `NotIn`, `Exists`, `DoesNotExist`), read as a `LabelSelector`
/// reads labels. Values must be label-like (no spaces or commas).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    /// Annotations that must have these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_annotations: Option<std::collections::BTreeMap<String, String>>,
    /// Requirements on annotations, ANDed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement>>,
}

impl AnnotationSelector {
    /// The same requirements in a `LabelSelector`'s shape (one parser and
    /// one overlap check serve both).
    pub fn as_label_selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: self.match_annotations.clone(),
            match_expressions: self.match_expressions.clone(),
        }
    }
}

/// Where a module's bytes come from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.configMap) ? 1 : 0) + (has(self.url) ? 1 : 0) + (has(self.oci) ? 1 : 0) + (has(self.path) ? 1 : 0) == 1").message("spec.module must set exactly one of configMap, url, oci, path"))]
pub struct ModuleSource {
    /// A ConfigMap in the Reconciler's namespace, the module in `binaryData`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,
    /// An HTTPS URL (plain HTTP only to loopback or in-cluster `*.svc`
    /// hosts), pinned by its SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<UrlSource>,
    /// An OCI artifact, pinned by its manifest digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
    /// A file on the host's own filesystem (development only: the host
    /// refuses it unless started with `--allow-module-paths`; watched for
    /// changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("spec.module.path must be an absolute path"))]
    pub path: Option<String>,
    /// Load the module only if it is signed by one of these keys: an OCI
    /// source by a cosign signature (the `sha256-<digest>.sig` artifact
    /// beside it), a URL source by a detached signature at the same URL
    /// with `.sig` added, a ConfigMap source by the key `<key>.sig` of the
    /// same ConfigMap, a path by the file `<path>.sig`. A module that fails
    /// is refused (`UntrustedModule`) and the version serving, if any,
    /// keeps serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<ModuleVerify>,
}

/// `spec.module.verify`: the keys a module must be signed by.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleVerify {
    /// Public keys (ECDSA P-256 in PEM, as `cosign generate-key-pair` or
    /// `operon sign --new-key` writes them); a signature by any one of
    /// them will do.
    #[x_kube(validation = Rule::new("size(self) > 0").message("spec.module.verify.keys must name at least one key"))]
    #[schemars(length(max = 16))]
    pub keys: Vec<VerifyKey>,
}

/// One key of `spec.module.verify.keys`: inline, or in a ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.pem) != has(self.configMap)").message("each of spec.module.verify.keys must set exactly one of pem, configMap"))]
pub struct VerifyKey {
    /// The public key itself: a `-----BEGIN PUBLIC KEY-----` block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pem: Option<String>,
    /// A ConfigMap holding the public key, read by the host when it
    /// fetches the module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<KeyConfigMap>,
}

/// `spec.module.verify.keys[].configMap`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyConfigMap {
    /// The ConfigMap's name.
    #[x_kube(validation = Rule::new("size(self) > 0").message("spec.module.verify.keys[].configMap.name must not be empty"))]
    pub name: String,
    /// The key in `data` holding the PEM.
    #[serde(default = "default_public_key")]
    pub key: String,
    /// Its namespace: a ClusterReconciler must name one; a Reconciler may
    /// name only its own (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn default_public_key() -> String {
    "cosign.pub".into()
}

/// `spec.module.configMap`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSource {
    /// The ConfigMap's name.
    #[x_kube(validation = Rule::new("size(self) > 0").message("spec.module.configMap.name must not be empty"))]
    pub name: String,
    /// The key in `binaryData` holding the module.
    #[serde(default = "default_key")]
    pub key: String,
}

fn default_key() -> String {
    "module.wasm".into()
}

/// `spec.module.url`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct UrlSource {
    /// Where to fetch the module.
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('http://')").message("spec.module.url.href must be an http(s) URL"))]
    pub href: String,
    /// The module's SHA-256, hex: what is fetched must match it.
    #[x_kube(validation = Rule::new("self.matches('^[0-9a-f]{64}$')").message("spec.module.url.sha256 must be 64 lowercase hex digits"))]
    pub sha256: String,
}

/// `spec.module.oci`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciSource {
    /// `registry/repository[:tag]`.
    #[x_kube(validation = Rule::new("size(self) > 0").message("spec.module.oci.reference must not be empty"))]
    pub reference: String,
    /// The manifest digest, `sha256:…`: what is pulled must match it.
    #[x_kube(validation = Rule::new("self.matches('^sha256:[0-9a-f]{64}$')").message("spec.module.oci.digest must be sha256: followed by 64 lowercase hex digits"))]
    pub digest: String,
}

/// A kind, without its version (as RBAC names kinds): `{group, kind}`.
/// `kind: "*"` grants every kind of the group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// Kind, or `*`.
    pub kind: String,
}

/// `spec.grants`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Grants {
    /// Kinds it may reconcile (the manifest's `for`).
    #[serde(default, rename = "for")]
    pub for_kinds: Vec<KindRef>,
    /// Kinds it may create, update and delete as children.
    #[serde(default)]
    pub owns: Vec<KindRef>,
    /// Kinds it may read (`host.get`/`host.list`, watches), besides those
    /// above.
    #[serde(default)]
    pub reads: Vec<KindRef>,
    /// ClusterReconciler only: namespaces it may act in (`*` for all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Whether it may write cluster-scoped kinds.
    #[serde(default)]
    pub cluster_scoped: bool,
    /// Whether it may adopt an existing object that has no controller owner.
    /// An object controlled by someone else is never taken over.
    #[serde(default)]
    pub adopt: bool,
    /// Whether it serves the conversion webhook of its `for` kind's CRD
    /// (a module exporting `convert`, contract 0.2): the host points the
    /// CRD's `spec.conversion` at it, and gives the CRD its own settings
    /// back when the Reconciler goes. A cluster-wide power: only a
    /// ClusterReconciler granted every namespace (`namespaces: ["*"]`) may
    /// hold it, only for CRDs the host allows (`--conversion-allow`), and
    /// one plugin per CRD.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conversion: bool,
    /// ClusterReconciler only: whether a namespaced parent's reference
    /// (`namespace/name`, a watch by reference) may name an object in
    /// another of the granted namespaces. Off by default: the author of a
    /// parent in one namespace would otherwise have the plugin read another
    /// namespace's objects for them. References from cluster-scoped parents
    /// and selectors reach only the granted namespaces either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cross_namespace_references: bool,
    /// Outbound HTTP the module may make (contract 0.2's `egress`), one
    /// entry per host; none by default. Names reach only public addresses:
    /// loopback, private and link-local ones only through an entry naming
    /// the address (docs/egress.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<crate::egress::grants::EgressGrant>,
}

/// `spec.limits`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Deadline of one guest call, e.g. `500ms`, `2s` (default 1s, at most 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(ms|s)$')").message("spec.limits.timeout must look like 500ms or 2s"))]
    pub timeout: Option<String>,
    /// Most memory one instance may use, e.g. `64Mi` (default 64Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(Ki|Mi|Gi)?$')").message("spec.limits.memory must look like 64Mi"))]
    pub memory: Option<String>,
    /// Guest time the module's calls may use, as a Kubernetes CPU quantity
    /// (`250m`: a quarter of a CPU, all its reconciles together; default the
    /// host's `--guest-cpu`; at most its `--max-guest-cpu`, 2 by default;
    /// `0`: no limit, only on a host without a ceiling). Past it,
    /// reconciles wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+m|[0-9]+([.][0-9]+)?)$')").message("spec.limits.cpu must look like 250m or 0.5"))]
    pub cpu: Option<String>,
    /// Most bytes of JSON one answer of the module may carry (an outcome's
    /// children, status and events together; an admission answer), e.g.
    /// `4Mi` (default 4Mi; at most the host's `--max-guest-output`, 64Mi by
    /// default). A larger answer is refused, and nothing of it written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(Ki|Mi|Gi)?$')").message("spec.limits.maxOutput must look like 4Mi"))]
    pub max_output: Option<String>,
    /// Reconciles of different objects at once (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub max_concurrent_reconciles: Option<u32>,
    /// `fresh` (a new instance per call) or `pooled` (reused instances;
    /// the default for large modules such as Python or JavaScript ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_policy: Option<InstancePolicy>,
}

/// `spec.limits.instancePolicy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum InstancePolicy {
    /// A new instance per call.
    Fresh,
    /// Reused instances from a pool.
    Pooled,
}

/// `spec.rollout`: how a new module version goes live.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Rollout {
    /// Replace the running version as soon as the new one loads.
    #[default]
    Immediate,
    /// Run the new version beside the live one on the same requests, apply
    /// nothing of it, and report where the two differ. Promote it by setting
    /// `immediate`.
    Shadow,
}

/// `spec.rollback`: when a new version is rolled back by itself.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollback {
    /// How many of a new version's first reconciles are watched (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub probation_calls: Option<u32>,
    /// How many of those may fail (trap, time out, exceed memory, return a
    /// refused outcome) before it is rolled back (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
}

/// `spec.admission`: validating and mutating webhooks from the module.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// `Fail` (deny when the guest cannot answer) or `Ignore` (allow).
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// The API server's webhook timeout in seconds (1–30, default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 30))]
    pub timeout_seconds: Option<i32>,
    /// Only objects in namespaces matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Only objects matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_selector: Option<LabelSelector>,
}

/// `spec.admission.failurePolicy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum FailurePolicy {
    /// Deny the request, naming the plugin.
    #[default]
    Fail,
    /// Allow the request (counted in the metrics).
    Ignore,
}

/// What the host reports about a Reconciler.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReconcilerStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The kind reconciled, as `group/version Kind`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The active module's digest (`sha256:…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Its first 12 hex digits, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_digest: Option<String>,
    /// The digest the source holds now, when it differs from the active one
    /// (a shadow candidate, or a version that failed to load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_digest: Option<String>,
    /// `Ready`, `Degraded`, `Progressing`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the active version went live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_swap_time: Option<Time>,
    /// Reconciles by the replica that leads this Reconciler, since it
    /// started leading.
    #[serde(default)]
    pub reconciles: u64,
    /// Of which failed.
    #[serde(default)]
    pub errors: u64,
    /// The replica whose lease this Reconciler is (empty without election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// Shadow rollout: how the candidate compares with the live version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStatus>,
    /// The last version that passed its probation (or the first one that
    /// loaded): where a rollback goes, also after a restart or a failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good_digest: Option<String>,
    /// A version on probation: its first reconciles are watched, and if too
    /// many fail it is refused and the previous version runs again. Kept
    /// here so that a restart or another replica continues the probation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probation: Option<ProbationStatus>,
    /// Versions that are not loaded again: they failed to load, or were
    /// rolled back (oldest first, at most 10). Every replica honours them.
    /// To try them again, set the annotation `operon.dev/retry` to a new
    /// value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedVersion>,
    /// The value of the annotation `operon.dev/retry` for which the
    /// refusals were last cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
}

/// `status.probation`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbationStatus {
    /// The version on probation.
    pub digest: String,
    /// The version it replaced, which comes back if it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_digest: Option<String>,
}

/// One entry of `status.refused`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefusedVersion {
    /// The module's digest.
    pub digest: String,
    /// Why, as a condition reason (`InvalidModule`, `RolledBack`, …).
    pub reason: String,
    /// What happened.
    pub message: String,
}

/// `status.shadow`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// The candidate's digest.
    pub candidate_digest: String,
    /// Requests both versions answered.
    pub compared: u64,
    /// Of which the answers differed.
    pub differing: u64,
}

/// The CRDs as YAML files: `(file name, text)`, as `deploy/crds/` holds
/// them (`operon crds --out-dir deploy/crds` writes them).
///
/// # Errors
/// When a CRD cannot be serialised (a bug in the types).
pub fn render() -> Result<Vec<(String, String)>, serde_saphyr::ser::Error> {
    use kube::CustomResourceExt;
    let header = "# Generated from host/src/reconciler/crd.rs by `operon crds --out-dir deploy/crds`; do not edit.\n";
    let mut files = Vec::new();
    for crd in [Reconciler::crd(), ClusterReconciler::crd()] {
        let file = format!("operon.dev_{}.yaml", crd.spec.names.plural);
        files.push((file, format!("{header}{}", serde_saphyr::to_string(&crd)?)));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `deploy/crds/` must be what the types generate: run
    /// `cargo run -p operon -- crds --out-dir deploy/crds` after changing them.
    #[test]
    fn deploy_crds_should_match_the_types() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
        for (name, text) in render().unwrap() {
            let on_disk = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            assert!(
                on_disk == text,
                "deploy/crds/{name} is out of date: run `cargo run -p operon -- crds --out-dir deploy/crds`"
            );
        }
    }

    #[test]
    fn the_schema_should_carry_the_cross_field_rules() {
        let text = render().unwrap().into_iter().map(|(_, t)| t).collect::<String>();
        for rule in [
            "exactly one of configMap, url, oci, path",
            "spec.grants.namespaces is for ClusterReconcilers",
            "spec.grants.conversion is for ClusterReconcilers",
            "spec.grants.conversion needs spec.grants.namespaces",
        ] {
            assert!(text.contains(rule), "missing CEL rule: {rule}");
        }
    }

    #[test]
    fn a_minimal_reconciler_should_read_with_defaults() {
        let r: Reconciler = serde_json::from_value(serde_json::json!({
            "apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": "webapp", "namespace": "shop"},
            "spec": {"module": {"configMap": {"name": "webapp"}}, "grants": {"for": [{"group": "example.operon.dev", "kind": "WebApp"}]}}
        }))
        .unwrap();
        let p = &r.spec.plugin;
        assert_eq!(p.module.config_map.as_ref().unwrap().key, "module.wasm");
        assert_eq!(p.rollout, Rollout::Immediate);
        assert!(!p.paused && !p.grants.adopt && !p.grants.cluster_scoped);
        assert_eq!(p.grants.for_kinds[0].kind, "WebApp");
    }
}
