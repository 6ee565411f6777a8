//! One outgoing link's state, sans-IO: from this core to one core of one
//! other node. Links open lazily (the first frame for a peer core dials
//! it), stay open, and are dialled again after a failure with a jittered
//! exponential backoff. The queue is bounded: a frame is queued or refused
//! at once, so memory stays bounded and no core ever waits for a peer. The
//! queue is a [`Batch`]: a message is encoded once, into the records the
//! writer will seal and send as they are.

use wire::frame::{FrameBuf, FrameEncodeError, Message};

use super::codec::Batch;
use super::handshake::Refusal;
use crate::router::driver::LinkRefusal;

/// The shortest and longest wait before a link is dialled again.
pub const BACKOFF_MIN_MS: u64 = 100;
pub const BACKOFF_MAX_MS: u64 = 5_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Dialling and handshaking; frames queue.
    Connecting,
    /// Handshake done; the writer sends what queues.
    Up,
    /// The last attempt failed; frames are refused until `until_ms`, when
    /// the next frame dials again.
    Backoff { until_ms: u64 },
}

/// Why a link did not take a message.
#[derive(Debug)]
pub enum Refused {
    Link(LinkRefusal),
    /// Past the frame limit: no link takes it.
    Encode(FrameEncodeError),
}

/// Bytes a link's queue holds at most beside its frame bound: 4,096
/// frames of requests near the body bound were 256 MiB a link (and as much
/// again in the batch being written), which its writer could not send
/// within the silence a peer is allowed anyway. Past it a message is
/// refused as on a full queue (its request answered OVERLOADED or sent
/// elsewhere).
pub const QUEUE_BYTES_MAX: usize = 16 << 20;

pub struct Link {
    state: LinkState,
    queue: Batch,
    queue_max: usize,
    /// Consecutive failed attempts, for the backoff.
    failures: u32,
    /// The peer's incarnation the link was opened for.
    pub peer_incarnation: u64,
    /// Why the last handshake was refused, if it was.
    pub refused: Option<Refusal>,
}

impl Link {
    /// A link to open now (its first frame is on its way).
    pub fn new(queue_max: usize, peer_incarnation: u64) -> Link {
        Link {
            state: LinkState::Connecting,
            queue: Batch::new(),
            queue_max: queue_max.max(1),
            failures: 0,
            peer_incarnation,
            refused: None,
        }
    }

    pub fn state(&self) -> LinkState {
        self.state
    }

    pub fn queued(&self) -> usize {
        self.queue.messages()
    }

    /// Queues `message` for the peer, or says why not. Returns whether the
    /// link must be dialled (it was backing off and the wait is over).
    /// `now_ms` is read only while the link backs off: a link that is up
    /// (every frame of a busy link) needs no clock.
    pub fn offer(
        &mut self,
        now_ms: impl FnOnce() -> u64,
        message: &Message,
    ) -> Result<bool, Refused> {
        let dial = match self.state {
            LinkState::Connecting | LinkState::Up => false,
            LinkState::Backoff { until_ms } => {
                if now_ms() < until_ms {
                    return Err(Refused::Link(LinkRefusal::Down));
                }
                true
            }
        };
        if self.queue.messages() >= self.queue_max || self.queue.bytes() >= QUEUE_BYTES_MAX {
            return Err(Refused::Link(LinkRefusal::Full));
        }
        self.queue.message(message).map_err(Refused::Encode)?;
        if dial {
            self.state = LinkState::Connecting;
        }
        Ok(dial)
    }

    /// The handshake succeeded.
    pub fn connected(&mut self) {
        self.state = LinkState::Up;
        self.failures = 0;
        self.refused = None;
    }

    /// The dial, the handshake or the connection failed at `now_ms`:
    /// back off (by `jitter` in [0, 1) of the wait), and give back every
    /// frame still queued: none of them was written, so the sender may
    /// answer or re-route them.
    pub fn failed(&mut self, now_ms: u64, jitter: f64) -> Vec<FrameBuf> {
        let wait = backoff_ms(self.failures, jitter);
        self.failures = self.failures.saturating_add(1);
        self.state = LinkState::Backoff {
            until_ms: now_ms + wait,
        };
        self.queue.drain_frames()
    }

    /// The peer proved itself alive (it linked to this node): end the
    /// backoff, so the next frame dials at once.
    pub fn retry_now(&mut self) {
        if let LinkState::Backoff { .. } = self.state {
            self.state = LinkState::Backoff { until_ms: 0 };
        }
    }

    /// Every queued frame, for the writer: swaps the queue with the
    /// writer's `spare`, an empty batch (the one it sent last).
    pub fn take_all(&mut self, spare: &mut Batch) {
        assert!(spare.is_empty(), "a writer's spare batch holds frames");
        std::mem::swap(&mut self.queue, spare);
    }
}

/// The wait after `failures` consecutive failures: doubling from
/// `BACKOFF_MIN_MS` to `BACKOFF_MAX_MS`, then spread over its upper half by
/// `jitter` so that peers that failed together do not dial together.
pub fn backoff_ms(failures: u32, jitter: f64) -> u64 {
    let base = BACKOFF_MIN_MS
        .saturating_mul(1u64 << failures.min(16))
        .min(BACKOFF_MAX_MS);
    base / 2 + ((base / 2) as f64 * jitter.clamp(0.0, 1.0)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Message {
        Message::RouterReply {
            origin_node: 1,
            request_seq: 2,
            error_code: 0,
            body: Vec::new(),
        }
    }

    #[test]
    fn backoff_doubles_from_100_ms_to_5_s_with_jitter() {
        assert_eq!(backoff_ms(0, 0.0), 50);
        assert_eq!(backoff_ms(0, 0.999), 99);
        assert_eq!(backoff_ms(1, 0.0), 100);
        assert_eq!(backoff_ms(3, 0.0), 400);
        assert_eq!(backoff_ms(10, 0.0), 2_500);
        assert_eq!(backoff_ms(40, 0.999), 4_997);
        assert!((0..60).all(|n| backoff_ms(n, 1.0) <= BACKOFF_MAX_MS));
    }

    /// Large frames fill the queue by bytes long before its frame bound.
    #[test]
    fn the_queue_is_bounded_in_bytes() {
        let big = Message::RouterReply {
            origin_node: 1,
            request_seq: 2,
            error_code: 0,
            body: vec![0; 64 << 10],
        };
        let mut link = Link::new(4096, 1);
        let mut taken = 0;
        while link.offer(|| 0, &big).is_ok() {
            taken += 1;
        }
        assert!(matches!(
            link.offer(|| 0, &big),
            Err(Refused::Link(LinkRefusal::Full))
        ));
        let fit = QUEUE_BYTES_MAX / (64 << 10);
        assert!((fit - 1..=fit + 1).contains(&taken), "{taken} frames");
    }

    #[test]
    fn the_queue_is_bounded_and_a_failure_gives_every_frame_back() {
        let mut link = Link::new(2, 1);
        assert_eq!(link.offer(|| 0, &frame()).ok(), Some(false));
        assert_eq!(link.offer(|| 0, &frame()).ok(), Some(false));
        assert!(matches!(
            link.offer(|| 0, &frame()),
            Err(Refused::Link(LinkRefusal::Full))
        ));
        let back = link.failed(100, 0.0);
        assert_eq!(back.len(), 2);
        assert_eq!(*back[1].message(), frame());
        assert_eq!(link.queued(), 0);
        // Backing off: refused as down until the wait is over, then the
        // next frame dials again.
        assert!(matches!(
            link.offer(|| 120, &frame()),
            Err(Refused::Link(LinkRefusal::Down))
        ));
        assert_eq!(link.offer(|| 150, &frame()).ok(), Some(true));
        assert_eq!(link.state(), LinkState::Connecting);
        link.connected();
        assert_eq!(link.state(), LinkState::Up);
        let mut taken = Batch::new();
        link.take_all(&mut taken);
        assert_eq!(taken.messages(), 1);
        assert_eq!(link.queued(), 0);
        // Consecutive failures back off longer; a success resets it.
        link.failed(1_000, 0.0);
        assert_eq!(link.state(), LinkState::Backoff { until_ms: 1_050 });
        link.offer(|| 1_050, &frame()).unwrap();
        link.failed(1_050, 0.0);
        assert_eq!(link.state(), LinkState::Backoff { until_ms: 1_150 });
        // A sign of life from the peer ends the wait.
        link.retry_now();
        assert_eq!(link.offer(|| 1_060, &frame()).ok(), Some(true));
    }

    #[test]
    fn a_message_past_the_frame_limit_is_refused_and_queues_nothing() {
        let mut link = Link::new(4, 1);
        link.offer(|| 0, &frame()).unwrap();
        let huge = Message::RouterReply {
            origin_node: 1,
            request_seq: 3,
            error_code: 0,
            body: vec![0; wire::frame::MAX_FRAME_LEN],
        };
        assert!(matches!(
            link.offer(|| 0, &huge),
            Err(Refused::Encode(FrameEncodeError::TooLarge { .. }))
        ));
        assert_eq!(link.queued(), 1);
        let back = link.failed(0, 0.0);
        assert_eq!(back.len(), 1);
        assert_eq!(*back[0].message(), frame());
    }
}
