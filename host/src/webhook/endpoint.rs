//! Where the API server reaches this host: the `clientConfig` of the
//! webhook configurations.

/// A webhook endpoint that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadEndpoint {
    /// Not `NAMESPACE/NAME[:PORT]`.
    #[error("webhook service {0:?} must be NAMESPACE/NAME[:PORT]")]
    Service(String),
    /// Not a port number.
    #[error("webhook service port {0:?} is not a port number")]
    Port(String),
    /// Not `HOST[:PORT]`.
    #[error("webhook URL host {0:?} must be HOST or HOST:PORT")]
    Url(String),
}

/// Where the API server reaches this host: the webhook configurations'
/// `clientConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url = https://HOST:PORT/<hook>/<plugin>`: for an API
    /// server that reaches the host directly (development, envtest: `127.0.0.1`).
    /// `port` defaults to the port the server bound.
    Url {
        /// Host name or IP address.
        host: String,
        /// Port, if not the bound one (behind a port forward).
        port: Option<u16>,
    },
    /// `clientConfig.service`: a Service in front of the host's pods (in a cluster).
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The Service's port (443 usually), which targets the bind port.
        port: u16,
    },
}

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint::Url { host: "127.0.0.1".into(), port: None }
    }
}

impl Endpoint {
    /// Parses `NAMESPACE/NAME[:PORT]` (port 443 by default) as a Service.
    ///
    /// # Errors
    /// A description of what is wrong with `text`.
    pub fn service(text: &str) -> Result<Endpoint, BadEndpoint> {
        let bad = || BadEndpoint::Service(text.to_string());
        let (namespace, rest) = text.split_once('/').ok_or_else(bad)?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => (name, port.parse().map_err(|_| BadEndpoint::Port(port.to_string()))?),
            None => (rest, 443),
        };
        if namespace.is_empty() || name.is_empty() {
            return Err(bad());
        }
        Ok(Endpoint::Service { namespace: namespace.into(), name: name.into(), port })
    }

    /// Parses `HOST[:PORT]` (IPv6 addresses in brackets) as a URL endpoint.
    ///
    /// # Errors
    /// A description of what is wrong with `text`.
    pub fn url(text: &str) -> Result<Endpoint, BadEndpoint> {
        let bad = || BadEndpoint::Url(text.to_string());
        if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p.parse().map_err(|_| bad())?),
                None if after.is_empty() => None,
                None => return Err(bad()),
            };
            return Ok(Endpoint::Url { host: host.into(), port });
        }
        match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => {
                Ok(Endpoint::Url { host: host.into(), port: Some(port.parse().map_err(|_| bad())?) })
            }
            _ if text.is_empty() => Err(bad()),
            _ => Ok(Endpoint::Url { host: text.into(), port: None }),
        }
    }

    /// The names the serving certificate must carry for the API server to
    /// accept it.
    pub(crate) fn hosts(&self) -> Vec<String> {
        match self {
            Endpoint::Url { host, .. } => vec![host.clone()],
            Endpoint::Service { namespace, name, .. } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
                format!("{name}.{namespace}"),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_should_parse_hosts_and_services() {
        assert_eq!(Endpoint::url("127.0.0.1").unwrap(), Endpoint::Url { host: "127.0.0.1".into(), port: None });
        assert_eq!(
            Endpoint::url("localhost:9443").unwrap(),
            Endpoint::Url { host: "localhost".into(), port: Some(9443) }
        );
        assert_eq!(Endpoint::url("[::1]:8443").unwrap(), Endpoint::Url { host: "::1".into(), port: Some(8443) });
        assert_eq!(Endpoint::url("::1").unwrap(), Endpoint::Url { host: "::1".into(), port: None });
        assert!(Endpoint::url("host:port").is_err());
        assert_eq!(
            Endpoint::service("operon-system/operon-webhooks").unwrap(),
            Endpoint::Service { namespace: "operon-system".into(), name: "operon-webhooks".into(), port: 443 }
        );
        assert!(matches!(Endpoint::service("ns/name:8443").unwrap(), Endpoint::Service { port: 8443, .. }));
        assert!(Endpoint::service("name-only").is_err());
    }
}
