//! Kubernetes label selectors in their string form, as `list` takes them:
//! the host's parser (`operon_contract::selector`), over a guest's label maps.

use std::collections::BTreeMap;

/// A selector that does not parse: the host's error, message for message.
pub use operon_contract::selector::Error as SelectorError;

/// A parsed label selector: requirements joined by commas, all of which must
/// hold. It is the host's own selector (`operon_contract::selector`), so a
/// `FakeCluster` lists what the host would, and refuses what it refuses.
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
/// The empty selector matches everything. Keys and values follow the
/// Kubernetes label rules; `contract/selectors/cases.json` holds the cases
/// every SDK's selector agrees on.
///
/// ```
/// use operon_sdk::testing::Selector;
///
/// let selector = Selector::parse("app=web, tier notin (db), !legacy").unwrap();
/// let labels = [("app".to_owned(), "web".to_owned())].into();
/// assert!(selector.matches(&labels));
/// assert!(Selector::parse("app=web,").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(operon_contract::selector::Selector);

impl Selector {
    /// Parses the string form.
    ///
    /// # Errors
    ///
    /// When the text is not a label selector (an empty key, an unclosed
    /// parenthesis, an unknown operator, a stray comma) or a key or value
    /// breaks the Kubernetes label rules.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        operon_contract::selector::Selector::parse(text).map(Selector)
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches_with(|key| labels.get(key).map(String::as_str))
    }
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
    fn selector_should_agree_with_every_shared_case() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../contract/selectors/cases.json");
        let cases: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
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
                    let labels: BTreeMap<String, String> = serde_json::from_value(labels.clone()).unwrap();
                    if selector.matches(&labels) != want {
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
    fn malformed_selectors_should_be_refused() {
        for bad in ["app=web,", "env in (a,b", "env on (a)", "=web", "a b", ",", "env in (a,(b))"] {
            assert!(Selector::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
