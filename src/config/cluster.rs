//! `[cluster]`: where a node's cores listen for links, who may link, and
//! the membership timers, with the rule that makes them safe.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// The cluster secret a fresh checkout uses, so that nodes started without
/// a config can form a local cluster. Refused off loopback.
pub const DEVELOPMENT_CLUSTER_SECRET: &str = "routerd-development-cluster-secret";

/// The environment variable that wins over `cluster.secret`.
pub const CLUSTER_SECRET_ENV: &str = "ROUTERD_CLUSTER_SECRET";

/// `[cluster]`: membership timers, the links between nodes, and their
/// bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Core `i` listens for links on this address's port + `i`; port 0:
    /// each core binds a free port and advertises it. A host name is
    /// resolved when the config is read.
    #[serde(deserialize_with = "super::address::deserialize")]
    pub listen: SocketAddr,
    /// The address other nodes dial (core `i`: its port + `i`, or the port
    /// each core bound when `listen` has port 0); default: `listen`.
    /// Required when `listen` is unspecified (`0.0.0.0`, `::`): a node
    /// never advertises such an address.
    #[serde(default, deserialize_with = "super::address::deserialize_option")]
    pub advertise: Option<SocketAddr>,
    /// The cluster's name: a link from a node of another cluster is refused.
    pub name: String,
    /// HMAC-SHA256 key of the link handshake. `ROUTERD_CLUSTER_SECRET` wins.
    pub secret: Secret,
    /// How often a node writes its heartbeat into the membership table.
    pub heartbeat_interval_ms: u64,
    /// A node whose heartbeat writes have not succeeded for this long
    /// (its own clock, from the send of the last applied one) stops
    /// serving: its lease ended.
    pub fence_after_ms: u64,
    /// Another node that sees a member's heartbeat unchanged for this long
    /// (its own clock) declares it down.
    pub down_after_ms: u64,
    /// How long the row of a node that left stays in the membership table
    /// (the lowest live node's clock, from its first read of it so) before
    /// it is deleted; a tombstone of its last incarnation and version stays.
    pub left_retention_ms: u64,
    /// Frames one link queues before a send to it fails.
    pub link_queue_max: usize,
    /// Transfers in flight at once while the node drains, over the node
    /// (split between its cores, at least one each).
    pub drain_concurrency: usize,
    /// How long a draining node keeps answering a session after it told it
    /// to move (`sys.redirect`), before it closes it.
    pub redirect_grace_ms: u64,
    /// How long a drain may take before the node stops anyway: what is
    /// left is saved and released as at any stop.
    pub drain_timeout_ms: u64,
    /// Transfers a rebalance (`POST /rebalance`) keeps in flight at once
    /// on this node, over all its cores: the rate at which it moves
    /// objects to their rendezvous node.
    pub rebalance_concurrency: usize,
    /// When another member comes up, this node rebalances its own objects
    /// by itself, as `POST /rebalance?scope=node` would.
    pub rebalance_on_join: bool,
}

/// The most transfers `rebalance_concurrency` may keep in flight: a core
/// waits for at most `TRANSFER_WAITERS_MAX` (1024) operators' transfers.
pub const REBALANCE_CONCURRENCY_MAX: usize = 1024;

/// The longest `redirect_grace_ms`: it travels as a `u32` in
/// `sys.redirect`, and a client should not wait longer than this to move.
pub const REDIRECT_GRACE_MS_MAX: u64 = 600_000;

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7600)),
            advertise: None,
            name: "routerd".to_string(),
            secret: Secret::new(DEVELOPMENT_CLUSTER_SECRET),
            heartbeat_interval_ms: 500,
            fence_after_ms: 2000,
            down_after_ms: 4000,
            left_retention_ms: 600_000,
            link_queue_max: 4096,
            drain_concurrency: 16,
            redirect_grace_ms: 5000,
            drain_timeout_ms: 60_000,
            rebalance_concurrency: 8,
            rebalance_on_join: false,
        }
    }
}

/// Cluster names go into handshakes and logs: short and printable.
pub const CLUSTER_NAME_LEN_MAX: usize = 64;

impl ClusterConfig {
    /// How long one heartbeat write may take before it counts as failed:
    /// inside the interval, so at most one is in flight and "the last
    /// applied heartbeat" is never in doubt at its writer.
    pub fn heartbeat_deadline_ms(&self) -> u64 {
        (self.heartbeat_interval_ms * 3 / 4).max(1)
    }

    /// The timing rule, checked at start:
    ///
    /// `heartbeat_interval_ms < fence_after_ms` and
    /// `down_after_ms >= fence_after_ms + 2 * heartbeat_interval_ms`.
    ///
    /// Why it is safe. Let `s` be the time a node N sent the last heartbeat
    /// the store applied and answered. N's lease ends at `s +
    /// fence_after_ms` on N's monotonic clock, and from then on N serves
    /// nothing. An observer O declares N down only after reading N's row
    /// unchanged for `down_after_ms` of O's monotonic clock, counted from
    /// O's first read of that row, which returned after the write was
    /// applied, so after `s`: the declaration comes at `s +
    /// down_after_ms` or later, `2 * heartbeat_interval_ms` after N
    /// stopped. That margin covers what the two clocks cannot agree on
    /// (their rates differ by parts per million), and the time a busy core
    /// of N takes to look at its lease again (it checks it at every event,
    /// so at most a loop turn). O's poll period only makes the declaration
    /// later. A heartbeat write whose answer N never got extends nothing,
    /// which only makes N stop earlier. The first condition lets N write at
    /// least one heartbeat per lease. With the defaults (500, 2000, 4000)
    /// the margin is 2000 ms. N and O may run different configs: each
    /// row carries its node's timers, and O waits the longer of its
    /// `down_after_ms` and N's `fence_after_ms` plus the margin
    /// (`cluster::membership::down_wait_ms`).
    pub fn check_timing(&self) -> Result<(), String> {
        if self.heartbeat_interval_ms == 0 {
            return Err("cluster.heartbeat_interval_ms must be positive".into());
        }
        if self.heartbeat_interval_ms >= self.fence_after_ms {
            return Err(format!(
                "cluster.heartbeat_interval_ms ({}) must be below cluster.fence_after_ms ({}): a \
                 node must renew its lease at least once before it ends",
                self.heartbeat_interval_ms, self.fence_after_ms
            ));
        }
        let needed = self.fence_after_ms + 2 * self.heartbeat_interval_ms;
        if self.down_after_ms < needed {
            return Err(format!(
                "cluster.down_after_ms ({}) must be at least cluster.fence_after_ms + 2 x \
                 cluster.heartbeat_interval_ms ({needed}): a node must have stopped serving \
                 before another may declare it down",
                self.down_after_ms
            ));
        }
        if self.name.is_empty()
            || self.name.len() > CLUSTER_NAME_LEN_MAX
            || !self.name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(format!(
                "cluster.name must be 1 to {CLUSTER_NAME_LEN_MAX} printable ASCII characters"
            ));
        }
        if self.link_queue_max == 0 {
            return Err("cluster.link_queue_max must be positive".into());
        }
        if self.left_retention_ms < self.down_after_ms {
            return Err(format!(
                "cluster.left_retention_ms ({}) must be at least cluster.down_after_ms ({}): \
                 every live node lists a row's last change well within it",
                self.left_retention_ms, self.down_after_ms
            ));
        }
        self.check_drain()
    }

    /// The drain's keys: a positive concurrency, a grace that fits the
    /// redirect's `u32`, and a timeout that leaves the grace room.
    fn check_drain(&self) -> Result<(), String> {
        if self.drain_concurrency == 0 {
            return Err("cluster.drain_concurrency must be positive".into());
        }
        if self.rebalance_concurrency == 0 || self.rebalance_concurrency > REBALANCE_CONCURRENCY_MAX
        {
            return Err(format!(
                "cluster.rebalance_concurrency ({}) must be 1 to {REBALANCE_CONCURRENCY_MAX}",
                self.rebalance_concurrency
            ));
        }
        if self.redirect_grace_ms > REDIRECT_GRACE_MS_MAX {
            return Err(format!(
                "cluster.redirect_grace_ms ({}) must be at most {REDIRECT_GRACE_MS_MAX}",
                self.redirect_grace_ms
            ));
        }
        if self.drain_timeout_ms <= self.redirect_grace_ms {
            return Err(format!(
                "cluster.drain_timeout_ms ({}) must be above cluster.redirect_grace_ms ({}): \
                 sessions are closed only after their grace",
                self.drain_timeout_ms, self.redirect_grace_ms
            ));
        }
        Ok(())
    }

    /// The address others dial for core `core`, given the port it bound.
    pub fn advertised(&self, core: usize, bound_port: u16) -> SocketAddr {
        let mut address = self.advertise.unwrap_or(self.listen);
        if address.port() == 0 || self.listen.port() == 0 {
            address.set_port(bound_port);
        } else {
            address.set_port(address.port().saturating_add(core as u16));
        }
        address
    }

    /// The address core `core` binds.
    pub fn listen_for(&self, core: usize) -> SocketAddr {
        let mut address = self.listen;
        if address.port() != 0 {
            address.set_port(address.port().saturating_add(core as u16));
        }
        address
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_keep_the_timing_rule() {
        ClusterConfig::default().check_timing().unwrap();
        let config = ClusterConfig::default();
        assert!(config.heartbeat_deadline_ms() < config.heartbeat_interval_ms);
    }

    #[test]
    fn the_timing_rule_refuses_what_could_overlap() {
        let mut config = ClusterConfig {
            down_after_ms: 2999,
            ..ClusterConfig::default()
        };
        let error = config.check_timing().unwrap_err();
        assert!(error.contains("cluster.down_after_ms"), "{error}");
        config.down_after_ms = 3000;
        config.check_timing().unwrap();
        config.heartbeat_interval_ms = 2000;
        assert!(config.check_timing().unwrap_err().contains("heartbeat"));
        config = ClusterConfig {
            name: "two words".into(),
            ..ClusterConfig::default()
        };
        assert!(config.check_timing().unwrap_err().contains("cluster.name"));
    }

    #[test]
    fn the_left_retention_is_at_least_down_after() {
        let config = ClusterConfig::default();
        let at_limit = ClusterConfig {
            left_retention_ms: config.down_after_ms,
            ..config.clone()
        };
        at_limit.check_timing().unwrap();
        let below = ClusterConfig {
            left_retention_ms: config.down_after_ms - 1,
            ..config
        };
        assert!(below
            .check_timing()
            .unwrap_err()
            .contains("cluster.left_retention_ms"));
    }

    #[test]
    fn the_drain_keys_are_bounded() {
        let zero = ClusterConfig {
            drain_concurrency: 0,
            ..ClusterConfig::default()
        };
        assert!(zero
            .check_timing()
            .unwrap_err()
            .contains("cluster.drain_concurrency"));
        let long = ClusterConfig {
            redirect_grace_ms: REDIRECT_GRACE_MS_MAX + 1,
            drain_timeout_ms: u64::MAX,
            ..ClusterConfig::default()
        };
        assert!(long
            .check_timing()
            .unwrap_err()
            .contains("cluster.redirect_grace_ms"));
        for concurrency in [0, REBALANCE_CONCURRENCY_MAX + 1] {
            let config = ClusterConfig {
                rebalance_concurrency: concurrency,
                ..ClusterConfig::default()
            };
            assert!(config
                .check_timing()
                .unwrap_err()
                .contains("cluster.rebalance_concurrency"));
        }
        let at_the_bound = ClusterConfig {
            rebalance_concurrency: REBALANCE_CONCURRENCY_MAX,
            ..ClusterConfig::default()
        };
        at_the_bound.check_timing().unwrap();
        let short = ClusterConfig {
            drain_timeout_ms: 5000,
            ..ClusterConfig::default()
        };
        assert!(short
            .check_timing()
            .unwrap_err()
            .contains("cluster.drain_timeout_ms"));
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn core_addresses_follow_the_port_or_what_was_bound() {
        let config = ClusterConfig {
            listen: "0.0.0.0:7600".parse().unwrap(),
            advertise: Some("10.0.0.5:7600".parse().unwrap()),
            ..ClusterConfig::default()
        };
        assert_eq!(config.listen_for(2), addr("0.0.0.0:7602"));
        assert_eq!(config.advertised(2, 7602), addr("10.0.0.5:7602"));
        let any = ClusterConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..ClusterConfig::default()
        };
        assert_eq!(any.listen_for(1), addr("127.0.0.1:0"));
        assert_eq!(any.advertised(1, 40123), addr("127.0.0.1:40123"));
    }
}
