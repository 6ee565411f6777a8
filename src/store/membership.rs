//! The membership table: one row per node id, written under compare-and-set
//! like the route records, so that incarnations, heartbeats and declarations
//! of death never overwrite each other; and beside the rows, the table's
//! version, which every membership change moves.
//!
//! Every write of a row is conditioned on the row's `version` (or on its
//! absence), and the store assigns the next version. The cluster builds its
//! rules on that one primitive (see `cluster::membership`):
//! - a start takes the next incarnation with a CAS on the version it read;
//! - the owner heartbeats with a CAS on the version it wrote last, so a
//!   write by anyone else (a declaration of death) fails its next heartbeat;
//! - an observer declares a member `down` with a CAS on the version it saw
//!   unchanged for `down_after_ms` (or the member's own lease, which its
//!   row's timers say, when longer), so a late heartbeat wins over it.
//!
//! The table version (`TableVersion`, one row of its own, as Orleans keeps
//! it): a write that changes a row in anything but its heartbeat (an
//! incarnation taken, a state, an address or actor), the insert of a row
//! and the deletion of one move it by one, in the same atomic store
//! operation as the row's change, and stamp the row with the version they
//! made (`changed`). A heartbeat moves neither. So a node reads one row per
//! poll, and lists only the rows changed since the version it last listed
//! at, and only when the version moved.
//!
//! Deletion: the row of a node that `left` is deleted by CAS on its version;
//! what stays is a tombstone of three numbers (node id, last incarnation,
//! last version) that lists of changes report as deleted and full lists
//! skip. A node's own read (`poll`) shows the tombstone as a `left` row
//! without addresses, so a later start takes the next incarnation by CAS on
//! the tombstone's version, as after any `left`: neither an incarnation nor
//! a version ever repeats for a node id, and a frozen old process's CAS
//! never applies to a new row.
//!
//! Variable parts (the per-core cluster addresses and the actors) are
//! stored as explicit little-endian blobs so every backend keeps the same
//! bytes and decoding is one bounds-checked function.

use super::record::NodeId;

/// An encoded row's addresses and actors may not exceed this many bytes: a
/// node advertises a handful of addresses and at most a few thousand
/// actors, and every node reads every row that changed.
pub const MEMBER_ROW_BYTES_MAX: usize = 256 * 1024;

/// One page of a listing holds at most this many entries (rows and
/// deletions): the members are not capped, a page is.
pub const MEMBERS_PAGE_MAX: usize = 256;

/// One poll reads at most this many rows besides the table version (a
/// node reads the peers it watches, or its own row while it starts).
pub const POLL_ROWS_MAX: usize = 16;

/// A member's lifecycle state, stored as its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemberState {
    /// Took its incarnation; its cores are starting.
    Joining = 1,
    /// Serves clients and owns objects.
    Up = 2,
    /// Moving its objects and sessions away before it leaves.
    Draining = 3,
    /// Left cleanly: it owns nothing and will not write again in this
    /// incarnation.
    Left = 4,
    /// Declared dead by another node (or found itself declared so): its
    /// incarnation owns nothing any more, whatever the records say.
    Down = 5,
}

impl MemberState {
    /// The state stored as `value`, or `None` for a value no state has.
    pub fn from_u8(value: u8) -> Option<MemberState> {
        Some(match value {
            1 => MemberState::Joining,
            2 => MemberState::Up,
            3 => MemberState::Draining,
            4 => MemberState::Left,
            5 => MemberState::Down,
            _ => return None,
        })
    }

    /// The state's name, as `/cluster` and the logs say it.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Joining => "joining",
            MemberState::Up => "up",
            MemberState::Draining => "draining",
            MemberState::Left => "left",
            MemberState::Down => "down",
        }
    }

    /// Whether the incarnation in this state may still write: it is gone
    /// for good once `left` or `down`.
    pub fn is_ended(self) -> bool {
        matches!(self, MemberState::Left | MemberState::Down)
    }
}

/// The store's compare-and-set version of one membership row. Only the
/// store assigns it; a writer presents the one it read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberVersion(pub u64);

/// The membership table's version: moved by one by every membership change
/// (never by a heartbeat) in the same atomic operation as the change. It
/// is 0 in a new store (1 in one migrated from before it existed, whose
/// rows are all stamped 1) and never goes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableVersion(pub u64);

/// What one poll read: the table version, and the rows asked for (those
/// that exist; a deleted row as its tombstone, `left` without addresses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberPoll {
    /// The table version, read before the rows.
    pub version: TableVersion,
    /// The rows asked for that exist, by node id.
    pub rows: Vec<MemberRow>,
}

/// One page of the rows changed since a table version, by node id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberPage {
    /// Rows that changed (all live rows when listing since version 0).
    pub rows: Vec<MemberRow>,
    /// Node ids whose row was deleted since (never when listing since 0).
    pub deleted: Vec<NodeId>,
    /// Whether entries past this page's last node id may remain: the
    /// page was full.
    pub more: bool,
}

impl MemberPage {
    /// The last node id this page covered: the next page starts after it.
    pub fn last(&self) -> Option<NodeId> {
        let row = self.rows.iter().map(|row| row.node_id).max();
        let deleted = self.deleted.iter().copied().max();
        row.max(deleted)
    }
}

/// Whether writing `new` over `old` is a membership change (it moves the
/// table version): anything but the heartbeat and the CAS version differs.
pub fn is_change(old: &MemberRow, new: &MemberRow) -> bool {
    old.incarnation != new.incarnation
        || old.state != new.state
        || old.gateway != new.gateway
        || old.admin != new.admin
        || old.cluster != new.cluster
        || old.core_count != new.core_count
        || old.actors != new.actors
        || old.timers != new.timers
}

/// The row a deleted row leaves to its node's own reads: its id, last
/// incarnation and version, state `left`, no addresses.
pub fn tombstone(node_id: NodeId, incarnation: u64, version: MemberVersion) -> MemberRow {
    MemberRow {
        node_id,
        incarnation,
        state: MemberState::Left,
        heartbeat: 0,
        gateway: String::new(),
        admin: String::new(),
        cluster: Vec::new(),
        core_count: 0,
        actors: Vec::new(),
        timers: None,
        version,
    }
}

/// One node's row in the membership table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRow {
    /// The node.
    pub node_id: NodeId,
    /// Assigned at each start of the node by CAS; only grows.
    pub incarnation: u64,
    /// Where the node is in its life.
    pub state: MemberState,
    /// Bumped by the node at every heartbeat write. Observers compare it
    /// over their own monotonic time; it is never compared with a clock.
    pub heartbeat: u64,
    /// Where clients connect (`host:port`).
    pub gateway: String,
    /// The admin HTTP endpoint (`host:port`).
    pub admin: String,
    /// Core `i`'s cluster link address is `cluster[i]`.
    pub cluster: Vec<String>,
    /// How many cores the node runs.
    pub core_count: u32,
    /// The object types and services it hosts.
    pub actors: Vec<AdvertisedActor>,
    /// The failure-detection timers its process runs with: what every
    /// other node needs to know before it may declare this one down (see
    /// `MemberTimers`). `None` in a row written by a build that did not
    /// record them, and in a tombstone.
    pub timers: Option<MemberTimers>,
    /// The row's CAS version as stored; ignored in a write.
    pub version: MemberVersion,
}

/// A node's failure-detection timers (`cluster.heartbeat_interval_ms`,
/// `fence_after_ms`, `down_after_ms`), carried in its row because the
/// timing rule spans two nodes' configs: an observer may declare a node
/// down only once that node's own lease (its `fence_after_ms`) has run out
/// with a margin, whatever the observer's `down_after_ms` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemberTimers {
    /// How often the node heartbeats.
    pub heartbeat_interval_ms: u64,
    /// Its lease from each applied heartbeat's send time.
    pub fence_after_ms: u64,
    /// How long it lets a peer's row stand still before declaring it down.
    pub down_after_ms: u64,
}

/// The encoded size of a row's timers.
pub(crate) const TIMERS_BYTES: usize = 24;

/// An actor the node hosts, the message ids it serves and its weight for
/// weighted selection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdvertisedActor {
    /// The actor's id.
    pub actor_id: u64,
    /// Its type id.
    pub actor_type: u32,
    /// The message ids (routes) it serves.
    pub msg_ids: Vec<u32>,
    /// Its share under weighted selection.
    pub weight: u32,
}

/// The condition a membership write is applied under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberCondition {
    /// Insert only if the node id has no row.
    Absent,
    /// Update only if the stored row's version is this one.
    VersionEquals(MemberVersion),
}

/// A conditional write of one membership row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberWrite {
    /// The row to leave in the table.
    pub row: MemberRow,
    /// Whether the write applies.
    pub condition: MemberCondition,
}

impl MemberWrite {
    /// The row this write leaves behind when applied with `version`.
    pub fn applied(&self, version: MemberVersion) -> MemberRow {
        MemberRow {
            version,
            ..self.row.clone()
        }
    }

    /// The version this write produces when applied: versions start at 1
    /// and grow by one per applied write of a row.
    pub fn next_version(&self) -> MemberVersion {
        match self.condition {
            MemberCondition::Absent => MemberVersion(1),
            MemberCondition::VersionEquals(expected) => MemberVersion(expected.0.wrapping_add(1)),
        }
    }
}

/// The outcome of one conditional membership write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberOutcome {
    /// Written; the row's new version.
    Applied(MemberVersion),
    /// The condition did not hold; this is the row as it stands (`None`
    /// when an update found no row).
    Conflict(Option<MemberRow>),
    /// No answer in time: the write may or may not have happened.
    Indeterminate,
}

/// Encodes a list of addresses: `count: u32`, then `len: u32, utf8 bytes`
/// each.
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

/// Why a stored membership value could not be decoded.
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

/// Encodes a row's timers: the three as `u64` in their field order, or
/// nothing for a row without them.
pub(crate) fn encode_timers(timers: Option<MemberTimers>) -> Vec<u8> {
    let Some(timers) = timers else {
        return Vec::new();
    };
    let mut bytes = Vec::with_capacity(TIMERS_BYTES);
    for value in [
        timers.heartbeat_interval_ms,
        timers.fence_after_ms,
        timers.down_after_ms,
    ] {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    bytes
}

/// The timers `encode_timers` wrote; no bytes (a row from a build that did
/// not record them) is `None`.
pub(crate) fn decode_timers(bytes: &[u8]) -> Result<Option<MemberTimers>, DecodeError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut reader = Reader { bytes };
    let timers = MemberTimers {
        heartbeat_interval_ms: reader.u64()?,
        fence_after_ms: reader.u64()?,
        down_after_ms: reader.u64()?,
    };
    reader.finish()?;
    Ok(Some(timers))
}

pub(crate) fn decode_state(value: i64) -> Result<MemberState, DecodeError> {
    u8::try_from(value)
        .ok()
        .and_then(MemberState::from_u8)
        .ok_or(DecodeError("unknown member state"))
}

/// The encoded size of a row's variable parts, checked before a write.
pub(crate) fn encoded_len(row: &MemberRow) -> usize {
    let strings = row.gateway.len() + row.admin.len();
    let cluster: usize = row.cluster.iter().map(|a| 4 + a.len()).sum();
    let actors: usize = row.actors.iter().map(|a| 20 + 4 * a.msg_ids.len()).sum();
    8 + strings + cluster + actors + TIMERS_BYTES
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
        let timers = MemberTimers {
            heartbeat_interval_ms: 500,
            fence_after_ms: u64::MAX,
            down_after_ms: 4000,
        };
        assert_eq!(encode_timers(Some(timers)).len(), TIMERS_BYTES);
        assert_eq!(
            decode_timers(&encode_timers(Some(timers))),
            Ok(Some(timers))
        );
        assert_eq!(decode_timers(&encode_timers(None)), Ok(None));
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
        let mut timers = encode_timers(Some(MemberTimers {
            heartbeat_interval_ms: 1,
            fence_after_ms: 2,
            down_after_ms: 3,
        }));
        // Every prefix but the empty one (a row without timers).
        for len in 1..timers.len() {
            assert!(decode_timers(&timers[..len]).is_err(), "prefix {len}");
        }
        timers.push(0);
        assert!(decode_timers(&timers).is_err());
    }

    #[test]
    fn a_huge_count_is_refused_without_allocating() {
        let bytes = u32::MAX.to_le_bytes();
        assert!(decode_actors(&bytes).is_err());
        assert!(decode_addresses(&bytes).is_err());
    }

    #[test]
    fn states_round_trip_and_unknown_ones_are_refused() {
        for state in [
            MemberState::Joining,
            MemberState::Up,
            MemberState::Draining,
            MemberState::Left,
            MemberState::Down,
        ] {
            assert_eq!(decode_state(state as i64), Ok(state));
        }
        assert!(decode_state(0).is_err());
        assert!(decode_state(6).is_err());
        assert!(decode_state(-1).is_err());
        assert!(decode_state(258).is_err());
    }

    #[test]
    fn versions_start_at_one_and_follow_the_condition() {
        let row = MemberRow {
            node_id: NodeId(1),
            incarnation: 1,
            state: MemberState::Joining,
            heartbeat: 0,
            gateway: String::new(),
            admin: String::new(),
            cluster: Vec::new(),
            core_count: 1,
            actors: Vec::new(),
            timers: None,
            version: MemberVersion(99),
        };
        let insert = MemberWrite {
            row: row.clone(),
            condition: MemberCondition::Absent,
        };
        assert_eq!(insert.next_version(), MemberVersion(1));
        assert_eq!(insert.applied(MemberVersion(1)).version, MemberVersion(1));
        let update = MemberWrite {
            row,
            condition: MemberCondition::VersionEquals(MemberVersion(4)),
        };
        assert_eq!(update.next_version(), MemberVersion(5));
    }
}
