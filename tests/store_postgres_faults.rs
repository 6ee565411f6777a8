//! The PostgreSQL store against a real server that fails: stopped during a
//! stream of writes, a backend terminated in the middle of a batch, a write
//! blocked past its timeout. Each test runs its own throwaway server (so it
//! may kill it), and says it skipped when PostgreSQL is not installed.

use std::io::Write;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use routerd::config::{StoreBackend, StoreConfig};
use routerd::store::{
    open_postgres, CasVersion, GroupCommit, NodeId, RecordWrite, RouteVersion, Store,
    WriteCondition, WriteError, WriteOutcome,
};
use routerd::testing::postgres_server::{PgServer, PgServerError};
use wire::ObjectKey;

const DATABASE: &str = "routerd";

/// A server of this test's own with an empty `routerd` database, or None
/// (after saying why) when PostgreSQL is not installed.
fn server() -> Option<PgServer> {
    match PgServer::start() {
        Ok(server) => {
            server
                .psql("postgres", &format!("CREATE DATABASE {DATABASE}"))
                .expect("create database");
            Some(server)
        }
        Err(PgServerError::Unavailable(why)) => {
            println!("skipped: {why}");
            None
        }
        Err(error) => panic!("{error}"),
    }
}

fn config(server: &PgServer, request_timeout_ms: u64, pool_size: usize) -> StoreConfig {
    StoreConfig {
        backend: StoreBackend::Postgres,
        url: server.url(DATABASE),
        request_timeout_ms,
        pool_size,
        ..StoreConfig::default()
    }
}

fn key(id: u64) -> ObjectKey {
    ObjectKey::new(3, 0, id)
}

fn state(id: u64) -> Vec<u8> {
    id.to_le_bytes().repeat(2)
}

fn insert(id: u64) -> RecordWrite {
    RecordWrite {
        key: key(id),
        condition: WriteCondition::Absent,
        owner_node: NodeId(1),
        owner_incarnation: 1,
        route_version: RouteVersion(1),
        save_timepoint_ms: id,
        state: state(id),
    }
}

fn update(id: u64, expected: u64) -> RecordWrite {
    RecordWrite {
        condition: WriteCondition::CasEquals(CasVersion(expected)),
        owner_node: NodeId(2),
        ..insert(id)
    }
}

/// How one write was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Applied,
    /// An error: the write did not happen.
    Failed,
    Indeterminate,
}

/// Polls `sql` (one value) until it prints `want`, or panics after `limit`.
fn wait_for(server: &PgServer, sql: &str, want: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        if server.psql(DATABASE, sql).is_ok_and(|out| out == want) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "waited {limit:?} for `{sql}` = {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A psql session that holds the row locks of some keys until `release`.
struct RowLock {
    child: Child,
}

impl RowLock {
    /// Locks the rows of `ids` in one transaction of a `psql` session.
    fn take(server: &PgServer, ids: &[u64]) -> RowLock {
        let mut child = server
            .psql_command(DATABASE)
            .env("PGAPPNAME", "routerd-test-lock")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("psql");
        let stdin = child.stdin.as_mut().expect("psql stdin");
        let ids = ids
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            stdin,
            "BEGIN; SELECT 1 FROM routerd_routes WHERE type_id = 3 AND zone_id = 0 \
             AND object_id IN ({ids}) FOR UPDATE;"
        )
        .expect("lock statement");
        stdin.flush().expect("flush");
        // Idle in its transaction after the locking statement, not merely
        // after `BEGIN` (psql sends them one after the other): a writer
        // started in between could take the rows first.
        wait_for(
            server,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = \
             'routerd-test-lock' AND state = 'idle in transaction' \
             AND query LIKE '%FOR UPDATE%'",
            "1",
            Duration::from_secs(10),
        );
        RowLock { child }
    }

    fn release(mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            drop(writeln!(stdin, "ROLLBACK;"));
        }
        drop(self.child.wait());
    }
}

/// Every answered write of a stream, by id.
type Answers = Arc<Mutex<Vec<(u64, Answer)>>>;

/// Writer `writer` of `writers` inserts ids `writer, writer + writers, ...`
/// until `stop`; every call must answer within `bound`.
fn writer(store: Store, writer: u64, writers: u64, answers: Answers, stop: Arc<AtomicBool>) {
    let bound = Duration::from_millis(store_timeout_ms() + 3000);
    let mut id = writer;
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        let answer = match block_on(store.write(insert(id))) {
            Ok(WriteOutcome::Applied(version)) => {
                assert_eq!(version, CasVersion(1));
                Answer::Applied
            }
            Ok(WriteOutcome::Indeterminate) => Answer::Indeterminate,
            Ok(WriteOutcome::Conflict(record)) => panic!("fresh id {id} conflicted: {record:?}"),
            Err(WriteError::Backend(_) | WriteError::Overloaded) => Answer::Failed,
            Err(error) => panic!("write {id}: {error}"),
        };
        let elapsed = started.elapsed();
        assert!(elapsed < bound, "write {id} took {elapsed:?}");
        answers.lock().expect("answers").push((id, answer));
        if answer != Answer::Applied {
            // The server is down: do not spin through ids.
            std::thread::sleep(Duration::from_millis(20));
        }
        id += writers;
    }
}

fn store_timeout_ms() -> u64 {
    2000
}

fn applied_count(answers: &Answers) -> usize {
    let answers = answers.lock().expect("answers");
    answers
        .iter()
        .filter(|(_, a)| *a == Answer::Applied)
        .count()
}

fn wait_applied(answers: &Answers, count: usize, limit: Duration) {
    let started = Instant::now();
    while applied_count(answers) < count {
        assert!(
            started.elapsed() < limit,
            "only {} writes applied within {limit:?}",
            applied_count(answers)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The server stops (`-m immediate`: every connection cut, no checkpoint)
/// during a stream of acknowledged writes and starts again. Meanwhile the
/// store answers errors or Indeterminate, each within its timeout, and
/// never panics; afterwards it reconnects by itself. Every write reported
/// Applied is there, and no write reported failed is.
#[test]
fn server_stopped_during_a_stream_of_writes_loses_no_acknowledged_write() {
    let Some(server) = server() else { return };
    const WRITERS: u64 = 4;
    let store =
        open_postgres(&config(&server, store_timeout_ms(), 2), GroupCommit::On).expect("open");
    let answers: Answers = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..WRITERS)
        .map(|index| {
            let (store, answers, stop) = (store.clone(), answers.clone(), stop.clone());
            std::thread::spawn(move || writer(store, index, WRITERS, answers, stop))
        })
        .collect();
    wait_applied(&answers, 200, Duration::from_secs(10));
    server.stop_immediate().expect("stop");
    let stopped_at = answers.lock().expect("answers").len();
    std::thread::sleep(Duration::from_millis(1500));
    server.start_again().expect("restart");
    let applied_before = applied_count(&answers);
    // Recovery is the store's own doing: no call tells it to reconnect.
    wait_applied(&answers, applied_before + 200, Duration::from_secs(15));
    stop.store(true, Ordering::Release);
    for thread in threads {
        thread.join().expect("writer panicked");
    }
    let answers = answers.lock().expect("answers").clone();
    let during: Vec<Answer> = answers[stopped_at..].iter().map(|(_, a)| *a).collect();
    assert!(
        during.iter().any(|answer| *answer != Answer::Applied),
        "no write failed while the server was down"
    );
    // A new store (new connections) reads what the server kept.
    let reader = open_postgres(&config(&server, 10_000, 2), GroupCommit::On).expect("reopen");
    let pending: Vec<_> = answers
        .iter()
        .filter(|(_, answer)| *answer != Answer::Indeterminate)
        .map(|(id, answer)| (*id, *answer, reader.load(key(*id))))
        .collect();
    let (mut applied, mut failed) = (0, 0);
    for (id, answer, load) in pending {
        let record = block_on(load).expect("load");
        match answer {
            Answer::Applied => {
                let record = record.unwrap_or_else(|| panic!("acknowledged write {id} lost"));
                assert_eq!(record.state, state(id));
                assert_eq!(record.cas_version, CasVersion(1));
                applied += 1;
            }
            Answer::Failed => {
                assert_eq!(record, None, "write {id} reported failed but happened");
                failed += 1;
            }
            Answer::Indeterminate => {}
        }
    }
    println!(
        "applied {applied}, failed {failed}, indeterminate {}",
        answers.len() - applied - failed
    );
}

/// A server-side `pg_terminate_backend` of the store's connection while a
/// batch waits inside its transaction (on a row lock another session holds)
/// answers every write of the batch Indeterminate; the next reads show
/// that none of it committed, and the store serves again by itself.
#[test]
fn a_backend_terminated_mid_batch_gives_indeterminate_and_the_next_read_tells_the_truth() {
    let Some(server) = server() else { return };
    let store = open_postgres(&config(&server, 10_000, 1), GroupCommit::On).expect("open");
    assert_eq!(
        block_on(store.write(insert(2))).expect("insert"),
        WriteOutcome::Applied(CasVersion(1))
    );
    let lock = RowLock::take(&server, &[2]);
    // Lock order is key order: insert 1 runs, update 2 waits on the lock,
    // insert 3 is queued behind it in the same transaction.
    let batch = store.write_batch(vec![insert(1), update(2, 1), insert(3)]);
    wait_for(
        &server,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'routerd' \
         AND wait_event_type = 'Lock'",
        "1",
        Duration::from_secs(10),
    );
    server
        .psql(
            DATABASE,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'routerd'",
        )
        .expect("terminate");
    let outcomes = block_on(batch).expect("batch answered");
    assert_eq!(outcomes, vec![WriteOutcome::Indeterminate; 3]);
    lock.release();
    assert_eq!(block_on(store.load(key(1))).expect("load"), None);
    assert_eq!(block_on(store.load(key(3))).expect("load"), None);
    let record = block_on(store.load(key(2))).expect("load").expect("record");
    assert_eq!(record.cas_version, CasVersion(1));
    assert_eq!(record.owner_node, NodeId(1));
    assert_eq!(
        block_on(store.write(update(2, 1))).expect("update after reconnect"),
        WriteOutcome::Applied(CasVersion(2))
    );
}

/// A write blocked past `request_timeout_ms` is answered Indeterminate at
/// its deadline, not when the server gets to it; the store terminates
/// that connection's backend, so the blocked write never happens.
#[test]
fn a_write_blocked_past_its_timeout_is_indeterminate_on_time_and_never_happens() {
    let Some(server) = server() else { return };
    let store = open_postgres(&config(&server, 1000, 2), GroupCommit::On).expect("open");
    assert_eq!(
        block_on(store.write(insert(5))).expect("insert"),
        WriteOutcome::Applied(CasVersion(1))
    );
    let lock = RowLock::take(&server, &[5]);
    let started = Instant::now();
    let outcome = block_on(store.write(update(5, 1))).expect("answered");
    let elapsed = started.elapsed();
    assert_eq!(outcome, WriteOutcome::Indeterminate);
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(3000), "{elapsed:?}");
    // Another write on another key is not held up meanwhile.
    assert_eq!(
        block_on(store.write(insert(6))).expect("insert"),
        WriteOutcome::Applied(CasVersion(1))
    );
    lock.release();
    let record = block_on(store.load(key(5))).expect("load").expect("record");
    assert_eq!(
        record.cas_version,
        CasVersion(1),
        "the timed-out write happened"
    );
}

/// The server's `statement_timeout` starts when a statement arrives, not
/// when its request was made, so a write that first waited for a
/// connection is still waiting on the server when the store answers it
/// timed out. Dropping the connection does not stop it (the server holds
/// the pipeline, COMMIT included); the write must still never happen when
/// its row is unlocked right after that answer.
#[test]
fn a_timed_out_write_that_waited_for_a_connection_never_happens() {
    let Some(server) = server() else { return };
    let store = open_postgres(&config(&server, 1000, 1), GroupCommit::On).expect("open");
    for id in [7, 8] {
        assert_eq!(
            block_on(store.write(insert(id))).expect("insert"),
            WriteOutcome::Applied(CasVersion(1))
        );
    }
    let lock = RowLock::take(&server, &[7, 8]);
    // The first write holds the only connection until its deadline.
    let first = {
        let store = store.clone();
        std::thread::spawn(move || block_on(store.write(update(7, 1))))
    };
    std::thread::sleep(Duration::from_millis(600));
    // The second is made 400 ms before the first's deadline and reaches
    // the server only once the first was given up, about 600 ms before
    // its own deadline.
    let outcome = block_on(store.write(update(8, 1))).expect("answered");
    lock.release();
    assert_eq!(outcome, WriteOutcome::Indeterminate);
    assert_eq!(
        first.join().expect("first writer").expect("answered"),
        WriteOutcome::Indeterminate
    );
    // Time for a write that survived to take the freed lock and commit.
    std::thread::sleep(Duration::from_millis(500));
    for id in [7, 8] {
        let record = block_on(store.load(key(id)))
            .expect("load")
            .expect("record");
        assert_eq!(
            record.cas_version,
            CasVersion(1),
            "timed-out write {id} happened"
        );
    }
}

/// Writes `insert(id)` again until it applies, for at most `limit`; how
/// long that took.
fn write_until_applied(store: &Store, id: u64, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let answer = block_on(store.write(insert(id)));
        if matches!(answer, Ok(WriteOutcome::Applied(_))) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "no write applied within {limit:?}: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// After a failover the server a reconnect reaches may be a standby (here,
/// a database whose new sessions are read-only): the store keeps no
/// connection to it, whose every write would be refused, and writes again
/// within a few seconds of a server taking them.
#[test]
fn a_reconnect_reaches_only_a_server_that_takes_writes() {
    let Some(server) = server() else { return };
    let store = open_postgres(&config(&server, 1000, 1), GroupCommit::On).expect("open");
    write_until_applied(&store, 40, Duration::ZERO);
    let sql = |statement: &str| server.psql("postgres", statement).expect(statement);
    sql("ALTER DATABASE routerd SET default_transaction_read_only = on");
    sql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = 'routerd'",
    );
    std::thread::sleep(Duration::from_millis(300));
    for id in 41..45 {
        match block_on(store.write(insert(id))) {
            Ok(WriteOutcome::Indeterminate) => {}
            Err(WriteError::Backend(error)) => assert!(
                !error.to_string().contains("25006"),
                "a write was sent on a read-only session: {error}"
            ),
            other => panic!("write {id} on a read-only server: {other:?}"),
        }
    }
    sql("ALTER DATABASE routerd RESET default_transaction_read_only");
    let took = write_until_applied(&store, 45, Duration::from_secs(5));
    println!("writes applied again {took:?} after the server took them");
}

/// A live connection whose server stops taking writes (a primary made
/// read-only) has each write refused with SQLSTATE 25006 for good: the
/// store drops it, and its next connection (to a server that takes
/// writes) applies them.
#[test]
fn a_connection_that_turned_read_only_is_replaced() {
    let Some(server) = server() else { return };
    let store = open_postgres(&config(&server, 1000, 1), GroupCommit::On).expect("open");
    write_until_applied(&store, 50, Duration::ZERO);
    let sql = |statement: &str| server.psql("postgres", statement).expect(statement);
    // The open sessions turn read-only at the reload; new ones do not.
    sql("ALTER SYSTEM SET default_transaction_read_only = on");
    sql("ALTER DATABASE routerd SET default_transaction_read_only = off");
    sql("SELECT pg_reload_conf()");
    std::thread::sleep(Duration::from_millis(500));
    let refused = block_on(store.write(insert(51)));
    assert!(
        matches!(&refused, Err(WriteError::Backend(error)) if error.to_string().contains("25006")),
        "{refused:?}"
    );
    let took = write_until_applied(&store, 52, Duration::from_secs(5));
    println!("a write applied {took:?} after the refusal");
}
