//! The numbered pushes a resumable session keeps for a resume
//! (docs/protocol.md, section 12; the session's side is `resume.rs`).

use std::collections::VecDeque;

/// One push kept for a resume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct KeptPush {
    pub(super) seq: u32,
    pub(super) route_id: u32,
    pub(super) body: Vec<u8>,
}

/// The numbered pushes of a session, the last `max` of them kept.
///
/// Pushes are numbered 1, 2, ... `u32::MAX`, then 1 again (0 is never a
/// number: it means "none seen"). The ring counts every push it numbered
/// in a `u64`, so a client's `last_seen` is placed in that count even
/// after the numbers wrapped: the latest push of that number.
#[derive(Debug)]
pub(super) struct PushRing {
    kept: VecDeque<KeptPush>,
    max: usize,
    /// Bytes of kept bodies at most (the newest push is kept whatever its
    /// size), and the bytes kept now.
    bytes_max: usize,
    bytes: usize,
    /// Pushes numbered so far; the last kept is the `numbered`-th.
    numbered: u64,
}

/// How many numbers a push can have before they repeat (1 to `u32::MAX`).
const NUMBERS: u64 = u32::MAX as u64;

/// The number of the `count`-th push (`count` from 1).
fn number_of(count: u64) -> u32 {
    ((count - 1) % NUMBERS + 1) as u32
}

impl PushRing {
    pub(super) fn new(max: usize, bytes_max: usize) -> PushRing {
        PushRing {
            kept: VecDeque::new(),
            max: max.max(1),
            bytes_max,
            bytes: 0,
            numbered: 0,
        }
    }

    /// A ring that numbered `numbered` pushes already (kept none).
    #[cfg(test)]
    pub(super) fn after_pushes(max: usize, numbered: u64) -> PushRing {
        PushRing {
            numbered,
            ..PushRing::new(max, usize::MAX)
        }
    }

    /// Numbers a push and keeps it (dropping the oldest kept past `max`
    /// pushes or `bytes_max` bytes); returns its number.
    pub(super) fn record(&mut self, route_id: u32, body: &[u8]) -> u32 {
        self.numbered += 1;
        let seq = number_of(self.numbered);
        self.bytes += body.len();
        self.kept.push_back(KeptPush {
            seq,
            route_id,
            body: body.to_vec(),
        });
        while self.kept.len() > self.max || (self.bytes > self.bytes_max && self.kept.len() > 1) {
            if let Some(dropped) = self.kept.pop_front() {
                self.bytes -= dropped.body.len();
            }
        }
        seq
    }

    /// The pushes after `last_seen`, in order; `None` if some of them are
    /// no longer kept. Before the numbers first wrap, a `last_seen` beyond
    /// the last push numbered means the client has them all; after, every
    /// number names a push, the latest with it.
    pub(super) fn after(&self, last_seen: u32) -> Option<impl Iterator<Item = &KeptPush>> {
        let seen = match u64::from(last_seen) {
            0 => 0,
            seen if self.numbered < NUMBERS => seen.min(self.numbered),
            seen => {
                let back = (u64::from(number_of(self.numbered)) + NUMBERS - seen) % NUMBERS;
                self.numbered - back
            }
        };
        let first_kept = self.numbered + 1 - self.kept.len() as u64;
        if seen + 1 < first_kept {
            return None;
        }
        let skip = (seen + 1 - first_kept) as usize;
        Some(self.kept.range(skip.min(self.kept.len())..))
    }
}
