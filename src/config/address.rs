//! Listen and advertise addresses: an IP address and port, or a host name
//! and port (`localhost:7400`) resolved once, when the config is read.

use std::net::{SocketAddr, ToSocketAddrs};

use serde::{Deserialize, Deserializer};

/// `text` as a socket address: parsed when it is `IP:PORT`, else resolved
/// as `HOST:PORT`, taking its first IPv4 address (else its first), so
/// `localhost` binds where clients that dial `127.0.0.1` look.
pub fn resolve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let resolved: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|error| {
            format!("{text:?} is neither IP:PORT nor a host name and port that resolves: {error}")
        })?
        .collect();
    resolved
        .iter()
        .find(|address| address.is_ipv4())
        .or_else(|| resolved.first())
        .copied()
        .ok_or_else(|| format!("host name {text:?} resolves to no address"))
}

/// serde's reader of one address (`deserialize_with`).
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    resolve(&text).map_err(serde::de::Error::custom)
}

/// serde's reader of an optional address.
pub fn deserialize_option<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(text) => resolve(&text).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_parse_and_host_names_resolve() {
        assert_eq!(
            resolve("127.0.0.1:7400"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 7400)))
        );
        assert_eq!(resolve("[::1]:7400").map(|a| a.is_ipv6()), Ok(true));
        // localhost is in every resolver's hosts file, so the test needs no DNS.
        let local = resolve("localhost:7400").expect("localhost resolves");
        assert!(local.ip().is_loopback(), "{local}");
        assert_eq!(local.port(), 7400);
        let error = resolve("localhost").unwrap_err();
        assert!(error.contains("\"localhost\""), "{error}");
        assert!(resolve("no such host.invalid:1").is_err());
    }
}
