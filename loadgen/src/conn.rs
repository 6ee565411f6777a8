//! One client connection as a sans-IO state machine: frames to send go into
//! `out`, received bytes go into the decoder, and every answer is matched to
//! an outstanding request by seq. The io_uring driver (`engine.rs`) only
//! moves bytes; everything measured is decided here, so tests need no socket.

use std::collections::HashMap;

use wire::client::{
    decode_error_body, encode_frame, route, FrameDecoder, FrameError, FrameKind, Header, Peer,
};

use crate::stats::Stats;
use crate::workload::push_send_time_ns;

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Connected; nothing sent yet.
    Idle,
    /// `auth.login` sent, waiting for the player id.
    LoggingIn,
    /// `room.join` sent, waiting for the member count.
    Joining,
    /// Set up: the workload may send.
    Ready,
    /// Failed or closed; sends nothing more.
    Closed,
}

/// The half-open interval of intended send times that is measured; pushes
/// are measured when the time their sender wrote falls inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Window {
    pub fn contains(&self, t_ns: u64) -> bool {
        self.start_ns <= t_ns && t_ns < self.end_ns
    }

    /// A window no time falls in (setup, before the run starts).
    pub const NONE: Window = Window {
        start_ns: u64::MAX,
        end_ns: u64::MAX,
    };
}

/// What the driver must know about an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    LoggedIn,
    Joined,
    /// Setup could not complete; the run cannot be measured.
    SetupFailed(String),
    /// The server replaced this session (duplicate login).
    Kicked,
}

#[derive(Clone, Copy, Debug)]
struct Outstanding {
    route_id: u32,
    intended_ns: u64,
    body_len: u32,
    measured: bool,
}

/// Why a request could not be queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the connection has inflight_max requests outstanding")]
    Full,
    #[error("the connection is closed")]
    Closed,
}

pub struct Conn {
    player_id: u64,
    room_id: u64,
    phase: Phase,
    seq_next: u32,
    /// Bounded by `inflight_max` plus the one setup request.
    outstanding: HashMap<u32, Outstanding>,
    inflight_max: usize,
    /// Encoded frames not yet handed to the kernel; bounded because each
    /// frame in it is also outstanding.
    out: Vec<u8>,
    decoder: FrameDecoder,
}

impl Conn {
    pub fn new(player_id: u64, room_id: u64, inflight_max: usize, max_body: u32) -> Conn {
        assert!(inflight_max > 0);
        Conn {
            player_id,
            room_id,
            phase: Phase::Idle,
            seq_next: 1,
            outstanding: HashMap::with_capacity(inflight_max + 1),
            inflight_max,
            out: Vec::with_capacity(4096),
            decoder: FrameDecoder::new(Peer::Server, max_body),
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn player_id(&self) -> u64 {
        self.player_id
    }

    pub fn room_id(&self) -> u64 {
        self.room_id
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    pub fn can_send(&self) -> bool {
        self.phase == Phase::Ready && self.outstanding.len() < self.inflight_max
    }

    /// Skips to `Ready` for workloads without login.
    pub fn skip_setup(&mut self) {
        assert_eq!(self.phase, Phase::Idle);
        self.phase = Phase::Ready;
    }

    pub fn start_login(&mut self, token: &str, now_ns: u64) {
        assert_eq!(self.phase, Phase::Idle);
        self.queue(route::AUTH_LOGIN, token.as_bytes(), now_ns, false);
        self.phase = Phase::LoggingIn;
    }

    pub fn start_join(&mut self, now_ns: u64) {
        assert_eq!(self.phase, Phase::Ready);
        let room = self.room_id.to_le_bytes();
        self.queue(route::ROOM_JOIN, &room, now_ns, false);
        self.phase = Phase::Joining;
    }

    /// Queues one workload request. `intended_ns` is when it should have
    /// been sent (now in closed loop, the schedule's time in open loop).
    pub fn send(
        &mut self,
        route_id: u32,
        body: &[u8],
        intended_ns: u64,
        measured: bool,
        stats: &mut Stats,
    ) -> Result<(), SendError> {
        if self.phase == Phase::Closed {
            return Err(SendError::Closed);
        }
        if !self.can_send() {
            return Err(SendError::Full);
        }
        self.queue(route_id, body, intended_ns, measured);
        if measured {
            stats.sent += 1;
        }
        Ok(())
    }

    fn queue(&mut self, route_id: u32, body: &[u8], intended_ns: u64, measured: bool) {
        // Seqs wrap; at most inflight_max are taken, so a free one is near.
        while self.outstanding.contains_key(&self.seq_next) {
            self.seq_next = self.seq_next.wrapping_add(1);
        }
        let seq = self.seq_next;
        self.seq_next = self.seq_next.wrapping_add(1);
        encode_frame(&mut self.out, FrameKind::Request, route_id, seq, body);
        let body_len = u32::try_from(body.len()).expect("bodies are bounded by max_body");
        let previous = self.outstanding.insert(
            seq,
            Outstanding {
                route_id,
                intended_ns,
                body_len,
                measured,
            },
        );
        assert!(previous.is_none(), "seq {seq} reused while outstanding");
    }

    /// Bytes waiting to be written; the driver takes them (swapping in an
    /// empty buffer) and writes them in order.
    pub fn out_mut(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    pub fn decoder_mut(&mut self) -> &mut FrameDecoder {
        &mut self.decoder
    }

    /// Feeds bytes that arrived (tests; the engine reads into the decoder
    /// directly). Returns how many fit.
    #[cfg(test)]
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        self.decoder.extend(bytes)
    }

    /// Handles every complete frame in the decoder. A framing error is
    /// final: the connection must be closed, and it counts as a protocol
    /// error.
    pub fn receive(
        &mut self,
        now_ns: u64,
        window: Window,
        stats: &mut Stats,
        events: &mut Vec<Event>,
    ) -> Result<(), FrameError> {
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok(()),
                Err(error) => {
                    stats.protocol_errors += 1;
                    self.phase = Phase::Closed;
                    return Err(error);
                }
            };
            let header = frame.header;
            match header.kind {
                FrameKind::Push => on_push(&header, frame.body, now_ns, window, stats, events),
                FrameKind::Response | FrameKind::Error => {
                    let Some(request) = self.outstanding.remove(&header.seq) else {
                        stats.protocol_errors += 1;
                        continue;
                    };
                    if request.route_id != header.route_id {
                        stats.protocol_errors += 1;
                        continue;
                    }
                    let answer = Answer {
                        request,
                        is_error: header.kind == FrameKind::Error,
                        body: frame.body,
                    };
                    answer.apply(&mut self.phase, self.player_id, now_ns, stats, events);
                }
                // The decoder accepts only server kinds (Peer::Server).
                FrameKind::Request => stats.protocol_errors += 1,
            }
        }
    }

    /// Ends the connection's run: what is still outstanding and measured
    /// was never answered.
    pub fn abandon(&mut self, stats: &mut Stats) {
        stats.unanswered += self.outstanding.values().filter(|o| o.measured).count() as u64;
        self.outstanding.clear();
        self.phase = Phase::Closed;
    }
}

fn on_push(
    header: &Header,
    body: &[u8],
    now_ns: u64,
    window: Window,
    stats: &mut Stats,
    events: &mut Vec<Event>,
) {
    match header.route_id {
        route::ROOM_MESSAGE => match push_send_time_ns(body) {
            Some(sent_ns) if window.contains(sent_ns) => {
                stats.pushes += 1;
                stats.record_push_latency(now_ns.saturating_sub(sent_ns));
            }
            Some(_) => {}
            None => stats.protocol_errors += 1,
        },
        route::SYS_KICKED => {
            stats.kicked += 1;
            events.push(Event::Kicked);
        }
        _ => stats.protocol_errors += 1,
    }
}

/// One RESPONSE or ERROR matched to its request.
struct Answer<'a> {
    request: Outstanding,
    is_error: bool,
    body: &'a [u8],
}

impl Answer<'_> {
    fn apply(
        self,
        phase: &mut Phase,
        player_id: u64,
        now_ns: u64,
        stats: &mut Stats,
        events: &mut Vec<Event>,
    ) {
        let route_id = self.request.route_id;
        if route_id == route::AUTH_LOGIN
            || (route_id == route::ROOM_JOIN && *phase == Phase::Joining)
        {
            self.apply_setup(phase, player_id, events);
            return;
        }
        if self.is_error {
            match decode_error_body(self.body) {
                Some((code, _reason)) if self.request.measured => stats.record_error(code),
                Some(_) => {}
                None => stats.protocol_errors += 1,
            }
            return;
        }
        if !self.body_fits(stats) {
            stats.protocol_errors += 1;
            return;
        }
        if self.request.measured {
            stats.responses += 1;
            stats.record_latency(now_ns.saturating_sub(self.request.intended_ns));
        }
    }

    /// Checks the RESPONSE body against PROTOCOL.md's route table, and
    /// counts the PUSHes a `room.say` answer promises.
    fn body_fits(&self, stats: &mut Stats) -> bool {
        match self.request.route_id {
            route::SYS_PING => self.body.len() == self.request.body_len as usize,
            route::PLAYER_GET | route::PLAYER_INCR => self.body.len() == 8,
            route::ROOM_SAY => match <[u8; 4]>::try_from(self.body) {
                Ok(count) => {
                    if self.request.measured {
                        stats.pushes_expected += u64::from(u32::from_le_bytes(count));
                    }
                    true
                }
                Err(_) => false,
            },
            route::ROOM_JOIN => self.body.len() == 4,
            route::ROOM_LEAVE => self.body.is_empty(),
            _ => true,
        }
    }

    fn apply_setup(self, phase: &mut Phase, player_id: u64, events: &mut Vec<Event>) {
        let step = if self.request.route_id == route::AUTH_LOGIN {
            "auth.login"
        } else {
            "room.join"
        };
        if self.is_error {
            let reason = match decode_error_body(self.body) {
                Some((code, reason)) => format!("{step} failed: code {code} {reason}"),
                None => format!("{step} failed with a malformed ERROR body"),
            };
            *phase = Phase::Closed;
            events.push(Event::SetupFailed(reason));
            return;
        }
        match (self.request.route_id, *phase) {
            (route::AUTH_LOGIN, Phase::LoggingIn)
                if self.body == player_id.to_le_bytes().as_slice() =>
            {
                *phase = Phase::Ready;
                events.push(Event::LoggedIn);
            }
            (route::ROOM_JOIN, Phase::Joining) if self.body.len() == 4 => {
                *phase = Phase::Ready;
                events.push(Event::Joined);
            }
            _ => {
                *phase = Phase::Closed;
                events.push(Event::SetupFailed(format!(
                    "{step}: unexpected answer body {:02x?}",
                    self.body
                )));
            }
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
