//! The control plane behaves like Kubernetes: CRDs, CRUD, watch, server-side
//! apply, status, leases, garbage collection, namespace deletion. One shared
//! control plane; each test in its own namespace.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams, PropagationPolicy, WatchEvent, WatchParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use operon_envtest::{ControlPlane, Options, create_namespace, shared_with};
use serde_json::json;
use std::time::Duration;

const GROUP: &str = "smoke.operon.dev";
const WAIT: Duration = Duration::from_secs(30);

fn widgets() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Widget"), "widgets")
}

/// The shared control plane, started with the Widget CRD so the garbage
/// collector knows Widgets from the start.
fn plane() -> &'static ControlPlane {
    shared_with(|| Options::with_controller_manager().crd(widget_crd()))
}

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("widgets.{GROUP}") },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList" },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": { "type": "object", "properties": {
                            "size": { "type": "integer" },
                            "color": { "type": "string" }
                        }},
                        "status": { "type": "object", "properties": {
                            "ready": { "type": "boolean" }
                        }}
                    }
                }}
            }]
        }
    }))
    .unwrap()
}

/// Applies the Widget CRD again (idempotent: tests race to do it) and waits
/// until it is Established.
async fn install_crd(client: &Client) -> Api<DynamicObject> {
    let crd = widget_crd();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd.name_any();
    crds.patch(&name, &PatchParams::apply("smoke-test").force(), &Patch::Apply(&crd))
        .await
        .expect("apply the Widget CRD");
    tokio::time::timeout(WAIT, await_condition(crds, &name, conditions::is_crd_established()))
        .await
        .expect("the Widget CRD becomes Established in time")
        .unwrap();
    Api::all_with(client.clone(), &widgets())
}

fn widget(name: &str, spec: serde_json::Value) -> DynamicObject {
    DynamicObject::new(name, &widgets()).data(json!({ "spec": spec }))
}

async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while api.get_opt(name).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "{name} still exists after {WAIT:?}\n{}", plane().logs(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn custom_objects_support_create_get_list_watch_apply_delete() {
    let client = plane().client().await;
    install_crd(&client).await;
    let ns = create_namespace(&client, "crud").await.unwrap();
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &widgets());

    let listed = api.list(&ListParams::default()).await.unwrap();
    assert!(listed.items.is_empty());
    let version = listed.metadata.resource_version.unwrap();
    let mut events = api.watch(&WatchParams::default().timeout(30), &version).await.unwrap().boxed();

    let created = api.create(&PostParams::default(), &widget("a", json!({ "size": 1 }))).await.unwrap();
    assert_eq!(created.data["spec"]["size"], 1);
    let fetched = api.get("a").await.unwrap();
    assert_eq!(fetched.uid(), created.uid());
    let names: Vec<String> =
        api.list(&ListParams::default()).await.unwrap().items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["a"]);

    let added = next_event(&mut events, |e| matches!(e, WatchEvent::Added(_))).await;
    assert!(matches!(added, WatchEvent::Added(ref o) if o.name_any() == "a"), "{added:?}");

    // Server-side apply: the field manager owns what it set; a second apply
    // changes the field and bumps the generation.
    let apply = PatchParams::apply("smoke-test");
    let first = api.patch("b", &apply, &Patch::Apply(widget("b", json!({ "size": 2, "color": "red" })))).await.unwrap();
    let managers: Vec<_> = first.managed_fields().iter().filter_map(|entry| entry.manager.clone()).collect();
    assert!(managers.contains(&"smoke-test".to_owned()), "managers: {managers:?}");
    let second =
        api.patch("b", &apply, &Patch::Apply(widget("b", json!({ "size": 3, "color": "red" })))).await.unwrap();
    assert_eq!(second.data["spec"]["size"], 3);
    assert_eq!(second.metadata.generation, first.metadata.generation.map(|g| g + 1));
    // A different manager setting the same field conflicts unless forced.
    let conflict = api
        .patch("b", &PatchParams::apply("someone-else"), &Patch::Apply(widget("b", json!({ "size": 4 }))))
        .await
        .expect_err("a second manager may not take `size` without force");
    assert!(matches!(conflict, kube::Error::Api(ref status) if status.code == 409), "{conflict:?}");

    api.delete("a", &DeleteParams::default()).await.unwrap();
    wait_gone(&api, "a").await;
    next_event(&mut events, |e| matches!(e, WatchEvent::Deleted(o) if o.name_any() == "a")).await;
}

/// The next watch event that `wanted` accepts, skipping others (bookmarks,
/// modifications); panics on an error, the end of the stream or a timeout.
async fn next_event(
    events: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin),
    wanted: impl Fn(&WatchEvent<DynamicObject>) -> bool,
) -> WatchEvent<DynamicObject> {
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, events.try_next()).await {
            Ok(Ok(Some(event))) if wanted(&event) => return event,
            Ok(Ok(Some(event))) => seen.push(format!("{event:?}")),
            other => panic!("no wanted watch event; got {other:?} after {seen:?}"),
        }
    }
}

#[tokio::test]
async fn status_is_written_only_through_the_status_subresource() {
    let client = plane().client().await;
    install_crd(&client).await;
    let ns = create_namespace(&client, "status").await.unwrap();
    let api = Api::<DynamicObject>::namespaced_with(client, &ns, &widgets());

    let mut object = widget("w", json!({ "size": 1 }));
    object.data["status"] = json!({ "ready": true });
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    assert!(created.data.get("status").is_none(), "status ignored on create: {created:?}");

    let patched = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "ready": true }, "spec": { "size": 9 } })),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["ready"], true);
    assert_eq!(patched.data["spec"]["size"], 1, "spec ignored by the status subresource");
    assert_eq!(patched.metadata.generation, created.metadata.generation);
}

#[tokio::test]
async fn leases_update_with_optimistic_concurrency() {
    let client = plane().client().await;
    let ns = create_namespace(&client, "lease").await.unwrap();
    let api = Api::<Lease>::namespaced(client, &ns);

    let lease = Lease {
        metadata: ObjectMeta { name: Some("leader".into()), ..ObjectMeta::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }),
    };
    let created = api.create(&PostParams::default(), &lease).await.unwrap();

    let mut taken = created.clone();
    taken.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let updated = api.replace("leader", &PostParams::default(), &taken).await.unwrap();
    assert_eq!(updated.spec.unwrap().holder_identity.as_deref(), Some("b"));

    // A writer holding the old resourceVersion loses.
    let mut stale = created;
    stale.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let error =
        api.replace("leader", &PostParams::default(), &stale).await.expect_err("a stale resourceVersion conflicts");
    assert!(matches!(error, kube::Error::Api(ref status) if status.code == 409), "{error:?}");
}

fn owner_reference(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn config_map(name: &str, owner: Option<OwnerReference>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn garbage_collector_deletes_children_of_a_deleted_owner() {
    let client = plane().client().await;
    let ns = create_namespace(&client, "gc").await.unwrap();
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let post = PostParams::default();

    // Background: the owner goes at once, the child after.
    let owner = config_maps.create(&post, &config_map("owner", None)).await.unwrap();
    let reference = owner_reference("v1", "ConfigMap", "owner", &owner.uid().unwrap());
    config_maps.create(&post, &config_map("child", Some(reference))).await.unwrap();
    config_maps.delete("owner", &DeleteParams::background()).await.unwrap();
    wait_gone(&config_maps, "child").await;
}

#[tokio::test]
async fn foreground_deletion_of_a_custom_object_waits_for_its_children() {
    let client = plane().client().await;
    let ns = create_namespace(&client, "foreground").await.unwrap();
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let post = PostParams::default();

    // Foreground, with a custom object as the owner: blockOwnerDeletion
    // holds the owner until the child is gone.
    install_crd(&client).await;
    let widgets = Api::<DynamicObject>::namespaced_with(client, &ns, &widgets());
    let owner = widgets.create(&post, &widget("parent", json!({ "size": 1 }))).await.unwrap();
    let reference = owner_reference(&format!("{GROUP}/v1"), "Widget", "parent", &owner.uid().unwrap());
    config_maps.create(&post, &config_map("owned", Some(reference))).await.unwrap();
    let foreground =
        DeleteParams { propagation_policy: Some(PropagationPolicy::Foreground), ..DeleteParams::default() };
    let deleting = widgets.delete("parent", &foreground).await.unwrap();
    let deleting = deleting.left().expect("foreground deletion keeps the owner for a while");
    assert!(deleting.finalizers().iter().any(|f| f == "foregroundDeletion"), "{deleting:?}");
    wait_gone(&widgets, "parent").await;
    assert!(config_maps.get_opt("owned").await.unwrap().is_none(), "owner left before child");
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_contents() {
    let client = plane().client().await;
    let ns = create_namespace(&client, "doomed").await.unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &config_map("content", None))
        .await
        .unwrap();
    let namespaces = Api::<Namespace>::all(client);
    namespaces.delete(&ns, &DeleteParams::default()).await.unwrap();
    wait_gone(&namespaces, &ns).await;
}

#[tokio::test]
async fn a_client_from_the_kubeconfig_reaches_kubernetes_1_34() {
    let plane = plane();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(plane.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let version = Client::try_from(config).unwrap().apiserver_version().await.unwrap();
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "34"));
    // And a second fresh client, in another test's runtime, still works.
    let names: Vec<String> = Api::<Namespace>::all(plane.client().await)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(names.iter().any(|n| n == "kube-system"), "{names:?}");
}
