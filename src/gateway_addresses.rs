//! Where a node's gateway listeners are reached, one address per
//! transport, as its membership row advertises them (on the ground floor,
//! since the gateway reads them as well as the store).
//!
//! The row keeps them in its one `gateway` text column, so no backend's
//! schema changes and rows written before there was more than one
//! transport read as they always did: the plain listener's `host:port`
//! first, then `;transport=host:port` for each other listener a node runs
//! (`;tls=10.0.0.5:7443;ws=10.0.0.5:7480`). A node with only the plain
//! listener writes exactly the `host:port` older nodes wrote. A reader
//! ignores a transport it does not know, so a newer node's row never makes
//! an older node's view fail.

use std::fmt;

/// Whether `address` (`host:port`) is the unspecified address
/// (`0.0.0.0`, `[::]`): where a node listens on every interface, which is
/// no address to reach it at. Dialed, it reaches the dialer's own machine.
pub fn is_unspecified(address: &str) -> bool {
    address
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|address| address.ip().is_unspecified())
}

/// How a client speaks to a gateway listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// The protocol frames over plain TCP (`gateway.listen`).
    Plain,
    /// The same over TLS.
    Tls,
    /// The same in WebSocket binary messages.
    Ws,
    /// WebSocket over TLS.
    Wss,
}

impl Transport {
    /// Every transport, in the order a row lists them.
    pub const ALL: [Transport; 4] = [
        Transport::Plain,
        Transport::Tls,
        Transport::Ws,
        Transport::Wss,
    ];

    /// The key a row and `/cluster` name it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Plain => "tcp",
            Transport::Tls => "tls",
            Transport::Ws => "ws",
            Transport::Wss => "wss",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A node's gateway listeners as clients reach them: one advertised
/// `host:port` per transport it serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewayAddresses {
    by_transport: [Option<String>; 4],
}

impl GatewayAddresses {
    /// A node that serves the plain transport only, at `plain`.
    pub fn plain(plain: impl Into<String>) -> GatewayAddresses {
        let mut addresses = GatewayAddresses::default();
        addresses.set(Transport::Plain, plain);
        addresses
    }

    /// Where `transport` is served, replacing what was said before.
    pub fn set(&mut self, transport: Transport, address: impl Into<String>) {
        let address = address.into();
        self.by_transport[transport.index()] = (!address.is_empty()).then_some(address);
    }

    /// Where `transport` is served, if it is.
    pub fn get(&self, transport: Transport) -> Option<&str> {
        self.by_transport[transport.index()].as_deref()
    }

    /// Whether no transport is advertised (a row without addresses).
    pub fn is_empty(&self) -> bool {
        self.by_transport.iter().all(Option::is_none)
    }

    /// Each advertised transport and its address, in row order.
    pub fn iter(&self) -> impl Iterator<Item = (Transport, &str)> {
        Transport::ALL
            .into_iter()
            .filter_map(|transport| Some((transport, self.get(transport)?)))
    }

    /// The advertised transports whose address is unspecified (see
    /// [`is_unspecified`]), taken out: where no client could be sent.
    pub fn take_unspecified(&mut self) -> Vec<(Transport, String)> {
        let mut taken = Vec::new();
        for transport in Transport::ALL {
            let slot = &mut self.by_transport[transport.index()];
            if slot.as_deref().is_some_and(is_unspecified) {
                taken.extend(slot.take().map(|address| (transport, address)));
            }
        }
        taken
    }

    /// The text of a membership row's `gateway` column.
    pub fn encode(&self) -> String {
        self.to_string()
    }

    /// Reads a row's `gateway` column: tolerant of rows written before
    /// there were transports (a bare `host:port`) and of transports this
    /// version does not know (skipped).
    pub fn decode(text: &str) -> GatewayAddresses {
        let mut addresses = GatewayAddresses::default();
        let mut parts = text.split(';');
        if let Some(plain) = parts.next() {
            addresses.set(Transport::Plain, plain.trim());
        }
        for part in parts {
            let Some((key, address)) = part.split_once('=') else {
                continue;
            };
            let known = Transport::ALL.into_iter().find(|transport| {
                transport.as_str() == key.trim() && *transport != Transport::Plain
            });
            if let Some(transport) = known {
                addresses.set(transport, address.trim());
            }
        }
        addresses
    }
}

impl fmt::Display for GatewayAddresses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get(Transport::Plain).unwrap_or_default())?;
        for (transport, address) in self.iter() {
            if transport != Transport::Plain {
                write!(f, ";{}={address}", transport.as_str())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_only_row_is_the_old_bare_address() {
        let plain = GatewayAddresses::plain("10.0.0.5:7400");
        assert_eq!(plain.encode(), "10.0.0.5:7400");
        assert_eq!(GatewayAddresses::decode("10.0.0.5:7400"), plain);
        assert_eq!(GatewayAddresses::decode(""), GatewayAddresses::default());
        assert!(GatewayAddresses::decode("").is_empty());
    }

    #[test]
    fn every_transport_round_trips_and_unknown_ones_are_skipped() {
        let mut all = GatewayAddresses::plain("10.0.0.5:7400");
        all.set(Transport::Tls, "10.0.0.5:7443");
        all.set(Transport::Wss, "game.example:443");
        let text = all.encode();
        assert_eq!(text, "10.0.0.5:7400;tls=10.0.0.5:7443;wss=game.example:443");
        assert_eq!(GatewayAddresses::decode(&text), all);
        assert_eq!(all.get(Transport::Ws), None);
        let newer = GatewayAddresses::decode("10.0.0.5:7400;quic=10.0.0.5:7444;ws=h:80;junk");
        assert_eq!(newer.get(Transport::Plain), Some("10.0.0.5:7400"));
        assert_eq!(newer.get(Transport::Ws), Some("h:80"));
        assert_eq!(newer.iter().count(), 2);
        // A node without the plain listener.
        let tls_only = GatewayAddresses::decode(";tls=h:7443");
        assert_eq!(tls_only.get(Transport::Plain), None);
        assert_eq!(tls_only.encode(), ";tls=h:7443");
    }
}
