//! One cached object, held compactly: its JSON text, and the few fields that
//! indexes, predicates and mappings need, extracted once when it arrives.
//!
//! Why not a parsed object: a `serde_json::Value` tree of a 4 KB object
//! takes several times that in small allocations, and guests want the text
//! anyway (objects cross the WIT boundary as JSON). The watch hands us each
//! object as a [`RawObject`]: its top-level fields as undecoded JSON slices,
//! so only `metadata` is parsed, and only the fields listed here.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, TypeMeta};
use kube::core::DynamicResourceScope;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::ObjectKey;

/// An object as the watch delivers it: top-level fields as raw JSON, plus the
/// resourceVersion the watcher tracks. Converted to a [`CachedObject`] at
/// once; never stored.
#[derive(Clone, Debug)]
pub struct RawObject {
    fields: Vec<(String, Box<RawValue>)>,
    meta: ObjectMeta,
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Vec<(String, Box<RawValue>)>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(6);
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push(entry);
                }
                Ok(fields)
            }
        }
        let fields = d.deserialize_map(Fields)?;
        // Only what the watcher itself reads (the resourceVersion) and what
        // logs show.
        // Lenient: a malformed field is reported when the object is cached
        // (and the object skipped), instead of failing the whole list here.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Min {
            name: Option<serde_json::Value>,
            namespace: Option<serde_json::Value>,
            resource_version: Option<serde_json::Value>,
        }
        let text = |v: Option<serde_json::Value>| match v {
            Some(serde_json::Value::String(s)) => Some(s),
            _ => None,
        };
        let meta = match fields.iter().find(|(k, _)| k == "metadata") {
            Some((_, raw)) => match serde_json::from_str::<Min>(raw.get()) {
                Ok(m) => ObjectMeta {
                    name: text(m.name),
                    namespace: text(m.namespace),
                    resource_version: text(m.resource_version),
                    ..ObjectMeta::default()
                },
                Err(_) => ObjectMeta::default(),
            },
            None => ObjectMeta::default(),
        };
        Ok(RawObject { fields, meta })
    }
}

/// An object watched as `PartialObjectMetadata` ([`super::WatchKey::metadata_only`]),
/// as the raw object of its `apiVersion`, `kind` and `metadata`.
pub(super) fn from_meta(meta: kube::core::PartialObjectMeta<RawObject>) -> RawObject {
    let text = serde_json::to_string(&meta).unwrap_or_else(|_| "{}".into());
    serde_json::from_str(&text).unwrap_or(RawObject { fields: Vec::new(), meta: meta.metadata })
}

impl kube::Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// The controller ownerReference of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRef {
    /// `group/version` (or `version`) of the owner.
    pub api_version: Box<str>,
    /// The owner's kind.
    pub kind: Box<str>,
    /// The owner's name (same namespace as the object, or cluster-scoped).
    pub name: Box<str>,
    /// The owner's UID.
    pub uid: Box<str>,
}

impl ControllerRef {
    /// The owner's API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }
}

/// One object in the cache. Immutable; shared as `Arc<CachedObject>`.
pub struct CachedObject {
    /// `apiVersion` and `kind`, shared by every object of an informer.
    types: Arc<TypeMeta>,
    /// `apiVersion` and `kind` first, then the object's other top-level
    /// fields as the API server sent them, with `metadata.managedFields`
    /// removed.
    json: Box<str>,
    namespace: Option<Box<str>>,
    name: Box<str>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    generation: Option<i64>,
    deleting: bool,
    /// Sorted by key.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// A digest of the annotations: the default predicate only asks whether
    /// they changed; the rare reader of a value parses it from `json`.
    annotations_digest: u64,
    finalizers: Box<[Box<str>]>,
    controller: Option<Box<ControllerRef>>,
    /// Its readiness, rated on first use (contract 0.2 hands it with each
    /// child): once per object version, not once per reconcile.
    readiness: std::sync::OnceLock<Box<crate::contract::Readiness>>,
}

/// The metadata fields extracted from an object.
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Extracted {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    deletion_timestamp: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    finalizers: Option<Vec<String>>,
    owner_references: Option<Vec<OwnerRefIn>>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerRefIn {
    api_version: String,
    kind: String,
    name: String,
    uid: String,
    #[serde(default)]
    controller: Option<bool>,
}

/// Why an object could not be cached.
#[derive(Debug, thiserror::Error)]
#[error("malformed object from the API server: {0}")]
pub struct MalformedObject(String);

impl CachedObject {
    /// Build from a watched object, setting `apiVersion`/`kind` from the
    /// informer's kind (list items lack them).
    ///
    /// # Errors
    /// When `metadata` is not an object of the expected shape.
    pub fn from_raw(raw: &RawObject, types: &Arc<TypeMeta>) -> Result<CachedObject, MalformedObject> {
        let mut json =
            String::with_capacity(raw.fields.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>() + 64);
        json.push('{');
        push_field(&mut json, "apiVersion", &serde_json::to_string(&types.api_version).unwrap_or_default());
        push_field(&mut json, "kind", &serde_json::to_string(&types.kind).unwrap_or_default());
        let mut extracted = Extracted::default();
        let mut annotations_digest = 0;
        for (key, value) in &raw.fields {
            match key.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    let meta: Vec<(String, Box<RawValue>)> =
                        ordered_fields(value.get()).map_err(|e| MalformedObject(format!("metadata: {e}")))?;
                    let mut text = String::with_capacity(value.get().len());
                    text.push('{');
                    for (k, v) in &meta {
                        match k.as_str() {
                            "managedFields" => continue,
                            "annotations" => {
                                let map: BTreeMap<String, String> = serde_json::from_str(v.get())
                                    .map_err(|e| MalformedObject(format!("metadata.annotations: {e}")))?;
                                annotations_digest = digest(&map);
                            }
                            _ => {}
                        }
                        push_field(&mut text, k, v.get());
                    }
                    text.push('}');
                    extracted = serde_json::from_str(&text).map_err(|e| MalformedObject(format!("metadata: {e}")))?;
                    push_field(&mut json, "metadata", &text);
                }
                _ => push_field(&mut json, key, value.get()),
            }
        }
        json.push('}');
        Ok(CachedObject::assemble(types.clone(), json, extracted, annotations_digest))
    }

    /// Build from a JSON value (tests, fixtures, tools). `managedFields` is
    /// dropped.
    ///
    /// # Errors
    /// When `metadata` is not an object of the expected shape.
    pub fn from_value(mut value: serde_json::Value) -> Result<CachedObject, MalformedObject> {
        if let Some(meta) = value.get_mut("metadata").and_then(serde_json::Value::as_object_mut) {
            meta.remove("managedFields");
        }
        let annotations: BTreeMap<String, String> = match value.pointer("/metadata/annotations") {
            Some(a) => {
                serde_json::from_value(a.clone()).map_err(|e| MalformedObject(format!("metadata.annotations: {e}")))?
            }
            None => BTreeMap::new(),
        };
        let annotations_digest = digest(&annotations);
        let extracted: Extracted = match value.get("metadata") {
            Some(m) => serde_json::from_value(m.clone()).map_err(|e| MalformedObject(format!("metadata: {e}")))?,
            None => Extracted::default(),
        };
        let text = |key: &str| value.get(key).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
        let types = Arc::new(TypeMeta { api_version: text("apiVersion"), kind: text("kind") });
        Ok(CachedObject::assemble(types, value.to_string(), extracted, annotations_digest))
    }

    fn assemble(types: Arc<TypeMeta>, json: String, e: Extracted, annotations_digest: u64) -> CachedObject {
        let boxed = |s: String| s.into_boxed_str();
        let controller =
            e.owner_references.unwrap_or_default().into_iter().find(|o| o.controller == Some(true)).map(|o| {
                Box::new(ControllerRef {
                    api_version: boxed(o.api_version),
                    kind: boxed(o.kind),
                    name: boxed(o.name),
                    uid: boxed(o.uid),
                })
            });
        CachedObject {
            types,
            json: json.into_boxed_str(),
            namespace: e.namespace.map(boxed),
            name: boxed(e.name.unwrap_or_default()),
            uid: e.uid.map(boxed),
            resource_version: e.resource_version.map(boxed),
            generation: e.generation,
            deleting: e.deletion_timestamp.is_some(),
            labels: e.labels.unwrap_or_default().into_iter().map(|(k, v)| (boxed(k), boxed(v))).collect(),
            annotations_digest,
            finalizers: e.finalizers.unwrap_or_default().into_iter().map(boxed).collect(),
            controller,
            readiness: std::sync::OnceLock::new(),
        }
    }

    /// Its kstatus readiness ([`crate::contract::Readiness`]), rated once.
    pub fn readiness(&self) -> &crate::contract::Readiness {
        self.readiness.get_or_init(|| Box::new(crate::contract::Readiness::of_json(&self.json)))
    }

    /// `apiVersion`, e.g. `apps/v1`.
    pub fn api_version(&self) -> &str {
        &self.types.api_version
    }

    /// `kind`, e.g. `Deployment`.
    pub fn kind(&self) -> &str {
        &self.types.kind
    }

    /// The object as JSON text (what guests receive).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The object parsed (for the rare caller that needs a field the cache
    /// does not extract).
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.json).unwrap_or(serde_json::Value::Null)
    }

    /// The object's `status` (`Null` when it has none): only that field is
    /// built, the rest of the text is scanned past. The applier compares it
    /// on every reconcile; parsing the whole parent for it cost more than
    /// the comparison.
    pub fn status(&self) -> serde_json::Value {
        #[derive(serde::Deserialize)]
        struct StatusOnly {
            #[serde(default)]
            status: serde_json::Value,
        }
        serde_json::from_str::<StatusOnly>(&self.json).map(|s| s.status).unwrap_or_default()
    }

    /// Namespace and name.
    pub fn key(&self) -> ObjectKey {
        ObjectKey { namespace: self.namespace.as_deref().map(str::to_string), name: self.name.to_string() }
    }

    /// The namespace; `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object's UID.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// The resourceVersion.
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// `metadata.generation`.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// Whether it has a deletionTimestamp.
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.labels[i].1)
    }

    /// Every label, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }

    /// One annotation's value (parsed from the text: annotations are not
    /// kept apart).
    pub fn annotation(&self, key: &str) -> Option<String> {
        self.annotations().remove(key)
    }

    /// Every annotation (parsed from the text: annotations are not kept
    /// apart, so that objects nobody selects by annotation cost nothing).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        #[derive(serde::Deserialize)]
        struct Meta {
            #[serde(default)]
            annotations: Option<BTreeMap<String, String>>,
        }
        #[derive(serde::Deserialize)]
        struct Object {
            metadata: Meta,
        }
        serde_json::from_str::<Object>(&self.json).ok().and_then(|o| o.metadata.annotations).unwrap_or_default()
    }

    /// The finalizers.
    pub fn finalizers(&self) -> impl Iterator<Item = &str> {
        self.finalizers.iter().map(|f| &**f)
    }

    /// Whether it carries `finalizer`.
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| &**f == finalizer)
    }

    /// The ownerReference with `controller: true`, if any.
    pub fn controller_owner(&self) -> Option<&ControllerRef> {
        self.controller.as_deref()
    }

    /// Whether an update from `old` to `self` passes the default predicate:
    /// a new generation (spec), or changed labels, annotations, finalizers
    /// or deletion.
    pub fn meaningfully_differs_from(&self, old: &CachedObject) -> bool {
        self.generation != old.generation
            || self.labels != old.labels
            || self.annotations_digest != old.annotations_digest
            || self.finalizers != old.finalizers
            || self.deleting != old.deleting
    }
}

impl fmt::Debug for CachedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedObject({})", self.key())
    }
}

fn push_field(out: &mut String, key: &str, raw_value: &str) {
    if !out.ends_with('{') {
        out.push(',');
    }
    // Keys of Kubernetes objects need no escaping beyond what to_string does.
    out.push_str(&serde_json::to_string(key).unwrap_or_default());
    out.push(':');
    out.push_str(raw_value);
}

/// The fields of a JSON object, in order, values undecoded.
fn ordered_fields(text: &str) -> Result<Vec<(String, Box<RawValue>)>, serde_json::Error> {
    struct Fields;
    impl<'de> Visitor<'de> for Fields {
        type Value = Vec<(String, Box<RawValue>)>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut fields = Vec::new();
            while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                fields.push(entry);
            }
            Ok(fields)
        }
    }
    let mut d = serde_json::Deserializer::from_str(text);
    d.deserialize_map(Fields)
}

/// A digest of the annotations, independent of their order in the text (an
/// empty map and no map at all are the same).
fn digest(annotations: &BTreeMap<String, String>) -> u64 {
    if annotations.is_empty() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    annotations.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: serde_json::Value) -> RawObject {
        serde_json::from_str(&v.to_string()).unwrap()
    }

    fn types() -> Arc<TypeMeta> {
        Arc::new(TypeMeta { api_version: "apps/v1".into(), kind: "Deployment".into() })
    }

    #[test]
    fn a_watched_object_should_keep_its_text_without_managed_fields() {
        let object = json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7", "generation": 3,
                "labels": {"b": "2", "a": "1"}, "annotations": {"note": "x"}, "finalizers": ["f/x"],
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [
                    {"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp", "name": "web", "uid": "p1", "controller": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "p2"}]},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"readyReplicas": 1}
        });
        let cached = CachedObject::from_raw(&raw(object.clone()), &types()).unwrap();
        let back: serde_json::Value = serde_json::from_str(cached.json()).unwrap();
        assert_eq!(back["apiVersion"], "apps/v1", "list items lack apiVersion; the informer's kind fills it in");
        assert_eq!(back["kind"], "Deployment");
        assert!(back["metadata"].get("managedFields").is_none());
        assert_eq!(back["spec"], object["spec"]);
        assert_eq!(back["status"], object["status"]);
        assert_eq!(cached.status(), object["status"]);
        let statusless =
            json!({"metadata": {"name": "s", "annotations": {"status": "not this"}}, "spec": {"status": 1}});
        let statusless = CachedObject::from_raw(&raw(statusless), &types()).unwrap();
        assert_eq!(statusless.status(), serde_json::Value::Null, "only the top-level field counts");
        assert!(cached.json().starts_with(r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"#));
        assert_eq!(cached.key(), ObjectKey::new(Some("shop"), "web"));
        assert_eq!((cached.uid(), cached.resource_version(), cached.generation()), (Some("u1"), Some("7"), Some(3)));
        assert_eq!(cached.labels().collect::<Vec<_>>(), [("a", "1"), ("b", "2")]);
        assert_eq!(cached.label("b"), Some("2"));
        assert_eq!(cached.annotation("note").as_deref(), Some("x"));
        assert!(cached.has_finalizer("f/x") && !cached.is_deleting());
        let owner = cached.controller_owner().unwrap();
        assert_eq!((&*owner.uid, owner.group(), &*owner.kind), ("p1", "example.operon.dev", "WebApp"));
    }

    #[test]
    fn the_predicate_should_see_spec_labels_annotations_finalizers_and_deletion_but_not_status() {
        let base = json!({"metadata": {"name": "a", "generation": 1, "labels": {"x": "1"}, "annotations": {"n": "1"}},
            "status": {"ready": false}});
        let object = |patch: &dyn Fn(&mut serde_json::Value)| {
            let mut v = base.clone();
            patch(&mut v);
            CachedObject::from_raw(&raw(v), &types()).unwrap()
        };
        let old = object(&|_| {});
        assert!(!object(&|v| v["status"]["ready"] = true.into()).meaningfully_differs_from(&old));
        assert!(!object(&|v| v["metadata"]["resourceVersion"] = "9".into()).meaningfully_differs_from(&old));
        assert!(object(&|v| v["metadata"]["generation"] = 2.into()).meaningfully_differs_from(&old));
        assert!(object(&|v| v["metadata"]["labels"]["x"] = "2".into()).meaningfully_differs_from(&old));
        assert!(object(&|v| v["metadata"]["annotations"]["n"] = "2".into()).meaningfully_differs_from(&old));
        assert!(object(&|v| v["metadata"]["finalizers"] = json!(["a/b"])).meaningfully_differs_from(&old));
        assert!(
            object(&|v| v["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into())
                .meaningfully_differs_from(&old)
        );
    }

    #[test]
    fn from_value_and_from_raw_should_agree() {
        let v = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "a", "namespace": "n", "annotations": {"k": "v"}, "managedFields": []}, "spec": {}});
        let a = CachedObject::from_value(v.clone()).unwrap();
        let b = CachedObject::from_raw(&raw(v), &types()).unwrap();
        let parse = |o: &CachedObject| serde_json::from_str::<serde_json::Value>(o.json()).unwrap();
        assert_eq!(parse(&a), parse(&b));
        assert!(!a.meaningfully_differs_from(&b));
    }

    #[test]
    fn malformed_metadata_should_be_an_error_not_a_panic() {
        let bad = raw(json!({"metadata": {"name": 5}}));
        assert!(CachedObject::from_raw(&bad, &types()).is_err());
        assert!(serde_json::from_str::<RawObject>("[1,2]").is_err());
    }
}
