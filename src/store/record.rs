//! The persisted ownership record and the CAS version.
//!
//! The route version (`ids::RouteVersion`) orders route caches between
//! nodes; the CAS version protects persistent writes. They are not
//! interchangeable, so they are different types: the compiler refuses any
//! comparison between them.

use wire::ObjectKey;

pub use crate::ids::{NodeId, RouteVersion};

/// The store's compare-and-set version of one record. Only the store
/// assigns it; a writer presents the one it read. Every backend assigns
/// the version the condition names plus one (1 for an insert), so the
/// version an applied write produced is known from the write alone: a
/// writer whose answer was lost recognises its own write in a later
/// conflict (`WriteCondition::applied_version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CasVersion(pub u64);

/// One object's persisted ownership and state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRecord {
    /// The object.
    pub key: ObjectKey,
    /// The node that owns it; [`NodeId::NONE`] when nobody does.
    pub owner_node: NodeId,
    /// The incarnation of `owner_node` that wrote the record: once the
    /// membership table shows that incarnation ended (`down` or `left`, or
    /// the node restarted with a higher one), the record is claimable at
    /// once. 0 for records without an owner or written before incarnations.
    pub owner_incarnation: u64,
    /// How new this statement of ownership is.
    pub route_version: RouteVersion,
    /// When the owner last saved, in the owner's unix milliseconds. For
    /// operators only: no node compares it with its own clock, because two
    /// nodes' wall clocks may disagree.
    pub save_timepoint_ms: u64,
    /// The version the next conditional write must name.
    pub cas_version: CasVersion,
    /// The object's encoded state.
    pub state: Vec<u8>,
}

/// The condition a conditional write is applied under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteCondition {
    /// Insert only if no record exists for the key.
    Absent,
    /// Update only if the stored record's CAS version is this one.
    CasEquals(CasVersion),
}

impl WriteCondition {
    /// The CAS version a write under this condition has once applied.
    pub fn applied_version(self) -> CasVersion {
        match self {
            WriteCondition::Absent => CasVersion(1),
            WriteCondition::CasEquals(expected) => CasVersion(expected.0 + 1),
        }
    }
}

/// What a conditional write should leave in the store. The store assigns the
/// new CAS version itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordWrite {
    /// The object.
    pub key: ObjectKey,
    /// Whether the write applies.
    pub condition: WriteCondition,
    /// The owner to store.
    pub owner_node: NodeId,
    /// The owner's incarnation to store.
    pub owner_incarnation: u64,
    /// The route version to store.
    pub route_version: RouteVersion,
    /// When the owner saved, in its unix milliseconds (for operators).
    pub save_timepoint_ms: u64,
    /// The encoded state to store.
    pub state: Vec<u8>,
}

impl RecordWrite {
    /// The record this write leaves behind when applied with `cas_version`.
    pub fn applied(&self, cas_version: CasVersion) -> RouteRecord {
        RouteRecord {
            key: self.key,
            owner_node: self.owner_node,
            owner_incarnation: self.owner_incarnation,
            route_version: self.route_version,
            save_timepoint_ms: self.save_timepoint_ms,
            cas_version,
            state: self.state.clone(),
        }
    }
}

/// The outcome of one conditional write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The write is durable with this new CAS version.
    Applied(CasVersion),
    /// The condition did not hold; this is the record as it stands (`None`
    /// when an update found no record), so the caller can act without a
    /// second read.
    Conflict(Option<RouteRecord>),
    /// The store did not answer in time: the write may or may not have
    /// happened. The caller must re-read, never assume.
    Indeterminate,
}
