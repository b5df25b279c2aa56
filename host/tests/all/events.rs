//! Events a plugin's outcome asks for, against a real API server: written
//! as the plugin's ServiceAccount (so RBAC bounds them as it bounds its
//! other writes, and they are not the host's), all of the 50 one outcome
//! may carry, and within a budget per controller whose drops are counted
//! (issue 18, findings 5 and 11).
//!
//! The plugin is the `chatty` guest (a Thing whose `spec.mode` is `events`
//! gets `spec.events` distinct events, reason `Chatty`), run as a
//! Reconciler from a ConfigMap by an in-process manager.

use crate::common;
use crate::common::plugins;

use common::{eventually, guest, thing_crd};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use operon::reconciler::crd::{ClusterReconciler, Reconciler};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("events", || {
        use kube::CustomResourceExt;
        operon_envtest::Options::default().crd(thing_crd()).crd(Reconciler::crd()).crd(ClusterReconciler::crd())
    })
}

/// The shared Reconciler host (`common/plugins.rs`), with a controller
/// event budget of 200 at once, then 5/s (the defaults are 1000 and 25/s):
/// the budget test needs fewer events to pass it.
struct Host(plugins::Host);

impl std::ops::Deref for Host {
    type Target = plugins::Host;
    fn deref(&self) -> &plugins::Host {
        &self.0
    }
}

impl Host {
    async fn start(prefix: &str) -> Host {
        let pipeline = operon::pipeline::Config { event_burst: 200, event_qps: 5.0, ..Default::default() };
        Host(plugins::Host::start_configured(plane(), prefix, false, pipeline).await)
    }

    async fn stop(self) {
        self.0.stop().await;
    }

    /// The `chatty` module as the Reconciler `chatty`, with `extra` in its spec.
    async fn chatty(&self, extra: Value) {
        self.module_config_map("chatty", &guest("chatty")).await;
        let mut spec = json!({"module": {"configMap": {"name": "chatty"}},
            "grants": {"for": [{"group": "example.operon.dev", "kind": "Thing"}]}});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let r = json!({"apiVersion": "operon.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": "chatty", "labels": {"operon.dev/test": self.ns}}, "spec": spec});
        Api::<Reconciler>::namespaced(self.client.clone(), &self.ns)
            .patch("chatty", &PatchParams::apply("test").force(), &Patch::Apply(&r))
            .await
            .unwrap();
    }

    /// A Thing asking for `events` events.
    async fn thing(&self, name: &str, events: u64) {
        let t = json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": name}, "spec": {"mode": "events", "events": events}});
        self.things().patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&t)).await.unwrap();
    }

    /// Whether the outcome asking for `events` events was applied to `name`
    /// (its status is written before its events).
    async fn applied(&self, name: &str, events: u64) -> bool {
        let Ok(Some(t)) = self.things().get_opt(name).await else { return false };
        t.data.pointer("/status/events").and_then(Value::as_u64) == Some(events)
    }

    /// How many `Chatty` events each regarding object has.
    async fn chatty_events(&self) -> std::collections::BTreeMap<String, usize> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let mut counts = std::collections::BTreeMap::new();
        for e in api.list(&ListParams::default()).await.unwrap().items {
            if e.reason.as_deref() == Some("Chatty") {
                let name = e.regarding.and_then(|r| r.name).unwrap_or_default();
                *counts.entry(name).or_insert(0) += e.series.map_or(1, |s| s.count as usize);
            }
        }
        counts
    }

    /// `operon_events_dropped_total` of the plugin's controller for `reason`.
    fn dropped(&self, reason: &str) -> f64 {
        let text = self.manager.metrics().encode().unwrap();
        let controller = format!("controller=\"{}/chatty\"", self.ns);
        text.lines()
            .filter(|l| l.starts_with("operon_events_dropped_total{") && l.contains(&controller))
            .filter(|l| l.contains(&format!("reason=\"{reason}\"")))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    }
}

/// Finding 11: an outcome may carry 50 events (`--max-events-per-outcome`);
/// every one of them is recorded, not the first 25.
#[tokio::test]
async fn every_event_one_outcome_may_carry_is_recorded() {
    let host = Host::start("ev-outcome").await;
    host.chatty(json!({})).await;
    host.thing("fifty", 50).await;
    eventually("the outcome applied", WAIT, || async { host.applied("fifty", 50).await.then_some(()) }).await;
    let recorded = eventually("50 events on the Thing", WAIT, || async {
        let n = host.chatty_events().await.get("fifty").copied().unwrap_or(0);
        (n == 50).then_some(n)
    })
    .await;
    assert_eq!(recorded, 50);
    host.stop().await;
}

/// Finding 5: the events an outcome asks for are written as the
/// Reconciler's ServiceAccount, as its other writes are: without a Role
/// that allows events, none is written (and the refusal is counted); with
/// one, they are.
#[tokio::test]
async fn a_plugins_events_are_written_as_its_service_account() {
    let host = Host::start("ev-identity").await;
    let sas: Api<ServiceAccount> = Api::namespaced(host.client.clone(), &host.ns);
    sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "chatty"}})).unwrap())
        .await
        .unwrap();
    let role = |events: bool| {
        let mut rules = vec![json!({"apiGroups": ["example.operon.dev"], "resources": ["things", "things/status"],
            "verbs": ["get", "list", "watch", "patch", "update"]})];
        if events {
            rules.push(json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}));
        }
        serde_json::from_value::<Role>(json!({"metadata": {"name": "chatty"}, "rules": rules})).unwrap()
    };
    let roles: Api<Role> = Api::namespaced(host.client.clone(), &host.ns);
    roles.patch("chatty", &PatchParams::apply("test").force(), &Patch::Apply(&role(false))).await.unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(host.client.clone(), &host.ns);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "chatty"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "chatty"},
                "subjects": [{"kind": "ServiceAccount", "name": "chatty", "namespace": host.ns}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    host.chatty(json!({"serviceAccountName": "chatty"})).await;

    // The Role allows the status (written as the ServiceAccount), not events.
    host.thing("t", 3).await;
    eventually("the outcome applied as the ServiceAccount", WAIT, || async {
        host.applied("t", 3).await.then_some(())
    })
    .await;
    eventually("the events refused as the ServiceAccount's, and counted", WAIT, || async {
        let written = host.chatty_events().await.get("t").copied().unwrap_or(0);
        assert_eq!(
            written, 0,
            "the plugin's events were written although its ServiceAccount may not: the host's identity"
        );
        (host.dropped("forbidden") >= 3.0).then_some(())
    })
    .await;

    // Granted, the next outcome's events are written.
    roles.patch("chatty", &PatchParams::apply("test").force(), &Patch::Apply(&role(true))).await.unwrap();
    host.thing("t", 4).await;
    eventually("the events written once granted", WAIT, || async {
        (host.chatty_events().await.get("t").copied().unwrap_or(0) == 4).then_some(())
    })
    .await;
    host.stop().await;
}

/// Finding 5: events are bounded per controller, not only per object: six
/// parents asking for 50 events each (300) get at most the controller's
/// burst (`--event-burst`, 200 here) plus its rate while they are
/// written; every event beyond is counted as dropped.
#[tokio::test]
async fn a_controllers_events_are_bounded_and_every_drop_counted() {
    let host = Host::start("ev-budget").await;
    host.chatty(json!({})).await;
    let started = Instant::now();
    let names: Vec<String> = (0..6).map(|i| format!("t{i}")).collect();
    for name in &names {
        host.thing(name, 50).await;
    }
    let (recorded, dropped) = eventually("every event recorded or counted as dropped", WAIT, || async {
        let recorded: usize = host.chatty_events().await.values().sum();
        let dropped = host.dropped("controller_budget");
        (recorded + dropped as usize == 300).then_some((recorded, dropped))
    })
    .await;
    let took = started.elapsed();
    eprintln!("300 events asked for: {recorded} recorded, {dropped} dropped, in {took:?}");
    assert!(dropped > 0.0, "300 events at once exceed the controller's budget");
    let allowed = 200.0 + 5.0 * took.as_secs_f64() + 1.0;
    assert!((recorded as f64) <= allowed, "{recorded} events recorded; the budget allows {allowed:.0}");
    host.stop().await;
}
