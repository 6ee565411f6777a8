//! One group commit on one PostgreSQL connection: every request the
//! dispatcher handed over, pipelined.
//!
//! Pipelining: each statement is handed to the driver in order before any
//! answer is awaited, so one round trip carries `BEGIN`, every conditional
//! write, `COMMIT` and the reads. The server runs them in order.
//!
//! Transaction semantics (every write keeps its own condition and outcome):
//! - Writes run in lock order (membership rows, then routes, by key), so
//!   two group transactions, of this process or another, never wait for
//!   each other in a cycle; writes of one key keep their request order.
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
//! - Reads (`load`, `list_members`) run outside the transaction and
//!   answer for themselves.
//! - A batch of one write runs as one autocommit statement (no `BEGIN`):
//!   the same rules, one statement fewer.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio_postgres::{Client, Row, Statement};

use super::bridge::{Done, Op, Request};
use super::error::BackendError;
use super::membership::{self, MemberCondition, MemberOutcome, MemberWrite};
use super::postgres_sql::{self as sql, int, is_plain_failure, key_values};
use super::record::{CasVersion, RecordWrite, WriteCondition, WriteOutcome};

/// Every statement of the backend, prepared once per connection.
pub(crate) struct Statements {
    insert_route: Statement,
    update_route: Statement,
    select_route: Statement,
    insert_member: Statement,
    update_member: Statement,
    select_member: Statement,
    list_members: Statement,
}

impl Statements {
    /// Prepares every statement in one pipelined round trip.
    pub async fn prepare(client: &Client) -> Result<Statements, tokio_postgres::Error> {
        let (insert_member, select_member, list_members) = (
            sql::insert_member_sql(),
            sql::select_member_sql(),
            sql::list_members_sql(),
        );
        let (insert_route, update_route, select_route, insert_member, update_member) = tokio::try_join!(
            client.prepare(sql::INSERT_ROUTE),
            client.prepare(sql::UPDATE_ROUTE),
            client.prepare(sql::SELECT_ROUTE),
            client.prepare(&insert_member),
            client.prepare(sql::UPDATE_MEMBER),
        )?;
        let (select_member, list_members) = tokio::try_join!(
            client.prepare(&select_member),
            client.prepare(&list_members),
        )?;
        Ok(Statements {
            insert_route,
            update_route,
            select_route,
            insert_member,
            update_member,
            select_member,
            list_members,
        })
    }
}

/// What a batch answers, one entry per request in order, and whether the
/// connection must be dropped (its state is unknown).
pub(crate) struct BatchResult {
    pub answers: Vec<Result<Done, BackendError>>,
    pub connection_suspect: bool,
}

/// The order in which writes take row locks; `Member` sorts first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LockKey {
    Member(u64),
    Route(u32, u32, u64),
}

#[derive(Clone, Copy)]
enum WriteRef<'a> {
    Route(&'a RecordWrite),
    Member(&'a MemberWrite),
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

/// A statement's answer in the pipeline.
enum Reply {
    Count(Result<u64, tokio_postgres::Error>),
    Rows(Result<Vec<Row>, tokio_postgres::Error>),
    Done(Result<(), tokio_postgres::Error>),
}

impl Reply {
    fn error(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Reply::Count(Err(error)) | Reply::Rows(Err(error)) | Reply::Done(Err(error)) => {
                Some(error)
            }
            _ => None,
        }
    }
}

type Pending<'a> = Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;

/// Awaits `pending` with each request sent in list order: every future is
/// polled once, in order, before any is awaited (the driver hands a
/// request to its connection on the first poll), and then they are awaited
/// in order, which is the order the server answers in.
async fn pipeline(mut pending: Vec<Pending<'_>>) -> Vec<Reply> {
    let mut early: Vec<Option<Reply>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (future, slot) in pending.iter_mut().zip(early.iter_mut()) {
            if let Poll::Ready(reply) = future.as_mut().poll(cx) {
                *slot = Some(reply);
            }
        }
        Poll::Ready(())
    })
    .await;
    let mut replies = Vec::with_capacity(pending.len());
    for (future, early) in pending.into_iter().zip(early) {
        replies.push(match early {
            Some(reply) => reply,
            None => future.await,
        });
    }
    replies
}

fn simple<'a>(client: &'a Client, query: &'static str) -> Pending<'a> {
    Box::pin(async move { Reply::Done(client.batch_execute(query).await) })
}

fn select_route<'a>(client: &'a Client, st: &'a Statements, key: wire::ObjectKey) -> Pending<'a> {
    let [type_id, zone_id, object_id] = key_values(key);
    Box::pin(async move {
        Reply::Rows(
            client
                .query(&st.select_route, &[&type_id, &zone_id, &object_id])
                .await,
        )
    })
}

fn select_member<'a>(client: &'a Client, st: &'a Statements, node_id: u64) -> Pending<'a> {
    let node_id = int(node_id);
    Box::pin(async move { Reply::Rows(client.query(&st.select_member, &[&node_id]).await) })
}

fn list_members<'a>(client: &'a Client, st: &'a Statements) -> Pending<'a> {
    Box::pin(async move { Reply::Rows(client.query(&st.list_members, &[]).await) })
}

fn write_route<'a>(client: &'a Client, st: &'a Statements, write: &'a RecordWrite) -> Pending<'a> {
    let [type_id, zone_id, object_id] = key_values(write.key);
    let owner = int(write.owner_node.0);
    let incarnation = int(write.owner_incarnation);
    let route_version = int(write.route_version.0);
    let saved = int(write.save_timepoint_ms);
    let state = write.state.as_slice();
    match write.condition {
        WriteCondition::Absent => Box::pin(async move {
            Reply::Count(
                client
                    .execute(
                        &st.insert_route,
                        &[
                            &type_id,
                            &zone_id,
                            &object_id,
                            &owner,
                            &incarnation,
                            &route_version,
                            &saved,
                            &state,
                        ],
                    )
                    .await,
            )
        }),
        WriteCondition::CasEquals(expected) => {
            let next = int(applied_cas(write).0);
            let expected = int(expected.0);
            Box::pin(async move {
                Reply::Count(
                    client
                        .execute(
                            &st.update_route,
                            &[
                                &type_id,
                                &zone_id,
                                &object_id,
                                &owner,
                                &incarnation,
                                &route_version,
                                &saved,
                                &state,
                                &next,
                                &expected,
                            ],
                        )
                        .await,
                )
            })
        }
    }
}

fn write_member<'a>(client: &'a Client, st: &'a Statements, write: &'a MemberWrite) -> Pending<'a> {
    let row = &write.row;
    let node_id = int(row.node_id.0);
    let incarnation = int(row.incarnation);
    let state = row.state as i64;
    let heartbeat = int(row.heartbeat);
    let cluster = membership::encode_addresses(&row.cluster);
    let core_count = i64::from(row.core_count);
    let actors = membership::encode_actors(&row.actors);
    let next = int(write.next_version().0);
    let (statement, expected) = match write.condition {
        MemberCondition::Absent => (&st.insert_member, None),
        MemberCondition::VersionEquals(expected) => (&st.update_member, Some(int(expected.0))),
    };
    Box::pin(async move {
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
            &node_id,
            &incarnation,
            &state,
            &heartbeat,
            &row.gateway,
            &row.admin,
            &cluster,
            &core_count,
            &actors,
            &next,
        ];
        if let Some(expected) = &expected {
            params.push(expected);
        }
        Reply::Count(client.execute(statement, &params).await)
    })
}

/// The CAS version an applied route write leaves.
fn applied_cas(write: &RecordWrite) -> CasVersion {
    match write.condition {
        WriteCondition::Absent => CasVersion(1),
        WriteCondition::CasEquals(expected) => CasVersion(expected.0.wrapping_add(1)),
    }
}

fn plan(requests: &[Request]) -> Vec<Planned<'_>> {
    let mut planned = Vec::new();
    for (request, item) in requests.iter().enumerate() {
        match &item.op {
            Op::Write(writes) => {
                for (index, write) in writes.iter().enumerate() {
                    let key = write.key;
                    planned.push(Planned {
                        lock: LockKey::Route(key.type_id, key.zone_id, key.object_id),
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
            Op::Load(_) | Op::ListMembers => {}
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
    let planned = plan(requests);
    let reads: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, request)| matches!(request.op, Op::Load(_) | Op::ListMembers))
        .map(|(index, _)| index)
        .collect();
    let (commit, read_replies) = run_writes(client, st, &planned, requests, &reads).await;
    let mut connection_suspect = matches!(
        commit,
        Commit::Unknown | Commit::RolledBack { clean: false, .. }
    );
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
        _ => list_members(client, st),
    }
}

fn read_answer(op: &Op, reply: Reply) -> Result<Done, BackendError> {
    let rows = match reply {
        Reply::Rows(rows) => rows?,
        _ => return Err(BackendError::Corrupt("postgres read answered without rows")),
    };
    match op {
        Op::Load(key) => Ok(Done::Load(single_route(*key, &rows)?)),
        _ => Ok(Done::List(
            rows.iter()
                .map(sql::member_from_row)
                .collect::<Result<_, _>>()?,
        )),
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
        let mut pending: Vec<Pending<'_>> = Vec::with_capacity(segment.len() + 2 + reads.len());
        if transactional && first {
            pending.push(simple(client, "BEGIN"));
        }
        for planned in &planned[segment.clone()] {
            pending.push(match planned.write {
                WriteRef::Route(write) => write_route(client, st, write),
                WriteRef::Member(write) => write_member(client, st, write),
            });
        }
        if transactional && last {
            pending.push(simple(client, "COMMIT"));
        }
        if last {
            pending.extend(
                reads
                    .iter()
                    .map(|&index| read(client, st, &requests[index])),
            );
        }
        let mut replies = pipeline(pending).await;
        if last {
            read_replies = Some(replies.split_off(replies.len() - reads.len()));
        }
        let begin_ok = !(transactional && first) || replies[0].error().is_none();
        let statements = if transactional && first {
            &mut replies[1..]
        } else {
            &mut replies[..]
        };
        match judge(begin_ok, statements) {
            Judgement::Ok => {}
            Judgement::RolledBack(error) => {
                let clean = end_transaction(client, transactional, last).await;
                return (Commit::RolledBack { error, clean }, read_replies);
            }
            Judgement::Unknown => return (Commit::Unknown, read_replies),
        }
        let mut refused = Vec::new();
        for (offset, reply) in statements.iter().take(segment.len()).enumerate() {
            let index = segment.start + offset;
            match reply {
                Reply::Count(Ok(1)) => outcomes[index] = Some(applied(&planned[index])),
                Reply::Count(Ok(0)) => refused.push(index),
                // A key is the primary key: more than one row is impossible,
                // and nothing but "unknown" can be said of such a write.
                _ => outcomes[index] = Some(indeterminate(&planned[index])),
            }
        }
        if refused.is_empty() {
            continue;
        }
        let reads_refused: Vec<Pending<'_>> = refused
            .iter()
            .map(|&index| match planned[index].write {
                WriteRef::Route(write) => select_route(client, st, write.key),
                WriteRef::Member(write) => select_member(client, st, write.row.node_id.0),
            })
            .collect();
        let mut replies = pipeline(reads_refused).await;
        if !last {
            // Inside the transaction: a failed read is a failed statement.
            match judge(true, &mut replies) {
                Judgement::Ok => {}
                Judgement::RolledBack(error) => {
                    let clean = end_transaction(client, transactional, false).await;
                    return (Commit::RolledBack { error, clean }, read_replies);
                }
                Judgement::Unknown => return (Commit::Unknown, read_replies),
            }
        }
        for (&index, reply) in refused.iter().zip(replies) {
            // After COMMIT a failed read leaves only this write's current
            // record unknown: it was refused, but its caller must re-read.
            outcomes[index] =
                Some(refusal(&planned[index], reply).unwrap_or(indeterminate(&planned[index])));
        }
    }
    (Commit::Committed(outcomes), read_replies)
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
    }
}

fn indeterminate(planned: &Planned<'_>) -> Outcome {
    match planned.write {
        WriteRef::Route(_) => Outcome::Route(WriteOutcome::Indeterminate),
        WriteRef::Member(_) => Outcome::Member(MemberOutcome::Indeterminate),
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
        WriteRef::Member(_) => match rows.as_slice() {
            [] => Some(Outcome::Member(MemberOutcome::Conflict(None))),
            [row] => sql::member_from_row(row)
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
        match &item.op {
            Op::Write(writes) => {
                answers[request] = Some(Ok(Done::Write(vec![
                    WriteOutcome::Indeterminate;
                    writes.len()
                ])))
            }
            Op::WriteMember(_) => {
                answers[request] = Some(Ok(Done::WriteMember(MemberOutcome::Indeterminate)))
            }
            Op::Load(_) | Op::ListMembers => {}
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
mod tests {
    use super::*;

    fn lock(id: u64) -> LockKey {
        LockKey::Route(1, 0, id)
    }

    #[test]
    fn members_lock_before_routes_and_keys_in_order() {
        let mut keys = vec![lock(2), LockKey::Member(9), lock(1), LockKey::Member(1)];
        keys.sort();
        assert_eq!(
            keys,
            vec![LockKey::Member(1), LockKey::Member(9), lock(1), lock(2)]
        );
        assert!(LockKey::Route(0, 5, 0) < LockKey::Route(1, 0, 0));
    }
}
