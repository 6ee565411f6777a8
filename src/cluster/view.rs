//! The node's view of the cluster, shared by its cores: the other members
//! as membership last read them, this node's own incarnation, lease and
//! fence, and a version every core watches. Membership (on one core)
//! publishes; each core reads a snapshot only when the version moved, so
//! the send path costs one atomic load.

use std::collections::BTreeMap;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use crate::gateway_addresses::{is_unspecified, GatewayAddresses};
use crate::ids::NodeId;
pub use crate::router::driver::CoreStanding;
use crate::store::{MemberRow, MemberState, MemberTimers};

/// Another member as this node knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub node: NodeId,
    pub incarnation: u64,
    pub state: MemberState,
    /// Where its cores listen for links, by core; empty when its row
    /// named none that parse (it cannot be linked to).
    pub cores: Vec<SocketAddr>,
    /// Its gateway listeners as clients reach them, by transport.
    pub gateway: GatewayAddresses,
    /// Its admin endpoint as advertised (`admin.advertise`).
    pub admin: String,
    /// The failure-detection timers its row carries (`None`: a row from a
    /// build that did not record them).
    pub timers: Option<MemberTimers>,
}

impl Peer {
    /// The member a row describes. An unspecified address it advertises
    /// (`0.0.0.0`: its node listens on every interface and set no
    /// `advertise`) is left out, as if not advertised: dialed, it would
    /// reach this node's own machine, not the member (see
    /// [`unspecified_addresses`], which says which).
    pub fn from_row(row: &MemberRow) -> Peer {
        let cores: Option<Vec<SocketAddr>> = row
            .cluster
            .iter()
            .map(|address| address.parse().ok())
            .collect();
        let cores = cores
            .filter(|cores| !cores.iter().any(|address| address.ip().is_unspecified()))
            .unwrap_or_default();
        let mut gateway = GatewayAddresses::decode(&row.gateway);
        gateway.take_unspecified();
        let admin = if is_unspecified(&row.admin) {
            String::new()
        } else {
            row.admin.clone()
        };
        Peer {
            node: row.node_id,
            incarnation: row.incarnation,
            state: row.state,
            cores,
            gateway,
            admin,
            timers: row.timers,
        }
    }

    /// Whether frames may be sent to it: it has an incarnation that has
    /// not ended.
    pub fn is_live(&self) -> bool {
        !self.state.is_ended()
    }
}

/// The unspecified addresses a member's row advertises, each with the key
/// its node sets to advertise a reachable one instead: what
/// [`Peer::from_row`] leaves out.
pub fn unspecified_addresses(row: &MemberRow) -> Vec<(&'static str, String)> {
    let mut found: Vec<(&'static str, String)> = GatewayAddresses::decode(&row.gateway)
        .take_unspecified()
        .into_iter()
        .map(|(_, address)| ("gateway.advertise", address))
        .collect();
    if is_unspecified(&row.admin) {
        found.push(("admin.advertise", row.admin.clone()));
    }
    found.extend(
        row.cluster
            .iter()
            .find(|address| is_unspecified(address))
            .map(|address| ("cluster.advertise", address.clone())),
    );
    found
}

/// Says, once per row that changed, that a member advertises addresses
/// this node will not dial or forward to, and what its operator sets.
pub fn warn_of_unspecified_addresses(row: &MemberRow) {
    for (key, address) in unspecified_addresses(row) {
        tracing::error!(
            node = row.node_id.0,
            key,
            %address,
            "member {} advertises {address}, an unspecified address that reaches no other \
             machine: this node does not dial or forward to it there; set {key} on node {} to \
             the address the others reach it at",
            row.node_id.0,
            row.node_id.0
        );
    }
}

/// This node's own standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    pub incarnation: u64,
    /// The lease end, on the router clock (`crate::clock`).
    pub lease_until_ms: u64,
    /// Declared down, or the lease ran out before a rejoin.
    pub fenced: bool,
    pub state: MemberState,
}

/// One published state of the view.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub version: u64,
    pub me: Standing,
    pub peers: Arc<BTreeMap<NodeId, Peer>>,
}

/// How one core's link to one peer core stands, for `/cluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkStatus {
    pub node: NodeId,
    pub core: usize,
    pub state: &'static str,
    pub queued: usize,
    pub last_refusal: Option<&'static str>,
}

pub struct ClusterView {
    me: NodeId,
    version: AtomicU64,
    current: Mutex<Snapshot>,
    watchers: Mutex<Vec<Waker>>,
    /// Per core: its outgoing links, as it last reported them.
    links: Mutex<Vec<Vec<LinkStatus>>>,
    /// Per core: what its router does, as it last reported it.
    cores: Mutex<Vec<CoreStanding>>,
    /// Cores whose router finished its shutdown (saved and released).
    released: AtomicUsize,
    /// A state for membership to write (`up` once serving, `draining`).
    wanted: Mutex<Option<MemberState>>,
    /// Per member: when (router clock) membership last saw its heartbeat
    /// move, for `/cluster`.
    heartbeats: Mutex<BTreeMap<NodeId, u64>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic on a core takes the process down (fail-stop), so a poisoned
    // lock is only ever seen on the way out: the data is still whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ClusterView {
    pub fn new(me: NodeId, core_count: usize, standing: Standing) -> ClusterView {
        ClusterView {
            me,
            version: AtomicU64::new(1),
            current: Mutex::new(Snapshot {
                version: 1,
                me: standing,
                peers: Arc::default(),
            }),
            watchers: Mutex::new(Vec::new()),
            links: Mutex::new(vec![Vec::new(); core_count]),
            cores: Mutex::new(vec![CoreStanding::default(); core_count]),
            released: AtomicUsize::new(0),
            wanted: Mutex::new(None),
            heartbeats: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The version now: a reader whose snapshot has it is up to date.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub fn snapshot(&self) -> Snapshot {
        lock(&self.current).clone()
    }

    /// Changes the view and wakes every watcher.
    pub fn update(&self, change: impl FnOnce(&mut Standing, &mut BTreeMap<NodeId, Peer>)) {
        {
            let mut current = lock(&self.current);
            let mut peers = (*current.peers).clone();
            change(&mut current.me, &mut peers);
            current.peers = Arc::new(peers);
            current.version += 1;
            self.version.store(current.version, Ordering::Release);
        }
        for waker in lock(&self.watchers).drain(..) {
            waker.wake();
        }
    }

    /// Resolves once the version is past `seen`.
    pub async fn changed(&self, seen: u64) {
        poll_fn(|cx| {
            if self.version() > seen {
                return Poll::Ready(());
            }
            let mut watchers = lock(&self.watchers);
            // Checked again under the lock `update` wakes under, so a change
            // between the first check and the registration is not missed.
            if self.version() > seen {
                return Poll::Ready(());
            }
            if !watchers.iter().any(|waker| waker.will_wake(cx.waker())) {
                watchers.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }

    pub fn report_links(&self, core: usize, links: Vec<LinkStatus>) {
        if let Some(slot) = lock(&self.links).get_mut(core) {
            *slot = links;
        }
    }

    pub fn links(&self) -> Vec<Vec<LinkStatus>> {
        lock(&self.links).clone()
    }

    pub fn report_core(&self, core: usize, standing: CoreStanding) {
        if let Some(slot) = lock(&self.cores).get_mut(core) {
            *slot = standing;
        }
    }

    pub fn cores(&self) -> Vec<CoreStanding> {
        lock(&self.cores).clone()
    }

    /// Membership's record of when each member's heartbeat last moved
    /// (router clock). Not a version change: nothing acts on it.
    pub fn report_heartbeats(&self, moved_at_ms: BTreeMap<NodeId, u64>) {
        *lock(&self.heartbeats) = moved_at_ms;
    }

    pub fn heartbeats_seen(&self) -> BTreeMap<NodeId, u64> {
        lock(&self.heartbeats).clone()
    }

    /// Asks membership to write `state` for this node.
    pub fn request_state(&self, state: MemberState) {
        *lock(&self.wanted) = Some(state);
        self.update(|_, _| {});
    }

    pub fn take_wanted_state(&self) -> Option<MemberState> {
        lock(&self.wanted).take()
    }

    /// A core's router finished its shutdown.
    pub fn core_released(&self) {
        self.released.fetch_add(1, Ordering::AcqRel);
        self.update(|_, _| {});
    }

    pub fn cores_released(&self) -> usize {
        self.released.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Wake};

    fn row(gateway: &str, admin: &str, cluster: &[&str]) -> MemberRow {
        MemberRow {
            node_id: NodeId(2),
            incarnation: 1,
            state: MemberState::Up,
            heartbeat: 1,
            gateway: gateway.to_string(),
            admin: admin.to_string(),
            cluster: cluster.iter().map(|address| address.to_string()).collect(),
            core_count: 2,
            actors: Vec::new(),
            timers: None,
            version: crate::store::MemberVersion(1),
        }
    }

    /// A first node alone may listen on `0.0.0.0` without `advertise`,
    /// and its row then says `0.0.0.0`: a member that joined later dialed
    /// that for links, forwarded admin calls to it and sent clients
    /// there, reaching its own machine. Such an address is not used.
    #[test]
    fn an_unspecified_address_in_a_row_is_never_dialed() {
        let unspecified = row(
            "0.0.0.0:7400;tls=10.0.0.5:7443;ws=[::]:7480",
            "0.0.0.0:9464",
            &["10.0.0.5:7600", "0.0.0.0:7601"],
        );
        let peer = Peer::from_row(&unspecified);
        assert!(peer.cores.is_empty(), "no link to it: {:?}", peer.cores);
        assert_eq!(peer.admin, "", "no admin call forwarded to it");
        assert_eq!(
            peer.gateway.encode(),
            ";tls=10.0.0.5:7443",
            "{}",
            peer.gateway
        );
        assert_eq!(
            unspecified_addresses(&unspecified),
            vec![
                ("gateway.advertise", "0.0.0.0:7400".to_string()),
                ("gateway.advertise", "[::]:7480".to_string()),
                ("admin.advertise", "0.0.0.0:9464".to_string()),
                ("cluster.advertise", "0.0.0.0:7601".to_string()),
            ]
        );
        let reachable = row("10.0.0.5:7400", "10.0.0.5:9464", &["10.0.0.5:7600"]);
        let peer = Peer::from_row(&reachable);
        assert_eq!(
            peer.cores,
            vec!["10.0.0.5:7600".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(peer.admin, "10.0.0.5:9464");
        assert_eq!(peer.gateway.encode(), "10.0.0.5:7400");
        assert!(unspecified_addresses(&reachable).is_empty());
    }

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn standing() -> Standing {
        Standing {
            incarnation: 1,
            lease_until_ms: 0,
            fenced: false,
            state: MemberState::Joining,
        }
    }

    #[test]
    fn an_update_wakes_a_watcher_and_moves_the_version() {
        let view = ClusterView::new(NodeId(1), 2, standing());
        let seen = view.version();
        let flag = Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        let mut changed = Box::pin(view.changed(seen));
        assert!(changed
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        view.update(|me, peers| {
            me.lease_until_ms = 10;
            peers.insert(
                NodeId(2),
                Peer {
                    node: NodeId(2),
                    incarnation: 3,
                    state: MemberState::Up,
                    cores: vec!["127.0.0.1:7600".parse().unwrap()],
                    gateway: GatewayAddresses::default(),
                    admin: String::new(),
                    timers: None,
                },
            );
        });
        assert!(flag.0.load(Ordering::SeqCst));
        assert!(changed
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_ready());
        let snapshot = view.snapshot();
        assert_eq!(snapshot.version, seen + 1);
        assert_eq!(snapshot.me.lease_until_ms, 10);
        assert_eq!(snapshot.peers[&NodeId(2)].incarnation, 3);
    }

    #[test]
    fn a_row_with_an_unparsable_core_address_has_no_cores() {
        let row = MemberRow {
            node_id: NodeId(2),
            incarnation: 1,
            state: MemberState::Up,
            heartbeat: 0,
            gateway: String::new(),
            admin: String::new(),
            cluster: vec!["127.0.0.1:1".into(), "nonsense".into()],
            core_count: 2,
            actors: Vec::new(),
            timers: None,
            version: crate::store::MemberVersion(1),
        };
        assert!(Peer::from_row(&row).cores.is_empty());
    }
}
