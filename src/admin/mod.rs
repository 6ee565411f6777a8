//! The admin HTTP endpoint: `/healthz`, `/livez`, `/readyz`, `/metrics`,
//! the cluster and its operations, the listings and the console (see
//! [`routes`]); the calls that change something need `admin.token` (see
//! [`auth`]).
//!
//! It runs on a thread of its own, not on a core: it is cold, it must
//! answer even when every core is saturated, and a scrape must never add
//! latency to client traffic. The thread runs a current-thread tokio
//! runtime and hyper's HTTP/1.1 server, so connections are served
//! concurrently: a client that connects and says nothing holds one task,
//! not the endpoint. Everything is bounded: connections at once (see
//! [`slots`]: probes and scrapes keep slots of their own, and a slow head
//! holds none), the request head and body, the time to send a head and
//! then a body, a handler's time and a connection's life. A request is
//! decided on its head (see [`gate`]): refused at once, before its body is
//! read, when it may not be made.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use crate::cluster::view::ClusterView;
use crate::config::Secret;
use crate::gateway_addresses::GatewayAddresses;
use crate::metrics::NodeMetrics;
use crate::ops::Ops;
use crate::store::Store;

mod access;
mod auth;
mod by_type;
mod cluster_status;
mod console;
mod forward;
mod gate;
mod history;
mod hot;
pub(crate) mod log_level;
mod log_limit;
mod operator;
mod peers;
mod probes;
mod rebalance;
mod routes;
mod scripts;
mod sessions;
mod slots;
mod state_view;
mod write_deadline;

pub use self::access::Access;
pub use self::history::History;
use self::routes::{error_json, Body};
use self::slots::{Connections, Pending};
pub use self::slots::{PENDING_HEADS_MAX, PROBE_SLOTS_MAX};
pub use self::state_view::DebugView;
use crate::ops::NodePhase;

/// Requests served at once (their head read); past it a request is
/// answered `503`, but probes and scrapes have [`PROBE_SLOTS_MAX`] more of
/// their own. An admin port has a few scrapers and probes, never this many.
pub const CONNECTIONS_MAX: usize = slots::SLOTS_MAX;
/// How long a client may take to send its request head: a silent client is
/// dropped.
pub const HEAD_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a client may take to send a body once its head is in: no
/// longer than its head, so a body held open costs what a slow head does.
pub const BODY_READ_TIMEOUT: Duration = HEAD_READ_TIMEOUT;
/// The longest a connection lives, whatever it does: also bounds a client
/// that reads its answer too slowly.
const CONNECTION_LIFETIME_MAX: Duration = Duration::from_secs(30);
/// The longest a handler may take before the server answers 503 for it (a
/// handler that waits for the cores must not hang its client). The owner
/// of an object answers a transfer within it, which the node that forwards
/// the call outwaits (`ops::transfer`).
const HANDLER_TIMEOUT: Duration = crate::ops::transfer::OWNER_ANSWER_MAX;
/// The handler time of a transfer this node may forward to the owner: its
/// own part and the forward, which outwaits the owner's `HANDLER_TIMEOUT`.
const FORWARDING_HANDLER_TIMEOUT: Duration = crate::ops::transfer::FORWARDING_ANSWER_MAX;

const _: () = assert!(
    FORWARDING_HANDLER_TIMEOUT.as_millis() + HEAD_READ_TIMEOUT.as_millis()
        < CONNECTION_LIFETIME_MAX.as_millis()
);
/// The largest request head, in bytes (hyper's floor is 8 KiB).
const REQUEST_HEAD_MAX_BYTES: usize = 16 * 1024;
/// The largest request body, in bytes: a `Content-Length` over it is
/// answered `413` on the head.
pub const REQUEST_BODY_MAX_BYTES: usize = 64 * 1024;

/// State the endpoint reports.
#[derive(Clone)]
pub struct AdminState {
    pub phase: NodePhase,
    pub metrics: Arc<NodeMetrics>,
    /// For `GET /cluster`; `None` answers 404.
    pub cluster: Option<Arc<ClusterView>>,
    /// For `GET /objects/...`, read directly (no core is involved).
    pub store: Option<Store>,
    /// Transfers, the drain and the listings; `None` answers 404.
    pub ops: Option<Ops>,
    /// For `GET /config` (secrets masked); `None` answers 404.
    pub config: Option<Arc<crate::config::Config>>,
    /// `admin.token`: every mutating call presents it; `None` lets them
    /// through (an endpoint on loopback only: a node off loopback refuses
    /// to start without one).
    pub token: Option<Secret>,
    /// Where this node is reached, as its membership row says, for
    /// `/cluster`'s own entry.
    pub advertised: Option<Advertised>,
    /// The node's registered object types, `(name, type_id)`: a path names
    /// an object's type by one of these names or by a type id.
    pub object_types: Vec<(&'static str, u32)>,
    /// The `Host` and `Origin` a request may name (`admin.allowed_hosts`,
    /// `admin.allowed_origins`; the bound address is added by
    /// [`Admin::serve`]).
    pub access: Access,
    /// The node's figures over the last hour (`GET /history`), sampled
    /// while the endpoint serves.
    pub history: History,
    /// A user type's view of its saved state (`Object::debug_view`), for
    /// `GET /objects/{type}/{id}`; `None` shows its bytes in hex only.
    pub debug_view: Option<DebugView>,
    /// The node's scripted types, for `POST /scripts/reload` and
    /// `GET /scripts`; `None` when `[scripts] dir` is unset.
    pub scripts: Option<Arc<crate::scripts::Library>>,
}

impl AdminState {
    /// A node's endpoint with nothing but `metrics` and the built-in
    /// types, for the unit tests of the handlers.
    #[cfg(test)]
    pub(crate) fn bare(metrics: Arc<NodeMetrics>) -> AdminState {
        use crate::builtins::{PLAYER_TYPE_ID, ROOM_TYPE_ID};
        AdminState {
            phase: NodePhase::new(shards::ShutdownHandle::new()),
            metrics,
            cluster: None,
            store: None,
            ops: None,
            config: None,
            token: None,
            advertised: None,
            object_types: vec![("player", PLAYER_TYPE_ID), ("room", ROOM_TYPE_ID)],
            scripts: None,
            access: Default::default(),
            history: Default::default(),
            debug_view: None,
        }
    }
}

/// This node's advertised addresses (`gateway.advertise`,
/// `admin.advertise`, or what was bound).
#[derive(Clone, Debug)]
pub struct Advertised {
    pub gateway: GatewayAddresses,
    pub admin: String,
}

/// A running admin endpoint; dropping it stops the thread and closes every
/// connection.
pub struct Admin {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Admin {
    /// Binds `listen` now (so a bad address fails start-up) and serves on a
    /// thread of its own.
    pub fn start(listen: SocketAddr, state: AdminState) -> std::io::Result<Admin> {
        Admin::serve(std::net::TcpListener::bind(listen)?, state)
    }

    /// Serves on a listener bound already (the node binds it before it
    /// joins the cluster, to advertise its address).
    pub fn serve(listener: std::net::TcpListener, mut state: AdminState) -> std::io::Result<Admin> {
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        state.access = state.access.bound_to(address.ip());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("routerd-admin".to_string())
            .spawn(move || {
                runtime.block_on(serve(listener, Arc::new(state), stopped));
                // Dropping the runtime here cancels the connections still
                // open.
            })?;
        Ok(Admin {
            address,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The thread may have ended already (it logged why).
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    state: Arc<AdminState>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "the admin endpoint cannot serve");
            return;
        }
    };
    if let Some(ops) = &state.ops {
        // With cluster.rebalance_on_join: ends with the runtime.
        drop(tokio::spawn(ops.clone().rebalance_on_joins()));
    }
    drop(tokio::spawn(history::sample(state.clone())));
    let connections = Arc::new(Connections::new());
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "admin accept failed");
                // Out of file descriptors and the like: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (id, evicted) = connections.admit();
        if evicted {
            state.metrics.admin.refused_evicted.inc();
        }
        let pending = Pending {
            connections: connections.clone(),
            id,
        };
        let task = tokio::spawn(connection(stream, state.clone(), pending));
        connections.track(id, task.abort_handle());
    }
}

/// Serves the one request of a connection, unless a limit ends it first.
async fn connection(stream: tokio::net::TcpStream, state: Arc<AdminState>, pending: Pending) {
    let metrics = state.metrics.clone();
    let connections = pending.connections.clone();
    let id = pending.id;
    // The slot the request takes once its head is in, released when the
    // connection ends (the service, which holds it, is dropped then).
    let slot = Arc::new(std::sync::Mutex::new(None::<OwnedSemaphorePermit>));
    let service = service_fn(move |request| {
        let (state, connections, slot) = (state.clone(), connections.clone(), slot.clone());
        async move {
            connections.head_done(id);
            Ok::<_, Infallible>(handle(&state, &connections, &slot, request).await)
        }
    });
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        // One request per connection, as before hyper: keep-alive saves
        // nothing at a scrape every few seconds, and an idle kept-alive
        // connection would hold a slot.
        .keep_alive(false)
        .header_read_timeout(HEAD_READ_TIMEOUT)
        .max_buf_size(REQUEST_HEAD_MAX_BYTES)
        // An answer its client does not read ends the connection, and
        // frees its slot, after `WRITE_STALL_MAX` (`write_deadline.rs`).
        .serve_connection(
            TokioIo::new(write_deadline::WriteDeadline::new(
                stream,
                write_deadline::WRITE_STALL_MAX,
            )),
            service,
        );
    match tokio::time::timeout(CONNECTION_LIFETIME_MAX, served).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) if error.is_timeout() || write_deadline::passed(&error) => {
            metrics.admin.refused_deadline.inc()
        }
        Ok(Err(error)) => tracing::debug!(%error, "admin connection failed"),
        Err(_) => tracing::debug!("admin connection closed at its lifetime limit"),
    }
    drop(pending);
}

/// Decides on the head, takes a slot, reads the body (bounded in size and
/// time), then routes within the handler timeout.
async fn handle(
    state: &AdminState,
    connections: &Connections,
    slot: &std::sync::Mutex<Option<OwnedSemaphorePermit>>,
    request: Request<Incoming>,
) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let class = match gate::decide(state, &parts) {
        Ok(class) => class,
        Err(refused) => return *refused,
    };
    let Some(permit) = connections.slot(class) else {
        state.metrics.admin.refused_slots.inc();
        let mut busy = error_json(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            "every admin slot is taken: try again",
        );
        busy.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
        return busy;
    };
    *slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(permit);
    // A probe or a scrape needs no body: it is not waited for.
    let body = match class {
        gate::Class::Probe => Bytes::new(),
        gate::Class::Other => match read_body(state, body).await {
            Ok(body) => body,
            Err(refused) => return refused,
        },
    };
    let timeout = handler_timeout(&parts);
    let request = Request::from_parts(parts, body);
    match tokio::time::timeout(timeout, routes::route(state, request)).await {
        Ok(response) => {
            let status = response.status();
            if status == StatusCode::BAD_REQUEST || status == StatusCode::METHOD_NOT_ALLOWED {
                state.metrics.admin.refused_bad_request.inc();
            }
            response
        }
        Err(_) => error_json(
            StatusCode::SERVICE_UNAVAILABLE,
            "timed_out",
            "the handler did not finish in time",
        ),
    }
}

/// How long the handler of a request may take: `HANDLER_TIMEOUT`, and
/// longer for a transfer called on this node, which it may forward to the
/// object's owner (one forwarded here, `forwarded=1`, is the owner's part).
fn handler_timeout(parts: &hyper::http::request::Parts) -> Duration {
    let path = parts.uri.path();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let transfer = parts.method == hyper::Method::POST
        && matches!(segments.as_slice(), ["objects", _, _, "transfer"]);
    let forwarded = parts
        .uri
        .query()
        .is_some_and(|query| query.split('&').any(|pair| pair == "forwarded=1"));
    if transfer && !forwarded {
        FORWARDING_HANDLER_TIMEOUT
    } else {
        HANDLER_TIMEOUT
    }
}

/// The body, at most [`REQUEST_BODY_MAX_BYTES`] (a body without a length
/// may still be longer) within [`BODY_READ_TIMEOUT`].
async fn read_body(state: &AdminState, body: Incoming) -> Result<Bytes, Response<Body>> {
    let read = Limited::new(body, REQUEST_BODY_MAX_BYTES).collect();
    match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Ok(Ok(body)) => Ok(body.to_bytes()),
        Ok(Err(error)) if error.is::<LengthLimitError>() => {
            state.metrics.admin.refused_too_large.inc();
            Err(error_json(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "request body too large",
            ))
        }
        Ok(Err(_)) => Err(error_json(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "unreadable request body",
        )),
        Err(_) => {
            state.metrics.admin.refused_deadline.inc();
            Err(error_json(
                StatusCode::REQUEST_TIMEOUT,
                "timed_out",
                "the request body was not sent in time",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout_of(method: &str, uri: &str) -> Duration {
        let request = Request::builder().method(method).uri(uri).body(()).unwrap();
        handler_timeout(&request.into_parts().0)
    }

    /// A transfer called on a node that is not the owner waits for the
    /// owner's answer, which may take the owner's whole handler time: the
    /// calling node's handler must outwait the forward, and the owner's
    /// part (`forwarded=1`) stays within what the forward waits.
    #[test]
    fn a_transfer_that_may_be_forwarded_outwaits_the_owner() {
        let owner = timeout_of("POST", "/objects/player/7/transfer?to=2&forwarded=1");
        let asked = timeout_of("POST", "/objects/player/7/transfer?to=2");
        assert_eq!(owner, HANDLER_TIMEOUT);
        assert!(crate::ops::transfer::FORWARD_TIMEOUT > owner);
        assert!(asked >= HANDLER_TIMEOUT + crate::ops::transfer::FORWARD_TIMEOUT);
        assert_eq!(timeout_of("GET", "/objects/player/7"), HANDLER_TIMEOUT);
        assert_eq!(timeout_of("POST", "/drain"), HANDLER_TIMEOUT);
    }
}
