//! A byte stream, cut at fuzzer-chosen points, through the WebSocket
//! `Decoder` (either role) must yield exactly the payload bytes, control
//! frames and error that one decode of the whole stream yields, without
//! panicking; a control frame's payload stays within 125 bytes, and the
//! decoder never reports more payload than the message bound allows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::websocket::{encode_masked, Control, Decoder, Opcode, Role, WsError};

type Outcome = (Vec<u8>, Vec<Control>, Option<WsError>);

fuzz_target!(|data: &[u8]| {
    let Some((&[mode, max_lo, max_hi, split_seed], rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let role = if mode & 1 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let message_max = u64::from(u16::from_le_bytes([max_lo, max_hi]));
    let stream = if mode & 2 == 0 || role == Role::Client {
        rest.to_vec()
    } else {
        structured_stream(rest)
    };
    let expected = decode(&stream, role, message_max, &[stream.len()]);
    let mut cuts = Vec::new();
    let mut rng = u32::from(split_seed) | 0x100;
    let mut left = stream.len();
    while left > 0 {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        let cut = (1 + rng as usize % 40).min(left);
        cuts.push(cut);
        left -= cut;
    }
    let actual = decode(&stream, role, message_max, &cuts);
    assert_eq!(actual, expected);
    for control in &expected.1 {
        if let Control::Ping(payload) = control {
            assert!(payload.len() <= 125);
        }
    }
});

/// Well-formed masked frames shaped by the input, so the fuzzer explores
/// fragmentation and interleaved control frames, not only header errors.
fn structured_stream(mut input: &[u8]) -> Vec<u8> {
    let mut stream = Vec::new();
    while let Some((&[op, fin, len, mask], rest)) = input.split_first_chunk::<4>() {
        let opcode = match op % 5 {
            0 => Opcode::Binary,
            1 => Opcode::Continuation,
            2 => Opcode::Ping,
            3 => Opcode::Pong,
            _ => Opcode::Close,
        };
        let body_len = usize::from(len).min(rest.len());
        let (body, rest) = rest.split_at(body_len);
        let start = stream.len();
        encode_masked(&mut stream, opcode, body, [mask, mask ^ 0x5a, 3, 7]);
        if fin & 1 == 0 {
            stream[start] &= 0x7f;
        }
        input = rest;
    }
    stream
}

fn decode(stream: &[u8], role: Role, message_max: u64, cuts: &[usize]) -> Outcome {
    let mut decoder = Decoder::new(role, message_max);
    let (mut data, mut controls) = (Vec::new(), Vec::new());
    let mut rest = stream;
    for &cut in cuts {
        let (chunk, after) = rest.split_at(cut.min(rest.len()));
        rest = after;
        if let Err(error) = decoder.decode(chunk, &mut data, &mut controls) {
            return (data, controls, Some(error));
        }
    }
    (data, controls, None)
}
