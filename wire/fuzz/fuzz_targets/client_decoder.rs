//! A byte stream, cut at fuzzer-chosen points, through `FrameDecoder` in
//! either direction must yield exactly the frames and the error a one-shot
//! decode of the whole stream yields, without panicking, and the decoder's
//! buffer must stay within `HEADER_LEN + max_body`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::client::{
    decode_header, encode_frame, FrameDecoder, FrameError, FrameKind, Header, Peer, HEADER_LEN,
};

type Frames = Vec<(Header, Vec<u8>)>;

fuzz_target!(|data: &[u8]| {
    let Some((&[mode, max_lo, max_hi, split_seed], rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let from = if mode & 1 == 0 {
        Peer::Client
    } else {
        Peer::Server
    };
    // Small limits reach the growth and BodyTooLarge paths quickly; 0 is a
    // legal (if useless) max_body.
    let max_body = u32::from(u16::from_le_bytes([max_lo, max_hi]));
    let stream = if mode & 2 == 0 {
        rest.to_vec()
    } else {
        structured_stream(rest, from)
    };
    let expected = one_shot(&stream, from, max_body);
    let actual = split_reads(&stream, from, max_body, split_seed, mode & 4 != 0);
    assert_eq!(actual, expected);
});

/// Valid frames for `from`, shaped by the input, so the fuzzer explores
/// long well-formed streams and not only the magic check.
fn structured_stream(mut input: &[u8], from: Peer) -> Vec<u8> {
    let mut stream = Vec::new();
    while let Some((&[kind, route, seq, len], rest)) = input.split_first_chunk::<4>() {
        let kind = match (from, kind % 3) {
            (Peer::Client, _) => FrameKind::Request,
            (Peer::Server, 0) => FrameKind::Response,
            (Peer::Server, 1) => FrameKind::Push,
            (Peer::Server, _) => FrameKind::Error,
        };
        let body_len = usize::from(len).min(rest.len());
        let (body, rest) = rest.split_at(body_len);
        encode_frame(&mut stream, kind, u32::from(route), u32::from(seq), body);
        input = rest;
    }
    stream
}

fn one_shot(stream: &[u8], from: Peer, max_body: u32) -> (Frames, Option<FrameError>) {
    let mut frames = Vec::new();
    let mut rest = stream;
    while let Some((head, after)) = rest.split_first_chunk::<HEADER_LEN>() {
        let header = match decode_header(head, from, max_body) {
            Ok(header) => header,
            Err(error) => return (frames, Some(error)),
        };
        let Some((body, after)) = after.split_at_checked(header.body_len as usize) else {
            break;
        };
        frames.push((header, body.to_vec()));
        rest = after;
    }
    (frames, None)
}

fn split_reads(
    stream: &[u8],
    from: Peer,
    max_body: u32,
    seed: u8,
    use_read_buf: bool,
) -> (Frames, Option<FrameError>) {
    let limit = HEADER_LEN + max_body as usize;
    let mut decoder = FrameDecoder::new(from, max_body);
    let mut frames = Vec::new();
    let mut rng = u32::from(seed) | 0x100;
    let mut rest = stream;
    while !rest.is_empty() {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        let chunk = &rest[..(1 + rng as usize % 300).min(rest.len())];
        let taken = if use_read_buf {
            let spare = decoder.read_buf();
            let n = spare.len().min(chunk.len());
            spare[..n].copy_from_slice(&chunk[..n]);
            decoder.advance(n);
            n
        } else {
            decoder.extend(chunk)
        };
        rest = &rest[taken..];
        assert!(decoder.read_buf().len() + decoder.buffered_len() <= limit);
        let mut drained = 0;
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    frames.push((frame.header, frame.body.to_vec()));
                    drained += 1;
                }
                Ok(None) => break,
                Err(error) => return (frames, Some(error)),
            }
        }
        // Room must exist whenever no frame is waiting, or a reader would
        // mistake the 0-byte read for end of stream.
        assert!(taken > 0 || drained > 0, "decoder stalled");
    }
    (frames, None)
}
