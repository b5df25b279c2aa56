//! Outbound HTTP through the host (the WIT `egress` interface, contract
//! 0.2): one request, its answer or why none came, and a recorded
//! exchange as fixtures hold it — with [`Replay`], the one implementation
//! of how a recording answers a guest's calls (`operon test`, the Rust
//! SDK's runner; the other SDKs' runners follow the same rule, written
//! down in docs/egress.md).
//!
//! In fixtures and recordings a body is text when it is UTF-8 and
//! `{base64: ...}` otherwise; headers are a map (names lowercased; a name
//! sent twice has its values joined by `, `, as HTTP allows).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One HTTP request of a guest.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRequest {
    /// `GET`, `HEAD`, `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: String,
    /// An absolute URL.
    pub url: String,
    /// Headers the guest sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "headers")]
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "optional_body")]
    pub body: Option<Vec<u8>>,
    /// The credential the guest named (never its value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// The guest's deadline for the call, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
}

impl HttpRequest {
    /// A request with this method and URL, no headers and no body.
    pub fn new(method: &str, url: impl Into<String>) -> HttpRequest {
        HttpRequest { method: method.to_ascii_uppercase(), url: url.into(), ..HttpRequest::default() }
    }

    /// `GET url`.
    pub fn get(url: impl Into<String>) -> HttpRequest {
        HttpRequest::new("GET", url)
    }

    /// `POST url`.
    pub fn post(url: impl Into<String>) -> HttpRequest {
        HttpRequest::new("POST", url)
    }

    /// `PUT url`.
    pub fn put(url: impl Into<String>) -> HttpRequest {
        HttpRequest::new("PUT", url)
    }

    /// `PATCH url`.
    pub fn patch(url: impl Into<String>) -> HttpRequest {
        HttpRequest::new("PATCH", url)
    }

    /// `DELETE url`.
    pub fn delete(url: impl Into<String>) -> HttpRequest {
        HttpRequest::new("DELETE", url)
    }

    /// With one more header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> HttpRequest {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// With this body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> HttpRequest {
        self.body = Some(body.into());
        self
    }

    /// With `value` as a JSON body (and `content-type: application/json`).
    ///
    /// # Panics
    /// Never for types whose `Serialize` cannot fail (maps with string keys,
    /// `serde_json::Value`, derived structs).
    #[must_use]
    pub fn json(self, value: &impl Serialize) -> HttpRequest {
        let body = serde_json::to_vec(value).expect("a JSON body serializes");
        self.header("content-type", "application/json").body(body)
    }

    /// Authenticated with the Reconciler's credential of this name (the
    /// host adds it; the guest never sees its value).
    #[must_use]
    pub fn credential(mut self, name: impl Into<String>) -> HttpRequest {
        self.credential = Some(name.into());
        self
    }

    /// With a deadline of its own, in milliseconds.
    #[must_use]
    pub fn timeout_ms(mut self, ms: u32) -> HttpRequest {
        self.timeout_ms = Some(ms);
        self
    }
}

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The answer's headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "headers")]
    pub headers: Vec<(String, String)>,
    /// The answer's body.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "body")]
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The value of a header (names compare without case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    ///
    /// # Errors
    /// When the body is not JSON of `T`'s shape.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Why a call got no answer (the WIT `http-error`). The message is for
/// people: the guest sees it, and so does the event the host records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
pub enum HttpError {
    /// Not allowed: nothing was sent.
    #[error("denied: {0}")]
    Denied(String),
    /// A malformed request.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// No answer in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// No connection, or it broke.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The answer is larger than the host takes.
    #[error("answer too large: {0}")]
    TooLarge(String),
    /// The reconcile's calls are spent.
    #[error("call budget spent: {0}")]
    Budget(String),
    /// Replaying: the recording holds no such call.
    #[error("not recorded: {0}")]
    NotRecorded(String),
}

impl HttpError {
    /// The kind of error, as metrics and fixtures name it.
    pub fn kind(&self) -> &'static str {
        match self {
            HttpError::Denied(_) => "denied",
            HttpError::Invalid(_) => "invalid",
            HttpError::Timeout(_) => "timeout",
            HttpError::Unreachable(_) => "unreachable",
            HttpError::TooLarge(_) => "tooLarge",
            HttpError::Budget(_) => "budget",
            HttpError::NotRecorded(_) => "notRecorded",
        }
    }
}

/// One call and what came of it, as fixtures and recordings hold it:
/// `request` and either `response` or `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exchange {
    /// What the guest asked.
    pub request: HttpRequest,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<HttpResponse>,
    /// Or why none came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<HttpError>,
}

impl Exchange {
    /// An exchange from a call's result.
    pub fn of(request: HttpRequest, answer: &Result<HttpResponse, HttpError>) -> Exchange {
        match answer {
            Ok(r) => Exchange { request, response: Some(r.clone()), error: None },
            Err(e) => Exchange { request, response: None, error: Some(e.clone()) },
        }
    }

    /// What the recording answers.
    pub fn answer(&self) -> Result<HttpResponse, HttpError> {
        match (&self.response, &self.error) {
            (_, Some(e)) => Err(e.clone()),
            (Some(r), None) => Ok(r.clone()),
            (None, None) => Err(HttpError::NotRecorded("the recorded exchange has neither response nor error".into())),
        }
    }
}

/// The longest URL [`describe`] shows whole.
const SHOWN_URL: usize = 256;

/// The call a request is, in one line: `GET https://host/path` (a URL
/// longer than 256 characters cut, with `…`).
pub fn describe(request: &HttpRequest) -> String {
    let body = request.body.as_ref().map_or(String::new(), |b| format!(" ({} bytes of body)", b.len()));
    let credential = request.credential.as_ref().map_or(String::new(), |c| format!(" with credential {c:?}"));
    let method: String = request.method.to_ascii_uppercase().chars().take(16).collect();
    let url = if request.url.chars().count() > SHOWN_URL {
        format!("{}…", request.url.chars().take(SHOWN_URL).collect::<String>())
    } else {
        request.url.clone()
    };
    format!("{method} {url}{body}{credential}")
}

/// Whether a recorded request answers `asked`: the same method (without
/// case), URL, body and credential. Headers are not compared (they carry
/// dates and client names), nor the timeout.
pub fn same_call(recorded: &HttpRequest, asked: &HttpRequest) -> bool {
    recorded.method.eq_ignore_ascii_case(&asked.method)
        && recorded.url == asked.url
        && recorded.body.as_deref().unwrap_or_default() == asked.body.as_deref().unwrap_or_default()
        && recorded.credential == asked.credential
}

/// Answers a guest's calls from recorded exchanges, with no network: each
/// call takes the first exchange not yet used that is the [`same_call`];
/// a call with none is answered `not-recorded` and remembered, so the
/// runner fails the fixture naming it (whatever the guest made of the
/// error). The exchanges are shared, never copied (a shadow candidate
/// replays the live call's); what an error names and what is remembered
/// are bounded, however many calls the guest makes.
#[derive(Debug, Default)]
pub struct Replay {
    exchanges: Arc<[Exchange]>,
    state: Mutex<ReplayState>,
}

/// Recorded calls a `not-recorded` error names at most.
const NAMED: usize = 5;
/// Missed calls a replay remembers at most.
const REMEMBERED: usize = 16;

#[derive(Debug, Default)]
struct ReplayState {
    used: Vec<bool>,
    /// The missed calls, described.
    missed: Vec<String>,
    /// Missed calls past [`REMEMBERED`].
    more: usize,
}

impl Replay {
    /// A replay of `exchanges`.
    pub fn new(exchanges: Vec<Exchange>) -> Replay {
        Replay::shared(exchanges.into())
    }

    /// A replay of exchanges shared with others (a recording).
    pub fn shared(exchanges: Arc<[Exchange]>) -> Replay {
        let used = vec![false; exchanges.len()];
        Replay { exchanges, state: Mutex::new(ReplayState { used, ..ReplayState::default() }) }
    }

    /// The answer to one call.
    ///
    /// # Errors
    /// The recorded error, or [`HttpError::NotRecorded`].
    pub fn fetch(&self, asked: &HttpRequest) -> Result<HttpResponse, HttpError> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = self.exchanges.iter().enumerate().find(|(i, e)| !state.used[*i] && same_call(&e.request, asked));
        if let Some((i, exchange)) = found {
            state.used[i] = true;
            return exchange.answer();
        }
        if state.missed.len() < REMEMBERED {
            state.missed.push(describe(asked));
        } else {
            state.more += 1;
        }
        let mut recorded: Vec<String> = self.exchanges.iter().take(NAMED).map(|e| describe(&e.request)).collect();
        if self.exchanges.len() > NAMED {
            recorded.push(format!("and {} more", self.exchanges.len() - NAMED));
        }
        Err(HttpError::NotRecorded(format!(
            "{} is not in the recording{}",
            describe(asked),
            if recorded.is_empty() {
                " (it holds no calls)".to_string()
            } else {
                format!(" (it holds: {})", recorded.join("; "))
            }
        )))
    }

    /// The calls no exchange answered, in order, described (at most 16).
    pub fn missed(&self) -> Vec<String> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).missed.clone()
    }

    /// Why the run fails, if a call was not recorded: one line naming each
    /// (the first 16).
    pub fn verdict(&self) -> Option<String> {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (!state.missed.is_empty()).then(|| {
            let more = if state.more > 0 { format!("; and {} more", state.more) } else { String::new() };
            format!("the guest made calls the fixture's `egress` does not hold: {}{more}", state.missed.join("; "))
        })
    }
}

/// Headers as a map in files (lowercased names; repeated names joined).
mod headers {
    use super::*;

    pub fn serialize<S: Serializer>(headers: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
        let mut map: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in headers {
            map.entry(name.to_ascii_lowercase())
                .and_modify(|v| {
                    v.push_str(", ");
                    v.push_str(value);
                })
                .or_insert_with(|| value.clone());
        }
        map.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(d)?;
        Ok(map.into_iter().collect())
    }
}

/// A body in files: text when UTF-8, else `{base64: ...}`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum BodyForm {
    Text(String),
    Binary { base64: String },
}

mod body {
    use super::*;
    use base64::Engine as _;

    pub fn serialize<S: Serializer>(body: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(body) {
            Ok(text) => BodyForm::Text(text.to_string()).serialize(s),
            Err(_) => BodyForm::Binary { base64: base64::engine::general_purpose::STANDARD.encode(body) }.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match BodyForm::deserialize(d)? {
            BodyForm::Text(t) => Ok(t.into_bytes()),
            BodyForm::Binary { base64 } => base64::engine::general_purpose::STANDARD
                .decode(base64.as_bytes())
                .map_err(|e| D::Error::custom(format!("body.base64: {e}"))),
        }
    }
}

mod optional_body {
    use super::*;

    pub fn serialize<S: Serializer>(body: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match body {
            Some(b) => super::body::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        super::body::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(url: &str) -> HttpRequest {
        HttpRequest { method: "GET".into(), url: url.into(), ..Default::default() }
    }

    #[test]
    fn a_replay_should_answer_each_recorded_call_once_and_name_the_calls_it_does_not_hold() {
        let ok = HttpResponse { status: 200, headers: vec![], body: b"{}".to_vec() };
        let replay = Replay::new(vec![
            Exchange::of(get("https://a.example/x"), &Ok(ok.clone())),
            Exchange::of(get("https://a.example/x"), &Err(HttpError::Timeout("slow".into()))),
        ]);
        let mut asked = get("https://a.example/x");
        asked.method = "get".into();
        asked.headers = vec![("user-agent".into(), "whatever".into())];
        assert_eq!(replay.fetch(&asked), Ok(ok), "method without case, headers not compared");
        assert_eq!(replay.fetch(&asked), Err(HttpError::Timeout("slow".into())), "the second recorded answer");
        assert!(replay.verdict().is_none());
        let third = replay.fetch(&asked).unwrap_err();
        assert!(matches!(&third, HttpError::NotRecorded(m) if m.contains("GET https://a.example/x")), "{third}");
        let mut post = get("https://a.example/x");
        post.method = "POST".into();
        post.body = Some(b"{\"a\":1}".to_vec());
        assert!(replay.fetch(&post).is_err(), "a different method and body is another call");
        let verdict = replay.verdict().expect("two calls missed");
        assert!(verdict.contains("POST https://a.example/x (7 bytes of body)"), "{verdict}");
    }

    #[test]
    fn an_exchange_should_read_and_write_bodies_as_text_or_base64_and_headers_as_a_map() {
        let exchange = Exchange::of(
            HttpRequest {
                method: "PATCH".into(),
                url: "https://dns.example/api".into(),
                headers: vec![("Content-Type".into(), "application/json".into())],
                body: Some(b"{\"rrsets\":[]}".to_vec()),
                credential: Some("pdns".into()),
                timeout_ms: None,
            },
            &Ok(HttpResponse {
                status: 204,
                headers: vec![("x-a".into(), "1".into()), ("X-A".into(), "2".into())],
                body: vec![0xff, 0x00],
            }),
        );
        let json = serde_json::to_value(&exchange).unwrap();
        assert_eq!(json["request"]["body"], "{\"rrsets\":[]}");
        assert_eq!(json["request"]["headers"]["content-type"], "application/json");
        assert_eq!(json["response"]["headers"]["x-a"], "1, 2");
        assert_eq!(json["response"]["body"]["base64"], "/wA=");
        let back: Exchange = serde_json::from_value(json).unwrap();
        assert_eq!(back.response.as_ref().unwrap().body, vec![0xff, 0x00]);
        assert_eq!(back.request.body, exchange.request.body);
        let error: Exchange =
            serde_json::from_str(r#"{"request":{"method":"GET","url":"https://x/"},"error":{"denied":"no"}}"#).unwrap();
        assert_eq!(error.answer(), Err(HttpError::Denied("no".into())));
    }

    /// A guest looping on calls a recording does not hold: each error and
    /// the verdict name a bounded number of calls, however many there are
    /// (a replay's error listing every recorded call is quadratic).
    #[test]
    fn a_replay_should_name_a_bounded_number_of_calls() {
        let ok = HttpResponse { status: 200, headers: vec![], body: vec![] };
        let recorded: Vec<Exchange> =
            (0..1000).map(|i| Exchange::of(get(&format!("https://a.example/{i}")), &Ok(ok.clone()))).collect();
        let replay = Replay::new(recorded);
        let long = get(&format!("https://a.example/{}", "x".repeat(100_000)));
        let mut longest = 0;
        for _ in 0..1000 {
            longest = longest.max(replay.fetch(&long).unwrap_err().to_string().len());
        }
        assert!(longest < 4096, "an error of {longest} bytes");
        assert_eq!(replay.missed().len(), 16);
        let verdict = replay.verdict().unwrap();
        assert!(verdict.len() < 16 * 400 && verdict.ends_with("and 984 more"), "{}", verdict.len());
    }
}
