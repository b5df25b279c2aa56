//! `spec` of a DnsRecord, checked: what the CRD schema checks too (for
//! objects that did not go through it: fixtures, an API server without the
//! schema), and the names and record contents PowerDNS wants.
//!
//! The spec is read from JSON by hand rather than by serde, so that every
//! message is this example's own (the Python example says the same words).

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::Value;

/// The record types this example manages.
pub const TYPES: [&str; 4] = ["A", "AAAA", "CNAME", "TXT"];

/// `spec.ttl` when it is left out.
pub const DEFAULT_TTL: u64 = 300;

/// The largest TTL (RFC 2181: 2^31 - 1).
pub const MAX_TTL: u64 = 2_147_483_647;

/// A DnsRecord's spec, checked and completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The PowerDNS API's base URL, without a trailing `/`.
    pub server: String,
    /// The zone, absolute (`example.org.`).
    pub zone: String,
    /// The record's name, absolute (`www.example.org.`).
    pub fqdn: String,
    /// `A`, `AAAA`, `CNAME` or `TXT`.
    pub rtype: String,
    /// Seconds.
    pub ttl: u64,
    /// The records' contents as PowerDNS writes them (`192.0.2.1`,
    /// `target.example.org.`, `"some text"`), in the spec's order.
    pub contents: Vec<String>,
}

impl Record {
    /// The checked spec, or why it is invalid (the first problem found).
    ///
    /// # Errors
    ///
    /// The message of the first problem: the spec is invalid.
    pub fn parse(spec: &Value) -> Result<Record, String> {
        let Value::Object(spec) = spec else {
            return Err("spec must be an object".to_owned());
        };
        let text = |field: &str| -> Result<&str, String> {
            match spec.get(field) {
                Some(Value::String(s)) if !s.is_empty() => Ok(s),
                Some(Value::String(_)) | None | Some(Value::Null) => Err(format!("spec.{field} must be set")),
                Some(_) => Err(format!("spec.{field} must be a string")),
            }
        };
        let server = text("server")?;
        if !is_base_url(server) {
            return Err(format!(
                "spec.server must be the PowerDNS API's base URL, such as http://127.0.0.1:8081, not \"{server}\""
            ));
        }
        let server = server.trim_end_matches('/').to_owned();

        let zone = text("zone")?;
        let zone = absolute(zone);
        if !is_dns_name(&zone, false) {
            return Err(format!("spec.zone \"{zone}\" is not a DNS name such as example.org. (lowercase)"));
        }

        let name = text("name")?;
        let fqdn = if name == "@" {
            zone.clone()
        } else if name.ends_with('.') {
            name.to_owned()
        } else {
            format!("{name}.{zone}")
        };
        if !is_dns_name(&fqdn, true) {
            return Err(format!(
                "spec.name \"{name}\" is not a DNS name: www (in the zone), www.example.org. (absolute) or @ (the zone itself)"
            ));
        }
        if fqdn != zone && !fqdn.ends_with(&format!(".{zone}")) {
            return Err(format!("spec.name {fqdn} is not in zone {zone}"));
        }

        let rtype = text("type")?;
        if !TYPES.contains(&rtype) {
            return Err(format!("spec.type must be one of {}, not \"{rtype}\"", TYPES.join(", ")));
        }

        let ttl = match spec.get("ttl") {
            None | Some(Value::Null) => DEFAULT_TTL,
            Some(value) => match value.as_u64() {
                Some(ttl) if (1..=MAX_TTL).contains(&ttl) => ttl,
                _ => return Err(format!("spec.ttl must be a whole number from 1 to {MAX_TTL}, not {value}")),
            },
        };

        let records = match spec.get("records") {
            Some(Value::Array(records)) if !records.is_empty() => records,
            Some(Value::Array(_)) | None | Some(Value::Null) => {
                return Err("spec.records must hold at least one record".to_owned());
            }
            Some(_) => return Err("spec.records must be a list of strings".to_owned()),
        };
        if rtype == "CNAME" && records.len() != 1 {
            return Err(format!("spec.records must hold exactly one record for a CNAME, not {}", records.len()));
        }
        let mut contents: Vec<String> = Vec::with_capacity(records.len());
        let mut keys: Vec<String> = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            let Value::String(record) = record else {
                return Err(format!("spec.records[{i}] must be a string"));
            };
            let content = content(rtype, record).map_err(|what| format!("spec.records[{i}] \"{record}\" {what}"))?;
            let key = key(rtype, &content);
            if keys.contains(&key) {
                return Err(format!("spec.records[{i}] \"{record}\" is listed twice"));
            }
            keys.push(key);
            contents.push(content);
        }
        Ok(Record { server, zone, fqdn, rtype: rtype.to_owned(), ttl, contents })
    }

    /// What the record is, for people: `www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300)`.
    pub fn describe(&self) -> String {
        format!("{} {} {} (ttl {})", self.fqdn, self.rtype, self.contents.join(", "), self.ttl)
    }

    /// The records' [`key`]s, sorted: what is compared with PowerDNS's.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.contents.iter().map(|c| key(&self.rtype, c)).collect();
        keys.sort();
        keys
    }
}

/// A record's content as PowerDNS wants it, or what is wrong with it:
/// addresses as written, a CNAME's target absolute, a TXT's text quoted
/// (with `"` and `\` escaped).
fn content(rtype: &str, record: &str) -> Result<String, &'static str> {
    match rtype {
        "A" => record.parse::<Ipv4Addr>().map(|_| record.to_owned()).map_err(|_| "is not an IPv4 address"),
        "AAAA" => record.parse::<Ipv6Addr>().map(|_| record.to_owned()).map_err(|_| "is not an IPv6 address"),
        "CNAME" => {
            let target = absolute(record);
            if is_dns_name(&target, false) { Ok(target) } else { Err("is not a DNS name (lowercase)") }
        }
        _ => {
            if record.is_empty() || record.len() > 255 || !record.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return Err("is not 1 to 255 printable ASCII characters");
            }
            Ok(format!("\"{}\"", record.replace('\\', "\\\\").replace('"', "\\\"")))
        }
    }
}

/// What a content is compared by, so that the spelling PowerDNS answers
/// with (`2001:db8::1` for `2001:DB8:0::1`, names in lowercase) is not a
/// difference: addresses by value, names without case, text exactly.
pub fn key(rtype: &str, content: &str) -> String {
    match rtype {
        "A" => content.parse::<Ipv4Addr>().map_or_else(|_| content.to_owned(), |a| a.to_string()),
        "AAAA" => {
            content.parse::<Ipv6Addr>().map_or_else(|_| content.to_owned(), |a| format!("{:032x}", u128::from(a)))
        }
        "CNAME" => content.to_ascii_lowercase(),
        _ => content.to_owned(),
    }
}

/// `name` with its trailing dot.
pub fn absolute(name: &str) -> String {
    if name.ends_with('.') { name.to_owned() } else { format!("{name}.") }
}

/// Whether `name` (absolute) is a DNS name in lowercase: labels of 1 to 63
/// letters, digits, `-` (not first or last) and `_`, at most 253
/// characters; `*` as the first label when `wildcard`.
pub fn is_dns_name(name: &str, wildcard: bool) -> bool {
    let Some(name) = name.strip_suffix('.') else { return false };
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    name.split('.').enumerate().all(|(i, label)| {
        (wildcard && i == 0 && label == "*")
            || (!label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'))
    })
}

/// Whether `url` is `http://` or `https://`, a host and an optional port
/// and path, with no user, query or fragment.
pub fn is_base_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return false;
    };
    if rest.contains(['?', '#', '@', ' ']) {
        return false;
    }
    let authority = rest.split('/').next().unwrap_or_default();
    authority_of(authority).is_some()
}

/// The scheme, host and port a base URL reaches (the port defaulted from
/// the scheme), and its path (without a trailing `/`): what an egress
/// grant names.
pub fn endpoint(url: &str) -> (&'static str, String, u16, String) {
    let (scheme, rest) = match url.strip_prefix("https://") {
        Some(rest) => ("https", rest),
        None => ("http", url.strip_prefix("http://").unwrap_or(url)),
    };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let (host, port) = authority_of(authority).unwrap_or_default();
    let port = port.unwrap_or(if scheme == "https" { 443 } else { 80 });
    let path = if path.is_empty() { String::new() } else { format!("/{}", path.trim_end_matches('/')) };
    (scheme, host, port, path)
}

/// `host[:port]` or `[v6]:port`: the host and the port, if valid.
fn authority_of(authority: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        host.parse::<Ipv6Addr>().ok()?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let host_ok =
        !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
    if !host_ok {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.len() <= 5 => {
            Some(p.parse::<u16>().ok().filter(|p| *p > 0)?)
        }
        Some(_) => return None,
    };
    Some((host.to_ascii_lowercase(), port))
}
