//! Where and when a connection goes after its socket closed: sans-IO, so
//! the policy is tested without sockets or clocks.
//!
//! Three reasons to move: a `sys.redirect` (go to the named gateway), a
//! planned move to the connection's next player (same gateway), and a
//! connection that closed under it (`--reconnect`: the same gateway again,
//! after a backoff). A failed attempt waits a bounded, jittered,
//! exponential backoff and tries the next address in the rotation: the
//! preferred one first, then every other `--addr` in order, so a gateway
//! that stays down is not the only one tried.

use std::net::{SocketAddr, ToSocketAddrs};

use rand::RngExt;

/// The first backoff, before jitter.
pub const BACKOFF_MIN_NS: u64 = 10_000_000;

/// The largest backoff, before jitter.
pub const BACKOFF_MAX_NS: u64 = 1_000_000_000;

/// Failed attempts of one move before the connection is given up: with
/// the backoff capped at 1 s, about a minute of trying.
pub const ATTEMPTS_MAX: u32 = 64;

/// What the runner must do for a connection that is down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Connect to this address now.
    Connect(SocketAddr),
    /// Connect to this address at `due_ns`.
    Wait { due_ns: u64, addr: SocketAddr },
    /// Leave it closed for the rest of the run: it is lost.
    GiveUp,
}

/// One connection's moves.
#[derive(Clone, Debug)]
pub struct Mover {
    /// Where the open (or last) socket went.
    current: SocketAddr,
    /// Where the next attempt goes first.
    preferred: SocketAddr,
    /// Failed attempts of the move under way.
    failures: u32,
    /// Set from a `sys.redirect` (or a planned switch) until the move ends:
    /// the close that follows is expected, not a loss.
    planned: bool,
}

impl Mover {
    pub fn new(addr: SocketAddr) -> Mover {
        Mover {
            current: addr,
            preferred: addr,
            failures: 0,
            planned: false,
        }
    }

    #[cfg(test)]
    pub fn current(&self) -> SocketAddr {
        self.current
    }

    /// Whether the next close is part of a move the runner asked for.
    pub fn planned(&self) -> bool {
        self.planned
    }

    /// A `sys.redirect` named `target` (`host:port`, may be empty): go
    /// there; when it is empty or does not resolve, to the next `--addr`
    /// after the current one (the current one if it is the only one).
    pub fn on_redirect(&mut self, target: &str, addrs: &[SocketAddr]) {
        self.preferred = resolve(target).unwrap_or_else(|| next_after(addrs, self.current));
        self.planned = true;
    }

    /// A planned move to the next player: same gateway.
    pub fn on_switch(&mut self) {
        self.preferred = self.current;
        self.planned = true;
    }

    /// The socket is gone. A planned move connects at once; an unplanned
    /// close reconnects after a backoff when `reconnect` allows it.
    pub fn on_down(&mut self, reconnect: bool, now_ns: u64, rng: &mut impl RngExt) -> Step {
        self.failures = 0;
        if self.planned {
            return Step::Connect(self.preferred);
        }
        if !reconnect {
            return Step::GiveUp;
        }
        self.preferred = self.current;
        Step::Wait {
            due_ns: now_ns + backoff_ns(0, rng),
            addr: self.preferred,
        }
    }

    /// An attempt failed: wait, then try the next address of the rotation;
    /// give up without `reconnect` (a redirect gets one attempt) or after
    /// `ATTEMPTS_MAX` failures.
    pub fn on_connect_failed(
        &mut self,
        reconnect: bool,
        addrs: &[SocketAddr],
        now_ns: u64,
        rng: &mut impl RngExt,
    ) -> Step {
        self.failures += 1;
        if !reconnect || self.failures >= ATTEMPTS_MAX {
            return Step::GiveUp;
        }
        Step::Wait {
            due_ns: now_ns + backoff_ns(self.failures, rng),
            addr: rotation(addrs, self.preferred, self.failures),
        }
    }

    /// Connected to `addr`: the move is over.
    pub fn on_connected(&mut self, addr: SocketAddr) {
        self.current = addr;
        self.preferred = addr;
        self.failures = 0;
        self.planned = false;
    }
}

/// The delay before attempt `failures + 1`: `BACKOFF_MIN_NS` doubled per
/// failure, capped at `BACKOFF_MAX_NS`, then drawn uniformly from its upper
/// half so connections that failed together do not retry together.
pub fn backoff_ns(failures: u32, rng: &mut impl RngExt) -> u64 {
    let ceiling = BACKOFF_MIN_NS
        .checked_shl(failures.min(32))
        .unwrap_or(BACKOFF_MAX_NS)
        .min(BACKOFF_MAX_NS);
    rng.random_range(ceiling / 2..=ceiling)
}

/// Attempt `k` of a move goes to `preferred` for k = 0, then cycles
/// through `preferred` and every other configured address.
fn rotation(addrs: &[SocketAddr], preferred: SocketAddr, attempt: u32) -> SocketAddr {
    let others: Vec<SocketAddr> = addrs.iter().copied().filter(|a| *a != preferred).collect();
    let k = attempt as usize % (others.len() + 1);
    if k == 0 {
        preferred
    } else {
        others[k - 1]
    }
}

fn next_after(addrs: &[SocketAddr], current: SocketAddr) -> SocketAddr {
    match addrs.iter().position(|a| *a == current) {
        Some(i) => addrs[(i + 1) % addrs.len()],
        None => addrs.first().copied().unwrap_or(current),
    }
}

/// `host:port` as an address: an IP literal at once, a name through the
/// system resolver (a redirect is rare, so a blocking lookup is paid once
/// per move, not per request).
fn resolve(target: &str) -> Option<SocketAddr> {
    let target = target.trim();
    if target.is_empty() {
        return None;
    }
    if let Ok(addr) = target.parse() {
        return Some(addr);
    }
    target.to_socket_addrs().ok()?.next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn backoff_grows_is_jittered_and_bounded() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut previous_ceiling = 0;
        for failures in 0..80 {
            let draws: Vec<u64> = (0..200).map(|_| backoff_ns(failures, &mut rng)).collect();
            let ceiling = (BACKOFF_MIN_NS << failures.min(20)).min(BACKOFF_MAX_NS);
            assert!(draws.iter().all(|d| (ceiling / 2..=ceiling).contains(d)));
            assert!(draws.iter().any(|d| *d != draws[0]), "jittered");
            assert!(ceiling >= previous_ceiling);
            previous_ceiling = ceiling;
        }
        assert_eq!(previous_ceiling, BACKOFF_MAX_NS);
    }

    #[test]
    fn a_redirect_goes_to_the_named_gateway_at_once() {
        let mut rng = SmallRng::seed_from_u64(1);
        let addrs = [addr(1), addr(2)];
        let mut mover = Mover::new(addr(1));
        mover.on_redirect("127.0.0.1:9", &addrs);
        assert!(mover.planned());
        // Followed even without --reconnect.
        assert_eq!(mover.on_down(false, 0, &mut rng), Step::Connect(addr(9)));
        mover.on_connected(addr(9));
        assert_eq!(mover.current(), addr(9));
        assert!(!mover.planned());
    }

    #[test]
    fn an_empty_or_bad_target_goes_to_another_addr() {
        let mut rng = SmallRng::seed_from_u64(1);
        let addrs = [addr(1), addr(2), addr(3)];
        for target in ["", "  ", "no port here"] {
            let mut mover = Mover::new(addr(2));
            mover.on_redirect(target, &addrs);
            assert_eq!(mover.on_down(false, 0, &mut rng), Step::Connect(addr(3)));
        }
        let mut last = Mover::new(addr(3));
        last.on_redirect("", &addrs);
        assert_eq!(last.on_down(false, 0, &mut rng), Step::Connect(addr(1)));
        let mut alone = Mover::new(addr(1));
        alone.on_redirect("", &[addr(1)]);
        assert_eq!(alone.on_down(false, 0, &mut rng), Step::Connect(addr(1)));
    }

    #[test]
    fn a_lost_connection_is_given_up_without_reconnect() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut mover = Mover::new(addr(1));
        assert_eq!(mover.on_down(false, 0, &mut rng), Step::GiveUp);
        // A failed redirect gets its one attempt only.
        mover.on_redirect("127.0.0.1:2", &[addr(1)]);
        assert_eq!(mover.on_down(false, 0, &mut rng), Step::Connect(addr(2)));
        assert_eq!(
            mover.on_connect_failed(false, &[addr(1)], 0, &mut rng),
            Step::GiveUp
        );
    }

    #[test]
    fn reconnects_back_off_rotate_and_give_up_at_the_bound() {
        let mut rng = SmallRng::seed_from_u64(1);
        let addrs = [addr(1), addr(2), addr(3)];
        let mut mover = Mover::new(addr(2));
        let Step::Wait {
            due_ns,
            addr: first,
        } = mover.on_down(true, 1_000, &mut rng)
        else {
            panic!("a reconnect waits a backoff");
        };
        assert_eq!(first, addr(2), "the same gateway first");
        assert!((1_000 + BACKOFF_MIN_NS / 2..=1_000 + BACKOFF_MIN_NS).contains(&due_ns));
        let mut tried = Vec::new();
        let mut now = due_ns;
        for _ in 1..ATTEMPTS_MAX {
            match mover.on_connect_failed(true, &addrs, now, &mut rng) {
                Step::Wait { due_ns, addr } => {
                    assert!(due_ns > now && due_ns - now <= BACKOFF_MAX_NS);
                    tried.push(addr.port());
                    now = due_ns;
                }
                other => panic!("gave up early: {other:?}"),
            }
        }
        assert_eq!(tried[..6], [1, 3, 2, 1, 3, 2]);
        assert_eq!(
            mover.on_connect_failed(true, &addrs, now, &mut rng),
            Step::GiveUp
        );
        // A success ends the move; the next loss starts counting again.
        mover.on_connected(addr(3));
        assert!(matches!(
            mover.on_down(true, now, &mut rng),
            Step::Wait { addr: next, .. } if next == addr(3)
        ));
    }
}
