//! Random bytes into the internal frame's checked access must be rejected
//! or yield a message that re-encodes to the same message; never a panic.
//! With the first input bit set the rest gets a valid checksum trailer, so
//! the fuzzer also reaches rkyv's bytecheck validation behind it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use wire::frame::{access, FrameBuf, Message, CHECKSUM_SEED};
use wire::hash::xxh64;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = AlignedVec::<16>::with_capacity(rest.len() + 8);
    bytes.extend_from_slice(rest);
    if mode & 1 == 1 {
        let checksum = xxh64(rest, CHECKSUM_SEED);
        bytes.extend_from_slice(&checksum.to_le_bytes());
    }
    let checked = access(&bytes).map(|archived| {
        rkyv::deserialize::<Message, rancor::Error>(archived).expect("validated archive")
    });
    // Unaligned input takes the copying path and must agree.
    let mut shifted = AlignedVec::<16>::with_capacity(bytes.len() + 1);
    shifted.push(0);
    shifted.extend_from_slice(&bytes);
    let copied = FrameBuf::from_network(&shifted[1..]);
    assert_eq!(checked.is_ok(), copied.is_ok());
    if let Ok(message) = checked {
        let copied = copied.expect("agrees with access");
        assert!(*copied.message() == message);
        let again = FrameBuf::encode(&message).expect("a decoded frame re-encodes");
        assert!(*again.message() == message);
    }
});
