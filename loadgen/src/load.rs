//! The load phases of one generator thread: warm-up and the measured phase
//! (closed or open loop), then the drain of outstanding answers. Moving
//! connections (redirects, reconnects, the next player) is `moves.rs`'s.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::cli::{Args, Workload};
use crate::clock::now_ns;
use crate::conn::{Phase, Window};
use crate::engine::Engine;
use crate::moves::Moves;
use crate::runner::{Context, Plan, Snapshot, IDLE_WAIT_NS};
use crate::stats::Stats;
use crate::workload::{room_role, Chooser, Generator, Pacer};

/// Open-loop requests that may wait for one connection's pipeline; past it
/// the schedule is not being kept and the run fails.
pub const OPEN_LOOP_QUEUE_MAX: usize = 4096;

pub struct RunPhase {
    thread_index: usize,
    window: Window,
    generator: Generator,
    rng: SmallRng,
    /// Slots that send (all, or the room's sayers); sorted.
    senders: Vec<usize>,
    /// Open loop only.
    pacer: Option<Pacer>,
    /// `--batch`: a connection sends only when all its answers are in.
    batch: bool,
    chooser: Chooser,
    waiting: Vec<VecDeque<u64>>,
    payload: Vec<u8>,
    /// Reused list of the slots to look at this loop.
    touched: Vec<usize>,
    moves: Moves,
}

impl RunPhase {
    pub fn new(
        plan: &Plan,
        ctx: &Context,
        engine: &Engine,
        start_ns: u64,
        window: Window,
        token_expiry_unix_s: u64,
    ) -> RunPhase {
        let args = &ctx.args;
        let senders: Vec<usize> = (0..engine.slots.len())
            .filter(|&i| {
                args.workload != Workload::Room
                    || room_role(plan.first_conn + i, args.room_size, args.say_fraction).1
            })
            .collect();
        let pacer = args
            .rate
            .map(|rate| Pacer::new(start_ns, rate as f64 / args.threads as f64));
        RunPhase {
            thread_index: plan.thread_index,
            window,
            generator: Generator::new(args.workload, args.mix, args.body_bytes)
                .with_custom(args.custom.clone()),
            rng: SmallRng::seed_from_u64(0x5eed ^ plan.thread_index as u64),
            chooser: Chooser::new(args.dist, senders.len().max(1), args.zipf_s),
            senders,
            pacer,
            batch: args.batch,
            waiting: vec![VecDeque::new(); engine.slots.len()],
            payload: Vec::with_capacity(args.body_bytes + 32),
            touched: Vec::with_capacity(engine.slots.len()),
            moves: Moves::new(plan, ctx, engine, token_expiry_unix_s),
        }
    }

    pub fn take_warnings(&mut self) -> Vec<String> {
        self.moves.take_warnings()
    }

    /// Warm-up and the measured phase.
    pub fn load(
        &mut self,
        engine: &mut Engine,
        ctx: &Context,
        stats: &mut Stats,
    ) -> Result<(), String> {
        if self.senders.is_empty() && self.pacer.is_some() {
            return Err("open loop with no sending connection on this thread".to_string());
        }
        for &index in &self.senders {
            engine.touch(index);
        }
        let mut next_progress_ns = now_ns() + 1_000_000_000;
        loop {
            let now = now_ns();
            if now >= self.window.end_ns {
                self.schedule_to_the_end(engine, now, stats);
                return Ok(());
            }
            if self.pacer.is_some() {
                self.schedule(engine, now, stats);
            }
            self.moves.handle(engine, now, stats)?;
            let mut touched = std::mem::take(&mut self.touched);
            engine.take_touched(&mut touched);
            for &index in &touched {
                self.top_up(engine, index, now, stats);
            }
            self.touched = touched;
            if now >= next_progress_ns {
                next_progress_ns += 1_000_000_000;
                if let Some(progress) = &ctx.progress {
                    let snapshot = Snapshot {
                        thread_index: self.thread_index,
                        progress: stats.progress(),
                    };
                    // Never block the generator on the display.
                    let _ = progress.try_send(snapshot);
                }
            }
            let mut wait = IDLE_WAIT_NS.min(self.window.end_ns - now);
            if let Some(pacer) = &self.pacer {
                wait = wait.min(pacer.next_due_ns().saturating_sub(now));
            }
            if let Some(due) = self.moves.next_due_ns() {
                wait = wait.min(due.saturating_sub(now));
            }
            engine
                .pump(wait, now_ns, self.window, stats)
                .map_err(|e| format!("io_uring: {e}"))?;
        }
    }

    /// Assigns every request the schedule made due to a connection.
    fn schedule(&mut self, engine: &mut Engine, now: u64, stats: &mut Stats) {
        let Some(pacer) = &mut self.pacer else { return };
        while let Some(due) = pacer.pop_due(now) {
            if due >= self.window.end_ns {
                break;
            }
            let index = self.senders[self.chooser.pick(&mut self.rng)];
            if self.waiting[index].len() >= OPEN_LOOP_QUEUE_MAX {
                if self.window.contains(due) {
                    stats.schedule_overflow += 1;
                }
                continue;
            }
            self.waiting[index].push_back(due);
            engine.touch(index);
        }
    }

    /// Open loop: what the schedule made due inside the window goes out
    /// even when the generator was starved at its end (on a loaded
    /// machine the last loop may come milliseconds late). Dropping those
    /// would offer less than the rate asked; sent late, their latency,
    /// measured from the intended time, shows the delay instead. What a
    /// full pipeline still holds back is sent by `drain`.
    fn schedule_to_the_end(&mut self, engine: &mut Engine, now: u64, stats: &mut Stats) {
        if self.pacer.is_none() {
            return;
        }
        self.schedule(engine, self.window.end_ns, stats);
        engine.take_touched(&mut self.touched);
        self.send_waiting(engine, now, stats);
    }

    /// Tops up every connection with open-loop requests waiting.
    fn send_waiting(&mut self, engine: &mut Engine, now: u64, stats: &mut Stats) {
        for index in 0..self.waiting.len() {
            if !self.waiting[index].is_empty() {
                self.top_up(engine, index, now, stats);
            }
        }
    }

    /// Sends what a connection may: up to the pipeline depth in closed
    /// loop, its waiting scheduled requests in open loop; or, once it has
    /// sent its share as one player, starts the move to the next.
    fn top_up(&mut self, engine: &mut Engine, index: usize, now: u64, stats: &mut Stats) {
        let open_loop = self.pacer.is_some();
        if !engine.slots[index].is_open() {
            return;
        }
        if engine.slots[index].conn.phase() == Phase::Draining {
            self.moves.close_if_drained(engine, index);
            return;
        }
        if !open_loop && self.senders.binary_search(&index).is_err() {
            return;
        }
        if self.batch && engine.slots[index].conn.outstanding() > 0 {
            return;
        }
        // Keys to send again (`--keys`) go before new requests.
        let mut queued = engine.slots[index].conn.send_retries(now, stats);
        while engine.slots[index].conn.can_send() {
            if self.moves.switch_due(&engine.slots[index].conn)
                && !self.moves.begin_switch(engine, index, stats)
            {
                break;
            }
            let intended = if open_loop {
                match self.waiting[index].pop_front() {
                    Some(due) => due,
                    None => break,
                }
            } else {
                now
            };
            let player_id = engine.slots[index].conn.player_id();
            let op = self
                .generator
                .next(&mut self.rng, intended, player_id, &mut self.payload);
            let measured = self.window.contains(intended);
            let sent = engine.slots[index]
                .conn
                .send(op, &self.payload, intended, measured, stats);
            if sent.is_err() {
                break;
            }
            queued = true;
        }
        if queued {
            engine.queue_flush(index);
        }
    }

    /// Waits for the answers still outstanding, at most `--drain`. No
    /// connection moves any more: one that closes now loses what it had in
    /// flight.
    pub fn drain(
        &mut self,
        engine: &mut Engine,
        args: &Args,
        stats: &mut Stats,
    ) -> Result<(), String> {
        let deadline = now_ns() + args.drain.as_nanos() as u64;
        self.moves.stop();
        engine.take_touched(&mut self.touched);
        loop {
            self.moves.handle(engine, now_ns(), stats)?;
            // Keys still to be sent again (`--keys`) settle in the drain.
            let now = now_ns();
            for index in 0..engine.slots.len() {
                let slot = &mut engine.slots[index];
                if slot.is_open()
                    && slot.conn.retries_waiting() > 0
                    && slot.conn.send_retries(now, stats)
                {
                    engine.queue_flush(index);
                }
            }
            // Open-loop requests of the window a full pipeline held back
            // (`top_up` passes over a closed connection).
            self.send_waiting(engine, now, stats);
            let pending = engine.slots.iter().zip(&self.waiting).any(|(s, waiting)| {
                s.is_open()
                    && (s.conn.outstanding() > 0
                        || s.conn.retries_waiting() > 0
                        || !waiting.is_empty())
            });
            let now = now_ns();
            if !pending || now >= deadline {
                return Ok(());
            }
            engine
                .pump(IDLE_WAIT_NS.min(deadline - now), now_ns, self.window, stats)
                .map_err(|e| format!("io_uring: {e}"))?;
            engine.take_touched(&mut self.touched);
        }
    }
}
