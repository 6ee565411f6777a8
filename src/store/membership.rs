//! The membership table's row and its byte encoding. Addresses and actors
//! are stored as one explicit little-endian blob so that SQLite and Scylla
//! keep the same bytes and decoding is one bounds-checked function.

use super::record::NodeId;

/// An encoded row's addresses and actors may not exceed this many bytes: a
/// node advertises a handful of addresses and at most a few thousand
/// actors, and every node reads every row on each poll.
pub const MEMBER_ROW_BYTES_MAX: usize = 256 * 1024;

/// `list_members` returns at most this many rows: a bound on one poll.
pub const MEMBERS_MAX: usize = 4096;

/// One node's advertisement in the membership table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRow {
    pub node_id: NodeId,
    pub addresses: Vec<String>,
    pub core_count: u32,
    pub actors: Vec<AdvertisedActor>,
    /// When the node last wrote its row, in unix milliseconds.
    pub heartbeat_ms: u64,
}

/// An actor the node hosts, the message ids it serves and its weight for
/// weighted selection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdvertisedActor {
    pub actor_id: u64,
    pub actor_type: u32,
    pub msg_ids: Vec<u32>,
    pub weight: u32,
}

impl MemberRow {
    /// A row is live while its heartbeat is younger than `ttl_ms`. A
    /// heartbeat from the future (clock skew) counts as live.
    pub fn is_live(&self, now_ms: u64, ttl_ms: u64) -> bool {
        now_ms.saturating_sub(self.heartbeat_ms) < ttl_ms
    }
}

/// Encodes the addresses: `count: u32`, then `len: u32, utf8 bytes` each.
pub(crate) fn encode_addresses(addresses: &[String]) -> Vec<u8> {
    let mut bytes = Vec::new();
    put_u32(&mut bytes, addresses.len());
    for address in addresses {
        put_u32(&mut bytes, address.len());
        bytes.extend_from_slice(address.as_bytes());
    }
    bytes
}

/// Encodes the actors: `count: u32`, then per actor `actor_id: u64,
/// actor_type: u32, weight: u32, msg_count: u32, msg_ids: u32...`.
pub(crate) fn encode_actors(actors: &[AdvertisedActor]) -> Vec<u8> {
    let mut bytes = Vec::new();
    put_u32(&mut bytes, actors.len());
    for actor in actors {
        bytes.extend_from_slice(&actor.actor_id.to_le_bytes());
        bytes.extend_from_slice(&actor.actor_type.to_le_bytes());
        bytes.extend_from_slice(&actor.weight.to_le_bytes());
        put_u32(&mut bytes, actor.msg_ids.len());
        for msg_id in &actor.msg_ids {
            bytes.extend_from_slice(&msg_id.to_le_bytes());
        }
    }
    bytes
}

fn put_u32(bytes: &mut Vec<u8>, value: usize) {
    // Rows are bounded by MEMBER_ROW_BYTES_MAX before they are stored, so
    // every count fits; saturate rather than wrap if a caller skipped that.
    let value = u32::try_from(value).unwrap_or(u32::MAX);
    bytes.extend_from_slice(&value.to_le_bytes());
}

/// Why a stored membership blob could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecodeError(pub &'static str);

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < len {
            return Err(DecodeError("membership blob truncated"));
        }
        let (head, tail) = self.bytes.split_at(len);
        self.bytes = tail;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut raw = [0u8; 4];
        raw.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(raw))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(raw))
    }

    /// A count of items each at least `item_min_bytes` long: refused when
    /// the remaining bytes cannot hold that many, so a corrupt count never
    /// drives a huge allocation.
    fn count(&mut self, item_min_bytes: usize) -> Result<usize, DecodeError> {
        let count = self.u32()? as usize;
        if count.saturating_mul(item_min_bytes) > self.bytes.len() {
            return Err(DecodeError("membership blob count exceeds its bytes"));
        }
        Ok(count)
    }

    fn finish(self) -> Result<(), DecodeError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError("membership blob has trailing bytes"))
        }
    }
}

pub(crate) fn decode_addresses(bytes: &[u8]) -> Result<Vec<String>, DecodeError> {
    let mut reader = Reader { bytes };
    let count = reader.count(4)?;
    let mut addresses = Vec::with_capacity(count);
    for _ in 0..count {
        let len = reader.u32()? as usize;
        let raw = reader.take(len)?;
        let address =
            std::str::from_utf8(raw).map_err(|_| DecodeError("membership address not utf-8"))?;
        addresses.push(address.to_string());
    }
    reader.finish()?;
    Ok(addresses)
}

pub(crate) fn decode_actors(bytes: &[u8]) -> Result<Vec<AdvertisedActor>, DecodeError> {
    let mut reader = Reader { bytes };
    let count = reader.count(20)?;
    let mut actors = Vec::with_capacity(count);
    for _ in 0..count {
        let actor_id = reader.u64()?;
        let actor_type = reader.u32()?;
        let weight = reader.u32()?;
        let msg_count = reader.count(4)?;
        let mut msg_ids = Vec::with_capacity(msg_count);
        for _ in 0..msg_count {
            msg_ids.push(reader.u32()?);
        }
        actors.push(AdvertisedActor {
            actor_id,
            actor_type,
            msg_ids,
            weight,
        });
    }
    reader.finish()?;
    Ok(actors)
}

/// The encoded size of a row's variable parts, checked before a write.
pub(crate) fn encoded_len(row: &MemberRow) -> usize {
    let addresses: usize = row.addresses.iter().map(|a| 4 + a.len()).sum();
    let actors: usize = row.actors.iter().map(|a| 20 + 4 * a.msg_ids.len()).sum();
    8 + addresses + actors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actors() -> Vec<AdvertisedActor> {
        vec![
            AdvertisedActor {
                actor_id: u64::MAX,
                actor_type: 3,
                msg_ids: vec![1, 2, 0xFFFF_FFFF],
                weight: 10,
            },
            AdvertisedActor {
                actor_id: 7,
                actor_type: 0,
                msg_ids: vec![],
                weight: 0,
            },
        ]
    }

    #[test]
    fn blobs_round_trip() {
        let addresses = vec!["127.0.0.1:7000".to_string(), String::new(), "é".to_string()];
        let encoded = encode_addresses(&addresses);
        assert_eq!(decode_addresses(&encoded), Ok(addresses.clone()));
        let encoded_actors = encode_actors(&actors());
        assert_eq!(decode_actors(&encoded_actors), Ok(actors()));
        let row = MemberRow {
            node_id: NodeId(1),
            addresses,
            core_count: 2,
            actors: actors(),
            heartbeat_ms: 0,
        };
        assert_eq!(encoded_len(&row), encoded.len() + encoded_actors.len());
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let encoded = encode_actors(&actors());
        for len in 0..encoded.len() {
            assert!(decode_actors(&encoded[..len]).is_err(), "prefix {len}");
        }
        let mut longer = encoded.clone();
        longer.push(0);
        assert!(decode_actors(&longer).is_err());
        let addresses = encode_addresses(&["a:1".to_string()]);
        for len in 0..addresses.len() {
            assert!(decode_addresses(&addresses[..len]).is_err(), "prefix {len}");
        }
    }

    #[test]
    fn a_huge_count_is_refused_without_allocating() {
        let bytes = u32::MAX.to_le_bytes();
        assert!(decode_actors(&bytes).is_err());
        assert!(decode_addresses(&bytes).is_err());
    }

    #[test]
    fn liveness_uses_the_ttl() {
        let row = MemberRow {
            node_id: NodeId(1),
            addresses: vec![],
            core_count: 1,
            actors: vec![],
            heartbeat_ms: 1000,
        };
        assert!(row.is_live(1000, 10));
        assert!(row.is_live(1009, 10));
        assert!(!row.is_live(1010, 10));
        assert!(row.is_live(0, 10), "a heartbeat from the future is live");
    }
}
