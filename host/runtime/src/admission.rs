//! Admission calls: the `validate` and `mutate` exports of the
//! `reconciler-with-admission` world, under the same sandbox as `reconcile`
//! (deadline, memory cap, output cap, read grants, fresh or pooled
//! instances).
//!
//! A module knows at load whether it exports
//! `operon:reconciler/admission` (of its contract version); a module of the base world loads and
//! reconciles exactly as before, and [`Module::admission`] says `false`.

use super::WIT_PACKAGE;
use super::error::CallError;
use super::guest::{CallScope, ObjectReader};
use super::module::{Admitted, Module, check_size};
use crate::contract::{Denial, IMMUTABLE_BY_MUTATE, Review};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

impl Module {
    /// Whether the module exports `validate` and `mutate` (the
    /// `reconciler-with-admission` world).
    pub fn admission(&self) -> bool {
        self.inner_admission()
    }

    /// Call `validate`. The outer `Result` is the sandbox's verdict; the
    /// inner one the guest's: its warnings, or its [`Denial`].
    ///
    /// The call's deadline is the smaller of the module's timeout and
    /// `deadline` (the webhook's, well under the API server's timeout).
    /// Blocks the calling thread for at most that long: call it from a
    /// blocking-capable thread.
    ///
    /// # Errors
    /// [`CallError`] when the guest traps, times out, runs out of memory,
    /// answers more than `max_output` bytes, or does not export admission.
    pub fn validate(
        &self,
        review: &Review,
        reader: Arc<dyn ObjectReader>,
        deadline: Duration,
    ) -> Result<Result<Vec<String>, Denial>, CallError> {
        self.admit_blocking().validate(review, reader, deadline)
    }

    /// Call `mutate`. `Ok(Ok(None))`: leave the object as it is;
    /// `Ok(Ok(Some(object)))`: the whole object as it should be stored,
    /// checked to be a JSON object that keeps the request's `apiVersion`,
    /// `kind`, `metadata.name` and `metadata.namespace`.
    ///
    /// Deadline and blocking as for [`Module::validate`].
    ///
    /// # Errors
    /// As for [`Module::validate`], and [`CallError::Malformed`] when the
    /// object is not JSON, not an object, or changes one of those fields.
    pub fn mutate(
        &self,
        review: &Review,
        reader: Arc<dyn ObjectReader>,
        deadline: Duration,
    ) -> Result<Result<Option<Value>, Denial>, CallError> {
        self.admit_blocking().mutate(review, reader, deadline)
    }
}

impl Admitted {
    /// [`Module::validate`], admitted.
    ///
    /// # Errors
    /// As [`Module::validate`].
    pub fn validate(
        mut self,
        review: &Review,
        reader: Arc<dyn ObjectReader>,
        deadline: Duration,
    ) -> Result<Result<Vec<String>, Denial>, CallError> {
        let inner = &self.module.inner;
        let loaded = self.module.loaded()?;
        let scope = CallScope::new(reader, Some(inner.manifest.clone()));
        let call =
            loaded.worlds.validate(&inner.calls, &mut self.pass, scope, deadline, review).ok_or_else(no_admission)?;
        let answer = super::call::block_on(call)?;
        let max = inner.calls.limits.max_output;
        match answer {
            Ok(warnings) => {
                let size: usize = warnings.iter().map(String::len).sum();
                check_size(size, max)?;
                Ok(Ok(warnings))
            }
            Err(denial) => {
                check_size(denial.message.len(), max)?;
                Ok(Err(denial))
            }
        }
    }

    /// [`Module::mutate`], admitted.
    ///
    /// # Errors
    /// As [`Module::mutate`].
    pub fn mutate(
        mut self,
        review: &Review,
        reader: Arc<dyn ObjectReader>,
        deadline: Duration,
    ) -> Result<Result<Option<Value>, Denial>, CallError> {
        let inner = &self.module.inner;
        let loaded = self.module.loaded()?;
        let scope = CallScope::new(reader, Some(inner.manifest.clone()));
        let call =
            loaded.worlds.mutate(&inner.calls, &mut self.pass, scope, deadline, review).ok_or_else(no_admission)?;
        let answer = super::call::block_on(call)?;
        let max = inner.calls.limits.max_output;
        match answer {
            Ok(None) => Ok(Ok(None)),
            Ok(Some(text)) => {
                check_size(text.len(), max)?;
                check_mutated(review, &text).map(|object| Ok(Some(object)))
            }
            Err(denial) => {
                check_size(denial.message.len(), max)?;
                Ok(Err(denial))
            }
        }
    }
}

/// The call error for a module without the admission world.
fn no_admission() -> CallError {
    CallError::Instantiate(wasmtime::Error::msg(format!(
        "the module does not export {WIT_PACKAGE}/admission; build it for the reconciler-with-admission world \
         (Rust: `operon_sdk::export!(MyReconciler with admission)`)"
    )))
}

/// Parse a mutated object and check it keeps what `mutate` may not change.
fn check_mutated(review: &Review, text: &str) -> Result<Value, CallError> {
    let object: Value = serde_json::from_str(text)
        .map_err(|e| CallError::Malformed(format!("mutate returned an object that is not valid JSON: {e}")))?;
    if !object.is_object() {
        return Err(CallError::Malformed("mutate returned something that is not a JSON object".into()));
    }
    let Some(original) = &review.object else {
        return Err(CallError::Malformed(format!(
            "mutate returned an object for a {} request, which has none to change",
            review.operation
        )));
    };
    let original: Value = serde_json::from_str(original).unwrap_or(Value::Null);
    for pointer in IMMUTABLE_BY_MUTATE {
        if original.pointer(pointer) != object.pointer(pointer) {
            return Err(CallError::Malformed(format!(
                "mutate changed {} (from {} to {}), which admission may not change",
                pointer.trim_start_matches('/').replace('/', "."),
                original.pointer(pointer).map_or("nothing".into(), Value::to_string),
                object.pointer(pointer).map_or("nothing".into(), Value::to_string),
            )));
        }
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Gvk, Operation, UserInfo};

    fn review(object: Option<&str>) -> Review {
        Review {
            uid: "u".into(),
            operation: Operation::Create,
            kind: Gvk::new("example.operon.dev", "v1alpha1", "WebApp"),
            sub_resource: None,
            namespace: Some("shop".into()),
            name: "web".into(),
            object: object.map(str::to_string),
            old_object: None,
            user_info: UserInfo::default(),
            dry_run: false,
        }
    }

    const WEB: &str = r#"{"apiVersion":"example.operon.dev/v1alpha1","kind":"WebApp","metadata":{"name":"web","namespace":"shop"},"spec":{}}"#;

    #[test]
    fn mutated_objects_may_change_the_spec_only() {
        let ok = check_mutated(&review(Some(WEB)), &WEB.replace(r#""spec":{}"#, r#""spec":{"port":8080}"#));
        assert_eq!(ok.unwrap()["spec"]["port"], 8080);
        let renamed = check_mutated(&review(Some(WEB)), &WEB.replace(r#""name":"web""#, r#""name":"other""#));
        let message = renamed.unwrap_err().to_string();
        assert!(message.contains("metadata.name") && message.contains("\"other\""), "{message}");
        let moved = check_mutated(&review(Some(WEB)), &WEB.replace(r#","namespace":"shop""#, ""));
        assert!(moved.unwrap_err().to_string().contains("metadata.namespace"));
    }

    #[test]
    fn mutated_objects_must_be_json_objects() {
        assert!(check_mutated(&review(Some(WEB)), "[1]").unwrap_err().to_string().contains("not a JSON object"));
        assert!(check_mutated(&review(Some(WEB)), "{").unwrap_err().to_string().contains("not valid JSON"));
        let delete = check_mutated(&review(None), WEB).unwrap_err().to_string();
        assert!(delete.contains("none to change"), "{delete}");
    }
}
