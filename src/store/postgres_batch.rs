//! One group commit on one PostgreSQL connection: every request the
//! dispatcher handed over, pipelined.
//!
//! Pipelining: each statement is handed to the driver in order before any
//! answer is awaited, so one round trip carries `BEGIN`, every conditional
//! write, `COMMIT` and the reads. The server runs them in order.
//!
//! Statements: consecutive route writes of one kind (inserts of absent
//! keys, or CAS updates) go as one multi-row statement, a run; a
//! membership write or deletion is a statement of its own (one call of a
//! function that also moves the table version: see `postgres_membership`). A run of updates is
//! preceded by a statement that locks its rows in key order.
//!
//! Transaction semantics (every write keeps its own condition and outcome):
//! - Writes run in lock order (membership rows, then routes, by key in the
//!   order PostgreSQL sorts the key columns), so two group transactions,
//!   of this process or another, never wait for each other in a cycle;
//!   writes of one key keep their request order. One exception: a
//!   membership change also locks the version row after its member row, so
//!   two batches that each change two members (only the benchmark's shared
//!   lane puts two membership writes in one batch) can wait in a cycle,
//!   which PostgreSQL breaks by failing one of them as a deadlock: a plain
//!   error, so every write of that batch fails, none applied. Runs keep that order:
//!   each run holds consecutive writes of the sorted list, and a run of
//!   updates locks its rows sorted before it writes them.
//! - A refused write must answer the record that refused it. It is read in
//!   the same transaction right after the refusal, which a pipelined read
//!   cannot do when a later write of the same batch changes that key; so
//!   the writes are cut into segments in which a key appears once, and a
//!   refusal is read before the next segment runs. Refusals of the last
//!   segment are read after `COMMIT`: nothing later in the batch touches
//!   their keys, so that read shows the current record.
//! - The transaction committed only if `BEGIN`, every statement and
//!   `COMMIT` answered without error: only then is a write `Applied`.
//! - A plain error on a live connection (see `postgres_sql`) aborts the
//!   transaction: every write of the batch fails with it, none applied.
//! - Anything else (a lost connection, a terminated backend, an error on
//!   `COMMIT`) leaves the commit unknown: every write is `Indeterminate`
//!   and the connection is dropped. This holds even where the position of
//!   the error would prove a rollback, because that proof would rest on
//!   which pending request a dying connection's last message is matched to.
//! - Reads (`load`, `poll_members`, `list_members`) run outside the transaction and
//!   answer for themselves.
//! - A batch of one write runs as one autocommit statement (no `BEGIN`):
//!   the same rules, one statement fewer.

use std::ops::Range;

use tokio_postgres::{Client, Row};

use super::bridge::{Done, Op, Request};
use super::error::BackendError;
use super::membership::{MemberOutcome, MemberVersion, MemberWrite};
use super::postgres_membership::{
    delete_member, function_answer, list_members, member_from_row, page_from_rows, poll_from_rows,
    poll_members, select_member, write_member,
};
use super::postgres_sql::{self as sql, is_plain_failure, key_values};
use super::postgres_statements::{
    applied_cas, insert_routes, lock_routes, pipeline, select_route, simple, update_routes,
    Pending, Reply, RouteColumns, Statements,
};
use super::record::NodeId;
use super::record::{RecordWrite, WriteCondition, WriteOutcome};

/// What a batch answers, one entry per request in order, and whether the
/// connection must be dropped (its state is unknown).
pub(crate) struct BatchResult {
    pub answers: Vec<Result<Done, BackendError>>,
    pub connection_suspect: bool,
}

/// The order in which writes take row locks; `Member` sorts first. A route
/// key is its column values (`key_values`), which sort as PostgreSQL sorts
/// them in `LOCK_ROUTES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LockKey {
    Member(u64),
    Route([i64; 3]),
}

#[derive(Clone, Copy)]
enum WriteRef<'a> {
    Route(&'a RecordWrite),
    Member(&'a MemberWrite),
    /// A deletion of a member row at a version.
    Delete(NodeId, MemberVersion),
}

/// One write of the batch and where its outcome goes.
struct Planned<'a> {
    lock: LockKey,
    write: WriteRef<'a>,
    request: usize,
    /// Position in the request's writes (0 for a membership write).
    index: usize,
}

/// A write's outcome, before it is folded into its request's answer.
#[derive(Clone)]
enum Outcome {
    Route(WriteOutcome),
    Member(MemberOutcome),
}

/// The writes of a batch's requests (by their ops, in request order),
/// sorted in lock order.
fn plan<'r>(ops: impl Iterator<Item = &'r Op>) -> Vec<Planned<'r>> {
    let mut planned = Vec::new();
    for (request, op) in ops.enumerate() {
        match op {
            Op::Write(writes) => {
                for (index, write) in writes.iter().enumerate() {
                    planned.push(Planned {
                        lock: LockKey::Route(key_values(write.key)),
                        write: WriteRef::Route(write),
                        request,
                        index,
                    });
                }
            }
            Op::WriteMember(write) => planned.push(Planned {
                lock: LockKey::Member(write.row.node_id.0),
                write: WriteRef::Member(write),
                request,
                index: 0,
            }),
            Op::DeleteMember(node, expected) => planned.push(Planned {
                lock: LockKey::Member(node.0),
                write: WriteRef::Delete(*node, *expected),
                request,
                index: 0,
            }),
            Op::Load(_) | Op::PollMembers(_) | Op::ListMembers { .. } => {}
        }
    }
    // Stable: writes of one key keep their request order.
    planned.sort_by_key(|planned| planned.lock);
    planned
}

/// Cuts `planned` (sorted) so that no key appears twice in one segment.
fn segments(planned: &[Planned<'_>]) -> Vec<std::ops::Range<usize>> {
    let mut segments = Vec::new();
    let mut start = 0;
    for index in 1..planned.len() {
        if planned[index].lock == planned[index - 1].lock {
            segments.push(start..index);
            start = index;
        }
    }
    if !planned.is_empty() {
        segments.push(start..planned.len());
    }
    segments
}

/// How the writes of the batch ended.
enum Commit {
    /// Committed: each write has its outcome.
    Committed(Vec<Option<Outcome>>),
    /// Certainly rolled back: none applied. `clean`: the connection is
    /// out of the transaction.
    RolledBack {
        error: tokio_postgres::Error,
        clean: bool,
    },
    /// May have committed or not.
    Unknown,
}

/// Runs `requests` on `client`. The caller bounds it in time; a batch cut
/// short by that bound is answered by the caller, and its connection
/// dropped.
pub(crate) async fn run(client: &Client, st: &Statements, requests: &[Request]) -> BatchResult {
    let planned = plan(requests.iter().map(|request| &request.op));
    let reads: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, request)| request.op.is_read())
        .map(|(index, _)| index)
        .collect();
    let (commit, read_replies) = run_writes(client, st, &planned, requests, &reads).await;
    let mut connection_suspect = match &commit {
        Commit::Unknown | Commit::RolledBack { clean: false, .. } => true,
        // A server that takes no writes: a new connection finds one that does.
        Commit::RolledBack { error, .. } => sql::is_read_only(error),
        Commit::Committed(_) => false,
    };
    let read_replies = match read_replies {
        Some(replies) => replies,
        None => {
            pipeline(
                reads
                    .iter()
                    .map(|&index| read(client, st, &requests[index]))
                    .collect(),
            )
            .await
        }
    };
    let mut answers: Vec<Option<Result<Done, BackendError>>> =
        requests.iter().map(|_| None).collect();
    for (&index, reply) in reads.iter().zip(read_replies) {
        if reply.error().is_some_and(|error| !is_plain_failure(error)) {
            connection_suspect = true;
        }
        answers[index] = Some(read_answer(&requests[index].op, reply));
    }
    fold_writes(commit, &planned, requests, &mut answers);
    let answers = answers
        .into_iter()
        .map(|answer| {
            // Every request is a read or has writes folded above.
            answer.unwrap_or(Err(BackendError::Corrupt(
                "postgres batch left a request unanswered",
            )))
        })
        .collect();
    BatchResult {
        answers,
        connection_suspect,
    }
}

fn read<'a>(client: &'a Client, st: &'a Statements, request: &'a Request) -> Pending<'a> {
    match &request.op {
        Op::Load(key) => select_route(client, st, *key),
        Op::PollMembers(nodes) => poll_members(client, st, nodes),
        Op::ListMembers { since, after } => list_members(client, st, *since, *after),
        // Only reads are read; a write here would be a planning bug.
        Op::Write(_) | Op::WriteMember(_) | Op::DeleteMember(..) => {
            Box::pin(async { Reply::Rows(Ok(Vec::new())) })
        }
    }
}

fn read_answer(op: &Op, reply: Reply) -> Result<Done, BackendError> {
    let rows = match reply {
        Reply::Rows(rows) => rows?,
        _ => return Err(BackendError::Corrupt("postgres read answered without rows")),
    };
    match op {
        Op::Load(key) => Ok(Done::Load(single_route(*key, &rows)?)),
        Op::PollMembers(_) => Ok(Done::Poll(poll_from_rows(&rows)?)),
        Op::ListMembers { .. } => Ok(Done::List(page_from_rows(&rows)?)),
        Op::Write(_) | Op::WriteMember(_) | Op::DeleteMember(..) => {
            Err(BackendError::Corrupt("a write answered as a read"))
        }
    }
}

fn single_route(
    key: wire::ObjectKey,
    rows: &[Row],
) -> Result<Option<super::record::RouteRecord>, BackendError> {
    match rows {
        [] => Ok(None),
        [row] => Ok(Some(sql::route_from_row(key, row)?)),
        _ => Err(BackendError::Corrupt("two route rows for one key")),
    }
}

/// One statement of a segment's writes.
enum Step<'p> {
    /// A membership write and its index in `planned`.
    Member(usize, &'p MemberWrite),
    /// A membership deletion and its index in `planned`.
    Delete(usize, NodeId, MemberVersion),
    /// Consecutive route writes of one kind: their range in `planned`, and
    /// their statement's columns (boxed: ten vectors).
    Routes {
        update: bool,
        range: Range<usize>,
        columns: Box<RouteColumns<'p>>,
    },
}

/// Cuts a segment into steps: runs of consecutive route writes of one
/// kind, and each membership write or deletion alone.
fn steps<'p>(planned: &[Planned<'p>], segment: Range<usize>) -> Vec<Step<'p>> {
    let mut steps: Vec<Step<'p>> = Vec::new();
    for index in segment {
        let write = match planned[index].write {
            WriteRef::Member(write) => {
                steps.push(Step::Member(index, write));
                continue;
            }
            WriteRef::Delete(node, expected) => {
                steps.push(Step::Delete(index, node, expected));
                continue;
            }
            WriteRef::Route(write) => write,
        };
        let update = matches!(write.condition, WriteCondition::CasEquals(_));
        match steps.last_mut() {
            Some(Step::Routes {
                update: run_update,
                range,
                columns,
            }) if *run_update == update => {
                range.end = index + 1;
                columns.push(write);
            }
            _ => {
                let mut columns = Box::<RouteColumns<'p>>::default();
                columns.push(write);
                steps.push(Step::Routes {
                    update,
                    range: index..index + 1,
                    columns,
                });
            }
        }
    }
    steps
}

/// What each reply of a segment's pipeline answers.
enum Role {
    Begin,
    Member(usize),
    Lock,
    Routes(Range<usize>),
    Commit,
}

/// Runs every write segment; returns how the writes ended and, when the
/// reads rode along with the last segment, their replies.
async fn run_writes(
    client: &Client,
    st: &Statements,
    planned: &[Planned<'_>],
    requests: &[Request],
    reads: &[usize],
) -> (Commit, Option<Vec<Reply>>) {
    if planned.is_empty() {
        return (Commit::Committed(Vec::new()), None);
    }
    let transactional = planned.len() > 1;
    let segments = segments(planned);
    let mut outcomes: Vec<Option<Outcome>> = planned.iter().map(|_| None).collect();
    let mut read_replies = None;
    for (number, segment) in segments.iter().enumerate() {
        let first = number == 0;
        let last = number + 1 == segments.len();
        let bounds = SegmentBounds {
            begin: transactional && first,
            commit: transactional && last,
        };
        let steps = steps(planned, segment.clone());
        let (mut pending, roles) = segment_statements(client, st, &steps, bounds);
        if last {
            pending.extend(
                reads
                    .iter()
                    .map(|&index| read(client, st, &requests[index])),
            );
        }
        let mut replies = pipeline(pending).await;
        if last {
            read_replies = Some(replies.split_off(roles.len()));
        }
        let begin_ok = !matches!(roles.first(), Some(Role::Begin)) || replies[0].error().is_none();
        let statements_from = usize::from(matches!(roles.first(), Some(Role::Begin)));
        match judge(begin_ok, &mut replies[statements_from..]) {
            Judgement::Ok => {}
            Judgement::RolledBack(error) => {
                let clean = end_transaction(client, transactional, last).await;
                return (Commit::RolledBack { error, clean }, read_replies);
            }
            Judgement::Unknown => return (Commit::Unknown, read_replies),
        }
        let refused = record_outcomes(planned, &roles, &replies, &mut outcomes);
        if refused.is_empty() {
            continue;
        }
        let in_transaction = transactional && !last;
        if let Err(ended) =
            read_refused(client, st, planned, &refused, in_transaction, &mut outcomes).await
        {
            return (ended, read_replies);
        }
    }
    (Commit::Committed(outcomes), read_replies)
}

/// Whether a segment opens and whether it closes the batch's transaction.
#[derive(Clone, Copy)]
struct SegmentBounds {
    begin: bool,
    commit: bool,
}

/// The statements of one segment of writes, in order, and what each of
/// their replies answers.
fn segment_statements<'a>(
    client: &'a Client,
    st: &'a Statements,
    steps: &'a [Step<'_>],
    bounds: SegmentBounds,
) -> (Vec<Pending<'a>>, Vec<Role>) {
    let mut pending: Vec<Pending<'a>> = Vec::with_capacity(steps.len() * 2 + 2);
    let mut roles = Vec::with_capacity(steps.len() * 2 + 2);
    if bounds.begin {
        pending.push(simple(client, "BEGIN"));
        roles.push(Role::Begin);
    }
    for step in steps {
        match step {
            Step::Member(index, write) => {
                pending.push(write_member(client, st, write));
                roles.push(Role::Member(*index));
            }
            Step::Delete(index, node, expected) => {
                pending.push(delete_member(client, st, *node, *expected));
                roles.push(Role::Member(*index));
            }
            Step::Routes {
                update,
                range,
                columns,
            } => {
                if *update && range.len() > 1 {
                    pending.push(lock_routes(client, st, columns));
                    roles.push(Role::Lock);
                }
                pending.push(if *update {
                    update_routes(client, st, columns)
                } else {
                    insert_routes(client, st, columns)
                });
                roles.push(Role::Routes(range.clone()));
            }
        }
    }
    if bounds.commit {
        // This exact text tells `Worker::abandon` that the backend is
        // committing (see `sql::TERMINATE_UNLESS_COMMITTING`).
        pending.push(simple(client, "COMMIT"));
        roles.push(Role::Commit);
    }
    (pending, roles)
}

/// Sets the outcome of every write a segment's replies settle; returns
/// the writes the store refused, whose current records must be read.
fn record_outcomes(
    planned: &[Planned<'_>],
    roles: &[Role],
    replies: &[Reply],
    outcomes: &mut [Option<Outcome>],
) -> Vec<usize> {
    let mut refused = Vec::new();
    for (role, reply) in roles.iter().zip(replies) {
        match (role, reply) {
            (Role::Member(index), Reply::Rows(Ok(rows))) => match function_answer(rows) {
                Ok(Some(_)) => outcomes[*index] = Some(applied(&planned[*index])),
                Ok(None) => refused.push(*index),
                Err(_) => outcomes[*index] = Some(indeterminate(&planned[*index])),
            },
            (Role::Routes(range), Reply::Rows(Ok(rows))) => {
                let written =
                    written_in_run(&planned[range.clone()], rows.iter().map(answered_key));
                for (index, written) in range.clone().zip(written) {
                    match written {
                        Some(true) => outcomes[index] = Some(applied(&planned[index])),
                        Some(false) => refused.push(index),
                        None => outcomes[index] = Some(indeterminate(&planned[index])),
                    }
                }
            }
            // A membership function answers one row; anything else is
            // impossible, and nothing but "unknown" can be said of it.
            (Role::Member(index), _) => outcomes[*index] = Some(indeterminate(&planned[*index])),
            (Role::Routes(range), _) => {
                for index in range.clone() {
                    outcomes[index] = Some(indeterminate(&planned[index]));
                }
            }
            (Role::Begin | Role::Lock | Role::Commit, _) => {}
        }
    }
    refused
}

/// Reads the current record of each refused write into its outcome.
/// Inside the transaction (`in_transaction`) a failed read is a failed
/// statement, and how the transaction ended is the error.
async fn read_refused(
    client: &Client,
    st: &Statements,
    planned: &[Planned<'_>],
    refused: &[usize],
    in_transaction: bool,
    outcomes: &mut [Option<Outcome>],
) -> Result<(), Commit> {
    let reads: Vec<Pending<'_>> = refused
        .iter()
        .map(|&index| match planned[index].write {
            WriteRef::Route(write) => select_route(client, st, write.key),
            WriteRef::Member(write) => select_member(client, st, write.row.node_id.0),
            WriteRef::Delete(node, _) => select_member(client, st, node.0),
        })
        .collect();
    let mut replies = pipeline(reads).await;
    if in_transaction {
        match judge(true, &mut replies) {
            Judgement::Ok => {}
            Judgement::RolledBack(error) => {
                let clean = end_transaction(client, true, false).await;
                return Err(Commit::RolledBack { error, clean });
            }
            Judgement::Unknown => return Err(Commit::Unknown),
        }
    }
    for (&index, reply) in refused.iter().zip(replies) {
        // After COMMIT a failed read leaves only this write's current
        // record unknown: it was refused, but its caller must re-read.
        outcomes[index] =
            Some(refusal(&planned[index], reply).unwrap_or(indeterminate(&planned[index])));
    }
    Ok(())
}

/// The key a run's statement answered for a row it wrote.
fn answered_key(row: &Row) -> Option<[i64; 3]> {
    let [type_id, zone_id, object_id] = [0, 1, 2].map(|column| row.try_get::<_, i64>(column).ok());
    Some([type_id?, zone_id?, object_id?])
}

/// Which writes of a run its statement wrote, from the keys it answered:
/// `Some(true)` written, `Some(false)` refused. A run's keys are distinct
/// and sorted, so each answered key is found by binary search. An answer
/// this run cannot have given (a key twice, or one it did not send) makes
/// every write of the run unknown (`None`).
fn written_in_run(
    run: &[Planned<'_>],
    answered: impl IntoIterator<Item = Option<[i64; 3]>>,
) -> Vec<Option<bool>> {
    let mut written = vec![Some(false); run.len()];
    for key in answered {
        let position = key.and_then(|key| {
            run.binary_search_by_key(&LockKey::Route(key), |planned| planned.lock)
                .ok()
        });
        match position {
            Some(position) if written[position] == Some(false) => written[position] = Some(true),
            _ => return vec![None; run.len()],
        }
    }
    written
}

enum Judgement {
    Ok,
    RolledBack(tokio_postgres::Error),
    Unknown,
}

/// Judges the replies of one segment's statements (and `COMMIT`).
fn judge(begin_ok: bool, replies: &mut [Reply]) -> Judgement {
    if !begin_ok {
        // Without the BEGIN the statements may each have autocommitted.
        return Judgement::Unknown;
    }
    let mut unknown = false;
    for reply in replies.iter_mut() {
        match reply.error() {
            None => {}
            Some(error) if is_plain_failure(error) => {
                // The transaction is aborted and can never commit, whatever
                // the later replies say.
                if let Some(error) = take_error(reply) {
                    return Judgement::RolledBack(error);
                }
            }
            Some(_) => unknown = true,
        }
    }
    if unknown {
        Judgement::Unknown
    } else {
        Judgement::Ok
    }
}

/// Takes the error out of a reply, leaving a success in its place.
fn take_error(reply: &mut Reply) -> Option<tokio_postgres::Error> {
    match std::mem::replace(reply, Reply::Done(Ok(()))) {
        Reply::Count(Err(error)) | Reply::Rows(Err(error)) | Reply::Done(Err(error)) => Some(error),
        other => {
            *reply = other;
            None
        }
    }
}

/// Ends an aborted transaction that `COMMIT` did not end. Returns false
/// when that failed: the connection may still be inside the aborted
/// transaction, and must be dropped.
async fn end_transaction(client: &Client, transactional: bool, commit_sent: bool) -> bool {
    if transactional && !commit_sent {
        return client.batch_execute("ROLLBACK").await.is_ok();
    }
    true
}

fn applied(planned: &Planned<'_>) -> Outcome {
    match planned.write {
        WriteRef::Route(write) => Outcome::Route(WriteOutcome::Applied(applied_cas(write))),
        WriteRef::Member(write) => Outcome::Member(MemberOutcome::Applied(write.next_version())),
        WriteRef::Delete(_, expected) => Outcome::Member(MemberOutcome::Applied(MemberVersion(
            expected.0.wrapping_add(1),
        ))),
    }
}

fn indeterminate(planned: &Planned<'_>) -> Outcome {
    match planned.write {
        WriteRef::Route(_) => Outcome::Route(WriteOutcome::Indeterminate),
        WriteRef::Member(_) | WriteRef::Delete(..) => Outcome::Member(MemberOutcome::Indeterminate),
    }
}

/// The outcome of a refused write from the read of its current row.
fn refusal(planned: &Planned<'_>, reply: Reply) -> Option<Outcome> {
    let Reply::Rows(Ok(rows)) = reply else {
        return None;
    };
    match planned.write {
        WriteRef::Route(write) => single_route(write.key, &rows)
            .ok()
            .map(|record| Outcome::Route(WriteOutcome::Conflict(record))),
        WriteRef::Member(_) | WriteRef::Delete(..) => match rows.as_slice() {
            [] => Some(Outcome::Member(MemberOutcome::Conflict(None))),
            [row] => member_from_row(row)
                .ok()
                .map(|row| Outcome::Member(MemberOutcome::Conflict(Some(row)))),
            _ => None,
        },
    }
}

/// Folds the writes' outcomes into their requests' answers.
fn fold_writes(
    commit: Commit,
    planned: &[Planned<'_>],
    requests: &[Request],
    answers: &mut [Option<Result<Done, BackendError>>],
) {
    let outcomes = match commit {
        Commit::Committed(outcomes) => outcomes,
        Commit::RolledBack { error, .. } => {
            let error = BackendError::from(error);
            for planned in planned {
                answers[planned.request] = Some(Err(error.clone()));
            }
            return;
        }
        Commit::Unknown => planned
            .iter()
            .map(|planned| Some(indeterminate(planned)))
            .collect(),
    };
    for (request, item) in requests.iter().enumerate() {
        if let Some(unknown) = item.op.indeterminate() {
            answers[request] = Some(Ok(unknown));
        }
    }
    for (planned, outcome) in planned.iter().zip(outcomes) {
        // A write left without an outcome stays Indeterminate.
        let Some(outcome) = outcome else { continue };
        match (&mut answers[planned.request], outcome) {
            (Some(Ok(Done::Write(outcomes))), Outcome::Route(outcome)) => {
                if let Some(slot) = outcomes.get_mut(planned.index) {
                    *slot = outcome;
                }
            }
            (Some(Ok(Done::WriteMember(slot))), Outcome::Member(outcome)) => *slot = outcome,
            _ => debug_assert!(false, "a planned write of another kind than its request"),
        }
    }
}

#[cfg(test)]
#[path = "postgres_batch_tests.rs"]
mod tests;
