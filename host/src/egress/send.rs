//! Sending one hop of a call and reading its answer: the guest's headers
//! as the host lets them go, the credential's header, the answer read up
//! to its cap and, for a request carrying a credential, only in a form
//! redaction reads (identity-encoded, whole, in an ASCII-compatible
//! charset).

use super::credentials::{self, Applied, Credentials};
use super::{CREDENTIAL_STRIPPED, FORBIDDEN_HEADERS, OVERRIDE_HEADERS, grants, resolve};
use crate::contract::egress::{HttpError, HttpResponse};
use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;

/// One hop of a call: where it goes and what it carries.
pub(super) struct Hop {
    pub method: reqwest::Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<Vec<u8>>,
    pub credential: Option<String>,
}

impl Hop {
    /// Follow a redirect answered with `status` to `next`: a 303 (and a 301
    /// or 302 to a POST) becomes a GET without body; a credential goes to
    /// a new host only if it is one of its hosts, the guest's own
    /// `Authorization` and `Cookie` headers never.
    pub fn follow(&mut self, status: u16, next: Url, credentials: &Credentials) {
        if status == 303 || (matches!(status, 301 | 302) && self.method == reqwest::Method::POST) {
            self.method = reqwest::Method::GET;
            self.body = None;
        }
        if next.host_str() != self.url.host_str() || next.port_or_known_default() != self.url.port_or_known_default() {
            self.headers.remove(reqwest::header::AUTHORIZATION);
            self.headers.remove(reqwest::header::COOKIE);
            if let (Some(name), Some(t)) = (&self.credential, grants::target(&next))
                && !credentials.goes_to(name, &t)
            {
                self.credential = None;
            }
        }
        self.url = next;
    }
}

/// The guest's headers as they may go: the host's own dropped, at most
/// `max` bytes of them.
///
/// # Errors
/// [`HttpError::Invalid`] for an override header, a malformed header or
/// too many bytes of them.
pub(super) fn headers(guest: &[(String, String)], max: usize) -> Result<HeaderMap, HttpError> {
    let size: usize = guest.iter().map(|(n, v)| n.len() + v.len()).sum();
    if size > max {
        return Err(HttpError::Invalid(format!("{size} bytes of headers are over the host's {max} bytes")));
    }
    let mut headers = HeaderMap::new();
    for (name, value) in guest {
        let lower = name.to_ascii_lowercase();
        if FORBIDDEN_HEADERS.contains(&lower.as_str()) {
            continue;
        }
        if OVERRIDE_HEADERS.contains(&lower.as_str()) {
            return Err(HttpError::Invalid(format!(
                "header {lower} is not allowed: it would have the server act on another method or path than \
                 the grant allows; call with that method and path instead"
            )));
        }
        let (Ok(n), Ok(v)) = (HeaderName::from_bytes(lower.as_bytes()), HeaderValue::from_str(value)) else {
            let shown: String = name.chars().take(64).collect();
            return Err(HttpError::Invalid(format!("header {shown:?} is not a valid header")));
        };
        headers.append(n, v);
    }
    Ok(headers)
}

/// An answer as read.
pub(super) struct Answer {
    pub status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The answer as the guest gets it: every form of a credential's value
    /// blanked out.
    pub fn into_guest(self, secrets: &[Vec<u8>]) -> HttpResponse {
        HttpResponse {
            status: self.status,
            headers: self
                .headers
                .into_iter()
                .map(|(n, v)| (n, String::from_utf8_lossy(&credentials::redact(&v, secrets)).into_owned()))
                .collect(),
            body: credentials::redact(&self.body, secrets),
        }
    }
}

/// Where a redirect answer points, if it is one.
pub(super) fn redirect(answer: &Answer, from: &Url) -> Option<Result<Url, HttpError>> {
    if !matches!(answer.status, 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let location = answer.header("location")?;
    Some(from.join(location).map_err(|_| {
        let shown: String = location.chars().take(256).collect();
        HttpError::Invalid(format!("a redirect to {shown:?}, which is not a URL"))
    }))
}

/// Send `hop` with `applied`'s header, and read the answer within
/// `timeout` and `max` bytes of body.
pub(super) async fn send(
    client: &reqwest::Client,
    hop: &Hop,
    applied: Option<&Applied>,
    timeout: Duration,
    max: usize,
) -> Result<Answer, HttpError> {
    let mut shown = hop.url.clone();
    shown.set_query(None);
    let shown = format!("{} {shown}", hop.method);
    let mut headers = hop.headers.clone();
    if let Some(a) = applied {
        for name in CREDENTIAL_STRIPPED {
            headers.remove(*name);
        }
        headers.insert(reqwest::header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        headers.remove(a.header.as_str());
        if let (Ok(n), Ok(mut v)) = (HeaderName::from_bytes(a.header.as_bytes()), HeaderValue::from_str(&a.value)) {
            v.set_sensitive(true);
            headers.insert(n, v);
        }
    }
    let work = async {
        let mut request = client.request(hop.method.clone(), hop.url.clone()).headers(headers);
        if let Some(body) = &hop.body {
            request = request.body(body.clone());
        }
        let mut response = request.send().await.map_err(|e| transport(&e))?;
        let status = response.status().as_u16();
        let headers: Vec<(String, Vec<u8>)> =
            response.headers().iter().map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec())).collect();
        if applied.is_some() {
            unreadable_for_redaction(status, response.headers())?;
        }
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(HttpError::TooLarge(format!(
                "the answer says {} bytes; the host takes {max}",
                response.content_length().unwrap_or(0)
            )));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
            if body.len() + chunk.len() > max {
                return Err(HttpError::TooLarge(format!("the answer is over the {max} bytes the host takes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer { status, headers, body })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(answer) => answer,
        Err(_) => Err(HttpError::Timeout(format!("{shown}: no answer within {} ms", timeout.as_millis()))),
    }
}

/// An answer to a request carrying a credential that redaction could not
/// read whole: compressed, a slice of a larger answer, or text in a
/// charset that is not ASCII-compatible. Withheld, not handed over.
fn unreadable_for_redaction(status: u16, headers: &HeaderMap) -> Result<(), HttpError> {
    let withheld = |why: String| {
        HttpError::Denied(format!(
            "the answer to a call carrying a credential was withheld: {why}; the host takes only whole, \
             identity-encoded answers to such calls, so it can blank the credential out"
        ))
    };
    let value = |name: reqwest::header::HeaderName| {
        headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_ascii_lowercase())
    };
    if let Some(encoding) = value(reqwest::header::CONTENT_ENCODING).filter(|e| !e.is_empty() && e != "identity") {
        let encoding: String = encoding.chars().take(32).collect();
        return Err(withheld(format!("it is {encoding}-encoded")));
    }
    if status == 206 || headers.contains_key(reqwest::header::CONTENT_RANGE) {
        return Err(withheld("it is a part of a larger answer (a range)".into()));
    }
    if let Some(charset) = value(reqwest::header::CONTENT_TYPE).and_then(|t| {
        t.split(';').filter_map(|p| p.trim().strip_prefix("charset=").map(|c| c.trim_matches('"').to_string())).next()
    }) && !["utf-8", "utf8", "us-ascii", "ascii", "iso-8859-1", "latin1"].contains(&charset.as_str())
    {
        let charset: String = charset.chars().take(32).collect();
        return Err(withheld(format!("its charset is {charset}")));
    }
    Ok(())
}

/// A transport error as the guest sees it; a connection the resolver
/// refused is a refusal, not an outage.
fn transport(e: &reqwest::Error) -> HttpError {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let mut text = e.to_string();
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<resolve::Error>() {
            return match r {
                resolve::Error::Special { .. } => HttpError::Denied(r.to_string()),
                resolve::Error::Late(_) => HttpError::Timeout(r.to_string()),
                resolve::Error::Failed { .. } => HttpError::Unreachable(r.to_string()),
            };
        }
        text = s.to_string();
        source = s.source();
    }
    if e.is_timeout() {
        return HttpError::Timeout(text);
    }
    HttpError::Unreachable(text)
}

/// `e` with every form of a credential's value blanked out.
pub(super) fn redact_error(e: HttpError, secrets: &[Vec<u8>]) -> HttpError {
    let clean = |m: String| String::from_utf8_lossy(&credentials::redact(m.as_bytes(), secrets)).into_owned();
    match e {
        HttpError::Denied(m) => HttpError::Denied(clean(m)),
        HttpError::Invalid(m) => HttpError::Invalid(clean(m)),
        HttpError::Timeout(m) => HttpError::Timeout(clean(m)),
        HttpError::Unreachable(m) => HttpError::Unreachable(clean(m)),
        HttpError::TooLarge(m) => HttpError::TooLarge(clean(m)),
        HttpError::Budget(m) => HttpError::Budget(clean(m)),
        HttpError::NotRecorded(m) => HttpError::NotRecorded(clean(m)),
    }
}
