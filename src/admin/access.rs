//! Who may reach the admin endpoint through a browser: the `Host` a
//! request names and the `Origin` a mutating request comes from.
//!
//! - **DNS rebinding.** A page on `evil.example` whose name then resolves
//!   to 127.0.0.1 reads the answers as its own origin's; the request still
//!   says `Host: evil.example`. So a request must name a host this endpoint
//!   is: an IP address it listens on or advertises (any address when it
//!   listens on all of them), a loopback address, `localhost`, or a name in
//!   `admin.allowed_hosts`; otherwise `421`. An IP literal of this node
//!   cannot be rebound (the page's origin would be the endpoint itself).
//!   The probes (`/healthz`, `/livez`, `/readyz`) answer whatever the
//!   `Host`: load balancers send all kinds, and they tell nothing.
//! - **CSRF.** A browser sends `Origin` with every `POST`, `PUT` and
//!   `DELETE`, `no-cors` ones included (which need no preflight). A
//!   mutating request whose `Origin` is neither the endpoint's own
//!   (`http://` and the request's `Host`, when that names the endpoint
//!   itself, not only by `"*"`) nor in `admin.allowed_origins`
//!   is refused `403`. A request without `Origin` is not a browser's (the
//!   CLI, curl, a node forwarding): the token guards those.
//!
//! Pure functions of the head and the config, so both rules are tested
//! without a socket.

use std::net::IpAddr;

use hyper::header::{HeaderMap, HOST, ORIGIN};

use crate::config::AdminConfig;

/// The hosts and origins the endpoint accepts besides its own.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// The address the endpoint is bound to (its IP; any port).
    listen: Option<IpAddr>,
    /// `admin.advertise`'s IP.
    advertise: Option<IpAddr>,
    /// `admin.allowed_hosts`, lower case, without a port.
    hosts: Vec<String>,
    /// `admin.allowed_origins`, lower case, without a trailing `/`.
    origins: Vec<String>,
}

impl Access {
    /// The lists of `config` (the listen address is added once bound).
    pub fn new(config: &AdminConfig) -> Access {
        Access {
            listen: Some(config.listen.ip()),
            advertise: config.advertise.map(|address| address.ip()),
            hosts: config
                .allowed_hosts
                .iter()
                .map(|host| host_part(host.trim()).to_ascii_lowercase())
                .collect(),
            origins: config
                .allowed_origins
                .iter()
                .map(|origin| normalized_origin(origin))
                .collect(),
        }
    }

    /// The same, for an endpoint bound to `listen`.
    pub(super) fn bound_to(mut self, listen: IpAddr) -> Access {
        self.listen = Some(listen);
        self
    }

    /// Whether `headers` name a host this endpoint is (a request without
    /// `Host` is no browser's and passes); `Err` says why not (`421`).
    pub(super) fn check_host(&self, headers: &HeaderMap) -> Result<(), String> {
        let Some(value) = headers.get(HOST) else {
            return Ok(());
        };
        let Ok(value) = value.to_str() else {
            return Err("the Host header is not text".to_string());
        };
        if self.is_own_host(value) || self.hosts.iter().any(|name| name == "*") {
            return Ok(());
        }
        Err(format!(
            "Host {value:?} is not an address of this endpoint: add the name to admin.allowed_hosts"
        ))
    }

    /// Whether `host` (a `Host` header's value) names this endpoint: an
    /// address it listens on or advertises, loopback, `localhost`, or a
    /// name `admin.allowed_hosts` lists. Not by `"*"`: that lets any name
    /// reach the endpoint, and a rebound name is no more its own for it.
    fn is_own_host(&self, host: &str) -> bool {
        let host = host_part(host.trim());
        let lower = host.to_ascii_lowercase();
        let own = match host.parse::<IpAddr>() {
            Ok(ip) => {
                ip.is_loopback()
                    || self
                        .listen
                        .is_some_and(|listen| listen == ip || listen.is_unspecified())
                    || self.advertise == Some(ip)
            }
            Err(_) => lower.trim_end_matches('.') == "localhost",
        };
        own || self.hosts.contains(&lower)
    }

    /// Whether a mutating request with `headers` comes from an origin
    /// allowed to make it; `Err` says why not (`403`).
    pub(super) fn check_origin(&self, headers: &HeaderMap) -> Result<(), String> {
        let Some(origin) = headers.get(ORIGIN) else {
            return Ok(());
        };
        let origin = normalized_origin(origin.to_str().unwrap_or("null"));
        // The endpoint's own pages: `http://` and the Host, if that names
        // this endpoint (with `allowed_hosts = ["*"]` any Host passes, and
        // a page on a rebound name would otherwise count as its own).
        let own = headers
            .get(HOST)
            .and_then(|host| host.to_str().ok())
            .filter(|host| self.is_own_host(host))
            .map(|host| format!("http://{}", host.trim().to_ascii_lowercase()));
        if own.as_deref() == Some(origin.as_str())
            || self
                .origins
                .iter()
                .any(|allowed| allowed == "*" || *allowed == origin)
        {
            return Ok(());
        }
        Err(format!(
            "a call from origin {origin:?} is refused: only the endpoint's own pages (and \
             admin.allowed_origins) may change things"
        ))
    }
}

/// `host` of `host:port`, `[::1]` of `[::1]:port` without its brackets.
fn host_part(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match value.split_once(':') {
        Some((host, _port)) => host,
        None => value,
    }
}

fn normalized_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn head(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn access_on(listen: &str) -> Access {
        let config = AdminConfig {
            listen: listen.parse().unwrap(),
            advertise: Some("10.0.0.7:9464".parse().unwrap()),
            allowed_hosts: vec!["ops.example.com".to_string()],
            allowed_origins: vec!["https://console.example.com/".to_string()],
            ..AdminConfig::default()
        };
        Access::new(&config)
    }

    #[test]
    fn a_host_must_be_an_address_of_the_endpoint_loopback_or_allowed() {
        let access = access_on("10.0.0.5:9464");
        for good in [
            "10.0.0.5:9464",
            "10.0.0.5",
            "10.0.0.7:80",
            "127.0.0.1:9464",
            "127.3.4.5",
            "[::1]:9464",
            "localhost:9464",
            "LocalHost",
            "ops.example.com:9464",
            "OPS.example.com",
        ] {
            assert_eq!(
                access.check_host(&head(&[("host", good)])),
                Ok(()),
                "{good}"
            );
        }
        assert_eq!(access.check_host(&HeaderMap::new()), Ok(()));
        for bad in [
            "evil.example",
            "evil.example:9464",
            "10.0.0.6:9464",
            "x",
            "[::2]",
        ] {
            assert!(access.check_host(&head(&[("host", bad)])).is_err(), "{bad}");
        }
        // Listening on every address: any IP literal is one of its own.
        let any = access_on("0.0.0.0:9464");
        assert_eq!(
            any.check_host(&head(&[("host", "192.168.1.9:9464")])),
            Ok(())
        );
        assert!(any.check_host(&head(&[("host", "evil.example")])).is_err());
        let star = AdminConfig {
            allowed_hosts: vec!["*".to_string()],
            ..AdminConfig::default()
        };
        assert_eq!(
            Access::new(&star).check_host(&head(&[("host", "evil.example")])),
            Ok(())
        );
    }

    #[test]
    fn a_mutating_origin_must_be_the_endpoints_own_or_allowed() {
        let access = access_on("127.0.0.1:9464");
        let own = [
            ("host", "127.0.0.1:9464"),
            ("origin", "http://127.0.0.1:9464"),
        ];
        assert_eq!(access.check_origin(&head(&own)), Ok(()));
        assert_eq!(
            access.check_origin(&head(&[("host", "127.0.0.1:9464")])),
            Ok(())
        );
        let allowed = [
            ("host", "127.0.0.1:9464"),
            ("origin", "https://console.example.com"),
        ];
        assert_eq!(access.check_origin(&head(&allowed)), Ok(()));
        for bad in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:9465",
            "https://127.0.0.1:9464",
        ] {
            let headers = head(&[("host", "127.0.0.1:9464"), ("origin", bad)]);
            assert!(access.check_origin(&headers).is_err(), "{bad}");
        }
        // No Host to compare with: only the list.
        assert!(access
            .check_origin(&head(&[("origin", "http://127.0.0.1:9464")]))
            .is_err());
        // Any Host passes with "*", but a rebound name's page is not the
        // endpoint's own.
        let star = Access::new(&AdminConfig {
            allowed_hosts: vec!["*".to_string()],
            ..AdminConfig::default()
        });
        let rebound = [
            ("host", "evil.example:9464"),
            ("origin", "http://evil.example:9464"),
        ];
        assert_eq!(star.check_host(&head(&rebound)), Ok(()));
        assert!(star.check_origin(&head(&rebound)).is_err());
        let own = [
            ("host", "localhost:9464"),
            ("origin", "http://localhost:9464"),
        ];
        assert_eq!(star.check_origin(&head(&own)), Ok(()));
    }
}
