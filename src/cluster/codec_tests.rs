use super::*;
use wire::frame::Message;

const KEY: &[u8] = b"a key of this connection";
/// The receive buffer of `tuning/default.toml` (`cores.recv_buffer_bytes`):
/// what one receive hands the decoder at most.
const RECEIVE_BYTES: usize = 16 * 1024;

fn message(n: u8, body_len: usize) -> Message {
    Message::RouterReply {
        origin_node: 1,
        request_seq: u64::from(n),
        error_code: 0,
        body: vec![n; body_len],
    }
}

fn frame(n: u8) -> FrameBuf {
    FrameBuf::encode(&message(n, 50)).unwrap()
}

/// Two records: a message and a ping, then a message and a pong.
fn two_records() -> Vec<u8> {
    let mut sealer = Sealer::new(KEY);
    let mut bytes = Vec::new();
    sealer.message(&mut bytes, &frame(1));
    sealer.ping(&mut bytes, 77);
    sealer.seal(&mut bytes);
    sealer.message(&mut bytes, &frame(2));
    sealer.pong(&mut bytes, 78);
    sealer.seal(&mut bytes);
    bytes
}

fn describe(frame: LinkFrame<'_>) -> String {
    match frame {
        LinkFrame::Message(message) => format!("{message:?}"),
        LinkFrame::Ping(n) => format!("ping {n}"),
        LinkFrame::Pong(n) => format!("pong {n}"),
    }
}

fn decode_all(decoder: &mut LinkDecoder, bytes: &[u8], chunk: usize) -> Result<Vec<String>, LinkError> {
    let mut seen = Vec::new();
    for piece in bytes.chunks(chunk) {
        decoder.extend(piece);
        while let Some(frame) = decoder.next_frame()? {
            seen.push(describe(frame));
        }
    }
    Ok(seen)
}

#[test]
fn frames_survive_any_split() {
    let bytes = two_records();
    for chunk in [1, 3, 7, 16, 64, bytes.len()] {
        let seen = decode_all(&mut LinkDecoder::new(KEY), &bytes, chunk).unwrap();
        assert_eq!(seen.len(), 4, "chunks of {chunk}");
        assert_eq!(seen[0], format!("{:?}", frame(1).message()));
        assert_eq!(seen[1], "ping 77");
        assert_eq!(seen[3], "pong 78");
    }
}

#[test]
fn every_record_and_payload_is_on_the_grid_and_read_where_it_lies() {
    let mut sealer = Sealer::new(KEY);
    let mut bytes = Vec::new();
    let mut sent = Vec::new();
    // Bodies of every length modulo the grid, in records of one to five
    // frames, with pings between.
    for n in 0..40u8 {
        let frame = FrameBuf::encode(&message(n, usize::from(n))).unwrap();
        sealer.message(&mut bytes, &frame);
        sent.push(format!("{:?}", frame.message()));
        if n % 3 == 0 {
            sealer.ping(&mut bytes, u64::from(n));
        }
        if n % 5 == 4 {
            sealer.seal(&mut bytes);
            assert_eq!(bytes.len() % LINK_ALIGN, 0, "a record ends off the grid");
        }
    }
    sealer.seal(&mut bytes);
    assert_eq!(bytes.len() % LINK_ALIGN, 0);
    for chunk in [5, 16, 100, RECEIVE_BYTES] {
        let mut decoder = LinkDecoder::new(KEY);
        let mut seen = Vec::new();
        for piece in bytes.chunks(chunk) {
            decoder.extend(piece);
            loop {
                let (text, at) = match decoder.next_frame().unwrap() {
                    None => break,
                    Some(LinkFrame::Message(message)) => (
                        format!("{message:?}"),
                        std::ptr::from_ref(message) as usize,
                    ),
                    Some(_) => continue,
                };
                // In place: inside the decoder's own buffer (which does
                // not move between `next_frame` calls), and aligned.
                let buf = decoder.buf.as_ptr_range();
                assert!((buf.start as usize..buf.end as usize).contains(&at));
                assert_eq!(at % FRAME_ALIGN, 0);
                seen.push(text);
            }
        }
        assert_eq!(seen, sent, "chunks of {chunk}");
    }
}

/// The length of `two_records`' first record.
fn first_record_len() -> usize {
    let mut sealer = Sealer::new(KEY);
    let mut first = Vec::new();
    sealer.message(&mut first, &frame(1));
    sealer.ping(&mut first, 77);
    sealer.seal(&mut first);
    first.len()
}

#[test]
fn a_flipped_bit_anywhere_another_key_or_a_replay_fails_authentication() {
    let bytes = two_records();
    let first_len = first_record_len();
    for at in 0..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[at] ^= 1;
        // A flip in a length field may leave the decoder waiting for
        // bytes that never come, or find a kind it does not know; it
        // never hands out a frame of a record it did not authenticate.
        if let Ok(seen) = decode_all(&mut LinkDecoder::new(KEY), &flipped, 16) {
            let intact = if at < first_len { 0 } else { 2 };
            assert_eq!(seen.len(), intact, "flip at {at}: {seen:?}");
        }
    }
    let mut flipped = bytes.clone();
    flipped[HEAD_LEN + 20] ^= 1;
    assert!(matches!(
        decode_all(&mut LinkDecoder::new(KEY), &flipped, bytes.len()),
        Err(LinkError::Auth)
    ));
    // A flip in a reserved byte of a head is a forgery too, not a layout
    // error: the MAC covers the heads.
    let mut flipped = bytes.clone();
    flipped[HEAD_LEN + 2] ^= 1;
    assert!(matches!(
        decode_all(&mut LinkDecoder::new(KEY), &flipped, bytes.len()),
        Err(LinkError::Auth)
    ));
    assert!(matches!(
        decode_all(&mut LinkDecoder::new(b"another key"), &bytes, bytes.len()),
        Err(LinkError::Auth)
    ));
    // The first record twice: the second copy has the wrong number.
    let mut replayed = bytes[..first_len].to_vec();
    replayed.extend_from_slice(&bytes[..first_len]);
    let mut decoder = LinkDecoder::new(KEY);
    decoder.extend(&replayed);
    assert!(decoder.next_frame().unwrap().is_some());
    assert!(decoder.next_frame().unwrap().is_some());
    assert!(matches!(decoder.next_frame(), Err(LinkError::Auth)));
}

#[test]
fn a_dropped_or_reordered_record_fails_authentication() {
    let bytes = two_records();
    let first_len = first_record_len();
    let (first, second) = bytes.split_at(first_len);
    let dropped = decode_all(&mut LinkDecoder::new(KEY), second, second.len());
    assert!(matches!(dropped, Err(LinkError::Auth)));
    let mut reordered = second.to_vec();
    reordered.extend_from_slice(first);
    let reordered = decode_all(&mut LinkDecoder::new(KEY), &reordered, reordered.len());
    assert!(matches!(reordered, Err(LinkError::Auth)));
}

#[test]
fn a_record_cut_short_hands_out_nothing_until_it_is_whole() {
    let bytes = two_records();
    let first_len = first_record_len();
    for cut in 0..first_len {
        let mut decoder = LinkDecoder::new(KEY);
        decoder.extend(&bytes[..cut]);
        assert!(decoder.next_frame().unwrap().is_none(), "cut at {cut}");
        decoder.extend(&bytes[cut..first_len]);
        assert!(decoder.next_frame().unwrap().is_some(), "rest after {cut}");
    }
}

/// Seals `body` as one record, as a sender of another layout would: the
/// MAC is right, the contents are not.
fn sealed_raw(body: &[u8]) -> Vec<u8> {
    let mut sealer = Sealer::new(KEY);
    let mut bytes = Vec::new();
    sealer.ping(&mut bytes, 1);
    bytes.truncate(HEAD_LEN);
    bytes.extend_from_slice(body);
    sealer.seal(&mut bytes);
    bytes
}

fn first_error(bytes: &[u8]) -> LinkError {
    let mut decoder = LinkDecoder::new(KEY);
    decoder.extend(bytes);
    loop {
        match decoder.next_frame() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("no error in {bytes:?}"),
            Err(error) => return error,
        }
    }
}

/// A ping head claiming `len` bytes, with `nonzero` in its reserved bytes.
fn ping_head(len: u32, reserved: u8) -> Vec<u8> {
    let mut head = vec![KIND_PING, reserved, 0, 0];
    head.extend_from_slice(&len.to_le_bytes());
    head.extend_from_slice(&[0; 8]);
    head
}

#[test]
fn an_unsealed_frame_a_huge_record_a_frame_past_its_record_or_bad_padding_is_an_error() {
    let mut unsealed = ping_head(8, 0);
    unsealed[0] = KIND_MESSAGE;
    assert!(matches!(first_error(&unsealed), LinkError::UnknownKind(1)));
    // Refused on its head, before the reader waits for (or holds) it.
    let mut huge = vec![KIND_RECORD, 0, 0, 0];
    huge.extend_from_slice(&(RECORD_BODY_ACCEPTED_MAX as u32 + 16).to_le_bytes());
    huge.extend_from_slice(&[0; 8]);
    assert!(matches!(first_error(&huge), LinkError::TooLarge(_)));
    // Sealed, but its one frame claims more than the record holds.
    let mut past = ping_head(8, 0);
    past.extend_from_slice(&[1, 2]);
    past.resize(padded(past.len()), 0);
    past.extend_from_slice(&ping_head(8, 0));
    let error = first_error(&sealed_raw(&past[..HEAD_LEN + 16 + 8]));
    assert!(matches!(error, LinkError::Truncated | LinkError::Layout), "{error:?}");
    let mut past = ping_head(40, 0);
    past.resize(HEAD_LEN + 16, 0);
    let error = first_error(&sealed_raw(&past));
    assert!(matches!(error, LinkError::BadControl(40)), "{error:?}");
    let mut message = ping_head(64, 0);
    message[0] = KIND_MESSAGE;
    message.resize(HEAD_LEN + 32, 0);
    assert!(matches!(first_error(&sealed_raw(&message)), LinkError::Truncated));
    // A nonce's padding, or a head's reserved bytes, not zero.
    let mut padding = ping_head(8, 0);
    padding.extend_from_slice(&[1; 8]);
    padding.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9]);
    assert!(matches!(first_error(&sealed_raw(&padding)), LinkError::Layout));
    let mut reserved = ping_head(8, 5);
    reserved.resize(HEAD_LEN + 16, 0);
    assert!(matches!(first_error(&sealed_raw(&reserved)), LinkError::Layout));
    // A body off the grid.
    let mut off_grid = ping_head(8, 0);
    off_grid.resize(HEAD_LEN + 16 + 8, 0);
    assert!(matches!(first_error(&sealed_raw(&off_grid)), LinkError::Layout));
}

#[test]
fn a_batch_past_the_record_bound_is_split_into_records() {
    let mut sealer = Sealer::new(KEY);
    let mut bytes = Vec::new();
    let one = frame(3);
    let per_record = RECORD_BODY_MAX_BYTES / (HEAD_LEN + padded(one.as_bytes().len()));
    let count = per_record * 2 + 1;
    for _ in 0..count {
        sealer.message(&mut bytes, &one);
    }
    sealer.seal(&mut bytes);
    assert_eq!(sealer.seq, 3);
    let seen = decode_all(&mut LinkDecoder::new(KEY), &bytes, RECEIVE_BYTES).unwrap();
    assert_eq!(seen.len(), count);
}

#[test]
fn a_frame_of_the_largest_size_arrives_over_many_receives() {
    // The largest message that encodes: its body as large as the frame
    // limit leaves room for.
    let mut body_len = MAX_FRAME_LEN - 64;
    let big = loop {
        match FrameBuf::encode(&message(9, body_len)) {
            Ok(frame) => break frame,
            Err(_) => body_len -= 8,
        }
    };
    assert!(big.len() > MAX_FRAME_LEN - 128, "{}", big.len());
    let mut sealer = Sealer::new(KEY);
    let mut bytes = Vec::new();
    sealer.message(&mut bytes, &frame(1));
    sealer.message(&mut bytes, &big);
    sealer.message(&mut bytes, &frame(2));
    sealer.seal(&mut bytes);
    // Past the writer's bound: the large frame took a record of its own.
    assert_eq!(sealer.seq, 3);
    let seen = decode_all(&mut LinkDecoder::new(KEY), &bytes, RECEIVE_BYTES).unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[1], format!("{:?}", big.message()));
    // The decoder held the large record once, not every chunk twice.
    let mut decoder = LinkDecoder::new(KEY);
    let _ = decode_all(&mut decoder, &bytes, RECEIVE_BYTES).unwrap();
    assert!(decoder.buf.capacity() < 2 * (big.len() + 2 * RECEIVE_BYTES));
}
