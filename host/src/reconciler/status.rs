//! The conditions a Reconciler reports, and their reasons. Each reason says
//! what happened; the message says what to do.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Why a condition is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The module is being fetched and loaded.
    Loading,
    /// The module is loaded and its controller runs.
    Loaded,
    /// A new version replaced the old one.
    Swapped,
    /// The bytes are not a WebAssembly component of the reconciler world.
    InvalidModule,
    /// Cranelift could not compile the component.
    CompileFailed,
    /// The module was built for another major version of the WIT package.
    WitVersionMismatch,
    /// The manifest asks for more than the grants give.
    Forbidden,
    /// The module could not be fetched (ConfigMap missing, URL unreachable,
    /// digest mismatch).
    SourceUnavailable,
    /// The module is not signed by a key `spec.module.verify` or the host
    /// (`--require-signed-modules`) requires.
    UntrustedModule,
    /// A new version failed too many of its first reconciles; the previous
    /// one runs again.
    RolledBack,
    /// A shadow candidate runs beside the live version.
    Shadowing,
    /// The shadow candidate answered differently.
    ShadowDiffers,
    /// The spec cannot be acted on as it is.
    InvalidSpec,
    /// `spec.paused`.
    Paused,
    /// Writes of the plugin are refused by the API server (RBAC).
    ApiForbidden,
    /// Reconciles fail.
    ReconcileErrors,
    /// The guest's calls used their CPU budget: reconciles wait.
    CpuThrottled,
    /// The Reconciler is being deleted: its parents are released.
    Deleting,
    /// An older Reconciler already reconciles the same kind in the same
    /// namespaces: two controllers on one parent would delete each other's
    /// children.
    Overlaps,
    /// Reconciles wait for the host's shared guest memory, CPU or call slots
    /// (the host-wide limits no tenant can lift).
    HostLimited,
}

impl Reason {
    /// Every reason, for the troubleshooting reference.
    pub const ALL: [Reason; 20] = [
        Reason::Loading,
        Reason::Loaded,
        Reason::Swapped,
        Reason::InvalidModule,
        Reason::CompileFailed,
        Reason::WitVersionMismatch,
        Reason::Forbidden,
        Reason::SourceUnavailable,
        Reason::UntrustedModule,
        Reason::RolledBack,
        Reason::Shadowing,
        Reason::ShadowDiffers,
        Reason::InvalidSpec,
        Reason::Paused,
        Reason::ApiForbidden,
        Reason::ReconcileErrors,
        Reason::CpuThrottled,
        Reason::Deleting,
        Reason::Overlaps,
        Reason::HostLimited,
    ];

    /// Whether a refusal for this reason holds for the same bytes forever
    /// (recorded in the status, honoured by every replica and after
    /// restarts), rather than depending on the spec or the moment.
    pub fn is_durable(self) -> bool {
        matches!(self, Reason::InvalidModule | Reason::CompileFailed | Reason::WitVersionMismatch | Reason::RolledBack)
    }

    /// Whether a condition with this reason is a problem worth a Warning
    /// event when it first appears.
    pub fn warns(self) -> bool {
        !matches!(
            self,
            Reason::Loading | Reason::Loaded | Reason::Swapped | Reason::Shadowing | Reason::Paused | Reason::Deleting
        )
    }

    /// What a person should do about it (the troubleshooting reference;
    /// the condition's message carries the specifics).
    pub fn remedy(self) -> &'static str {
        match self {
            Reason::Loading => {
                "Wait: the module is being fetched, compiled (or read from the precompiled cache) and smoke-tested."
            }
            Reason::Loaded | Reason::Swapped => "Nothing: the module serves.",
            Reason::InvalidModule => {
                "Build a component of the `operon:reconciler` world (`operon build`; `operon inspect FILE` tells what a file is). \
                 A core module, a truncated file or another world is refused; the previous version, if any, keeps serving."
            }
            Reason::CompileFailed => {
                "The component validated but Cranelift refused it: rebuild it without unsupported proposals and check `operon inspect`; \
                 report a bug with the module if it persists."
            }
            Reason::WitVersionMismatch => {
                "Rebuild the module against the WIT package version this host serves (the message names both), with the SDK of the same release."
            }
            Reason::Forbidden => {
                "The manifest asks for kinds, namespaces or cluster-scoped writes that `spec.grants` does not give: widen the grants \
                 (a platform decision) or narrow the module's manifest. A namespaced Reconciler cannot reconcile a cluster-scoped kind: \
                 use a ClusterReconciler."
            }
            Reason::SourceUnavailable => {
                "Check the source: the ConfigMap and its key exist in the Reconciler's namespace (binaryData), the URL is reachable \
                 from the host, and `sha256`/`digest` match the bytes (a mismatch is never retried until the spec changes)."
            }
            Reason::UntrustedModule => {
                "The module was fetched but not loaded: it has no signature, or none by a key that `spec.module.verify` \
                 or the host's `--trusted-module-key` names (the message names the keys and where the signature was \
                 looked for). Sign this version with one of those keys (`operon sign --key KEY --oci REF@DIGEST` or \
                 `cosign sign --key` for an OCI source; `operon sign --key KEY module.wasm` for the `.sig` beside a \
                 URL, ConfigMap key or file) or name the right public key; the version serving, if any, keeps serving. \
                 A missing signature is looked for again with backoff; a wrong one when the spec changes."
            }
            Reason::RolledBack => {
                "The new version failed too many of its first reconciles and the previous one serves again. Read the Reconciler's \
                 events and the host's log for the failures, fix the module, and publish it under a new digest. The refusal is \
                 recorded in `status.refused` and holds on every replica; to try the same bytes again, set the annotation \
                 `operon.dev/retry` to a new value."
            }
            Reason::Shadowing => {
                "Compare: the candidate runs beside the live version and writes nothing; set `spec.rollout: immediate` to promote it."
            }
            Reason::ShadowDiffers => {
                "The candidate would write something else than the live version (the message shows a sample): if that is intended, \
                 promote it with `spec.rollout: immediate`; otherwise fix it."
            }
            Reason::InvalidSpec => "Fix the field the message names (`kubectl explain reconciler.spec`).",
            Reason::Paused => "Set `spec.paused: false` to run the controller again.",
            Reason::ApiForbidden => {
                "The API server refused the plugin's writes: give `spec.serviceAccountName` a Role that allows them (see docs/deploy.md, \
                 the RBAC model), or grant the host the reads it needs through the aggregated ClusterRole."
            }
            Reason::ReconcileErrors => {
                "Reconciles fail: read the events on the parent objects and the host's log (`controller` field) for the guest's \
                 failures; `operon test` reproduces a reconcile offline from a fixture."
            }
            Reason::Deleting => {
                "Wait: the host removes the module's finalizer from every parent in the Reconciler's scope (their external \
                 cleanup is not run: the plugin is gone), deletes its Lease, and then lets the Reconciler go."
            }
            Reason::Overlaps => {
                "Another Reconciler (the message names it), created earlier, reconciles the same kind in the same namespaces, \
                 and two controllers on one parent would delete each other's children. Give the two disjoint parents with \
                 `spec.selector` (labels with different values) or disjoint namespaces, or delete one; this one starts by itself \
                 once the overlap is gone."
            }
            Reason::HostLimited => {
                "Reconciles wait for the host's shared limits (the message names which: `--max-guest-memory-total`, `--max-guest-calls` \
                 or `--max-guest-cpu-total`), which every plugin on the host shares: nothing is lost, they are late. Lower \
                 `spec.limits.memory` or `spec.limits.maxConcurrentReconciles` if this plugin asks more than it needs; an \
                 administrator may raise the host's limits with the pod's resources."
            }
            Reason::CpuThrottled => {
                "The module's calls took more guest time than its CPU budget (`spec.limits.cpu`, default the host's `--guest-cpu`, \
                 250m), so its reconciles wait: nothing is lost, they are late. Find the slow path (the \
                 `operon_guest_call_seconds` histogram, `operon test` on a fixture); raise `spec.limits.cpu` if the work \
                 is real."
            }
        }
    }

    /// The reason a condition names, read back.
    pub fn parse(text: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// The reason as written in the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Loading => "Loading",
            Reason::Loaded => "Loaded",
            Reason::Swapped => "Swapped",
            Reason::InvalidModule => "InvalidModule",
            Reason::CompileFailed => "CompileFailed",
            Reason::WitVersionMismatch => "WitVersionMismatch",
            Reason::Forbidden => "Forbidden",
            Reason::SourceUnavailable => "SourceUnavailable",
            Reason::UntrustedModule => "UntrustedModule",
            Reason::RolledBack => "RolledBack",
            Reason::Shadowing => "Shadowing",
            Reason::ShadowDiffers => "ShadowDiffers",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::Paused => "Paused",
            Reason::ApiForbidden => "ApiForbidden",
            Reason::ReconcileErrors => "ReconcileErrors",
            Reason::CpuThrottled => "CpuThrottled",
            Reason::Deleting => "Deleting",
            Reason::Overlaps => "Overlaps",
            Reason::HostLimited => "HostLimited",
        }
    }
}

/// One condition's wanted state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    /// `True` or `False`.
    pub status: bool,
    /// Why.
    pub reason: Reason,
    /// What a person should know or do.
    pub message: String,
}

impl Want {
    /// A condition that holds.
    pub fn yes(reason: Reason, message: impl Into<String>) -> Want {
        Want { status: true, reason, message: message.into() }
    }

    /// A condition that does not hold.
    pub fn no(reason: Reason, message: impl Into<String>) -> Want {
        Want { status: false, reason, message: message.into() }
    }
}

/// Merge wanted conditions into the current ones, keeping
/// `lastTransitionTime` when a condition's status did not change.
pub fn conditions(current: &[Condition], wanted: &[(&str, Want)], generation: Option<i64>) -> Vec<Condition> {
    let now = Time(Timestamp::now());
    wanted
        .iter()
        .map(|(type_, want)| {
            let status = if want.status { "True" } else { "False" }.to_string();
            let since = current
                .iter()
                .find(|c| c.type_ == *type_ && c.status == status)
                .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
            let mut message: String = want.message.chars().take(1000).collect();
            if message.len() < want.message.len() {
                message.push('…');
            }
            Condition {
                type_: type_.to_string(),
                status,
                reason: want.reason.as_str().into(),
                message,
                last_transition_time: since,
                observed_generation: generation,
            }
        })
        .collect()
}

/// The reason for a load error.
pub fn load_reason(e: &crate::runtime::LoadError) -> Reason {
    use crate::runtime::LoadError as E;
    match e {
        E::Compile(_) => Reason::CompileFailed,
        E::WitVersion { .. } => Reason::WitVersionMismatch,
        E::Limits(_) => Reason::InvalidSpec,
        // The smoke call ran out of time or memory: the limits may be too
        // low for this module, so the refusal is not for good.
        E::Manifest(call)
            if matches!(
                **call,
                crate::runtime::CallError::Timeout { .. } | crate::runtime::CallError::MemoryExceeded { .. }
            ) =>
        {
            Reason::InvalidSpec
        }
        E::Engine(_) | E::Panicked(_) | E::Reload(_) => Reason::Loading,
        E::NotAComponent(_)
        | E::WrongWorld(_)
        | E::UnknownImport(_)
        | E::Link(_)
        | E::Manifest(_)
        | E::InvalidManifest(_) => Reason::InvalidModule,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_should_keep_its_transition_time_while_its_status_holds() {
        let first = conditions(&[], &[("Ready", Want::yes(Reason::Loaded, "ok"))], Some(1));
        std::thread::sleep(std::time::Duration::from_millis(5));
        let again = conditions(&first, &[("Ready", Want::yes(Reason::Swapped, "swapped"))], Some(2));
        assert_eq!(again[0].last_transition_time, first[0].last_transition_time);
        assert_eq!((again[0].reason.as_str(), again[0].observed_generation), ("Swapped", Some(2)));
        let flipped = conditions(&again, &[("Ready", Want::no(Reason::Forbidden, "no"))], Some(2));
        assert_ne!(flipped[0].last_transition_time, first[0].last_transition_time);
    }

    #[test]
    fn every_metric_a_remedy_names_should_be_exported() {
        let metrics = crate::metrics::Metrics::new();
        let exported: Vec<&str> = metrics.families().iter().map(|f| f.name.as_str()).collect();
        for reason in Reason::ALL {
            let remedy = reason.remedy();
            for (at, _) in remedy.match_indices("operon_").chain(remedy.match_indices("controller_runtime_")) {
                let name: String = remedy[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                assert!(exported.contains(&name.as_str()), "{reason:?} names {name}, which /metrics does not export");
            }
        }
    }
}
