//! Admission: validate and default the parent kind before the API server
//! stores it ([`Reconciler::validate`], [`Reconciler::mutate`]).
//!
//! The host serves these functions as a validating and a mutating admission
//! webhook when the component exports them (`export!(R with admission)`),
//! under the same sandbox as `reconcile`. The API server calls the mutating
//! webhook first, then the validating one with the mutated object; both only
//! for `CREATE` and `UPDATE` of the parent's main resource (never for status
//! writes).
//!
//! [`Reconciler::validate`]: crate::Reconciler::validate
//! [`Reconciler::mutate`]: crate::Reconciler::mutate

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::failure::json_error_message;
use crate::{Gvk, raw};

/// What the request does to the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A new object.
    Create,
    /// A change of an existing object.
    Update,
    /// A deletion (`object` is `None`, `old_object` is the object).
    Delete,
    /// A connection (`exec`, `attach`, proxy).
    Connect,
}

impl Operation {
    fn from_raw(op: raw::Operation) -> Operation {
        match op {
            raw::Operation::Create => Operation::Create,
            raw::Operation::Update => Operation::Update,
            raw::Operation::Delete => Operation::Delete,
            raw::Operation::Connect => Operation::Connect,
        }
    }

    pub(crate) fn into_raw(self) -> raw::Operation {
        match self {
            Operation::Create => raw::Operation::Create,
            Operation::Update => raw::Operation::Update,
            Operation::Delete => raw::Operation::Delete,
            Operation::Connect => raw::Operation::Connect,
        }
    }
}

/// Who is asking, as the API server authenticated them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name, e.g. `system:serviceaccount:shop:deployer`.
    pub username: String,
    /// The user's UID, when the authenticator gives one.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// One admission request.
///
/// The objects are JSON values, not `R::Object`: the point of validation is
/// to look at input that may not fit your type (`spec.replicas: "three"`),
/// and to refuse it with a message that says why. Use
/// [`object_as`](AdmissionReview::object_as) for a typed view when it fits.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionReview {
    /// The request's UID (for logs; the host answers it).
    pub uid: String,
    /// What the request does.
    pub operation: Operation,
    /// The object's kind, as the request names it.
    pub kind: Gvk,
    /// The subresource, if the request is for one.
    pub sub_resource: Option<String>,
    /// The object's namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The object's name (empty on a create with `generateName`).
    pub name: String,
    /// The object as it would be stored; `None` for a delete.
    pub object: Option<Value>,
    /// The object as it is stored now; for updates and deletes.
    pub old_object: Option<Value>,
    /// Who is asking.
    pub user_info: UserInfo,
    /// The request will not be persisted (`--dry-run=server`); a guest has
    /// no side effects anyway.
    pub dry_run: bool,
}

impl AdmissionReview {
    /// Parses the WIT review (what the host sends).
    ///
    /// # Errors
    ///
    /// A 400 denial when an object is not JSON (the API server never sends
    /// such a review).
    pub fn from_raw(review: raw::Review) -> Result<AdmissionReview, Denial> {
        let parse = |text: Option<String>, which: &str| {
            text.map(|t| serde_json::from_str::<Value>(&t)).transpose().map_err(|e| {
                Denial::new(format!("the review's {which} is not JSON: {}", json_error_message(&e))).code(400)
            })
        };
        Ok(AdmissionReview {
            object: parse(review.object, "object")?,
            old_object: parse(review.old_object, "old object")?,
            uid: review.uid,
            operation: Operation::from_raw(review.operation),
            kind: review.kind,
            sub_resource: review.sub_resource,
            namespace: review.namespace,
            name: review.name,
            user_info: UserInfo {
                username: review.user_info.username,
                uid: review.user_info.uid,
                groups: review.user_info.groups,
            },
            dry_run: review.dry_run,
        })
    }

    /// `object` as `T`, `None` for a delete.
    ///
    /// # Errors
    ///
    /// A denial naming the field that does not fit `T`
    /// (`the object is invalid: spec.replicas: invalid type: ...`).
    pub fn object_as<T: DeserializeOwned>(&self) -> Result<Option<T>, Denial> {
        typed(self.object.as_ref(), "object")
    }

    /// `old_object` as `T`.
    ///
    /// # Errors
    ///
    /// As [`object_as`](AdmissionReview::object_as).
    pub fn old_object_as<T: DeserializeOwned>(&self) -> Result<Option<T>, Denial> {
        typed(self.old_object.as_ref(), "old object")
    }
}

fn typed<T: DeserializeOwned>(value: Option<&Value>, which: &str) -> Result<Option<T>, Denial> {
    value
        .map(|v| T::deserialize(v))
        .transpose()
        .map_err(|e| Denial::new(format!("the {which} is invalid: {}", json_error_message(&e))))
}

/// Why a request is refused. The API server shows the message to the user
/// (`kubectl` prints it after the webhook's name).
///
/// ```
/// use operon_sdk::Denial;
///
/// let denial = Denial::new("spec.replicas must be between 0 and 50, not 51");
/// assert_eq!(denial.status_code(), 403);
/// assert_eq!(Denial::new("bad spec").code(422).status_code(), 422);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    message: String,
    code: Option<u16>,
}

impl Denial {
    /// A refusal with `message`, answered as 403 Forbidden.
    pub fn new(message: impl fmt::Display) -> Denial {
        Denial { message: message.to_string(), code: None }
    }

    /// Answers with HTTP status `code` instead of 403 (e.g. 422 for an
    /// invalid object).
    pub fn code(mut self, code: u16) -> Denial {
        self.code = Some(code);
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The status code the user gets: the one given, or 403.
    pub fn status_code(&self) -> u16 {
        self.code.unwrap_or(403)
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Denial {}

impl From<Denial> for raw::Denial {
    fn from(denial: Denial) -> raw::Denial {
        raw::Denial { message: denial.message, code: denial.code }
    }
}

impl From<raw::Denial> for Denial {
    fn from(denial: raw::Denial) -> Denial {
        Denial { message: denial.message, code: denial.code }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw_review(object: Option<&str>) -> raw::Review {
        raw::Review {
            uid: "u".into(),
            operation: raw::Operation::Update,
            kind: Gvk::new("", "v1", "ConfigMap"),
            sub_resource: None,
            namespace: Some("shop".into()),
            name: "settings".into(),
            object: object.map(str::to_owned),
            old_object: None,
            user_info: raw::UserInfo { username: "admin".into(), uid: String::new(), groups: vec![] },
            dry_run: true,
        }
    }

    #[test]
    fn reviews_should_parse_objects_as_json() {
        let review = AdmissionReview::from_raw(raw_review(Some(r#"{"data":{"a":"1"}}"#))).unwrap();
        assert_eq!(review.operation, Operation::Update);
        assert_eq!(review.object, Some(json!({"data": {"a": "1"}})));
        assert!(review.dry_run);
        let denial = AdmissionReview::from_raw(raw_review(Some("{"))).unwrap_err();
        assert_eq!(denial.status_code(), 400);
    }

    #[test]
    fn typed_views_should_name_the_field_that_does_not_fit() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code, reason = "only deserialized")]
        struct Spec {
            replicas: i32,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code, reason = "only deserialized")]
        struct Thing {
            spec: Spec,
        }
        let review = AdmissionReview::from_raw(raw_review(Some(r#"{"spec":{"replicas":"three"}}"#))).unwrap();
        let denial = review.object_as::<Thing>().unwrap_err();
        assert!(denial.message().starts_with("the object is invalid: invalid type: string"), "{denial}");
        assert!(review.old_object_as::<Thing>().unwrap().is_none());
    }
}
