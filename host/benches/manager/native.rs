//! The native kube-rs controller, run as its own process: the benchmark
//! re-executes itself with the hidden first argument `__native-controller`
//! (see `main`), so this is the same build of the same logic, measured in a
//! process of its own like Operon and the Go controller.
//!
//! `kube::runtime::Controller` over reflector stores of WebApps,
//! Deployments, Services and Ingresses (managedFields stripped, as Operon's
//! cache does), Operon's parent predicate (generation, labels, annotations,
//! finalizers, deletionTimestamp), and `operon_sdk::run::reconcile::<WebAppReconciler>`
//! called inline with a `FakeCluster` seeded with the cached children. It
//! makes the writes Operon's applier makes: the finalizer (SSA, own field
//! manager), the children (SSA with an ownerReference, skipped when the last
//! apply is known to be current), the status (SSA on the subresource,
//! skipped when the cached status holds it) and the guest's events.
//!
//! Protocol with the benchmark: it prints `ready` once its stores are
//! ready; with `--record-starts`, `start <unix ns> <object>` when a
//! `reconciling object` span opens; on a `counts` line on stdin, `counts
//! {json}`; it stops when stdin closes.

use anyhow::{Context as _, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, watcher};
use operon_sdk::raw;
use operon_sdk::testing::FakeCluster;
use rust_webapp::WebAppReconciler;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::{BufRead as _, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

use crate::{FINALIZER, GROUP, VERSION};

/// `__native-controller --namespace NS --workers N [--record-starts]`.
pub fn main(args: &[String]) -> Result<()> {
    let (mut namespace, mut workers, mut record_starts) = (None, 4usize, false);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--namespace" => namespace = it.next().cloned(),
            "--workers" => workers = it.next().context("--workers needs a value")?.parse()?,
            "--record-starts" => record_starts = true,
            other => bail!("native controller: unknown argument {other}"),
        }
    }
    let namespace = namespace.context("--namespace is required")?;
    let subscriber = tracing_subscriber::registry().with(StartLayer { on: record_starts }).with(
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
    );
    tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let client = kube::Client::try_default().await.context("KUBECONFIG")?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ctx, task) = Native::start(client, &namespace, workers, async move {
            let _ = stopped.await;
        })
        .await?;
        say("ready");
        // stdin: `counts` answers the counters; end of file stops.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(4);
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.blocking_send(line).is_err() {
                    break;
                }
            }
        });
        while let Some(line) = rx.recv().await {
            if line.trim() == "counts" {
                let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
                let counts = json!({
                    "reconciles": l(&ctx.reconciles), "errors": l(&ctx.errors), "finalizer": l(&ctx.finalizer_writes),
                    "apply": l(&ctx.apply_writes), "status": l(&ctx.status_writes),
                });
                say(&format!("counts {counts}"));
            }
        }
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(20), task).await.ok();
        Ok(())
    })
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

use tracing_subscriber::Layer as _;

/// Prints `start <unix ns> <object>` when kube-rs opens its per-reconcile
/// span (`reconciling object`, field `object.ref`).
struct StartLayer {
    on: bool,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StartLayer {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if !self.on || attrs.metadata().name() != "reconciling object" {
            return;
        }
        let now = crate::procs::now_ns();
        let mut visitor = FieldValue { field: "object.ref", value: None };
        attrs.record(&mut visitor);
        if let Some(object) = visitor.value {
            say(&format!("start {now} {object}"));
        }
    }
}

struct FieldValue {
    field: &'static str,
    value: Option<String>,
}

impl tracing::field::Visit for FieldValue {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.field {
            self.value = Some(format!("{value:?}"));
        }
    }
}

/// The native controller's shared state.
struct Native {
    client: kube::Client,
    namespace: String,
    webapp: ApiResource,
    deployment: ApiResource,
    service: ApiResource,
    ingress: ApiResource,
    deployments: Store<DynamicObject>,
    services: Store<DynamicObject>,
    ingresses: Store<DynamicObject>,
    recorder: Recorder,
    /// As Operon's applier: hash of the last applied object and the
    /// resourceVersion the API server answered, per child.
    applied: Mutex<HashMap<(String, String), (u64, String)>>,
    reconciles: AtomicU64,
    errors: AtomicU64,
    finalizer_writes: AtomicU64,
    apply_writes: AtomicU64,
    status_writes: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
enum NativeError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("guest logic: {0}")]
    Guest(String),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

const FIELD_MANAGER: &str = "native/webapp";

impl Native {
    async fn start(
        client: kube::Client,
        namespace: &str,
        workers: usize,
        shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ) -> Result<(Arc<Native>, tokio::task::JoinHandle<()>)> {
        let ar = |group: &str, version: &str, kind: &str| {
            ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
        };
        let (webapp, deployment, service, ingress) = (
            ar(GROUP, VERSION, "WebApp"),
            ar("apps", "v1", "Deployment"),
            ar("", "v1", "Service"),
            ar("networking.k8s.io", "v1", "Ingress"),
        );
        let reflect = |resource: &ApiResource| {
            let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
            let store = writer.as_reader();
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource);
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(|o: &mut DynamicObject| o.metadata.managed_fields = None)
                .reflect(writer)
                .touched_objects();
            (store, stream)
        };
        let (parents, parent_stream) = reflect(&webapp);
        let (deployments, deployment_stream) = reflect(&deployment);
        let (services, service_stream) = reflect(&service);
        let (ingresses, ingress_stream) = reflect(&ingress);
        let ctx = Arc::new(Native {
            recorder: Recorder::new(client.clone(), Reporter { controller: FIELD_MANAGER.into(), instance: None }),
            client,
            namespace: namespace.to_string(),
            webapp: webapp.clone(),
            deployment: deployment.clone(),
            service: service.clone(),
            ingress: ingress.clone(),
            deployments: deployments.clone(),
            services: services.clone(),
            ingresses: ingresses.clone(),
            applied: Mutex::new(HashMap::new()),
            reconciles: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            finalizer_writes: AtomicU64::new(0),
            apply_writes: AtomicU64::new(0),
            status_writes: AtomicU64::new(0),
        });
        let controller = Controller::for_stream_with(
            parent_stream.predicate_filter(parent_predicate, PredicateConfig::default()),
            parents.clone(),
            webapp,
        )
        .owns_stream_with(deployment_stream, deployment)
        .owns_stream_with(service_stream, service)
        .owns_stream_with(ingress_stream, ingress)
        .with_config(controller::Config::default().concurrency(workers as u16))
        .graceful_shutdown_on(shutdown);
        let task =
            tokio::spawn(controller.run(native_reconcile, native_error_policy, ctx.clone()).for_each(|_| async {}));
        for store in [&parents, &deployments, &services, &ingresses] {
            tokio::time::timeout(Duration::from_secs(30), store.wait_until_ready()).await??;
        }
        Ok((ctx, task))
    }

    fn owned(
        &self,
        store: &Store<DynamicObject>,
        resource: &ApiResource,
        name: &str,
        uid: &str,
    ) -> Option<Arc<DynamicObject>> {
        store.get(&ObjectRef::new_with(name, resource.clone()).within(&self.namespace)).filter(|c| {
            c.metadata.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid)
        })
    }

    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, resource)
    }
}

/// Operon's default predicate for parents: generation, labels,
/// annotations, finalizers, deletionTimestamp.
fn parent_predicate(o: &DynamicObject) -> Option<u64> {
    let m = &o.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (m.generation, &m.labels, &m.annotations, &m.finalizers, m.deletion_timestamp.as_ref().map(|t| t.0.to_string()))
        .hash(&mut h);
    Some(h.finish())
}

fn native_error_policy(_: Arc<DynamicObject>, error: &NativeError, ctx: Arc<Native>) -> Action {
    ctx.errors.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(%error, "native reconcile failed");
    Action::requeue(Duration::from_millis(50))
}

/// The native reconcile: what Operon's controller does around the guest
/// call, with the guest's logic called directly.
async fn native_reconcile(parent: Arc<DynamicObject>, ctx: Arc<Native>) -> Result<Action, NativeError> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    if parent.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = parent.metadata.name.clone().unwrap_or_default();
    let uid = parent.metadata.uid.clone().unwrap_or_default();
    let parents = ctx.api(&ctx.webapp);

    if !parent.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER) {
        let body = json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "WebApp",
                          "metadata": {"name": name, "namespace": ctx.namespace, "finalizers": [FINALIZER]}});
        parents
            .patch(&name, &PatchParams::apply(&format!("{FIELD_MANAGER}-finalizer")).force(), &Patch::Apply(&body))
            .await?;
        ctx.finalizer_writes.fetch_add(1, Ordering::Relaxed);
    }

    // The request, from the caches, as the host builds it.
    let kinds = [
        (&ctx.deployment, &ctx.deployments, ("apps", "v1", "Deployment")),
        (&ctx.service, &ctx.services, ("", "v1", "Service")),
        (&ctx.ingress, &ctx.ingresses, ("networking.k8s.io", "v1", "Ingress")),
    ];
    let mut cluster = FakeCluster::new();
    let mut children = Vec::new();
    let mut existing = Vec::new();
    for (resource, store, (group, version, kind)) in kinds {
        let child = ctx.owned(store, resource, &name, &uid);
        // Rated as the host rates each child (kstatus), as a native
        // controller would compute readiness itself.
        let objects = child
            .iter()
            .map(|c| {
                let object = serde_json::to_string(&**c)?;
                let readiness = operon_sdk::testing::raw_readiness(operon::contract::Readiness::of_json(&object));
                Ok::<_, serde_json::Error>(raw::Child { object, readiness })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(c) = child {
            cluster.insert(&*c);
            existing.push((resource, c));
        }
        children.push(raw::Children {
            kind: raw::Gvk { group: group.into(), version: version.into(), kind: kind.into() },
            objects,
        });
    }
    let request = raw::Request {
        object: serde_json::to_string(&*parent)?,
        children,
        related: Vec::new(),
        finalizing: false,
        attempt: 0,
        now: operon::contract::rfc3339(jiff::Timestamp::now()),
    };
    let outcome = operon_sdk::run::reconcile::<WebAppReconciler>(&cluster, request)
        .map_err(|f| NativeError::Guest(format!("{f:?}")))?;

    // Children: server-side apply, skipped when our last apply is current.
    let owner = json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "WebApp", "name": name, "uid": uid,
                       "controller": true, "blockOwnerDeletion": true});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut wanted = HashSet::new();
    for text in &outcome.desired {
        let mut child: Value = serde_json::from_str(text)?;
        let kind = child["kind"].as_str().unwrap_or_default().to_string();
        let child_name = child["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let resource = [&ctx.deployment, &ctx.service, &ctx.ingress]
            .into_iter()
            .find(|r| r.kind == kind)
            .ok_or_else(|| NativeError::Guest(format!("unexpected child kind {kind}")))?;
        if let Some(meta) = child["metadata"].as_object_mut() {
            for server_owned in ["resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"] {
                meta.remove(server_owned);
            }
            meta.insert("namespace".into(), ctx.namespace.clone().into());
            meta.insert("ownerReferences".into(), json!([owner]));
        }
        wanted.insert((kind.clone(), child_name.clone()));
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            child.to_string().hash(&mut h);
            h.finish()
        };
        let current_rv = existing
            .iter()
            .find(|(r, c)| r.kind == kind && c.metadata.name.as_deref() == Some(&child_name))
            .and_then(|(_, c)| c.metadata.resource_version.clone());
        let memo = (kind.clone(), child_name.clone());
        let last = ctx.applied.lock().unwrap().get(&memo).cloned();
        if let (Some((h, rv)), Some(current)) = (last, current_rv)
            && h == hash
            && rv == current
        {
            continue;
        }
        let written = ctx.api(resource).patch(&child_name, &params, &Patch::Apply(&child)).await?;
        ctx.apply_writes.fetch_add(1, Ordering::Relaxed);
        if let Some(rv) = written.metadata.resource_version {
            ctx.applied.lock().unwrap().insert(memo, (hash, rv));
        }
    }
    // Prune children no longer wanted (never, in this benchmark; kept for equivalence).
    for (resource, child) in &existing {
        let child_name = child.metadata.name.clone().unwrap_or_default();
        if wanted.contains(&(resource.kind.clone(), child_name.clone())) {
            continue;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: child.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::background()
        };
        match ctx.api(resource).delete(&child_name, &params).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }

    // Status: server-side apply on the subresource unless already there.
    if let Some(text) = &outcome.status {
        let status: Value = serde_json::from_str(text)?;
        let current = parent.data.get("status").cloned().unwrap_or(Value::Null);
        if !operon::apply::is_subset(&status, &current) {
            let body = json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "WebApp",
                              "metadata": {"name": name, "namespace": ctx.namespace}, "status": status});
            parents.patch_status(&name, &params, &Patch::Apply(&body)).await?;
            ctx.status_writes.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Events, as Operon's applier records them.
    let reference = ObjectReference {
        api_version: Some(format!("{GROUP}/{VERSION}")),
        kind: Some("WebApp".into()),
        name: Some(name.clone()),
        namespace: Some(ctx.namespace.clone()),
        uid: Some(uid.clone()),
        resource_version: parent.metadata.resource_version.clone(),
        field_path: None,
    };
    for e in &outcome.events {
        let event = KubeEvent {
            type_: if e.warning { EventType::Warning } else { EventType::Normal },
            reason: e.reason.clone(),
            note: Some(e.message.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(error) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, "could not record event");
        }
    }
    Ok(Action::await_change())
}
