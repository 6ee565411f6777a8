//! Property tests of the internal frame envelope (the `frame_access` fuzz
//! target checks the same properties with coverage guidance).

use proptest::prelude::*;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use wire::frame::{
    access, ClientWire, FrameBuf, KeyWire, Message, RouterHead, CHECKSUM_LEN, CHECKSUM_SEED,
};
use wire::hash::xxh64;

fn bytes_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..300)
}

fn key_strategy() -> impl Strategy<Value = KeyWire> {
    any::<(u32, u32, u64)>().prop_map(|(type_id, zone_id, object_id)| KeyWire {
        type_id,
        zone_id,
        object_id,
    })
}

fn client_strategy() -> impl Strategy<Value = ClientWire> {
    any::<(u64, u64, u32, u64)>().prop_map(
        |(gateway_node, session_id, session_epoch, player_id)| ClientWire {
            gateway_node,
            session_id,
            session_epoch,
            player_id,
        },
    )
}

fn head_strategy() -> impl Strategy<Value = RouterHead> {
    (key_strategy(), any::<(u64, u64, u32)>()).prop_map(
        |(key, (route_version, source_node, transfer_ttl))| RouterHead {
            key,
            route_version,
            source_node,
            transfer_ttl,
        },
    )
}

fn message_strategy() -> impl Strategy<Value = Message> {
    prop_oneof![
        (client_strategy(), any::<(u32, u32)>(), bytes_strategy()).prop_map(
            |(client, (route_id, seq), body)| Message::ClientIngress {
                client,
                route_id,
                seq,
                body,
            }
        ),
        (any::<(u64, u32, u64, u8, u32, u32)>(), bytes_strategy()).prop_map(
            |((session_id, session_epoch, player_id, kind, route_id, seq), body)| {
                Message::ClientEgress {
                    session_id,
                    session_epoch,
                    player_id,
                    kind,
                    route_id,
                    seq,
                    body,
                }
            }
        ),
        (any::<(u64, u64)>(), bytes_strategy()).prop_map(|((session_id, player_id), reason)| {
            Message::SessionKick {
                session_id,
                player_id,
                reason,
            }
        }),
        client_strategy().prop_map(|client| Message::SessionUnbound { client }),
        client_strategy().prop_map(|client| Message::SessionDisconnected { client }),
        client_strategy().prop_map(|client| Message::SessionCheck { client }),
        (
            head_strategy(),
            any::<(u64, u64, u32, u8, u8)>(),
            client_strategy(),
            bytes_strategy()
        )
            .prop_map(
                |(head, (origin_node, request_seq, op, needs_reply, has_client), client, body)| {
                    Message::RouterRequest {
                        head,
                        origin_node,
                        request_seq,
                        op,
                        needs_reply,
                        has_client,
                        client,
                        request_key: origin_node ^ request_seq,
                        body,
                    }
                }
            ),
        (any::<(u64, u64, u16)>(), bytes_strategy()).prop_map(
            |((origin_node, request_seq, error_code), body)| Message::RouterReply {
                origin_node,
                request_seq,
                error_code,
                body,
            }
        ),
        (key_strategy(), any::<(u64, u64, u64)>()).prop_map(
            |(key, (owner_node, owner_incarnation, route_version))| Message::RouterUpdateSync {
                key,
                owner_node,
                owner_incarnation,
                route_version,
            }
        ),
        (
            key_strategy(),
            any::<(u64, u64, u64, u64, u64)>(),
            bytes_strategy()
        )
            .prop_map(
                |(
                    key,
                    (transfer_id, owner_incarnation, route_version, cas_version, save),
                    state,
                )| {
                    Message::RouterTransfer {
                        key,
                        transfer_id,
                        owner_incarnation,
                        route_version,
                        cas_version,
                        save_timepoint_ms: save,
                        state,
                    }
                }
            ),
        (key_strategy(), any::<(u64, u8)>()).prop_map(|(key, (transfer_id, accepted))| {
            Message::RouterTransferAck {
                key,
                transfer_id,
                accepted,
            }
        }),
        (
            key_strategy(),
            any::<(u64, u64, u32, u8, u8)>(),
            client_strategy(),
            bytes_strategy()
        )
            .prop_map(
                |(key, (origin_node, request_seq, op, needs_reply, has_client), client, body)| {
                    Message::ServiceRequest {
                        key,
                        origin_node,
                        request_seq,
                        op,
                        needs_reply,
                        has_client,
                        client,
                        body,
                    }
                }
            ),
    ]
}

fn aligned(bytes: &[u8]) -> AlignedVec {
    let mut out = AlignedVec::with_capacity(bytes.len());
    out.extend_from_slice(bytes);
    out
}

/// Whatever checked access accepts must be a real message: it deserializes
/// and re-encodes to an equal message.
fn accepted_is_consistent(bytes: &[u8]) {
    let aligned = aligned(bytes);
    let checked = access(&aligned).map(|archived| {
        rkyv::deserialize::<Message, rancor::Error>(archived).expect("validated archive")
    });
    let copied = FrameBuf::from_network(bytes);
    assert_eq!(checked.is_ok(), copied.is_ok());
    if let Ok(message) = checked {
        let again = FrameBuf::encode(&message).expect("re-encodes");
        assert_eq!(*again.message(), message);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn round_trip(message in message_strategy()) {
        let frame = FrameBuf::encode(&message).expect("encodes");
        prop_assert_eq!(frame.message(), &message);
        let received = FrameBuf::from_network(frame.as_bytes()).expect("valid");
        prop_assert_eq!(received.message(), &message);
        prop_assert_eq!(received.as_bytes(), frame.as_bytes());
    }

    #[test]
    fn corrupted_frames_are_rejected(
        message in message_strategy(),
        edits in proptest::collection::vec((any::<proptest::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let frame = FrameBuf::encode(&message).expect("encodes");
        let mut bytes = frame.as_bytes().to_vec();
        for (index, xor) in &edits {
            let at = index.index(bytes.len());
            bytes[at] ^= xor;
        }
        // Edits can cancel out (the same byte twice); then the frame is
        // intact and must still be accepted.
        let intact = bytes == frame.as_bytes();
        prop_assert_eq!(access(&aligned(&bytes)).is_ok(), intact);
        prop_assert_eq!(FrameBuf::from_network(&bytes).is_ok(), intact);
    }

    #[test]
    fn truncated_and_extended_frames_are_rejected(
        message in message_strategy(),
        cut in any::<proptest::sample::Index>(),
        extra in proptest::collection::vec(any::<u8>(), 1..32),
    ) {
        let frame = FrameBuf::encode(&message).expect("encodes");
        let bytes = frame.as_bytes();
        let truncated = &bytes[..cut.index(bytes.len())];
        prop_assert!(access(&aligned(truncated)).is_err());
        let mut extended = bytes.to_vec();
        extended.extend_from_slice(&extra);
        prop_assert!(FrameBuf::from_network(&extended).is_err());
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        accepted_is_consistent(&bytes);
    }

    #[test]
    fn random_bytes_behind_a_valid_checksum_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut sealed = bytes.clone();
        sealed.extend_from_slice(&xxh64(&bytes, CHECKSUM_SEED).to_le_bytes());
        accepted_is_consistent(&sealed);
    }

    #[test]
    fn corrupted_archives_behind_a_valid_checksum_never_panic(
        message in message_strategy(),
        edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..6),
    ) {
        // Past the checksum only bytecheck stands between these bytes and a
        // reader: it must reject them or accept a genuine message.
        let frame = FrameBuf::encode(&message).expect("encodes");
        let mut archive = frame.as_bytes()[..frame.len() - CHECKSUM_LEN].to_vec();
        for (index, value) in &edits {
            let at = index.index(archive.len());
            archive[at] = *value;
        }
        archive.extend_from_slice(&xxh64(&archive[..frame.len() - CHECKSUM_LEN], CHECKSUM_SEED).to_le_bytes());
        accepted_is_consistent(&archive);
    }
}
