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
    /// Parse the string syntax used by `kubectl -l` and `labelSelector=`,
    /// as Kubernetes reads it (`labels.Parse`): requirements joined by
    /// commas, keys and values checked by the label rules. The shared cases
    /// in `contract/selectors/cases.json` say what it accepts and matches.
    ///
    /// # Errors
    /// Text that is not a selector (a stray comma, a missing operator or
    /// parenthesis, `>`/`<`), or an invalid label key or value.
    pub fn parse(text: &str) -> Result<Selector, Error> {
        Parser::new(text)
            .and_then(Parser::selector)
            .map(|requirements| Selector { requirements })
            .map_err(|reason| Error { selector: text.to_string(), reason })
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

/// One token of the selector syntax (the lexer of `labels.Parse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Word(&'a str),
    Not,
    NotEquals,
    Equals,
    Open,
    Close,
    Comma,
}

impl std::fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Token::Word(word) => word,
            Token::Not => "!",
            Token::NotEquals => "!=",
            Token::Equals => "=",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        };
        write!(f, "'{text}'")
    }
}

/// A token or the end of the text, for messages.
fn found(token: Option<Token<'_>>) -> String {
    token.map_or_else(|| "the end".to_string(), |t| t.to_string())
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_symbol(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>')
}

/// Splits the text into tokens and reads requirements from them.
struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Result<Parser<'a>, String> {
        let mut tokens = Vec::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if is_space(c) {
                rest = &rest[c.len_utf8()..];
                continue;
            }
            let (token, len) = match c {
                '!' if rest.starts_with("!=") => (Token::NotEquals, 2),
                '!' => (Token::Not, 1),
                '=' if rest.starts_with("==") => (Token::Equals, 2),
                '=' => (Token::Equals, 1),
                '(' => (Token::Open, 1),
                ')' => (Token::Close, 1),
                ',' => (Token::Comma, 1),
                '<' | '>' => return Err(format!("the {c} operator is not supported (use in, notin, = or !=)")),
                _ => {
                    let len = rest.find(|c| is_space(c) || is_symbol(c)).unwrap_or(rest.len());
                    (Token::Word(&rest[..len]), len)
                }
            };
            tokens.push(token);
            rest = &rest[len..];
        }
        Ok(Parser { tokens, at: 0 })
    }

    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.at).copied()
    }

    fn next(&mut self) -> Option<Token<'a>> {
        let token = self.peek();
        self.at += 1;
        token
    }

    /// Requirements joined by commas; nothing at all is the empty selector.
    fn selector(mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        if self.peek().is_none() {
            return Ok(requirements);
        }
        loop {
            requirements.push(self.requirement()?);
            match self.next() {
                None => return Ok(requirements),
                Some(Token::Comma) if matches!(self.peek(), Some(Token::Word(_) | Token::Not)) => {}
                Some(Token::Comma) => return Err("expected a requirement after ','".into()),
                other => return Err(format!("expected ',' or the end after a requirement, found {}", found(other))),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.peek() == Some(Token::Not) {
            self.at += 1;
            return Ok(Requirement::DoesNotExist(self.key()?));
        }
        let key = self.key()?;
        match self.peek() {
            None | Some(Token::Comma) => Ok(Requirement::Exists(key)),
            Some(Token::Equals) => {
                self.at += 1;
                Ok(Requirement::Equals(key, self.value()?))
            }
            Some(Token::NotEquals) => {
                self.at += 1;
                Ok(Requirement::NotEquals(key, self.value()?))
            }
            Some(Token::Word("in")) => {
                self.at += 1;
                Ok(Requirement::In(key, self.set()?))
            }
            Some(Token::Word("notin")) => {
                self.at += 1;
                Ok(Requirement::NotIn(key, self.set()?))
            }
            other => Err(format!("expected an operator (=, ==, !=, in, notin) after {key:?}, found {}", found(other))),
        }
    }

    fn key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Word(word)) => {
                check_key(word)?;
                Ok(word.to_string())
            }
            other => Err(format!("expected a label key, found {}", found(other))),
        }
    }

    /// The value after `=` or `!=`: empty when nothing follows.
    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            None | Some(Token::Comma) => Ok(String::new()),
            Some(Token::Word(word)) => {
                self.at += 1;
                check_value(word)?;
                Ok(word.to_string())
            }
            other => Err(format!("expected a label value, found {}", found(other))),
        }
    }

    /// `(a,b)`; an empty place in the list is the empty value, as in
    /// Kubernetes (`()` is the set of the empty value).
    fn set(&mut self) -> Result<Vec<String>, String> {
        if self.next() != Some(Token::Open) {
            return Err("expected '(' after in or notin".into());
        }
        let (mut values, mut current) = (Vec::new(), None);
        loop {
            match self.next() {
                Some(Token::Word(word)) if current.is_none() => {
                    check_value(word)?;
                    current = Some(word.to_string());
                }
                Some(Token::Comma) => values.push(current.take().unwrap_or_default()),
                Some(Token::Close) => {
                    values.push(current.unwrap_or_default());
                    return Ok(values);
                }
                None => return Err("unclosed parenthesis".into()),
                other => return Err(format!("expected a value, ',' or ')' in a set, found {}", found(other))),
            }
        }
    }
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name.
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err(format!("invalid label key {key:?}: the prefix must be a lowercase DNS subdomain"));
        }
    }
    if name.is_empty() || !is_name(name) {
        return Err(format!(
            "invalid label key {key:?}: the name must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A label value: empty, or a name.
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name(value) {
        return Ok(());
    }
    Err(format!(
        "invalid label value {value:?}: at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit"
    ))
}

/// Up to 63 of `[A-Za-z0-9-_.]`, alphanumeric at both ends.
fn is_name(text: &str) -> bool {
    let alnum = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    text.len() <= 63
        && alnum(text.bytes().next())
        && alnum(text.bytes().last())
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
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

    /// The selector cases every implementation shares.
    fn shared_cases() -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("selectors/cases.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn selector_should_agree_with_every_shared_case() {
        let cases = shared_cases();
        let (mut checked, mut wrong) = (0, Vec::new());
        for case in cases["selectors"].as_array().unwrap() {
            let text = case["selector"].as_str().unwrap();
            let selector = match Selector::parse(text) {
                Ok(selector) => selector,
                Err(e) => {
                    wrong.push(format!("{text:?} should parse: {e}"));
                    continue;
                }
            };
            for (key, want) in [("matches", true), ("misses", false)] {
                for labels in case[key].as_array().unwrap() {
                    let labels = labels.as_object().unwrap();
                    if selector.matches(Some(labels)) != want {
                        wrong.push(format!("{text:?} against {labels:?} should give {want}"));
                    }
                    checked += 1;
                }
            }
        }
        for case in cases["refused"].as_array().unwrap() {
            let text = case["selector"].as_str().unwrap();
            if Selector::parse(text).is_ok() {
                wrong.push(format!("{text:?} should be refused ({})", case["why"]));
            }
            checked += 1;
        }
        assert!(checked > 100, "the shared cases are in contract/selectors/cases.json: checked {checked}");
        assert!(wrong.is_empty(), "{} disagreements with the shared cases:\n{}", wrong.len(), wrong.join("\n"));
    }

    #[test]
    fn selector_should_say_what_is_wrong() {
        let message = |text: &str| Selector::parse(text).unwrap_err().to_string();
        assert_eq!(message("env in prod"), r#"invalid label selector "env in prod": expected '(' after in or notin"#);
        assert!(message("app=web,").contains("expected a requirement after ','"), "{}", message("app=web,"));
        assert!(message("app=-web").contains(r#"invalid label value "-web""#));
        assert!(message("Example.com/app").contains("lowercase DNS subdomain"));
        assert!(message("x>1").contains("the > operator is not supported"));
    }

    #[test]
    fn selector_rejects_garbage() {
        assert!(Selector::parse("env in dev").is_err());
        assert!(Selector::parse("=x").is_err());
    }
}
