//! The link handshake, sans-IO: four small messages before any frame, each
//! side proving it holds the cluster secret without sending it.
//!
//! ```text
//! dialer   -> acceptor  Hello      version, cluster name, from node, its
//!                                  incarnation and core, to node and core,
//!                                  a random nonce
//! acceptor -> dialer    Challenge  its incarnation, a random nonce,
//!                                  HMAC(secret, "A" | hello | incarnation | nonce)
//!                    or Refusal    a reason
//! dialer   -> acceptor  Proof      HMAC(secret, "D" | hello | challenge)
//! acceptor -> dialer    Verdict    accepted, or a refusal reason
//! ```
//!
//! Each message is `magic "RTLK" | kind u8 | body`, little-endian, at most
//! `MESSAGE_LEN_MAX` bytes. Both nonces are fresh per connection, so a
//! recorded handshake cannot be replayed. A link is up only after the
//! verdict: a peer with the wrong secret, cluster name or incarnation never
//! gets one.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::config::CLUSTER_NAME_LEN_MAX;

/// The link protocol this build speaks, refused with `version` by a node
/// of another. 2: every frame after the handshake travels in a record
/// sealed with a key of this connection (HMAC-SHA256). 3: records sealed
/// with AES-128-GCM, every head and payload on a 16-byte grid so that a
/// reader reads frames in place, payloads without their checksum
/// (`codec`). 4: a routed request carries the client's request key. 5: a
/// player object may ask a session's gateway whether the session still
/// stands (`SessionCheck`).
pub const LINK_VERSION: u16 = 5;
const MAGIC: [u8; 4] = *b"RTLK";
const NONCE_LEN: usize = 16;
const MAC_LEN: usize = 32;
/// The largest handshake message (a Hello with the longest name).
pub const MESSAGE_LEN_MAX: usize = 4 + 1 + 2 + 1 + CLUSTER_NAME_LEN_MAX + 8 + 8 + 2 + 8 + 2 + 16;

const KIND_HELLO: u8 = 1;
const KIND_CHALLENGE: u8 = 2;
const KIND_PROOF: u8 = 3;
const KIND_VERDICT: u8 = 4;

/// Why a handshake was refused (by either side).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Version = 1,
    ClusterName = 2,
    BadSecret = 3,
    /// The peer's incarnation is not the one membership knows live.
    StaleIncarnation = 4,
    /// The connection reached a node or core it was not meant for.
    WrongNode = 5,
    Malformed = 6,
    Timeout = 7,
    /// The dialler's node id is not in the acceptor's membership view.
    NotMember = 8,
}

impl Refusal {
    fn from_u8(value: u8) -> Refusal {
        match value {
            1 => Refusal::Version,
            2 => Refusal::ClusterName,
            3 => Refusal::BadSecret,
            4 => Refusal::StaleIncarnation,
            5 => Refusal::WrongNode,
            7 => Refusal::Timeout,
            8 => Refusal::NotMember,
            _ => Refusal::Malformed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Version => "version",
            Refusal::ClusterName => "cluster_name",
            Refusal::BadSecret => "bad_secret",
            Refusal::StaleIncarnation => "stale_incarnation",
            Refusal::WrongNode => "wrong_node",
            Refusal::Malformed => "malformed",
            Refusal::Timeout => "timeout",
            Refusal::NotMember => "not_member",
        }
    }
}

/// The dialer's opening message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub cluster: String,
    pub from_node: u64,
    pub from_incarnation: u64,
    pub from_core: u16,
    pub to_node: u64,
    pub to_core: u16,
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = header(KIND_HELLO);
        out.extend_from_slice(&self.version.to_le_bytes());
        let name = &self.cluster.as_bytes()[..self.cluster.len().min(CLUSTER_NAME_LEN_MAX)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        out.extend_from_slice(&self.from_node.to_le_bytes());
        out.extend_from_slice(&self.from_incarnation.to_le_bytes());
        out.extend_from_slice(&self.from_core.to_le_bytes());
        out.extend_from_slice(&self.to_node.to_le_bytes());
        out.extend_from_slice(&self.to_core.to_le_bytes());
        out.extend_from_slice(&self.nonce);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Hello, Refusal> {
        let mut reader = Reader::new(bytes, KIND_HELLO)?;
        let version = reader.u16()?;
        let name_len = usize::from(reader.u8()?);
        if name_len > CLUSTER_NAME_LEN_MAX {
            return Err(Refusal::Malformed);
        }
        let cluster = std::str::from_utf8(reader.take(name_len)?)
            .map_err(|_| Refusal::Malformed)?
            .to_string();
        let hello = Hello {
            version,
            cluster,
            from_node: reader.u64()?,
            from_incarnation: reader.u64()?,
            from_core: reader.u16()?,
            to_node: reader.u64()?,
            to_core: reader.u16()?,
            nonce: reader.array()?,
        };
        reader.finish()?;
        Ok(hello)
    }
}

/// The acceptor's answer to a Hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    Proceed {
        incarnation: u64,
        nonce: [u8; NONCE_LEN],
        mac: [u8; MAC_LEN],
    },
    Refused(Refusal),
}

impl Challenge {
    /// The acceptor's challenge, proving it holds `secret`.
    pub fn new(secret: &[u8], hello: &[u8], incarnation: u64, nonce: [u8; NONCE_LEN]) -> Self {
        let mac = mac(secret, b"A", &[hello, &incarnation.to_le_bytes(), &nonce]);
        Challenge::Proceed {
            incarnation,
            nonce,
            mac,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = header(KIND_CHALLENGE);
        match self {
            Challenge::Proceed {
                incarnation,
                nonce,
                mac,
            } => {
                out.push(0);
                out.extend_from_slice(&incarnation.to_le_bytes());
                out.extend_from_slice(nonce);
                out.extend_from_slice(mac);
            }
            Challenge::Refused(reason) => out.extend_from_slice(&[1, *reason as u8]),
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Challenge, Refusal> {
        let mut reader = Reader::new(bytes, KIND_CHALLENGE)?;
        let challenge = match reader.u8()? {
            0 => Challenge::Proceed {
                incarnation: reader.u64()?,
                nonce: reader.array()?,
                mac: reader.array()?,
            },
            1 => Challenge::Refused(Refusal::from_u8(reader.u8()?)),
            _ => return Err(Refusal::Malformed),
        };
        reader.finish()?;
        Ok(challenge)
    }

    /// Whether the acceptor's MAC proves it holds `secret` (constant-time).
    pub fn verify(&self, secret: &[u8], hello: &[u8]) -> bool {
        match self {
            Challenge::Proceed {
                incarnation,
                nonce,
                mac: got,
            } => verify(
                secret,
                b"A",
                &[hello, &incarnation.to_le_bytes(), nonce],
                got,
            ),
            Challenge::Refused(_) => false,
        }
    }
}

/// The dialer's MAC over the Hello and the Challenge.
pub fn proof(secret: &[u8], hello: &[u8], challenge: &[u8]) -> Vec<u8> {
    let mut out = header(KIND_PROOF);
    out.extend_from_slice(&mac(secret, b"D", &[hello, challenge]));
    out
}

/// Whether a Proof message proves the dialer holds `secret`.
pub fn check_proof(secret: &[u8], hello: &[u8], challenge: &[u8], message: &[u8]) -> bool {
    let Ok(mut reader) = Reader::new(message, KIND_PROOF) else {
        return false;
    };
    let Ok(got) = reader.array::<MAC_LEN>() else {
        return false;
    };
    reader.finish().is_ok() && verify(secret, b"D", &[hello, challenge], &got)
}

/// The acceptor's last word.
pub fn verdict(outcome: Result<(), Refusal>) -> Vec<u8> {
    let mut out = header(KIND_VERDICT);
    match outcome {
        Ok(()) => out.push(0),
        Err(reason) => out.extend_from_slice(&[1, reason as u8]),
    }
    out
}

pub fn decode_verdict(bytes: &[u8]) -> Result<(), Refusal> {
    let mut reader = Reader::new(bytes, KIND_VERDICT)?;
    let outcome = match reader.u8()? {
        0 => Ok(()),
        1 => Err(Refusal::from_u8(reader.u8()?)),
        _ => return Err(Refusal::Malformed),
    };
    reader.finish()?;
    outcome
}

fn header(kind: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(MESSAGE_LEN_MAX);
    out.extend_from_slice(&MAGIC);
    out.push(kind);
    out
}

fn mac(secret: &[u8], role: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    let mut hmac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    hmac.update(b"routerd-link-");
    hmac.update(role);
    for part in parts {
        hmac.update(&(part.len() as u32).to_le_bytes());
        hmac.update(part);
    }
    hmac.finalize().into_bytes().into()
}

fn verify(secret: &[u8], role: &[u8], parts: &[&[u8]], got: &[u8; MAC_LEN]) -> bool {
    let mut hmac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    hmac.update(b"routerd-link-");
    hmac.update(role);
    for part in parts {
        hmac.update(&(part.len() as u32).to_le_bytes());
        hmac.update(part);
    }
    hmac.verify_slice(got).is_ok()
}

/// The keys that seal a link's records, one per direction, derived from
/// the cluster secret and this connection's Hello and Challenge (so both
/// nonces): a new connection has new keys, and a record recorded on one
/// cannot be played on another.
#[derive(Clone)]
pub struct LinkKeys {
    /// What the dialler sends (messages, pings).
    pub dialler_to_acceptor: [u8; MAC_LEN],
    /// What the acceptor sends (pongs).
    pub acceptor_to_dialler: [u8; MAC_LEN],
}

impl LinkKeys {
    /// Both sides compute the same keys from the same two messages.
    pub fn derive(secret: &[u8], hello: &[u8], challenge: &[u8]) -> LinkKeys {
        LinkKeys {
            dialler_to_acceptor: mac(secret, b"K>", &[hello, challenge]),
            acceptor_to_dialler: mac(secret, b"K<", &[hello, challenge]),
        }
    }
}

impl std::fmt::Debug for LinkKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKeys(<not shown>)")
    }
}

/// A fresh random nonce.
pub fn nonce() -> [u8; NONCE_LEN] {
    rand::random()
}

/// How many bytes a handshake message of `kind` has, once its first five
/// bytes are read (the Hello's length depends on its name), or `None` when
/// more must be read first.
pub fn message_len(bytes: &[u8]) -> Result<Option<usize>, Refusal> {
    if bytes.len() < 5 {
        return Ok(None);
    }
    if bytes[..4] != MAGIC {
        return Err(Refusal::Malformed);
    }
    Ok(Some(match bytes[4] {
        KIND_HELLO => {
            if bytes.len() < 8 {
                return Ok(None);
            }
            5 + 2 + 1 + usize::from(bytes[7]) + 8 + 8 + 2 + 8 + 2 + NONCE_LEN
        }
        KIND_CHALLENGE => {
            if bytes.len() < 6 {
                return Ok(None);
            }
            match bytes[5] {
                0 => 6 + 8 + NONCE_LEN + MAC_LEN,
                _ => 7,
            }
        }
        KIND_PROOF => 5 + MAC_LEN,
        KIND_VERDICT => {
            if bytes.len() < 6 {
                return Ok(None);
            }
            match bytes[5] {
                0 => 6,
                _ => 7,
            }
        }
        _ => return Err(Refusal::Malformed),
    }))
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], kind: u8) -> Result<Reader<'a>, Refusal> {
        if bytes.len() < 5 || bytes[..4] != MAGIC || bytes[4] != kind {
            return Err(Refusal::Malformed);
        }
        Ok(Reader { bytes: &bytes[5..] })
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], Refusal> {
        let (head, rest) = self.bytes.split_at_checked(len).ok_or(Refusal::Malformed)?;
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Refusal> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    fn u8(&mut self) -> Result<u8, Refusal> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Refusal> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, Refusal> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn finish(self) -> Result<(), Refusal> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Refusal::Malformed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            version: LINK_VERSION,
            cluster: "routerd".into(),
            from_node: 1,
            from_incarnation: 7,
            from_core: 1,
            to_node: 2,
            to_core: 0,
            nonce: [9; NONCE_LEN],
        }
    }

    #[test]
    fn messages_round_trip_and_announce_their_length() {
        let bytes = hello().encode();
        assert_eq!(message_len(&bytes), Ok(Some(bytes.len())));
        assert_eq!(Hello::decode(&bytes), Ok(hello()));
        let challenge = Challenge::new(b"s", &bytes, 3, [4; NONCE_LEN]);
        let encoded = challenge.encode();
        assert_eq!(message_len(&encoded), Ok(Some(encoded.len())));
        assert_eq!(Challenge::decode(&encoded), Ok(challenge));
        let refused = Challenge::Refused(Refusal::ClusterName).encode();
        assert_eq!(message_len(&refused), Ok(Some(refused.len())));
        assert_eq!(
            Challenge::decode(&refused),
            Ok(Challenge::Refused(Refusal::ClusterName))
        );
        for outcome in [Ok(()), Err(Refusal::StaleIncarnation)] {
            let bytes = verdict(outcome);
            assert_eq!(message_len(&bytes), Ok(Some(bytes.len())));
            assert_eq!(decode_verdict(&bytes), outcome);
        }
    }

    #[test]
    fn only_the_same_secret_proves_either_side() {
        let hello = hello().encode();
        let challenge = Challenge::new(b"right", &hello, 3, nonce());
        assert!(challenge.verify(b"right", &hello));
        assert!(!challenge.verify(b"wrong", &hello));
        let challenge = challenge.encode();
        let proof = proof(b"right", &hello, &challenge);
        assert!(check_proof(b"right", &hello, &challenge, &proof));
        assert!(!check_proof(b"wrong", &hello, &challenge, &proof));
        // A proof made for another challenge (a replay) is refused.
        let other = Challenge::new(b"right", &hello, 3, nonce()).encode();
        assert!(!check_proof(b"right", &hello, &other, &proof));
    }

    #[test]
    fn garbage_is_malformed_never_a_panic() {
        assert_eq!(message_len(b"XXXX\x01"), Err(Refusal::Malformed));
        assert_eq!(message_len(b"RTL"), Ok(None));
        let bytes = hello().encode();
        for len in 0..bytes.len() {
            assert!(Hello::decode(&bytes[..len]).is_err(), "prefix {len}");
        }
        let mut long_name = bytes.clone();
        long_name[7] = 200;
        assert_eq!(Hello::decode(&long_name), Err(Refusal::Malformed));
        for junk in [&b""[..], b"RTLK\x09", b"RTLK\x04\x07", b"RTLK\x02\x05"] {
            let _ = message_len(junk);
            let _ = Challenge::decode(junk);
            let _ = decode_verdict(junk);
        }
    }
}
