//! Moving connections during the run: following `sys.redirect`,
//! reconnecting a connection that closed (`--reconnect`), moving a
//! connection to its next player (`--players`), and cutting connections
//! abortively to resume their sessions on new ones (`--cut-every`). The engine reports what
//! happened to sockets; `link.rs` decides where and when to go; this file
//! wires the two to the connections' sessions and counts everything.

use std::net::SocketAddr;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::cli::{Proto, Workload};
use crate::conn::{Conn, Event, Phase};
use crate::engine::{Engine, LinkEvent};
use crate::link::{Mover, Step};
use crate::runner::{Context, Plan, CONNECT_TIMEOUT, WARNINGS_MAX};
use crate::stats::Stats;
use crate::workload::PlayerRing;

/// How long past a redirect's `grace_ms` a connection waits for the
/// answers it is owed before it closes itself (the server should have
/// closed it by then).
pub const REDIRECT_SLACK_NS: u64 = 1_000_000_000;

/// One connection's moving parts.
struct SlotMoves {
    mover: Mover,
    players: PlayerRing,
    /// Where the posted connect goes.
    connecting_to: Option<SocketAddr>,
    /// The connection is moving to its next player.
    switching: bool,
    /// The connection closed under the run: the next successful connect is
    /// a reconnect.
    after_loss: bool,
    /// Kicked by a duplicate login, or its login failed: never reconnected.
    no_return: bool,
    /// `--cut-every`: when the session is cut next (the one entry of
    /// `Moves::cuts` that counts for this slot).
    cut_due_ns: Option<u64>,
    /// Cut on purpose: the close that follows resumes the session.
    cutting: bool,
}

pub struct Moves {
    first_conn: usize,
    addrs: Vec<SocketAddr>,
    reconnect: bool,
    proto: Proto,
    needs_login: bool,
    join_room: bool,
    player_base: u64,
    /// `Some(k)` when connections change player every k requests.
    requests_per_login: Option<u64>,
    secret: Arc<String>,
    token_expiry_unix_s: u64,
    rng: SmallRng,
    slots: Vec<SlotMoves>,
    /// Connections waiting out a backoff: due time, slot, address.
    waits: Vec<(u64, usize, SocketAddr)>,
    /// Redirected connections and when they stop waiting for answers.
    deadlines: Vec<(u64, usize)>,
    /// `--cut-every`: the mean time between two cuts of a session, and the
    /// cuts scheduled (due time, slot); bounded by the slots, since a slot
    /// has at most one that counts and stale ones are dropped when due.
    cut_every_ns: Option<u64>,
    cuts: Vec<(u64, usize)>,
    /// The first cuts are scheduled (at the first `handle`).
    cuts_started: bool,
    /// The run is over: nothing moves any more.
    stopping: bool,
    warnings: Vec<String>,
}

impl Moves {
    pub fn new(plan: &Plan, ctx: &Context, engine: &Engine, token_expiry_unix_s: u64) -> Moves {
        let args = &ctx.args;
        let slots = (0..engine.slots.len())
            .map(|i| {
                let global = plan.first_conn + i;
                SlotMoves {
                    mover: Mover::new(args.addrs[global % args.addrs.len()]),
                    players: PlayerRing::new(global, args.connections, args.player_count()),
                    connecting_to: None,
                    switching: false,
                    after_loss: false,
                    no_return: false,
                    cut_due_ns: None,
                    cutting: false,
                }
            })
            .collect();
        Moves {
            first_conn: plan.first_conn,
            addrs: args.addrs.clone(),
            reconnect: args.reconnect,
            proto: args.proto,
            needs_login: args.needs_login(),
            join_room: args.workload == Workload::Room,
            player_base: args.player_base,
            requests_per_login: (args.player_count() > args.connections as u64)
                .then_some(args.requests_per_login),
            secret: Arc::clone(&ctx.secret),
            token_expiry_unix_s,
            rng: SmallRng::seed_from_u64(0x11fe ^ plan.thread_index as u64),
            slots,
            waits: Vec::new(),
            deadlines: Vec::new(),
            cut_every_ns: args.cut_every.map(|every| every.as_nanos() as u64),
            cuts: Vec::new(),
            cuts_started: false,
            stopping: false,
            warnings: Vec::new(),
        }
    }

    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    fn warn(&mut self, index: usize, what: &str) {
        if self.warnings.len() < WARNINGS_MAX {
            let global = self.first_conn + index;
            self.warnings.push(format!("connection {global}: {what}"));
        }
    }

    /// The run is over: no new connection, no more waiting.
    pub fn stop(&mut self) {
        self.stopping = true;
        self.waits.clear();
        self.deadlines.clear();
        self.cuts.clear();
    }

    /// The earliest time something here must happen.
    pub fn next_due_ns(&self) -> Option<u64> {
        let waits = self.waits.iter().map(|w| w.0);
        let deadlines = self.deadlines.iter().map(|d| d.0);
        let cuts = self.cuts.iter().map(|c| c.0);
        waits.chain(deadlines).chain(cuts).min()
    }

    /// Whether a connection has sent its share as its current player.
    pub fn switch_due(&self, conn: &Conn) -> bool {
        self.requests_per_login
            .is_some_and(|k| conn.sent_since_login() >= k)
    }

    /// Moves a connection to its next player: on Redis at once (a key),
    /// on routerd by draining, reconnecting and logging in again. Returns
    /// whether the connection may go on sending now.
    pub fn begin_switch(&mut self, engine: &mut Engine, index: usize, stats: &mut Stats) -> bool {
        let slot = &mut self.slots[index];
        if self.proto == Proto::Resp {
            let next = self.player_base + slot.players.advance();
            engine.slots[index].conn.rekey(next);
            stats.player_switches += 1;
            return true;
        }
        slot.switching = true;
        slot.mover.on_switch();
        engine.slots[index].conn.begin_drain();
        self.close_if_drained(engine, index);
        false
    }

    /// Closes a draining connection once every answer it is owed came.
    pub fn close_if_drained(&mut self, engine: &mut Engine, index: usize) {
        let slot = &engine.slots[index];
        if slot.is_open() && slot.conn.phase() == Phase::Draining && slot.conn.outstanding() == 0 {
            engine.close(index);
        }
    }

    /// Handles what the engine reported since the last look, the ends of
    /// redirect grace periods, and the backoffs that ran out.
    pub fn handle(
        &mut self,
        engine: &mut Engine,
        now: u64,
        stats: &mut Stats,
    ) -> Result<(), String> {
        for (index, event) in std::mem::take(&mut engine.events) {
            self.on_event(engine, index, event, now, stats);
        }
        if !self.deadlines.is_empty() {
            let mut deadlines = std::mem::take(&mut self.deadlines);
            deadlines.retain(|&(due, index)| {
                let slot = &engine.slots[index];
                let draining = slot.is_open() && slot.conn.phase() == Phase::Draining;
                if draining && due <= now {
                    // What is still owed is lost with the connection.
                    engine.close(index);
                }
                draining && due > now
            });
            self.deadlines = deadlines;
        }
        self.cut_due(engine, now, stats);
        for (index, event) in std::mem::take(&mut engine.link_events) {
            self.on_link_event(engine, index, event, now, stats)?;
        }
        if !self.waits.is_empty() {
            let mut due_now = Vec::new();
            self.waits.retain(|&(due, index, addr)| {
                if due <= now {
                    due_now.push((index, addr));
                }
                due > now
            });
            for (index, addr) in due_now {
                self.connect(engine, index, addr)?;
            }
        }
        Ok(())
    }

    fn on_event(
        &mut self,
        engine: &mut Engine,
        index: usize,
        event: Event,
        now: u64,
        stats: &mut Stats,
    ) {
        match event {
            Event::Redirect(redirect) => {
                if self.stopping {
                    return;
                }
                self.slots[index]
                    .mover
                    .on_redirect(&redirect.target, &self.addrs);
                let grace_ns = u64::from(redirect.grace_ms) * 1_000_000;
                self.deadlines
                    .push((now + grace_ns + REDIRECT_SLACK_NS, index));
                self.close_if_drained(engine, index);
            }
            Event::Kicked => self.slots[index].no_return = true,
            Event::LoggedIn if self.join_room => {
                engine.slots[index].conn.start_join(now);
                engine.queue_flush(index);
            }
            Event::LoggedIn | Event::Joined => {
                let slot = &mut self.slots[index];
                if slot.switching {
                    slot.switching = false;
                    stats.player_switches += 1;
                }
                self.schedule_cut(index, now);
                engine.touch(index);
            }
            Event::Resumed => {
                self.schedule_cut(index, now);
                engine.touch(index);
            }
            // The session is gone: log in afresh on the same connection.
            Event::ResumeRefused => {
                stats.resume.fresh_logins += 1;
                self.login(engine, index, now);
            }
            // A login the server could not answer now (the player moving
            // between nodes, a node draining): a new connection tries again
            // after a backoff.
            Event::SetupFailed {
                transient: true, ..
            } if self.reconnect && !self.stopping => {
                stats.login_retries += 1;
                self.slots[index].after_loss = true;
                engine.close(index);
            }
            Event::SetupFailed { reason, .. } => {
                self.slots[index].no_return = true;
                self.warn(index, &format!("{reason}; not reconnected"));
                engine.close(index);
            }
        }
    }

    fn on_link_event(
        &mut self,
        engine: &mut Engine,
        index: usize,
        event: LinkEvent,
        now: u64,
        stats: &mut Stats,
    ) -> Result<(), String> {
        match event {
            LinkEvent::Down { by_peer } => self.on_down(engine, index, by_peer, now, stats),
            LinkEvent::Connected => {
                let slot = &mut self.slots[index];
                let addr = slot
                    .connecting_to
                    .take()
                    .expect("a connect completes only when one was posted");
                slot.mover.on_connected(addr);
                if std::mem::take(&mut slot.after_loss) {
                    stats.reconnects += 1;
                }
                if self.stopping {
                    // Too late to send anything on it.
                    engine.close(index);
                } else {
                    self.start_session(engine, index, now, stats);
                }
                Ok(())
            }
            LinkEvent::ConnectFailed { errno } => {
                stats.connect_failures += 1;
                self.slots[index].connecting_to = None;
                if self.stopping {
                    return Ok(());
                }
                let step = self.slots[index].mover.on_connect_failed(
                    self.reconnect,
                    &self.addrs,
                    now,
                    &mut self.rng,
                );
                if step == Step::GiveUp {
                    let error = std::io::Error::from_raw_os_error(errno);
                    self.warn(index, &format!("connect failed ({error}); given up"));
                }
                self.apply(engine, index, step, stats)
            }
        }
    }

    /// A socket is gone: the connection starts over as its (next) player,
    /// resuming its session after a cut, and goes where its mover says.
    fn on_down(
        &mut self,
        engine: &mut Engine,
        index: usize,
        by_peer: bool,
        now: u64,
        stats: &mut Stats,
    ) -> Result<(), String> {
        let slot = &mut self.slots[index];
        if slot.switching {
            slot.players.advance();
        }
        let player_id = self.player_base + slot.players.current();
        engine.slots[index].conn.reset(player_id, stats);
        let cut = std::mem::take(&mut slot.cutting);
        if slot.mover.planned() && !cut {
            // A redirect goes to another node (or a switch to
            // another player): its sessions are not this one's.
            engine.slots[index].conn.forget_session();
        }
        let planned = slot.mover.planned() && !slot.no_return;
        if !planned {
            slot.after_loss = true;
        }
        if self.stopping {
            if by_peer && !planned && !self.reconnect {
                stats.connections_lost += 1;
            }
            return Ok(());
        }
        let step = if slot.no_return {
            Step::GiveUp
        } else {
            slot.mover.on_down(self.reconnect, now, &mut self.rng)
        };
        self.apply(engine, index, step, stats)
    }

    fn apply(
        &mut self,
        engine: &mut Engine,
        index: usize,
        step: Step,
        stats: &mut Stats,
    ) -> Result<(), String> {
        match step {
            Step::Connect(addr) => self.connect(engine, index, addr),
            Step::Wait { due_ns, addr } => {
                self.waits.push((due_ns, index, addr));
                Ok(())
            }
            Step::GiveUp => {
                stats.connections_lost += 1;
                Ok(())
            }
        }
    }

    fn connect(
        &mut self,
        engine: &mut Engine,
        index: usize,
        addr: SocketAddr,
    ) -> Result<(), String> {
        self.slots[index].connecting_to = Some(addr);
        engine
            .connect(index, addr, CONNECT_TIMEOUT.as_nanos() as u64)
            .map_err(|e| format!("io_uring: {e}"))
    }

    /// A fresh connection: resume the session (`--resume`), else log in
    /// again (as the slot's current player) or, without login, go straight
    /// on sending.
    fn start_session(&mut self, engine: &mut Engine, index: usize, now: u64, stats: &mut Stats) {
        let conn = &mut engine.slots[index].conn;
        if self.needs_login {
            if conn.start_resume(now, stats) {
                engine.queue_flush(index);
            } else {
                self.login(engine, index, now);
            }
        } else {
            // Only routerd sessions switch players by reconnecting, and
            // they log in: nothing else to finish here.
            conn.skip_setup();
            engine.touch(index);
        }
    }

    fn login(&mut self, engine: &mut Engine, index: usize, now: u64) {
        let conn = &mut engine.slots[index].conn;
        let token = wire::token::mint(
            self.secret.as_bytes(),
            conn.player_id(),
            self.token_expiry_unix_s,
        );
        conn.start_login(&token, now);
        engine.queue_flush(index);
    }

    /// `--cut-every`: the session's next cut, a jittered interval from now
    /// (half to one and a half times the mean, so sessions set up together
    /// are not cut together).
    fn schedule_cut(&mut self, index: usize, now: u64) {
        let Some(every) = self.cut_every_ns else {
            return;
        };
        if self.stopping {
            return;
        }
        let due = now + self.rng.random_range(every / 2..=every + every / 2);
        self.slots[index].cut_due_ns = Some(due);
        self.cuts.push((due, index));
    }

    /// Cuts the sessions whose time came; a session not `Ready` then
    /// (setting up, moving) is cut after its next setup instead.
    fn cut_due(&mut self, engine: &mut Engine, now: u64, stats: &mut Stats) {
        if self.cut_every_ns.is_none() || self.stopping {
            return;
        }
        if !std::mem::replace(&mut self.cuts_started, true) {
            for index in 0..self.slots.len() {
                self.schedule_cut(index, now);
            }
        }
        let mut due_now = Vec::new();
        let slots = &self.slots;
        self.cuts.retain(|&(due, index)| {
            let counts = slots[index].cut_due_ns == Some(due);
            if counts && due <= now {
                due_now.push(index);
            }
            counts && due > now
        });
        for index in due_now {
            let slot = &mut self.slots[index];
            slot.cut_due_ns = None;
            let conn = &engine.slots[index].conn;
            if !engine.slots[index].is_open() || conn.phase() != Phase::Ready {
                continue;
            }
            slot.cutting = true;
            // Back to the same gateway at once, as a planned move.
            slot.mover.on_switch();
            stats.resume.cuts += 1;
            engine.cut(index);
        }
    }
}

#[cfg(test)]
#[path = "moves_tests.rs"]
mod tests;
