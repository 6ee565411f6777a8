//! The faults that take more than a signal: operators' admin calls made
//! during another fault (transfers, a drain, a node joining and a
//! rebalance), and a freeze inside a busy loop turn.

use std::time::{Duration, Instant};

use super::client::{Burst, Op};
use super::cluster::Cluster;
use super::faults::{ms, Call, Fault, BURST_REQUESTS};
use super::observe::{http_get, http_post};
use super::procs::{ADMIN_TOKEN, DRAIN_TIMEOUT_MS, REQUEST_TIMEOUT_MS};

/// How long a drained node may take to move its objects and exit: its
/// `drain_timeout_ms`, then its shutdown.
const DRAIN_LIMIT: Duration = Duration::from_millis(DRAIN_TIMEOUT_MS + 10_000);

/// Players a burst writes to at once.
const BURST_PLAYERS_MAX: usize = 2;

/// The first session number of a burst's sessions (the clients' own are
/// below).
const BURST_SESSION_BASE: usize = 100;

/// Makes `call` to the admin addresses of `admins`: one note per answer.
fn make_call(call: &Call, admins: &[std::net::SocketAddr]) -> Vec<String> {
    let post = |slot: usize, path: &str| {
        let answer = match http_post(admins[slot], path, ADMIN_TOKEN) {
            Some((status, body)) => format!("{status} {body}"),
            None => "no answer".into(),
        };
        format!("POST {path} to node {}: {answer}", slot + 1)
    };
    match call {
        Call::Transfer { players, to, via } => players
            .iter()
            .map(|player| {
                post(
                    *via,
                    &format!("/objects/player/{player}/transfer?to={}", to + 1),
                )
            })
            .collect(),
        Call::Drain { slot } => vec![post(*slot, "/drain")],
        Call::JoinRebalance { via } => vec![post(*via, "/rebalance")],
    }
}

impl Cluster {
    /// `call` made `after_ms` into `during`; a drained node is started
    /// again once it exits.
    pub(super) fn operator(
        &mut self,
        call: &Call,
        after_ms: u64,
        during: &Fault,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        if let Call::JoinRebalance { .. } = call {
            self.join(notes)?;
        }
        let admins = self.admins.read().unwrap().clone();
        let asked = call.clone();
        let caller = std::thread::spawn(move || {
            std::thread::sleep(ms(after_ms));
            make_call(&asked, &admins)
        });
        let inner = self.inject(during);
        notes.extend(caller.join().unwrap_or_default());
        let inner = inner?;
        notes.extend(inner.notes);
        if let Call::Drain { slot } = *call {
            self.restart_drained(slot, notes)?;
        }
        Ok(())
    }

    /// A new node, in the slot after the last; the clients stay on the
    /// nodes they had, the objects come to it by rebalancing.
    fn join(&mut self, notes: &mut Vec<String>) -> Result<(), String> {
        let slot = self.nodes.len();
        let host = if self.net.is_some() {
            self.join_host
        } else {
            0
        };
        let node = self.spawn(slot, host, 1)?;
        notes.push(format!("node {} joined (pid {})", slot + 1, node.pid()));
        self.gateways.write().unwrap().push(node.gateway);
        self.admins.write().unwrap().push(node.admin);
        self.nodes.push(node);
        Ok(())
    }

    /// Waits for a drained node to exit, then starts it again; one that
    /// does not exit in `DRAIN_LIMIT` is killed (and counted as killed).
    fn restart_drained(&mut self, slot: usize, notes: &mut Vec<String>) -> Result<(), String> {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.nodes[slot].exited() {
                break Some(status);
            }
            if started.elapsed() > DRAIN_LIMIT {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        match status {
            Some(status) => notes.push(format!(
                "node {} exited {status} {:.1} s after the fault",
                slot + 1,
                started.elapsed().as_secs_f64()
            )),
            None => {
                notes.push(format!(
                    "node {} still draining after {DRAIN_LIMIT:?}: killed",
                    slot + 1
                ));
                self.nodes[slot].kill_9();
                self.kills.push(super::cluster::Killed {
                    node_id: slot as u64 + 1,
                    at_us: self.us(),
                });
            }
        }
        self.nodes[slot]
            .retired
            .store(true, std::sync::atomic::Ordering::Release);
        let cores = self.nodes[slot].cores;
        let node = self.restart(slot, self.host_of(slot), cores, notes)?;
        self.install(slot, node);
        Ok(())
    }

    /// The players `slot`'s node owns now, as its admin API says.
    fn owned_by(&self, slot: usize) -> Vec<u64> {
        let admin = self.nodes[slot].admin;
        (1..=self.players)
            .filter(|player| {
                let Some((200, body)) = http_get(admin, &format!("/objects/player/{player}"))
                else {
                    return false;
                };
                serde_json::from_str::<serde_json::Value>(&body)
                    .is_ok_and(|record| record["owner"].as_u64() == Some(slot as u64 + 1))
            })
            .collect()
    }

    /// Pipelined increments to players the node owns (any, when it owns
    /// none), then `SIGSTOP` while it works through them.
    pub(super) fn freeze_busy(&mut self, slot: usize, pause: u64, notes: &mut Vec<String>) {
        let mut players = self.owned_by(slot);
        if players.is_empty() {
            players.push(slot as u64 % self.players + 1);
        }
        players.truncate(BURST_PLAYERS_MAX);
        let gateway = self.nodes[slot].gateway;
        let (written, were_written) = std::sync::mpsc::channel();
        let mut bursts = Vec::new();
        for &player in &players {
            self.bursts += 1;
            let session = BURST_SESSION_BASE + self.bursts;
            match Burst::open(gateway, player, session, slot, self.keyed) {
                Ok(burst) => {
                    let (clock, written) = (self.clock, written.clone());
                    // Answers may come once the node is let back.
                    let wait = ms(pause + REQUEST_TIMEOUT_MS + 2000);
                    bursts.push(std::thread::spawn(move || {
                        burst.run(BURST_REQUESTS, clock, written, wait)
                    }));
                }
                Err(error) => notes.push(format!("burst for player {player}: {error}")),
            }
        }
        for _ in 0..bursts.len() {
            let _ = were_written.recv_timeout(Duration::from_secs(1));
        }
        // The node has begun reading them: stop it inside the turn.
        std::thread::sleep(Duration::from_millis(1));
        self.nodes[slot].freeze();
        std::thread::sleep(ms(pause));
        self.nodes[slot].thaw();
        let ops: Vec<Op> = bursts
            .into_iter()
            .flat_map(|burst| burst.join().unwrap_or_default())
            .collect();
        let answered = ops
            .iter()
            .filter(|op| super::check::ok_value(op).is_some())
            .count();
        notes.push(format!(
            "bursts for players {players:?}: {answered} of {} acknowledged",
            ops.len()
        ));
        self.burst_ops.extend(ops);
    }
}
