//! Shadow rollout: a candidate module answers the same requests as the
//! live one, nothing of its answer is applied, and the two answers are
//! compared.

use crate::contract::{Failed, Failure, Outcome};
use crate::runtime::CallError;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};

/// Comparisons so far.
#[derive(Debug, Default)]
pub(super) struct Counters {
    compared: AtomicU64,
    differing: AtomicU64,
}

impl Counters {
    /// Count one comparison; returns how many differed so far (after it).
    pub fn record(&self, differs: bool) -> u64 {
        self.compared.fetch_add(1, Ordering::Relaxed);
        if differs {
            self.differing.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.differing.load(Ordering::Relaxed)
        }
    }

    pub fn get(&self) -> (u64, u64) {
        (self.compared.load(Ordering::Relaxed), self.differing.load(Ordering::Relaxed))
    }

    pub fn reset(&self) {
        self.compared.store(0, Ordering::Relaxed);
        self.differing.store(0, Ordering::Relaxed);
    }
}

/// One version's answer, in a form that can be compared.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Answer {
    /// It answered with an outcome.
    Outcome(Outcome),
    /// It answered with a failure (and the status it carries).
    Failed(Failed),
    /// The sandbox stopped it (compared by message).
    Stopped(String),
}

/// Turn a call result into an [`Answer`].
pub(super) fn answer(result: &Result<Result<Outcome, Failed>, CallError>) -> Answer {
    match result {
        Ok(Ok(o)) => Answer::Outcome(o.clone()),
        Ok(Err(f)) => Answer::Failed(f.clone()),
        Err(e) => Answer::Stopped(e.to_string()),
    }
}

/// Where two answers differ, or `None` when they are the same: desired
/// objects (by kind and name, then field by field), status, events,
/// requeue-after, finalized, failures. At most `limit` differences are named.
pub(super) fn differences(live: &Answer, candidate: &Answer, limit: usize) -> Option<String> {
    let mut out = Vec::new();
    match (live, candidate) {
        (Answer::Outcome(a), Answer::Outcome(b)) => compare_outcomes(a, b, &mut out),
        (a, b) if a == b => {}
        (a, b) => out.push(format!("live {} / candidate {}", describe(a), describe(b))),
    }
    if out.is_empty() {
        return None;
    }
    let more = out.len().saturating_sub(limit);
    out.truncate(limit);
    let mut text = out.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    Some(text)
}

fn describe(a: &Answer) -> String {
    match a {
        Answer::Outcome(_) => "outcome".into(),
        Answer::Failed(Failed { failure: Failure::Transient(m), status }) => {
            format!("transient failure {m:?}{}", carried(status.as_ref()))
        }
        Answer::Failed(Failed { failure: Failure::Terminal(m), status }) => {
            format!("terminal failure {m:?}{}", carried(status.as_ref()))
        }
        Answer::Stopped(e) => format!("sandbox error {e:?}"),
    }
}

fn carried(status: Option<&Value>) -> String {
    status.map(|s| format!(" with status {s}")).unwrap_or_default()
}

fn compare_outcomes(a: &Outcome, b: &Outcome, out: &mut Vec<String>) {
    let name = |v: &Value| {
        format!(
            "{} {}",
            v["kind"].as_str().unwrap_or("?"),
            v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?")
        )
    };
    for x in &a.desired {
        match b.desired.iter().find(|y| name(y) == name(x) && y["apiVersion"] == x["apiVersion"]) {
            Some(y) => diff_values(&format!("desired {}", name(x)), x, y, out),
            None => out.push(format!("desired {}: only live", name(x))),
        }
    }
    for y in &b.desired {
        if !a.desired.iter().any(|x| name(x) == name(y) && x["apiVersion"] == y["apiVersion"]) {
            out.push(format!("desired {}: only candidate", name(y)));
        }
    }
    match (&a.status, &b.status) {
        (Some(x), Some(y)) => diff_values("status", x, y, out),
        (None, None) => {}
        (x, y) => out.push(format!("status: live {} / candidate {}", short(x.as_ref()), short(y.as_ref()))),
    }
    if a.events != b.events {
        let text = |o: &Outcome| o.events.iter().map(|e| format!("{}: {}", e.reason, e.message)).collect::<Vec<_>>();
        out.push(format!("events: live {:?} / candidate {:?}", text(a), text(b)));
    }
    if a.requeue_after != b.requeue_after {
        out.push(format!("requeue-after: live {:?} / candidate {:?}", a.requeue_after, b.requeue_after));
    }
    if a.finalized != b.finalized {
        out.push(format!("finalized: live {} / candidate {}", a.finalized, b.finalized));
    }
}

/// Field-level differences under `path`, between the live answer and the
/// candidate's.
fn diff_values(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    field_differences(path, a, b, ("only live", "only candidate"), out);
}

/// Field-level differences under `path` between `a` and `b`: a changed
/// value as `path: A → B`, a field of one side only as `path: ONLY (value)`
/// with `only` naming each side (also `operon explain`'s, between two
/// recorded reconciles).
pub(crate) fn field_differences(path: &str, a: &Value, b: &Value, only: (&str, &str), out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                match y.get(k) {
                    Some(vb) => field_differences(&format!("{path}.{k}"), va, vb, only, out),
                    None => out.push(format!("{path}.{k}: {} ({})", only.0, short(Some(va)))),
                }
            }
            for (k, vb) in y {
                if !x.contains_key(k) {
                    out.push(format!("{path}.{k}: {} ({})", only.1, short(Some(vb))));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                field_differences(&format!("{path}[{i}]"), va, vb, only, out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!("{path}: {} → {}", short(Some(a)), short(Some(b)))),
    }
}

fn short(v: Option<&Value>) -> String {
    let text = v.map_or_else(|| "none".to_string(), Value::to_string);
    if text.chars().count() > 80 { format!("{}…", text.chars().take(80).collect::<String>()) } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outcome(replicas: i64, status: Value) -> Answer {
        Answer::Outcome(Outcome {
            desired: vec![json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop"},
                "spec": {"replicas": replicas}})],
            status: Some(status),
            ..Outcome::default()
        })
    }

    #[test]
    fn identical_answers_should_not_differ() {
        let a = outcome(2, json!({"ready": true}));
        assert_eq!(differences(&a, &a.clone(), 5), None);
        let f = Answer::Failed(Failure::Transient("x".into()).into());
        assert_eq!(differences(&f, &f.clone(), 5), None);
    }

    #[test]
    fn differences_should_name_the_fields() {
        let text = differences(&outcome(2, json!({"ready": true})), &outcome(3, json!({"ready": false})), 5).unwrap();
        assert!(text.contains("desired Deployment shop.spec.replicas: 2 → 3"), "{text}");
        assert!(text.contains("status.ready: true → false"), "{text}");
        let failed = Answer::Stopped("trapped: unreachable".into());
        let text = differences(&outcome(2, json!({})), &failed, 5).unwrap();
        assert!(text.contains("live outcome / candidate sandbox error"), "{text}");
    }

    #[test]
    fn differences_should_be_bounded() {
        let many = |n: i64| {
            Answer::Outcome(Outcome { status: Some(json!({"a": n, "b": n, "c": n, "d": n})), ..Outcome::default() })
        };
        let text = differences(&many(1), &many(2), 2).unwrap();
        assert!(text.ends_with("and 2 more"), "{text}");
    }
}
