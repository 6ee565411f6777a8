//! A session's bounded send queue. The gateway appends encoded client
//! frames; the write side of the connection's task takes everything queued
//! in one swap and sends it as one operation. Frames queued during a read
//! batch (`begin_reader_batch` .. `end_reader_batch`) wake nobody: the same
//! task writes right after the batch, so all of its answers leave in one
//! send. Frames queued from elsewhere wake the task. No IO here: the
//! writing is the driver's.
//!
//! The bound is in frames (`send_queue_max`) and in bytes
//! (`send_queue_bytes_max`): a queue holds at most `send_queue_bytes_max`
//! bytes waiting plus one frame (the one that crossed the bound), and the
//! one batch the writer is writing (no larger). A full queue means the
//! client does not read: the gateway closes that session (a slow reader),
//! it never waits for it.

use std::cell::RefCell;
use std::task::{Context, Poll, Waker};

use wire::client::{encode_error_frame, encode_frame, ErrorCode, FrameKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutboxState {
    Open,
    /// Closed by the gateway: frames already queued are still written (so a
    /// kicked client reads `sys.kicked`), then the socket is shut down.
    Closing,
    /// Closed with nothing more to write (a slow reader, a dead peer).
    Aborted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    #[error("send queue full")]
    Full,
    #[error("session closed")]
    Closed,
}

/// What the writer should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriterStep {
    /// The writer's buffer now holds bytes to write.
    Write,
    /// Everything queued was written: shut the socket down.
    Finish,
    /// Drop whatever is pending and shut the socket down.
    Abort,
}

#[derive(Debug)]
struct Inner {
    bytes: Vec<u8>,
    /// u32, not usize: with them the outbox fits a 96-byte allocation
    /// (every session has one).
    frames: u32,
    max_frames: u32,
    /// Past this many queued bytes the queue is full, whatever the frames.
    max_bytes: u32,
    state: OutboxState,
    writer: Option<Waker>,
    abort_watch: Option<Waker>,
    /// The connection's task is handling a read batch: a push then wakes
    /// nobody, as the task writes once the batch ends.
    reader_batch: bool,
    /// The queued bytes hold a RESPONSE: a successful answer, which passes
    /// the core's `AnswerGate` before it is written.
    answers: bool,
    /// The batch the writer took last held one.
    batch_answers: bool,
}

/// The most bytes an outbox takes: with the `Rc` around it (16), an
/// allocation of 96 bytes, mimalloc's size class (the next is 112).
const OUTBOX_BYTES_MAX: usize = 80;
const _: () = assert!(std::mem::size_of::<Outbox>() <= OUTBOX_BYTES_MAX);

/// One session's send queue. Lives on its core (`!Send` by intent: the
/// session and its writer are on the same executor).
#[derive(Debug)]
pub struct Outbox {
    inner: RefCell<Inner>,
}

impl Outbox {
    /// A queue bounded in frames only (up to 4 GiB of bytes).
    pub fn new(max_frames: usize) -> Outbox {
        Outbox::with_bounds(max_frames, u32::MAX as usize)
    }

    /// A queue full at `max_frames` frames or `max_bytes` bytes, whichever
    /// comes first.
    pub fn with_bounds(max_frames: usize, max_bytes: usize) -> Outbox {
        Outbox {
            inner: RefCell::new(Inner {
                bytes: Vec::new(),
                frames: 0,
                max_frames: u32::try_from(max_frames).unwrap_or(u32::MAX).max(1),
                max_bytes: u32::try_from(max_bytes).unwrap_or(u32::MAX).max(1),
                state: OutboxState::Open,
                writer: None,
                abort_watch: None,
                reader_batch: false,
                answers: false,
                batch_answers: false,
            }),
        }
    }

    pub fn state(&self) -> OutboxState {
        self.inner.borrow().state
    }

    /// Frames queued and not yet taken by the writer.
    pub fn queued_frames(&self) -> usize {
        self.inner.borrow().frames as usize
    }

    /// Queues one frame.
    pub fn push_frame(
        &self,
        kind: FrameKind,
        route_id: u32,
        seq: u32,
        body: &[u8],
    ) -> Result<(), PushError> {
        let answers = kind == FrameKind::Response;
        self.push_with(answers, |bytes| {
            encode_frame(bytes, kind, route_id, seq, body)
        })
    }

    /// Queues frames already encoded (a relay's batch, see
    /// `GatewayCore::relay_write`), counted as one frame; `answers`: they
    /// hold a successful answer.
    pub fn push_bytes(&self, frames: &[u8], answers: bool) -> Result<(), PushError> {
        self.push_with(answers, |bytes| bytes.extend_from_slice(frames))
    }

    /// Whether the queued bytes hold a successful answer.
    pub fn holds_answers(&self) -> bool {
        self.inner.borrow().answers
    }

    /// Whether the batch the writer took last holds a successful answer.
    pub fn batch_holds_answers(&self) -> bool {
        self.inner.borrow().batch_answers
    }

    /// Queues one ERROR frame.
    pub fn push_error(
        &self,
        route_id: u32,
        seq: u32,
        code: ErrorCode,
        reason: &str,
    ) -> Result<(), PushError> {
        self.push_with(false, |bytes| {
            encode_error_frame(bytes, route_id, seq, code, reason)
        })
    }

    fn push_with(&self, answers: bool, encode: impl FnOnce(&mut Vec<u8>)) -> Result<(), PushError> {
        let mut inner = self.inner.borrow_mut();
        if inner.state != OutboxState::Open {
            return Err(PushError::Closed);
        }
        // The byte bound is checked before the frame is encoded (its size
        // is the encoder's): a queue may pass it by one frame.
        if inner.frames >= inner.max_frames || inner.bytes.len() >= inner.max_bytes as usize {
            return Err(PushError::Full);
        }
        encode(&mut inner.bytes);
        inner.frames += 1;
        inner.answers |= answers;
        // During a read batch the task writes when the batch ends, so the
        // batch's answers leave in one send, not one per frame.
        if !inner.reader_batch {
            if let Some(waker) = inner.writer.take() {
                waker.wake();
            }
        }
        Ok(())
    }

    /// Stops accepting frames; the writer flushes what is queued, then shuts
    /// the connection down.
    pub fn close(&self) {
        let mut inner = self.inner.borrow_mut();
        if inner.state == OutboxState::Open {
            inner.state = OutboxState::Closing;
        }
        wake_all(&mut inner);
    }

    /// Stops at once: queued frames are dropped.
    pub fn abort(&self) {
        let mut inner = self.inner.borrow_mut();
        inner.state = OutboxState::Aborted;
        inner.bytes = Vec::new();
        inner.frames = 0;
        inner.answers = false;
        wake_all(&mut inner);
    }

    /// Writer side: moves every queued byte into `out` (which must be
    /// empty; its allocation is kept for the next batch) or says why not.
    pub fn poll_take(&self, cx: &mut Context<'_>, out: &mut Vec<u8>) -> Poll<WriterStep> {
        debug_assert!(out.is_empty());
        let mut inner = self.inner.borrow_mut();
        if inner.state == OutboxState::Aborted {
            return Poll::Ready(WriterStep::Abort);
        }
        if !inner.bytes.is_empty() {
            std::mem::swap(&mut inner.bytes, out);
            inner.frames = 0;
            inner.batch_answers = std::mem::take(&mut inner.answers);
            return Poll::Ready(WriterStep::Write);
        }
        if inner.state == OutboxState::Closing {
            return Poll::Ready(WriterStep::Finish);
        }
        set_waker(&mut inner.writer, cx);
        Poll::Pending
    }

    /// Reader side: a read batch starts; what it queues wakes nobody (the
    /// connection's task writes once the batch ends).
    pub fn begin_reader_batch(&self) {
        self.inner.borrow_mut().reader_batch = true;
    }

    /// Reader side: the read batch ended; pushes wake the task again. Its
    /// write side, which runs next in the same poll, takes what the batch
    /// queued.
    pub fn end_reader_batch(&self) {
        self.inner.borrow_mut().reader_batch = false;
    }

    /// Ready once the outbox is aborted: the writer races its socket write
    /// against this, so a client that stopped reading cannot hold a write
    /// (and its task) forever.
    pub fn poll_aborted(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.inner.borrow_mut();
        if inner.state == OutboxState::Aborted {
            return Poll::Ready(());
        }
        set_waker(&mut inner.abort_watch, cx);
        Poll::Pending
    }

    /// Test and diagnostics view of the queued bytes.
    pub fn queued_bytes(&self) -> Vec<u8> {
        self.inner.borrow().bytes.clone()
    }
}

/// Keeps the waker registered in `slot` if it wakes the same task as
/// `cx`'s (no clone: a waker clone and drop is two atomic operations, on
/// the path of every answer).
fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

fn wake_all(inner: &mut Inner) {
    if let Some(waker) = inner.writer.take() {
        waker.wake();
    }
    if let Some(waker) = inner.abort_watch.take() {
        waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    fn noop() -> Waker {
        Waker::from(Arc::new(Noop))
    }

    #[test]
    fn a_queue_past_its_byte_bound_is_full_whatever_its_frames() {
        let frame_len = wire::client::HEADER_LEN + 100;
        let outbox = Outbox::with_bounds(1000, 3 * frame_len);
        for _ in 0..3 {
            outbox.push_frame(FrameKind::Push, 7, 0, &[0; 100]).unwrap();
        }
        assert_eq!(
            outbox.push_frame(FrameKind::Push, 7, 0, &[0; 100]),
            Err(PushError::Full)
        );
        // The writer took the queue: room again.
        assert_eq!(take(&outbox).0, Poll::Ready(WriterStep::Write));
        outbox.push_frame(FrameKind::Push, 7, 0, &[0; 100]).unwrap();
    }

    fn take(outbox: &Outbox) -> (Poll<WriterStep>, Vec<u8>) {
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();
        let step = outbox.poll_take(&mut cx, &mut out);
        (step, out)
    }

    #[test]
    fn bounded_in_frames_and_reset_by_take() {
        let outbox = Outbox::new(2);
        outbox.push_frame(FrameKind::Response, 1, 1, b"a").unwrap();
        outbox.push_frame(FrameKind::Response, 1, 2, b"b").unwrap();
        assert_eq!(
            outbox.push_frame(FrameKind::Response, 1, 3, b"c"),
            Err(PushError::Full)
        );
        let (step, bytes) = take(&outbox);
        assert_eq!(step, Poll::Ready(WriterStep::Write));
        assert_eq!(bytes.len(), 2 * 17);
        outbox.push_frame(FrameKind::Response, 1, 3, b"c").unwrap();
        assert_eq!(outbox.queued_frames(), 1);
    }

    #[test]
    fn close_flushes_then_finishes_and_abort_drops() {
        let outbox = Outbox::new(4);
        assert_eq!(take(&outbox).0, Poll::Pending);
        outbox.push_frame(FrameKind::Push, 101, 0, b"bye").unwrap();
        outbox.close();
        assert_eq!(
            outbox.push_frame(FrameKind::Push, 101, 0, b"x"),
            Err(PushError::Closed)
        );
        assert_eq!(take(&outbox).0, Poll::Ready(WriterStep::Write));
        assert_eq!(take(&outbox).0, Poll::Ready(WriterStep::Finish));

        let outbox = Outbox::new(4);
        outbox.push_frame(FrameKind::Push, 101, 0, b"bye").unwrap();
        outbox.abort();
        assert_eq!(take(&outbox).0, Poll::Ready(WriterStep::Abort));
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(outbox.poll_aborted(&mut cx), Poll::Ready(()));
    }

    /// A waker that counts its wakes.
    struct Counting(std::sync::atomic::AtomicUsize);
    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A counting waker, and a reader of its count.
    fn counting_waker() -> (Waker, impl Fn() -> usize) {
        let counting = Arc::new(Counting(Default::default()));
        let waker = Waker::from(counting.clone());
        (waker, move || {
            counting.0.load(std::sync::atomic::Ordering::SeqCst)
        })
    }

    /// Answers queued during a read batch wake nobody (the task writes
    /// once the batch ends) and leave in one take; a push from elsewhere
    /// wakes the task.
    #[test]
    fn a_reader_batch_wakes_nobody_and_its_answers_leave_together() {
        let outbox = Outbox::new(8);
        let (waker, wakes) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut writer = Vec::new();
        assert!(outbox.poll_take(&mut cx, &mut writer).is_pending());
        outbox.begin_reader_batch();
        outbox.push_frame(FrameKind::Response, 1, 1, b"a").unwrap();
        outbox.push_frame(FrameKind::Response, 1, 2, b"b").unwrap();
        outbox.end_reader_batch();
        assert_eq!(wakes(), 0, "the task writes after its own batch");
        assert_eq!(
            outbox.poll_take(&mut cx, &mut writer),
            Poll::Ready(WriterStep::Write)
        );
        assert_eq!(writer.len(), 2 * 17, "both frames in one batch");
        writer.clear();
        assert!(outbox.poll_take(&mut cx, &mut writer).is_pending());
        // Outside a batch, a push wakes the task, and the waker it
        // registered again is kept, not cloned anew.
        outbox.push_frame(FrameKind::Push, 100, 0, b"c").unwrap();
        assert_eq!(wakes(), 1);
        assert!(outbox.poll_take(&mut cx, &mut writer).is_ready());
        writer.clear();
        assert!(outbox.poll_take(&mut cx, &mut writer).is_pending());
        outbox.push_frame(FrameKind::Push, 100, 0, b"d").unwrap();
        assert_eq!(wakes(), 2);
    }

    #[test]
    fn a_batch_queued_while_the_writer_writes_waits_for_it_in_order() {
        let outbox = Outbox::new(8);
        let (waker, _wakes) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        outbox.push_frame(FrameKind::Response, 1, 1, b"a").unwrap();
        let mut writer = Vec::new();
        assert_eq!(
            outbox.poll_take(&mut cx, &mut writer),
            Poll::Ready(WriterStep::Write)
        );
        outbox.begin_reader_batch();
        outbox.push_frame(FrameKind::Response, 1, 2, b"b").unwrap();
        outbox.end_reader_batch();
        // The writer comes back for it when its write is done.
        let mut first = Vec::new();
        encode_frame(&mut first, FrameKind::Response, 1, 1, b"a");
        assert_eq!(writer, first);
        writer.clear();
        assert_eq!(
            outbox.poll_take(&mut cx, &mut writer),
            Poll::Ready(WriterStep::Write)
        );
        let mut second = Vec::new();
        encode_frame(&mut second, FrameKind::Response, 1, 2, b"b");
        assert_eq!(writer, second);
    }
}
