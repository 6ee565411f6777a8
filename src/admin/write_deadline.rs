//! A bound on how long an admin connection's answer may wait for its
//! reader.
//!
//! A request holds its admin slot until its connection ends, and the
//! answer is written after the handler returns. A client that sent a
//! request and never read the answer held the slot for the connection's
//! whole lifetime (30 s) once the answer outgrew the socket buffers (a
//! scrape of many types, a long history, a page of 500 rows): eighty of
//! them took every probe slot, and `/healthz` answered 503 busy to the
//! orchestrator meanwhile. A write that makes no progress for
//! [`WRITE_STALL_MAX`] now fails, and the connection ends.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long an answer's write may make no progress.
pub const WRITE_STALL_MAX: Duration = Duration::from_secs(2);

/// Whether hyper ended a connection because its answer's write passed
/// the deadline.
pub fn passed(error: &hyper::Error) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<io::Error>())
        .is_some_and(|error| error.kind() == io::ErrorKind::TimedOut)
}

/// `io` whose writes fail once one waits `stall_max` without progress.
pub struct WriteDeadline<S> {
    io: S,
    stall_max: Duration,
    /// Armed while a write waits; dropped at its progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(io: S, stall_max: Duration) -> WriteDeadline<S> {
        WriteDeadline {
            io,
            stall_max,
            stalled: None,
        }
    }

    /// The outcome of a write step: progress disarms the deadline, a wait
    /// arms it, and a wait past it fails.
    fn judge<T>(&mut self, cx: &mut Context<'_>, step: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if step.is_ready() {
            self.stalled = None;
            return step;
        }
        let stall_max = self.stall_max;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall_max)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the admin client read nothing of its answer for too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let step = Pin::new(&mut this.io).poll_write(cx, buf);
        this.judge(cx, step)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let step = Pin::new(&mut this.io).poll_flush(cx);
        this.judge(cx, step)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let step = Pin::new(&mut this.io).poll_shutdown(cx);
        this.judge(cx, step)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let step = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.judge(cx, step)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_write_nobody_reads_fails_at_its_deadline() {
        runtime().block_on(async {
            let (ours, _theirs) = tokio::io::duplex(1024);
            let mut io = WriteDeadline::new(ours, Duration::from_millis(100));
            let started = tokio::time::Instant::now();
            let error = io.write_all(&[7; 64 * 1024]).await.unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::TimedOut);
            let took = started.elapsed();
            assert!(took >= Duration::from_millis(100), "{took:?}");
            assert!(took < Duration::from_secs(2), "{took:?}");
        });
    }

    #[test]
    fn a_slow_reader_that_keeps_reading_gets_everything() {
        runtime().block_on(async {
            let (ours, mut theirs) = tokio::io::duplex(1024);
            let mut io = WriteDeadline::new(ours, Duration::from_millis(100));
            let reader = tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 512];
                loop {
                    // Slower than the deadline in all, never stalled as long.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    match theirs.read(&mut buf).await.unwrap() {
                        0 => return got,
                        n => got.extend_from_slice(&buf[..n]),
                    }
                }
            });
            io.write_all(&[7; 16 * 1024]).await.unwrap();
            io.shutdown().await.unwrap();
            drop(io);
            assert_eq!(reader.await.unwrap().len(), 16 * 1024);
        });
    }
}
