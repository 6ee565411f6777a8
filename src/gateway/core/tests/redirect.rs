//! A draining gateway's redirect, grace and close.

use super::*;
use crate::gateway_addresses::{GatewayAddresses, Transport};

#[test]
fn a_draining_gateway_redirects_every_session_answers_within_the_grace_then_closes() {
    let mut f = Fixture::new();
    let grace = Duration::from_millis(500);
    let (idle, idle_outbox) = f.open();
    let (busy, busy_outbox) = f.open();
    let epoch = f.login(busy, 7);
    f.request(busy, route::PLAYER_GET, 1).unwrap();
    let targets = ["10.0.0.2:7400", "10.0.0.3:7400"];
    // A third node serves TLS only: no plain session is sent there.
    let mut tls_only = GatewayAddresses::default();
    tls_only.set(Transport::Tls, "10.0.0.4:7443");
    let advertised: Vec<GatewayAddresses> = targets
        .iter()
        .map(|target| GatewayAddresses::plain(*target))
        .chain([tls_only])
        .collect();
    f.core.redirect_all(f.now, grace, advertised.clone());
    for (session, outbox) in [(idle, &idle_outbox), (busy, &busy_outbox)] {
        let pushes: Vec<_> = frames(outbox)
            .into_iter()
            .filter(|frame| frame.1 == route::SYS_REDIRECT)
            .collect();
        let target = targets[(session % 2) as usize];
        assert_eq!(
            pushes,
            vec![(
                FrameKind::Push,
                route::SYS_REDIRECT,
                0,
                redirect_body(grace, target)
            )]
        );
    }
    // docs/protocol.md's vector.
    assert_eq!(
        redirect_body(Duration::from_millis(5000), "10.0.0.2:7400"),
        b"\x88\x13\x00\x0010.0.0.2:7400".to_vec()
    );
    // Within the grace: requests are accepted and answered as before, and
    // a second redirect_all sends nothing again.
    f.core.redirect_all(f.now, grace, advertised);
    assert!(f.request(busy, route::PLAYER_INCR, 2).is_some());
    assert_eq!(f.core.close_redirected(f.now + grace / 2), 2);
    // The grace ends: the idle session closes; the busy one owes answers,
    // so it refuses new requests and stays until they are answered.
    assert_eq!(f.core.close_redirected(f.now + grace), 1);
    assert!(f.core.session(idle).is_none());
    assert_eq!(
        idle_outbox.state(),
        crate::gateway::outbox::OutboxState::Closing
    );
    assert!(f.request(busy, route::PLAYER_GET, 3).is_none());
    let refused = frames(&busy_outbox).pop().unwrap();
    assert_eq!(
        (refused.2, error_code(&refused)),
        (3, ErrorCode::Unavailable as u16)
    );
    for seq in [1, 2] {
        let route_id = if seq == 1 {
            route::PLAYER_GET
        } else {
            route::PLAYER_INCR
        };
        f.core
            .egress(
                &egress(busy, epoch, 7, FrameKind::Response, route_id, seq),
                f.now,
            )
            .unwrap();
    }
    assert_eq!(f.core.close_redirected(f.now + grace), 0);
    assert_eq!(f.metrics.gateway.redirects.get(), 2);
    assert_eq!(f.metrics.gateway.redirect_closed.get(), 2);
    assert_eq!(f.metrics.gateway.redirect_refused.get(), 1);
    // A session opened while draining is told at once, with no target
    // when there is none.
    f.core.set_redirect_targets(Vec::new());
    let (_, late) = f.open();
    assert_eq!(
        frames(&late),
        vec![(
            FrameKind::Push,
            route::SYS_REDIRECT,
            0,
            500u32.to_le_bytes().to_vec()
        )]
    );
}

/// A session placed on its player's node: `sys.redirect` to that node's
/// listener of the session's own transport, once, and the session stays
/// open and served past the grace.
#[test]
fn a_placed_session_is_told_once_and_never_closed() {
    let mut f = Fixture::new();
    let grace = Duration::from_millis(500);
    let mut owner = GatewayAddresses::plain("10.0.0.2:7400");
    owner.set(Transport::Tls, "10.0.0.2:7443");
    let outbox = Rc::new(Outbox::new(limits().send_queue_max));
    let tls = f
        .core
        .open_session_via(outbox.clone(), Transport::Tls, f.now);
    let (plain, plain_outbox) = f.open();
    // Not logged in: nothing to place.
    assert!(!f.core.place_session(plain, grace, &owner));
    f.login(plain, 7);
    f.login(tls, 8);
    assert!(f.core.place_session(plain, grace, &owner));
    assert!(f.core.place_session(tls, grace, &owner));
    // Once per session, whatever comes later.
    assert!(!f.core.place_session(plain, grace, &owner));
    assert_eq!(
        frames(&plain_outbox),
        vec![(
            FrameKind::Push,
            route::SYS_REDIRECT,
            0,
            redirect_body(grace, "10.0.0.2:7400")
        )]
    );
    assert_eq!(
        frames(&outbox),
        vec![(
            FrameKind::Push,
            route::SYS_REDIRECT,
            0,
            redirect_body(grace, "10.0.0.2:7443")
        )]
    );
    assert_eq!(f.metrics.gateway.placements.get(), 2);
    // Long past the grace the session is open and its requests accepted:
    // only a drain's redirect ends in a close.
    assert_eq!(f.core.close_redirected(f.now + grace * 10), 2);
    assert!(f.request(plain, route::PLAYER_INCR, 1).is_some());
    assert_eq!(f.metrics.gateway.redirects.get(), 0);
    // An owner without the session's transport gets no redirect.
    let ws_outbox = Rc::new(Outbox::new(limits().send_queue_max));
    let ws = f
        .core
        .open_session_via(ws_outbox.clone(), Transport::Ws, f.now);
    f.login(ws, 9);
    assert!(!f.core.place_session(ws, grace, &owner));
    assert!(frames(&ws_outbox).is_empty());
    assert_eq!(f.metrics.gateway.placements_without_transport.get(), 1);
    // A placed session still gets a drain's redirect, and its close.
    f.core
        .redirect_all(f.now, grace, vec![GatewayAddresses::plain("10.0.0.3:7400")]);
    assert_eq!(
        frames(&plain_outbox).last().map(|frame| frame.3.clone()),
        Some(redirect_body(grace, "10.0.0.3:7400"))
    );
    assert_eq!(f.metrics.gateway.redirects.get(), 3);
}

/// A draining node's sessions get the drain's redirect, not a placement.
#[test]
fn a_draining_node_places_no_session() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    f.login(s, 7);
    let grace = Duration::from_millis(500);
    f.core
        .redirect_all(f.now, grace, vec![GatewayAddresses::plain("10.0.0.3:7400")]);
    assert!(!f
        .core
        .place_session(s, grace, &GatewayAddresses::plain("10.0.0.2:7400")));
    assert_eq!(frames(&outbox).len(), 1, "the drain's redirect only");
    assert_eq!(f.metrics.gateway.placements.get(), 0);
}
