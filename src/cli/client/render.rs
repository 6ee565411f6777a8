//! Server frames as output lines: one line a frame, stable and greppable
//! (`OK get 42`, `ERROR AUTH_REQUIRED: login first`,
//! `PUSH room.message room=7 from=3 hello`). Sans-IO: every byte comes from
//! the server, so nothing here panics on it; a frame that breaks the
//! protocol is a [`Malformed`] the caller treats as fatal.

use std::fmt::Write as _;

use wire::client::{decode_error_body, route, ErrorCode, FrameKind, FrameRef};

use super::command::Sent;

/// Longest binary body printed as hex; the rest is elided with its length.
const HEX_SHOWN_MAX: usize = 64;

/// A server frame that breaks the protocol, as a sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// The line for an answer (RESPONSE or ERROR) to the request `sent`.
pub fn answer(frame: &FrameRef<'_>, sent: &Sent) -> Result<String, Malformed> {
    if frame.header.route_id != sent.route_id() {
        return Err(Malformed(format!(
            "the answer to seq {} names route {}, the request was route {} ({})",
            frame.header.seq,
            frame.header.route_id,
            sent.route_id(),
            sent.name()
        )));
    }
    match frame.header.kind {
        FrameKind::Error => error(frame.body),
        FrameKind::Response => response(frame.body, sent),
        kind => Err(Malformed(format!("a {kind:?} frame is not an answer"))),
    }
}

/// `ERROR <CODE>: <reason>`, or `ERROR <CODE>` with an empty reason. A code
/// this client does not know (a newer server's) prints as `CODE_<n>`.
pub fn error(body: &[u8]) -> Result<String, Malformed> {
    let (code, reason) = decode_error_body(body).ok_or_else(|| {
        Malformed(format!(
            "an ERROR body must be a u16 code and a UTF-8 reason, got {}",
            hex(body)
        ))
    })?;
    // An object type's own code (docs/protocol.md, section 4) is told
    // apart from a protocol code this build does not know.
    let mut line = match ErrorCode::from_u16(code) {
        Some(code) => format!("ERROR {}", code.name()),
        None if wire::client::AppCode::new(code).is_some() => format!("ERROR APP_{code}"),
        None => format!("ERROR CODE_{code}"),
    };
    if !reason.is_empty() {
        line.push_str(": ");
        push_text(&mut line, reason);
    }
    Ok(line)
}

fn response(body: &[u8], sent: &Sent) -> Result<String, Malformed> {
    let name = sent.name();
    let mut line = format!("OK {name}");
    match sent {
        Sent::Login => write!(line, " {}", u64_le(body, name)?),
        Sent::Ping | Sent::Keepalive => {
            if !body.is_empty() {
                line.push(' ');
                push_bytes(&mut line, body);
            }
            Ok(())
        }
        Sent::Get | Sent::Incr => write!(line, " {}", u64_le(body, name)? as i64),
        Sent::Join(room) => write!(line, " room={room} members={}", u32_le(body, name)?),
        Sent::Leave(room) => {
            if !body.is_empty() {
                return Err(wrong_length(name, body, "an empty body"));
            }
            write!(line, " room={room}")
        }
        Sent::Say(room) => write!(line, " room={room} sent={}", u32_le(body, name)?),
    }
    .map_err(|_| Malformed("formatting failed".into()))?;
    Ok(line)
}

/// The line for a PUSH. Routes this client does not know print as
/// `PUSH route=<n> <hex>`, so a newer server's pushes are visible too.
pub fn push(route_id: u32, body: &[u8]) -> Result<String, Malformed> {
    let mut line = String::from("PUSH ");
    match route_id {
        route::ROOM_MESSAGE => {
            let (room, rest) = split_u64(body, "room.message")?;
            let (from, text) = split_u64(rest, "room.message")?;
            let _ = write!(line, "room.message room={room} from={from}");
            if !text.is_empty() {
                line.push(' ');
                push_bytes(&mut line, text);
            }
        }
        route::SYS_KICKED => {
            line.push_str("sys.kicked");
            if !body.is_empty() {
                line.push(' ');
                push_bytes(&mut line, body);
            }
        }
        route::SYS_REDIRECT => {
            let (grace, to) = body
                .split_first_chunk::<4>()
                .ok_or_else(|| wrong_length("sys.redirect", body, "a u32 and a host:port"))?;
            let _ = write!(
                line,
                "sys.redirect grace_ms={} to=",
                u32::from_le_bytes(*grace)
            );
            push_bytes(&mut line, to);
        }
        other => {
            let _ = write!(line, "route={other} {}", hex(body));
        }
    }
    Ok(line)
}

fn u64_le(body: &[u8], name: &str) -> Result<u64, Malformed> {
    let bytes: [u8; 8] = body
        .try_into()
        .map_err(|_| wrong_length(name, body, "8 bytes"))?;
    Ok(u64::from_le_bytes(bytes))
}

fn u32_le(body: &[u8], name: &str) -> Result<u32, Malformed> {
    let bytes: [u8; 4] = body
        .try_into()
        .map_err(|_| wrong_length(name, body, "4 bytes"))?;
    Ok(u32::from_le_bytes(bytes))
}

fn split_u64<'a>(body: &'a [u8], name: &str) -> Result<(u64, &'a [u8]), Malformed> {
    let (head, rest) = body
        .split_first_chunk::<8>()
        .ok_or_else(|| wrong_length(name, body, "two u64 and a text"))?;
    Ok((u64::from_le_bytes(*head), rest))
}

fn wrong_length(name: &str, body: &[u8], expected: &str) -> Malformed {
    Malformed(format!(
        "{name}: expected {expected}, got {} bytes ({})",
        body.len(),
        hex(body)
    ))
}

/// Text as one line: UTF-8 printed with control characters and backslashes
/// escaped (`\n`, `\\`, `\u{1b}`), so a message can never break the
/// one-line-a-frame output; other bytes as `hex:...`.
fn push_bytes(line: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => push_text(line, text),
        Err(_) => line.push_str(&hex(bytes)),
    }
}

fn push_text(line: &mut String, text: &str) {
    for c in text.chars() {
        if c == '\\' || c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
}

/// `hex:` and the bytes, long bodies cut at [`HEX_SHOWN_MAX`].
fn hex(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(HEX_SHOWN_MAX)];
    let mut out = String::with_capacity(4 + shown.len() * 2 + 24);
    out.push_str("hex:");
    for byte in shown {
        let _ = write!(out, "{byte:02x}");
    }
    if shown.len() < bytes.len() {
        let _ = write!(out, "...({} bytes)", bytes.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::client::{encode_error_body, Header};

    fn frame(kind: FrameKind, route_id: u32, body: &[u8]) -> FrameRef<'_> {
        FrameRef {
            header: Header {
                kind,
                route_id,
                seq: 3,
                body_len: body.len() as u32,
            },
            body,
            request_key: None,
        }
    }

    fn ok(sent: Sent, body: &[u8]) -> String {
        let route_id = sent.route_id();
        answer(&frame(FrameKind::Response, route_id, body), &sent).expect("well formed")
    }

    #[test]
    fn responses_print_their_values() {
        assert_eq!(ok(Sent::Login, &42u64.to_le_bytes()), "OK login 42");
        assert_eq!(ok(Sent::Get, &(-5i64).to_le_bytes()), "OK get -5");
        assert_eq!(ok(Sent::Incr, &47i64.to_le_bytes()), "OK incr 47");
        assert_eq!(ok(Sent::Ping, b"hello"), "OK ping hello");
        assert_eq!(ok(Sent::Ping, b""), "OK ping");
        assert_eq!(
            ok(Sent::Join(7), &2u32.to_le_bytes()),
            "OK join room=7 members=2"
        );
        assert_eq!(ok(Sent::Leave(7), b""), "OK leave room=7");
        assert_eq!(
            ok(Sent::Say(7), &3u32.to_le_bytes()),
            "OK say room=7 sent=3"
        );
    }

    #[test]
    fn errors_print_code_names_and_reasons() {
        let body = encode_error_body(ErrorCode::Unavailable, "owner unreachable");
        let line = answer(&frame(FrameKind::Error, 10, &body), &Sent::Get).unwrap();
        assert_eq!(line, "ERROR UNAVAILABLE: owner unreachable");
        let bare = encode_error_body(ErrorCode::Timeout, "");
        assert_eq!(error(&bare).unwrap(), "ERROR TIMEOUT");
        let mut future = 12u16.to_le_bytes().to_vec();
        future.extend_from_slice(b"new");
        assert_eq!(error(&future).unwrap(), "ERROR CODE_12: new");
        let app = wire::client::encode_app_error_body(wire::client::AppCode::nth(3), "taken");
        assert_eq!(error(&app).unwrap(), "ERROR APP_32771: taken");
        assert!(error(&[1]).is_err());
        assert!(error(&[1, 0, 0xFF]).is_err());
    }

    #[test]
    fn pushes_print_one_line_each() {
        let mut body = 7u64.to_le_bytes().to_vec();
        body.extend_from_slice(&3u64.to_le_bytes());
        body.extend_from_slice(b"hello");
        assert_eq!(
            push(route::ROOM_MESSAGE, &body).unwrap(),
            "PUSH room.message room=7 from=3 hello"
        );
        assert_eq!(
            push(route::SYS_KICKED, b"logged in elsewhere").unwrap(),
            "PUSH sys.kicked logged in elsewhere"
        );
        let mut redirect = 5000u32.to_le_bytes().to_vec();
        redirect.extend_from_slice(b"10.0.0.2:7400");
        assert_eq!(
            push(route::SYS_REDIRECT, &redirect).unwrap(),
            "PUSH sys.redirect grace_ms=5000 to=10.0.0.2:7400"
        );
        assert_eq!(
            push(route::SYS_REDIRECT, &0u32.to_le_bytes()).unwrap(),
            "PUSH sys.redirect grace_ms=0 to="
        );
        assert_eq!(push(200, &[1, 0xAB]).unwrap(), "PUSH route=200 hex:01ab");
    }

    #[test]
    fn server_text_cannot_break_the_line() {
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend_from_slice(&2u64.to_le_bytes());
        body.extend_from_slice("a\nOK get 1\\ \u{1b}[31m é".as_bytes());
        assert_eq!(
            push(route::ROOM_MESSAGE, &body).unwrap(),
            "PUSH room.message room=1 from=2 a\\nOK get 1\\\\ \\u{1b}[31m é"
        );
        assert_eq!(ok(Sent::Ping, &[0xFF, 0]), "OK ping hex:ff00");
        let long = vec![0xEEu8; 100];
        let line = push(999, &long).unwrap();
        assert!(line.ends_with("...(100 bytes)"), "{line}");
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        let cases: [(Sent, &[u8]); 6] = [
            (Sent::Get, &[1, 2, 3]),
            (Sent::Incr, &[0; 9]),
            (Sent::Login, &[]),
            (Sent::Join(1), &[0; 8]),
            (Sent::Leave(1), &[0]),
            (Sent::Say(1), &[0; 3]),
        ];
        for (sent, body) in cases {
            let route_id = sent.route_id();
            let result = answer(&frame(FrameKind::Response, route_id, body), &sent);
            assert!(result.is_err(), "{sent:?} {body:?}");
        }
        // An answer on another route than the request's.
        let wrong = answer(&frame(FrameKind::Response, 11, &[0; 8]), &Sent::Get);
        assert!(wrong.unwrap_err().0.contains("names route 11"));
        assert!(push(route::ROOM_MESSAGE, &[0; 15]).is_err());
        assert!(push(route::SYS_REDIRECT, &[0; 3]).is_err());
    }
}
