//! The nodes of a run, slot by slot (slot `i` is node id `i + 1`), and the
//! injection of each fault on them.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::client::{Gateways, Op};
use super::faults::{ms, Fault};
use super::observe::{http_get, poll_process, Observations};
use super::procs::{NodeProc, NodeSpec, Starver, DOWN_AFTER_MS};
use super::store::Store;
use super::support::netns::Net;

/// Starts a restart may try before the run gives up on the slot.
const RESTART_ATTEMPTS: usize = 3;

/// How long a run waits for the cluster to settle (every member up and
/// unfenced on every node) at the start and before the final read.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the first process of a takeover is watched after it was let
/// back: the fixed server makes it exit within a few heartbeats.
const TAKEOVER_WATCH: Duration = Duration::from_secs(5);

/// The words a process that lost its id to another says as it exits.
pub const TAKEN_MESSAGE: &str = "was taken by another process";

/// A fault as it happened.
#[derive(Clone, Debug)]
pub struct Injected {
    pub start_us: u64,
    pub end_us: u64,
    pub fault: Fault,
    pub notes: Vec<String>,
}

/// A `kill -9` of a process serving `node_id`.
#[derive(Clone, Copy, Debug)]
pub struct Killed {
    pub node_id: u64,
    pub at_us: u64,
}

/// What came of a same-id takeover.
#[derive(Clone, Debug)]
pub struct TakeoverOutcome {
    pub node_id: u64,
    /// The first process exited with status 1 saying its id was taken.
    pub first_exited_as_fixed: bool,
    pub description: String,
}

pub struct Cluster {
    /// Node processes first: they die before the store and namespaces go.
    pub nodes: Vec<NodeProc>,
    pub store: Store,
    pub net: Option<Net>,
    pub spec: NodeSpec,
    /// The namespace host no slot uses (a takeover's second process).
    spare_host: usize,
    /// The namespace host of a node that joins.
    pub(super) join_host: usize,
    /// Players of the run (a burst picks among them).
    pub players: u64,
    serial: u32,
    pub gateways: Gateways,
    pub admins: Arc<RwLock<Vec<SocketAddr>>>,
    pub clock: Instant,
    pub observations: Arc<Observations>,
    pub kills: Vec<Killed>,
    pub takeovers: Vec<TakeoverOutcome>,
    /// The operations of the pipelining bursts (`freeze_busy`).
    pub burst_ops: Vec<Op>,
    /// Bursts send keyed increments (never retried).
    pub keyed: bool,
    pub(super) bursts: usize,
}

impl Cluster {
    /// Starts `count` nodes and waits until each sees all the others up.
    pub fn start(
        count: usize,
        spec: NodeSpec,
        store: Store,
        net: Option<Net>,
        clock: Instant,
        players: u64,
    ) -> Result<Cluster, String> {
        let mut cluster = Cluster {
            nodes: Vec::new(),
            store,
            net,
            spec,
            spare_host: count + 1,
            join_host: count + 2,
            players,
            serial: 0,
            gateways: Arc::new(RwLock::new(Vec::new())),
            admins: Arc::new(RwLock::new(Vec::new())),
            clock,
            observations: Arc::new(Observations::default()),
            kills: Vec::new(),
            takeovers: Vec::new(),
            burst_ops: Vec::new(),
            keyed: false,
            bursts: 0,
        };
        for slot in 0..count {
            let host = if cluster.net.is_some() { slot + 1 } else { 0 };
            let node = cluster.spawn(slot, host, 1)?;
            cluster.gateways.write().unwrap().push(node.gateway);
            cluster.admins.write().unwrap().push(node.admin);
            cluster.nodes.push(node);
        }
        if !cluster.settle(SETTLE_TIMEOUT) {
            return Err("the nodes did not all see each other up".into());
        }
        Ok(cluster)
    }

    pub fn us(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64
    }

    /// Starts a process for `slot` on `host` and polls it.
    pub(super) fn spawn(
        &mut self,
        slot: usize,
        host: usize,
        cores: usize,
    ) -> Result<NodeProc, String> {
        self.serial += 1;
        let node = self
            .spec
            .start(self.net.as_ref(), host, slot as u64 + 1, self.serial, cores)?;
        poll_process(
            node.admin,
            node.pid(),
            node.serial,
            node.retired.clone(),
            self.clock,
            self.observations.clone(),
        );
        Ok(node)
    }

    pub(super) fn install(&mut self, slot: usize, node: NodeProc) -> NodeProc {
        self.gateways.write().unwrap()[slot] = node.gateway;
        self.admins.write().unwrap()[slot] = node.admin;
        std::mem::replace(&mut self.nodes[slot], node)
    }

    /// True once every node reports itself up and unfenced and every
    /// member up, within `limit`.
    pub fn settle(&self, limit: Duration) -> bool {
        let started = Instant::now();
        let count = self.nodes.len();
        while started.elapsed() < limit {
            let settled = self.nodes.iter().all(|node| {
                let Some((200, body)) = http_get(node.admin, "/cluster") else {
                    return false;
                };
                let Ok(json) = serde_json::from_str::<serde_json::Value>(&body) else {
                    return false;
                };
                let members = json["members"].as_array().cloned().unwrap_or_default();
                json["state"] == "up"
                    && json["fenced"] == false
                    && members.len() >= count
                    && (1..=count as u64).all(|id| {
                        members
                            .iter()
                            .any(|member| member["node_id"] == id && member["state"] == "up")
                    })
            });
            if settled {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    pub(super) fn host_of(&self, slot: usize) -> usize {
        self.nodes[slot].host
    }

    fn net(&self) -> &Net {
        self.net.as_ref().expect("partitions need namespaces")
    }

    fn postgres(&self) -> &super::store::Postgres {
        match &self.store {
            Store::Postgres(pg) => pg,
            Store::Sqlite(_) => panic!("store faults need a store server"),
        }
    }

    /// The address `slot`'s store connections come from, as the store's
    /// proxy sees it: `None` on loopback, where every node shares one.
    fn store_peer(&self, slot: usize) -> Option<std::net::IpAddr> {
        let net = self.net.as_ref()?;
        net.host(self.host_of(slot)).parse().ok()
    }

    /// Injects `fault`, waits it out, heals it.
    pub fn inject(&mut self, fault: &Fault) -> Result<Injected, String> {
        let start_us = self.us();
        let mut notes = Vec::new();
        match *fault {
            Fault::Kill { slot, down_ms } => {
                self.nodes[slot].kill_9();
                self.kills.push(Killed {
                    node_id: slot as u64 + 1,
                    at_us: self.us(),
                });
                std::thread::sleep(ms(down_ms));
                let cores = self.nodes[slot].cores;
                let node = self.restart(slot, self.host_of(slot), cores, &mut notes)?;
                self.install(slot, node);
            }
            Fault::RestartCores { slot, down_ms } => {
                let cores = 3 - self.nodes[slot].cores.clamp(1, 2);
                notes.push(format!("from {} cores to {cores}", self.nodes[slot].cores));
                self.nodes[slot].kill_9();
                self.kills.push(Killed {
                    node_id: slot as u64 + 1,
                    at_us: self.us(),
                });
                std::thread::sleep(ms(down_ms));
                let node = self.restart(slot, self.host_of(slot), cores, &mut notes)?;
                self.install(slot, node);
            }
            Fault::FreezeBusy { slot, ms: pause } => self.freeze_busy(slot, pause, &mut notes),
            Fault::StoreReset {
                slot,
                every_ms,
                ms: lasting,
            } => {
                let peer = self.store_peer(slot);
                if peer.is_none() {
                    notes.push("on loopback: every node's connections reset".into());
                }
                let started = Instant::now();
                while started.elapsed() < ms(lasting) {
                    self.postgres().proxy.reset(peer);
                    std::thread::sleep(ms(every_ms));
                }
            }
            Fault::StoreDelay {
                slot,
                delay_ms,
                ms: lasting,
            } => {
                let peer = self.store_peer(slot);
                if peer.is_none() {
                    notes.push("on loopback: every node's requests delayed".into());
                }
                self.postgres().proxy.delay(peer, delay_ms);
                std::thread::sleep(ms(lasting));
                self.postgres().proxy.delay(peer, 0);
            }
            Fault::DiskFull { ms: full } => {
                let Store::Sqlite(sqlite) = &self.store else {
                    return Err("a full disk needs SQLite on a disk of its own".into());
                };
                let disk = sqlite
                    .disk
                    .as_ref()
                    .ok_or("SQLite has no disk of its own")?;
                let filled = disk.fill()?;
                notes.push(format!("{} KiB written until ENOSPC", filled / 1024));
                std::thread::sleep(ms(full));
                disk.empty();
            }
            Fault::Operator {
                ref call,
                after_ms,
                ref during,
            } => self.operator(call, after_ms, during, &mut notes)?,
            Fault::Freeze { slot, ms: pause } => {
                self.nodes[slot].freeze();
                std::thread::sleep(ms(pause));
                self.nodes[slot].thaw();
            }
            Fault::CutPeers { slot, ms: cut } => {
                let others: Vec<usize> = (0..self.nodes.len()).filter(|&b| b != slot).collect();
                for &b in &others {
                    self.net()
                        .cut_pair(self.host_of(slot), self.host_of(b), true)?;
                }
                std::thread::sleep(ms(cut));
                for &b in &others {
                    self.net()
                        .cut_pair(self.host_of(slot), self.host_of(b), false)?;
                }
            }
            Fault::CutPair { a, b, ms: cut } => {
                let (host_a, host_b) = (self.host_of(a), self.host_of(b));
                self.net().cut_pair(host_a, host_b, true)?;
                std::thread::sleep(ms(cut));
                self.net().cut_pair(host_a, host_b, false)?;
            }
            Fault::CutStore { slot, ms: cut } => {
                let host = self.host_of(slot);
                self.net().cut_store(host, true)?;
                std::thread::sleep(ms(cut));
                self.net().cut_store(host, false)?;
            }
            Fault::StoreStop { ms: stopped } => {
                self.postgres().stop()?;
                std::thread::sleep(ms(stopped));
                let mut attempt = 0;
                while let Err(error) = self.postgres().restart() {
                    attempt += 1;
                    notes.push(format!("store restart failed: {error}"));
                    if attempt == RESTART_ATTEMPTS {
                        return Err(error);
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
            Fault::StoreFreeze { ms: frozen, .. } => {
                self.postgres().freeze();
                std::thread::sleep(ms(frozen));
                self.postgres().thaw();
            }
            Fault::Starve { slot, ms: busy } => {
                let cpu = self.spec.cpu_of(slot as u64 + 1);
                let sharing: Vec<String> = (0..self.nodes.len())
                    .filter(|&other| self.spec.cpu_of(other as u64 + 1) == cpu)
                    .map(|other| (other + 1).to_string())
                    .collect();
                notes.push(format!(
                    "CPU {cpu}, which nodes {} run on",
                    sharing.join(", ")
                ));
                let starver = Starver::start(cpu)?;
                std::thread::sleep(ms(busy));
                drop(starver);
            }
            Fault::Takeover { slot } => self.takeover(slot, &mut notes)?,
        }
        Ok(Injected {
            start_us,
            end_us: self.us(),
            fault: fault.clone(),
            notes,
        })
    }

    pub(super) fn restart(
        &mut self,
        slot: usize,
        host: usize,
        cores: usize,
        notes: &mut Vec<String>,
    ) -> Result<NodeProc, String> {
        let mut attempt = 0;
        loop {
            match self.spawn(slot, host, cores) {
                Ok(node) => return Ok(node),
                Err(error) => {
                    attempt += 1;
                    notes.push(format!("start failed: {error}"));
                    if attempt == RESTART_ATTEMPTS {
                        return Err(error);
                    }
                    std::thread::sleep(ms(DOWN_AFTER_MS));
                }
            }
        }
    }

    /// Item 2: the first process P1 is cut off long enough that its row
    /// stands still for `down_after_ms`; P2 starts with the same id; P1 is
    /// let back. The fixed server makes P1 exit 1 saying its id was taken;
    /// a P1 still running afterwards is killed (and both serving is what
    /// the checker's "two unfenced processes with one id" finds).
    fn takeover(&mut self, slot: usize, notes: &mut Vec<String>) -> Result<(), String> {
        let node_id = slot as u64 + 1;
        let p1_host = self.host_of(slot);
        // With a store server and namespaces, P1 keeps running but cannot
        // reach the store; otherwise (one SQLite file) it is frozen.
        let by_cut = self.net.is_some() && matches!(self.store, Store::Postgres(_));
        if by_cut {
            self.net().cut_store(p1_host, true)?;
            notes.push(format!(
                "P1 (pid {}) cut from the store",
                self.nodes[slot].pid()
            ));
        } else {
            self.nodes[slot].freeze();
            notes.push(format!("P1 (pid {}) frozen", self.nodes[slot].pid()));
        }
        std::thread::sleep(ms(DOWN_AFTER_MS + 500));
        let p2_host = if self.net.is_some() {
            self.spare_host
        } else {
            0
        };
        let started = self.spawn(slot, p2_host, self.nodes[slot].cores);
        if by_cut {
            self.net().cut_store(p1_host, false)?;
        } else {
            self.nodes[slot].thaw();
        }
        let p2 = match started {
            Ok(p2) => p2,
            Err(error) => {
                notes.push(format!("P2 did not start, P1 stays: {error}"));
                return Ok(());
            }
        };
        notes.push(format!(
            "P2 (pid {}) serves node {}; P1 let back",
            p2.pid(),
            p2.node_id
        ));
        let healed = Instant::now();
        let mut p1 = self.install(slot, p2);
        self.spare_host = p1_host;
        let status = loop {
            if let Some(status) = p1.exited() {
                break Some(status);
            }
            if healed.elapsed() > TAKEOVER_WATCH {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Let the reader thread catch the last words.
        std::thread::sleep(Duration::from_millis(50));
        let said = p1
            .stderr_tail()
            .iter()
            .any(|line| line.contains(TAKEN_MESSAGE));
        let outcome = match status {
            Some(status) => {
                let fixed = status.code() == Some(1) && said;
                TakeoverOutcome {
                    node_id,
                    first_exited_as_fixed: fixed,
                    description: format!(
                        "P1 exited {status} {:.1} s after it was let back{}",
                        healed.elapsed().as_secs_f64(),
                        if said {
                            format!(", saying its id {TAKEN_MESSAGE}")
                        } else {
                            format!(" without saying its id {TAKEN_MESSAGE}")
                        }
                    ),
                }
            }
            None => {
                let at_us = self.us();
                p1.kill_9();
                self.kills.push(Killed { node_id, at_us });
                TakeoverOutcome {
                    node_id,
                    first_exited_as_fixed: false,
                    description: format!(
                        "P1 still running {} s after it was let back, beside P2 with the same id; killed",
                        TAKEOVER_WATCH.as_secs()
                    ),
                }
            }
        };
        notes.push(outcome.description.clone());
        self.takeovers.push(outcome);
        p1.retired.store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Undoes whatever a failed injection may have left: thaws every node
    /// and the store, removes every cut.
    pub fn heal_all(&mut self) {
        for node in &self.nodes {
            node.thaw();
        }
        if let Some(net) = &self.net {
            net.heal_all();
        }
        if let Store::Sqlite(sqlite) = &self.store {
            if let Some(disk) = &sqlite.disk {
                disk.empty();
            }
        }
        if let Store::Postgres(pg) = &self.store {
            pg.proxy.heal();
            pg.thaw();
            if !pg.running() {
                if let Err(error) = pg.restart() {
                    println!("the store did not start again: {error}");
                }
            }
        }
    }

    /// Stops every poller.
    pub fn retire_all(&self) {
        for node in &self.nodes {
            node.retired
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }
}
