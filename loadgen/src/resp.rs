//! A small sans-IO RESP2 codec, so loadgen can drive Redis with the same
//! client it drives routerd with: commands go out as arrays of bulk
//! strings, replies come in through a bounded buffer cut at arbitrary points.
//!
//! It reads the replies loadgen's commands (PING, INCR, GET) produce: simple
//! strings, errors, integers and bulk strings, the null bulk string
//! included. An array reply is refused as unsupported rather than half
//! parsed. Any decoding error is final, as in `wire::client::FrameDecoder`:
//! the stream cannot be resynchronised, so the connection must be closed.

use std::fmt::Write as _;

/// Longest simple-string, error or integer line accepted, CRLF excluded.
/// Redis's own lines are far shorter; past it the stream is refused rather
/// than buffered without end.
pub const LINE_MAX: usize = 4096;

/// The buffer a new decoder starts with; it grows only for a bulk string
/// whose length was already checked against the decoder's bound.
pub const INITIAL_BUFFER_LEN: usize = 4096;

/// Appends one command, `*<n>\r\n` then `$<len>\r\n<arg>\r\n` per argument.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    let mut digits = String::with_capacity(24);
    let _ = write!(digits, "*{}\r\n", args.len());
    out.extend_from_slice(digits.as_bytes());
    for arg in args {
        digits.clear();
        let _ = write!(digits, "${}\r\n", arg.len());
        out.extend_from_slice(digits.as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// One decoded reply, borrowing its bytes from the decoder's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `+OK`, `+PONG`.
    Simple(&'a [u8]),
    /// `-ERR ...`, `-WRONGTYPE ...`: the text after the dash.
    Error(&'a [u8]),
    /// `:5`.
    Integer(i64),
    /// `$3\r\nabc`, or `$-1` (None): a key that does not exist.
    Bulk(Option<&'a [u8]>),
}

/// Why a reply stream was refused. Every variant is final.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RespError {
    #[error("unknown RESP type byte {0:#04x}")]
    UnknownType(u8),
    #[error("array replies are not supported by this client")]
    ArrayUnsupported,
    #[error("a reply line longer than {LINE_MAX} bytes")]
    LineTooLong,
    #[error("a CR not followed by LF in a reply line")]
    BareCarriageReturn,
    #[error("a malformed integer")]
    BadInteger,
    #[error("a bulk string length out of bounds")]
    BulkLength,
    #[error("a bulk string not followed by CRLF")]
    BulkTerminator,
}

/// Where a complete reply sits in the buffer, found before it is borrowed.
#[derive(Clone, Copy, Debug)]
enum Parsed {
    Simple { from: usize, to: usize },
    Error { from: usize, to: usize },
    Integer(i64),
    Bulk(Option<(usize, usize)>),
}

/// An incremental decoder for one connection's replies.
///
/// Invariants: `start <= end <= buf.len() <= limit`; `buf[start..end]` are
/// received bytes not yet returned as replies; a complete reply is at most
/// `limit` bytes, so after `next_reply` returns `Ok(None)` there is room to
/// read into.
#[derive(Debug)]
pub struct RespDecoder {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    bulk_max: usize,
    limit: usize,
    failed: Option<RespError>,
}

impl RespDecoder {
    /// A decoder refusing bulk strings longer than `bulk_max` bytes.
    pub fn new(bulk_max: usize) -> RespDecoder {
        // The longest reply: a bulk header line, the bulk, its CRLF; or the
        // longest line with its CRLF.
        let limit = (LINE_MAX + 2).max(24 + bulk_max + 2);
        RespDecoder {
            buf: vec![0u8; INITIAL_BUFFER_LEN.min(limit)],
            start: 0,
            end: 0,
            bulk_max,
            limit,
            failed: None,
        }
    }

    /// Spare space to read socket bytes into; report the count with
    /// [`advance`](Self::advance). Empty only once the decoder has failed.
    pub fn read_buf(&mut self) -> &mut [u8] {
        if self.failed.is_some() {
            return &mut [];
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let spare = self.buf.len() - self.end;
        if spare < self.buf.len() / 4 && self.start > 0 {
            // At most one partial reply moves.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() && self.buf.len() < self.limit {
            let grown = self.buf.len().saturating_mul(2).min(self.limit);
            self.buf.resize(grown, 0);
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` bytes of the last [`read_buf`](Self::read_buf) as filled.
    ///
    /// # Panics
    ///
    /// If `n` exceeds that slice: the caller's read reported more bytes than
    /// it had room for, a local bug.
    pub fn advance(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.end, "advance past read_buf");
        self.end += n;
    }

    /// Copies what fits of `bytes`; returns how many it took (tests).
    #[cfg(test)]
    pub fn extend(&mut self, bytes: &[u8]) -> usize {
        let spare = self.read_buf();
        let n = spare.len().min(bytes.len());
        spare[..n].copy_from_slice(&bytes[..n]);
        self.advance(n);
        n
    }

    /// The next complete reply, `Ok(None)` if more bytes are needed, or the
    /// first violation (returned forever after).
    pub fn next_reply(&mut self) -> Result<Option<Reply<'_>>, RespError> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        let (parsed, consumed_to) = match self.parse() {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(None),
            Err(error) => {
                self.failed = Some(error);
                return Err(error);
            }
        };
        self.start = consumed_to;
        let buf = &self.buf;
        Ok(Some(match parsed {
            Parsed::Simple { from, to } => Reply::Simple(&buf[from..to]),
            Parsed::Error { from, to } => Reply::Error(&buf[from..to]),
            Parsed::Integer(value) => Reply::Integer(value),
            Parsed::Bulk(None) => Reply::Bulk(None),
            Parsed::Bulk(Some((from, to))) => Reply::Bulk(Some(&buf[from..to])),
        }))
    }

    fn parse(&self) -> Result<Option<(Parsed, usize)>, RespError> {
        let Some(&kind) = self.buf[self.start..self.end].first() else {
            return Ok(None);
        };
        let line_from = self.start + 1;
        let Some(line_to) = self.find_line_end(line_from)? else {
            return Ok(None);
        };
        let after_line = line_to + 2;
        let line = &self.buf[line_from..line_to];
        match kind {
            b'+' => Ok(Some((
                Parsed::Simple {
                    from: line_from,
                    to: line_to,
                },
                after_line,
            ))),
            b'-' => Ok(Some((
                Parsed::Error {
                    from: line_from,
                    to: line_to,
                },
                after_line,
            ))),
            b':' => Ok(Some((Parsed::Integer(parse_i64(line)?), after_line))),
            b'$' => self.parse_bulk(parse_i64(line)?, after_line),
            b'*' => Err(RespError::ArrayUnsupported),
            other => Err(RespError::UnknownType(other)),
        }
    }

    fn parse_bulk(&self, len: i64, data_from: usize) -> Result<Option<(Parsed, usize)>, RespError> {
        if len == -1 {
            return Ok(Some((Parsed::Bulk(None), data_from)));
        }
        let len = usize::try_from(len).map_err(|_| RespError::BulkLength)?;
        if len > self.bulk_max {
            return Err(RespError::BulkLength);
        }
        let data_to = data_from + len;
        if self.end < data_to + 2 {
            return Ok(None);
        }
        if &self.buf[data_to..data_to + 2] != b"\r\n" {
            return Err(RespError::BulkTerminator);
        }
        Ok(Some((
            Parsed::Bulk(Some((data_from, data_to))),
            data_to + 2,
        )))
    }

    /// The index of the CR ending the line that starts at `from`, if the
    /// whole line (CRLF included) is in.
    fn find_line_end(&self, from: usize) -> Result<Option<usize>, RespError> {
        let window_end = self.end.min(from + LINE_MAX + 1);
        match self.buf[from..window_end].iter().position(|&b| b == b'\r') {
            Some(offset) => {
                let cr = from + offset;
                match self.buf[cr + 1..self.end].first() {
                    None => Ok(None),
                    Some(b'\n') => Ok(Some(cr)),
                    Some(_) => Err(RespError::BareCarriageReturn),
                }
            }
            None if self.end - from > LINE_MAX => Err(RespError::LineTooLong),
            None => Ok(None),
        }
    }
}

/// A decimal i64: an optional minus and 1 to 19 digits, nothing else.
fn parse_i64(text: &[u8]) -> Result<i64, RespError> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return Err(RespError::BadInteger);
    }
    let mut magnitude: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(RespError::BadInteger);
        }
        magnitude = magnitude * 10 + i128::from(d - b'0');
    }
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| RespError::BadInteger)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_replies(decoder: &mut RespDecoder) -> Vec<String> {
        let mut seen = Vec::new();
        while let Some(reply) = decoder.next_reply().expect("valid stream") {
            seen.push(format!("{reply:?}"));
        }
        seen
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"INCR", b"player:7"]);
        encode_command(&mut out, &[b"PING"]);
        assert_eq!(
            out,
            b"*2\r\n$4\r\nINCR\r\n$8\r\nplayer:7\r\n*1\r\n$4\r\nPING\r\n"
        );
    }

    #[test]
    fn every_reply_type_and_pipelined_replies() {
        let mut decoder = RespDecoder::new(1024);
        let stream = b"+PONG\r\n:5\r\n:-12\r\n$3\r\nabc\r\n$-1\r\n$0\r\n\r\n-ERR wrong type\r\n";
        assert_eq!(decoder.extend(stream), stream.len());
        assert_eq!(decoder.next_reply(), Ok(Some(Reply::Simple(b"PONG"))));
        assert_eq!(decoder.next_reply(), Ok(Some(Reply::Integer(5))));
        assert_eq!(decoder.next_reply(), Ok(Some(Reply::Integer(-12))));
        assert_eq!(decoder.next_reply(), Ok(Some(Reply::Bulk(Some(b"abc")))));
        assert_eq!(decoder.next_reply(), Ok(Some(Reply::Bulk(None))));
        assert_eq!(decoder.next_reply(), Ok(Some(Reply::Bulk(Some(b"")))));
        assert_eq!(
            decoder.next_reply(),
            Ok(Some(Reply::Error(b"ERR wrong type")))
        );
        assert_eq!(decoder.next_reply(), Ok(None));
    }

    /// Every cut of a stream, fed byte by byte, gives the same replies as
    /// the stream fed at once.
    #[test]
    fn partial_reads_at_every_byte() {
        let stream: &[u8] = b"+OK\r\n:123456789\r\n$5\r\nhello\r\n$-1\r\n-ERR x\r\n";
        let mut whole = RespDecoder::new(64);
        whole.extend(stream);
        let want = all_replies(&mut whole);
        assert_eq!(want.len(), 5);
        for cut in 0..=stream.len() {
            let mut decoder = RespDecoder::new(64);
            let mut got = Vec::new();
            decoder.extend(&stream[..cut]);
            got.extend(all_replies(&mut decoder));
            for &byte in &stream[cut..] {
                assert_eq!(decoder.extend(&[byte]), 1);
                got.extend(all_replies(&mut decoder));
            }
            assert_eq!(got, want, "cut at {cut}");
        }
    }

    #[test]
    fn a_bulk_larger_than_the_first_buffer_grows_it_within_the_bound() {
        let bulk = vec![b'x'; 10_000];
        let mut stream = format!("${}\r\n", bulk.len()).into_bytes();
        stream.extend_from_slice(&bulk);
        stream.extend_from_slice(b"\r\n");
        let mut decoder = RespDecoder::new(16_384);
        let mut fed = 0;
        let mut replies = 0;
        while fed < stream.len() {
            fed += decoder.extend(&stream[fed..]);
            while let Some(reply) = decoder.next_reply().expect("valid") {
                assert_eq!(reply, Reply::Bulk(Some(bulk.as_slice())));
                replies += 1;
            }
        }
        assert_eq!(replies, 1);
        assert!(decoder.buf.len() <= decoder.limit);
    }

    #[test]
    fn violations_are_final() {
        let cases: [(&[u8], RespError); 8] = [
            (b"?what\r\n", RespError::UnknownType(b'?')),
            (b"*1\r\n$4\r\nPING\r\n", RespError::ArrayUnsupported),
            (b":12a\r\n", RespError::BadInteger),
            (b":99999999999999999999\r\n", RespError::BadInteger),
            (b":\r\n", RespError::BadInteger),
            (b"$-2\r\n", RespError::BulkLength),
            (b"$3\r\nabcd\r\n", RespError::BulkTerminator),
            (b"+PO\rNG\r\n", RespError::BareCarriageReturn),
        ];
        for (stream, error) in cases {
            let mut decoder = RespDecoder::new(64);
            decoder.extend(stream);
            assert_eq!(decoder.next_reply(), Err(error), "{stream:?}");
            assert_eq!(decoder.next_reply(), Err(error), "errors are final");
            assert!(
                decoder.read_buf().is_empty(),
                "a failed stream takes no bytes"
            );
        }
        let mut decoder = RespDecoder::new(64);
        decoder.extend(b"$65\r\n");
        assert_eq!(decoder.next_reply(), Err(RespError::BulkLength));
    }

    #[test]
    fn an_endless_line_is_refused_at_the_bound() {
        let mut decoder = RespDecoder::new(64);
        let mut fed = 0usize;
        let line = vec![b'a'; LINE_MAX + 16];
        assert_eq!(decoder.extend(b"+"), 1);
        let result = loop {
            match decoder.next_reply() {
                Ok(None) => {}
                other => break other,
            }
            let n = decoder.extend(&line[fed..]);
            assert!(n > 0, "room must stay while the line is within the bound");
            fed += n;
        };
        assert_eq!(result, Err(RespError::LineTooLong));
        assert!(fed <= LINE_MAX + 2, "buffered {fed}");
    }
}
