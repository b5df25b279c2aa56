//! Conversion calls: the `convert` export of the
//! `reconciler-with-conversion` world (contract 0.2), under the same
//! sandbox as `reconcile` and with no reads, and the checks the API server
//! relies on: one answer per object, in order, at the desired version, the
//! same object (kind, name, namespace, uid).

use super::error::CallError;
use super::guest::{CallScope, NoObjects};
use super::module::{Admitted, Module, check_size};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

impl Module {
    /// Whether the module exports `convert`.
    pub fn conversion(&self) -> bool {
        self.inner_conversion()
    }

    /// Convert `objects` to `desired_api_version`. The outer `Result` is the
    /// sandbox's verdict and the checks'; the inner one the guest's (its
    /// refusal's message).
    ///
    /// Blocks the calling thread for at most the smaller of the module's
    /// timeout and `deadline`.
    ///
    /// # Errors
    /// [`CallError`] when the guest traps, times out, runs out of memory,
    /// answers more than its output cap, answers something that is not the
    /// same objects at the desired version ([`CallError::Malformed`]), or
    /// does not export `convert`.
    pub fn convert(
        &self,
        objects: &[Value],
        desired_api_version: &str,
        deadline: Duration,
    ) -> Result<Result<Vec<Value>, String>, CallError> {
        self.admit_blocking().convert(objects, desired_api_version, deadline)
    }
}

impl Admitted {
    /// [`Module::convert`], admitted.
    ///
    /// # Errors
    /// As [`Module::convert`].
    pub fn convert(
        mut self,
        objects: &[Value],
        desired_api_version: &str,
        deadline: Duration,
    ) -> Result<Result<Vec<Value>, String>, CallError> {
        let inner = &self.module.inner;
        let loaded = self.module.loaded()?;
        let Some(slot) = &loaded.conversion else {
            return Err(CallError::Instantiate(wasmtime::Error::msg(
                "the module does not export operon:reconciler/conversion@0.2.0; build it for the \
                 reconciler-with-conversion world, or do not grant it conversion",
            )));
        };
        let texts: Vec<String> = objects.iter().map(Value::to_string).collect();
        // Conversion is pure: it reads nothing.
        let scope = CallScope::new(Arc::new(NoObjects), Some(inner.manifest.clone()));
        let answer = super::call::block_on(async {
            let mut running = slot.begin(&inner.calls, &mut self.pass, Some(scope), Some(deadline)).await?;
            let (b, store) = running.parts();
            let result = super::guest::v0_2::convert(b, store, &texts, desired_api_version).await;
            slot.finish(&inner.calls, &mut self.pass, running, result)
        })?;
        let max = inner.calls.limits.max_output;
        match answer {
            Err(message) => {
                check_size(message.len(), max)?;
                Ok(Err(message))
            }
            Ok(converted) => {
                check_size(converted.iter().map(String::len).sum(), max)?;
                check_converted(objects, &converted, desired_api_version).map(Ok)
            }
        }
    }
}

/// Parse the guest's answers and check each is its object at the desired
/// version.
fn check_converted(objects: &[Value], converted: &[String], desired: &str) -> Result<Vec<Value>, CallError> {
    if converted.len() != objects.len() {
        return Err(CallError::Malformed(format!(
            "convert answered {} objects for {}: it must answer each, in order",
            converted.len(),
            objects.len()
        )));
    }
    let mut out = Vec::with_capacity(converted.len());
    for (i, (text, original)) in converted.iter().zip(objects).enumerate() {
        let object: Value = serde_json::from_str(text)
            .map_err(|e| CallError::Malformed(format!("convert's object {i} is not valid JSON: {e}")))?;
        if object.get("apiVersion").and_then(Value::as_str) != Some(desired) {
            return Err(CallError::Malformed(format!(
                "convert's object {i} has apiVersion {}, not the desired {desired}",
                object.get("apiVersion").map_or("nothing".into(), Value::to_string)
            )));
        }
        for pointer in ["/kind", "/metadata/name", "/metadata/namespace", "/metadata/uid"] {
            if object.pointer(pointer) != original.pointer(pointer) {
                return Err(CallError::Malformed(format!(
                    "convert changed {} of object {i} (from {} to {}), which conversion may not change",
                    pointer.trim_start_matches('/').replace('/', "."),
                    original.pointer(pointer).map_or("nothing".into(), Value::to_string),
                    object.pointer(pointer).map_or("nothing".into(), Value::to_string),
                )));
            }
        }
        out.push(object);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::check_converted;
    use serde_json::json;

    #[test]
    fn converted_objects_should_be_the_same_objects_at_the_desired_version() {
        let old = json!({"apiVersion": "x.io/v1beta1", "kind": "Gadget", "metadata": {"name": "g", "namespace": "n", "uid": "u"}});
        let good = json!({"apiVersion": "x.io/v1", "kind": "Gadget", "metadata": {"name": "g", "namespace": "n", "uid": "u"}, "spec": {}});
        assert_eq!(check_converted(&[old.clone()], &[good.to_string()], "x.io/v1").unwrap(), vec![good.clone()]);
        let wrong_version = check_converted(&[old.clone()], &[old.to_string()], "x.io/v1").unwrap_err().to_string();
        assert!(wrong_version.contains("not the desired x.io/v1"), "{wrong_version}");
        let mut renamed = good.clone();
        renamed["metadata"]["name"] = json!("other");
        let e = check_converted(&[old.clone()], &[renamed.to_string()], "x.io/v1").unwrap_err().to_string();
        assert!(e.contains("metadata.name"), "{e}");
        let e = check_converted(&[old.clone(), old], &[good.to_string()], "x.io/v1").unwrap_err().to_string();
        assert!(e.contains("answered 1 objects for 2"), "{e}");
    }
}
