//! The seam between the gateway and the router, on the node's side:
//! which object each client route addresses, and how the router's answers
//! reach sessions. One per core, it is the gateway's [`ServicesSide`]
//! (client requests, logins and session ends in) and the router's [`ClientSide`]
//! (answers, pushes and kicks out). Neither the gateway nor the router
//! knows the other, or what a route means.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wire::client::{encode_app_error_body, encode_error_body, route, FrameKind};
use wire::frame::{ArchivedMessage, FrameBuf};
use wire::hash::stable_hash64;
use wire::ObjectKey;

use crate::builtins::player;
use crate::catalog::{pick_among, CoreCatalog};
use crate::cluster::view::{ClusterView, Snapshot};
use crate::gateway::{
    Binding, EgressRef, GatewayHandle, Ingress, LoginOutcome, LoginRequest, ServicesSide, Target,
};
use crate::gateway_addresses::GatewayAddresses;
use crate::ids::NodeId;
use crate::object::Pick;
use crate::route::{RouteTable, RouteTarget, Served};
use crate::router::driver::frames::client_native;
use crate::router::driver::{ClientSide, ReplyRoute, RouterDriver};
use crate::router::{ClientRef, ErrorCode, Outcome, Refusal};
use crate::store::MemberState;

/// The reason a refused login is answered with (`single` policy).
pub const ALREADY_LOGGED_IN: &str = "player already logged in";

/// What one core's port needs of its node.
pub struct PortParts {
    pub router: RouterDriver,
    pub gateway: GatewayHandle,
    pub catalog: CoreCatalog,
    pub routes: Arc<RouteTable>,
    /// Whether this node takes service keys now (up, not draining, not
    /// fenced) comes from here.
    pub view: Arc<ClusterView>,
    /// `gateway.place_sessions`: the grace (`cluster.redirect_grace_ms`)
    /// of the `sys.redirect` that sends a session to its player's node;
    /// `None`: sessions stay where they logged in.
    pub placement_grace: Option<Duration>,
}

/// One core's port between its gateway and its router.
pub struct Port {
    router: RouterDriver,
    gateway: GatewayHandle,
    catalog: RefCell<CoreCatalog>,
    routes: Arc<RouteTable>,
    view: Arc<ClusterView>,
    /// The view version `serving` was read at, and whether this node's own
    /// service actors are candidates: one atomic load per service request
    /// while the view stands still.
    serving: Cell<(u64, bool)>,
    placement_grace: Option<Duration>,
}

impl Port {
    /// Plugs `gateway` and `router` of one core together.
    pub fn connect(parts: PortParts) -> Rc<Port> {
        let port = Rc::new(Port {
            router: parts.router.clone(),
            gateway: parts.gateway.clone(),
            catalog: RefCell::new(parts.catalog),
            routes: parts.routes,
            view: parts.view,
            serving: Cell::new((0, false)),
            placement_grace: parts.placement_grace,
        });
        parts.gateway.set_services_side(port.clone());
        parts.router.set_client_side(port.clone());
        port
    }

    /// A session that was bound to its player ended (closed, kicked, its
    /// login undone, or found gone): its player object forgets it, if that
    /// is still the session it holds.
    fn unbind(&self, client: ClientRef) {
        self.router.notify(
            player::player_key(client.player_id),
            player::OP_UNBIND,
            client,
        );
    }

    fn egress(&self, route: &ReplyRoute, outcome: Outcome, answered_at: Instant) {
        let (kind, body) = match outcome {
            Ok(body) => (FrameKind::Response, body),
            Err(refusal) => (FrameKind::Error, error_body(&refusal)),
        };
        self.gateway.egress_ref(
            &EgressRef {
                session_id: route.session_id,
                session_epoch: route.session_epoch,
                player_id: route.player_id,
                kind: kind as u8,
                route_id: route.route_id,
                seq: route.client_seq,
                body: &body,
                connection: Some(route.connection),
            },
            || answered_at,
        );
    }

    /// Whether this node's own service actors take keys: it joined or is
    /// up, and it neither drains nor is fenced. The other nodes stop
    /// counting on a node's services when its row leaves `up`
    /// (`cluster::agent::feed_catalog`), so a draining node hands its keys
    /// over everywhere at once.
    fn serving_here(&self) -> bool {
        let version = self.view.version();
        let (seen, serving) = self.serving.get();
        if seen == version {
            return serving;
        }
        let me = self.view.snapshot().me;
        let serving = !me.fenced && matches!(me.state, MemberState::Joining | MemberState::Up);
        self.serving.set((version, serving));
        serving
    }

    /// The node that runs the service request for `key` on `route_id`:
    /// the pick of `how` over this node's own actor of the service (when it
    /// serves) and the other nodes' in the catalog's snapshot.
    fn pick_service_node(&self, route_id: u32, key: ObjectKey, how: Pick) -> Option<NodeId> {
        let me = self.router.node();
        let serving_here = self.serving_here();
        let mut catalog = self.catalog.borrow_mut();
        let (local, remote) = catalog.lookup_local_and_remote(route_id);
        let of_service = |actor: &&crate::catalog::ActorConfig| actor.actor_type == key.type_id;
        let local = local.iter().filter(of_service).filter(|_| serving_here);
        // A snapshot built from the membership table never lists this node
        // (its own actors are the local ones), but a stale row must not
        // make it a candidate twice.
        let remote = remote
            .iter()
            .filter(of_service)
            .filter(|actor| actor.node_id != me.0);
        let msg_key = stable_hash64(&key.to_le_bytes());
        let picked = pick_among(how == Pick::Weighted, msg_key, local.chain(remote))?;
        Some(NodeId(picked.node_id))
    }
}

/// The body of a request for the router: the route's (`read`: the body, or
/// the value the listener's body codec decoded from it), then the client's
/// request key when it has one that counts. Keys count for routes an object
/// serves, not `sys.*` (the ping an object answers after login) nor a
/// service's: docs/protocol.md, section 12. The key rides at the end of the
/// body (`Request::keyed`), and a keyless request's body is copied as before.
fn request_body(ingress: &Ingress<'_>, read: &[u8], served: Served) -> (Vec<u8>, bool) {
    let request_key = match ingress.request_key {
        Some(key) if ingress.route_id != route::SYS_PING && served == Served::Object => key,
        _ => 0,
    };
    if request_key == 0 {
        return (read.to_vec(), false);
    }
    let mut body = Vec::with_capacity(read.len() + 8);
    body.extend_from_slice(read);
    body.extend_from_slice(&request_key.to_le_bytes());
    (body, true)
}

impl ServicesSide for Port {
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
            connection: ingress.connection,
        };
        // What the object reads: the value the listener's body codec
        // decoded, when it decoded one, else the body as it came.
        let body = ingress.decoded_request.as_deref().unwrap_or(ingress.body);
        let target = self.routes.target(ingress.route_id).and_then(|target| {
            let object_id = target.key.object_id(ingress.binding.player_id, body)?;
            Some((target, ObjectKey::new(target.type_id, 0, object_id)))
        });
        let Some((target, key)) = target else {
            self.egress(&reply_route, Err(ErrorCode::BadRequest.into()), now);
            return Ok(());
        };
        let client = ClientRef {
            gateway_node: NodeId(gateway_node),
            session_id: ingress.session_id,
            session_epoch: ingress.binding.session_epoch,
            player_id: ingress.binding.player_id,
        };
        // Ops are numbered as the routes they serve.
        let op = ingress.route_id;
        let (body, keyed) = request_body(&ingress, body, target.served);
        let sent = match target {
            RouteTarget {
                served: Served::Object,
                ..
            } => self
                .router
                .client_request(key, (op, body, keyed), client, reply_route, now),
            RouteTarget {
                served: Served::Service(how),
                ..
            } => match self.pick_service_node(ingress.route_id, key, how) {
                Some(node) => {
                    self.router
                        .service_request(node, key, (op, body), client, reply_route, now)
                }
                // No node serves it now (none advertises it, or all drain).
                None => Err(ErrorCode::Unavailable),
            },
        };
        if let Err(code) = sent {
            self.egress(&reply_route, Err(code.into()), now);
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
        // A login's route names the binding the player object makes, so
        // that an admission the gateway no longer waits for can be undone
        // (`GatewayCore::complete_login`).
        let reply_route = ReplyRoute {
            session_id: login.session_id,
            session_epoch: login.bound_epoch,
            player_id: login.player_id,
            route_id: route::AUTH_LOGIN,
            client_seq: login.seq,
            // Answered through `complete_login`, not the egress gate.
            connection: 0,
        };
        let key = player::player_key(login.player_id);
        self.router
            .client_request(
                key,
                (player::OP_BIND, Vec::new(), false),
                client,
                reply_route,
                now,
            )
            .map_err(|_| login)
    }

    /// A logged-in session ended: its player object forgets it.
    fn deliver(&self, frame: FrameBuf) -> Result<(), FrameBuf> {
        let client = match frame.message() {
            ArchivedMessage::SessionUnbound { client }
            | ArchivedMessage::SessionDisconnected { client } => client_native(client),
            _ => return Err(frame),
        };
        self.unbind(client);
        Ok(())
    }
}

/// The ERROR body of a refusal: a protocol code with the router's reason
/// for it or the object's own, or an application code with the object's.
fn error_body(refusal: &Refusal) -> Vec<u8> {
    match refusal {
        Refusal::Code(code) => encode_error_body(*code, router_error_reason(*code)),
        Refusal::Explained { code, reason } => encode_error_body(*code, reason),
        Refusal::App { code, reason } => encode_app_error_body(*code, reason),
    }
}

/// The reason an ERROR the router decided carries: the router answers
/// with a code alone, so the reason says what that code means there, and
/// where to look (the node's log, `/healthz`, `/cluster`).
pub(crate) fn router_error_reason(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::AuthFailed => ALREADY_LOGGED_IN,
        ErrorCode::BadRequest => "the object refused the request",
        ErrorCode::Overloaded => {
            "overloaded: too many requests wait for this object or this node, or an object's \
             bound was reached"
        }
        ErrorCode::Unavailable => {
            "object unavailable: its owner cannot be reached, the store is failing, or this node \
             does not serve now (see /healthz and /cluster)"
        }
        ErrorCode::Timeout => "the node holding the request was lost before it answered",
        ErrorCode::Internal => "server fault: see the server log",
        // The gateway's own refusals: a handler that answers one refused
        // the request itself.
        ErrorCode::UnknownRoute | ErrorCode::DirectionRejected | ErrorCode::AuthRequired => {
            "the object refused the request"
        }
    }
}

/// Where a session whose login node `answered_by` answered is placed:
/// that node's gateways, when it is another node that is `up` (not
/// joining, draining, or gone) and advertises some. The player object
/// runs where it is writable, so the node that answered its bind owned it
/// then; a player nobody owned was created on its rendezvous node, which
/// answered: this one (the session stays) or another (it is placed
/// there, where its next logins will be answered).
fn placement_target(
    snapshot: &Snapshot,
    me: NodeId,
    answered_by: NodeId,
) -> Option<GatewayAddresses> {
    if answered_by == me {
        return None;
    }
    let peer = snapshot.peers.get(&answered_by)?;
    (peer.state == MemberState::Up && !peer.gateway.is_empty()).then(|| peer.gateway.clone())
}

impl ClientSide for Port {
    fn answer(
        &self,
        route: ReplyRoute,
        outcome: Outcome,
        answered_at: Instant,
        answered_by: NodeId,
    ) {
        if route.route_id != route::AUTH_LOGIN {
            return self.egress(&route, outcome, answered_at);
        }
        let outcome = match outcome {
            Ok(_) => LoginOutcome::Admitted {
                player_id: route.player_id,
                session_epoch: route.session_epoch,
            },
            Err(Refusal::Code(ErrorCode::AuthFailed)) => {
                LoginOutcome::Refused(ErrorCode::AuthFailed, ALREADY_LOGGED_IN)
            }
            Err(Refusal::Code(code)) => LoginOutcome::Refused(code, router_error_reason(code)),
            Err(Refusal::Explained { code, ref reason }) => LoginOutcome::Refused(code, reason),
            // The player object is routerd's and has no codes of its own: an
            // application code here is a fault.
            Err(Refusal::App { .. }) => LoginOutcome::Refused(
                ErrorCode::Internal,
                router_error_reason(ErrorCode::Internal),
            ),
        };
        let placed = match (self.placement_grace, outcome) {
            (Some(grace), LoginOutcome::Admitted { .. }) => {
                placement_target(&self.view.snapshot(), self.router.node(), answered_by)
                    .map(|owner| (grace, owner))
            }
            _ => None,
        };
        self.gateway.complete_login_placed(
            route.session_id,
            route.client_seq,
            outcome,
            placed.as_ref().map(|(grace, owner)| (*grace, owner)),
        );
    }

    fn push(&self, client: ClientRef, route_id: u32, body: &[u8]) {
        // A PUSH answers no request: the gateway reads no clock for it.
        self.gateway.egress_ref(
            &EgressRef {
                session_id: client.session_id,
                session_epoch: client.session_epoch,
                player_id: client.player_id,
                kind: FrameKind::Push as u8,
                route_id,
                seq: 0,
                body,
                connection: None,
            },
            Instant::now,
        );
    }

    fn kick(&self, client: ClientRef) {
        self.gateway
            .kick(client.session_id, client.player_id, "logged in elsewhere");
    }

    fn check_session(&self, client: ClientRef) {
        let bound = Binding {
            target: Target::Services,
            player_id: client.player_id,
            session_epoch: client.session_epoch,
        };
        self.gateway.check_session(client.session_id, bound);
    }

    fn session_gone(&self, client: ClientRef) {
        self.unbind(client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes of the built-in types address the objects the protocol
    /// says: a player's own routes its player, `room.say` the room its body
    /// names; a body that cannot name a room has no target.
    #[test]
    fn routes_map_to_their_objects() {
        let table = crate::builtins::builtin_routes();
        let key_of = |route_id, player_id, body: &[u8]| {
            let target = table.target(route_id)?;
            let id = target.key.object_id(player_id, body)?;
            Some(ObjectKey::new(target.type_id, 0, id))
        };
        assert_eq!(
            key_of(route::PLAYER_INCR, 42, &[]),
            Some(player::player_key(42))
        );
        assert_eq!(
            key_of(route::SYS_PING, 42, b"x"),
            Some(player::player_key(42))
        );
        // room.say goes through the player, which says only in rooms it
        // joined (so a say creates no room).
        assert_eq!(
            key_of(route::ROOM_SAY, 42, &7u64.to_le_bytes()),
            Some(player::player_key(42))
        );
        assert_eq!(key_of(route::AUTH_LOGIN, 42, &[]), None);
    }

    /// A login is placed on the node that answered it only when that is
    /// another node, up, with gateways to name.
    #[test]
    fn a_session_is_placed_only_on_another_up_node() {
        use crate::cluster::view::{Peer, Standing};
        let peer = |node: u64, state: MemberState, gateway: GatewayAddresses| Peer {
            node: NodeId(node),
            incarnation: 1,
            state,
            cores: Vec::new(),
            gateway,
            admin: String::new(),
            timers: None,
        };
        let at = |port: u16| GatewayAddresses::plain(format!("127.0.0.1:{port}"));
        let peers = [
            peer(2, MemberState::Up, at(7402)),
            peer(3, MemberState::Draining, at(7403)),
            peer(4, MemberState::Joining, at(7404)),
            peer(5, MemberState::Down, at(7405)),
            peer(6, MemberState::Up, GatewayAddresses::default()),
        ];
        let snapshot = Snapshot {
            version: 1,
            me: Standing {
                incarnation: 1,
                lease_until_ms: u64::MAX,
                fenced: false,
                state: MemberState::Up,
            },
            peers: Arc::new(peers.into_iter().map(|p| (p.node, p)).collect()),
        };
        let me = NodeId(1);
        assert_eq!(placement_target(&snapshot, me, NodeId(2)), Some(at(7402)));
        // Answered here: the player was here, or was claimed here.
        assert_eq!(placement_target(&snapshot, me, me), None);
        for (node, why) in [
            (3, "draining: its objects are leaving"),
            (4, "joining"),
            (5, "down"),
            (6, "no gateway advertised"),
            (7, "unknown to membership"),
        ] {
            assert_eq!(placement_target(&snapshot, me, NodeId(node)), None, "{why}");
        }
    }
}
