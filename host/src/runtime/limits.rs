//! Per-module sandbox limits and the instance policy.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Whether each call gets a new instance or reuses one from a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InstancePolicy {
    /// A new instance per call: no state can leak between reconciles.
    /// Instantiation from an `InstancePre` costs microseconds for small guests.
    #[default]
    Fresh,
    /// Reuse instances from a bounded pool, for guests whose instantiation is
    /// slow (language runtimes such as Python or JavaScript). An instance that
    /// trapped, timed out or ran out of memory is discarded, never reused.
    Pooled,
}

/// The limits one module runs under. Every call is bounded by all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Fresh instance per call, or a pool.
    pub instance_policy: InstancePolicy,
    /// Instances kept in the pool (`Pooled` only).
    pub pool_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(1),
            memory: 64 << 20,
            max_output: 4 << 20,
            instance_policy: InstancePolicy::Fresh,
            pool_size: 4,
        }
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
