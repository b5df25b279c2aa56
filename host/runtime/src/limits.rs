//! Per-module sandbox limits and the instance policy.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Modules larger than this are `pooled` unless the operator chose.
pub const POOLED_ABOVE_BYTES: usize = 1 << 20;

/// Whether each call gets a new instance or reuses one from a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InstancePolicy {
    /// Nobody chose: the loader decides ([`InstancePolicy::resolve`]).
    /// `Pooled` for modules that import WASI (a libc or a language runtime
    /// starts up in every new instance) or are larger than
    /// [`POOLED_ABOVE_BYTES`] (Python, JavaScript, Go); `Fresh` otherwise.
    /// A loaded module's [`Limits`] never say `Auto`.
    #[default]
    Auto,
    /// A new instance per call: no state can leak between reconciles.
    /// Instantiation from an `InstancePre` costs microseconds for small guests.
    Fresh,
    /// Reuse instances from a bounded pool, for guests whose instantiation is
    /// slow (language runtimes such as Python or JavaScript). An instance that
    /// trapped, timed out or ran out of memory is discarded, never reused.
    Pooled,
}

impl InstancePolicy {
    /// The policy a module runs under: the operator's choice, or for
    /// [`InstancePolicy::Auto`] what the module's imports and size call for.
    pub fn resolve(self, uses_wasi: bool, size: usize) -> InstancePolicy {
        match self {
            InstancePolicy::Auto if uses_wasi || size > POOLED_ABOVE_BYTES => InstancePolicy::Pooled,
            InstancePolicy::Auto => InstancePolicy::Fresh,
            chosen => chosen,
        }
    }
}

/// The limits one module runs under. Every call is bounded by all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Limits {
    /// Wall-clock deadline for one call (enforced by epoch interruption).
    #[serde(with = "duration_ms")]
    pub timeout: Duration,
    /// Most linear memory one instance may grow to, in bytes.
    pub memory: u64,
    /// Most bytes of JSON one outcome may carry (desired objects, status and
    /// events together).
    pub max_output: usize,
    /// Fresh instance per call, or a pool (by default the loader decides).
    pub instance_policy: InstancePolicy,
    /// Instances kept in the pool (`Pooled` only).
    pub pool_size: usize,
    /// Lines of WASI stdout/stderr logged per second, across the module's
    /// instances; more is dropped and counted (`stdio.rs`).
    pub log_lines_per_second: u32,
    /// Lines logged at once before the rate applies.
    pub log_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(1),
            memory: 64 << 20,
            max_output: 4 << 20,
            instance_policy: InstancePolicy::Auto,
            pool_size: 4,
            log_lines_per_second: 100,
            log_burst: 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_should_pool_wasi_and_large_modules_and_respect_a_choice() {
        assert_eq!(InstancePolicy::Auto.resolve(false, 60 << 10), InstancePolicy::Fresh);
        assert_eq!(InstancePolicy::Auto.resolve(true, 200 << 10), InstancePolicy::Pooled, "C with libc");
        assert_eq!(InstancePolicy::Auto.resolve(false, 12 << 20), InstancePolicy::Pooled, "JavaScript");
        assert_eq!(InstancePolicy::Fresh.resolve(true, 18 << 20), InstancePolicy::Fresh);
        assert_eq!(InstancePolicy::Pooled.resolve(false, 1), InstancePolicy::Pooled);
    }
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}
