//! docs/protocol.md against the code: every test vector in it through the
//! real codec (`wire::client`, `wire::token`), its route table against the
//! gateway's, and its ERROR code table against `wire::client::ErrorCode`.
//! The vectors are parsed out of the document itself, so the two cannot
//! drift apart.

use std::collections::BTreeMap;

use routerd::route::Direction;
use wire::client::{
    decode_error_body, encode_app_error_body, encode_error_frame, encode_frame,
    encode_keyed_request, AppCode, ErrorCode, FrameDecoder, FrameError, FrameKind, Peer,
    DEFAULT_MAX_BODY,
};
use wire::token::{self, TokenError};

const DOC: &str = include_str!("../docs/protocol.md");

/// One ```vector block: its keys in order of appearance.
type Vector = BTreeMap<String, String>;

fn vectors() -> Vec<Vector> {
    let mut vectors = Vec::new();
    let mut lines = DOC.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() != "```vector" {
            continue;
        }
        let mut vector = Vector::new();
        let mut last_key: Option<String> = None;
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            if line.starts_with(' ') {
                let key = last_key.as_ref().expect("a continuation follows a key");
                let value = vector.get_mut(key).expect("key present");
                value.push(' ');
                value.push_str(line.trim());
                continue;
            }
            let (key, value) = line
                .split_once(':')
                .unwrap_or_else(|| panic!("not a `key: value` line: {line:?}"));
            let previous = vector.insert(key.to_string(), value.trim().to_string());
            assert!(previous.is_none(), "{key} given twice in a vector");
            last_key = Some(key.to_string());
        }
        vectors.push(vector);
    }
    vectors
}

fn get<'a>(vector: &'a Vector, key: &str) -> &'a str {
    vector
        .get(key)
        .unwrap_or_else(|| panic!("vector {:?} has no {key}", vector.get("name")))
}

/// Hex bytes, grouped with spaces and `|` at will.
fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'|')
        .collect();
    assert!(
        digits.len().is_multiple_of(2),
        "odd number of hex digits in {text:?}"
    );
    digits
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).expect("ASCII");
            u8::from_str_radix(pair, 16).unwrap_or_else(|_| panic!("bad hex {pair:?}"))
        })
        .collect()
}

/// A `fields` line (`u64 7 + utf8 "hello"`) as the bytes it spells.
fn fields(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for field in text.split(" + ") {
        let (kind, value) = field.split_once(' ').expect("`type value`");
        match kind {
            "u16" => out.extend_from_slice(&value.parse::<u16>().unwrap().to_le_bytes()),
            "u32" => out.extend_from_slice(&value.parse::<u32>().unwrap().to_le_bytes()),
            "u64" => out.extend_from_slice(&value.parse::<u64>().unwrap().to_le_bytes()),
            "i64" => out.extend_from_slice(&value.parse::<i64>().unwrap().to_le_bytes()),
            "hex" => out.extend_from_slice(&hex(value)),
            "utf8" => {
                let text = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .expect("utf8 text in double quotes");
                out.extend_from_slice(text.as_bytes());
            }
            other => panic!("unknown field type {other}"),
        }
    }
    out
}

fn kind(name: &str) -> FrameKind {
    match name {
        "REQUEST" => FrameKind::Request,
        "RESPONSE" => FrameKind::Response,
        "PUSH" => FrameKind::Push,
        "ERROR" => FrameKind::Error,
        other => panic!("unknown kind {other}"),
    }
}

/// The rows of the first table after the heading line `heading`, each as
/// its trimmed cells, without the header and separator rows.
fn table(heading: &str) -> Vec<Vec<String>> {
    let start = DOC
        .lines()
        .position(|line| line == heading)
        .unwrap_or_else(|| panic!("no heading {heading:?}"));
    DOC.lines()
        .skip(start + 1)
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|row| {
            row.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect()
}

/// route id -> (name, direction, auth) from the document's route table.
fn documented_routes() -> BTreeMap<u32, (String, String, String)> {
    routes_of("## 5. Route table")
}

/// The same for the table of the routes version 2 adds.
fn version_2_routes() -> BTreeMap<u32, (String, String, String)> {
    routes_of("### Version-2 routes")
}

fn routes_of(heading: &str) -> BTreeMap<u32, (String, String, String)> {
    table(heading)
        .into_iter()
        .map(|row| {
            let id = row[0].parse().expect("a route id");
            (id, (row[1].clone(), row[2].clone(), row[3].clone()))
        })
        .collect()
}

#[test]
fn every_frame_vector_matches_the_codec() {
    let mut routes = documented_routes();
    routes.extend(version_2_routes());
    let mut kinds_seen = Vec::new();
    let frames: Vec<Vector> = vectors()
        .into_iter()
        .filter(|v| v.contains_key("frame"))
        .collect();
    for vector in &frames {
        let name = get(vector, "name");
        let kind = kind(get(vector, "kind"));
        let (route_id, route_name) = get(vector, "route").split_once(' ').expect("`id name`");
        let route_id: u32 = route_id.parse().expect("route id");
        match routes.get(&route_id) {
            Some(route) => assert_eq!(route.0, route_name, "{name}: route name"),
            // A user type's route (the guild example's): ids from 200 on
            // are theirs, and the table holds routerd's own only.
            None => assert!(route_id >= 200, "{name}: route {route_id} is in no table"),
        }
        let seq: u32 = get(vector, "seq").parse().expect("seq");
        let body = hex(get(vector, "body"));
        let frame = hex(get(vector, "frame"));
        assert_eq!(
            fields(get(vector, "fields")),
            body,
            "{name}: fields vs body"
        );

        if vector.get("version").is_some_and(|v| v == "2") {
            check_version_2_request(vector, route_id, seq, &body, &frame);
            kinds_seen.push(kind);
            continue;
        }
        assert!(
            !vector.contains_key("version"),
            "{name}: version is 2 or absent"
        );

        // Encoding the header and body gives exactly the documented bytes.
        let mut encoded = Vec::new();
        encode_frame(&mut encoded, kind, route_id, seq, &body);
        assert_eq!(encoded, frame, "{name}: encode");

        // Decoding them, as the receiving side does, gives the header and
        // body back, cut at every byte boundary.
        let from = if kind == FrameKind::Request {
            Peer::Client
        } else {
            Peer::Server
        };
        for cut in 0..=frame.len() {
            let mut decoder = FrameDecoder::new(from, DEFAULT_MAX_BODY);
            assert_eq!(decoder.extend(&frame[..cut]), cut);
            if cut < frame.len() {
                assert_eq!(decoder.next_frame(), Ok(None), "{name}: cut at {cut}");
                assert_eq!(decoder.extend(&frame[cut..]), frame.len() - cut);
            }
            let decoded = decoder
                .next_frame()
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .unwrap_or_else(|| panic!("{name}: incomplete"));
            assert_eq!(decoded.header.kind, kind, "{name}");
            assert_eq!(decoded.header.route_id, route_id, "{name}");
            assert_eq!(decoded.header.seq, seq, "{name}");
            assert_eq!(decoded.header.body_len as usize, body.len(), "{name}");
            assert_eq!(decoded.body, body, "{name}");
        }
        if kind == FrameKind::Push && vector.get("numbered").is_none_or(|n| n != "yes") {
            assert_eq!(seq, 0, "{name}: a PUSH carries seq 0");
        }
        if kind == FrameKind::Error {
            check_error_vector(vector, route_id, seq, &body, &frame);
        }
        kinds_seen.push(kind);
    }
    for kind in [
        FrameKind::Request,
        FrameKind::Response,
        FrameKind::Push,
        FrameKind::Error,
    ] {
        assert!(kinds_seen.contains(&kind), "no {kind:?} vector");
    }
    assert!(frames.len() >= 8, "only {} frame vectors", frames.len());
}

/// A version-2 REQUEST vector: `encode_keyed_request` writes `frame`; the
/// gateway's decoder (version 2 accepted) reads the key and the route's
/// body back at every cut; a version-1 decoder refuses the frame.
fn check_version_2_request(vector: &Vector, route_id: u32, seq: u32, body: &[u8], frame: &[u8]) {
    let name = get(vector, "name");
    assert_eq!(
        get(vector, "kind"),
        "REQUEST",
        "{name}: version 2 is a REQUEST"
    );
    let key: u64 = get(vector, "request_key").parse().expect("request_key");
    let mut encoded = Vec::new();
    encode_keyed_request(&mut encoded, route_id, seq, key, body);
    assert_eq!(encoded, frame, "{name}: encode");
    for cut in 0..=frame.len() {
        let mut decoder = FrameDecoder::new(Peer::Client, DEFAULT_MAX_BODY).accept_version_2();
        decoder.extend(&frame[..cut]);
        if cut < frame.len() {
            assert_eq!(decoder.next_frame(), Ok(None), "{name}: cut at {cut}");
            decoder.extend(&frame[cut..]);
        }
        let decoded = decoder
            .next_frame()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .unwrap_or_else(|| panic!("{name}: incomplete"));
        assert_eq!(decoded.header.kind, FrameKind::Request, "{name}");
        assert_eq!(decoded.header.route_id, route_id, "{name}");
        assert_eq!(decoded.header.seq, seq, "{name}");
        assert_eq!(decoded.header.body_len as usize, body.len() + 8, "{name}");
        assert_eq!(decoded.request_key, Some(key), "{name}");
        assert_eq!(decoded.body, body, "{name}");
    }
    let mut version_1 = FrameDecoder::new(Peer::Client, DEFAULT_MAX_BODY);
    version_1.extend(frame);
    assert_eq!(
        version_1.next_frame(),
        Err(FrameError::BadVersion(2)),
        "{name}"
    );
}

fn check_error_vector(vector: &Vector, route_id: u32, seq: u32, body: &[u8], frame: &[u8]) {
    let name = get(vector, "name");
    let (code, code_name) = get(vector, "code").split_once(' ').expect("`code NAME`");
    let code: u16 = code.parse().expect("code");
    let reason = get(vector, "reason");
    assert_eq!(decode_error_body(body), Some((code, reason)), "{name}");
    if let Some(app) = AppCode::new(code) {
        assert_eq!(code_name, "APPLICATION", "{name}");
        assert_eq!(ErrorCode::from_u16(code), None, "{name}: collides");
        assert_eq!(encode_app_error_body(app, reason), body, "{name}");
        let mut encoded = Vec::new();
        encode_frame(&mut encoded, FrameKind::Error, route_id, seq, body);
        assert_eq!(encoded, frame, "{name}: encode");
        return;
    }
    let known = ErrorCode::from_u16(code).expect("a known code");
    assert_eq!(known.name(), code_name, "{name}");
    let mut encoded = Vec::new();
    encode_error_frame(&mut encoded, route_id, seq, known, reason);
    assert_eq!(encoded, frame, "{name}: encode_error_frame");
}

#[test]
fn the_token_vector_matches_mint_and_verify() {
    let tokens: Vec<Vector> = vectors()
        .into_iter()
        .filter(|v| v.contains_key("token"))
        .collect();
    assert_eq!(tokens.len(), 1, "one token vector");
    let vector = &tokens[0];
    let secret = get(vector, "secret").as_bytes();
    let player_id: u64 = get(vector, "player_id").parse().unwrap();
    let expiry: u64 = get(vector, "expiry").parse().unwrap();
    let token = get(vector, "token");
    assert_eq!(token::mint(secret, player_id, expiry), token);
    let signed = get(vector, "signed");
    assert_eq!(signed, format!("v1.{player_id}.{expiry}"));
    assert!(token.starts_with(&format!("{signed}.")));
    assert_eq!(token.len(), signed.len() + 1 + 64);
    assert_eq!(
        token::verify(secret, token.as_bytes(), expiry - 1),
        Ok(player_id)
    );
    assert_eq!(
        token::verify(secret, token.as_bytes(), expiry),
        Err(TokenError::Expired)
    );
    assert_eq!(
        token::verify(b"another secret", token.as_bytes(), 0),
        Err(TokenError::BadMac)
    );
    // The documented login REQUEST carries exactly this token.
    let login = vectors()
        .into_iter()
        .find(|v| v.get("route").is_some_and(|r| r == "2 auth.login") && v["kind"] == "REQUEST")
        .expect("an auth.login REQUEST vector");
    assert_eq!(hex(get(&login, "body")), token.as_bytes());
    // The documented longest token is the codec's bound.
    assert!(DOC.contains(&format!("is {} bytes", token::MAX_TOKEN_LEN)));
}

#[test]
fn the_route_table_is_the_gateways() {
    let documented = documented_routes();
    // The routes of a node with the built-in types: the system's, the
    // player's and the room's, as they declare them.
    // The version-2 routes are served too, documented in their own table.
    let version_2 = version_2_routes();
    let table = routerd::builtins::builtin_routes();
    for route in table.routes() {
        let (name, direction, auth) = documented
            .get(&route.route_id)
            .or_else(|| version_2.get(&route.route_id))
            .unwrap_or_else(|| panic!("route {} is not documented", route.route_id));
        assert_eq!(name, route.name);
        let (want_direction, want_auth) = match route.direction {
            Direction::ClientToServer => (
                "client to server",
                if route.requires_auth { "yes" } else { "no" },
            ),
            Direction::ServerToClient => ("server to client (PUSH)", "-"),
        };
        assert_eq!(
            (direction.as_str(), auth.as_str()),
            (want_direction, want_auth)
        );
    }
    assert_eq!(
        documented.len() + version_2.len(),
        table.routes().len(),
        "{documented:?}"
    );
    // The wire crate's numbers are the same.
    use wire::client::route;
    for (id, name) in [
        (route::SYS_PING, "sys.ping"),
        (route::AUTH_LOGIN, "auth.login"),
        (route::PLAYER_GET, "player.get"),
        (route::PLAYER_INCR, "player.incr"),
        (route::ROOM_JOIN, "room.join"),
        (route::ROOM_LEAVE, "room.leave"),
        (route::ROOM_SAY, "room.say"),
        (route::ROOM_MESSAGE, "room.message"),
        (route::SYS_KICKED, "sys.kicked"),
        (route::SYS_REDIRECT, "sys.redirect"),
    ] {
        assert_eq!(documented[&id].0, name);
    }
    for (id, name) in [
        (route::AUTH_RESUME, "auth.resume"),
        (route::SYS_SESSION, "sys.session"),
    ] {
        assert_eq!(version_2[&id].0, name);
        assert!(!documented.contains_key(&id), "{name} is a version-2 route");
    }
}

#[test]
fn the_error_code_table_is_the_codecs() {
    let rows = table("## 4. ERROR body and codes");
    let documented: Vec<(u16, &str)> = rows
        .iter()
        .map(|row| (row[0].parse().expect("a code"), row[1].as_str()))
        .collect();
    let codes: Vec<(u16, &str)> = ErrorCode::ALL
        .iter()
        .map(|code| (*code as u16, code.name()))
        .collect();
    assert_eq!(documented, codes);
}
