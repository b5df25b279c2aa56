//! Recording events (events.k8s.io/v1) on parents and Reconcilers.
//!
//! Why not kube-runtime's recorder: it keys repeats by reason and type but
//! not by message, so a guest's several events that share a reason were
//! folded into one Event that kept only the first message. Here an Event's
//! identity is everything a person reads — regarding object, type, reason,
//! action, message and reporter — hashed into its name:
//!
//! - every distinct message becomes its own Event;
//! - a true repeat (a level-based reconcile saying the same thing again)
//!   updates that Event's `series` (count, last observed) instead of adding
//!   one, also across restarts of the host (the name is deterministic);
//! - a per-object token bucket (burst 25, then one every 10 s, like
//!   client-go's spam filter) keeps a guest from flooding the API server;
//!   what it drops is logged and counted.

use crate::leader::{Fence, NotLeading};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Events one object may record at once before the bucket slows it down.
const BURST: f64 = 25.0;
/// How often the bucket of one object earns another event.
const REFILL: Duration = Duration::from_secs(10);
/// Most distinct events whose series this recorder remembers.
const REMEMBERED: usize = 4096;
/// Longest message kept (the API server allows 1 KiB of `note`).
const MAX_NOTE: usize = 1000;

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something happened as expected.
    Normal,
    /// Something a person should look at.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Why an event was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This replica may not write now.
    #[error(transparent)]
    NotLeading(#[from] NotLeading),
    /// The object recorded too many events recently.
    #[error("event dropped: {object} recorded more than {BURST} events recently")]
    Throttled {
        /// The regarding object.
        object: String,
    },
    /// The API server refused.
    #[error("recording event {name} failed: {message}")]
    Api {
        /// The Event's name.
        name: String,
        /// What the API server said.
        message: String,
    },
    /// The API server could not be reached: nothing was recorded.
    #[error("recording event {name} failed: {message}")]
    Unreachable {
        /// The Event's name.
        name: String,
        /// Why.
        message: String,
    },
}

/// A failed write as an [`Error`]: `Api` when the API server answered,
/// `Unreachable` when it did not.
fn failed(name: &str, e: &kube::Error) -> Error {
    let (name, message) = (name.to_string(), crate::client::describe(e));
    match e {
        kube::Error::Api(_) => Error::Api { name, message },
        _ => Error::Unreachable { name, message },
    }
}

/// Records events for one reporter (`operon/<controller>`).
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    /// Series count per event name, for repeats.
    series: Mutex<HashMap<String, i32>>,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl Recorder {
    /// A recorder whose events say `reportingController: controller` and
    /// `reportingInstance: instance`.
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Recorder {
        Recorder {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            series: Mutex::new(HashMap::new()),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Record one event on `regarding`.
    ///
    /// # Errors
    /// Not leading, throttled, or the API server's refusal. Callers log
    /// these: an event is worth less than the reconcile that produced it.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        message: &str,
        fence: &Fence,
    ) -> Result<(), Error> {
        let note = truncate(message, MAX_NOTE);
        let name = event_name(regarding, type_, reason, action, &note, &self.controller);
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let object = format!(
            "{} {}",
            regarding.kind.as_deref().unwrap_or_default(),
            regarding.name.as_deref().unwrap_or_default()
        );
        let repeat = self.series.lock().unwrap_or_else(|p| p.into_inner()).get(&name).copied();
        if !self.take_token(regarding) {
            tracing::debug!(%object, reason, "event throttled");
            return Err(Error::Throttled { object });
        }
        fence.check()?;
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = MicroTime(Timestamp::now());
        let count = match self
            .write(&api, name.clone(), namespace, regarding, type_, reason, action, note, repeat, now, fence)
            .await
        {
            Ok(count) => count,
            Err(e) => {
                // The API server was not reached: the token is not spent
                // (during an outage, failed attempts must not use up the
                // object's budget for the events that follow it). A refusal
                // does spend it, so a guest cannot retry refused events
                // without bound.
                if matches!(e, Error::Unreachable { .. }) {
                    self.give_back_token(regarding);
                }
                return Err(e);
            }
        };
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        if series.len() >= REMEMBERED {
            series.clear();
        }
        series.insert(name, count);
        Ok(())
    }

    /// Create the Event, or update its series; returns the count written.
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        api: &Api<Event>,
        name: String,
        namespace: String,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        repeat: Option<i32>,
        now: MicroTime,
        fence: &Fence,
    ) -> Result<i32, Error> {
        Ok(match repeat {
            None => {
                let event = Event {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace),
                        ..ObjectMeta::default()
                    },
                    event_time: Some(now.clone()),
                    type_: Some(type_.as_str().into()),
                    reason: Some(reason.into()),
                    action: Some(action.into()),
                    note: Some(note),
                    regarding: Some(regarding.clone()),
                    reporting_controller: Some(self.controller.clone()),
                    reporting_instance: Some(self.instance.clone()),
                    ..Event::default()
                };
                match api.create(&PostParams::default(), &event).await {
                    Ok(_) => 1,
                    // Recorded before (by an earlier run of this host): a repeat.
                    Err(kube::Error::Api(s)) if s.code == 409 => self.bump(api, &name, 2, now, fence).await?,
                    Err(e) => return Err(failed(&name, &e)),
                }
            }
            Some(n) => self.bump(api, &name, n + 1, now, fence).await?,
        })
    }

    /// Update the series of an existing Event; returns the count written.
    async fn bump(
        &self,
        api: &Api<Event>,
        name: &str,
        count: i32,
        now: MicroTime,
        fence: &Fence,
    ) -> Result<i32, Error> {
        fence.check()?;
        let patch = serde_json::json!({ "series": EventSeries { count, last_observed_time: now } });
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(count),
            // Expired (Events live an hour): record it again.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.series.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
                Err(Error::Api { name: name.into(), message: "expired while being updated; recorded next time".into() })
            }
            Err(e) => Err(failed(name, &e)),
        }
    }

    fn bucket_key(regarding: &ObjectReference) -> String {
        regarding
            .uid
            .clone()
            .unwrap_or_else(|| format!("{:?}/{:?}/{:?}", regarding.kind, regarding.namespace, regarding.name))
    }

    fn give_back_token(&self, regarding: &ObjectReference) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((tokens, _)) = buckets.get_mut(&Self::bucket_key(regarding)) {
            *tokens = (*tokens + 1.0).min(BURST);
        }
    }

    fn take_token(&self, regarding: &ObjectReference) -> bool {
        let key = Self::bucket_key(regarding);
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= REMEMBERED {
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() / REFILL.as_secs_f64() < BURST
            });
        }
        let (tokens, at) = buckets.entry(key).or_insert((BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() / REFILL.as_secs_f64()).min(BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The `reportingController` of a controller's events: a qualified name
/// (`operon.dev/<name>`, where a Reconciler's `namespace/name` becomes
/// `namespace.name`, cut to 63 characters with a hash when longer), as the
/// API server requires.
pub fn reporting_controller(controller: &str) -> String {
    let name: String =
        controller.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '.' }).collect();
    let name = name.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_string();
    let name = if name.len() <= 63 {
        name
    } else {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        controller.hash(&mut h);
        format!("{}-{:08x}", name[..54].trim_end_matches(|c: char| !c.is_ascii_alphanumeric()), h.finish() as u32)
    };
    format!("operon.dev/{name}")
}

/// `<regarding name>.<hash of everything a reader sees>`: the same event
/// gets the same name, a different message a different one.
fn event_name(
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
    controller: &str,
) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&regarding.uid, &regarding.kind, &regarding.namespace, &regarding.name).hash(&mut h);
    (type_, reason, action, note, controller).hash(&mut h);
    let prefix: String = regarding.name.as_deref().unwrap_or("object").chars().take(200).collect();
    format!("{prefix}.{:016x}", h.finish())
}

fn truncate(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("WebApp".into()),
            name: Some(name.into()),
            namespace: Some("shop".into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn distinct_messages_should_get_distinct_names_and_repeats_the_same() {
        let r = reference("web");
        let a = event_name(&r, EventType::Normal, "Scaled", "Reconcile", "scaled to 2", "operon/webapp");
        let b = event_name(&r, EventType::Normal, "Scaled", "Reconcile", "scaled to 3", "operon/webapp");
        let again = event_name(&r, EventType::Normal, "Scaled", "Reconcile", "scaled to 2", "operon/webapp");
        assert_ne!(a, b, "same reason, different message: two events");
        assert_eq!(a, again, "a true repeat: one event, its series counts");
        assert!(a.starts_with("web."));
        let warning = event_name(&r, EventType::Warning, "Scaled", "Reconcile", "scaled to 2", "operon/webapp");
        assert_ne!(a, warning);
    }

    #[test]
    fn reporting_controllers_should_be_qualified_names() {
        assert_eq!(reporting_controller("webapp"), "operon.dev/webapp");
        assert_eq!(reporting_controller("team-a/webapp"), "operon.dev/team-a.webapp");
        let long = reporting_controller(&format!("{}/{}", "n".repeat(60), "x".repeat(60)));
        let name = long.strip_prefix("operon.dev/").unwrap();
        assert!(name.len() <= 63 && name.ends_with(|c: char| c.is_ascii_alphanumeric()), "{long}");
    }

    #[test]
    fn long_names_and_messages_should_be_cut_to_what_the_api_server_takes() {
        let r = reference(&"x".repeat(253));
        assert!(event_name(&r, EventType::Normal, "R", "A", "m", "c").len() <= 253);
        let note = truncate(&"é".repeat(800), MAX_NOTE);
        assert!(note.len() <= MAX_NOTE + '…'.len_utf8());
    }
}
