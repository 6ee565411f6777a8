//! A session's bounded send queue. The gateway appends encoded client
//! frames; after each read batch the reader sends what the batch produced
//! with one non-blocking send when the writer holds nothing
//! (`begin_reader_batch`, then `take_inline` / `give_back`; frames queued
//! during the batch do not wake the writer), and otherwise the
//! connection's writer task takes everything queued in one swap and
//! writes it with one syscall. No IO here: both writers are the driver's.
//!
//! The bound is in frames (`send_queue_max`), so a queue holds at most
//! `send_queue_max * (HEADER_LEN + body_max_bytes)` bytes waiting, plus the one
//! batch the writer is writing. A full queue means the client does not read:
//! the gateway closes that session (a slow reader), it never waits for it.

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
#[derive(Debug, PartialEq, Eq)]
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
    frames: usize,
    max_frames: usize,
    state: OutboxState,
    writer: Option<Waker>,
    abort_watch: Option<Waker>,
    /// The writer holds a taken batch it has not finished writing.
    writer_busy: bool,
    /// The reader is handling a read batch and sends what it produces
    /// itself (`take_inline`): a push then does not wake the writer.
    reader_batch: bool,
}

/// One session's send queue. Lives on its core (`!Send` by intent: the
/// session and its writer are on the same executor).
#[derive(Debug)]
pub struct Outbox {
    inner: RefCell<Inner>,
}

impl Outbox {
    pub fn new(max_frames: usize) -> Outbox {
        Outbox {
            inner: RefCell::new(Inner {
                bytes: Vec::new(),
                frames: 0,
                max_frames: max_frames.max(1),
                state: OutboxState::Open,
                writer: None,
                abort_watch: None,
                writer_busy: false,
                reader_batch: false,
            }),
        }
    }

    pub fn state(&self) -> OutboxState {
        self.inner.borrow().state
    }

    /// Frames queued and not yet taken by the writer.
    pub fn queued_frames(&self) -> usize {
        self.inner.borrow().frames
    }

    /// Queues one frame.
    pub fn push_frame(
        &self,
        kind: FrameKind,
        route_id: u32,
        seq: u32,
        body: &[u8],
    ) -> Result<(), PushError> {
        self.push_with(|bytes| encode_frame(bytes, kind, route_id, seq, body))
    }

    /// Queues one ERROR frame.
    pub fn push_error(
        &self,
        route_id: u32,
        seq: u32,
        code: ErrorCode,
        reason: &str,
    ) -> Result<(), PushError> {
        self.push_with(|bytes| encode_error_frame(bytes, route_id, seq, code, reason))
    }

    fn push_with(&self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<(), PushError> {
        let mut inner = self.inner.borrow_mut();
        if inner.state != OutboxState::Open {
            return Err(PushError::Closed);
        }
        if inner.frames >= inner.max_frames {
            return Err(PushError::Full);
        }
        encode(&mut inner.bytes);
        inner.frames += 1;
        // During a reader batch the reader sends this itself when the batch
        // ends; waking the writer would only poll a task that finds the
        // queue empty (a task switch per read batch on the ping path).
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
        wake_all(&mut inner);
    }

    /// Writer side: moves every queued byte into `out` (which must be
    /// empty; its allocation is kept for the next batch) or says why not.
    pub fn poll_take(&self, cx: &mut Context<'_>, out: &mut Vec<u8>) -> Poll<WriterStep> {
        debug_assert!(out.is_empty());
        let mut inner = self.inner.borrow_mut();
        // Asking again means the previous batch is written.
        inner.writer_busy = false;
        if inner.state == OutboxState::Aborted {
            return Poll::Ready(WriterStep::Abort);
        }
        if !inner.bytes.is_empty() {
            std::mem::swap(&mut inner.bytes, out);
            inner.frames = 0;
            inner.writer_busy = true;
            return Poll::Ready(WriterStep::Write);
        }
        if inner.state == OutboxState::Closing {
            return Poll::Ready(WriterStep::Finish);
        }
        inner.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Reader side: a read batch starts; what it queues waits for
    /// [`Self::take_inline`] at its end instead of waking the writer.
    pub fn begin_reader_batch(&self) {
        self.inner.borrow_mut().reader_batch = true;
    }

    /// Reader side, at the end of a read batch: takes everything queued for
    /// a write in the reader's own task turn, so answers leave right after
    /// the read that caused them instead of after a writer wake-up. Only
    /// while the writer holds no batch (order is kept) and the outbox is
    /// open; otherwise what is queued stays for the writer, woken if it
    /// waits. Returns the frames taken; 0 when nothing was taken.
    pub fn take_inline(&self, out: &mut Vec<u8>) -> usize {
        debug_assert!(out.is_empty());
        let mut inner = self.inner.borrow_mut();
        inner.reader_batch = false;
        if inner.writer_busy || inner.state != OutboxState::Open || inner.bytes.is_empty() {
            if !inner.bytes.is_empty() {
                if let Some(waker) = inner.writer.take() {
                    waker.wake();
                }
            }
            return 0;
        }
        std::mem::swap(&mut inner.bytes, out);
        std::mem::take(&mut inner.frames)
    }

    /// Puts back what an inline write did not send, ahead of anything
    /// queued since, and wakes the writer to finish it. `frames` (those
    /// taken) count against the bound again until the writer takes them.
    pub fn give_back(&self, rest: &[u8], frames: usize) {
        let mut inner = self.inner.borrow_mut();
        if inner.state == OutboxState::Aborted {
            return;
        }
        let mut bytes = Vec::with_capacity(rest.len() + inner.bytes.len());
        bytes.extend_from_slice(rest);
        bytes.extend_from_slice(&inner.bytes);
        inner.bytes = bytes;
        inner.frames += frames;
        if let Some(waker) = inner.writer.take() {
            waker.wake();
        }
    }

    /// Ready once the outbox is aborted: the writer races its socket write
    /// against this, so a client that stopped reading cannot hold a write
    /// (and its task) forever.
    pub fn poll_aborted(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.inner.borrow_mut();
        if inner.state == OutboxState::Aborted {
            return Poll::Ready(());
        }
        inner.abort_watch = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Test and diagnostics view of the queued bytes.
    pub fn queued_bytes(&self) -> Vec<u8> {
        self.inner.borrow().bytes.clone()
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

    #[test]
    fn a_reader_batch_does_not_wake_the_writer_and_sends_inline() {
        let outbox = Outbox::new(8);
        let (waker, wakes) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut writer = Vec::new();
        assert!(outbox.poll_take(&mut cx, &mut writer).is_pending());
        outbox.begin_reader_batch();
        outbox.push_frame(FrameKind::Response, 1, 1, b"a").unwrap();
        outbox.push_frame(FrameKind::Response, 1, 2, b"b").unwrap();
        assert_eq!(wakes(), 0, "the reader sends these itself");
        let mut inline = Vec::new();
        assert_eq!(outbox.take_inline(&mut inline), 2);
        assert_eq!(wakes(), 0);
        // Outside a batch, a push wakes the writer.
        outbox.push_frame(FrameKind::Push, 100, 0, b"c").unwrap();
        assert_eq!(wakes(), 1);
    }

    /// Queues one frame and has the writer take it: the writer then holds
    /// a batch it has not finished writing.
    fn writer_takes_a_frame(outbox: &Outbox, cx: &mut Context<'_>) -> Vec<u8> {
        outbox.push_frame(FrameKind::Response, 1, 1, b"a").unwrap();
        let mut writer = Vec::new();
        assert_eq!(
            outbox.poll_take(cx, &mut writer),
            Poll::Ready(WriterStep::Write)
        );
        writer
    }

    #[test]
    fn a_reader_batch_that_cannot_send_inline_leaves_it_to_the_writer() {
        let outbox = Outbox::new(8);
        let (waker, wakes) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        // The writer holds a batch: inline would jump ahead of it.
        let mut writer = writer_takes_a_frame(&outbox, &mut cx);
        outbox.begin_reader_batch();
        outbox.push_frame(FrameKind::Response, 1, 2, b"b").unwrap();
        let mut inline = Vec::new();
        assert_eq!(outbox.take_inline(&mut inline), 0);
        // The writer comes back for it when its write is done.
        writer.clear();
        assert_eq!(
            outbox.poll_take(&mut cx, &mut writer),
            Poll::Ready(WriterStep::Write)
        );
        assert_eq!(writer.len(), 17);
        // And a writer that waits is woken for what a batch left.
        writer.clear();
        assert!(outbox.poll_take(&mut cx, &mut writer).is_pending());
        outbox.begin_reader_batch();
        outbox.push_frame(FrameKind::Response, 1, 3, b"c").unwrap();
        outbox.close();
        let before = wakes();
        assert_eq!(
            outbox.take_inline(&mut inline),
            0,
            "closing: the writer flushes"
        );
        assert!(wakes() >= before);
        assert_eq!(
            outbox.poll_take(&mut cx, &mut writer),
            Poll::Ready(WriterStep::Write)
        );
    }

    #[test]
    fn inline_takes_only_while_the_writer_holds_nothing_and_gives_back_in_order() {
        let outbox = Outbox::new(8);
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        // The writer took a batch and is writing it: inline must not jump
        // ahead of it.
        let mut writer = writer_takes_a_frame(&outbox, &mut cx);
        outbox.push_frame(FrameKind::Response, 1, 2, b"b").unwrap();
        let mut inline = Vec::new();
        assert_eq!(outbox.take_inline(&mut inline), 0);
        assert!(inline.is_empty());
        // The writer finished and asks again: it takes "b"; then nothing is
        // queued, and a new frame may go inline.
        writer.clear();
        assert_eq!(
            outbox.poll_take(&mut cx, &mut writer),
            Poll::Ready(WriterStep::Write)
        );
        writer.clear();
        assert!(outbox.poll_take(&mut cx, &mut writer).is_pending());
        outbox.push_frame(FrameKind::Response, 1, 3, b"c").unwrap();
        outbox.push_frame(FrameKind::Response, 1, 4, b"d").unwrap();
        assert_eq!(outbox.take_inline(&mut inline), 2);
        assert_eq!(outbox.queued_frames(), 0);
        // A partial send gives the rest back ahead of what came since, and
        // it counts against the bound again.
        outbox.push_frame(FrameKind::Response, 1, 5, b"e").unwrap();
        let unsent = inline[10..].to_vec();
        outbox.give_back(&unsent, 2);
        assert_eq!(outbox.queued_frames(), 3);
        let mut expected = unsent.clone();
        encode_frame(&mut expected, FrameKind::Response, 1, 5, b"e");
        assert_eq!(outbox.queued_bytes(), expected);
    }
}
