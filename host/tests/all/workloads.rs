//! The examples on a cluster whose workloads progress (contract 0.2): the
//! deployment and replicaset controllers, kube-scheduler and kwok's fake
//! Nodes make Deployments roll out and become Available as on a real
//! cluster, so a WebApp's `Ready` follows what the host rates (kstatus) with
//! no test playing the kubelet; and a ScheduledScale acts when its schedule
//! turns, woken by its own `requeue-at`.

use crate::common;

use common::running::Running;
use common::{eventually, scheduledscale_crd, webapp_crd};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("workloads", || {
        operon_envtest::Options::with_workloads().nodes(1).crd(webapp_crd()).crd(scheduledscale_crd())
    })
}

/// `(status, reason, message, lastTransitionTime)` of a WebApp's `Ready`.
fn ready(object: &DynamicObject) -> Option<(String, String, String, String)> {
    let c = object.data.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == "Ready")?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message"), text("lastTransitionTime")))
}

/// Issue #19: a WebApp's `Ready` follows its Deployment's availability, as
/// the host rates it — the guest has no rollout arithmetic, only
/// `readiness` — on a cluster where the Deployment really rolls out.
#[tokio::test]
async fn a_webapps_ready_follows_its_deployments_availability() {
    let r = Running::start(plane(), "rust-webapp", "ready").await;
    let webapps = r.custom("WebApp");
    // Every write of the WebApp, from a watch opened before it exists (a
    // poll could miss a short False phase).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watch = {
        let seen = seen.clone();
        let (listed, ready_to_go) = tokio::sync::oneshot::channel();
        let mut listed = Some(listed);
        let config = kube::runtime::watcher::Config::default().fields("metadata.name=shop");
        let mut stream = kube::runtime::watcher(webapps.clone(), config).boxed();
        let task = tokio::spawn(async move {
            use kube::runtime::watcher::Event;
            while let Some(event) = stream.next().await {
                let w = match event {
                    Ok(Event::Apply(w) | Event::InitApply(w)) => w,
                    Ok(Event::InitDone) => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                if let Some(now) = ready(&w) {
                    let mut seen = seen.lock().unwrap();
                    if seen.last() != Some(&now) {
                        seen.push(now);
                    }
                }
            }
        });
        ready_to_go.await.expect("the watch listed the namespace");
        task
    };
    r.create("WebApp", "shop", json!({"image": "registry.invalid/shop:1", "replicas": 2})).await;
    let available = eventually("Ready True", WAIT, || async {
        let w = webapps.get("shop").await.ok()?;
        let ready = ready(&w)?;
        (ready.0 == "True").then_some((ready, w.data["status"]["readyReplicas"].clone()))
    })
    .await;
    assert_eq!(available.0.1, "Available");
    assert_eq!(available.0.2, "2 of 2 replicas ready");
    assert_eq!(available.1, 2);
    let seen = eventually("the watch saw Ready True", WAIT, || async {
        let seen = seen.lock().unwrap().clone();
        seen.iter().any(|r| r.0 == "True").then_some(seen)
    })
    .await;
    watch.abort();
    assert!(seen.first().is_some_and(|r| r.0 == "False"), "Ready was False before the rollout: {seen:?}");

    // A new image rolls out: Ready turns True again with a later transition.
    let patch = json!({"spec": {"image": "registry.invalid/shop:2"}});
    webapps.patch("shop", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(r.client.clone(), &r.namespace);
    eventually("the new image rolled out and Ready again", WAIT, || async {
        let d = deployments.get("shop").await.ok()?;
        let image = d.spec?.template.spec?.containers.first()?.image.clone()?;
        let w = webapps.get("shop").await.ok()?;
        let now = ready(&w)?;
        (image.ends_with(":2") && now.0 == "True" && w.data["status"]["observedGeneration"] == 2).then_some(())
    })
    .await;
    r.stop().await;
}

/// Issue #19: the time-driven example acts when its schedule turns — woken
/// by its own `requeue-at`, not by polling or an event — and never before.
#[tokio::test]
async fn a_scheduled_scale_acts_when_its_schedule_turns() {
    let r = Running::start(plane(), "rust-scheduledscale", "schedule").await;
    // An entry a few seconds from now (whole seconds, UTC), the other long past.
    let turn = jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_secs(6)).unwrap();
    let turn = jiff::Timestamp::from_second(turn.as_second()).unwrap();
    let at = turn.strftime("%H:%M:%S").to_string();
    let before = turn.checked_sub(jiff::SignedDuration::from_hours(6)).unwrap().strftime("%H:%M:%S").to_string();
    r.create(
        "ScheduledScale",
        "shop",
        json!({"image": "registry.invalid/shop:1", "schedule": [{"at": before, "replicas": 1}, {"at": at, "replicas": 2}]}),
    )
    .await;
    let deployments: Api<Deployment> = Api::namespaced(r.client.clone(), &r.namespace);
    let replicas = || async { deployments.get_opt("shop").await.ok().flatten().and_then(|d| d.spec?.replicas) };
    eventually("the Deployment at the earlier entry's replicas", WAIT, || async {
        (replicas().await == Some(1)).then_some(())
    })
    .await;
    let started = Instant::now();
    // Timed when the answer is back: an upper bound of when it scaled, so
    // an answer back before the turn proves it acted early.
    let scaled = loop {
        let seen = replicas().await;
        let now = jiff::Timestamp::now();
        match seen {
            Some(2) => break now,
            _ if started.elapsed() > WAIT => panic!("not scaled to 2 by {now} (turn at {turn})"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let late = turn.duration_until(scaled);
    assert!(!late.is_negative(), "scaled at {scaled}, before the schedule turned at {turn}");
    // The latency is reported, not asserted tightly (a loaded CI machine); a
    // wake-up that missed the time would show as the next resync, minutes later.
    eprintln!("scaled {} ms after the schedule turned", late.as_millis());
    assert!(late < jiff::SignedDuration::from_secs(10), "scaled {late:?} after the turn: requeue-at was not honoured");
    // The status is written after the children, so it may follow a moment later.
    let status = eventually("the status of the new entry", WAIT, || async {
        let status = r.custom("ScheduledScale").get("shop").await.ok()?.data["status"].clone();
        (status["replicas"] == 2).then_some(status)
    })
    .await;
    assert_eq!(status["activeSince"], turn.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(), "{status}");
    r.stop().await;
}
