//! One set of behaviours every store backend must show. Memory and SQLite
//! always run; PostgreSQL runs when `ROUTERD_POSTGRES_URL` names a database
//! (CI starts a server and sets it), Scylla when `ROUTERD_SCYLLA_NODES`
//! names a cluster (comma-separated `host:port`); each otherwise prints why
//! it skipped.

use std::sync::{Arc, Barrier};
use std::time::{SystemTime, UNIX_EPOCH};

use futures_lite::future::block_on;
use routerd::config::{StoreBackend, StoreConfig};
use routerd::metrics::{ErrorKind, ErrorOp, StoreProbe};
use routerd::store::{
    open_memory, open_postgres, open_scylla, open_sqlite, AdvertisedActor, CasVersion, GroupCommit,
    MemberCondition, MemberOutcome, MemberRow, MemberState, MemberTimers, MemberVersion,
    MemberWrite, NodeId, RecordWrite, RouteRecord, RouteVersion, Store, TableVersion,
    WriteCondition, WriteError, WriteOutcome, MEMBERS_PAGE_MAX,
};
use wire::ObjectKey;

/// A backend under test: `open` makes a new, independent handle (a new
/// connection or session) on the same storage.
struct Fixture {
    open: Box<dyn Fn() -> Store>,
    config: StoreConfig,
    /// Added to object ids so runs against a persistent cluster never meet
    /// records of an earlier run.
    id_base: u64,
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    fn key(&self, type_id: u32, id: u64) -> ObjectKey {
        ObjectKey::new(type_id, 1, self.id_base + id)
    }
}

fn memory() -> Fixture {
    let config = StoreConfig::default();
    let (store, _faults) = open_memory(&config);
    Fixture {
        open: Box::new(move || store.clone()),
        config,
        id_base: 0,
        _dir: None,
    }
}

fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let config = StoreConfig::default();
    let open_config = config.clone();
    Fixture {
        open: Box::new(move || {
            open_sqlite(&path, &open_config, GroupCommit::On).expect("open sqlite store")
        }),
        config,
        id_base: 0,
        _dir: Some(dir),
    }
}

fn scylla() -> Option<Fixture> {
    let Ok(nodes) = std::env::var("ROUTERD_SCYLLA_NODES") else {
        println!("skipped: set ROUTERD_SCYLLA_NODES=host:port[,host:port] to run against Scylla");
        return None;
    };
    let config = StoreConfig {
        nodes: nodes
            .split(',')
            .map(|node| node.trim().to_string())
            .collect(),
        keyspace: "routerd_conformance".to_string(),
        ..StoreConfig::default()
    };
    let open_config = config.clone();
    Some(Fixture {
        open: Box::new(move || open_scylla(&open_config).expect("open scylla store")),
        config,
        id_base: now_ms() * 1000,
        _dir: None,
    })
}

fn postgres() -> Option<Fixture> {
    let Ok(url) = std::env::var("ROUTERD_POSTGRES_URL") else {
        println!(
            "skipped: set ROUTERD_POSTGRES_URL=postgresql://user@host:port/db to run against \
             PostgreSQL"
        );
        return None;
    };
    let config = StoreConfig {
        backend: StoreBackend::Postgres,
        url,
        ..StoreConfig::default()
    };
    let open_config = config.clone();
    Some(Fixture {
        open: Box::new(move || {
            open_postgres(&open_config, GroupCommit::On).expect("open postgres store")
        }),
        config,
        // The database outlives the run, like a Scylla cluster.
        id_base: now_ms() * 1000,
        _dir: None,
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

fn insert(key: ObjectKey, owner: u64, state: Vec<u8>) -> RecordWrite {
    RecordWrite {
        key,
        condition: WriteCondition::Absent,
        owner_node: NodeId(owner),
        owner_incarnation: 1,
        route_version: RouteVersion(1),
        save_timepoint_ms: 1000,
        state,
    }
}

fn update(key: ObjectKey, expected: u64, owner: u64, route_version: u64) -> RecordWrite {
    RecordWrite {
        key,
        condition: WriteCondition::CasEquals(CasVersion(expected)),
        owner_node: NodeId(owner),
        // Distinct from every other field, so a swapped column shows.
        owner_incarnation: 40 + expected,
        route_version: RouteVersion(route_version),
        save_timepoint_ms: 2000 + expected,
        state: vec![expected as u8; 3],
    }
}

/// Many writers on several handles race insert-if-absent on each key:
/// exactly one wins, and every loser is shown the winner's record.
fn insert_race_has_one_winner(fixture: &Fixture) {
    const WRITERS: usize = 16;
    const KEYS: u64 = 8;
    let stores: Vec<Store> = (0..2).map(|_| (fixture.open)()).collect();
    let barrier = Arc::new(Barrier::new(WRITERS));
    let keys: Vec<ObjectKey> = (0..KEYS).map(|id| fixture.key(1, id)).collect();
    let threads: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let store = stores[writer % stores.len()].clone();
            let barrier = barrier.clone();
            let keys = keys.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let owner = writer as u64 + 1;
                // Submit every key before awaiting any, so requests of all
                // writers interleave in the store's queue.
                let pending: Vec<_> = keys
                    .iter()
                    .map(|key| store.write(insert(*key, owner, vec![owner as u8])))
                    .collect();
                pending
                    .into_iter()
                    .map(|future| block_on(future).expect("insert answered"))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<Vec<WriteOutcome>> = threads
        .into_iter()
        .map(|thread| thread.join().expect("writer thread"))
        .collect();
    for (index, key) in keys.iter().enumerate() {
        let winners: Vec<u64> = results
            .iter()
            .enumerate()
            .filter(|(_, outcomes)| outcomes[index] == WriteOutcome::Applied(CasVersion(1)))
            .map(|(writer, _)| writer as u64 + 1)
            .collect();
        assert_eq!(winners.len(), 1, "{key:?}: winners {winners:?}");
        let winner = NodeId(winners[0]);
        for outcomes in &results {
            match &outcomes[index] {
                WriteOutcome::Applied(version) => assert_eq!(*version, CasVersion(1)),
                WriteOutcome::Conflict(Some(record)) => {
                    assert_eq!(record.owner_node, winner);
                    assert_eq!(record.cas_version, CasVersion(1));
                }
                other => panic!("{key:?}: loser saw {other:?}"),
            }
        }
        let stored = block_on(stores[1].load(*key))
            .expect("load")
            .expect("record");
        assert_eq!(stored.owner_node, winner);
        assert_eq!(stored.state, vec![winners[0] as u8]);
    }
}

/// An update with a stale CAS version is refused and shown the record as it
/// stands; an update of a missing record is refused with none.
fn stale_cas_is_rejected_with_the_current_record(fixture: &Fixture) {
    let store = (fixture.open)();
    let key = fixture.key(2, 1);
    let applied = block_on(store.write(insert(key, 1, vec![1]))).expect("insert");
    assert_eq!(applied, WriteOutcome::Applied(CasVersion(1)));
    let applied = block_on(store.write(update(key, 1, 2, 2))).expect("update");
    assert_eq!(applied, WriteOutcome::Applied(CasVersion(2)));
    let stale = block_on(store.write(update(key, 1, 3, 3))).expect("stale update");
    let expected = RouteRecord {
        key,
        owner_node: NodeId(2),
        owner_incarnation: 41,
        route_version: RouteVersion(2),
        save_timepoint_ms: 2001,
        cas_version: CasVersion(2),
        state: vec![1; 3],
    };
    assert_eq!(stale, WriteOutcome::Conflict(Some(expected.clone())));
    assert_eq!(block_on(store.load(key)).expect("load"), Some(expected));
    let missing = block_on(store.write(update(fixture.key(2, 2), 1, 1, 1))).expect("update");
    assert_eq!(missing, WriteOutcome::Conflict(None));
    assert_eq!(block_on(store.load(fixture.key(2, 2))).expect("load"), None);
}

/// The route version is whatever the writer says; the CAS version is the
/// store's own counter. Neither moves the other.
fn route_and_cas_versions_are_distinct(fixture: &Fixture) {
    let store = (fixture.open)();
    let key = fixture.key(3, 1);
    let mut write = insert(key, 1, vec![]);
    write.route_version = RouteVersion(100);
    assert_eq!(
        block_on(store.write(write)).expect("insert"),
        WriteOutcome::Applied(CasVersion(1))
    );
    for expected in 1..=2 {
        assert_eq!(
            block_on(store.write(update(key, expected, 1, 100))).expect("update"),
            WriteOutcome::Applied(CasVersion(expected + 1))
        );
    }
    let record = block_on(store.load(key)).expect("load").expect("record");
    assert_eq!(record.route_version, RouteVersion(100));
    assert_eq!(record.cas_version, CasVersion(3));
    // A route version may also go far ahead of the CAS version and back is
    // never asked of the store: the CAS version alone guards the write.
    assert_eq!(
        block_on(store.write(update(key, 3, 1, 7))).expect("update"),
        WriteOutcome::Applied(CasVersion(4))
    );
    let record = block_on(store.load(key)).expect("load").expect("record");
    assert_eq!(record.route_version, RouteVersion(7));
    assert_eq!(record.cas_version, CasVersion(4));
}

/// A batch keeps each write's own condition and outcome, in order.
fn batch_save(fixture: &Fixture) {
    let store = (fixture.open)();
    let existing = fixture.key(4, 0);
    assert_eq!(
        block_on(store.write(insert(existing, 9, vec![9]))).expect("insert"),
        WriteOutcome::Applied(CasVersion(1))
    );
    let mut writes: Vec<RecordWrite> = (1..=10)
        .map(|id| insert(fixture.key(4, id), 1, vec![id as u8]))
        .collect();
    writes.push(insert(existing, 1, vec![1]));
    writes.push(update(existing, 1, 1, 5));
    let outcomes = block_on(store.write_batch(writes)).expect("batch");
    assert_eq!(outcomes.len(), 12);
    for outcome in &outcomes[..10] {
        assert_eq!(*outcome, WriteOutcome::Applied(CasVersion(1)));
    }
    match &outcomes[10] {
        WriteOutcome::Conflict(Some(record)) => assert_eq!(record.owner_node, NodeId(9)),
        other => panic!("insert over an existing record gave {other:?}"),
    }
    assert_eq!(outcomes[11], WriteOutcome::Applied(CasVersion(2)));
    for id in 1..=10 {
        let record = block_on(store.load(fixture.key(4, id))).expect("load");
        assert_eq!(record.map(|record| record.state), Some(vec![id as u8]));
    }
    let too_many: Vec<RecordWrite> = (0..=store.batch_max() as u64)
        .map(|id| insert(fixture.key(4, 100 + id), 1, vec![]))
        .collect();
    assert!(matches!(
        block_on(store.write_batch(too_many)),
        Err(WriteError::BatchTooLarge { .. })
    ));
    assert_eq!(
        block_on(store.load(fixture.key(4, 100))).expect("load"),
        None
    );
}

/// Writers on two handles advance shared keys by CAS in batches that name
/// the keys in opposite orders: every write is answered (no deadlock, no
/// error), an applied write moved its key by exactly one version, a refusal
/// shows a newer record, and each key ends at one version per applied
/// write.
fn contended_cas_batches_apply_each_write_once(fixture: &Fixture) {
    const WRITERS: usize = 8;
    const KEYS: u64 = 6;
    const ROUNDS: usize = 40;
    const PER_BATCH: u64 = 3;
    let stores: Vec<Store> = (0..2).map(|_| (fixture.open)()).collect();
    let keys: Vec<ObjectKey> = (0..KEYS).map(|id| fixture.key(7, id)).collect();
    for key in &keys {
        assert_eq!(
            block_on(stores[0].write(insert(*key, 1, vec![]))).expect("insert"),
            WriteOutcome::Applied(CasVersion(1))
        );
    }
    let barrier = Arc::new(Barrier::new(WRITERS));
    let threads: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let store = stores[writer % stores.len()].clone();
            let barrier = barrier.clone();
            let keys = keys.clone();
            std::thread::spawn(move || {
                let mut known = vec![1u64; keys.len()];
                let mut applied = vec![0u64; keys.len()];
                barrier.wait();
                for round in 0..ROUNDS {
                    let start = (writer + round) as u64;
                    let mut chosen: Vec<usize> = (0..PER_BATCH)
                        .map(|offset| ((start + offset * 2) % KEYS) as usize)
                        .collect();
                    if writer % 2 == 1 {
                        chosen.reverse();
                    }
                    let writes = chosen
                        .iter()
                        .map(|&slot| update(keys[slot], known[slot], writer as u64, round as u64))
                        .collect();
                    let outcomes = block_on(store.write_batch(writes)).expect("batch answered");
                    for (&slot, outcome) in chosen.iter().zip(outcomes) {
                        match outcome {
                            WriteOutcome::Applied(version) => {
                                assert_eq!(version, CasVersion(known[slot] + 1));
                                known[slot] = version.0;
                                applied[slot] += 1;
                            }
                            WriteOutcome::Conflict(Some(record)) => {
                                assert!(record.cas_version.0 > known[slot], "{record:?}");
                                known[slot] = record.cas_version.0;
                            }
                            other => panic!("writer {writer} round {round}: {other:?}"),
                        }
                    }
                }
                applied
            })
        })
        .collect();
    let mut applied = vec![0u64; keys.len()];
    for thread in threads {
        for (total, own) in applied
            .iter_mut()
            .zip(thread.join().expect("writer thread"))
        {
            *total += own;
        }
    }
    for (key, applied) in keys.iter().zip(applied) {
        let record = block_on(stores[1].load(*key))
            .expect("load")
            .expect("record");
        assert_eq!(record.cas_version, CasVersion(1 + applied), "{key:?}");
    }
}

fn member(node: u64, incarnation: u64, heartbeat: u64) -> MemberRow {
    MemberRow {
        node_id: NodeId(node),
        incarnation,
        state: MemberState::Up,
        heartbeat,
        gateway: format!("127.0.0.1:{}", 7000 + node),
        admin: format!("127.0.0.1:{}", 9000 + node),
        cluster: vec![
            format!("127.0.0.1:{}", 8000 + node),
            "[::1]:8001".to_string(),
        ],
        core_count: 2,
        actors: vec![AdvertisedActor {
            actor_id: node * 10,
            actor_type: 2,
            msg_ids: vec![1, 2, 3],
            weight: 5,
        }],
        timers: Some(MemberTimers {
            heartbeat_interval_ms: 500,
            fence_after_ms: 2000 + node,
            down_after_ms: u64::MAX - node,
        }),
        version: MemberVersion(0),
    }
}

fn write_member(store: &Store, row: MemberRow, condition: MemberCondition) -> MemberOutcome {
    block_on(store.write_member(MemberWrite { row, condition })).expect("member write")
}

/// Membership rows are written under CAS on their version: an insert has
/// one winner, a stale version is refused with the row as it stands, two
/// handles racing for the next incarnation of one node get one winner, and
/// a row written by one handle is listed, whole, by another.
fn membership_and_incarnations(fixture: &Fixture) {
    let store = (fixture.open)();
    let other = (fixture.open)();
    let base = fixture.id_base + 1;
    let first = member(base, 1, 0);
    assert_eq!(
        write_member(&store, first.clone(), MemberCondition::Absent),
        MemberOutcome::Applied(MemberVersion(1))
    );
    let stored = MemberRow {
        version: MemberVersion(1),
        ..first.clone()
    };
    assert_eq!(
        write_member(&other, member(base, 9, 0), MemberCondition::Absent),
        MemberOutcome::Conflict(Some(stored.clone()))
    );
    // Heartbeats: each conditioned on the version the writer last saw.
    let mut beat = member(base, 1, 1);
    beat.state = MemberState::Draining;
    let condition = MemberCondition::VersionEquals(MemberVersion(1));
    assert_eq!(
        write_member(&store, beat.clone(), condition),
        MemberOutcome::Applied(MemberVersion(2))
    );
    let current = MemberRow {
        version: MemberVersion(2),
        ..beat
    };
    assert_eq!(
        write_member(&other, member(base, 1, 5), condition),
        MemberOutcome::Conflict(Some(current.clone()))
    );
    // Two starts race for incarnation 2 on the version both read.
    let racers: Vec<MemberOutcome> = [&store, &other]
        .iter()
        .map(|handle| {
            let next = MemberCondition::VersionEquals(MemberVersion(2));
            write_member(handle, member(base, 2, 0), next)
        })
        .collect();
    let winners = racers
        .iter()
        .filter(|outcome| matches!(outcome, MemberOutcome::Applied(_)))
        .count();
    assert_eq!(winners, 1, "{racers:?}");
    // An update of a node without a row is refused without one.
    assert_eq!(
        write_member(&store, member(base + 1, 1, 0), condition),
        MemberOutcome::Conflict(None)
    );
    write_member(&store, member(base + 2, 4, 7), MemberCondition::Absent);
    let mine: Vec<MemberRow> = list_all(&other, TableVersion(0))
        .0
        .into_iter()
        .filter(|row| row.node_id.0 >= base && row.node_id.0 <= base + 2)
        .collect();
    let expected = vec![
        MemberRow {
            version: MemberVersion(3),
            ..member(base, 2, 0)
        },
        MemberRow {
            version: MemberVersion(1),
            ..member(base + 2, 4, 7)
        },
    ];
    assert_eq!(mine, expected);
}

/// Every page of a listing since `since`: the rows and the deleted ids.
fn list_all(store: &Store, since: TableVersion) -> (Vec<MemberRow>, Vec<NodeId>) {
    let (mut rows, mut deleted) = (Vec::new(), Vec::new());
    let mut after = NodeId(0);
    loop {
        let page = block_on(store.list_members(since, after)).expect("list");
        assert!(page.rows.len() + page.deleted.len() <= MEMBERS_PAGE_MAX);
        let last = page.last();
        rows.extend(page.rows);
        deleted.extend(page.deleted);
        match last.filter(|_| page.more) {
            Some(last) => after = last,
            None => return (rows, deleted),
        }
    }
}

fn table_version(store: &Store) -> TableVersion {
    block_on(store.poll_members(Vec::new()))
        .expect("poll")
        .version
}

/// The table version moves with every membership change and never with a
/// heartbeat, in the same write: a listing since a version holds exactly
/// the rows changed after it. (Other tests may move the version of a
/// shared store meanwhile, so only this test's rows are judged.)
fn membership_version_moves_with_changes_only(fixture: &Fixture) {
    let store = (fixture.open)();
    let base = fixture.id_base + 11;
    let before = table_version(&store);
    let first = member(base, 1, 0);
    assert_eq!(
        write_member(&store, first.clone(), MemberCondition::Absent),
        MemberOutcome::Applied(MemberVersion(1))
    );
    let inserted = table_version(&store);
    assert!(inserted > before, "an insert moves the version");
    let mine = |rows: Vec<MemberRow>| -> Vec<MemberRow> {
        rows.into_iter()
            .filter(|row| row.node_id.0 == base)
            .collect()
    };
    assert_eq!(mine(list_all(&store, before).0).len(), 1);
    for beat in 1..=3 {
        let condition = MemberCondition::VersionEquals(MemberVersion(beat));
        write_member(&store, member(base, 1, beat), condition);
    }
    assert!(
        mine(list_all(&store, inserted).0).is_empty(),
        "heartbeats are not changes"
    );
    let polled = block_on(store.poll_members(vec![NodeId(base)])).expect("poll");
    assert_eq!(polled.rows.len(), 1);
    assert_eq!(polled.rows[0].heartbeat, 3);
    assert_eq!(polled.rows[0].version, MemberVersion(4));
    let mut draining = member(base, 1, 4);
    draining.state = MemberState::Draining;
    let condition = MemberCondition::VersionEquals(MemberVersion(4));
    write_member(&store, draining, condition);
    assert!(table_version(&store) > inserted);
    let changed = mine(list_all(&store, inserted).0);
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].state, MemberState::Draining);
    // An address is a change too; a refused write changes nothing.
    let seen = table_version(&store);
    let mut moved = member(base, 1, 5);
    moved.state = MemberState::Draining;
    moved.gateway = "127.0.0.9:1".to_string();
    write_member(
        &store,
        moved,
        MemberCondition::VersionEquals(MemberVersion(5)),
    );
    assert_eq!(mine(list_all(&store, seen).0).len(), 1);
    let seen = table_version(&store);
    write_member(
        &store,
        member(base, 7, 0),
        MemberCondition::VersionEquals(MemberVersion(1)),
    );
    assert!(mine(list_all(&store, seen).0).is_empty());
    // So are the timers (a restart with another config), and a row written
    // without them reads back without them.
    let seen = table_version(&store);
    let mut retimed = member(base, 1, 6);
    retimed.state = MemberState::Draining;
    retimed.gateway = "127.0.0.9:1".to_string();
    retimed.timers = None;
    write_member(
        &store,
        retimed.clone(),
        MemberCondition::VersionEquals(MemberVersion(6)),
    );
    let changed = mine(list_all(&store, seen).0);
    assert_eq!(
        changed,
        vec![MemberRow {
            version: MemberVersion(7),
            ..retimed
        }]
    );
}

/// A row that left is deleted by CAS on its version; its tombstone keeps
/// the incarnation and version, so a stale CAS and an insert as if the id
/// were new are refused, and the next start takes a higher incarnation.
fn a_deleted_member_leaves_a_tombstone(fixture: &Fixture) {
    let store = (fixture.open)();
    let base = fixture.id_base + 21;
    write_member(&store, member(base, 1, 0), MemberCondition::Absent);
    let up = MemberCondition::VersionEquals(MemberVersion(1));
    assert!(
        matches!(
            block_on(store.delete_member(NodeId(base), MemberVersion(1))).expect("delete"),
            MemberOutcome::Conflict(Some(_))
        ),
        "only a row that left is deleted"
    );
    let mut left = member(base, 1, 1);
    left.state = MemberState::Left;
    write_member(&store, left, up);
    assert!(
        matches!(
            block_on(store.delete_member(NodeId(base), MemberVersion(1))).expect("delete"),
            MemberOutcome::Conflict(Some(_))
        ),
        "only at the version named"
    );
    let before = table_version(&store);
    assert_eq!(
        block_on(store.delete_member(NodeId(base), MemberVersion(2))).expect("delete"),
        MemberOutcome::Applied(MemberVersion(3))
    );
    assert!(table_version(&store) > before);
    let (rows, deleted) = list_all(&store, before);
    assert!(rows.iter().all(|row| row.node_id != NodeId(base)));
    assert!(deleted.contains(&NodeId(base)));
    let (rows, deleted) = list_all(&store, TableVersion(0));
    assert!(rows.iter().all(|row| row.node_id != NodeId(base)));
    assert!(deleted.is_empty(), "a full listing skips tombstones");
    let own = block_on(store.poll_members(vec![NodeId(base)]))
        .expect("poll")
        .rows;
    assert_eq!(own.len(), 1);
    assert_eq!(
        (own[0].state, own[0].incarnation, own[0].version),
        (MemberState::Left, 1, MemberVersion(3))
    );
    assert_eq!(own[0].timers, None, "a tombstone keeps no timers");
    for stale in [1, 2] {
        let condition = MemberCondition::VersionEquals(MemberVersion(stale));
        assert!(matches!(
            write_member(&store, member(base, 1, 9), condition),
            MemberOutcome::Conflict(Some(_))
        ));
    }
    assert!(matches!(
        write_member(&store, member(base, 1, 0), MemberCondition::Absent),
        MemberOutcome::Conflict(Some(_))
    ));
    let rejoin = MemberCondition::VersionEquals(MemberVersion(3));
    assert_eq!(
        write_member(&store, member(base, 2, 0), rejoin),
        MemberOutcome::Applied(MemberVersion(4))
    );
    let rows = list_all(&store, TableVersion(0)).0;
    let back: Vec<&MemberRow> = rows
        .iter()
        .filter(|row| row.node_id == NodeId(base))
        .collect();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].incarnation, 2);
    assert_eq!(
        back[0].gateway,
        member(base, 2, 0).gateway,
        "the row is whole again"
    );
}

/// Listings are paged by node id, `MEMBERS_PAGE_MAX` entries a page, and
/// hold every member: there is no cap.
fn members_are_listed_in_pages_without_a_cap(fixture: &Fixture) {
    let store = (fixture.open)();
    let base = fixture.id_base + 1000;
    let count = MEMBERS_PAGE_MAX as u64 + 3;
    for node in base..base + count {
        write_member(&store, member(node, 1, 0), MemberCondition::Absent);
    }
    let rows = list_all(&store, TableVersion(0)).0;
    let mine: Vec<u64> = rows
        .iter()
        .map(|row| row.node_id.0)
        .filter(|node| (base..base + count).contains(node))
        .collect();
    assert_eq!(mine, (base..base + count).collect::<Vec<_>>());
    let first = block_on(store.list_members(TableVersion(0), NodeId(base - 1))).expect("page");
    assert_eq!(first.rows.len(), MEMBERS_PAGE_MAX);
    assert!(first.more);
}

/// A state blob of exactly `state_max_bytes` is stored whole; one byte
/// more is an error and writes nothing.
fn large_state_at_the_maximum(fixture: &Fixture) {
    let store = (fixture.open)();
    let max = fixture.config.state_max_bytes;
    let state: Vec<u8> = (0..max).map(|index| (index % 251) as u8).collect();
    let key = fixture.key(5, 1);
    assert_eq!(
        block_on(store.write(insert(key, 1, state.clone()))).expect("insert"),
        WriteOutcome::Applied(CasVersion(1))
    );
    let record = block_on(store.load(key)).expect("load").expect("record");
    assert_eq!(record.state.len(), max);
    assert!(record.state == state);
    let too_big = fixture.key(5, 2);
    match block_on(store.write(insert(too_big, 1, vec![0; max + 1]))) {
        Err(WriteError::StateTooLarge { len, max: limit }) => {
            assert_eq!(len, max + 1);
            assert_eq!(limit, max);
        }
        other => panic!("max + 1 bytes gave {other:?}"),
    }
    assert_eq!(block_on(store.load(too_big)).expect("load"), None);
    // Counted where an operator looks (routerd_store_errors_total{kind=
    // "too_large"}), and never taken for a failing store however often.
    for _ in 0..4 {
        let _ = block_on(store.write(insert(too_big, 1, vec![0; max + 1])));
    }
    let probe = store.probe();
    assert_eq!(probe.errors(ErrorOp::Write, ErrorKind::TooLarge), 5);
    assert_eq!(store.failing(), None);
}

/// A record written through one handle is read through another one opened
/// afterwards (for SQLite a second connection, for Scylla a second session,
/// for PostgreSQL a second pool).
fn written_by_one_read_by_another(fixture: &Fixture) {
    let key = fixture.key(6, 1);
    {
        let writer = (fixture.open)();
        assert_eq!(
            block_on(writer.write(insert(key, 4, vec![4, 4]))).expect("insert"),
            WriteOutcome::Applied(CasVersion(1))
        );
    }
    let reader = (fixture.open)();
    let record = block_on(reader.load(key)).expect("load").expect("record");
    assert_eq!(record.owner_node, NodeId(4));
    assert_eq!(record.state, vec![4, 4]);
}

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $test() { super::$test(&super::memory()) } )*
        }
        mod sqlite {
            $( #[test] fn $test() { super::$test(&super::sqlite()) } )*
        }
        mod scylla {
            $( #[test] fn $test() {
                if let Some(fixture) = super::scylla() {
                    super::$test(&fixture)
                }
            } )*
        }
        mod postgres {
            $( #[test] fn $test() {
                if let Some(fixture) = super::postgres() {
                    super::$test(&fixture)
                }
            } )*
        }
    };
}

conformance!(
    insert_race_has_one_winner,
    stale_cas_is_rejected_with_the_current_record,
    route_and_cas_versions_are_distinct,
    batch_save,
    contended_cas_batches_apply_each_write_once,
    membership_and_incarnations,
    membership_version_moves_with_changes_only,
    a_deleted_member_leaves_a_tombstone,
    members_are_listed_in_pages_without_a_cap,
    large_state_at_the_maximum,
    written_by_one_read_by_another,
);
