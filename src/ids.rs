//! The vocabulary the layers share: which node, and how new a statement of
//! ownership is. The store persists both in its records, the router orders
//! its caches by them, membership and the links name nodes by them; they
//! live here, on the ground floor, so that a module needing a node's id
//! does not import the store.

/// A node's identity in a cluster. `NodeId::NONE` (0) means "no owner".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u64);

impl NodeId {
    /// No node: a record without an owner.
    pub const NONE: NodeId = NodeId(0);

    /// Whether this is [`NodeId::NONE`].
    pub fn is_none(self) -> bool {
        self == Self::NONE
    }
}

/// Orders route caches: a higher route version is a newer statement of who
/// owns an object. It only ever grows for a given key. It is not the
/// store's CAS version (`store::CasVersion`), which protects persistent
/// writes: they are different types, so the compiler refuses any
/// comparison between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteVersion(pub u64);

impl RouteVersion {
    /// The version after this one.
    pub fn next(self) -> RouteVersion {
        RouteVersion(self.0 + 1)
    }
}
