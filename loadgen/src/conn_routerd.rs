//! routerd's half of a connection: docs/protocol.md frames out, answers matched
//! to their requests by seq, PUSHes recognised, every body checked against
//! the route table.

use std::collections::HashMap;
use std::sync::Arc;

use wire::client::{
    decode_error_body, encode_frame, encode_keyed_request, route, FrameDecoder, FrameError,
    FrameKind, Peer,
};

use crate::conn::{Kind, Message, Outstanding, Redirect, Verdict};
use crate::custom::Custom;
use crate::resume::parse_offer;
use crate::stats::Failure;
use crate::workload::{push_send_time_ns, Op};

pub struct RouterdWire {
    seq_next: u32,
    /// Bounded by `inflight_max` plus the one setup request.
    outstanding: HashMap<u32, Outstanding>,
    decoder: FrameDecoder,
    max_body: u32,
    /// Reused request body.
    body: Vec<u8>,
    /// `--workload custom`: the routes of its requests.
    custom: Option<Arc<Custom>>,
    /// `--keys`: the next request key of a state-changing request (never 0).
    next_key: Option<u64>,
    /// `--resume`: logins are version-2 REQUESTs, so the server offers a
    /// resumable session.
    version_2_login: bool,
}

impl RouterdWire {
    pub fn new(inflight_max: usize, max_body: u32) -> RouterdWire {
        RouterdWire {
            seq_next: 1,
            outstanding: HashMap::with_capacity(inflight_max + 1),
            decoder: FrameDecoder::new(Peer::Server, max_body),
            max_body,
            body: Vec::with_capacity(64),
            custom: None,
            next_key: None,
            version_2_login: false,
        }
    }

    /// Logs in with a version-2 `auth.login` from now on (`--resume`).
    pub fn use_version_2_login(&mut self) {
        self.version_2_login = true;
    }

    /// Sends `player.incr` and `room.say` with request keys from now on.
    /// Keys are per player on the server, and a run may reconnect or be
    /// run again against the same players, so they start at a point of
    /// the run's own (the wall clock's nanoseconds, mixed with the player).
    pub fn use_keys(&mut self, player_id: u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        let start = wire::hash::stable_hash64(&(now ^ player_id.rotate_left(32)).to_le_bytes());
        self.next_key = Some(start.max(1));
    }

    pub fn set_custom(&mut self, custom: Arc<Custom>) {
        self.custom = Some(custom);
    }

    pub fn outstanding_len(&self) -> usize {
        self.outstanding.len()
    }

    /// Encodes `request` into `out` and remembers it under a free seq.
    pub fn queue(
        &mut self,
        out: &mut Vec<u8>,
        mut request: Outstanding,
        payload: &[u8],
        room_id: u64,
    ) {
        // Seqs wrap; at most inflight_max are taken, so a free one is near.
        while self.outstanding.contains_key(&self.seq_next) {
            self.seq_next = self.seq_next.wrapping_add(1);
        }
        let seq = self.seq_next;
        self.seq_next = self.seq_next.wrapping_add(1);
        self.body.clear();
        let route_id = route_of(self.custom.as_deref(), request.kind);
        match request.kind {
            // A custom request's payload is its whole body.
            Kind::Work(Op::Ping | Op::Custom(_)) | Kind::Login | Kind::Resume | Kind::Setup(_) => {
                self.body.extend_from_slice(payload)
            }
            Kind::Work(Op::Get) => {}
            Kind::Work(Op::Incr) => self.body.extend_from_slice(&1i64.to_le_bytes()),
            Kind::Work(Op::Say) => {
                self.body.extend_from_slice(&room_id.to_le_bytes());
                self.body.extend_from_slice(payload);
            }
            Kind::Join => self.body.extend_from_slice(&room_id.to_le_bytes()),
        }
        match (&mut self.next_key, request.kind) {
            // A retry keeps the key its first attempt had.
            (Some(_), Kind::Work(Op::Incr)) if request.key != 0 => {
                encode_keyed_request(out, route_id, seq, request.key, &self.body);
            }
            (Some(key), Kind::Work(Op::Incr | Op::Say)) => {
                encode_keyed_request(out, route_id, seq, *key, &self.body);
                request.key = *key;
                *key = key.wrapping_add(1).max(1);
            }
            // `auth.resume` exists only in version 2; `auth.*` ignores keys.
            (_, Kind::Resume) => encode_keyed_request(out, route_id, seq, 0, &self.body),
            (_, Kind::Login) if self.version_2_login => {
                encode_keyed_request(out, route_id, seq, 0, &self.body);
            }
            _ => encode_frame(out, FrameKind::Request, route_id, seq, &self.body),
        }
        let previous = self.outstanding.insert(seq, request);
        assert!(previous.is_none(), "seq {seq} reused while outstanding");
    }

    pub fn read_buf(&mut self) -> &mut [u8] {
        self.decoder.read_buf()
    }

    pub fn advance(&mut self, n: usize) {
        self.decoder.advance(n);
    }

    /// The next decoded message, `Ok(None)` when more bytes are needed, or
    /// the first framing violation (final).
    pub fn next(&mut self, player_id: u64) -> Result<Option<Message>, FrameError> {
        let Some(frame) = self.decoder.next_frame()? else {
            return Ok(None);
        };
        let header = frame.header;
        let body = frame.body;
        let message = match header.kind {
            FrameKind::Push => match header.route_id {
                route::ROOM_MESSAGE => Message::RoomPush {
                    sent_ns: push_send_time_ns(body),
                    push_seq: header.seq,
                },
                route::SYS_SESSION => Message::SessionOffer(parse_offer(body)),
                route::SYS_KICKED => Message::Kicked,
                route::SYS_REDIRECT => Message::Redirect(parse_redirect(body)),
                // A custom workload's type may push on routes of its own;
                // clients ignore push routes they do not know
                // (docs/protocol.md).
                _ if self.custom.is_some() => Message::OtherPush {
                    push_seq: header.seq,
                },
                _ => Message::Stray,
            },
            FrameKind::Response | FrameKind::Error => {
                match self.outstanding.remove(&header.seq) {
                    Some(request)
                        if route_of(self.custom.as_deref(), request.kind) == header.route_id =>
                    {
                        let verdict = if header.kind == FrameKind::Error {
                            error_verdict(request.kind, body)
                        } else {
                            response_verdict(request, body, player_id)
                        };
                        Message::Answer { request, verdict }
                    }
                    // Right seq, wrong route: the request is consumed and
                    // the answer is a protocol error.
                    Some(_) | None => Message::Stray,
                }
            }
            // The decoder accepts only server kinds (Peer::Server).
            FrameKind::Request => Message::Stray,
        };
        Ok(Some(message))
    }

    /// Every outstanding request, taken out.
    pub fn take_outstanding(&mut self) -> impl Iterator<Item = Outstanding> + '_ {
        self.outstanding.drain().map(|(_, request)| request)
    }

    /// A new connection: an empty stream and no requests.
    pub fn reset(&mut self) {
        self.outstanding.clear();
        self.decoder = FrameDecoder::new(Peer::Server, self.max_body);
    }
}

/// The route a request goes to; a custom one's is its workload's.
fn route_of(custom: Option<&Custom>, kind: Kind) -> u32 {
    let custom_route = |n: u8, setup: bool| {
        let custom = custom.expect("custom requests come with their workload");
        let list = if setup {
            &custom.setup
        } else {
            &custom.requests
        };
        list[usize::from(n)].route_id
    };
    match kind {
        Kind::Work(Op::Ping) => route::SYS_PING,
        Kind::Work(Op::Get) => route::PLAYER_GET,
        Kind::Work(Op::Incr) => route::PLAYER_INCR,
        Kind::Work(Op::Say) => route::ROOM_SAY,
        Kind::Work(Op::Custom(n)) => custom_route(n, false),
        Kind::Login => route::AUTH_LOGIN,
        Kind::Resume => route::AUTH_RESUME,
        Kind::Join => route::ROOM_JOIN,
        Kind::Setup(n) => custom_route(n, true),
    }
}

fn error_verdict(kind: Kind, body: &[u8]) -> Verdict {
    match decode_error_body(body) {
        Some((code, reason)) => Verdict::Failed {
            failure: Failure::Code(code),
            reason: matches!(
                kind,
                Kind::Login | Kind::Resume | Kind::Join | Kind::Setup(_)
            )
            .then(|| reason.to_string()),
        },
        None => Verdict::Malformed,
    }
}

/// Checks a RESPONSE body against docs/protocol.md's route table.
fn response_verdict(request: Outstanding, body: &[u8], player_id: u64) -> Verdict {
    let fits = match request.kind {
        Kind::Work(Op::Ping) => body.len() == request.payload_len as usize,
        Kind::Work(Op::Get | Op::Incr) => {
            return match <[u8; 8]>::try_from(body) {
                Ok(counter) => Verdict::Ok {
                    pushes_promised: 0,
                    counter: Some(i64::from_le_bytes(counter)),
                },
                Err(_) => Verdict::Malformed,
            }
        }
        Kind::Work(Op::Say) => {
            return match <[u8; 4]>::try_from(body) {
                Ok(count) => Verdict::Ok {
                    pushes_promised: u32::from_le_bytes(count),
                    counter: None,
                },
                Err(_) => Verdict::Malformed,
            }
        }
        // A resume answers with the session's player, as a login does.
        Kind::Login | Kind::Resume => body == player_id.to_le_bytes().as_slice(),
        Kind::Join => body.len() == 4,
        // The body is the type's own: any RESPONSE to the route answers.
        Kind::Work(Op::Custom(_)) | Kind::Setup(_) => true,
    };
    if fits {
        Verdict::Ok {
            pushes_promised: 0,
            counter: None,
        }
    } else {
        Verdict::Malformed
    }
}

/// `u32 grace_ms` then UTF-8 `host:port` (possibly empty).
pub fn parse_redirect(body: &[u8]) -> Option<Redirect> {
    let (grace, target) = body.split_first_chunk::<4>()?;
    let target = std::str::from_utf8(target).ok()?;
    Some(Redirect {
        grace_ms: u32::from_le_bytes(*grace),
        target: target.to_string(),
    })
}
