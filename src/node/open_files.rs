//! The node's open-file budget. Every socket is a descriptor, and the
//! process has `ulimit -n` of them for everything: client sessions, links
//! to the other nodes, the store's connections, the admin endpoint. Left
//! to the clients, a few thousand connections that never speak took every
//! descriptor: the admin port stopped accepting, a peer's link could not
//! be accepted nor a lost one dialled again, and a store connection could
//! not be opened again after a reset, so one client could cut a node off
//! from its cluster and its operators.
//!
//! So the node raises its soft limit to the hard one at start (what the
//! operator's hard limit allows is the budget; the soft one is often a
//! leftover 1024), keeps [`kept`] descriptors for itself, and lets client
//! sessions have the rest at most: `gateway.sessions_max` is lowered to
//! fit when it would not, and the node logs both when it starts. A
//! connection past the cap is accepted and closed at once, as at
//! `sessions_max` (`routerd_gateway_sessions_refused_total`).

use std::io;

/// Descriptors kept whatever the node's size: the admin endpoint's
/// connections (64 at most, and its probes), the store's (SQLite's files,
/// a driver's connections), the admin runtime's and the log's, and the
/// files a reload or a scrape opens for a moment.
pub const KEPT_BASE: u64 = 256;

/// Descriptors kept per core: its ring and wake-ups, its four listeners
/// (gateway, TLS, WebSocket, links) and the 64 link handshakes it lets
/// wait (`cluster::incoming::HANDSHAKES_MAX`), which a flood on the
/// cluster port can fill.
pub const KEPT_PER_CORE: u64 = 80;

/// The share of the limit kept for links (one in this many descriptors).
/// Each core links to the peer cores it sends to and accepts the links of
/// theirs, up to `2 * cores * peer cores` in all (docs/capacity.md), so
/// links grow with the cluster, which a start cannot know: an eighth of
/// 20,000 is 2,500, more than the 2,048 of a 16-core node with four
/// 16-core peers.
pub const LINKS_SHARE: u64 = 8;

/// What the node keeps of `limit` descriptors for everything but client
/// sessions, with `cores` cores and `store_connections` connections to
/// its store server (a PostgreSQL pool; 0 for SQLite, whose files are in
/// [`KEPT_BASE`]).
pub fn kept(limit: u64, cores: usize, store_connections: usize) -> u64 {
    KEPT_BASE + KEPT_PER_CORE * cores as u64 + store_connections as u64 + limit / LINKS_SHARE
}

/// The node's budget: its limit, what it keeps and the sessions the
/// clients may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft open-file limit the node runs with.
    pub limit: u64,
    /// Kept for everything but client sessions ([`kept`]).
    pub kept: u64,
    /// The client sessions the node holds at most: `gateway.sessions_max`,
    /// or less to fit the limit.
    pub sessions_cap: u32,
}

/// Why a node cannot start with the limit it has.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "refusing to start: the open-file limit is {limit} (ulimit -n) and the node keeps {kept} \
     descriptors for its cores, links, store and admin endpoint, which leaves {left} for client \
     sessions (at least {SESSIONS_MIN}): raise the limit (ulimit -n, LimitNOFILE= in a systemd \
     unit, docker run --ulimit nofile=N:N)"
)]
pub struct TooFewFiles {
    pub limit: u64,
    pub kept: u64,
    pub left: u64,
}

/// The fewest client sessions worth starting a node for.
pub const SESSIONS_MIN: u64 = 64;

impl OpenFiles {
    /// The budget of a node with `limit` descriptors (see [`kept`]).
    pub fn of(
        limit: u64,
        cores: usize,
        store_connections: usize,
        sessions_max: u32,
    ) -> Result<OpenFiles, TooFewFiles> {
        let kept = kept(limit, cores, store_connections);
        let left = limit.saturating_sub(kept);
        if left < SESSIONS_MIN {
            return Err(TooFewFiles { limit, kept, left });
        }
        Ok(OpenFiles {
            limit,
            kept,
            sessions_cap: u32::try_from(left).unwrap_or(u32::MAX).min(sessions_max),
        })
    }
}

/// Raises the soft open-file limit to the hard one; returns the soft
/// limit the process has after (the one it had if it may not raise it).
pub fn raise_soft_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct it is given. Raising the soft
        // limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_get_what_the_node_does_not_keep_and_at_most_sessions_max() {
        // 20,000 on two cores over SQLite: 256 + 160 + 2,500 kept.
        let files = OpenFiles::of(20_000, 2, 0, 100_000).unwrap();
        assert_eq!(files.kept, 2_916);
        assert_eq!(files.sessions_cap, 17_084);
        // A PostgreSQL pool's connections are kept too.
        assert_eq!(OpenFiles::of(20_000, 2, 4, 100_000).unwrap().kept, 2_920);
        // A sessions_max that fits is kept as it is.
        let files = OpenFiles::of(20_000, 2, 0, 10_000).unwrap();
        assert_eq!(files.sessions_cap, 10_000);
        // A limit past u32 caps at sessions_max.
        let files = OpenFiles::of(1 << 40, 64, 0, 100_000).unwrap();
        assert_eq!(files.sessions_cap, 100_000);
    }

    #[test]
    fn a_limit_that_leaves_the_clients_too_little_refuses_the_start() {
        // 1024 on 8 cores: 256 + 640 + 128 kept, nothing left.
        let error = OpenFiles::of(1_024, 8, 0, 100_000).unwrap_err();
        assert_eq!(
            error,
            TooFewFiles {
                limit: 1_024,
                kept: 1_024,
                left: 0
            }
        );
        assert!(error.to_string().contains("ulimit -n"), "{error}");
        // The same limit on one core leaves 560.
        assert_eq!(
            OpenFiles::of(1_024, 1, 0, 100_000).unwrap().sessions_cap,
            560
        );
    }
}
