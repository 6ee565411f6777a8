//! A draining gateway's redirect, grace and close.

use super::*;
use crate::store::{GatewayAddresses, Transport};

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
