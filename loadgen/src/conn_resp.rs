//! Redis's half of a connection (RESP2): commands out, replies matched to
//! requests in order (Redis answers a connection's commands in the order
//! it read them), every reply checked against the command.
//!
//! `Op::Ping` is `PING` with the payload as its argument (echoed as a bulk
//! string), or a bare `PING` (answered `+PONG`) when the payload is empty;
//! `Op::Incr` and `Op::Get` act on the key `player:<id>` of the
//! connection's current player. Redis has no login, rooms or PUSHes.

use std::collections::VecDeque;

use crate::conn::{Kind, Message, Outstanding, Verdict};
use crate::resp::{encode_command, Reply, RespDecoder, RespError};
use crate::stats::Failure;
use crate::workload::Op;

pub struct RespWire {
    /// In send order; bounded by `inflight_max`.
    outstanding: VecDeque<Outstanding>,
    decoder: RespDecoder,
    bulk_max: usize,
    key: Vec<u8>,
}

/// The key a player's counter lives under.
pub fn player_key(player_id: u64) -> Vec<u8> {
    format!("player:{player_id}").into_bytes()
}

impl RespWire {
    pub fn new(inflight_max: usize, max_body: u32, player_id: u64) -> RespWire {
        let bulk_max = usize::try_from(max_body).unwrap_or(usize::MAX);
        RespWire {
            outstanding: VecDeque::with_capacity(inflight_max),
            decoder: RespDecoder::new(bulk_max),
            bulk_max,
            key: player_key(player_id),
        }
    }

    pub fn outstanding_len(&self) -> usize {
        self.outstanding.len()
    }

    pub fn set_key(&mut self, player_id: u64) {
        self.key = player_key(player_id);
    }

    /// Encodes `request` into `out`; false for a request Redis has no
    /// command for (login, rooms).
    pub fn queue(&mut self, out: &mut Vec<u8>, request: Outstanding, payload: &[u8]) -> bool {
        match request.kind {
            Kind::Work(Op::Ping) if payload.is_empty() => encode_command(out, &[b"PING"]),
            Kind::Work(Op::Ping) => encode_command(out, &[b"PING", payload]),
            Kind::Work(Op::Get) => encode_command(out, &[b"GET", &self.key]),
            Kind::Work(Op::Incr) => encode_command(out, &[b"INCR", &self.key]),
            Kind::Work(Op::Say | Op::Custom(_))
            | Kind::Login
            | Kind::Resume
            | Kind::Join
            | Kind::Setup(_) => return false,
        }
        self.outstanding.push_back(request);
        true
    }

    pub fn read_buf(&mut self) -> &mut [u8] {
        self.decoder.read_buf()
    }

    pub fn advance(&mut self, n: usize) {
        self.decoder.advance(n);
    }

    /// The next reply matched to its request, `Ok(None)` when more bytes
    /// are needed, or the first violation (final).
    pub fn next(&mut self) -> Result<Option<Message>, RespError> {
        let Some(reply) = self.decoder.next_reply()? else {
            return Ok(None);
        };
        let Some(request) = self.outstanding.pop_front() else {
            return Ok(Some(Message::Stray));
        };
        let verdict = match (request.kind, reply) {
            (_, Reply::Error(_)) => Verdict::Failed {
                failure: Failure::RespError,
                reason: None,
            },
            (Kind::Work(Op::Ping), Reply::Simple(b"PONG")) if request.payload_len == 0 => {
                Verdict::Ok {
                    pushes_promised: 0,
                    counter: None,
                }
            }
            (Kind::Work(Op::Ping), Reply::Bulk(Some(echo)))
                if echo.len() == request.payload_len as usize =>
            {
                Verdict::Ok {
                    pushes_promised: 0,
                    counter: None,
                }
            }
            (Kind::Work(Op::Incr), Reply::Integer(counter)) => Verdict::Ok {
                pushes_promised: 0,
                counter: Some(counter),
            },
            // A key never incremented does not exist yet: a null bulk.
            (Kind::Work(Op::Get), Reply::Bulk(None)) => Verdict::Ok {
                pushes_promised: 0,
                counter: None,
            },
            (Kind::Work(Op::Get), Reply::Bulk(Some(digits))) if is_decimal_i64(digits) => {
                Verdict::Ok {
                    pushes_promised: 0,
                    counter: None,
                }
            }
            _ => Verdict::Malformed,
        };
        Ok(Some(Message::Answer { request, verdict }))
    }

    /// Every outstanding request, taken out.
    pub fn take_outstanding(&mut self) -> impl Iterator<Item = Outstanding> + '_ {
        self.outstanding.drain(..)
    }

    /// A new connection: an empty stream and no requests.
    pub fn reset(&mut self, player_id: u64) {
        self.outstanding.clear();
        self.decoder = RespDecoder::new(self.bulk_max);
        self.set_key(player_id);
    }
}

fn is_decimal_i64(text: &[u8]) -> bool {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<i64>().ok())
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Proto;
    use crate::conn::{Conn, Phase, SendError, Window};
    use crate::stats::Stats;

    const MS: u64 = 1_000_000;
    const ALL: Window = Window {
        start_ns: 0,
        end_ns: u64::MAX,
    };

    fn ready_conn(inflight_max: usize) -> Conn {
        let mut conn = Conn::new(Proto::Resp, 7, 0, inflight_max, 1 << 16);
        conn.skip_setup();
        conn
    }

    #[test]
    fn commands_carry_the_players_key_and_the_ping_payload() {
        let mut conn = ready_conn(8);
        let mut stats = Stats::default();
        conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
        conn.send(Op::Get, &[], 0, true, &mut stats).expect("room");
        conn.send(Op::Ping, b"abc", 0, true, &mut stats)
            .expect("room");
        conn.send(Op::Ping, b"", 0, true, &mut stats).expect("room");
        assert_eq!(
            std::mem::take(conn.out_mut()),
            b"*2\r\n$4\r\nINCR\r\n$8\r\nplayer:7\r\n\
              *2\r\n$3\r\nGET\r\n$8\r\nplayer:7\r\n\
              *2\r\n$4\r\nPING\r\n$3\r\nabc\r\n\
              *1\r\n$4\r\nPING\r\n"
        );
        assert_eq!(
            conn.send(Op::Say, b"", 0, true, &mut stats),
            Err(SendError::Unsupported)
        );
        conn.rekey(9);
        conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
        assert!(std::mem::take(conn.out_mut()).ends_with(b"$8\r\nplayer:9\r\n"));
    }

    /// Pipelined replies, cut anywhere, match their commands in order, each
    /// timed from its own intended send time and counted under its op.
    #[test]
    fn pipelined_replies_match_in_order_across_partial_reads() {
        let mut conn = ready_conn(8);
        let mut stats = Stats::default();
        let mut events = Vec::new();
        conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
        conn.send(Op::Get, &[], MS, true, &mut stats).expect("room");
        conn.send(Op::Ping, b"xy", 2 * MS, true, &mut stats)
            .expect("room");
        conn.send(Op::Get, &[], 3 * MS, true, &mut stats)
            .expect("room");
        conn.send(Op::Ping, b"", 4 * MS, true, &mut stats)
            .expect("room");
        let replies = b":1\r\n$1\r\n1\r\n$2\r\nxy\r\n$-1\r\n+PONG\r\n";
        for chunk in replies.chunks(3) {
            assert_eq!(conn.feed(chunk), chunk.len());
            conn.receive(10 * MS, ALL, &mut stats, &mut events)
                .expect("valid replies");
        }
        assert_eq!(stats.protocol_errors, 0);
        assert_eq!(conn.outstanding(), 0);
        assert_eq!(stats.ops[Op::Incr.index()].responses, 1);
        assert_eq!(stats.ops[Op::Get.index()].responses, 2);
        assert_eq!(stats.ops[Op::Ping.index()].responses, 2);
        // The incr was due at 0 and answered at 10 ms.
        assert!(stats.ops[Op::Incr.index()].latency_ns.min() >= 9_990_000);
        assert!(stats.ops[Op::Ping.index()].latency_ns.max() <= 8_010_000);
        assert!(events.is_empty());
    }

    #[test]
    fn error_replies_count_as_failures_and_wrong_types_as_protocol_errors() {
        let mut conn = ready_conn(8);
        let mut stats = Stats::default();
        let mut events = Vec::new();
        for _ in 0..4 {
            conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
        }
        conn.send(Op::Ping, b"abc", 0, true, &mut stats)
            .expect("room");
        conn.feed(b"-ERR value is not an integer\r\n:5\r\n+OK\r\n$3\r\nabc\r\n$2\r\nab\r\n");
        conn.receive(MS, ALL, &mut stats, &mut events)
            .expect("framing is fine");
        let incr = &stats.ops[Op::Incr.index()];
        assert_eq!(incr.failed[Failure::RespError.slot()], 1);
        assert_eq!(incr.responses, 1);
        // +OK to an INCR, a bulk to an INCR, and a short ping echo.
        assert_eq!(stats.protocol_errors, 3);
        assert_eq!(stats.ops[Op::Ping.index()].responses, 0);
        // A reply nothing was sent for.
        conn.feed(b":6\r\n");
        conn.receive(MS, ALL, &mut stats, &mut events).expect("ok");
        assert_eq!(stats.protocol_errors, 4);
    }

    #[test]
    fn a_broken_stream_closes_and_what_was_in_flight_is_lost_on_reset() {
        let mut conn = ready_conn(4);
        let mut stats = Stats::default();
        let mut events = Vec::new();
        conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
        conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
        conn.feed(b":1\r\n*1\r\n:2\r\n");
        assert!(conn.receive(MS, ALL, &mut stats, &mut events).is_err());
        assert_eq!(conn.phase(), Phase::Closed);
        assert_eq!(stats.ops[Op::Incr.index()].responses, 1);
        assert!(conn.read_buf().is_empty());
        conn.reset(7, &mut stats);
        assert_eq!(stats.lost(), 1);
        assert_eq!(conn.phase(), Phase::Idle);
        assert!(!conn.read_buf().is_empty(), "a fresh decoder after reset");
    }
}
