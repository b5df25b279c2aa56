//! What a plugin may reach: a Reconciler's `spec.grants.egress`, compiled,
//! and the addresses the host never connects to unless a grant names them.
//!
//! A grant names a host (exact, `*.example.com`, an IP address or a CIDR),
//! a scheme (https by default), a port (the scheme's by default), methods
//! (all six by default) and a path prefix. A URL whose host is a name may
//! reach only public addresses; loopback, link-local (the cloud metadata
//! address), private, shared and other special ranges are reached only
//! when the URL names the address and a grant covers it — so a granted
//! name cannot be pointed (or rebound) at the host's neighbourhood.

use ipnet::IpNet;
use reqwest::Url;
use std::net::IpAddr;

/// The methods a guest may use at all.
pub const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// One grant as the Reconciler states it (`spec.grants.egress[]`).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressGrant {
    /// `https` (the default) or `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// A host name (`api.example.com`), a wildcard over its subdomains
    /// (`*.example.com`, not the apex), an IP address or a CIDR
    /// (`10.0.0.0/8`). Private, loopback and link-local addresses are
    /// reached only through an address grant.
    pub host: String,
    /// The port (default: the scheme's, 443 or 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Methods allowed (default: GET, HEAD, POST, PUT, PATCH, DELETE).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Only paths under this prefix (e.g. `/api/v1/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
}

/// A grant's host, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    Name(String),
    /// `*.suffix`: any name ending in `.suffix`.
    Wildcard(String),
    Net(IpNet),
}

/// One compiled grant.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    scheme: String,
    host: HostRule,
    /// The host as the grant names it (a metric label: as many as grants).
    shown: String,
    port: u16,
    methods: Vec<String>,
    path_prefix: Option<String>,
}

/// A plugin's egress grants, compiled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules(Vec<Rule>);

/// A grant that cannot be used, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.grants.egress[{index}]: {reason}")]
pub struct BadGrant {
    /// Which grant.
    pub index: usize,
    /// What is wrong.
    pub reason: String,
}

impl Rules {
    /// Compile grants.
    ///
    /// # Errors
    /// [`BadGrant`] for a scheme, host, method or path that cannot be used.
    pub fn compile(grants: &[EgressGrant]) -> Result<Rules, BadGrant> {
        grants
            .iter()
            .enumerate()
            .map(|(index, g)| compile(g).map_err(|reason| BadGrant { index, reason }))
            .collect::<Result<_, _>>()
            .map(Rules)
    }

    /// Whether a grant's host covers `target` (whatever the rest says).
    pub fn covers(&self, target: &Target) -> bool {
        self.0.iter().any(|r| r.host.covers(target))
    }

    /// Whether there is any grant.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a call may go to `url` with `method`: the host of the grant
    /// that allows it, as the grant names it (`*.example.com`); `Err` says
    /// why not, for the guest and the event.
    ///
    /// # Errors
    /// Why the call is refused.
    pub fn allows(&self, method: &str, url: &Url) -> Result<String, String> {
        let scheme = url.scheme();
        if scheme != "https" && scheme != "http" {
            return Err(format!("{scheme}: URLs are not allowed (only https, or http where granted)"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials in the URL are not allowed: name one of the Reconciler's spec.credentials".into());
        }
        let host = target(url).ok_or_else(|| format!("{url} has no host"))?;
        let port = url.port_or_known_default().unwrap_or(0);
        let method = method.to_ascii_uppercase();
        let path = url.path();
        if self.0.is_empty() {
            return Err(format!(
                "the Reconciler grants no egress: add {{host: {}, port: {port}}} to spec.grants.egress",
                host.shown()
            ));
        }
        let mut nearest = None;
        for rule in &self.0 {
            if !rule.host.covers(&host) {
                continue;
            }
            let why = if rule.scheme != scheme {
                format!("scheme {scheme} (the grant says {})", rule.scheme)
            } else if rule.port != port {
                format!("port {port} (the grant says {})", rule.port)
            } else if !rule.methods.contains(&method) {
                format!("method {method} (the grant allows {})", rule.methods.join(", "))
            } else if rule.path_prefix.as_deref().is_some_and(|p| !path.starts_with(p)) {
                format!("path {path} (the grant allows {}*)", rule.path_prefix.as_deref().unwrap_or_default())
            } else {
                return Ok(rule.shown.clone());
            };
            nearest.get_or_insert(why);
        }
        Err(match nearest {
            Some(why) => format!("{} is granted, but not {why}: widen its spec.grants.egress entry", host.shown()),
            None => format!("{} is not in spec.grants.egress", host.shown()),
        })
    }
}

fn compile(g: &EgressGrant) -> Result<Rule, String> {
    let scheme = g.scheme.as_deref().unwrap_or("https").to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        other => return Err(format!("scheme {other:?} must be https or http")),
    };
    let host = g.host.trim().to_ascii_lowercase();
    let host = if let Ok(net) = host.parse::<IpNet>() {
        HostRule::Net(net.trunc())
    } else if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        HostRule::Net(IpNet::from(ip))
    } else if let Some(suffix) = host.strip_prefix("*.") {
        if suffix.is_empty() || suffix.contains('*') || !suffix.contains('.') {
            return Err(format!("host {:?}: a wildcard must cover a domain's subdomains, as *.example.com", g.host));
        }
        HostRule::Wildcard(suffix.trim_end_matches('.').to_string())
    } else if host.is_empty() || host.contains(['*', '/', ':', ' ', '@']) {
        return Err(format!("host {:?} must be a name, *.domain, an IP address or a CIDR", g.host));
    } else {
        HostRule::Name(host.trim_end_matches('.').to_string())
    };
    let mut methods: Vec<String> = g.methods.iter().map(|m| m.to_ascii_uppercase()).collect();
    if let Some(bad) = methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
        return Err(format!("method {bad:?} is not one of {}", METHODS.join(", ")));
    }
    if methods.is_empty() {
        methods = METHODS.iter().map(|m| (*m).to_string()).collect();
    }
    if let Some(p) = &g.path_prefix
        && !p.starts_with('/')
    {
        return Err(format!("pathPrefix {p:?} must start with /"));
    }
    let shown = g.host.trim().to_ascii_lowercase();
    Ok(Rule { scheme, host, shown, port: g.port.unwrap_or(default_port), methods, path_prefix: g.path_prefix.clone() })
}

/// What the host lets any Reconciler grant (`operon run --egress-allow`):
/// hosts as grants name them; by default everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed(Option<Vec<HostRule>>);

impl Allowed {
    /// From the flag's patterns (`*` allows every host).
    ///
    /// # Errors
    /// A pattern that is not a name, `*.domain`, an address or a CIDR.
    pub fn parse(patterns: &[String]) -> Result<Allowed, String> {
        if patterns.is_empty() || patterns.iter().any(|p| p.trim() == "*") {
            return Ok(Allowed(None));
        }
        let rules = patterns
            .iter()
            .filter(|p| !p.trim().is_empty())
            .map(|p| compile(&EgressGrant { host: p.clone(), ..EgressGrant::default() }).map(|r| r.host))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allowed(Some(rules)))
    }

    /// Whether a grant's host is within what the host allows.
    ///
    /// # Errors
    /// Why not, naming the flag.
    pub fn permits(&self, grants: &[EgressGrant]) -> Result<(), String> {
        let Some(allowed) = &self.0 else { return Ok(()) };
        for (i, g) in grants.iter().enumerate() {
            let rule = compile(g).map_err(|reason| format!("spec.grants.egress[{i}]: {reason}"))?;
            if !allowed.iter().any(|a| a.includes(&rule.host)) {
                return Err(format!(
                    "spec.grants.egress[{i}]: host {:?} is outside what this host lets plugins reach (--egress-allow)",
                    g.host
                ));
            }
        }
        Ok(())
    }
}

impl HostRule {
    /// Whether every host `other` covers is one this covers.
    fn includes(&self, other: &HostRule) -> bool {
        match (self, other) {
            (HostRule::Name(a), HostRule::Name(b)) => a == b,
            (HostRule::Wildcard(_), HostRule::Name(b)) => self.covers(&Target::Name(b.clone())),
            (HostRule::Wildcard(a), HostRule::Wildcard(b)) => b == a || b.ends_with(&format!(".{a}")),
            (HostRule::Net(a), HostRule::Net(b)) => a.contains(b),
            _ => false,
        }
    }
}

/// A URL's host, as grants see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A name, lowercased, without a trailing dot.
    Name(String),
    /// An address.
    Address(IpAddr),
}

impl Target {
    /// For messages.
    pub fn shown(&self) -> String {
        match self {
            Target::Name(n) => n.clone(),
            Target::Address(a) => a.to_string(),
        }
    }
}

/// The host of `url`.
pub fn target(url: &Url) -> Option<Target> {
    Some(match url.host()? {
        url::Host::Domain(d) => Target::Name(d.to_ascii_lowercase().trim_end_matches('.').to_string()),
        url::Host::Ipv4(a) => Target::Address(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Target::Address(IpAddr::V6(a)),
    })
}

impl HostRule {
    fn covers(&self, target: &Target) -> bool {
        match (self, target) {
            (HostRule::Name(n), Target::Name(t)) => n == t,
            (HostRule::Wildcard(suffix), Target::Name(t)) => {
                t.strip_suffix(suffix.as_str()).is_some_and(|head| head.len() > 1 && head.ends_with('.'))
            }
            (HostRule::Net(net), Target::Address(a)) => net.contains(&canonical(*a)),
            _ => false,
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

/// Why an address is never reached through a name (`None`: it is public).
/// Covers IPv4-mapped, NAT64 and 6to4 forms of the IPv4 ranges too.
pub fn special(a: IpAddr) -> Option<&'static str> {
    match canonical(a) {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_loopback() || v6.is_unspecified() {
                return Some("loopback");
            }
            if (s[0] & 0xffc0) == 0xfe80 {
                return Some("link-local");
            }
            if (s[0] & 0xfe00) == 0xfc00 {
                return Some("private (unique local)");
            }
            if (s[0] & 0xff00) == 0xff00 {
                return Some("multicast");
            }
            // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) embed IPv4 addresses.
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let v4 = std::net::Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
                return special_v4(v4).or(Some("NAT64"));
            }
            if s[0] == 0x2002 {
                let v4 = std::net::Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
                return special_v4(v4).or(Some("6to4"));
            }
            if s[0] == 0x2001 && s[1] == 0x0db8 {
                return Some("documentation");
            }
            None
        }
    }
}

fn special_v4(v4: std::net::Ipv4Addr) -> Option<&'static str> {
    let o = v4.octets();
    if v4.is_loopback() || o[0] == 0 {
        Some("loopback")
    } else if v4.is_link_local() {
        Some("link-local (cloud metadata)")
    } else if v4.is_private() {
        Some("private")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("shared (carrier-grade NAT)")
    } else if v4.is_broadcast() || v4.is_multicast() || o[0] >= 240 {
        Some("multicast or reserved")
    } else if (o[0] == 192 && o[1] == 0 && o[2] == 0) || (o[0] == 198 && (o[1] & 0xfe) == 18) {
        Some("special-purpose")
    } else if v4.is_documentation() {
        Some("documentation")
    } else {
        None
    }
}

/// Whether a call may connect to `address` for a URL naming `target`:
/// a name reaches only public addresses; an address reaches itself (the
/// grant covered it already).
///
/// # Errors
/// Why not, for the guest.
pub fn may_connect(target: &Target, address: IpAddr) -> Result<(), String> {
    match target {
        Target::Address(_) => Ok(()),
        Target::Name(name) => match special(address) {
            None => Ok(()),
            Some(kind) => Err(format!(
                "{name} resolves to {address}, a {kind} address: names reach only public addresses; to reach \
                 this one, grant the address itself and call it by address"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(host, scheme, port, methods, path prefix)`.
    type Grant<'a> = (&'a str, Option<&'a str>, Option<u16>, &'a [&'a str], Option<&'a str>);

    fn rules(grants: &[Grant<'_>]) -> Rules {
        let grants: Vec<EgressGrant> = grants
            .iter()
            .map(|(host, scheme, port, methods, prefix)| EgressGrant {
                scheme: scheme.map(str::to_string),
                host: (*host).to_string(),
                port: *port,
                methods: methods.iter().map(|m| (*m).to_string()).collect(),
                path_prefix: prefix.map(str::to_string),
            })
            .collect();
        Rules::compile(&grants).unwrap()
    }

    fn url(u: &str) -> Url {
        Url::parse(u).unwrap()
    }

    #[test]
    fn a_grant_should_allow_only_its_scheme_host_port_methods_and_path() {
        let r = rules(&[
            ("api.example.com", None, None, &["GET"], Some("/v1/")),
            ("*.dns.example", None, None, &[], None),
            ("127.0.0.1", Some("http"), Some(8081), &[], None),
        ]);
        assert!(r.allows("get", &url("https://api.example.com/v1/zones")).is_ok());
        assert!(r.allows("POST", &url("https://api.example.com/v1/zones")).unwrap_err().contains("method POST"));
        assert!(r.allows("GET", &url("https://api.example.com/v2/")).unwrap_err().contains("path /v2/"));
        assert!(r.allows("GET", &url("http://api.example.com/v1/")).unwrap_err().contains("scheme http"));
        assert!(r.allows("GET", &url("https://api.example.com:8443/v1/")).unwrap_err().contains("port 8443"));
        assert!(r.allows("DELETE", &url("https://a.b.dns.example/x")).is_ok());
        assert!(r.allows("GET", &url("https://dns.example/")).is_err(), "a wildcard does not cover the apex");
        assert!(r.allows("GET", &url("https://evildns.example/")).is_err());
        assert!(r.allows("PATCH", &url("http://127.0.0.1:8081/api")).is_ok());
        assert!(r.allows("GET", &url("http://127.0.0.1:8082/")).is_err());
        assert!(
            r.allows("GET", &url("http://169.254.169.254/latest/")).unwrap_err().contains("not in spec.grants.egress")
        );
        assert!(
            r.allows("GET", &url("https://user:pw@api.example.com/v1/"))
                .unwrap_err()
                .contains("credentials in the URL")
        );
        assert!(r.allows("GET", &url("ftp://api.example.com/v1/")).is_err());
        assert!(Rules::default().allows("GET", &url("https://a.example/")).unwrap_err().contains("grants no egress"));
    }

    #[test]
    fn a_bad_grant_should_be_refused_naming_it() {
        let bad = |g: EgressGrant| Rules::compile(&[g]).unwrap_err().to_string();
        assert!(bad(EgressGrant { host: "*".into(), ..Default::default() }).contains("egress[0]"));
        assert!(bad(EgressGrant { host: "*.com".into(), ..Default::default() }).contains("wildcard"));
        assert!(
            bad(EgressGrant { host: "a.example".into(), scheme: Some("ftp".into()), ..Default::default() })
                .contains("scheme")
        );
        assert!(
            bad(EgressGrant { host: "a.example".into(), methods: vec!["TRACE".into()], ..Default::default() })
                .contains("TRACE")
        );
    }

    #[test]
    fn the_hosts_allow_list_should_bound_what_a_reconciler_may_grant() {
        let grant = |h: &str| EgressGrant { host: h.into(), ..Default::default() };
        let allowed = Allowed::parse(&["*.example.com".into(), "10.0.0.0/8".into(), "dns.internal".into()]).unwrap();
        for ok in ["api.example.com", "*.eu.example.com", "*.example.com", "10.1.0.0/16", "10.2.3.4", "dns.internal"] {
            assert_eq!(allowed.permits(&[grant(ok)]), Ok(()), "{ok}");
        }
        for refused in ["example.com", "evil.com", "*.other.com", "11.0.0.1", "10.0.0.0/7", "169.254.169.254"] {
            assert!(allowed.permits(&[grant(refused)]).unwrap_err().contains("--egress-allow"), "{refused}");
        }
        assert!(allowed.permits(&[grant("*.com")]).unwrap_err().contains("wildcard"), "a bad grant is named too");
        assert_eq!(Allowed::parse(&[]).unwrap().permits(&[grant("anything.example")]), Ok(()));
        assert_eq!(Allowed::parse(&["*".into()]).unwrap().permits(&[grant("169.254.169.254")]), Ok(()));
        assert!(Allowed::parse(&["*.".into()]).is_err());
    }

    #[test]
    fn names_should_reach_only_public_addresses() {
        let name = Target::Name("api.example.com".into());
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
        ] {
            let a: IpAddr = private.parse().unwrap();
            assert!(may_connect(&name, a).is_err(), "{private}");
        }
        for public in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert_eq!(may_connect(&name, public.parse().unwrap()), Ok(()), "{public}");
        }
        assert_eq!(may_connect(&Target::Address("127.0.0.1".parse().unwrap()), "127.0.0.1".parse().unwrap()), Ok(()));
        let r = rules(&[("10.0.0.0/8", Some("http"), None, &[], None)]);
        assert!(r.allows("GET", &url("http://10.9.8.7/")).is_ok());
        assert!(r.allows("GET", &url("http://[::ffff:10.9.8.7]/")).is_ok(), "a mapped address is the IPv4 one");
    }
}
