//! Routes, on the ground floor: how object types and services declare their
//! client routes ([`ClientRoute`], [`KeyFrom`], [`Pick`]) and the table a
//! node builds from them at start ([`RouteTable`]), which the gateway, the
//! router's port, the registry and the metrics all read. It imports nothing
//! of routerd above it.

mod declare;
mod table;

pub use self::declare::{ClientRoute, KeyFrom, Pick, RouteBody, RouteKind, OP_RESERVED_MIN};
pub use self::table::{
    Direction, RouteDescriptor, RouteError, RouteTable, RouteTarget, Served, ROUTES_MAX,
    SYSTEM_ROUTES,
};
