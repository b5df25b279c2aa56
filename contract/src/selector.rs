//! Kubernetes label selectors (`app=web,tier!=db`, `env in (a,b)`, `!legacy`)
//! parsed once and matched against label maps.

use serde_json::{Map, Value};

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// Why a selector string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct Error {
    selector: String,
    reason: String,
}

impl Selector {
    /// Parse the string syntax used by `kubectl -l` and `labelSelector=`.
    pub fn parse(text: &str) -> Result<Selector, Error> {
        let err = |reason: &str| Error { selector: text.to_string(), reason: reason.to_string() };
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let req = if let Some(key) = term.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((key, rest)) = split_set_op(term, " notin ") {
                Requirement::NotIn(key, parse_set(rest).ok_or_else(|| err("expected (a,b) after notin"))?)
            } else if let Some((key, rest)) = split_set_op(term, " in ") {
                Requirement::In(key, parse_set(rest).ok_or_else(|| err("expected (a,b) after in"))?)
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else {
                Requirement::Exists(term.to_string())
            };
            let key = match &req {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::DoesNotExist(k) => k,
            };
            if key.is_empty() || key.contains([' ', '(', ')', '=', '!']) {
                return Err(err(&format!("bad key in {term:?}")));
            }
            requirements.push(req);
        }
        Ok(Selector { requirements })
    }

    /// A selector written as JSON in an object: a `LabelSelector`
    /// (`matchLabels`, `matchExpressions` with `In`, `NotIn`, `Exists`,
    /// `DoesNotExist`) or a plain map of labels (a Service's `spec.selector`).
    /// `None` for a missing or empty selector: the caller decides what that
    /// means (the Kubernetes API differs by field).
    ///
    /// # Errors
    /// A value that is neither form, or an operator it does not know.
    pub fn from_json(value: &Value) -> Result<Option<Selector>, Error> {
        let err = |reason: String| Error { selector: value.to_string(), reason };
        let Some(map) = value.as_object() else {
            return if value.is_null() { Ok(None) } else { Err(err("expected an object".into())) };
        };
        let structured = map.keys().all(|k| k == "matchLabels" || k == "matchExpressions");
        let mut requirements = Vec::new();
        let labels = if structured { map.get("matchLabels").and_then(Value::as_object) } else { Some(map) };
        for (k, v) in labels.into_iter().flatten() {
            let v = v.as_str().ok_or_else(|| err(format!("label {k:?} is not a string")))?;
            requirements.push(Requirement::Equals(k.clone(), v.to_string()));
        }
        let expressions = if structured { map.get("matchExpressions").and_then(Value::as_array) } else { None };
        for e in expressions.into_iter().flatten() {
            let key = e.get("key").and_then(Value::as_str).ok_or_else(|| err("an expression has no key".into()))?;
            let values = || -> Vec<String> {
                e.get("values")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            };
            let key = key.to_string();
            requirements.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => Requirement::In(key, values()),
                Some("NotIn") => Requirement::NotIn(key, values()),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::DoesNotExist(key),
                other => return Err(err(format!("unknown operator {other:?}"))),
            });
        }
        Ok((!requirements.is_empty()).then_some(Selector { requirements }))
    }

    /// One `key=value` every match must have, if the selector has one: what
    /// an index of selectors files it under.
    pub fn required_label(&self) -> Option<(&str, &str)> {
        self.requirements.iter().find_map(|r| match r {
            Requirement::Equals(k, v) => Some((k.as_str(), v.as_str())),
            Requirement::In(k, vs) if vs.len() == 1 => Some((k.as_str(), vs[0].as_str())),
            _ => None,
        })
    }

    /// A label key every match carries, with the values it may have (a
    /// `key=value` or `key in (a,b)` requirement), if the selector has one:
    /// what routes events to the selectors that can match them.
    pub fn required_values(&self) -> Option<(&str, Vec<&str>)> {
        self.requirements.iter().find_map(|r| match r {
            Requirement::Equals(k, v) => Some((k.as_str(), vec![v.as_str()])),
            Requirement::In(k, vs) => Some((k.as_str(), vs.iter().map(String::as_str).collect())),
            _ => None,
        })
    }

    /// The label keys the selector reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|r| match r {
            Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::DoesNotExist(k) => k.as_str(),
        })
    }

    /// Whether labels (the `metadata.labels` map) satisfy every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    /// Whether the labels `get` looks up satisfy every requirement.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }

    /// Whether an object's `metadata.labels` satisfy the selector.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.matches(object.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

/// Split on commas that are not inside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

fn split_set_op<'a>(term: &'a str, op: &str) -> Option<(String, &'a str)> {
    let (k, rest) = term.split_once(op)?;
    Some((k.trim().to_string(), rest))
}

fn parse_set(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn selector_should_match_every_operator() {
        let l = labels(json!({"app": "web", "tier": "front", "env": "prod"}));
        let yes = [
            "app=web",
            "app==web",
            "tier!=db",
            "env in (prod, staging)",
            "env notin (dev)",
            "app",
            "!legacy",
            "app=web,env in (prod)",
            "",
        ];
        for s in yes {
            assert!(Selector::parse(s).unwrap().matches(Some(&l)), "{s} should match");
        }
        let no = ["app=db", "tier!=front", "env in (dev)", "env notin (prod)", "legacy", "!app", "app=web,env=dev"];
        for s in no {
            assert!(!Selector::parse(s).unwrap().matches(Some(&l)), "{s} should not match");
        }
    }

    #[test]
    fn a_selector_should_name_the_values_a_required_label_may_have() {
        let set = Selector::parse("tier!=db,shard in (3,7),app=web").unwrap();
        assert_eq!(set.required_values(), Some(("shard", vec!["3", "7"])), "the first usable requirement");
        assert_eq!(Selector::parse("app=web").unwrap().required_values(), Some(("app", vec!["web"])));
        assert_eq!(Selector::parse("app,tier notin (db)").unwrap().required_values(), None, "nothing required");
    }

    #[test]
    fn selectors_should_read_both_json_forms() {
        let l = labels(json!({"app": "web", "env": "prod"}));
        let structured = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]}, {"key": "legacy", "operator": "DoesNotExist"}]});
        let s = Selector::from_json(&structured).unwrap().unwrap();
        assert!(s.matches(Some(&l)));
        assert_eq!(s.required_label(), Some(("app", "web")));
        let plain = Selector::from_json(&json!({"app": "db"})).unwrap().unwrap();
        assert!(!plain.matches(Some(&l)));
        assert_eq!(Selector::from_json(&json!({})).unwrap(), None, "empty selects nothing here");
        assert_eq!(Selector::from_json(&Value::Null).unwrap(), None);
        assert!(Selector::from_json(&json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]})).is_err());
        assert!(Selector::from_json(&json!("app=web")).is_err());
    }

    #[test]
    fn selector_on_missing_labels() {
        assert!(Selector::parse("a!=b").unwrap().matches(None));
        assert!(!Selector::parse("a").unwrap().matches(None));
    }

    #[test]
    fn selector_rejects_garbage() {
        assert!(Selector::parse("env in dev").is_err());
        assert!(Selector::parse("=x").is_err());
    }
}
