//! What a plugin may reach: a Reconciler's `spec.grants.egress`, compiled,
//! and what the operator lets any of them reach (`--egress-allow`).
//!
//! A grant names a host (exact, `*.example.com`, an IP address or a CIDR),
//! a scheme (https by default), a port (the scheme's by default), methods
//! (all six by default) and a path prefix. A URL whose host is a name may
//! reach only public addresses ([`super::special`]). Loopback, link-local
//! (the cloud metadata address), private, shared and the other special
//! ranges are reached only by address, only where a grant covers the
//! address **and** the operator opened it with an explicit `--egress-allow`
//! entry: a tenant's grant alone never opens the host's neighbourhood.

use super::special;
use ipnet::IpNet;
use reqwest::Url;
use std::net::IpAddr;

/// The methods a guest may use at all.
pub const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// How refusals name what opens special addresses: the flag, and the
/// chart's value that sets it.
pub const FLAG: &str = "--egress-allow";

/// One grant as the Reconciler states it (`spec.grants.egress[]`).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressGrant {
    /// `https` (the default) or `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// A host name (`api.example.com`), a wildcard over its subdomains
    /// (`*.example.com`, not the apex), an IP address or a CIDR
    /// (`10.0.0.0/8`). Loopback, link-local, private and other special
    /// addresses are reached only through an address grant, and only where
    /// the operator allows them (`--egress-allow`).
    pub host: String,
    /// The port (default: the scheme's, 443 or 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Methods allowed (default: GET, HEAD, POST, PUT, PATCH, DELETE).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Only paths under this prefix (e.g. `/api/v1/`), matched on the
    /// decoded path; a path with an encoded `/`, `\` or `%`, a `;` or a
    /// dot segment is refused where a prefix applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
}

/// Why a grant, an allow-list entry or a call is refused. The text is what
/// the guest, the event or the Reconciler's condition says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A grant that cannot be used.
    #[error("spec.grants.egress[{index}]: {reason}")]
    BadGrant {
        /// Which grant.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A host that is not a name, `*.domain`, an address or a CIDR.
    #[error("host {host:?}: {why}")]
    BadHost {
        /// The host as written.
        host: String,
        /// What is wrong.
        why: &'static str,
    },
    /// An `--egress-allow` pattern that cannot be used.
    #[error("{pattern:?}: {reason}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// What is wrong.
        reason: String,
    },
    /// A grant outside the operator's allow list.
    #[error(
        "spec.grants.egress[{index}]: host {host:?} is outside what this host lets plugins reach ({FLAG}; the chart's egressAllow)"
    )]
    OutsideAllowList {
        /// Which grant.
        index: usize,
        /// Its host.
        host: String,
    },
    /// A grant of special addresses the operator did not open.
    #[error(
        "spec.grants.egress[{index}]: {host} is {kind} address space, which a Reconciler's grant alone never \
         opens: the operator must allow it on the host ({FLAG} {host}; the chart's egressAllow)"
    )]
    NotOpened {
        /// Which grant.
        index: usize,
        /// Its host.
        host: String,
        /// What kind of special range.
        kind: &'static str,
    },
    /// A scheme other than http or https.
    #[error("{0}: URLs are not allowed (only https, or http where granted)")]
    Scheme(String),
    /// A user or password in the URL.
    #[error("credentials in the URL are not allowed: name one of the Reconciler's spec.credentials")]
    UserInfo,
    /// A URL without a host.
    #[error("{0} has no host")]
    NoHost(String),
    /// The Reconciler grants no egress at all.
    #[error("the Reconciler grants no egress: add {suggestion} to spec.grants.egress")]
    NoGrants {
        /// A complete grant for the call.
        suggestion: String,
    },
    /// A grant covers the host but not this call.
    #[error("{host} is granted, but not {why}: widen its spec.grants.egress entry")]
    Narrower {
        /// The host called.
        host: String,
        /// What the grant does not cover.
        why: String,
    },
    /// No grant covers the host.
    #[error("{host} is not in spec.grants.egress{hint}")]
    NotGranted {
        /// The host called.
        host: String,
        /// A near-miss grant, or the grant to add.
        hint: String,
    },
    /// A name resolved to a special address.
    #[error(
        "{name} resolves to {address}, a {kind} address: names reach only public addresses; to reach this \
         one, grant the address itself and call it by address (where the operator allows it with {FLAG})"
    )]
    NameToSpecial {
        /// The name called.
        name: String,
        /// What it resolved to.
        address: IpAddr,
        /// What kind of special address.
        kind: &'static str,
    },
    /// A special address the operator did not open.
    #[error(
        "{address} is a {kind} address, which a Reconciler's grant alone never reaches: the operator must \
         allow it on the host ({FLAG} {address}; the chart's egressAllow)"
    )]
    AddressNotOpened {
        /// The address called.
        address: IpAddr,
        /// What kind of special address.
        kind: &'static str,
    },
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

impl Rules {
    /// Compile grants.
    ///
    /// # Errors
    /// [`Error::BadGrant`] for a scheme, host, method or path that cannot
    /// be used.
    pub fn compile(grants: &[EgressGrant]) -> Result<Rules, Error> {
        grants.iter().enumerate().map(|(index, g)| compile(g, index)).collect::<Result<_, _>>().map(Rules)
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
    pub fn allows(&self, method: &str, url: &Url) -> Result<String, Error> {
        let scheme = url.scheme();
        if scheme != "https" && scheme != "http" {
            return Err(Error::Scheme(scheme.to_string()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Error::UserInfo);
        }
        let host = target(url).ok_or_else(|| Error::NoHost(url.to_string()))?;
        let port = url.port_or_known_default().unwrap_or(0);
        let method = method.to_ascii_uppercase();
        if self.0.is_empty() {
            return Err(Error::NoGrants { suggestion: suggestion(scheme, &host, port) });
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
            } else if let Some(prefix) = &rule.path_prefix {
                match decoded_path(url.path()) {
                    Err(why) => format!("path {}: {why} (the grant allows {prefix}*)", url.path()),
                    Ok(path) if under(&path, prefix) => return Ok(rule.shown.clone()),
                    Ok(path) => format!("path {path} (the grant allows {prefix}*)"),
                }
            } else {
                return Ok(rule.shown.clone());
            };
            nearest.get_or_insert(why);
        }
        Err(match nearest {
            Some(why) => Error::Narrower { host: host.shown(), why },
            None => Error::NotGranted { host: host.shown(), hint: self.hint(&host, scheme, port) },
        })
    }

    /// For a host no grant covers: the grant it most likely meant (a typo
    /// of one letter or digit or two), else the grant to add.
    fn hint(&self, host: &Target, scheme: &str, port: u16) -> String {
        let called = host.shown();
        let near = self
            .0
            .iter()
            .enumerate()
            .map(|(i, r)| (i, r, strsim::levenshtein(&called, &r.shown)))
            .filter(|(_, r, d)| *d > 0 && *d <= 2.max(called.len() / 8) && r.shown.len() > 2)
            .min_by_key(|(_, _, d)| *d);
        match near {
            Some((i, r, _)) => {
                format!("; did you mean grant {i} ({}), or add {}?", r.shown, suggestion(scheme, host, port))
            }
            None => format!("; add {} to reach it", suggestion(scheme, host, port)),
        }
    }
}

/// A complete grant for a call, as YAML a Reconciler author pastes.
fn suggestion(scheme: &str, host: &Target, port: u16) -> String {
    format!("{{scheme: {scheme}, host: {}, port: {port}}}", host.shown())
}

/// Whether `path` is under `prefix`: a prefix ending in `/` covers what
/// starts with it; any other covers itself and what is below it.
fn under(path: &str, prefix: &str) -> bool {
    if prefix.ends_with('/') {
        return path.starts_with(prefix);
    }
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'))
}

/// `path` (as the URL parser left it: dot segments resolved, the rest
/// still percent-encoded) decoded for a prefix to be matched on; `Err`
/// for what servers read in more than one way: an encoded `/`, `\` or `%`
/// (so `/v1/..%2Fadmin` cannot be read as `/admin` behind the check), a
/// `;` (path parameters: `/v1/..;/admin`), control characters, text that
/// is not UTF-8, or a dot segment left after decoding.
fn decoded_path(path: &str) -> Result<String, &'static str> {
    if path.contains(';') {
        return Err("a ; (path parameters) is not allowed under a path prefix");
    }
    let mut decoded = String::with_capacity(path.len());
    // An http(s) URL's path starts with `/`: the first segment is empty.
    for segment in path.split('/').skip(1) {
        let text =
            percent_encoding::percent_decode_str(segment).decode_utf8().map_err(|_| "the decoded path is not UTF-8")?;
        if text.contains(['/', '\\', '%']) {
            return Err("an encoded /, \\ or % is not allowed under a path prefix");
        }
        if text.chars().any(char::is_control) {
            return Err("control characters are not allowed in the path");
        }
        if text == "." || text == ".." {
            return Err("a dot segment is not allowed in the path");
        }
        decoded.push('/');
        decoded.push_str(&text);
    }
    if decoded.is_empty() {
        decoded.push('/');
    }
    Ok(decoded)
}

fn compile(g: &EgressGrant, index: usize) -> Result<Rule, Error> {
    let bad = |reason: String| Error::BadGrant { index, reason };
    let scheme = g.scheme.as_deref().unwrap_or("https").to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        other => return Err(bad(format!("scheme {other:?} must be https or http"))),
    };
    let host = host_rule(&g.host).map_err(|e| bad(e.to_string()))?;
    let mut methods: Vec<String> = g.methods.iter().map(|m| m.to_ascii_uppercase()).collect();
    if let Some(bad) = methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
        return Err(Error::BadGrant { index, reason: format!("method {bad:?} is not one of {}", METHODS.join(", ")) });
    }
    if methods.is_empty() {
        methods = METHODS.iter().map(|m| (*m).to_string()).collect();
    }
    if let Some(p) = &g.path_prefix {
        if !p.starts_with('/') {
            return Err(bad(format!("pathPrefix {p:?} must start with /")));
        }
        if p.contains(['%', ';', '\\', '?', '#']) || p.split('/').any(|s| s == "." || s == "..") {
            return Err(bad(format!(
                "pathPrefix {p:?} must be a plain decoded path (no %, ;, \\, ?, # or dot segments)"
            )));
        }
    }
    let shown = g.host.trim().to_ascii_lowercase();
    Ok(Rule { scheme, host, shown, port: g.port.unwrap_or(default_port), methods, path_prefix: g.path_prefix.clone() })
}

fn host_rule(host: &str) -> Result<HostRule, Error> {
    let bad = |why: &'static str| Error::BadHost { host: host.to_string(), why };
    let lower = host.trim().to_ascii_lowercase();
    Ok(if let Ok(net) = lower.parse::<IpNet>() {
        HostRule::Net(canonical_net(net.trunc()))
    } else if let Ok(ip) = lower.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        HostRule::Net(IpNet::from(special::canonical(ip)))
    } else if let Some(suffix) = lower.strip_prefix("*.") {
        if suffix.is_empty() || suffix.contains('*') || !suffix.contains('.') {
            return Err(bad("a wildcard must cover a domain's subdomains, as *.example.com"));
        }
        HostRule::Wildcard(suffix.trim_end_matches('.').to_string())
    } else if lower.is_empty() || lower.contains(['*', '/', ':', ' ', '@']) {
        return Err(bad("must be a name, *.domain, an IP address or a CIDR"));
    } else {
        HostRule::Name(lower.trim_end_matches('.').to_string())
    })
}

/// An IPv4-mapped network (`::ffff:10.0.0.0/104`) as the IPv4 one.
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, IpNet::V4),
            None => net,
        },
        other => other,
    }
}

/// What the operator lets Reconcilers reach (`operon run --egress-allow`,
/// the chart's `egress.allow`): `*` (the default) means any public name
/// or address; other entries name hosts as grants do. **Special addresses
/// (loopback, link-local, private, CGNAT, the cluster's network, ...) are
/// opened only by an entry that names them** — an address or a CIDR
/// covering them: `*` never does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// `*`: any public host.
    any_public: bool,
    /// The entries other than `*`.
    hosts: Vec<HostRule>,
    /// The address entries: what special space they cover is opened.
    opened: Vec<IpNet>,
    /// The cluster's own ranges when they are not special already
    /// (`--cluster-cidrs`): treated as special.
    cluster: Vec<IpNet>,
}

impl Allowed {
    /// From the flag's patterns (`*` allows every public host; no pattern
    /// at all is the same as `*`).
    ///
    /// # Errors
    /// [`Error::BadPattern`] for a pattern that is not a name, `*.domain`,
    /// an address or a CIDR.
    pub fn parse(patterns: &[String]) -> Result<Allowed, Error> {
        let patterns: Vec<&str> = patterns.iter().map(|p| p.trim()).filter(|p| !p.is_empty()).collect();
        let mut allowed = Allowed { any_public: patterns.is_empty(), ..Allowed::public() };
        for p in patterns {
            if p == "*" {
                allowed.any_public = true;
                continue;
            }
            let rule = host_rule(p).map_err(|e| Error::BadPattern { pattern: p.to_string(), reason: e.to_string() })?;
            if let HostRule::Net(net) = &rule {
                allowed.opened.push(*net);
            }
            allowed.hosts.push(rule);
        }
        Ok(allowed)
    }

    /// With the cluster's Pod and Service ranges (`--cluster-cidrs`),
    /// special even where they are public address space.
    #[must_use]
    pub fn with_cluster(mut self, cidrs: &[IpNet]) -> Allowed {
        self.cluster = cidrs.iter().map(|n| canonical_net(n.trunc())).collect();
        self
    }

    /// Any public host, nothing special opened: `*`, the default.
    pub fn public() -> Allowed {
        Allowed { any_public: true, hosts: Vec::new(), opened: Vec::new(), cluster: Vec::new() }
    }

    /// Whether grants stay within what the host allows: each grant's host
    /// is within the list (or public, with `*`), and a grant of special
    /// address space is within an entry that opens it.
    ///
    /// # Errors
    /// [`Error::OutsideAllowList`], [`Error::NotOpened`] or the grant's
    /// [`Error::BadGrant`], naming the flag.
    pub fn permits(&self, grants: &[EgressGrant]) -> Result<(), Error> {
        for (index, g) in grants.iter().enumerate() {
            let rule = compile(g, index)?;
            if let HostRule::Net(net) = &rule.host
                && let Some(kind) = self.special_net(net)
                && !self.opened.iter().any(|o| o.contains(net))
            {
                return Err(Error::NotOpened { index, host: rule.shown, kind });
            }
            let listed = self.hosts.iter().any(|a| a.includes(&rule.host));
            if !listed && !self.any_public {
                return Err(Error::OutsideAllowList { index, host: g.host.clone() });
            }
        }
        Ok(())
    }

    /// Why `a` is special on this host (`None`: public): the special
    /// ranges, and the cluster's.
    pub fn special(&self, a: IpAddr) -> Option<&'static str> {
        let a = special::canonical(a);
        special::special(a).or_else(|| self.cluster.iter().any(|n| n.contains(&a)).then_some("the cluster's network"))
    }

    /// Whether the operator opened the special address `a`.
    pub fn opens(&self, a: IpAddr) -> bool {
        let a = special::canonical(a);
        self.opened.iter().any(|n| n.contains(&a))
    }

    /// Whether a call may connect to `address` for a URL naming `target`:
    /// a name reaches only public addresses; an address reaches itself if
    /// it is public or the operator opened it (a grant covered it already).
    ///
    /// # Errors
    /// [`Error::NameToSpecial`] or [`Error::AddressNotOpened`].
    pub fn may_connect(&self, target: &Target, address: IpAddr) -> Result<(), Error> {
        let Some(kind) = self.special(address) else { return Ok(()) };
        match target {
            Target::Name(name) => Err(Error::NameToSpecial { name: name.clone(), address, kind }),
            Target::Address(_) if self.opens(address) => Ok(()),
            Target::Address(_) => Err(Error::AddressNotOpened { address: special::canonical(address), kind }),
        }
    }

    /// The kind of special space `net` lies wholly inside, if any.
    fn special_net(&self, net: &IpNet) -> Option<&'static str> {
        let first = net.network();
        if let Some((range, kind)) = special::range(first)
            && range.contains(net)
        {
            return Some(kind);
        }
        self.cluster.iter().any(|c| c.contains(net)).then_some("the cluster's network")
    }
}

/// `*`: any public host, nothing special opened (`--egress-allow`'s
/// default).
impl Default for Allowed {
    fn default() -> Self {
        Allowed::public()
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
            (HostRule::Net(net), Target::Address(a)) => net.contains(&special::canonical(*a)),
            _ => false,
        }
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
        assert!(
            r.allows("POST", &url("https://api.example.com/v1/zones")).unwrap_err().to_string().contains("method POST")
        );
        assert!(r.allows("GET", &url("https://api.example.com/v2/")).unwrap_err().to_string().contains("path /v2/"));
        assert!(r.allows("GET", &url("http://api.example.com/v1/")).unwrap_err().to_string().contains("scheme http"));
        assert!(
            r.allows("GET", &url("https://api.example.com:8443/v1/")).unwrap_err().to_string().contains("port 8443")
        );
        assert!(r.allows("DELETE", &url("https://a.b.dns.example/x")).is_ok());
        assert!(r.allows("GET", &url("https://dns.example/")).is_err(), "a wildcard does not cover the apex");
        assert!(r.allows("GET", &url("https://evildns.example/")).is_err());
        assert!(r.allows("PATCH", &url("http://127.0.0.1:8081/api")).is_ok());
        assert!(r.allows("GET", &url("http://127.0.0.1:8082/")).is_err());
        assert!(
            r.allows("GET", &url("http://169.254.169.254/latest/"))
                .unwrap_err()
                .to_string()
                .contains("not in spec.grants.egress")
        );
        assert!(
            r.allows("GET", &url("https://user:pw@api.example.com/v1/"))
                .unwrap_err()
                .to_string()
                .contains("credentials in the URL")
        );
        assert!(r.allows("GET", &url("ftp://api.example.com/v1/")).is_err());
        assert!(
            Rules::default()
                .allows("GET", &url("https://a.example/"))
                .unwrap_err()
                .to_string()
                .contains("grants no egress")
        );
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
            assert!(
                allowed.permits(&[grant(refused)]).unwrap_err().to_string().contains("--egress-allow"),
                "{refused}"
            );
        }
        assert!(
            allowed.permits(&[grant("*.com")]).unwrap_err().to_string().contains("wildcard"),
            "a bad grant is named too"
        );
        assert_eq!(Allowed::parse(&[]).unwrap().permits(&[grant("anything.example")]), Ok(()));
        assert_eq!(Allowed::parse(&["*".into()]).unwrap().permits(&[grant("93.184.216.34")]), Ok(()));
        assert!(
            Allowed::parse(&["*".into()]).unwrap().permits(&[grant("169.254.169.254")]).is_err(),
            "* is public hosts only: the metadata address needs an entry of its own"
        );
        assert!(Allowed::parse(&["*.".into()]).is_err());
    }

    #[test]
    fn names_should_reach_only_public_addresses() {
        let allowed = Allowed::public();
        let may_connect = |t: &Target, a: IpAddr| allowed.may_connect(t, a);
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
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let opened = Allowed::parse(&["*".into(), "127.0.0.1".into()]).unwrap();
        assert_eq!(opened.may_connect(&Target::Address(loopback), loopback), Ok(()), "where the operator opened it");
        let r = rules(&[("10.0.0.0/8", Some("http"), None, &[], None)]);
        assert!(r.allows("GET", &url("http://10.9.8.7/")).is_ok());
        assert!(r.allows("GET", &url("http://[::ffff:10.9.8.7]/")).is_ok(), "a mapped address is the IPv4 one");
    }

    /// The operator, not the tenant, opens the host's neighbourhood: with
    /// `*` (the default) a grant of loopback, the metadata address, a
    /// private or CGNAT range or the cluster's range is refused when the
    /// Reconciler is read, and a call to one by address is refused before
    /// connecting, naming the flag; an explicit entry opens exactly what it
    /// covers.
    #[test]
    fn a_tenants_grant_alone_should_never_open_a_special_address() {
        let grant = |h: &str| EgressGrant { host: h.into(), scheme: Some("http".into()), ..Default::default() };
        // A cluster whose Pods live in public address space.
        let cluster: IpNet = "11.0.0.0/16".parse().unwrap();
        let public = Allowed::parse(&["*".into()]).unwrap().with_cluster(&[cluster]);
        for special in [
            "127.0.0.1",
            "169.254.169.254",
            "10.0.0.0/8",
            "10.96.0.10",
            "100.64.1.1",
            "::1",
            "fd00::/8",
            "::ffff:127.0.0.1",
            "11.0.3.0/24",
        ] {
            let refused = public.permits(&[grant(special)]).unwrap_err().to_string();
            assert!(refused.contains("--egress-allow") && refused.contains("never"), "{special}: {refused}");
        }
        for address in ["127.0.0.1", "169.254.169.254", "10.1.2.3", "100.64.0.1", "11.0.0.7", "::ffff:10.0.0.1"] {
            let a: IpAddr = address.parse().unwrap();
            let refused = public.may_connect(&Target::Address(a), a).unwrap_err().to_string();
            assert!(refused.contains("--egress-allow"), "{address}: {refused}");
        }
        assert_eq!(public.permits(&[grant("0.0.0.0/0"), grant("api.example.com")]), Ok(()), "public space is granted");
        let public_address: IpAddr = "11.1.0.7".parse().unwrap();
        assert_eq!(public.may_connect(&Target::Address(public_address), public_address), Ok(()));
        let opened = Allowed::parse(&["*".into(), "127.0.0.1".into(), "10.96.0.0/12".into()]).unwrap();
        for ok in ["127.0.0.1", "10.96.0.10", "10.100.0.0/16"] {
            assert_eq!(opened.permits(&[grant(ok)]), Ok(()), "{ok}");
        }
        for still in ["127.0.0.2", "10.0.0.0/8", "169.254.169.254"] {
            assert!(opened.permits(&[grant(still)]).is_err(), "{still} is not what the operator named");
        }
        let a: IpAddr = "10.96.0.10".parse().unwrap();
        assert_eq!(opened.may_connect(&Target::Address(a), a), Ok(()));
        let named = opened.may_connect(&Target::Name("kubernetes.default.svc".into()), a).unwrap_err().to_string();
        assert!(named.contains("names reach only public addresses"), "{named}");
    }

    /// A path prefix is matched on the decoded path: what a server could
    /// read as another path (an encoded separator, `;` parameters, a dot
    /// segment) is refused, never matched as text.
    #[test]
    fn path_prefixes_should_match_the_decoded_path_and_refuse_ambiguous_encodings() {
        let r = rules(&[
            ("api.example.com", None, None, &[], Some("/v1/")),
            ("b.example.com", None, None, &[], Some("/v1")),
        ]);
        assert!(r.allows("GET", &url("https://api.example.com/v1/zones/a%20b")).is_ok());
        assert!(r.allows("GET", &url("https://api.example.com/v1/../admin")).is_err(), "resolved to /admin");
        assert!(r.allows("GET", &url("https://api.example.com/v1/%2e%2e/admin")).is_err());
        for ambiguous in [
            "https://api.example.com/v1/..%2Fadmin",
            "https://api.example.com/v1/..%2fadmin",
            "https://api.example.com/v1/..%5Cadmin",
            "https://api.example.com/v1/..;/admin",
            "https://api.example.com/v1;x=1/zones",
            "https://api.example.com/v1/%252e%252e/admin",
            "https://api.example.com/v1/%00",
        ] {
            let refused = r.allows("GET", &url(ambiguous)).unwrap_err().to_string();
            assert!(refused.contains("not allowed") || refused.contains("not UTF-8"), "{ambiguous}: {refused}");
        }
        assert!(r.allows("GET", &url("https://b.example.com/v1")).is_ok());
        assert!(r.allows("GET", &url("https://b.example.com/v1/x")).is_ok());
        assert!(r.allows("GET", &url("https://b.example.com/v1admin")).is_err(), "a prefix ends at a segment");
        let bad = Rules::compile(&[EgressGrant {
            host: "a.example".into(),
            path_prefix: Some("/v1/%2e%2e".into()),
            ..Default::default()
        }]);
        assert!(bad.is_err(), "a prefix must be a plain path");
    }

    /// A refusal says what to write: a complete grant, scheme included,
    /// and the grant a typo most likely meant.
    #[test]
    fn a_refusal_should_suggest_a_complete_grant_and_point_at_a_near_miss() {
        let none = Rules::default().allows("GET", &url("http://127.0.0.1:8081/x")).unwrap_err().to_string();
        assert!(none.contains("add {scheme: http, host: 127.0.0.1, port: 8081} to spec.grants.egress"), "{none}");
        let r =
            rules(&[("127.0.0.11", Some("http"), Some(8081), &[], None), ("api.exmaple.com", None, None, &[], None)]);
        let typo = r.allows("GET", &url("http://127.0.0.1:8081/x")).unwrap_err().to_string();
        assert!(typo.contains("did you mean grant 0 (127.0.0.11)"), "{typo}");
        let typo = r.allows("GET", &url("https://api.example.com/x")).unwrap_err().to_string();
        assert!(typo.contains("did you mean grant 1 (api.exmaple.com)"), "{typo}");
        let far = r.allows("GET", &url("https://elsewhere.org/x")).unwrap_err().to_string();
        assert!(
            far.contains("add {scheme: https, host: elsewhere.org, port: 443}") && !far.contains("did you mean"),
            "{far}"
        );
    }
}
