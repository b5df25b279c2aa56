//! Kubernetes label selectors in their string form, as `list` takes them.

use std::collections::BTreeMap;
use std::fmt;

/// A parsed label selector: requirements joined by commas, all of which must
/// hold.
///
/// | Syntax             | Matches labels that                         |
/// |--------------------|---------------------------------------------|
/// | `key=value`, `key==value` | have `key` set to `value`            |
/// | `key!=value`       | lack `key` or have another value            |
/// | `key in (a,b)`     | have `key` set to `a` or `b`                |
/// | `key notin (a,b)`  | lack `key` or have another value            |
/// | `key`              | have `key`                                  |
/// | `!key`             | lack `key`                                  |
///
/// The empty selector matches everything.
///
/// ```
/// use operon_sdk::testing::Selector;
///
/// let selector = Selector::parse("app=web, tier notin (db), !legacy").unwrap();
/// let labels = [("app".to_owned(), "web".to_owned())].into();
/// assert!(selector.matches(&labels));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A selector that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError {
    selector: String,
    reason: &'static str,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid label selector {:?}: {}", self.selector, self.reason)
    }
}

impl std::error::Error for SelectorError {}

impl Selector {
    /// Parses the string form.
    ///
    /// # Errors
    ///
    /// When the text is not a label selector (an empty key, an unclosed
    /// parenthesis, an unknown operator).
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let error = |reason| SelectorError { selector: text.to_owned(), reason };
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(error)? {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(error("empty requirement"));
            }
            requirements.push(parse_requirement(part).map_err(error)?);
        }
        Ok(Selector { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|requirement| match requirement {
            Requirement::In(key, values) => labels.get(key).is_some_and(|value| values.contains(value)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|value| !values.contains(value)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
        })
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, &'static str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u32, 0);
    for (at, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parenthesis"),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("unbalanced parenthesis"),
            ',' if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed parenthesis");
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, &'static str> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key_of(key)?));
    }
    if let Some((key, value)) = part.split_once("!=") {
        return Ok(Requirement::NotIn(key_of(key)?, vec![value_of(value)?]));
    }
    if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Requirement::In(key_of(key)?, vec![value_of(value)?]));
    }
    if let Some(open) = part.find('(') {
        let (head, list) = (part[..open].trim(), &part[open..]);
        let list =
            list.strip_prefix('(').and_then(|l| l.strip_suffix(')')).ok_or("text after the closing parenthesis")?;
        let values = list.split(',').map(value_of).collect::<Result<Vec<_>, _>>()?;
        let (key, operator) = head.rsplit_once(char::is_whitespace).ok_or("missing operator before (")?;
        let key = key_of(key)?;
        return match operator {
            "in" => Ok(Requirement::In(key, values)),
            "notin" => Ok(Requirement::NotIn(key, values)),
            _ => Err("unknown operator (expected in or notin)"),
        };
    }
    Ok(Requirement::Exists(key_of(part)?))
}

fn key_of(text: &str) -> Result<String, &'static str> {
    let key = text.trim();
    if key.is_empty() || key.contains(char::is_whitespace) || key.contains(['=', '!', '(', ')']) {
        return Err("invalid key");
    }
    Ok(key.to_owned())
}

fn value_of(text: &str) -> Result<String, &'static str> {
    let value = text.trim();
    if value.contains(char::is_whitespace) || value.contains(['=', '!', '(', ')', ',']) {
        return Err("invalid value");
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn matches(selector: &str, pairs: &[(&str, &str)]) -> bool {
        Selector::parse(selector).unwrap().matches(&labels(pairs))
    }

    #[test]
    fn equality_should_need_the_label_with_that_value() {
        assert!(matches("app=web", &[("app", "web")]));
        assert!(matches("app==web", &[("app", "web"), ("x", "y")]));
        assert!(!matches("app=web", &[("app", "db")]));
        assert!(!matches("app=web", &[]));
    }

    #[test]
    fn inequality_should_match_a_missing_label() {
        assert!(matches("tier!=db", &[]));
        assert!(matches("tier!=db", &[("tier", "web")]));
        assert!(!matches("tier!=db", &[("tier", "db")]));
    }

    #[test]
    fn set_operators_should_follow_kubernetes() {
        assert!(matches("env in (a, b)", &[("env", "b")]));
        assert!(!matches("env in (a,b)", &[("env", "c")]));
        assert!(!matches("env in (a,b)", &[]));
        assert!(matches("env notin (a,b)", &[]));
        assert!(matches("env notin (a,b)", &[("env", "c")]));
        assert!(!matches("env notin (a,b)", &[("env", "a")]));
    }

    #[test]
    fn existence_should_check_the_key_only() {
        assert!(matches("legacy", &[("legacy", "")]));
        assert!(!matches("legacy", &[]));
        assert!(matches("!legacy", &[]));
        assert!(!matches("! legacy", &[("legacy", "x")]));
    }

    #[test]
    fn requirements_should_all_hold() {
        let selector = "app=web,env in (prod,staging),!legacy,tier";
        assert!(matches(selector, &[("app", "web"), ("env", "prod"), ("tier", "x")]));
        assert!(!matches(selector, &[("app", "web"), ("env", "prod"), ("tier", "x"), ("legacy", "1")]));
        assert!(matches("", &[]));
        assert!(matches("  ", &[("a", "b")]));
    }

    #[test]
    fn malformed_selectors_should_be_refused() {
        for bad in ["app=web,", "env in (a,b", "env on (a)", "=web", "a b", ",", "env in (a,(b))"] {
            assert!(Selector::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
