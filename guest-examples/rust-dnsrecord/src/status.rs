//! The DnsRecord's status: where its rrset is published, and the `Ready`
//! condition.
//!
//! ```yaml
//! status:
//!   observedGeneration: 2
//!   server: http://127.0.0.1:8081    # the rrset this DnsRecord last wrote:
//!   zone: example.org.               #   deleted with the DnsRecord, or when
//!   fqdn: www.example.org.           #   the spec moves the record elsewhere
//!   type: A
//!   conditions:
//!   - {type: Ready, status: "True", reason: Synced, message: ..., observedGeneration: 2, lastTransitionTime: ...}
//! ```

use operon_sdk::Request;
use serde::Serialize;
use serde_json::Value;

use crate::pdns::Target;

/// The type of the one condition.
pub const READY: &str = "Ready";

/// `status` of a DnsRecord.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsRecordStatus {
    /// The `metadata.generation` this status describes.
    pub observed_generation: i64,
    /// The API base URL of the published rrset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Its zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Its name, absolute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fqdn: Option<String>,
    /// Its type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub rtype: Option<String>,
    /// The `Ready` condition.
    pub conditions: Vec<Condition>,
}

/// A `metav1.Condition`. Timestamps stay text, so they round-trip exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// The generation the condition was computed from.
    pub observed_generation: i64,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// UpperCamelCase reason.
    pub reason: String,
    /// Human-readable text.
    pub message: String,
}

/// What the current status says, read leniently (a status written by hand
/// or by an older version is not an error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Previous {
    /// The rrset the DnsRecord last wrote, when the status names one.
    pub published: Option<Target>,
    /// The `Ready` condition's status and `lastTransitionTime`.
    ready: Option<(String, String)>,
}

impl Previous {
    /// Reads `status` (any JSON).
    pub fn read(status: &Value) -> Previous {
        let text = |field: &str| status.get(field).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let published = match (text("server"), text("zone"), text("fqdn"), text("type")) {
            (Some(server), Some(zone), Some(fqdn), Some(rtype)) => Some(Target { server, zone, fqdn, rtype }),
            _ => None,
        };
        let ready = status["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == READY).and_then(|c| {
            let status = c["status"].as_str()?.to_owned();
            let since = c["lastTransitionTime"].as_str()?.to_owned();
            Some((status, since))
        });
        Previous { published, ready }
    }
}

/// A status naming `published` with a `Ready` condition. Its
/// `lastTransitionTime` is kept while the condition's status stays the
/// same, else it is the request's `now` (so the outcome is a function of
/// the request).
pub fn status<K>(
    req: &Request<K>,
    previous: &Previous,
    published: Option<&Target>,
    ready: bool,
    reason: &str,
    message: &str,
) -> DnsRecordStatus {
    let value = if ready { "True" } else { "False" };
    let last_transition_time = match &previous.ready {
        Some((status, since)) if status == value => since.clone(),
        _ => req.now_rfc3339().to_owned(),
    };
    let generation = req.generation();
    DnsRecordStatus {
        observed_generation: generation,
        server: published.map(|t| t.server.clone()),
        zone: published.map(|t| t.zone.clone()),
        fqdn: published.map(|t| t.fqdn.clone()),
        rtype: published.map(|t| t.rtype.clone()),
        conditions: vec![Condition {
            type_: READY.to_owned(),
            status: value.to_owned(),
            observed_generation: generation,
            last_transition_time,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }],
    }
}
