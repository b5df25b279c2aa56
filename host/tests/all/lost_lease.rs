//! A replica that loses its lease writes nothing more: every request the
//! manager's client sends is counted (a layer in the client's own stack, so
//! what is counted is exactly what leaves the process), and after the
//! elector steps down not one more write may be sent, although the guest
//! keeps asking to be requeued every 100 ms.

use crate::common;

use common::{eventually, free_port, guest, thing_crd};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("lost_lease", || operon_envtest::Options::default().crd(thing_crd()))
}

/// Writes (anything but GET) the client sent, with when, excluding the
/// Lease the elector itself keeps writing.
#[derive(Clone, Default)]
struct Writes(Arc<Mutex<Vec<(Instant, String)>>>);

impl Writes {
    fn client(&self, config: kube::Config) -> kube::Client {
        let writes = self.clone();
        let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            let path = req.uri().path().to_string();
            if req.method() != http::Method::GET && !path.contains("/leases") {
                writes.0.lock().unwrap().push((Instant::now(), format!("{} {path}", req.method())));
            }
            req
        });
        kube::client::ClientBuilder::try_from(config).unwrap().with_layer(&layer).build()
    }

    fn since(&self, t: Instant) -> Vec<String> {
        self.0.lock().unwrap().iter().filter(|(at, _)| *at > t).map(|(_, w)| w.clone()).collect()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

#[tokio::test]
async fn a_replica_that_lost_its_lease_writes_nothing_more() {
    crate::common::logs::init();
    let admin = plane().client().await;
    let namespace = operon_envtest::create_namespace(&admin, "lost-lease").await.unwrap();
    let writes = Writes::default();
    let client = writes.client(plane().config());

    let rt = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    let module = rt.load(&guest("echo"), Limits::default()).unwrap();
    let mut leader = operon::leader::Config::new(namespace.clone(), "operon-leader");
    leader.lease_duration = Duration::from_secs(4);
    leader.renew_deadline = Duration::from_secs(3);
    leader.retry_period = Duration::from_millis(500);
    let mgr = Manager::builder(client)
        .config(manager::Config {
            pipeline: operon::pipeline::Config {
                namespace: Some(namespace.clone()),
                controller: operon::controller::Config { max_concurrent_reconciles: 2, ..Default::default() },
                ..Default::default()
            },
            leader: Some(leader),
            server_addr: Some(([127, 0, 0, 1], free_port()).into()),
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    mgr.add(module);
    let task = tokio::spawn(mgr.run(std::future::pending()));

    // A parent that asks to be reconciled again every 100 ms, writing its
    // status each time: a steady stream of writes while we lead.
    let things: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "Thing")),
    );
    let thing: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "busy"}, "spec": {"count": true, "requeueAfterMs": 100}
    }))
    .unwrap();
    things.create(&PostParams::default(), &thing).await.unwrap();
    eventually("a stream of status writes", WAIT, || async {
        let count = things.get("busy").await.ok()?.data.pointer("/status/count").and_then(Value::as_u64)?;
        (count >= 5).then_some(())
    })
    .await;
    assert!(writes.count() >= 5, "the counting layer sees the writes");

    // Another holder takes the Lease (as a partitioned leader would see it
    // after a standby took over): the manager must step down at its next
    // renewal and stop writing.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &namespace);
    let stolen_at = eventually("the Lease taken by another holder", WAIT, || async {
        let mut lease = leases.get("operon-leader").await.ok()?;
        let spec = lease.spec.as_mut()?;
        spec.holder_identity = Some("another-replica".into());
        spec.lease_duration_seconds = Some(3600);
        leases.replace("operon-leader", &PostParams::default(), &lease).await.ok().map(|_| Instant::now())
    })
    .await;
    let result = tokio::time::timeout(Duration::from_secs(10), task).await.expect("the manager stops leading").unwrap();
    assert!(matches!(result, Err(manager::Error::LeadershipLost)), "{result:?}");
    let stepped_down = Instant::now();
    eprintln!("lost lease: stepped down {:?} after the Lease was taken", stepped_down - stolen_at);

    // Several requeue periods later, not one more write has left the process.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = writes.since(stepped_down);
    assert!(after.is_empty(), "writes after the lease was lost: {after:?}");
    let count_then = things.get("busy").await.unwrap().data.pointer("/status/count").and_then(Value::as_u64);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let count_now = things.get("busy").await.unwrap().data.pointer("/status/count").and_then(Value::as_u64);
    assert_eq!(count_then, count_now, "the parent's status must stop changing");
}
