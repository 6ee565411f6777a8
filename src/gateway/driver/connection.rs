//! The connection side of the gateway driver: the listeners' accept
//! loops, which start a task per connection (`connection_task.rs`), and
//! the timers that sweep deadlines and idle sessions.

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use shards::net::TcpListener;

use super::connection_task::ConnectionTask;
use super::{unix_now_s, GatewayHandle, MAX_IDLE_TICK, MAX_TIMER_TICK};
use crate::gateway::transport::{Listener, Transport};

/// Serves the gateway on `listener` (plain TCP) and on each of `edges`
/// (TLS, WebSocket) until the future is dropped. Also starts the deadline
/// timer and the idle sweep.
pub async fn serve(
    gateway: GatewayHandle,
    listener: TcpListener,
    edges: Vec<(TcpListener, Listener)>,
) {
    shards::spawn(expire_loop(gateway.clone())).detach();
    shards::spawn(idle_loop(gateway.clone())).detach();
    shards::spawn(super::resume::mailbox_loop(gateway.clone())).detach();
    let mut loops: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>> = vec![Box::pin(
        accept_loop(gateway.clone(), listener, Listener::Plain),
    )];
    for (listener, kind) in edges {
        loops.push(Box::pin(accept_loop(gateway.clone(), listener, kind)));
    }
    // The accept loops never end: wait on all of them until dropped.
    poll_fn(|cx| {
        for accept in &mut loops {
            let _ = accept.as_mut().poll(cx);
        }
        Poll::<()>::Pending
    })
    .await;
}

async fn accept_loop(gateway: GatewayHandle, listener: TcpListener, kind: Listener) {
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                // Out of file descriptors and the like: do not spin.
                shards::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let max = gateway.0.config.sessions_max;
        let admitted = gateway
            .0
            .sessions_open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .is_ok();
        if !admitted && !make_room(&gateway) {
            gateway.0.metrics.gateway.sessions_refused.inc();
            drop(stream);
            continue;
        }
        if !stream.is_registered() {
            gateway.0.metrics.gateway.sessions_unregistered.inc();
        }
        let transport = match edge_transport(&gateway, &kind) {
            Some(transport) => transport,
            None => {
                drop(stream);
                gateway.0.sessions_open.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
        };
        let advertised_as = kind.advertised_as();
        shards::spawn_detached(ConnectionTask::open(
            gateway.clone(),
            stream,
            transport,
            advertised_as,
        ));
    }
}

/// Connections a node admits past its session cap by evicting, before the
/// evicted ones' tasks end and give their slots (and descriptors) back: a
/// burst of connections at the cap must not take the descriptors the node
/// keeps for its links, store and admin endpoint (256 and more).
const EVICTION_OVERSHOOT_MAX: u32 = 32;

/// At the session cap: closes this core's oldest session that never
/// logged in (`GatewayCore::evict_unauthenticated`) and takes its slot for
/// the new connection. The closed one's task gives the slot back when it
/// ends, a moment later; until then the count is past the cap, by at most
/// `EVICTION_OVERSHOOT_MAX`, and a connection past that is refused.
fn make_room(gateway: &GatewayHandle) -> bool {
    let max = gateway.0.config.sessions_max;
    let reserved = gateway
        .0
        .sessions_open
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
            (open < max.saturating_add(EVICTION_OVERSHOOT_MAX)).then_some(open + 1)
        })
        .is_ok();
    if !reserved {
        return false;
    }
    if !gateway.evict_unauthenticated() {
        gateway.0.sessions_open.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    true
}

/// The transport of a connection accepted on `kind`; `None` if it must be
/// closed at once (rustls cannot start one).
fn edge_transport(gateway: &GatewayHandle, kind: &Listener) -> Option<Transport> {
    match Transport::for_listener(kind, gateway.0.config.body_max_bytes) {
        Ok(transport) => Some(transport),
        Err(error) => {
            tracing::warn!(%error, "cannot start a TLS connection");
            None
        }
    }
}

async fn expire_loop(gateway: GatewayHandle) {
    let tick =
        (gateway.0.config.request_timeout_ms / 10).clamp(1, MAX_TIMER_TICK.as_millis() as u64);
    loop {
        shards::sleep(Duration::from_millis(tick)).await;
        let now = Instant::now();
        let mut state = gateway.0.state.borrow_mut();
        if state
            .next_deadline()
            .is_some_and(|deadline| deadline <= now)
        {
            state.expire(now);
        }
        // Redirected sessions whose grace ended (nothing when not draining).
        state.close_redirected(now);
        // Detached sessions whose resume window passed.
        state.expire_detached(now);
        drop(state);
        gateway.flush_notices();
        // Logins that timed out release the requests held behind them.
        gateway.replay_released();
    }
}

/// Closes sessions silent for `idle_timeout_ms`, kicks those whose token
/// expired (docs/protocol.md, section 2), and resets closing connections
/// that did not send what they owed in time (`closing.rs`). A sweep on a period
/// rather than a timeout on every read: a read timeout is a timer insert
/// and removal plus a clock read per read, on the ping path's every batch.
async fn idle_loop(gateway: GatewayHandle) {
    let idle = Duration::from_millis(gateway.0.config.idle_timeout_ms.max(1));
    let tick = (idle / 10).clamp(Duration::from_millis(1), MAX_IDLE_TICK);
    loop {
        shards::sleep(tick).await;
        let now = Instant::now();
        let closed = {
            let mut state = gateway.0.state.borrow_mut();
            state.close_idle(now, idle) + state.kick_expired(unix_now_s())
        };
        let unflushed = gateway.0.closing.borrow_mut().abort_overdue(now);
        gateway
            .0
            .metrics
            .gateway
            .close_flush_timeouts
            .add(unflushed);
        if closed > 0 {
            gateway.flush_notices();
        }
    }
}
