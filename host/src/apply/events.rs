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
//! - a per-object token bucket (by default a burst of 25, then one every
//!   10 s, like client-go's spam filter; a module's controller gets a burst
//!   that holds every event one outcome may carry, and the host's own about
//!   the object) and a per-controller one ([`Budget`]: `--event-burst`,
//!   `--event-qps`) keep a guest from flooding the API server;
//! - the events an outcome asks for are written as the plugin
//!   ([`Author::Plugin`]: the client impersonating the Reconciler's
//!   ServiceAccount, as its other writes are), so RBAC bounds them and the
//!   API server's priority and fairness counts them as the plugin's, not
//!   as the host's beside its Lease renewals;
//! - every event not recorded (a budget spent, a refusal, an unreachable
//!   API server) is counted in `operon_events_dropped_total{controller,
//!   reason}` and logged at warn, at most once per 30 s and reason, with
//!   the count and the knob to change.

use crate::leader::{Fence, NotLeading};
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the bucket of one object earns another event.
const REFILL: Duration = Duration::from_secs(10);
/// How often the log says, per reason, that events are being dropped.
const REPORT_EVERY: Duration = Duration::from_secs(30);
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

/// How many events a recorder writes: per object and in all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Events one object may record at once; then one every 10 s.
    pub object_burst: f64,
    /// Events per second across every object; `0` for no limit.
    pub qps: f64,
    /// Events at once across every object before `qps` applies.
    pub burst: f64,
}

impl Budget {
    /// `--event-qps`: events per second per controller.
    pub const DEFAULT_QPS: f64 = 25.0;
    /// `--event-burst`: events at once per controller: a controller
    /// starting on a thousand parents may say one thing about each (client-go
    /// and kube-rs recorders have no per-controller bound at all; this one
    /// is against a flood, not against a busy controller).
    pub const DEFAULT_BURST: u32 = 1000;
    /// Room for the host's own events about one object (ReconcileFailed,
    /// InvalidOutcome, …) beside one outcome's.
    pub const HOST_EVENTS: usize = 10;

    /// The budget of a module's controller: each object may record every
    /// event one outcome may carry (`max_events`) and the host's own; the
    /// controller `qps` per second with bursts of `burst`.
    pub fn for_controller(max_events: usize, qps: f64, burst: u32) -> Budget {
        Budget { object_burst: (max_events + Self::HOST_EVENTS) as f64, qps, burst: f64::from(burst.max(1)) }
    }
}

impl Default for Budget {
    /// client-go's spam filter per object (25 at once), no budget for the
    /// whole recorder.
    fn default() -> Self {
        Budget { object_burst: 25.0, qps: 0.0, burst: 0.0 }
    }
}

/// Whose identity writes an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Author {
    /// The host: what it says about a reconcile (a failure, a refusal).
    Host,
    /// The plugin: the events its outcome asks for, written with the
    /// plugin's client (impersonating its ServiceAccount, when it has one).
    Plugin,
}

/// Why an event was not recorded: the `reason` label of
/// `operon_events_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dropped {
    /// The object's bucket was empty.
    ObjectBudget,
    /// The controller's bucket was empty.
    ControllerBudget,
    /// The API server said 403: the writer may not create events.
    Forbidden,
    /// The API server refused it otherwise.
    Refused,
    /// The API server could not be reached.
    Unreachable,
}

impl Dropped {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Dropped::ObjectBudget => "object_budget",
            Dropped::ControllerBudget => "controller_budget",
            Dropped::Forbidden => "forbidden",
            Dropped::Refused => "refused",
            Dropped::Unreachable => "unreachable",
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
    #[error(
        "event dropped: {object} recorded more than {burst} events recently (one outcome's \
         --max-events-per-outcome and the host's own; then one every 10s)"
    )]
    Throttled {
        /// The regarding object.
        object: String,
        /// Its burst.
        burst: f64,
    },
    /// The controller recorded too many events recently.
    #[error("event dropped: the controller recorded more than its event budget (--event-burst, --event-qps)")]
    ControllerThrottled,
    /// The writer may not create events (the plugin's ServiceAccount lacks
    /// the RBAC).
    #[error(
        "recording event {name} was forbidden: {message} (a plugin's events are written as its ServiceAccount: \
         give its Role create and patch on events.k8s.io events)"
    )]
    Forbidden {
        /// The Event's name.
        name: String,
        /// What the API server said.
        message: String,
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
        kube::Error::Api(s) if s.code == 403 => Error::Forbidden { name, message },
        kube::Error::Api(_) => Error::Api { name, message },
        _ => Error::Unreachable { name, message },
    }
}

/// Records events for one reporter (`operon/<controller>`).
pub struct Recorder {
    client: kube::Client,
    /// The plugin's client, for [`Author::Plugin`] (`None`: the host's).
    plugin: Option<kube::Client>,
    controller: String,
    instance: String,
    budget: Budget,
    /// Where drops are counted: the metrics and the controller's label.
    metrics: Option<(Arc<Metrics>, String)>,
    /// Series count per event name, for repeats.
    series: Mutex<HashMap<String, i32>>,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
    /// The controller's bucket: tokens, and when last refilled.
    bucket: Mutex<(f64, Instant)>,
    drops: Mutex<Drops>,
}

impl Recorder {
    /// A recorder whose events say `reportingController: controller` and
    /// `reportingInstance: instance`, written by `client`, with the default
    /// [`Budget`].
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Recorder {
        let budget = Budget::default();
        Recorder {
            client,
            plugin: None,
            controller: controller.to_string(),
            instance: instance.to_string(),
            budget,
            metrics: None,
            series: Mutex::new(HashMap::new()),
            buckets: Mutex::new(HashMap::new()),
            bucket: Mutex::new((budget.burst, Instant::now())),
            drops: Mutex::new(Drops::default()),
        }
    }

    /// Write [`Author::Plugin`]'s events with `client`.
    pub fn with_plugin(mut self, client: kube::Client) -> Recorder {
        self.plugin = Some(client);
        self
    }

    /// Spend from `budget`, and count drops in `metrics` under `controller`.
    pub fn with_budget(mut self, budget: Budget, metrics: Arc<Metrics>, controller: &str) -> Recorder {
        self.budget = budget;
        self.bucket = Mutex::new((budget.burst, Instant::now()));
        self.metrics = Some((metrics, controller.to_string()));
        self
    }

    /// Record one event on `regarding`, as the host.
    ///
    /// # Errors
    /// See [`Recorder::publish_as`].
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        message: &str,
        fence: &Fence,
    ) -> Result<(), Error> {
        self.publish_as(Author::Host, regarding, type_, reason, action, message, fence).await
    }

    /// Record one event on `regarding`, written as `author`. An event not
    /// recorded is counted and logged here (rate-limited), so callers need
    /// not.
    ///
    /// # Errors
    /// Not leading, throttled, or the API server's refusal: an event is
    /// worth less than the reconcile that produced it.
    #[allow(clippy::too_many_arguments, reason = "the fields of an event, and who writes it")]
    pub async fn publish_as(
        &self,
        author: Author,
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
        fence.check()?;
        if !self.take_token(regarding) {
            let e = Error::Throttled { object, burst: self.budget.object_burst };
            self.dropped(Dropped::ObjectBudget, &e);
            return Err(e);
        }
        if !self.take_controller_token() {
            self.give_back_token(regarding);
            let e = Error::ControllerThrottled;
            self.dropped(Dropped::ControllerBudget, &e);
            return Err(e);
        }
        let client = match author {
            Author::Plugin => self.plugin.as_ref().unwrap_or(&self.client),
            Author::Host => &self.client,
        };
        let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
        let now = MicroTime(Timestamp::now());
        let count = match self
            .write(&api, name.clone(), namespace, regarding, type_, reason, action, note, repeat, now, fence)
            .await
        {
            Ok(count) => count,
            Err(e) => {
                // The API server was not reached: the tokens are not spent
                // (during an outage, failed attempts must not use up the
                // budget for the events that follow it). A refusal does
                // spend them, so a guest cannot retry refused events
                // without bound.
                let why = match &e {
                    Error::NotLeading(_) => return Err(e),
                    Error::Unreachable { .. } => {
                        self.give_back_token(regarding);
                        self.give_back_controller_token();
                        Dropped::Unreachable
                    }
                    Error::Forbidden { .. } => Dropped::Forbidden,
                    _ => Dropped::Refused,
                };
                self.dropped(why, &e);
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
        let burst = self.budget.object_burst;
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((tokens, _)) = buckets.get_mut(&Self::bucket_key(regarding)) {
            *tokens = (*tokens + 1.0).min(burst);
        }
    }

    fn take_token(&self, regarding: &ObjectReference) -> bool {
        let burst = self.budget.object_burst;
        let key = Self::bucket_key(regarding);
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= REMEMBERED {
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() / REFILL.as_secs_f64() < burst
            });
        }
        let (tokens, at) = buckets.entry(key).or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() / REFILL.as_secs_f64()).min(burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// A token of the controller's bucket (always, without a budget).
    fn take_controller_token(&self) -> bool {
        let Budget { qps, burst, .. } = self.budget;
        if qps <= 0.0 {
            return true;
        }
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        bucket.0 = (bucket.0 + now.duration_since(bucket.1).as_secs_f64() * qps).min(burst);
        bucket.1 = now;
        if bucket.0 >= 1.0 {
            bucket.0 -= 1.0;
            true
        } else {
            false
        }
    }

    fn give_back_controller_token(&self) {
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        bucket.0 = (bucket.0 + 1.0).min(self.budget.burst);
    }

    /// Count an event not recorded, and say so in the log now and then.
    fn dropped(&self, why: Dropped, error: &Error) {
        if let Some((metrics, controller)) = &self.metrics {
            metrics.event_dropped(controller, why.label());
        }
        let report = self.drops.lock().unwrap_or_else(|p| p.into_inner()).note(why, Instant::now());
        if let Some(count) = report {
            let controller = self.metrics.as_ref().map_or(self.controller.as_str(), |(_, c)| c.as_str());
            tracing::warn!(
                controller,
                reason = why.label(),
                dropped = count,
                "{count} event(s) not recorded in the last {REPORT_EVERY:?}; the last: {error}"
            );
        }
    }
}

/// When to say in the log that events are being dropped: at the first drop
/// of a reason, then at most once per [`REPORT_EVERY`] with the count since.
#[derive(Debug, Default)]
struct Drops {
    /// Per reason: drops not reported yet, and when the log last said so.
    seen: HashMap<Dropped, (u64, Option<Instant>)>,
}

impl Drops {
    /// Note one drop at `now`; the count to report, if it is time.
    fn note(&mut self, why: Dropped, now: Instant) -> Option<u64> {
        let (pending, last) = self.seen.entry(why).or_insert((0, None));
        *pending += 1;
        if last.is_some_and(|at| now.duration_since(at) < REPORT_EVERY) {
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(pending))
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
mod tests;
