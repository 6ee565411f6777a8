//! Property tests of the client stream decoder (the `client_decoder` fuzz
//! target checks the same properties with coverage guidance).

use proptest::prelude::*;
use wire::client::{
    decode_header, encode_frame, FrameDecoder, FrameError, FrameKind, Header, Peer, HEADER_LEN,
};

type Frames = Vec<(Header, Vec<u8>)>;

/// The reference: decode a whole stream in one pass with `decode_header`.
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

/// Feeds `stream` in chunks of the given sizes (cycled), alternating between
/// `extend` and `read_buf`/`advance`, draining frames after each chunk.
fn split_reads(
    stream: &[u8],
    from: Peer,
    max_body: u32,
    chunk_lens: &[usize],
) -> (Frames, Option<FrameError>) {
    let limit = HEADER_LEN + max_body as usize;
    let mut decoder = FrameDecoder::new(from, max_body);
    let mut frames = Vec::new();
    let mut rest = stream;
    let mut round = 0usize;
    while !rest.is_empty() {
        let chunk_len = chunk_lens[round % chunk_lens.len()].min(rest.len());
        let chunk = &rest[..chunk_len];
        let taken = if round.is_multiple_of(2) {
            decoder.extend(chunk)
        } else {
            let spare = decoder.read_buf();
            let n = spare.len().min(chunk.len());
            spare[..n].copy_from_slice(&chunk[..n]);
            decoder.advance(n);
            n
        };
        round += 1;
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
        assert!(taken > 0 || drained > 0, "decoder stalled");
    }
    (frames, None)
}

fn frame_strategy(from: Peer, max_body: u32) -> impl Strategy<Value = (Header, Vec<u8>)> {
    let kinds = match from {
        Peer::Client => vec![FrameKind::Request],
        Peer::Server => vec![FrameKind::Response, FrameKind::Push, FrameKind::Error],
    };
    (
        proptest::sample::select(kinds),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..=max_body as usize),
    )
        .prop_map(|(kind, route_id, seq, body)| {
            let header = Header {
                kind,
                route_id,
                seq,
                body_len: body.len() as u32,
            };
            (header, body)
        })
}

fn peer_strategy() -> impl Strategy<Value = Peer> {
    prop_oneof![Just(Peer::Client), Just(Peer::Server)]
}

fn valid_stream_strategy() -> impl Strategy<Value = (Peer, u32, Frames)> {
    (peer_strategy(), 0u32..6000).prop_flat_map(|(from, max_body)| {
        (
            Just(from),
            Just(max_body),
            proptest::collection::vec(frame_strategy(from, max_body), 0..12),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn split_reads_of_valid_frames_give_back_the_frames(
        (from, max_body, frames) in valid_stream_strategy(),
        chunk_lens in proptest::collection::vec(1usize..9000, 1..8),
    ) {
        let mut stream = Vec::new();
        for (header, body) in &frames {
            encode_frame(&mut stream, header.kind, header.route_id, header.seq, body);
        }
        prop_assert_eq!(split_reads(&stream, from, max_body, &chunk_lens), (frames, None));
    }

    #[test]
    fn arbitrary_bytes_match_the_one_shot_decode(
        from in peer_strategy(),
        max_body in 0u32..600,
        prefix_frames in 0usize..3,
        noise in proptest::collection::vec(any::<u8>(), 0..2000),
        chunk_lens in proptest::collection::vec(1usize..700, 1..8),
    ) {
        // A few valid frames first, so the noise also lands mid-stream.
        let kind = match from {
            Peer::Client => FrameKind::Request,
            Peer::Server => FrameKind::Push,
        };
        let mut stream = Vec::new();
        for seq in 0..prefix_frames {
            encode_frame(&mut stream, kind, 1, seq as u32, &noise[..noise.len().min(max_body as usize)]);
        }
        stream.extend_from_slice(&noise);
        let expected = one_shot(&stream, from, max_body);
        prop_assert_eq!(split_reads(&stream, from, max_body, &chunk_lens), expected);
    }

    #[test]
    fn a_valid_prefix_then_one_violation_reports_it_after_the_prefix(
        (from, max_body, frames) in valid_stream_strategy(),
        chunk_lens in proptest::collection::vec(1usize..9000, 1..8),
        violation in 0u8..4,
    ) {
        let mut stream = Vec::new();
        for (header, body) in &frames {
            encode_frame(&mut stream, header.kind, header.route_id, header.seq, body);
        }
        let kind = match from {
            Peer::Client => FrameKind::Request,
            Peer::Server => FrameKind::Response,
        };
        let mut bad = Header { kind, route_id: 1, seq: 1, body_len: 0 }.encode();
        let expected = match violation {
            0 => { bad[0] = b'X'; FrameError::BadMagic([b'X', b'T']) }
            1 => { bad[2] = 9; FrameError::BadVersion(9) }
            2 => {
                // The other direction's kind.
                let wrong = match from { Peer::Client => 2, Peer::Server => 1 };
                bad[3] = wrong;
                FrameError::BadKind(wrong)
            }
            _ => {
                bad[12..16].copy_from_slice(&(max_body + 1).to_le_bytes());
                FrameError::BodyTooLarge { body_len: max_body + 1, max_body }
            }
        };
        stream.extend_from_slice(&bad);
        prop_assert_eq!(
            split_reads(&stream, from, max_body, &chunk_lens),
            (frames, Some(expected))
        );
    }
}
