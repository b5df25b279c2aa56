//! Host-side forms of the WIT `admission` interface: one admission
//! [`Review`] and the guest's [`Denial`].
//!
//! Objects stay JSON text, as in [`Request`](crate::Request): the host hands
//! the API server's bytes to the guest without parsing them again.

use crate::Gvk;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What an admission request does to the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// A new object.
    #[default]
    Create,
    /// A change of an existing object.
    Update,
    /// A deletion.
    Delete,
    /// A connection (`exec`, `attach`, `portforward`, proxy).
    Connect,
}

impl Operation {
    /// The name Kubernetes uses: `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// Parses Kubernetes' name, in any case (`CREATE`, `create`).
    pub fn parse(text: &str) -> Option<Operation> {
        [Operation::Create, Operation::Update, Operation::Delete, Operation::Connect]
            .into_iter()
            .find(|op| op.as_str().eq_ignore_ascii_case(text))
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who is asking, as the API server authenticated them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct UserInfo {
    /// The user name, e.g. `system:serviceaccount:shop:deployer`.
    pub username: String,
    /// The user's UID, if the authenticator gives one.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// One admission request, host side: what the guest's `validate` and
/// `mutate` receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// The AdmissionReview's request UID.
    pub uid: String,
    /// What the request does.
    pub operation: Operation,
    /// The kind of the object, as the request names it.
    pub kind: Gvk,
    /// The subresource (`scale`, ...), if the request is for one.
    pub sub_resource: Option<String>,
    /// The object's namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The object's name (empty on a create with `generateName`).
    pub name: String,
    /// The object as it would be stored, as JSON text; `None` for `DELETE`.
    pub object: Option<String>,
    /// The object as it is stored now, as JSON text; for `UPDATE` and `DELETE`.
    pub old_object: Option<String>,
    /// Who is asking.
    pub user_info: UserInfo,
    /// The request will not be persisted (`--dry-run=server`).
    pub dry_run: bool,
}

/// Why a guest refused a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    /// Shown to the user.
    pub message: String,
    /// HTTP status code of the refusal; `None` means 403 (Forbidden).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
}

impl Denial {
    /// The status code the API server answers the user with: the guest's, or 403.
    pub fn status_code(&self) -> u16 {
        self.code.unwrap_or(403)
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The fields of an object a `mutate` may not change: the host refuses a
/// mutated object whose value at one of these JSON pointers differs from
/// the request's (the WIT `mutate` contract).
pub const IMMUTABLE_BY_MUTATE: [&str; 4] = ["/apiVersion", "/kind", "/metadata/name", "/metadata/namespace"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_should_parse_kubernetes_names_in_any_case() {
        assert_eq!(Operation::parse("CREATE"), Some(Operation::Create));
        assert_eq!(Operation::parse("update"), Some(Operation::Update));
        assert_eq!(Operation::parse("Delete"), Some(Operation::Delete));
        assert_eq!(Operation::parse("patch"), None);
        let yaml: Operation = serde_json::from_str("\"CONNECT\"").unwrap();
        assert_eq!(yaml, Operation::Connect);
    }

    #[test]
    fn denial_without_a_code_should_be_forbidden() {
        assert_eq!(Denial { message: "no".into(), code: None }.status_code(), 403);
        assert_eq!(Denial { message: "no".into(), code: Some(422) }.status_code(), 422);
    }
}
