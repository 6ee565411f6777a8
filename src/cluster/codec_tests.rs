use super::*;

const KEY: &[u8; LINK_KEY_LEN] = &[7; LINK_KEY_LEN];
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

/// How the decoder shows `message(n, body_len)`.
fn shown(n: u8, body_len: usize) -> String {
    let frame = FrameBuf::encode_local(&message(n, body_len)).unwrap();
    format!("{:?}", frame.message())
}

/// Seals what `batch` holds and appends it to `bytes`.
fn seal_into(sealer: &mut Sealer, batch: &mut Batch, bytes: &mut Vec<u8>) {
    sealer.seal(batch);
    bytes.extend_from_slice(&batch.take_sealed());
}

/// Two records: a message and a ping, then a message and a pong.
fn two_records() -> Vec<u8> {
    let mut sealer = Sealer::new(KEY);
    let mut batch = Batch::new();
    let mut bytes = Vec::new();
    batch.message(&message(1, 50)).unwrap();
    batch.ping(77);
    seal_into(&mut sealer, &mut batch, &mut bytes);
    batch.message(&message(2, 50)).unwrap();
    batch.pong(78);
    seal_into(&mut sealer, &mut batch, &mut bytes);
    bytes
}

fn describe(frame: LinkFrame<'_>) -> String {
    match frame {
        LinkFrame::Message(message) => format!("{message:?}"),
        LinkFrame::Ping(n) => format!("ping {n}"),
        LinkFrame::Pong(n) => format!("pong {n}"),
    }
}

fn decode_all(
    decoder: &mut LinkDecoder,
    bytes: &[u8],
    chunk: usize,
) -> Result<Vec<String>, LinkError> {
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
        assert_eq!(seen[0], shown(1, 50));
        assert_eq!(seen[1], "ping 77");
        assert_eq!(seen[2], shown(2, 50));
        assert_eq!(seen[3], "pong 78");
    }
}

#[test]
fn every_record_and_payload_is_on_the_grid_and_read_where_it_lies() {
    let mut sealer = Sealer::new(KEY);
    let mut batch = Batch::new();
    let mut bytes = Vec::new();
    let mut sent = Vec::new();
    // Bodies of every length modulo the grid, in records of one to five
    // frames, with pings between.
    for n in 0..40u8 {
        batch.message(&message(n, usize::from(n))).unwrap();
        sent.push(shown(n, usize::from(n)));
        if n % 3 == 0 {
            batch.ping(u64::from(n));
        }
        if n % 5 == 4 {
            seal_into(&mut sealer, &mut batch, &mut bytes);
            assert_eq!(bytes.len() % LINK_ALIGN, 0, "a record ends off the grid");
        }
    }
    seal_into(&mut sealer, &mut batch, &mut bytes);
    assert_eq!(bytes.len() % LINK_ALIGN, 0);
    for chunk in [5, 16, 100, RECEIVE_BYTES] {
        let mut decoder = LinkDecoder::new(KEY);
        let mut seen = Vec::new();
        for piece in bytes.chunks(chunk) {
            decoder.extend(piece);
            loop {
                let (text, at) = match decoder.next_frame().unwrap() {
                    None => break,
                    Some(LinkFrame::Message(message)) => {
                        (format!("{message:?}"), std::ptr::from_ref(message) as usize)
                    }
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
    let mut batch = Batch::new();
    batch.message(&message(1, 50)).unwrap();
    batch.ping(77);
    let mut first = Vec::new();
    seal_into(&mut Sealer::new(KEY), &mut batch, &mut first);
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
    // error: the tag covers the heads.
    for at in [2, HEAD_LEN + 2] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 1;
        assert!(matches!(
            decode_all(&mut LinkDecoder::new(KEY), &flipped, bytes.len()),
            Err(LinkError::Auth)
        ));
    }
    assert!(matches!(
        decode_all(
            &mut LinkDecoder::new(&[8; LINK_KEY_LEN]),
            &bytes,
            bytes.len()
        ),
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

/// `body` sealed as record 0, as a sender of another layout would: the
/// tag is right, the contents are not.
fn sealed_raw(body: &[u8]) -> Vec<u8> {
    let mut record = vec![0; HEAD_LEN];
    set_head(&mut record, KIND_RECORD, body.len());
    let mut sealed = body.to_vec();
    let tag = record_key(KEY)
        .seal_in_place_separate_tag(record_nonce(0), Aad::from(&record[..]), &mut sealed)
        .unwrap();
    record.extend_from_slice(&sealed);
    record.extend_from_slice(tag.as_ref());
    record
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

/// A head of `kind` claiming `len` bytes, with `reserved` in a byte that
/// must be zero.
fn head(kind: u8, len: u32, reserved: u8) -> Vec<u8> {
    let mut head = vec![kind, reserved, 0, 0];
    head.extend_from_slice(&len.to_le_bytes());
    head.extend_from_slice(&[0; 8]);
    head
}

#[test]
fn an_unsealed_frame_a_huge_record_a_frame_past_its_record_or_bad_padding_is_an_error() {
    // Refused before a tag could be checked: unauthenticated, as a bad
    // tag is.
    let unsealed = first_error(&head(KIND_MESSAGE, 8, 0));
    assert!(matches!(unsealed, LinkError::Unsealed(_)));
    assert!(unsealed.is_unauthenticated());
    // Refused on its head, before the reader waits for (or holds) it.
    let huge = head(KIND_RECORD, RECORD_BODY_ACCEPTED_MAX as u32 + 16, 0);
    assert!(matches!(first_error(&huge), LinkError::Unsealed(_)));
    // Sealed, but a frame claims more than the record holds.
    let mut past = head(KIND_PING, 40, 0);
    past.resize(HEAD_LEN + 16, 0);
    assert!(matches!(
        first_error(&sealed_raw(&past)),
        LinkError::BadControl(40)
    ));
    let mut past = head(KIND_MESSAGE, 64, 0);
    past.resize(HEAD_LEN + 32, 0);
    assert!(matches!(
        first_error(&sealed_raw(&past)),
        LinkError::Truncated
    ));
    let mut past = head(KIND_PING, 8, 0);
    past.resize(HEAD_LEN + 16, 0);
    past.extend_from_slice(&head(KIND_PING, 8, 0));
    let error = first_error(&sealed_raw(&past));
    assert!(matches!(error, LinkError::Truncated), "{error:?}");
    // A nonce's padding, or a head's reserved bytes, not zero.
    let mut padding = head(KIND_PING, 8, 0);
    padding.extend_from_slice(&[1; 8]);
    padding.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9]);
    assert!(matches!(
        first_error(&sealed_raw(&padding)),
        LinkError::Layout
    ));
    let mut reserved = head(KIND_PING, 8, 5);
    reserved.resize(HEAD_LEN + 16, 0);
    assert!(matches!(
        first_error(&sealed_raw(&reserved)),
        LinkError::Layout
    ));
    // A body off the grid.
    let mut off_grid = head(KIND_PING, 8, 0);
    off_grid.resize(HEAD_LEN + 16 + 8, 0);
    assert!(matches!(
        first_error(&sealed_raw(&off_grid)),
        LinkError::Layout
    ));
    // A message whose archive is not one.
    let mut garbage = head(KIND_MESSAGE, 64, 0);
    garbage.extend_from_slice(&[0xff; 64]);
    assert!(matches!(
        first_error(&sealed_raw(&garbage)),
        LinkError::Frame(_)
    ));
}

#[test]
fn a_batch_past_the_record_bound_is_split_into_records() {
    let one = message(3, 50);
    let frame_bytes = HEAD_LEN + padded(FrameBuf::encode_local(&one).unwrap().archive().len());
    let per_record = RECORD_BODY_MAX_BYTES / frame_bytes;
    let count = per_record * 2 + 1;
    let mut batch = Batch::new();
    for _ in 0..count {
        batch.message(&one).unwrap();
    }
    batch.ping(5);
    assert_eq!(batch.messages(), count);
    let mut sealer = Sealer::new(KEY);
    let mut bytes = Vec::new();
    seal_into(&mut sealer, &mut batch, &mut bytes);
    assert_eq!(sealer.seq, 3);
    assert!(batch.is_empty());
    let seen = decode_all(&mut LinkDecoder::new(KEY), &bytes, RECEIVE_BYTES).unwrap();
    assert_eq!(seen.len(), count + 1);
    assert_eq!(seen[count], "ping 5");
}

#[test]
fn a_frame_of_the_largest_size_arrives_over_many_receives() {
    // The largest message that encodes: its body as large as the frame
    // limit leaves room for.
    let mut body_len = MAX_FRAME_LEN - 64;
    let mut batch = Batch::new();
    batch.message(&message(1, 50)).unwrap();
    while batch.message(&message(9, body_len)).is_err() {
        body_len -= 8;
    }
    assert!(body_len > MAX_FRAME_LEN - 256, "{body_len}");
    batch.message(&message(2, 50)).unwrap();
    let mut sealer = Sealer::new(KEY);
    let mut bytes = Vec::new();
    seal_into(&mut sealer, &mut batch, &mut bytes);
    // Past the writer's bound: the large frame took a record of its own.
    assert_eq!(sealer.seq, 3);
    let mut decoder = LinkDecoder::new(KEY);
    let seen = decode_all(&mut decoder, &bytes, RECEIVE_BYTES).unwrap();
    assert_eq!(seen, [shown(1, 50), shown(9, body_len), shown(2, 50)]);
    // The decoder held the large record once, plus a receive or two.
    assert!(decoder.buf.capacity() < 2 * (body_len + 2 * RECEIVE_BYTES));
}

#[test]
fn frames_a_link_could_not_send_come_back_whole() {
    let mut batch = Batch::new();
    let body_len = RECORD_BODY_MAX_BYTES / 3;
    for n in 0..7 {
        batch.message(&message(n, body_len)).unwrap();
        batch.ping(u64::from(n));
    }
    let back = batch.drain_frames();
    assert!(batch.is_empty());
    assert_eq!(batch.messages(), 0);
    let back: Vec<String> = back
        .iter()
        .map(|frame| format!("{:?}", frame.message()))
        .collect();
    let sent: Vec<String> = (0..7).map(|n| shown(n, body_len)).collect();
    assert_eq!(back, sent);
}
