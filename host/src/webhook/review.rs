//! The wire format: `admission.k8s.io/v1` AdmissionReview in, AdmissionReview
//! out, and the JSON patch of a mutated object.
//!
//! Only the fields a guest needs are read. `object` and `oldObject` are kept
//! as the API server's JSON text ([`RawValue`]) and handed to the guest as
//! they are, never parsed by the host on the way in.

use crate::contract::{Gvk, Operation, Review, UserInfo};
use k8s_openapi::ByteString;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// The only AdmissionReview version the configurations ask for.
pub(super) const API_VERSION: &str = "admission.k8s.io/v1";

/// An incoming AdmissionReview.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<RequestIn>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn {
    uid: String,
    kind: KindIn,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    operation: String,
    #[serde(default)]
    user_info: UserInfoIn,
    #[serde(default)]
    object: Option<Box<RawValue>>,
    #[serde(default)]
    old_object: Option<Box<RawValue>>,
    #[serde(default)]
    dry_run: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct KindIn {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UserInfoIn {
    username: String,
    uid: String,
    groups: Vec<String>,
}

/// Why an admission request cannot be read: the answer is a 400 saying so.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    /// Not JSON of the review's shape.
    #[error("the body is not an {API_VERSION} AdmissionReview: {0}")]
    Json(#[source] serde_json::Error),
    /// Another version or kind.
    #[error("expected an {API_VERSION} AdmissionReview, got {0:?} {1:?} (the webhook configurations ask for v1 only)")]
    Version(String, String),
    /// No `request`.
    #[error("the AdmissionReview has no request")]
    NoRequest,
    /// An operation admission does not have.
    #[error("unknown admission operation {0:?}")]
    Operation(String),
}

/// Why a mutated object cannot be answered as a patch.
#[derive(Debug, thiserror::Error)]
pub enum BadPatch {
    /// The request's object itself is not JSON.
    #[error("the request's object is not valid JSON: {0}")]
    Original(#[source] serde_json::Error),
    /// The patch cannot be serialised.
    #[error("cannot write the JSON patch: {0}")]
    Write(#[source] serde_json::Error),
}

/// Read an AdmissionReview.
///
/// # Errors
/// [`BadReview`] saying what is wrong, for a 400 answer.
pub(super) fn parse(body: &[u8]) -> Result<Review, BadReview> {
    let review: ReviewIn = serde_json::from_slice(body).map_err(BadReview::Json)?;
    if review.api_version != API_VERSION || review.kind != "AdmissionReview" {
        return Err(BadReview::Version(review.api_version, review.kind));
    }
    let r = review.request.ok_or(BadReview::NoRequest)?;
    let operation = Operation::parse(&r.operation).ok_or_else(|| BadReview::Operation(r.operation.clone()))?;
    // `null` objects arrive as JSON null text when present but empty.
    let text = |raw: Option<Box<RawValue>>| raw.map(|r| r.get().to_string()).filter(|t| t != "null");
    Ok(Review {
        uid: r.uid,
        operation,
        kind: Gvk { group: r.kind.group, version: r.kind.version, kind: r.kind.kind },
        sub_resource: r.sub_resource.filter(|s| !s.is_empty()),
        namespace: r.namespace.filter(|s| !s.is_empty()),
        name: r.name.unwrap_or_default(),
        object: text(r.object),
        old_object: text(r.old_object),
        user_info: UserInfo { username: r.user_info.username, uid: r.user_info.uid, groups: r.user_info.groups },
        dry_run: r.dry_run.unwrap_or(false),
    })
}

/// The `response` of an AdmissionReview.
#[derive(Debug, Default)]
pub(super) struct Response {
    pub allowed: bool,
    /// For a refusal: HTTP code and message.
    pub status: Option<(u16, String)>,
    pub warnings: Vec<String>,
    /// A JSON patch (RFC 6902) of the object, as JSON text.
    pub patch: Option<Vec<u8>>,
}

/// The AdmissionReview answering `uid`.
pub(super) fn answer(uid: &str, response: Response) -> Vec<u8> {
    let mut r = json!({"uid": uid, "allowed": response.allowed});
    if let Some((code, message)) = response.status {
        r["status"] = json!({"code": code, "message": message, "reason": reason(code)});
    }
    if !response.warnings.is_empty() {
        r["warnings"] = json!(response.warnings);
    }
    if let Some(patch) = response.patch {
        r["patchType"] = json!("JSONPatch");
        r["patch"] = serde_json::to_value(ByteString(patch)).unwrap_or(Value::Null);
    }
    let review = json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": r});
    serde_json::to_vec(&review).unwrap_or_default()
}

/// The `metav1.StatusReason` of an HTTP code, as the API server names it.
fn reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// The JSON patch from the request's object to the mutated one, or `None`
/// when they are equal.
pub(super) fn patch(original: &str, mutated: &Value) -> Result<Option<Vec<u8>>, BadPatch> {
    let original: Value = serde_json::from_str(original).map_err(BadPatch::Original)?;
    let patch = json_patch::diff(&original, mutated);
    if patch.0.is_empty() {
        return Ok(None);
    }
    serde_json::to_vec(&patch).map(Some).map_err(BadPatch::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(request: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request})).unwrap()
    }

    fn create() -> Value {
        json!({
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
            "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
            "name": "web",
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {"username": "admin", "groups": ["system:masters"]},
            "object": {"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                       "metadata": {"name": "web", "namespace": "shop"}, "spec": {"image": "nginx"}},
            "oldObject": null,
            "dryRun": false
        })
    }

    #[test]
    fn reviews_should_keep_objects_as_the_api_server_wrote_them() {
        let r = parse(&review(create())).unwrap();
        assert_eq!(r.operation, Operation::Create);
        assert_eq!(r.kind, Gvk::new("example.operon.dev", "v1alpha1", "WebApp"));
        assert_eq!((r.namespace.as_deref(), r.name.as_str()), (Some("shop"), "web"));
        assert_eq!(r.old_object, None, "null is absent");
        let object: Value = serde_json::from_str(r.object.as_deref().unwrap()).unwrap();
        assert_eq!(object["spec"]["image"], "nginx");
        assert_eq!(r.user_info.groups, ["system:masters"]);
    }

    #[test]
    fn garbage_should_be_refused_with_a_reason() {
        assert!(parse(b"not json").unwrap_err().to_string().contains("not an admission.k8s.io/v1 AdmissionReview"));
        let v1beta1 = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1beta1",
            "kind": "AdmissionReview", "request": create()}))
        .unwrap();
        assert!(parse(&v1beta1).unwrap_err().to_string().contains("v1 only"));
        let no_request = serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": "AdmissionReview"})).unwrap();
        assert!(parse(&no_request).unwrap_err().to_string().contains("no request"));
        let mut patchy = create();
        patchy["operation"] = json!("PATCH");
        assert!(parse(&review(patchy)).unwrap_err().to_string().contains("unknown admission operation"));
    }

    #[test]
    fn answers_should_echo_the_uid_and_carry_a_base64_patch() {
        let original = r#"{"spec":{"image":"nginx"}}"#;
        let patch = patch(original, &json!({"spec": {"image": "nginx", "port": 8080}})).unwrap().unwrap();
        let ops: Value = serde_json::from_slice(&patch).unwrap();
        assert_eq!(ops, json!([{"op": "add", "path": "/spec/port", "value": 8080}]));
        let body = answer("u-1", Response { allowed: true, patch: Some(patch), ..Default::default() });
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["response"]["uid"], "u-1");
        assert_eq!(v["response"]["patchType"], "JSONPatch");
        let encoded: ByteString = serde_json::from_value(v["response"]["patch"].clone()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&encoded.0).unwrap(), ops);
        assert_eq!(super::patch(original, &serde_json::from_str(original).unwrap()).unwrap(), None);
    }

    #[test]
    fn refusals_should_carry_code_and_message() {
        let body = answer(
            "u-2",
            Response { allowed: false, status: Some((403, "no".into())), warnings: vec!["w".into()], patch: None },
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["response"]["allowed"], false);
        assert_eq!(v["response"]["status"], json!({"code": 403, "message": "no", "reason": "Forbidden"}));
        assert_eq!(v["response"]["warnings"], json!(["w"]));
    }
}
