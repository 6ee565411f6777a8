//! Tests of observing at O(N): polls, listings only when the table version
//! moved, the watch ring, declarations by watchers, and the deletion of
//! rows of nodes that left.

use super::*;
use crate::store::MemberPoll;

/// A cluster of the real machines against one table, each answered at
/// once; `None` is a node that stopped (crashed or frozen).
struct Cluster {
    table: MemberTable,
    nodes: BTreeMap<u64, Option<Membership>>,
    now: u64,
}

impl Cluster {
    /// `count` nodes (ids 1..=count), started and up, every view listed.
    fn up(count: u64) -> Cluster {
        let mut cluster = Cluster {
            table: MemberTable::default(),
            nodes: (1..=count).map(|id| (id, Some(node(id)))).collect(),
            now: 0,
        };
        cluster.step();
        for m in cluster.nodes.values_mut().flatten() {
            m.set_state(0, MemberState::Up);
        }
        cluster.run_for(2 * config().heartbeat_interval_ms);
        for m in cluster.nodes.values_mut().flatten() {
            assert_eq!(m.members().count() as u64, count - 1);
        }
        cluster
    }

    /// One tick of every running node at `now`; returns the events by node.
    fn step(&mut self) -> BTreeMap<u64, Vec<Event>> {
        let mut events = BTreeMap::new();
        for (id, m) in self.nodes.iter_mut() {
            if let Some(m) = m {
                events.insert(*id, run(m, &mut self.table, self.now));
            }
        }
        events
    }

    /// Ticks every half interval for `ms`; returns every event by node.
    fn run_for(&mut self, ms: u64) -> Vec<(u64, u64, Event)> {
        let end = self.now + ms;
        let mut all = Vec::new();
        while self.now < end {
            self.now += config().heartbeat_interval_ms / 2;
            for (id, events) in self.step() {
                all.extend(events.into_iter().map(|event| (self.now, id, event)));
            }
        }
        all
    }

    fn membership(&mut self, id: u64) -> &mut Membership {
        self.nodes
            .get_mut(&id)
            .and_then(Option::as_mut)
            .expect("running")
    }

    /// The nodes that watch `id`.
    fn watchers_of(&mut self, id: u64) -> Vec<u64> {
        let mut watchers = Vec::new();
        for (watcher, m) in self.nodes.iter_mut() {
            if let Some(m) = m {
                if m.watched().contains(&NodeId(id)) {
                    watchers.push(*watcher);
                }
            }
        }
        watchers
    }
}

/// When the first declaration of `node` down applied, if any.
fn declared_at(events: &[(u64, u64, Event)], node: u64) -> Option<u64> {
    events.iter().find_map(|(at, _, event)| match event {
        Event::Member { row } if row.node_id == NodeId(node) && row.state == MemberState::Down => {
            Some(*at)
        }
        _ => None,
    })
}

#[test]
fn a_steady_cluster_polls_one_version_and_its_watched_rows_and_lists_nothing() {
    let mut cluster = Cluster::up(20);
    let before = cluster.table.counts();
    let version = cluster.table.version();
    let ticks = 40;
    cluster.run_for(ticks * config().heartbeat_interval_ms / 2);
    assert_eq!(
        cluster.table.version(),
        version,
        "heartbeats move no version"
    );
    let read = cluster.table.counts().rows_read - before.rows_read;
    // Each node, each tick: the version row and the rows it watches.
    assert_eq!(read, 20 * ticks * (1 + WATCHED_PER_NODE as u64));
}

#[test]
fn a_moved_version_lists_only_the_rows_changed_since() {
    let mut cluster = Cluster::up(5);
    let before = cluster.table.counts().rows_read;
    let now = cluster.now;
    cluster.membership(3).set_state(now, MemberState::Draining);
    let events = cluster.run_for(config().heartbeat_interval_ms);
    for observer in [1, 2, 4, 5] {
        assert!(
            events.iter().any(|(_, id, event)| *id == observer
                && matches!(event, Event::Member { row } if row.node_id == NodeId(3)
                    && row.state == MemberState::Draining)),
            "node {observer} saw the change: {events:?}"
        );
    }
    // Two ticks of polls, and one listed row a node (node 3 lists its own).
    let read = cluster.table.counts().rows_read - before;
    let polls = 5 * 2 * (1 + WATCHED_PER_NODE as u64);
    assert_eq!(read, polls + 5);
}

#[test]
fn a_poll_that_shows_the_version_unchanged_asks_for_no_listing() {
    let mut cluster = Cluster::up(3);
    let now = cluster.now + config().heartbeat_interval_ms;
    let m = cluster.membership(1);
    m.on_tick(now);
    let actions = m.take_actions();
    let Some(Action::Poll { nodes }) = actions
        .iter()
        .find(|action| matches!(action, Action::Poll { .. }))
        .cloned()
    else {
        panic!("a poll is due: {actions:?}");
    };
    let poll = cluster.table.poll(&nodes);
    let m = cluster.membership(1);
    m.on_polled(now, poll.clone());
    assert!(
        !m.take_actions()
            .iter()
            .any(|action| matches!(action, Action::List { .. })),
        "the version did not move"
    );
    // The same poll with a moved version asks for the changes since.
    let listed = poll.version;
    m.on_tick(now + config().heartbeat_interval_ms);
    m.take_actions();
    let moved = MemberPoll {
        version: TableVersion(listed.0 + 1),
        ..poll
    };
    m.on_polled(now + config().heartbeat_interval_ms, moved);
    assert!(m.take_actions().contains(&Action::List {
        since: listed,
        after: NodeId(0)
    }));
}

#[test]
fn every_live_node_is_watched_by_as_many_nodes_as_each_watches() {
    let mut cluster = Cluster::up(12);
    for id in 1..=12 {
        let watchers = cluster.watchers_of(id);
        assert_eq!(watchers.len(), WATCHED_PER_NODE, "node {id}: {watchers:?}");
        assert!(!watchers.contains(&id));
    }
    // Small clusters: everyone watches everyone else.
    let mut pair = Cluster::up(2);
    assert_eq!(pair.watchers_of(1), vec![2]);
}

#[test]
fn a_stopped_node_is_declared_down_by_a_watcher_within_down_after_and_two_ticks() {
    let mut cluster = Cluster::up(30);
    let stopped_at = cluster.now;
    cluster.nodes.insert(17, None);
    let events = cluster.run_for(3 * config().down_after_ms);
    let at = declared_at(&events, 17).expect("declared down");
    let detection = at - stopped_at;
    assert!(
        detection <= config().down_after_ms + 2 * cluster.tick(),
        "{detection} ms"
    );
    assert!(detection >= config().down_after_ms - config().heartbeat_interval_ms);
    // Every live node learnt it, and only the stopped node was declared.
    assert_eq!(
        cluster.table.get(NodeId(17)).unwrap().state,
        MemberState::Down
    );
    for id in (1..=30).filter(|id| *id != 17) {
        assert_ne!(
            cluster.table.get(NodeId(id)).unwrap().state,
            MemberState::Down
        );
        let m = cluster.membership(id);
        assert!(m
            .members()
            .any(|row| row.node_id == NodeId(17) && row.state == MemberState::Down));
    }
}

#[test]
fn a_node_with_a_longer_lease_is_declared_down_only_once_that_lease_ran_out() {
    let mut cluster = Cluster::up(6);
    // Node 7 runs a 6 s lease; the others' down_after is 4 s.
    let long = super::long_lease();
    cluster.nodes.insert(7, Some(super::node_with(7, &long)));
    cluster.run_for(config().heartbeat_interval_ms);
    let now = cluster.now;
    cluster.membership(7).set_state(now, MemberState::Up);
    cluster.run_for(2 * config().heartbeat_interval_ms);
    assert!(cluster
        .membership(1)
        .members()
        .any(|row| row.node_id == NodeId(7) && row.timers == Some(timers_of(&long))));
    let stopped_at = cluster.now;
    cluster.nodes.insert(7, None);
    let events = cluster.run_for(3 * long.down_after_ms);
    let at = declared_at(&events, 7).expect("declared down");
    let detection = at - stopped_at;
    // Its last heartbeat may have been read up to an interval before it
    // stopped; its lease ran from that heartbeat's send time.
    let wait = long.fence_after_ms + 2 * long.heartbeat_interval_ms;
    assert!(
        detection >= wait - config().heartbeat_interval_ms,
        "declared {detection} ms after it stopped, its lease is {} ms",
        long.fence_after_ms
    );
    assert!(detection <= wait + 2 * cluster.tick(), "{detection} ms");
}

impl Cluster {
    fn tick(&self) -> u64 {
        config().heartbeat_interval_ms / 2
    }
}

#[test]
fn when_a_node_and_all_its_watchers_stop_the_watchers_are_replaced_and_it_is_declared() {
    let mut cluster = Cluster::up(20);
    let victim = 9;
    let watchers = cluster.watchers_of(victim);
    let stopped_at = cluster.now;
    for id in watchers.iter().copied().chain([victim]) {
        cluster.nodes.insert(id, None);
    }
    let events = cluster.run_for(4 * config().down_after_ms);
    for id in watchers.iter().copied().chain([victim]) {
        assert_eq!(
            cluster.table.get(NodeId(id)).unwrap().state,
            MemberState::Down,
            "node {id}"
        );
    }
    // Nobody watched the victim until a dead watcher was declared and the
    // ring closed over it: detection takes at most two rounds.
    let at = declared_at(&events, victim).expect("declared down");
    assert!(
        at - stopped_at <= 2 * (config().down_after_ms + 2 * cluster.tick()),
        "{} ms",
        at - stopped_at
    );
    // Its watchers now are live nodes.
    let live: Vec<u64> = cluster
        .nodes
        .iter()
        .filter(|(_, m)| m.is_some())
        .map(|(id, _)| *id)
        .collect();
    for id in live {
        let watched = cluster.membership(id).watched().to_vec();
        assert!(watched
            .iter()
            .all(|node| cluster.table.get(*node).unwrap().state == MemberState::Up));
    }
}

#[test]
fn a_watcher_cut_off_from_the_store_declares_nobody_when_it_comes_back() {
    let mut cluster = Cluster::up(6);
    let watcher = 1;
    let watched = cluster.membership(watcher).watched().to_vec();
    assert!(!watched.is_empty());
    // The watcher's reads and writes all fail for twice down_after, while
    // everyone else heartbeats.
    let mut cut = cluster
        .nodes
        .insert(watcher, None)
        .flatten()
        .expect("running");
    let end = cluster.now + 2 * config().down_after_ms;
    while cluster.now < end {
        cluster.now += cluster.tick();
        cluster.step();
        let now = cluster.now;
        cut.on_tick(now);
        for action in cut.take_actions() {
            match action {
                Action::Poll { .. } => cut.on_poll_failed(),
                Action::List { .. } => cut.on_list_failed(),
                Action::Write { tag, write } => {
                    cut.on_written(now, tag, &write, Err(MemberOpError::CutOff))
                }
                Action::Delete { node, .. } => {
                    cut.on_deleted(now, node, Err(MemberOpError::CutOff))
                }
            }
        }
    }
    // Back: it reads rows that moved meanwhile, and declares none of them.
    cluster.nodes.insert(watcher, Some(cut));
    let events = cluster.run_for(config().down_after_ms);
    for node in watched {
        assert_eq!(declared_at(&events, node.0), None, "{node:?}: {events:?}");
    }
    // Its own lease lapsed meanwhile (nobody declared it: it was not
    // stopped, only its store was unreachable; its watchers did declare
    // it, which is the rule), and it serves again under some incarnation.
    assert!(cluster.membership(watcher).incarnation().is_some());
}

#[test]
fn a_store_outage_longer_than_down_after_fences_nobody_when_the_store_returns() {
    let mut cluster = Cluster::up(4);
    // Every read and write of every node fails for twice down_after: no
    // heartbeat applies, no poll is answered.
    let end = cluster.now + 2 * config().down_after_ms;
    while cluster.now < end {
        cluster.now += cluster.tick();
        let now = cluster.now;
        for m in cluster.nodes.values_mut().flatten() {
            m.on_tick(now);
            for action in m.take_actions() {
                match action {
                    Action::Poll { .. } => m.on_poll_failed(),
                    Action::List { .. } => m.on_list_failed(),
                    Action::Write { tag, write } => {
                        m.on_written(now, tag, &write, Err(MemberOpError::CutOff))
                    }
                    Action::Delete { node, .. } => {
                        m.on_deleted(now, node, Err(MemberOpError::CutOff))
                    }
                }
            }
        }
    }
    // Back: the rows stood still through the outage, but only because
    // nobody could write; each watcher's count starts again at its first
    // answered poll, and the heartbeats that now apply move every row.
    let events = cluster.run_for(config().down_after_ms);
    for node in 1..=4 {
        assert_eq!(declared_at(&events, node), None, "node {node}: {events:?}");
    }
    assert!(
        !events
            .iter()
            .any(|(_, _, event)| matches!(event, Event::Fenced { .. })),
        "{events:?}"
    );
    for node in 1..=4 {
        assert_eq!(
            cluster.table.get(NodeId(node)).unwrap().state,
            MemberState::Up
        );
    }
}

#[test]
fn a_poll_answered_late_restarts_the_watch() {
    let mut cluster = Cluster::up(2);
    // The store stalls for twice down_after: node 1's first poll reads the
    // rows as they stand, its next stays in flight and is answered only at
    // the end (late); every other read and every write fails meanwhile.
    let mut stalled_poll = None;
    let mut first_poll = true;
    let end = cluster.now + 2 * config().down_after_ms;
    while cluster.now < end {
        cluster.now += cluster.tick();
        let now = cluster.now;
        for (id, m) in cluster.nodes.iter_mut() {
            let m = m.as_mut().expect("running");
            m.on_tick(now);
            for action in m.take_actions() {
                match action {
                    Action::Poll { nodes } if *id == 1 && first_poll => {
                        first_poll = false;
                        m.on_polled(now, cluster.table.poll(&nodes));
                    }
                    Action::Poll { nodes } if *id == 1 && stalled_poll.is_none() => {
                        stalled_poll = Some(nodes)
                    }
                    Action::Poll { .. } => m.on_poll_failed(),
                    Action::List { .. } => m.on_list_failed(),
                    Action::Write { tag, write } => m.on_written(
                        now,
                        tag,
                        &write,
                        Err(MemberOpError::TimedOut { waited_ms: 0 }),
                    ),
                    Action::Delete { node, .. } => {
                        m.on_deleted(now, node, Err(MemberOpError::TimedOut { waited_ms: 0 }))
                    }
                }
            }
        }
    }
    let nodes = stalled_poll.expect("node 1 polled");
    let now = cluster.now;
    let poll = cluster.table.poll(&nodes);
    let late = cluster.membership(1);
    late.on_polled(now, poll);
    let declarations: Vec<Action> = late
        .take_actions()
        .into_iter()
        .filter(|action| {
            matches!(
                action,
                Action::Write {
                    tag: WriteTag::DeclareDown { .. },
                    ..
                }
            )
        })
        .collect();
    assert_eq!(declarations, vec![], "declared on a late answer");
    let events = cluster.run_for(config().down_after_ms);
    assert_eq!(declared_at(&events, 2), None, "{events:?}");
}

#[test]
fn a_frozen_watcher_declares_nobody_when_it_resumes() {
    let mut cluster = Cluster::up(6);
    let watcher = 2;
    let watched = cluster.membership(watcher).watched().to_vec();
    let frozen = cluster.nodes.insert(watcher, None).flatten();
    cluster.run_for(2 * config().down_after_ms);
    cluster.nodes.insert(watcher, frozen);
    let events = cluster.run_for(config().down_after_ms);
    for node in watched {
        assert_eq!(declared_at(&events, node.0), None, "{node:?}");
    }
}

#[test]
fn the_row_of_a_node_that_left_is_deleted_after_the_retention_and_its_id_rejoins_higher() {
    let mut cluster = Cluster::up(4);
    let leaver = 3;
    let now = cluster.now;
    cluster.membership(leaver).set_state(now, MemberState::Left);
    cluster.run_for(config().heartbeat_interval_ms);
    assert_eq!(
        cluster.table.get(NodeId(leaver)).unwrap().state,
        MemberState::Left
    );
    let left_row = cluster.table.get(NodeId(leaver)).unwrap();
    // A frozen copy of the process that left, holding its last version.
    let frozen = cluster
        .nodes
        .insert(leaver, None)
        .flatten()
        .expect("running");
    let early = cluster.run_for(config().left_retention_ms - 2 * config().heartbeat_interval_ms);
    assert!(!early
        .iter()
        .any(|(_, _, e)| matches!(e, Event::Removed { .. })));
    assert_eq!(cluster.table.list().len(), 4);
    let events = cluster.run_for(4 * config().heartbeat_interval_ms);
    assert_eq!(cluster.table.list().len(), 3, "deleted");
    for id in [1, 2, 4] {
        assert!(
            events.iter().any(|(_, node, e)| *node == id
                && *e
                    == Event::Removed {
                        node: NodeId(leaver)
                    }),
            "node {id} dropped it"
        );
        assert!(cluster
            .membership(id)
            .members()
            .all(|row| row.node_id != NodeId(leaver)));
    }
    // The id starts again: the next incarnation, on the tombstone's
    // version, never 1 again.
    cluster.nodes.insert(leaver, Some(node(leaver)));
    let events = cluster.run_for(config().heartbeat_interval_ms);
    assert!(
        events
            .iter()
            .any(|(_, id, e)| *id == leaver && *e == Event::Joined { incarnation: 2 }),
        "{events:?}"
    );
    let row = cluster.table.get(NodeId(leaver)).unwrap();
    assert_eq!(row.incarnation, 2);
    assert!(row.version > left_row.version);
    // The old process wakes: its heartbeat's CAS names a version the new
    // row never has, so it never applies.
    let mut frozen = frozen;
    let events = run(&mut frozen, &mut cluster.table, cluster.now);
    assert!(
        !events.iter().any(|e| matches!(e, Event::Lease { .. })),
        "{events:?}"
    );
    assert_eq!(cluster.table.get(NodeId(leaver)).unwrap().incarnation, 2);
}
