//! The accepting side: who may link in.

use super::*;
use crate::gateway_addresses::GatewayAddresses;
use crate::store::MemberState;

fn peer(node: u64, incarnation: u64, state: MemberState) -> Peer {
    Peer {
        node: NodeId(node),
        incarnation,
        state,
        cores: Vec::new(),
        gateway: GatewayAddresses::default(),
        admin: String::new(),
        timers: None,
    }
}

#[test]
fn only_members_link_in_and_only_at_a_live_incarnation() {
    let peers: BTreeMap<NodeId, Peer> = [
        (NodeId(2), peer(2, 5, MemberState::Up)),
        (NodeId(3), peer(3, 4, MemberState::Down)),
    ]
    .into();
    assert_eq!(admission(&peers, NodeId(2), 5), Ok(()));
    assert_eq!(admission(&peers, NodeId(2), 6), Ok(()), "rejoined");
    assert_eq!(
        admission(&peers, NodeId(2), 4),
        Err(Refusal::StaleIncarnation)
    );
    assert_eq!(
        admission(&peers, NodeId(3), 4),
        Err(Refusal::StaleIncarnation)
    );
    assert_eq!(admission(&peers, NodeId(9), 1), Err(Refusal::NotMember));
}
