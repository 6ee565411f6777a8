use super::*;

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn decode_all(decoder: &mut Decoder, input: &[u8]) -> (Vec<u8>, Vec<Control>, Result<(), WsError>) {
    let mut data = Vec::new();
    let mut controls = Vec::new();
    let result = decoder.decode(input, &mut data, &mut controls);
    (data, controls, result)
}

fn masked(opcode: Opcode, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_masked(&mut out, opcode, payload, MASK);
    out
}

#[test]
fn a_masked_binary_message_is_unmasked_cut_anywhere() {
    let payload: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    let wire = masked(Opcode::Binary, &payload);
    for cut in 0..wire.len() {
        let mut decoder = Decoder::new(Role::Server, 1 << 20);
        let (mut data, _, first) = decode_all(&mut decoder, &wire[..cut]);
        let (rest, controls, second) = decode_all(&mut decoder, &wire[cut..]);
        data.extend(rest);
        assert_eq!((first, second), (Ok(()), Ok(())));
        assert_eq!(data, payload, "cut at {cut}");
        assert!(controls.is_empty());
    }
}

#[test]
fn the_three_length_forms_decode() {
    for len in [0usize, 125, 126, 65535, 65536, 70000] {
        let payload = vec![0xab; len];
        let mut decoder = Decoder::new(Role::Server, 1 << 20);
        let (data, _, result) = decode_all(&mut decoder, &masked(Opcode::Binary, &payload));
        assert_eq!(result, Ok(()));
        assert_eq!(data.len(), len);
        assert!(data.iter().all(|&b| b == 0xab));
    }
}

#[test]
fn a_text_message_is_1003() {
    let mut decoder = Decoder::new(Role::Server, 1024);
    let (_, _, result) = decode_all(&mut decoder, &masked(Opcode::Text, b"hi"));
    assert_eq!(result, Err(WsError::Text));
    assert_eq!(WsError::Text.close_code(), 1003);
}

#[test]
fn an_unmasked_client_frame_is_1002() {
    let mut out = Vec::new();
    encode_frame(&mut out, Opcode::Binary, b"abc");
    let mut decoder = Decoder::new(Role::Server, 1024);
    let error = decode_all(&mut decoder, &out).2.unwrap_err();
    assert_eq!(error.close_code(), 1002);
    // And a client refuses masked frames from a server.
    let mut client = Decoder::new(Role::Client, 1024);
    let error = decode_all(&mut client, &masked(Opcode::Binary, b"abc"))
        .2
        .unwrap_err();
    assert_eq!(error.close_code(), 1002);
}

#[test]
fn a_message_over_the_bound_is_1009_before_its_payload() {
    let mut decoder = Decoder::new(Role::Server, 100);
    let wire = masked(Opcode::Binary, &[1; 101]);
    // The header alone is enough to refuse it.
    let error = decode_all(&mut decoder, &wire[..8]).2.unwrap_err();
    assert_eq!(error, WsError::TooBig { max: 100 });
    assert_eq!(error.close_code(), 1009);
    let mut exact = Decoder::new(Role::Server, 100);
    assert_eq!(
        decode_all(&mut exact, &masked(Opcode::Binary, &[1; 100])).2,
        Ok(())
    );
}

fn fragment(opcode: Opcode, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = masked(opcode, payload);
    if !fin {
        out[0] &= 0x7f;
    }
    out
}

#[test]
fn fragments_reassemble_within_the_bound_with_control_frames_between() {
    let mut wire = fragment(Opcode::Binary, false, b"hello ");
    wire.extend(masked(Opcode::Ping, b"p"));
    wire.extend(fragment(Opcode::Continuation, false, b"wor"));
    wire.extend(fragment(Opcode::Continuation, true, b"ld"));
    let mut decoder = Decoder::new(Role::Server, 11);
    let (data, controls, result) = decode_all(&mut decoder, &wire);
    assert_eq!(result, Ok(()));
    assert_eq!(data, b"hello world");
    assert_eq!(controls, vec![Control::Ping(b"p".to_vec())]);
    // The bound counts all fragments of a message, and resets after it.
    let mut over = Decoder::new(Role::Server, 10);
    assert_eq!(
        decode_all(&mut over, &wire).2,
        Err(WsError::TooBig { max: 10 })
    );
    let mut again = Decoder::new(Role::Server, 11);
    let mut twice = wire.clone();
    twice.extend(&wire);
    assert_eq!(decode_all(&mut again, &twice).2, Ok(()));
}

#[test]
fn framing_rule_breaks_are_1002() {
    let mut reserved = masked(Opcode::Binary, b"x");
    reserved[0] |= 0x40;
    let mut bad_opcode = masked(Opcode::Binary, b"x");
    bad_opcode[0] = 0x83;
    let lone_continuation = masked(Opcode::Continuation, b"x");
    let mut nested = fragment(Opcode::Binary, false, b"a");
    nested.extend(masked(Opcode::Binary, b"b"));
    let fragmented_ping = fragment(Opcode::Ping, false, b"x");
    let long_ping = masked(Opcode::Ping, &[0; 126]);
    for (name, wire) in [
        ("reserved bits", reserved),
        ("reserved opcode", bad_opcode),
        ("lone continuation", lone_continuation),
        ("nested message", nested),
        ("fragmented ping", fragmented_ping),
        ("long ping", long_ping),
    ] {
        let mut decoder = Decoder::new(Role::Server, 1024);
        let error = decode_all(&mut decoder, &wire).2.unwrap_err();
        assert_eq!(error.close_code(), 1002, "{name}");
    }
}

#[test]
fn close_ends_the_stream_with_its_code() {
    let mut wire = Vec::new();
    encode_masked(&mut wire, Opcode::Close, &1001u16.to_be_bytes(), MASK);
    wire.extend(masked(Opcode::Binary, b"after"));
    let mut decoder = Decoder::new(Role::Server, 1024);
    let (data, controls, result) = decode_all(&mut decoder, &wire);
    assert_eq!(result, Ok(()));
    assert!(data.is_empty());
    assert_eq!(controls, vec![Control::Close(Some(1001))]);
    assert!(decoder.is_closed());
}

#[test]
fn a_pong_is_reported_and_a_server_frame_decodes_at_the_client() {
    let mut wire = Vec::new();
    encode_frame(&mut wire, Opcode::Pong, b"");
    encode_frame(&mut wire, Opcode::Binary, b"answer");
    encode_close(&mut wire, 1000);
    let mut client = Decoder::new(Role::Client, 1024);
    let (data, controls, result) = decode_all(&mut client, &wire);
    assert_eq!(result, Ok(()));
    assert_eq!(data, b"answer");
    assert_eq!(controls, vec![Control::Pong, Control::Close(Some(1000))]);
}

#[test]
fn unmask_is_its_own_inverse_from_any_offset() {
    let original: Vec<u8> = (0..37u8).collect();
    for at in 0..4 {
        let mut bytes = original.clone();
        let end = unmask(&mut bytes, MASK, at);
        assert_eq!(end, (at + bytes.len()) % 4);
        for (i, (&masked, &plain)) in bytes.iter().zip(&original).enumerate() {
            assert_eq!(masked, plain ^ MASK[(at + i) % 4]);
        }
        unmask(&mut bytes, MASK, at);
        assert_eq!(bytes, original);
    }
}

/// What a server's decoder makes of a client's close with `payload`.
fn close_of(payload: &[u8]) -> Result<Vec<Control>, WsError> {
    let mut decoder = Decoder::new(Role::Server, 1024);
    let (_, controls, result) = decode_all(&mut decoder, &masked(Opcode::Close, payload));
    assert!(decoder.is_closed(), "nothing is read after a close");
    result.map(|()| controls)
}

fn close_payload(code: u16, reason: &[u8]) -> Vec<u8> {
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(reason);
    payload
}

#[test]
fn close_frames_are_checked_as_rfc_6455_section_7_4_says() {
    assert_eq!(close_of(b""), Ok(vec![Control::Close(None)]));
    assert_eq!(
        close_of(&[0x03]).map_err(|error| error.close_code()),
        Err(1002),
        "a 1-byte payload"
    );
    let valid = [
        1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000,
        4999,
    ];
    for code in valid {
        assert_eq!(
            close_of(&close_payload(code, b"bye \xc3\xa9")),
            Ok(vec![Control::Close(Some(code))]),
            "{code}"
        );
    }
    let never_on_the_wire = [
        0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
    ];
    for code in never_on_the_wire {
        assert_eq!(
            close_of(&close_payload(code, b"")).map_err(|error| error.close_code()),
            Err(1002),
            "{code}"
        );
    }
    let not_utf8 = close_payload(
        1000,
        b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80",
    );
    assert_eq!(close_of(&not_utf8), Err(WsError::InvalidUtf8));
    assert_eq!(WsError::InvalidUtf8.close_code(), 1007);
    // The longest reason a control frame holds (123 bytes) is fine.
    assert!(close_of(&close_payload(1000, &[b'a'; 123])).is_ok());
}
