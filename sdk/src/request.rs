//! [`Request`]: one call of `reconcile`, with the parent typed.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::failure::json_error_message;
use crate::{Failure, Gvk, ObjectKind, Readiness, ReadinessStatus, raw};

/// The parent's `metadata`, as far as reconcilers commonly need it.
///
/// Missing fields are empty (`""`, `None`, empty maps).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[non_exhaustive]
pub struct Metadata {
    /// `metadata.name`.
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    /// `metadata.namespace`; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    #[serde(deserialize_with = "null_as_default")]
    pub uid: String,
    /// `metadata.generation`: bumped by the API server on every spec change.
    pub generation: Option<i64>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.creationTimestamp` (RFC 3339).
    pub creation_timestamp: Option<String>,
    /// `metadata.deletionTimestamp` (RFC 3339), set once deletion started.
    pub deletion_timestamp: Option<String>,
    /// `metadata.labels`.
    #[serde(deserialize_with = "null_as_default")]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    #[serde(deserialize_with = "null_as_default")]
    pub annotations: BTreeMap<String, String>,
    /// `metadata.finalizers`.
    #[serde(deserialize_with = "null_as_default")]
    pub finalizers: Vec<String>,
}

fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(deserializer: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// What every object has: enough to name it in messages and to find it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Head {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) metadata: Metadata,
}

impl Head {
    /// `kind namespace/name` for messages.
    pub(crate) fn describe(&self) -> String {
        match &self.metadata.namespace {
            Some(namespace) => format!("{} {namespace}/{}", self.kind, self.metadata.name),
            None => format!("{} {}", self.kind, self.metadata.name),
        }
    }
}

/// Parses one object of the request as `T`.
///
/// # Errors
///
/// Terminal: JSON that does not fit `T` will not fit it on a retry.
pub(crate) fn parse_object<T: DeserializeOwned>(json: &str) -> Result<T, Failure> {
    serde_json::from_str(json).map_err(|error| {
        let head: Head = serde_json::from_str(json).unwrap_or_default();
        Failure::terminal(format!("{} is invalid: {}", head.describe(), json_error_message(&error)))
    })
}

/// One call of [`Reconciler::reconcile`]: the parent, typed as `K`, with its
/// children and related objects as the host's cache has them.
///
/// Children and related objects stay JSON text until asked for, typed as the
/// caller wants them ([`children`](Request::children),
/// [`related`](Request::related)), so a reconciler pays only for what it reads.
///
/// [`Reconciler::reconcile`]: crate::Reconciler::reconcile
#[derive(Debug, Clone)]
pub struct Request<K> {
    /// The parent object, including its current `status`.
    pub object: K,
    /// The parent still carries the manifest's finalizer and is being
    /// deleted or no longer matches the Reconciler's selector: clean up,
    /// then answer [`Outcome::finalized`].
    ///
    /// [`Outcome::finalized`]: crate::Outcome::finalized
    pub finalizing: bool,
    /// How many times in a row this parent failed before this call (0 on the
    /// first try and after a success).
    pub attempt: u32,
    metadata: Metadata,
    api_version: String,
    kind: String,
    now: String,
    children: Vec<Group>,
    related: Vec<String>,
}

/// The children of one owned kind, with their readiness.
#[derive(Debug, Clone)]
struct Group {
    kind: Gvk,
    objects: Vec<String>,
    readiness: Vec<Readiness>,
    /// Each object's `metadata.name`, read once when first asked for.
    names: std::sync::OnceLock<Vec<String>>,
}

impl Group {
    /// The objects' names, in order (empty for one that does not parse).
    fn names(&self) -> &[String] {
        self.names.get_or_init(|| {
            #[derive(Deserialize)]
            struct Named {
                #[serde(default)]
                metadata: NameOnly,
            }
            #[derive(Default, Deserialize)]
            struct NameOnly {
                #[serde(default, deserialize_with = "null_as_default")]
                name: String,
            }
            let name = |json: &String| serde_json::from_str::<Named>(json).map(|n| n.metadata.name).unwrap_or_default();
            self.objects.iter().map(name).collect()
        })
    }

    /// The index of the object called `name`.
    fn position(&self, name: &str) -> Option<usize> {
        self.names().iter().position(|n| n == name)
    }
}

/// The contract's readiness as the SDK's (one set of values, from
/// `operon_contract`).
fn readiness(raw: raw::Readiness) -> Readiness {
    let status = match raw.status {
        raw::ReadinessStatus::Current => ReadinessStatus::Current,
        raw::ReadinessStatus::InProgress => ReadinessStatus::InProgress,
        raw::ReadinessStatus::Failed => ReadinessStatus::Failed,
        raw::ReadinessStatus::Terminating => ReadinessStatus::Terminating,
        raw::ReadinessStatus::Unknown => ReadinessStatus::Unknown,
    };
    Readiness { status, message: raw.message }
}

impl<K: DeserializeOwned> Request<K> {
    /// Parses the WIT request.
    ///
    /// # Errors
    ///
    /// Terminal, when the parent is not a Kubernetes object or does not fit
    /// `K` (for example a required spec field is missing), with serde's
    /// message: `WebApp shop/web is invalid: missing field `image``.
    pub fn from_raw(request: raw::Request) -> Result<Request<K>, Failure> {
        let head: Head = serde_json::from_str(&request.object).map_err(|error| {
            Failure::terminal(format!("the parent is not a Kubernetes object: {}", json_error_message(&error)))
        })?;
        let object = serde_json::from_str(&request.object).map_err(|error| {
            Failure::terminal(format!("{} is invalid: {}", head.describe(), json_error_message(&error)))
        })?;
        Ok(Request {
            object,
            finalizing: request.finalizing,
            attempt: request.attempt,
            metadata: head.metadata,
            api_version: head.api_version,
            kind: head.kind,
            now: request.now,
            children: request
                .children
                .into_iter()
                .map(|group| {
                    let (objects, rated) =
                        group.objects.into_iter().map(|c| (c.object, readiness(c.readiness))).unzip();
                    Group { kind: group.kind, objects, readiness: rated, names: Default::default() }
                })
                .collect(),
            related: request.related,
        })
    }
}

impl<K> Request<K> {
    /// The parent's metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The parent's name.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// The parent's namespace (`None` for a cluster-scoped parent).
    pub fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    /// The parent's `metadata.generation` (0 if the object has none).
    pub fn generation(&self) -> i64 {
        self.metadata.generation.unwrap_or(0)
    }

    /// The parent's `metadata.uid`.
    pub fn uid(&self) -> &str {
        &self.metadata.uid
    }

    /// The parent's labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.metadata.labels
    }

    /// The parent's annotations.
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.metadata.annotations
    }

    /// The host's clock when this reconcile began (contract 0.2): one value
    /// for the whole call, so time-dependent logic is deterministic and a
    /// fixture fixes it with `now:`. Use it instead of reading a clock.
    ///
    /// The Unix epoch if the host's text does not parse (it always does).
    pub fn now(&self) -> jiff::Timestamp {
        self.now.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    /// [`now`](Request::now) as the host wrote it: RFC 3339 in UTC with
    /// milliseconds (`2026-11-26T04:05:06.789Z`), ready for a status field.
    pub fn now_rfc3339(&self) -> &str {
        &self.now
    }

    /// The readiness the host computed for the child of `C`'s kind called
    /// `name` (kstatus's rules: a Deployment rolled out and available, a
    /// Job complete, a custom resource `Ready` for its generation), or
    /// `None` when there is no such child.
    pub fn readiness<C: ObjectKind + ?Sized>(&self, name: &str) -> Option<&Readiness> {
        self.readiness_of(&C::gvk(), name)
    }

    /// As [`readiness`](Request::readiness), for a kind given as a [`Gvk`].
    pub fn readiness_of(&self, kind: &Gvk, name: &str) -> Option<&Readiness> {
        let group = self.group(kind)?;
        group.readiness.get(group.position(name)?)
    }

    /// Every child's kind, name and readiness, in the order of
    /// `manifest.owns`, each kind's sorted by namespace then name.
    pub fn children_readiness(&self) -> impl Iterator<Item = (&Gvk, String, &Readiness)> {
        self.children.iter().flat_map(|group| {
            group.names().iter().zip(&group.readiness).map(move |(name, rated)| (&group.kind, name.clone(), rated))
        })
    }

    /// Whether every existing child is `Current`. True when there are no
    /// children at all: check that the ones you want exist
    /// ([`has_child`](Request::has_child)) before trusting it.
    pub fn all_current(&self) -> bool {
        self.children.iter().flat_map(|group| &group.readiness).all(|r| r.status == ReadinessStatus::Current)
    }

    /// The parent's kind, from its `apiVersion` and `kind`.
    pub fn kind(&self) -> Gvk {
        Gvk::from_api_version(&self.api_version, &self.kind)
    }

    /// The existing children of `C`'s kind, sorted by namespace then name.
    /// Empty when there are none or when the kind is not in `manifest.owns`.
    ///
    /// # Errors
    ///
    /// Terminal, when a child does not fit `C`.
    pub fn children<C: ObjectKind + DeserializeOwned>(&self) -> Result<Vec<C>, Failure> {
        self.children_of(&C::gvk())
    }

    /// The existing children of `kind`, parsed as `C` (for types without
    /// [`ObjectKind`], such as `serde_json::Value`).
    ///
    /// # Errors
    ///
    /// Terminal, when a child does not fit `C`.
    pub fn children_of<C: DeserializeOwned>(&self, kind: &Gvk) -> Result<Vec<C>, Failure> {
        self.raw_children(kind).iter().map(|json| parse_object(json)).collect()
    }

    /// The existing child of `C`'s kind called `name`, if any.
    ///
    /// # Errors
    ///
    /// Terminal, when that child does not fit `C`.
    pub fn child<C: ObjectKind + DeserializeOwned>(&self, name: &str) -> Result<Option<C>, Failure> {
        let Some(group) = self.group(&C::gvk()) else { return Ok(None) };
        group.position(name).map(|at| parse_object(&group.objects[at])).transpose()
    }

    /// Whether a child of `C`'s kind called `name` exists. Parses only the
    /// children's `metadata`, so `C` may be a large type that is never
    /// deserialized.
    pub fn has_child<C: ObjectKind + ?Sized>(&self, name: &str) -> bool {
        self.group(&C::gvk()).is_some_and(|group| group.position(name).is_some())
    }

    /// The existing children of `kind` as JSON text.
    pub fn raw_children(&self, kind: &Gvk) -> &[String] {
        self.group(kind).map_or(&[], |group| group.objects.as_slice())
    }

    fn group(&self, kind: &Gvk) -> Option<&Group> {
        self.children.iter().find(|group| group.kind == *kind)
    }

    /// The related objects (of watched kinds) of `R`'s kind.
    ///
    /// # Errors
    ///
    /// Terminal, when one of them does not fit `R`.
    pub fn related<R: ObjectKind + DeserializeOwned>(&self) -> Result<Vec<R>, Failure> {
        let kind = R::gvk();
        let mut related = Vec::new();
        for json in &self.related {
            let head: Head = serde_json::from_str(json)?;
            if kind.matches(&head.api_version, &head.kind) {
                related.push(parse_object(json)?);
            }
        }
        Ok(related)
    }

    /// Every related object as JSON text, in the host's order.
    pub fn raw_related(&self) -> &[String] {
        &self.related
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use crate::{Context, Manifest, Outcome, Reconciler};
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use serde_json::{Value, json};

    struct Owner;

    impl Reconciler for Owner {
        type Object = Value;
        fn manifest() -> Manifest {
            Manifest::new("owner", Gvk::new("", "v1", "ConfigMap")).owns(Deployment::gvk()).owns(Service::gvk())
        }
        fn reconcile(_: Request<Value>, _: &Context) -> Result<Outcome, Failure> {
            Ok(Outcome::new())
        }
    }

    fn object(api_version: &str, kind: &str, name: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "ns"}})
    }

    fn request() -> Request<ConfigMap> {
        let mut parent = object("v1", "ConfigMap", "parent");
        parent["metadata"]["generation"] = json!(4);
        parent["metadata"]["labels"] = json!({"team": "web"});
        parent["metadata"]["annotations"] = Value::Null;
        let raw = testing::request(parent)
            .child(object("apps/v1", "Deployment", "b"))
            .child(object("v1", "Service", "svc"))
            .child(object("apps/v1", "Deployment", "a"))
            .related(object("v1", "Secret", "s"))
            .related(object("v1", "ConfigMap", "c"))
            .attempt(3)
            .build::<Owner>();
        Request::from_raw(raw).unwrap()
    }

    #[test]
    fn metadata_should_be_read_from_the_parent() {
        let request = request();
        assert_eq!(request.name(), "parent");
        assert_eq!(request.namespace(), Some("ns"));
        assert_eq!(request.generation(), 4);
        assert_eq!(request.labels()["team"], "web");
        assert!(request.annotations().is_empty(), "null reads as empty");
        assert_eq!(request.kind(), Gvk::new("", "v1", "ConfigMap"));
        assert_eq!(request.attempt, 3);
        assert!(!request.finalizing);
    }

    #[test]
    fn children_should_be_typed_per_kind_and_sorted_by_name() {
        let request = request();
        let names: Vec<_> = request
            .children::<Deployment>()
            .unwrap()
            .into_iter()
            .map(|deployment| deployment.metadata.name.unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(request.children::<Service>().unwrap().len(), 1);
        assert!(request.children::<ConfigMap>().unwrap().is_empty(), "not owned: empty");
        assert!(request.child::<Deployment>("b").unwrap().is_some());
        assert!(request.child::<Deployment>("svc").unwrap().is_none());
        assert!(request.has_child::<Service>("svc"));
        assert!(!request.has_child::<Service>("a"));
    }

    #[test]
    fn children_should_carry_their_readiness_and_the_request_its_time() {
        let mut deployment = object("apps/v1", "Deployment", "a");
        deployment["spec"] = json!({"replicas": 2});
        deployment["status"] = json!({"replicas": 1});
        let raw = testing::request(object("v1", "ConfigMap", "parent"))
            .now("2026-11-26T09:00:00.000Z")
            .child(deployment)
            .child_with_readiness(object("v1", "Service", "svc"), Readiness::new(ReadinessStatus::Current, "up"))
            .build::<Owner>();
        let request = Request::<Value>::from_raw(raw).unwrap();
        assert_eq!(request.now_rfc3339(), "2026-11-26T09:00:00.000Z");
        assert_eq!(request.now().to_string(), "2026-11-26T09:00:00Z");
        let rated = request.readiness::<Deployment>("a").unwrap();
        assert_eq!((rated.status, rated.message.as_str()), (ReadinessStatus::InProgress, "Replicas: 1/2"));
        assert_eq!(request.readiness::<Service>("svc").unwrap().status, ReadinessStatus::Current);
        assert!(request.readiness::<Service>("a").is_none());
        assert!(!request.all_current());
        let names: Vec<String> = request.children_readiness().map(|(_, name, _)| name).collect();
        assert_eq!(names, ["a", "svc"]);
    }

    #[test]
    fn related_objects_should_be_filtered_by_kind() {
        let request = request();
        let config_maps = request.related::<ConfigMap>().unwrap();
        assert_eq!(config_maps.len(), 1);
        assert_eq!(config_maps[0].metadata.name.as_deref(), Some("c"));
        assert_eq!(request.raw_related().len(), 2);
    }

    #[test]
    fn a_parent_that_does_not_fit_should_be_a_terminal_failure() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code, reason = "only deserialized")]
        struct Strict {
            spec: Value,
        }
        let raw = testing::request(object("v1", "ConfigMap", "p")).build::<Owner>();
        let failure = Request::<Strict>::from_raw(raw).unwrap_err();
        assert_eq!(failure, Failure::terminal("ConfigMap ns/p is invalid: missing field `spec`"));

        let mut raw = testing::request(object("v1", "ConfigMap", "p")).build::<Owner>();
        raw.object = "[1]".into();
        assert!(
            Request::<Value>::from_raw(raw).unwrap_err().message().starts_with("the parent is not a Kubernetes object")
        );
    }
}
