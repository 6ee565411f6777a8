use super::*;

pub(crate) fn samples() -> Vec<Message> {
    let key = KeyWire {
        type_id: 1,
        zone_id: 2,
        object_id: u64::MAX,
    };
    let client = ClientWire {
        gateway_node: 1,
        session_id: (3 << 56) | 17,
        session_epoch: 2,
        player_id: 42,
    };
    vec![
        Message::ClientIngress {
            client,
            route_id: 11,
            seq: 9,
            body: 5i64.to_le_bytes().to_vec(),
        },
        Message::ClientEgress {
            session_id: 17,
            session_epoch: 2,
            player_id: 42,
            kind: 2,
            route_id: 11,
            seq: 9,
            body: Vec::new(),
        },
        Message::SessionKick {
            session_id: 17,
            player_id: 42,
            reason: b"logged in elsewhere".to_vec(),
        },
        Message::SessionUnbound { client },
        Message::SessionDisconnected { client },
        Message::SessionCheck { client },
        Message::RouterRequest {
            head: RouterHead {
                key,
                route_version: 3,
                source_node: 1,
                transfer_ttl: 1,
            },
            origin_node: 1,
            request_seq: 1 << 56 | 9,
            op: 11,
            needs_reply: 1,
            has_client: 1,
            client,
            request_key: 0x0123_4567_89ab_cdef,
            body: vec![0xAB; 1000],
        },
        Message::RouterReply {
            origin_node: 1,
            request_seq: 9,
            error_code: 0,
            body: vec![1, 2, 3],
        },
        Message::RouterUpdateSync {
            key,
            owner_node: 2,
            owner_incarnation: 4,
            route_version: 3,
        },
        Message::RouterTransfer {
            key,
            transfer_id: 7,
            owner_incarnation: 4,
            route_version: 4,
            cas_version: 9,
            save_timepoint_ms: 123,
            state: b"state".to_vec(),
        },
        Message::RouterTransferAck {
            key,
            transfer_id: 7,
            accepted: 1,
        },
        Message::ServiceRequest {
            key,
            origin_node: 1,
            request_seq: 2 << 56 | 5,
            op: 201,
            needs_reply: 1,
            has_client: 1,
            client,
            body: b"name".to_vec(),
        },
    ]
}

/// Rewrites a frame's trailer to match its (possibly corrupted) archive, so
/// a test reaches bytecheck instead of stopping at the checksum.
fn reseal(bytes: &mut [u8]) {
    let split = bytes.len() - CHECKSUM_LEN;
    let checksum = xxh64(&bytes[..split], CHECKSUM_SEED);
    bytes[split..].copy_from_slice(&checksum.to_le_bytes());
}

fn aligned(bytes: &[u8]) -> AlignedVec {
    let mut out = AlignedVec::with_capacity(bytes.len());
    out.extend_from_slice(bytes);
    out
}

#[test]
fn round_trip_every_variant() {
    for message in samples() {
        let frame = FrameBuf::encode(&message).expect("encodes");
        assert!(!frame.is_empty());
        assert_eq!(frame.len(), frame.as_bytes().len());
        assert_eq!(*frame.message(), message);
        let deserialized: Message =
            rkyv::deserialize::<Message, rancor::Error>(frame.message()).expect("deserializes");
        assert_eq!(deserialized, message);

        let received = FrameBuf::from_network(frame.as_bytes()).expect("valid frame");
        assert_eq!(*received.message(), message);
        assert_eq!(
            *access(frame.as_bytes()).expect("aligned and valid"),
            message
        );
    }
}

#[test]
fn a_local_frame_reads_the_same_and_has_no_checksum() {
    for message in samples() {
        let local = FrameBuf::encode_local(&message).expect("encodes");
        let sealed = FrameBuf::encode(&message).expect("encodes");
        assert!(!local.is_sealed());
        assert!(sealed.is_sealed());
        assert_eq!(*local.message(), message);
        assert_eq!(local.len(), sealed.len(), "the same layout");
        let received = FrameBuf::from_network(sealed.as_bytes()).expect("valid frame");
        assert!(received.is_sealed());
    }
}

#[test]
#[should_panic(expected = "must not leave the process")]
fn a_local_frame_refuses_to_be_sent() {
    let local = FrameBuf::encode_local(&samples()[0]).expect("encodes");
    let _ = local.as_bytes();
}

#[test]
fn unaligned_input_is_copied_by_from_network_and_refused_by_access() {
    let frame = FrameBuf::encode(&samples()[0]).expect("encodes");
    let mut shifted = AlignedVec::<16>::with_capacity(frame.len() + 1);
    shifted.push(0);
    shifted.extend_from_slice(frame.as_bytes());
    let unaligned = &shifted[1..];
    assert!(matches!(
        access(unaligned),
        Err(FrameAccessError::Misaligned)
    ));
    let copied = FrameBuf::from_network(unaligned).expect("copied into aligned storage");
    assert_eq!(*copied.message(), samples()[0]);
}

#[test]
fn every_truncation_is_rejected() {
    for message in samples() {
        let frame = FrameBuf::encode(&message).expect("encodes");
        for len in 0..frame.len() {
            let cut = aligned(&frame.as_bytes()[..len]);
            assert!(access(&cut).is_err(), "{len} of {}", frame.len());
            assert!(FrameBuf::from_network(&cut).is_err());
        }
    }
}

#[test]
fn every_single_bit_flip_is_rejected() {
    for message in samples() {
        let frame = FrameBuf::encode(&message).expect("encodes");
        let mut bytes = aligned(frame.as_bytes());
        for bit in 0..bytes.len() * 8 {
            bytes[bit / 8] ^= 1 << (bit % 8);
            assert!(access(&bytes).is_err(), "bit {bit}");
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        assert!(access(&bytes).is_ok());
    }
}

#[test]
fn structural_corruption_behind_a_valid_checksum_is_rejected_by_bytecheck() {
    // The request with a 1000-byte body.
    let request = samples()
        .into_iter()
        .find(|message| matches!(message, Message::RouterRequest { .. }))
        .expect("a request sample");
    let frame = FrameBuf::encode(&request).expect("encodes");
    let archive_len = frame.len() - CHECKSUM_LEN;
    let root = archive_len - std::mem::size_of::<ArchivedMessage>();

    // An enum tag no variant has.
    let mut bad_tag = aligned(frame.as_bytes());
    bad_tag[root] = 200;
    reseal(&mut bad_tag);
    assert!(matches!(
        access(&bad_tag),
        Err(FrameAccessError::Invalid(_))
    ));

    // The body's length pointing past the buffer: the `ArchivedVec` of
    // `RouterRequest` is a relative pointer then a u32 length, inside the root
    // (which is as large as the largest variant, so find it by value).
    let mut bad_len = aligned(frame.as_bytes());
    let payload_len = 1000u32.to_le_bytes();
    let len_at = root
        + bad_len[root..archive_len]
            .windows(4)
            .position(|w| w == payload_len)
            .expect("the payload length is in the root");
    bad_len[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    reseal(&mut bad_len);
    assert!(matches!(
        access(&bad_len),
        Err(FrameAccessError::Invalid(_))
    ));
}

#[test]
fn length_bounds() {
    assert!(matches!(
        access(&AlignedVec::<16>::new()),
        Err(FrameAccessError::TooShort { len: 0 })
    ));
    let huge = vec![0u8; MAX_FRAME_LEN + 1];
    assert!(matches!(
        FrameBuf::from_network(&huge),
        Err(FrameAccessError::TooLarge { .. })
    ));
    let too_big = Message::RouterReply {
        origin_node: 0,
        request_seq: 0,
        error_code: 0,
        body: vec![0; MAX_FRAME_LEN],
    };
    assert!(matches!(
        FrameBuf::encode(&too_big),
        Err(FrameEncodeError::TooLarge { .. })
    ));
}

#[test]
fn all_zero_and_all_ones_are_rejected() {
    for fill in [0x00u8, 0xFF] {
        for len in [CHECKSUM_LEN + 32, 64, 4096] {
            let mut bytes = aligned(&vec![fill; len]);
            assert!(access(&bytes).is_err());
            reseal(&mut bytes);
            // Behind a valid checksum bytecheck decides; it may not panic.
            let _ = access(&bytes);
        }
    }
}

#[test]
fn an_archive_without_its_trailer_is_read_in_place_once_aligned_and_sound() {
    for message in samples() {
        // A local frame has no checksum and its archive still travels.
        let frame = FrameBuf::encode_local(&message).expect("encodes");
        let archive = aligned(frame.archive());
        assert_eq!(*access_archive(&archive).expect("valid"), message);
        let mut shifted = AlignedVec::<16>::with_capacity(archive.len() + 1);
        shifted.push(0);
        shifted.extend_from_slice(&archive);
        assert!(matches!(
            access_archive(&shifted[1..]),
            Err(FrameAccessError::Misaligned)
        ));
        assert!(matches!(
            access_archive(&aligned(&archive[..3])),
            Err(FrameAccessError::TooShort { .. })
        ));
    }
    // Structure is still checked: a root whose variant tag no message has.
    let frame = FrameBuf::encode_local(&samples()[0]).expect("encodes");
    let mut broken = aligned(frame.archive());
    let root = broken.len() - std::mem::size_of::<ArchivedMessage>();
    broken[root] = 0xff;
    assert!(matches!(
        access_archive(&broken),
        Err(FrameAccessError::Invalid(_))
    ));
    assert!(matches!(
        access_archive(&aligned(&vec![0; MAX_FRAME_LEN])),
        Err(FrameAccessError::TooLarge { .. })
    ));
}

#[test]
fn an_archive_encoded_in_place_is_the_archive_a_frame_holds() {
    let mut out = vec![9u8; 32];
    for message in samples() {
        let start = out.len();
        let len = encode_archive_into(&message, &mut out).expect("encodes");
        let frame = FrameBuf::encode_local(&message).expect("encodes");
        assert_eq!(&out[start..start + len], frame.archive());
        assert_eq!(
            *FrameBuf::from_archive(&out[start..])
                .expect("valid")
                .message(),
            message
        );
        out.resize(out.len().div_ceil(16) * 16, 0);
    }
    let before = out.len();
    let huge = Message::RouterReply {
        origin_node: 1,
        request_seq: 2,
        error_code: 0,
        body: vec![0; MAX_FRAME_LEN],
    };
    assert!(matches!(
        encode_archive_into(&huge, &mut out),
        Err(FrameEncodeError::TooLarge { .. })
    ));
    assert_eq!(out.len(), before, "a refused message leaves nothing behind");
    assert!(FrameBuf::from_archive(&[0; 8]).is_err());
}
