//! The PowerDNS HTTP API, as this reconciler uses it: one rrset read
//! (`GET .../zones/{zone}?rrset_name=...&rrset_type=...`), replaced or
//! deleted with a `PATCH` of the zone — every call through the host
//! (`Context::http`), authenticated by the Reconciler's credential
//! [`CREDENTIAL`], whose value the guest never sees.
//!
//! Every way a call can fail becomes a [`Problem`]: whether retrying can
//! help, the `Ready` condition's reason, and a message that says what to do.

use operon_sdk::{Context, HttpError, HttpRequest, HttpResponse};
use serde::Serialize;
use serde_json::Value;

use crate::spec::{self, Record};

/// The credential the calls name: a Reconciler's `spec.credentials` entry
/// that sends the API key as `X-API-Key`.
pub const CREDENTIAL: &str = "pdns";

/// The path of the zones under a server's base URL.
pub const ZONES: &str = "/api/v1/servers/localhost/zones/";

/// The deadline of each call, in milliseconds.
pub const TIMEOUT_MS: u32 = 5_000;

/// Why the reconcile cannot go on: the failure and the `Ready` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Retrying cannot help until the DnsRecord (or the Reconciler) changes.
    pub terminal: bool,
    /// The `Ready` condition's reason: `InvalidSpec`, `ZoneNotFound`,
    /// `EgressDenied`, `RecordRejected`, `ServerUnavailable`,
    /// `Unauthorized`, `ServerError` or `EgressFailed`.
    pub reason: &'static str,
    /// What happened and what to do, for people.
    pub message: String,
}

impl Problem {
    /// A terminal problem.
    pub fn terminal(reason: &'static str, message: impl Into<String>) -> Problem {
        Problem { terminal: true, reason, message: message.into() }
    }

    /// A problem that may go away (the host retries with backoff).
    pub fn transient(reason: &'static str, message: impl Into<String>) -> Problem {
        Problem { terminal: false, reason, message: message.into() }
    }
}

/// An rrset as PowerDNS holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RRset {
    /// Seconds.
    pub ttl: u64,
    /// The records' contents, as PowerDNS writes them.
    pub contents: Vec<String>,
    /// Whether a record is disabled (this reconciler never disables one).
    pub disabled: bool,
}

impl RRset {
    /// Whether this is what `record` asks for: the same TTL and the same
    /// records (compared by [`spec::key`]), none disabled.
    pub fn matches(&self, record: &Record) -> bool {
        let mut keys: Vec<String> = self.contents.iter().map(|c| spec::key(&record.rtype, c)).collect();
        keys.sort();
        self.ttl == record.ttl && !self.disabled && keys == record.keys()
    }

    /// `192.0.2.1, 192.0.2.2 (ttl 300)`.
    pub fn describe(&self) -> String {
        format!("{} (ttl {})", self.contents.join(", "), self.ttl)
    }
}

/// Which rrset: on which server, in which zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The API's base URL.
    pub server: String,
    /// The zone, absolute.
    pub zone: String,
    /// The rrset's name, absolute.
    pub fqdn: String,
    /// Its type.
    pub rtype: String,
}

impl Target {
    /// The rrset a checked spec is about.
    pub fn of(record: &Record) -> Target {
        Target {
            server: record.server.clone(),
            zone: record.zone.clone(),
            fqdn: record.fqdn.clone(),
            rtype: record.rtype.clone(),
        }
    }

    /// `{server}/api/v1/servers/localhost/zones/{zone}`.
    pub fn zone_url(&self) -> String {
        format!("{}{ZONES}{}", self.server, self.zone)
    }
}

/// The body of a `PATCH` of a zone. Fields are written in this order, and
/// compactly, so the bytes are the same in every language's example (the
/// fixtures' recorded calls compare bodies exactly).
#[derive(Serialize)]
struct Patch<'a> {
    rrsets: [Change<'a>; 1],
}

#[derive(Serialize)]
struct Change<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    rtype: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<u64>,
    changetype: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<Vec<Content<'a>>>,
}

#[derive(Serialize)]
struct Content<'a> {
    content: &'a str,
    disabled: bool,
}

/// The `PATCH` body that makes the rrset `record` asks for:
/// `{"rrsets":[{"name":..,"type":..,"ttl":..,"changetype":"REPLACE","records":[{"content":..,"disabled":false}]}]}`.
pub fn replace_body(record: &Record) -> Vec<u8> {
    let records = record.contents.iter().map(|content| Content { content, disabled: false }).collect();
    let change = Change {
        name: &record.fqdn,
        rtype: &record.rtype,
        ttl: Some(record.ttl),
        changetype: "REPLACE",
        records: Some(records),
    };
    serde_json::to_vec(&Patch { rrsets: [change] }).expect("a patch serializes")
}

/// The `PATCH` body that deletes an rrset:
/// `{"rrsets":[{"name":..,"type":..,"changetype":"DELETE"}]}`.
pub fn delete_body(target: &Target) -> Vec<u8> {
    let change = Change { name: &target.fqdn, rtype: &target.rtype, ttl: None, changetype: "DELETE", records: None };
    serde_json::to_vec(&Patch { rrsets: [change] }).expect("a patch serializes")
}

/// The rrset `target` names, `None` when the zone has none.
///
/// # Errors
///
/// `ZoneNotFound` (terminal) for a 404, else as [`call`] and [`refused`].
pub fn read(ctx: &Context, target: &Target) -> Result<Option<RRset>, Problem> {
    let url = format!("{}?rrset_name={}&rrset_type={}", target.zone_url(), target.fqdn, target.rtype);
    let answer = call(ctx, &target.server, HttpRequest::get(url))?;
    match answer.status {
        200 => {}
        404 => return Err(zone_not_found(target)),
        _ => return Err(refused(&target.server, &answer)),
    }
    let zone: Value = answer.json().map_err(|_| {
        Problem::transient(
            "ServerError",
            format!("PowerDNS at {} answered 200 with a body that is not a zone", target.server),
        )
    })?;
    // Older servers ignore `rrset_name`: the rrset is picked out here.
    let rrset = zone["rrsets"].as_array().into_iter().flatten().find(|rrset| {
        rrset["name"].as_str().is_some_and(|name| name.eq_ignore_ascii_case(&target.fqdn))
            && rrset["type"].as_str() == Some(target.rtype.as_str())
    });
    Ok(rrset.map(|rrset| {
        let records = rrset["records"].as_array().map(Vec::as_slice).unwrap_or_default();
        RRset {
            ttl: rrset["ttl"].as_u64().unwrap_or_default(),
            contents: records.iter().map(|r| r["content"].as_str().unwrap_or_default().to_owned()).collect(),
            disabled: records.iter().any(|r| r["disabled"].as_bool() == Some(true)),
        }
    }))
}

/// Makes the rrset `record` asks for (replacing what was there).
///
/// # Errors
///
/// `ZoneNotFound` for a 404 and `RecordRejected` for a 422 (both
/// terminal), else as [`call`] and [`refused`].
pub fn replace(ctx: &Context, record: &Record) -> Result<(), Problem> {
    let target = Target::of(record);
    let request =
        HttpRequest::patch(target.zone_url()).header("content-type", "application/json").body(replace_body(record));
    let answer = call(ctx, &record.server, request)?;
    match answer.status {
        200..=299 => Ok(()),
        404 => Err(zone_not_found(&target)),
        422 => Err(Problem::terminal(
            "RecordRejected",
            format!("PowerDNS at {} refused {}: {}", record.server, record.describe(), detail(&answer)),
        )),
        _ => Err(refused(&record.server, &answer)),
    }
}

/// Deletes the rrset `target` names: `true` when PowerDNS did (or had
/// none), `false` when its zone does not exist (nothing to delete).
///
/// # Errors
///
/// As [`call`] and [`refused`].
pub fn delete(ctx: &Context, target: &Target) -> Result<bool, Problem> {
    let request =
        HttpRequest::patch(target.zone_url()).header("content-type", "application/json").body(delete_body(target));
    let answer = call(ctx, &target.server, request)?;
    match answer.status {
        200..=299 => Ok(true),
        404 => Ok(false),
        _ => Err(refused(&target.server, &answer)),
    }
}

/// One call through the host, with the credential and the deadline.
///
/// # Errors
///
/// When no answer came: `EgressDenied` (terminal: the Reconciler must
/// grant the call; the message says which grant), `InvalidSpec` (terminal:
/// the host found the URL malformed), `ServerUnavailable` (unreachable or
/// timed out: transient) or `EgressFailed` (the answer was too large, the
/// reconcile's calls are spent: transient).
fn call(ctx: &Context, server: &str, request: HttpRequest) -> Result<HttpResponse, Problem> {
    ctx.http(request.credential(CREDENTIAL).timeout_ms(TIMEOUT_MS)).map_err(|error| no_answer(server, &error))
}

/// The problem of a call that got no answer.
pub fn no_answer(server: &str, error: &HttpError) -> Problem {
    let (kind, message) = (error.kind(), error_message(error));
    match error {
        HttpError::Denied(_) => {
            let (scheme, host, port, path) = spec::endpoint(server);
            Problem::terminal(
                "EgressDenied",
                format!(
                    "the host denied the call to PowerDNS at {server} ({message}): the Reconciler must grant \
                     egress to {scheme}://{host}:{port} for GET and PATCH under {path}{ZONES}, and credential \
                     {CREDENTIAL} for host {host}"
                ),
            )
        }
        HttpError::Invalid(_) => Problem::terminal(
            "InvalidSpec",
            format!("the host refused the call to PowerDNS at {server} as invalid: {message}"),
        ),
        HttpError::Unreachable(_) | HttpError::Timeout(_) => {
            Problem::transient("ServerUnavailable", format!("PowerDNS at {server} is unavailable ({kind}: {message})"))
        }
        HttpError::TooLarge(_) | HttpError::Budget(_) | HttpError::NotRecorded(_) => {
            Problem::transient("EgressFailed", format!("the call to PowerDNS at {server} failed ({kind}: {message})"))
        }
    }
}

/// The host's message of an error, without its kind.
fn error_message(error: &HttpError) -> &str {
    match error {
        HttpError::Denied(m)
        | HttpError::Invalid(m)
        | HttpError::Timeout(m)
        | HttpError::Unreachable(m)
        | HttpError::TooLarge(m)
        | HttpError::Budget(m)
        | HttpError::NotRecorded(m) => m,
    }
}

/// The problem of an answer this reconciler did not want: `Unauthorized`
/// for 401 and 403 (the API key is wrong: transient, as the Secret may be
/// fixed without the DnsRecord changing), else `ServerError` (transient).
pub fn refused(server: &str, answer: &HttpResponse) -> Problem {
    match answer.status {
        401 | 403 => Problem::transient(
            "Unauthorized",
            format!(
                "PowerDNS at {server} refused the credential {CREDENTIAL} ({}): check the API key in the Secret \
                 that the Reconciler's credential {CREDENTIAL} names",
                answer.status
            ),
        ),
        status => {
            let detail = detail(answer);
            let detail = if detail.is_empty() { String::new() } else { format!(": {detail}") };
            Problem::transient("ServerError", format!("PowerDNS at {server} answered {status}{detail}"))
        }
    }
}

fn zone_not_found(target: &Target) -> Problem {
    Problem::terminal("ZoneNotFound", format!("zone {} does not exist on PowerDNS at {}", target.zone, target.server))
}

/// What PowerDNS said: the `error` of its JSON answer, else the first 200
/// characters of the body.
fn detail(answer: &HttpResponse) -> String {
    if let Ok(Value::Object(body)) = answer.json::<Value>()
        && let Some(Value::String(error)) = body.get("error")
    {
        return error.clone();
    }
    answer.text().trim().chars().take(200).collect()
}
