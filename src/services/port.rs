//! The seam between the gateway and the router, on the services' side:
//! which object each client route addresses, and how the router's answers
//! reach sessions. One per core, it is the gateway's [`PlayerPort`] (client
//! requests, logins and session ends in) and the router's [`ClientSide`]
//! (answers, pushes and kicks out). Neither the gateway nor the router
//! knows the other, or what a route means.

use std::rc::Rc;
use std::time::Instant;

use wire::client::{encode_error_body, route, ErrorCode as WireErrorCode, FrameKind};
use wire::frame::{ArchivedMessage, FrameBuf};
use wire::ObjectKey;

use super::{player, room, PLAYER_TYPE_ID, ROOM_TYPE_ID};
use crate::catalog::CoreCatalog;
use crate::gateway::{EgressRef, GatewayHandle, Ingress, LoginOutcome, LoginRequest, PlayerPort};
use crate::router::driver::frames::{client_native, wire_error_code};
use crate::router::driver::{ClientSide, ReplyRoute, RouterDriver};
use crate::router::{ClientRef, ErrorCode, Outcome};
use crate::store::NodeId;

/// The reason a refused login is answered with (`single` policy).
pub const ALREADY_LOGGED_IN: &str = "player already logged in";

/// One core's port between its gateway and its router.
pub struct ServicesPort {
    router: RouterDriver,
    gateway: GatewayHandle,
    catalog: std::cell::RefCell<CoreCatalog>,
}

impl ServicesPort {
    /// Plugs `gateway` and `router` of one core together.
    pub fn connect(
        router: RouterDriver,
        gateway: GatewayHandle,
        catalog: CoreCatalog,
    ) -> Rc<ServicesPort> {
        let port = Rc::new(ServicesPort {
            router: router.clone(),
            gateway: gateway.clone(),
            catalog: std::cell::RefCell::new(catalog),
        });
        gateway.set_player_port(port.clone());
        router.set_client_side(port.clone());
        port
    }

    fn egress(&self, route: &ReplyRoute, outcome: Outcome) {
        let (kind, body) = match outcome {
            Ok(body) => (FrameKind::Response, body),
            Err(code) => (
                FrameKind::Error,
                encode_error_body(wire_error_code(code), ""),
            ),
        };
        self.gateway.egress_ref(&EgressRef {
            session_id: route.session_id,
            session_epoch: route.session_epoch,
            player_id: route.player_id,
            kind: kind as u8,
            route_id: route.route_id,
            seq: route.client_seq,
            body: &body,
        });
    }
}

impl PlayerPort for ServicesPort {
    /// A logged-in session's request: to the object its route addresses.
    fn deliver_ingress<'a>(
        &self,
        gateway_node: u64,
        ingress: Ingress<'a>,
        now: Instant,
    ) -> Result<(), Ingress<'a>> {
        let reply_route = ReplyRoute {
            session_id: ingress.session_id,
            session_epoch: ingress.binding.session_epoch,
            player_id: ingress.binding.player_id,
            route_id: ingress.route_id,
            client_seq: ingress.seq,
        };
        let target = target_of(
            &mut self.catalog.borrow_mut(),
            ingress.route_id,
            ingress.binding.player_id,
            ingress.body,
        );
        let Some((key, op)) = target else {
            self.egress(&reply_route, Err(ErrorCode::BadRequest));
            return Ok(());
        };
        let client = ClientRef {
            gateway_node: NodeId(gateway_node),
            session_id: ingress.session_id,
            session_epoch: ingress.binding.session_epoch,
            player_id: ingress.binding.player_id,
        };
        let body = ingress.body.to_vec();
        if let Err(code) = self
            .router
            .client_request(key, op, body, client, reply_route, now)
        {
            self.egress(&reply_route, Err(code));
        }
        Ok(())
    }

    /// A verified login: the player object decides it (duplicate logins
    /// are decided there, once for the cluster) and answers the player id
    /// or AUTH_FAILED; `answer` completes it at the gateway.
    fn login(&self, login: LoginRequest, now: Instant) -> Result<(), LoginRequest> {
        let client = ClientRef {
            gateway_node: NodeId(login.gateway_node),
            session_id: login.session_id,
            session_epoch: login.bound_epoch,
            player_id: login.player_id,
        };
        let reply_route = ReplyRoute {
            session_id: login.session_id,
            session_epoch: login.session_epoch,
            player_id: 0,
            route_id: route::AUTH_LOGIN,
            client_seq: login.seq,
        };
        let key = player::player_key(login.player_id);
        self.router
            .client_request(key, player::OP_BIND, Vec::new(), client, reply_route, now)
            .map_err(|_| login)
    }

    /// A logged-in session ended: its player object forgets it.
    fn deliver(&self, frame: FrameBuf) -> Result<(), FrameBuf> {
        let client = match frame.message() {
            ArchivedMessage::SessionUnbound { client }
            | ArchivedMessage::SessionDisconnected { client } => client_native(client),
            _ => return Err(frame),
        };
        self.router.notify(
            player::player_key(client.player_id),
            player::OP_UNBIND,
            client,
        );
        Ok(())
    }
}

impl ClientSide for ServicesPort {
    fn answer(&self, route: ReplyRoute, outcome: Outcome) {
        if route.route_id != route::AUTH_LOGIN {
            return self.egress(&route, outcome);
        }
        let outcome = match outcome {
            Ok(_) => LoginOutcome::Admitted,
            Err(ErrorCode::AuthFailed) => {
                LoginOutcome::Refused(WireErrorCode::AuthFailed, ALREADY_LOGGED_IN)
            }
            Err(code) => LoginOutcome::Refused(wire_error_code(code), ""),
        };
        self.gateway
            .complete_login(route.session_id, route.client_seq, outcome);
    }

    fn push(&self, client: ClientRef, route_id: u32, body: &[u8]) {
        self.gateway.egress_ref(&EgressRef {
            session_id: client.session_id,
            session_epoch: client.session_epoch,
            player_id: client.player_id,
            kind: FrameKind::Push as u8,
            route_id,
            seq: 0,
            body,
        });
    }

    fn kick(&self, client: ClientRef) {
        self.gateway
            .kick(client.session_id, client.player_id, "logged in elsewhere");
    }
}

/// The object and service op a client route addresses. The catalog's
/// local routes say which service takes the route; the service says which
/// object: a player's own routes go to the player object (which relays room
/// membership to the room), `room.say` to the room named by the body's first
/// eight bytes. Ops are numbered as the routes they serve. `None` when no
/// local service takes the route or the body cannot name the room.
fn target_of(
    catalog: &mut CoreCatalog,
    route_id: u32,
    player_id: u64,
    body: &[u8],
) -> Option<(ObjectKey, u32)> {
    let actor_type = catalog.lookup_local_routes(route_id).first()?.actor_type;
    let key = match actor_type {
        PLAYER_TYPE_ID => player::player_key(player_id),
        ROOM_TYPE_ID => room::room_key(u64::from_le_bytes(body.get(..8)?.try_into().ok()?)),
        _ => return None,
    };
    Some((key, route_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_map_to_their_objects() {
        let catalog = std::sync::Arc::new(crate::catalog::Catalog::new());
        for actor in crate::services::local_actors(1, "127.0.0.1:1") {
            catalog.register_routes(actor).unwrap();
        }
        let mut view = CoreCatalog::new(catalog);
        let (key, op) = target_of(&mut view, route::PLAYER_INCR, 42, &[]).unwrap();
        assert_eq!((key, op), (player::player_key(42), player::OP_INCR));
        let (key, op) = target_of(&mut view, route::ROOM_SAY, 42, &7u64.to_le_bytes()).unwrap();
        assert_eq!((key, op), (room::room_key(7), room::OP_SAY));
        assert_eq!(target_of(&mut view, route::ROOM_SAY, 42, &[1, 2]), None);
        assert_eq!(target_of(&mut view, route::AUTH_LOGIN, 42, &[]), None);
    }
}
