//! The incremental client frame decoder: a bounded read buffer that turns a
//! byte stream, cut at arbitrary points, into validated frames.

use super::header::{
    decode_header_versioned, FrameError, Header, Peer, HEADER_LEN, REQUEST_KEY_LEN,
};

/// The buffer a decoder takes when it first needs one. Most frames are
/// small (pings, counters, room messages), so a connection costs this much
/// until a larger frame arrives; the buffer then grows, at most to
/// `HEADER_LEN + max_body`. A new decoder holds none: a server that finds
/// whole frames in what it received ([`FrameDecoder::next_frame_in`]) never
/// needs one, which is most of an idle connection's memory.
pub const INITIAL_BUFFER_LEN: usize = 4096;

/// One decoded frame, borrowing its body from the decoder's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// The validated header.
    pub header: Header,
    /// The route's body, valid until the next `&mut` call on the decoder:
    /// `header.body_len` bytes, less the request key of a version-2 REQUEST.
    pub body: &'a [u8],
    /// A version-2 REQUEST's request key (`Some(0)`: version 2 without a
    /// key); `None` for every version-1 frame.
    pub request_key: Option<u64>,
}

impl<'a> FrameRef<'a> {
    /// The frame of `header` whose whole body is `body`, its request key
    /// split off when the header was version 2.
    fn split(header: Header, version_2: bool, body: &'a [u8]) -> FrameRef<'a> {
        match body.split_first_chunk::<REQUEST_KEY_LEN>() {
            Some((key, rest)) if version_2 => FrameRef {
                header,
                body: rest,
                request_key: Some(u64::from_le_bytes(*key)),
            },
            _ => FrameRef {
                header,
                body,
                request_key: None,
            },
        }
    }
}

/// An incremental, allocation-free-on-the-hot-path decoder for one
/// connection's byte stream. See the module documentation of
/// [`crate::client`] for the read loop.
///
/// Invariants: `start <= end <= buf.len() <= limit`; `buf[start..end]` are
/// received bytes not yet returned as frames; the buffer only ever grows to
/// hold a frame whose header was already validated against `max_body`.
#[derive(Debug)]
pub struct FrameDecoder {
    /// Fully initialised storage; its length is the current capacity. Being
    /// initialised lets `read_buf` hand out `&mut [u8]` without `unsafe`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    from: Peer,
    max_body: u32,
    /// Set on the first violation: the stream cannot be resynchronised, so
    /// every later call reports the same error.
    failed: Option<FrameError>,
    /// Whether a client's version-2 REQUEST is accepted.
    version_2: bool,
}

impl FrameDecoder {
    /// A decoder for bytes sent by `from`, rejecting bodies over `max_body`.
    pub fn new(from: Peer, max_body: u32) -> FrameDecoder {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            end: 0,
            from,
            max_body,
            failed: None,
            version_2: false,
        }
    }

    /// This decoder, accepting a client's version-2 REQUEST too (the
    /// gateway's; docs/protocol.md, "Protocol version 2").
    pub fn accept_version_2(mut self) -> FrameDecoder {
        self.version_2 = true;
        self
    }

    /// The largest body this decoder accepts, as given to [`Self::new`].
    pub fn max_body(&self) -> u32 {
        self.max_body
    }

    /// `HEADER_LEN + max_body`: the largest frame, so the largest buffer.
    /// Worked out, not kept: every connection of a gateway holds a decoder.
    fn limit(&self) -> usize {
        HEADER_LEN.saturating_add(usize::try_from(self.max_body).unwrap_or(usize::MAX))
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered_len(&self) -> usize {
        self.end - self.start
    }

    /// Bytes of buffer the decoder holds (0 until it first needs one).
    pub fn buffer_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The next frame whole in `bytes`, borrowed from them without a copy,
    /// with `bytes` advanced past it; `Ok(None)` if `bytes` holds no whole
    /// frame, or if this decoder holds bytes of its own (they come first:
    /// give `bytes` to [`extend`](Self::extend) then). A header that fails
    /// validation fails the decoder as [`next_frame`](Self::next_frame)
    /// would.
    pub fn next_frame_in<'a>(
        &mut self,
        bytes: &mut &'a [u8],
    ) -> Result<Option<FrameRef<'a>>, FrameError> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        if self.buffered_len() > 0 {
            return Ok(None);
        }
        self.release_grown();
        let Some((header_bytes, after)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let decoded =
            decode_header_versioned(header_bytes, self.from, self.max_body, self.version_2);
        let (header, version_2) = match decoded {
            Ok(decoded) => decoded,
            Err(error) => {
                self.failed = Some(error);
                return Err(error);
            }
        };
        let Some((body, rest)) = after.split_at_checked(header.body_len as usize) else {
            return Ok(None);
        };
        *bytes = rest;
        Ok(Some(FrameRef::split(header, version_2, body)))
    }

    /// Spare space to read socket bytes into; report how many were written
    /// with [`advance`](Self::advance).
    ///
    /// After [`next_frame`](Self::next_frame) has returned `Ok(None)`, the
    /// returned slice is never empty, so a read of 0 bytes into it means end
    /// of stream. It is empty only when complete frames are still waiting or
    /// the decoder has failed; drain `next_frame` first.
    pub fn read_buf(&mut self) -> &mut [u8] {
        if !self.make_room() {
            return &mut [];
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` bytes of the last [`read_buf`](Self::read_buf) as filled.
    ///
    /// # Panics
    ///
    /// If `n` exceeds the length of that slice: the caller's read reported
    /// more bytes than it was given room for, which is a local bug.
    pub fn advance(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.end, "advance past read_buf");
        self.end += n;
    }

    /// Copies as much of `bytes` as fits and returns how many bytes it took.
    /// Call [`next_frame`](Self::next_frame) until `Ok(None)` before offering
    /// the rest: it returns 0 only when frames are waiting or the decoder has
    /// failed.
    pub fn extend(&mut self, bytes: &[u8]) -> usize {
        let spare = self.read_buf();
        let n = spare.len().min(bytes.len());
        spare[..n].copy_from_slice(&bytes[..n]);
        self.advance(n);
        n
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or the
    /// first protocol violation. A header is validated as soon as its 16
    /// bytes are in, before any of its body is awaited. After an error the
    /// stream is unusable and the same error is returned forever.
    pub fn next_frame(&mut self) -> Result<Option<FrameRef<'_>>, FrameError> {
        let (header, version_2) = match self.peek_header() {
            Ok(Some(decoded)) => decoded,
            Ok(None) => return Ok(None),
            Err(error) => return Err(error),
        };
        // `body_len <= max_body` was checked, so this cannot overflow `limit`.
        let frame_len = HEADER_LEN + header.body_len as usize;
        if self.end - self.start < frame_len {
            return Ok(None);
        }
        let body_start = self.start + HEADER_LEN;
        let body_end = self.start + frame_len;
        self.start = body_end;
        Ok(Some(FrameRef::split(
            header,
            version_2,
            &self.buf[body_start..body_end],
        )))
    }

    /// The header at `start`, validated, if all 16 of its bytes are in.
    fn peek_header(&mut self) -> Result<Option<(Header, bool)>, FrameError> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        if self.end - self.start < HEADER_LEN {
            return Ok(None);
        }
        let mut header_bytes = [0u8; HEADER_LEN];
        header_bytes.copy_from_slice(&self.buf[self.start..self.start + HEADER_LEN]);
        match decode_header_versioned(&header_bytes, self.from, self.max_body, self.version_2) {
            Ok(decoded) => Ok(Some(decoded)),
            Err(error) => {
                self.failed = Some(error);
                Err(error)
            }
        }
    }

    /// Ensures the partial frame at `start` can be completed in place:
    /// compacts consumed bytes away lazily (only when the tail is short) and
    /// grows the buffer only for a frame whose header already passed
    /// validation.
    /// Returns false if the stream has failed and must get no more bytes.
    fn make_room(&mut self) -> bool {
        if self.start == self.end {
            // Nothing pending: rewinding is free.
            self.start = 0;
            self.end = 0;
            self.release_grown();
        }
        let needed = match self.peek_header() {
            Ok(Some((header, _))) => HEADER_LEN + header.body_len as usize,
            Ok(None) => HEADER_LEN,
            // A failed stream gets no more room: it is about to be closed.
            Err(_) => return false,
        };
        let buffered = self.end - self.start;
        if buffered >= needed {
            // A complete frame is waiting for `next_frame`; reading more now
            // would only grow the backlog.
            return true;
        }
        if self.buf.len() < needed {
            debug_assert!(needed <= self.limit());
            let grown = needed
                .max(self.buf.len().saturating_mul(2))
                .max(INITIAL_BUFFER_LEN)
                .min(self.limit());
            self.compact();
            self.buf.resize(grown, 0);
        } else if self.start + needed > self.buf.len() || self.spare_is_small() {
            self.compact();
        }
        debug_assert!(self.start + needed <= self.buf.len());
        true
    }

    /// Gives back a buffer grown past its first size for a large frame,
    /// once no byte waits in it: a connection that once sent a frame near
    /// `max_body` would otherwise hold that much for the rest of its life.
    fn release_grown(&mut self) {
        if self.start == self.end && self.buf.len() > INITIAL_BUFFER_LEN {
            self.buf = Vec::new();
            self.start = 0;
            self.end = 0;
        }
    }

    /// Compacting is a memmove of at most one partial frame; doing it only
    /// when less than a quarter of the buffer is free keeps reads large
    /// without moving bytes on every call.
    fn spare_is_small(&self) -> bool {
        self.start > 0 && self.buf.len() - self.end < self.buf.len() / 4
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{encode_frame, FrameKind};

    #[test]
    fn whole_frames_in_received_bytes_need_no_buffer() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, 7, 1, b"one");
        encode_frame(&mut bytes, FrameKind::Request, 7, 2, b"two");
        encode_frame(&mut bytes, FrameKind::Request, 7, 3, b"three");
        let cut = bytes.len() - 2;
        let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16);
        assert_eq!(decoder.buffer_bytes(), 0);
        let mut rest = &bytes[..cut];
        let first = decoder.next_frame_in(&mut rest).unwrap().unwrap();
        assert_eq!((first.header.seq, first.body), (1, &b"one"[..]));
        let second = decoder.next_frame_in(&mut rest).unwrap().unwrap();
        assert_eq!((second.header.seq, second.body), (2, &b"two"[..]));
        // The third is cut: it waits in the decoder's own buffer.
        assert_eq!(decoder.next_frame_in(&mut rest).unwrap(), None);
        assert_eq!(decoder.buffer_bytes(), 0);
        assert_eq!(decoder.extend(rest), rest.len());
        assert_eq!(decoder.buffer_bytes(), INITIAL_BUFFER_LEN);
        assert_eq!(decoder.next_frame().unwrap(), None);
        // Buffered bytes come first: a later whole frame waits behind them.
        let mut tail = &bytes[cut..];
        assert_eq!(decoder.next_frame_in(&mut tail).unwrap(), None);
        assert_eq!(decoder.extend(tail), 2);
        let third = decoder.next_frame().unwrap().unwrap();
        assert_eq!((third.header.seq, third.body), (3, &b"three"[..]));
    }

    #[test]
    fn a_drained_decoder_gives_back_a_grown_buffer() {
        // Gives `bytes` to the decoder, as many reads as it takes.
        fn feed(decoder: &mut FrameDecoder, bytes: &[u8]) {
            let mut fed = 0;
            while fed < bytes.len() {
                let taken = decoder.extend(&bytes[fed..]);
                assert!(taken > 0, "the decoder took nothing");
                fed += taken;
            }
        }
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, 7, 1, &[5u8; 40_000]);
        let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16);
        // Cut across receive buffers: the frame is put together in the
        // decoder's own buffer, which grows to hold it.
        let mut rest = &bytes[..16_384];
        assert_eq!(decoder.next_frame_in(&mut rest).unwrap(), None);
        feed(&mut decoder, &bytes);
        let frame = decoder.next_frame().unwrap().unwrap();
        assert_eq!(frame.body.len(), 40_000);
        assert!(decoder.buffer_bytes() >= 40_000);
        // Whole frames after it need no buffer: the grown one is let go.
        let mut small = Vec::new();
        encode_frame(&mut small, FrameKind::Request, 7, 2, b"ping");
        let mut rest = &small[..];
        let next = decoder.next_frame_in(&mut rest).unwrap().unwrap();
        assert_eq!(next.body, b"ping");
        assert_eq!(decoder.buffer_bytes(), 0);
        // A reader that reads into the decoder gets its first size back.
        feed(&mut decoder, &bytes);
        assert!(decoder.next_frame().unwrap().is_some());
        assert!(!decoder.read_buf().is_empty());
        assert_eq!(decoder.buffer_bytes(), INITIAL_BUFFER_LEN);
    }

    #[test]
    fn a_bad_header_in_received_bytes_fails_the_decoder() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, 7, 1, &[0u8; 65]);
        let mut decoder = FrameDecoder::new(Peer::Client, 64);
        let mut rest = &bytes[..];
        let error = decoder.next_frame_in(&mut rest).unwrap_err();
        assert_eq!(rest.len(), bytes.len());
        assert_eq!(decoder.next_frame(), Err(error));
        assert_eq!(decoder.next_frame_in(&mut rest), Err(error));
    }

    fn request(route_id: u32, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_frame(&mut out, FrameKind::Request, route_id, seq, body);
        out
    }

    fn drain(decoder: &mut FrameDecoder) -> Vec<(Header, Vec<u8>)> {
        let mut frames = Vec::new();
        while let Some(frame) = decoder.next_frame().expect("valid stream") {
            frames.push((frame.header, frame.body.to_vec()));
        }
        frames
    }

    #[test]
    fn byte_at_a_time() {
        let mut stream = request(1, 7, b"ping");
        stream.extend(request(22, 8, &[0xAB; 300]));
        stream.extend(request(10, 9, b""));
        let mut decoder = FrameDecoder::new(Peer::Client, 1024);
        let mut frames = Vec::new();
        for byte in &stream {
            assert_eq!(decoder.extend(std::slice::from_ref(byte)), 1);
            frames.extend(drain(&mut decoder));
        }
        assert_eq!(frames.len(), 3);
        assert_eq!((frames[0].0.route_id, frames[0].0.seq), (1, 7));
        assert_eq!(frames[0].1, b"ping");
        assert_eq!(frames[1].1, vec![0xAB; 300]);
        assert_eq!(frames[2].0.body_len, 0);
        assert_eq!(decoder.buffered_len(), 0);
    }

    #[test]
    fn read_buf_and_advance() {
        let stream = request(11, 1, &8i64.to_le_bytes());
        let mut decoder = FrameDecoder::new(Peer::Client, DEFAULT_MAX);
        let spare = decoder.read_buf();
        assert!(spare.len() >= stream.len());
        spare[..stream.len()].copy_from_slice(&stream);
        decoder.advance(stream.len());
        let frame = decoder.next_frame().expect("valid").expect("complete");
        assert_eq!(frame.header.route_id, 11);
        assert_eq!(frame.body, 8i64.to_le_bytes());
        assert_eq!(decoder.next_frame(), Ok(None));
    }

    const DEFAULT_MAX: u32 = crate::client::DEFAULT_MAX_BODY;

    #[test]
    fn body_exactly_max_body_is_accepted_and_grows_to_limit() {
        let max_body = 10_000u32;
        let stream = request(1, 1, &vec![3u8; max_body as usize]);
        let mut decoder = FrameDecoder::new(Peer::Client, max_body);
        let mut offered = &stream[..];
        let mut frames = Vec::new();
        while !offered.is_empty() {
            let taken = decoder.extend(offered);
            assert!(taken > 0, "room must exist while a frame is partial");
            offered = &offered[taken..];
            frames.extend(drain(&mut decoder));
        }
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].1.len(), max_body as usize);
        assert_eq!(decoder.buf.len(), HEADER_LEN + max_body as usize);
    }

    #[test]
    fn oversized_body_is_rejected_before_any_body_byte_is_buffered() {
        let max_body = 100_000u32;
        let mut decoder = FrameDecoder::new(Peer::Client, max_body);
        let header = Header {
            kind: FrameKind::Request,
            route_id: 1,
            seq: 1,
            body_len: max_body + 1,
        };
        assert_eq!(decoder.extend(&header.encode()), HEADER_LEN);
        let expected = FrameError::BodyTooLarge {
            body_len: max_body + 1,
            max_body,
        };
        assert_eq!(decoder.next_frame(), Err(expected));
        // No room is offered for the body and nothing grew.
        assert!(decoder.read_buf().is_empty());
        assert_eq!(decoder.extend(&[0u8; 64]), 0);
        assert_eq!(decoder.buffered_len(), HEADER_LEN);
        assert_eq!(decoder.buf.len(), INITIAL_BUFFER_LEN);
        assert_eq!(decoder.next_frame(), Err(expected));
    }

    #[test]
    fn oversized_header_is_rejected_even_before_next_frame() {
        // A reader that calls read_buf before next_frame must not be handed
        // room sized by the bad header either.
        let mut decoder = FrameDecoder::new(Peer::Client, 16);
        let mut bytes = request(1, 1, b"").clone();
        bytes[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        decoder.extend(&bytes);
        assert!(decoder.read_buf().is_empty());
        assert!(matches!(
            decoder.next_frame(),
            Err(FrameError::BodyTooLarge { .. })
        ));
    }

    #[test]
    fn violation_after_good_frames_is_reported_after_them() {
        let mut stream = request(1, 1, b"a");
        let mut bad = request(1, 2, b"b");
        bad[0] = b'X';
        stream.extend(&bad);
        let mut decoder = FrameDecoder::new(Peer::Client, 64);
        decoder.extend(&stream);
        let first = decoder
            .next_frame()
            .expect("first is valid")
            .expect("complete");
        assert_eq!(first.body, b"a");
        assert_eq!(
            decoder.next_frame(),
            Err(FrameError::BadMagic([b'X', b'T']))
        );
    }

    #[test]
    fn server_frames_decode_on_the_client_side() {
        let mut stream = Vec::new();
        encode_frame(&mut stream, FrameKind::Response, 1, 5, b"pong");
        encode_frame(&mut stream, FrameKind::Push, 101, 0, b"kicked");
        encode_frame(&mut stream, FrameKind::Error, 10, 6, &[3, 0]);
        let mut decoder = FrameDecoder::new(Peer::Server, 64);
        decoder.extend(&stream);
        let kinds: Vec<FrameKind> = drain(&mut decoder).iter().map(|f| f.0.kind).collect();
        assert_eq!(
            kinds,
            [FrameKind::Response, FrameKind::Push, FrameKind::Error]
        );
        let mut decoder = FrameDecoder::new(Peer::Server, 64);
        decoder.extend(&request(1, 1, b""));
        assert_eq!(decoder.next_frame(), Err(FrameError::BadKind(1)));
    }

    #[test]
    fn compaction_keeps_partial_frames_intact() {
        // Frames of 1000 bytes through a 4096-byte buffer force the partial
        // frame to be moved to the front repeatedly.
        let mut stream = Vec::new();
        for seq in 0..50u32 {
            stream.extend(request(22, seq, &vec![seq as u8; 1000 - HEADER_LEN]));
        }
        let mut decoder = FrameDecoder::new(Peer::Client, 8000);
        let mut offered = &stream[..];
        let mut seqs = Vec::new();
        while !offered.is_empty() {
            let chunk = offered.len().min(1500);
            let taken = decoder.extend(&offered[..chunk]);
            offered = &offered[taken..];
            for (header, body) in drain(&mut decoder) {
                assert!(body.iter().all(|b| *b == header.seq as u8));
                seqs.push(header.seq);
            }
        }
        assert_eq!(seqs, (0..50).collect::<Vec<_>>());
        assert_eq!(decoder.buf.len(), INITIAL_BUFFER_LEN);
    }

    #[test]
    fn a_version_2_request_splits_its_key_off_in_place_and_buffered() {
        let mut bytes = Vec::new();
        crate::client::encode_keyed_request(&mut bytes, 11, 2, 0xABCD, b"body");
        encode_frame(&mut bytes, FrameKind::Request, 7, 3, b"v1");
        let mut decoder = FrameDecoder::new(Peer::Client, 64).accept_version_2();
        let mut rest = &bytes[..];
        let keyed = decoder.next_frame_in(&mut rest).unwrap().unwrap();
        assert_eq!(keyed.request_key, Some(0xABCD));
        assert_eq!((keyed.header.body_len, keyed.body), (12, &b"body"[..]));
        let plain = decoder.next_frame_in(&mut rest).unwrap().unwrap();
        assert_eq!((plain.request_key, plain.body), (None, &b"v1"[..]));
        // The same through the decoder's own buffer.
        let mut decoder = FrameDecoder::new(Peer::Client, 64).accept_version_2();
        assert_eq!(decoder.extend(&bytes), bytes.len());
        let keyed = decoder.next_frame().unwrap().unwrap();
        assert_eq!(
            (keyed.request_key, keyed.body),
            (Some(0xABCD), &b"body"[..])
        );
        // A decoder that does not accept version 2 refuses it.
        let mut decoder = FrameDecoder::new(Peer::Client, 64);
        decoder.extend(&bytes);
        assert_eq!(decoder.next_frame(), Err(FrameError::BadVersion(2)));
    }
}
