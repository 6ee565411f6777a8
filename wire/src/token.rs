//! Login tokens of docs/protocol.md: `v1.<player_id>.<expiry>.<mac>`.
//!
//! `player_id` (never 0) and `expiry` (unix seconds) are decimal without
//! leading zeros; `mac` is the lowercase hex HMAC-SHA256 of the ASCII string
//! `v1.<player_id>.<expiry>` under the server's secret.
//!
//! Expiry: a token is valid while `now_unix_s < expiry` and expired from the
//! second `now_unix_s >= expiry` on; `expiry` is the first second at which the
//! token no longer works.
//!
//! Parsing is strict, so one player id has exactly one spelling per expiry:
//! no leading zeros, signs, whitespace, empty parts, extra dots, uppercase
//! hex or non-ASCII bytes, and at most [`MAX_TOKEN_LEN`] bytes in all. The mac
//! is checked before the expiry, so [`TokenError::Expired`] is reported only
//! for tokens the secret really signed.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

const PREFIX: &[u8] = b"v1.";
const MAC_HEX_LEN: usize = 64;
/// Digits in `u64::MAX`, the longest decimal part.
const MAX_DECIMAL_LEN: usize = 20;

/// The longest well-formed token: `v1.` + two 20-digit decimals + two dots +
/// 64 hex digits. Anything longer is rejected before it is looked at.
pub const MAX_TOKEN_LEN: usize =
    PREFIX.len() + MAX_DECIMAL_LEN + 1 + MAX_DECIMAL_LEN + 1 + MAC_HEX_LEN;

/// Why a login token is refused; the gateway answers each with
/// `AUTH_FAILED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum TokenError {
    /// Not `v1.<player_id>.<expiry>.<mac>`: a wrong prefix, a part that is
    /// not a canonical decimal or 64 lowercase hex digits, player id 0, or
    /// longer than [`MAX_TOKEN_LEN`].
    #[error("malformed token")]
    Malformed,
    /// The MAC is not the HMAC-SHA256 of the rest under the gateway's secret.
    #[error("token signature does not match")]
    BadMac,
    /// Well-formed and signed, but its expiry (unix seconds) is not after
    /// the `now_unix_s` it was checked at (the gateway's wall clock).
    #[error("token expired")]
    Expired,
}

/// A token for `player_id` valid until `expiry_unix_s` (exclusive).
///
/// # Panics
///
/// If `player_id` is 0, which docs/protocol.md reserves: callers validate
/// user input before minting.
pub fn mint(secret: &[u8], player_id: u64, expiry_unix_s: u64) -> String {
    assert_ne!(player_id, 0, "player id 0 is reserved");
    let signed = format!("v1.{player_id}.{expiry_unix_s}");
    let tag = mac(secret, signed.as_bytes()).finalize().into_bytes();
    let mut token = String::with_capacity(signed.len() + 1 + MAC_HEX_LEN);
    token.push_str(&signed);
    token.push('.');
    for byte in tag {
        token.push(hex_digit(byte >> 4));
        token.push(hex_digit(byte & 0x0F));
    }
    token
}

/// The player id of a token the secret signed that has not expired at
/// `now_unix_s`.
pub fn verify(secret: &[u8], token: &[u8], now_unix_s: u64) -> Result<u64, TokenError> {
    verify_with_expiry(secret, token, now_unix_s).map(|(player_id, _)| player_id)
}

/// As [`verify`], with the token's expiry (unix seconds): a session logged
/// in with it lasts until then (docs/protocol.md, section 2).
pub fn verify_with_expiry(
    secret: &[u8],
    token: &[u8],
    now_unix_s: u64,
) -> Result<(u64, u64), TokenError> {
    let parsed = parse(token)?;
    mac(secret, parsed.signed)
        .verify_slice(&parsed.tag)
        .map_err(|_| TokenError::BadMac)?;
    if now_unix_s >= parsed.expiry_unix_s {
        return Err(TokenError::Expired);
    }
    Ok((parsed.player_id, parsed.expiry_unix_s))
}

struct Parsed<'a> {
    /// `v1.<player_id>.<expiry>`, the bytes the mac covers.
    signed: &'a [u8],
    player_id: u64,
    expiry_unix_s: u64,
    tag: [u8; MAC_HEX_LEN / 2],
}

fn parse(token: &[u8]) -> Result<Parsed<'_>, TokenError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Malformed);
    }
    let rest = token.strip_prefix(PREFIX).ok_or(TokenError::Malformed)?;
    let mut parts = rest.split(|byte| *byte == b'.');
    let player_id = parts.next().ok_or(TokenError::Malformed)?;
    let expiry = parts.next().ok_or(TokenError::Malformed)?;
    let mac_hex = parts.next().ok_or(TokenError::Malformed)?;
    if parts.next().is_some() {
        return Err(TokenError::Malformed);
    }
    let player_id = parse_decimal(player_id)?;
    if player_id == 0 {
        return Err(TokenError::Malformed);
    }
    let expiry_unix_s = parse_decimal(expiry)?;
    let tag = parse_hex(mac_hex)?;
    let signed_len = token.len() - mac_hex.len() - 1;
    Ok(Parsed {
        signed: &token[..signed_len],
        player_id,
        expiry_unix_s,
        tag,
    })
}

/// A canonical decimal: digits only, no leading zero unless it is `0`, and
/// within `u64`.
fn parse_decimal(digits: &[u8]) -> Result<u64, TokenError> {
    if digits.is_empty() || digits.len() > MAX_DECIMAL_LEN {
        return Err(TokenError::Malformed);
    }
    if digits.len() > 1 && digits[0] == b'0' {
        return Err(TokenError::Malformed);
    }
    let mut value: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return Err(TokenError::Malformed);
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit - b'0')))
            .ok_or(TokenError::Malformed)?;
    }
    Ok(value)
}

fn parse_hex(hex: &[u8]) -> Result<[u8; MAC_HEX_LEN / 2], TokenError> {
    if hex.len() != MAC_HEX_LEN {
        return Err(TokenError::Malformed);
    }
    let mut tag = [0u8; MAC_HEX_LEN / 2];
    for (byte, pair) in tag.iter_mut().zip(hex.chunks_exact(2)) {
        *byte = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
    }
    Ok(tag)
}

fn hex_value(digit: u8) -> Result<u8, TokenError> {
    match digit {
        b'0'..=b'9' => Ok(digit - b'0'),
        b'a'..=b'f' => Ok(digit - b'a' + 10),
        _ => Err(TokenError::Malformed),
    }
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(nibble & 0x0F)])
}

fn mac(secret: &[u8], signed: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length (long ones are hashed first), so this
    // cannot fail.
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(signed);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"test-secret";

    #[test]
    fn rfc4231_case_2_pins_the_mac() {
        // HMAC-SHA256 with key "Jefe" over "what do ya want for nothing?".
        let tag = mac(b"Jefe", b"what do ya want for nothing?")
            .finalize()
            .into_bytes();
        let hex: String = tag
            .iter()
            .flat_map(|b| [hex_digit(b >> 4), hex_digit(b & 0xF)])
            .collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn good_token_verifies_until_expiry() {
        let token = mint(SECRET, 42, 1_000);
        assert!(token.starts_with("v1.42.1000."));
        assert_eq!(token.len(), "v1.42.1000.".len() + 64);
        assert_eq!(verify(SECRET, token.as_bytes(), 0), Ok(42));
        assert_eq!(verify(SECRET, token.as_bytes(), 999), Ok(42));
        assert_eq!(
            verify(SECRET, token.as_bytes(), 1_000),
            Err(TokenError::Expired)
        );
        assert_eq!(
            verify(SECRET, token.as_bytes(), u64::MAX),
            Err(TokenError::Expired)
        );
    }

    #[test]
    fn extremes_round_trip() {
        let token = mint(SECRET, u64::MAX, u64::MAX);
        assert_eq!(token.len(), MAX_TOKEN_LEN);
        assert_eq!(verify(SECRET, token.as_bytes(), u64::MAX - 1), Ok(u64::MAX));
        let token = mint(SECRET, 1, 0);
        assert_eq!(
            verify(SECRET, token.as_bytes(), 0),
            Err(TokenError::Expired)
        );
    }

    #[test]
    fn wrong_secret_or_tampered_parts_are_bad_mac() {
        let token = mint(SECRET, 42, 1_000);
        assert_eq!(
            verify(b"other", token.as_bytes(), 0),
            Err(TokenError::BadMac)
        );
        let forged = token.replacen("v1.42.", "v1.43.", 1);
        assert_eq!(
            verify(SECRET, forged.as_bytes(), 0),
            Err(TokenError::BadMac)
        );
        let extended = token.replacen(".1000.", ".9999.", 1);
        assert_eq!(
            verify(SECRET, extended.as_bytes(), 0),
            Err(TokenError::BadMac)
        );
        let mut flipped = token.into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(verify(SECRET, &flipped, 0), Err(TokenError::BadMac));
    }

    #[test]
    fn expired_forgery_is_bad_mac_not_expired() {
        let token = mint(b"other", 42, 10);
        assert_eq!(
            verify(SECRET, token.as_bytes(), 100),
            Err(TokenError::BadMac)
        );
    }

    #[test]
    fn malformed_tokens_are_rejected() {
        let good = mint(SECRET, 42, 1_000);
        let mac = &good["v1.42.1000.".len()..];
        let cases: Vec<String> = vec![
            String::new(),
            "v1".into(),
            "v1.".into(),
            format!("v2.42.1000.{mac}"),
            format!("V1.42.1000.{mac}"),
            format!("v1.042.1000.{mac}"),
            format!("v1.42.01000.{mac}"),
            format!("v1.+42.1000.{mac}"),
            format!("v1.-42.1000.{mac}"),
            format!("v1. 42.1000.{mac}"),
            format!("v1.0.1000.{mac}"),
            format!("v1..1000.{mac}"),
            format!("v1.42..{mac}"),
            "v1.42.1000.".into(),
            format!("v1.42.1000.{mac}."),
            format!("v1.42.1000.{mac}.x"),
            format!("v1.42.1000.{}", mac.to_uppercase()),
            format!("v1.42.1000.{}", &mac[..63]),
            format!("v1.42.1000.{mac}0"),
            format!("v1.42.1000.{mac}\n"),
            format!("v1.42.1000.{}g", &mac[..63]),
            format!("v1.42.1000.{}é", &mac[..62]),
            format!("v1.٤٢.1000.{mac}"),
            format!("v1.18446744073709551616.1000.{mac}"),
            format!("v1.42.18446744073709551616.{mac}"),
            format!("v1.{}.1000.{mac}", "9".repeat(200)),
        ];
        for case in cases {
            assert_eq!(
                verify(SECRET, case.as_bytes(), 0),
                Err(TokenError::Malformed),
                "{case:?}"
            );
        }
        assert_eq!(verify(SECRET, &[0xFF; 4096], 0), Err(TokenError::Malformed));
    }

    #[test]
    #[should_panic(expected = "player id 0 is reserved")]
    fn minting_player_zero_panics() {
        mint(SECRET, 0, 1);
    }
}
