//! The PostgreSQL backend's prepared statements and how their requests go
//! down one connection's pipeline.
//!
//! Each function here builds one statement's request as a future; the
//! driver hands a request to its connection on the future's first poll,
//! so `pipeline` polls every future once, in order, before awaiting any:
//! one round trip carries them all, and the server answers in order.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::postgres_membership as members;
use super::postgres_sql::{self as sql, int, key_values};
use super::record::{CasVersion, RecordWrite, WriteCondition};

/// Every statement of the backend, prepared once per connection.
pub(crate) struct Statements {
    lock_routes: Statement,
    insert_routes: Statement,
    update_routes: Statement,
    select_route: Statement,
    pub(super) write_member: Statement,
    pub(super) delete_member: Statement,
    pub(super) select_member: Statement,
    pub(super) poll_members: Statement,
    pub(super) list_members: Statement,
}

impl Statements {
    /// Prepares every statement in one pipelined round trip.
    pub async fn prepare(client: &Client) -> Result<Statements, tokio_postgres::Error> {
        let (select_member, poll_members, list_members) = (
            members::select_member_sql(),
            members::poll_members_sql(),
            members::list_members_sql(),
        );
        let (lock_routes, insert_routes, update_routes, select_route) = tokio::try_join!(
            client.prepare(sql::LOCK_ROUTES),
            client.prepare(sql::INSERT_ROUTES),
            client.prepare(sql::UPDATE_ROUTES),
            client.prepare(sql::SELECT_ROUTE),
        )?;
        let (write_member, delete_member, select_member, poll_members, list_members) = tokio::try_join!(
            client.prepare(members::WRITE_MEMBER),
            client.prepare(members::DELETE_MEMBER),
            client.prepare(&select_member),
            client.prepare(&poll_members),
            client.prepare(&list_members),
        )?;
        Ok(Statements {
            lock_routes,
            insert_routes,
            update_routes,
            select_route,
            write_member,
            delete_member,
            select_member,
            poll_members,
            list_members,
        })
    }
}

/// A statement's answer in the pipeline.
pub(crate) enum Reply {
    Count(Result<u64, tokio_postgres::Error>),
    Rows(Result<Vec<Row>, tokio_postgres::Error>),
    Done(Result<(), tokio_postgres::Error>),
}

impl Reply {
    pub fn error(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Reply::Count(Err(error)) | Reply::Rows(Err(error)) | Reply::Done(Err(error)) => {
                Some(error)
            }
            _ => None,
        }
    }
}

pub(crate) type Pending<'a> = Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;

/// Awaits `pending` with each request sent in list order: every future is
/// polled once, in order, before any is awaited (the driver hands a
/// request to its connection on the first poll), and then they are awaited
/// in order, which is the order the server answers in.
pub(crate) async fn pipeline(mut pending: Vec<Pending<'_>>) -> Vec<Reply> {
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

pub(crate) fn simple<'a>(client: &'a Client, query: &'static str) -> Pending<'a> {
    Box::pin(async move { Reply::Done(client.batch_execute(query).await) })
}

pub(crate) fn select_route<'a>(
    client: &'a Client,
    st: &'a Statements,
    key: wire::ObjectKey,
) -> Pending<'a> {
    let [type_id, zone_id, object_id] = key_values(key);
    Box::pin(async move {
        Reply::Rows(
            client
                .query(&st.select_route, &[&type_id, &zone_id, &object_id])
                .await,
        )
    })
}

/// The CAS version an applied route write leaves.
pub(crate) fn applied_cas(write: &RecordWrite) -> CasVersion {
    match write.condition {
        WriteCondition::Absent => CasVersion(1),
        WriteCondition::CasEquals(expected) => CasVersion(expected.0.wrapping_add(1)),
    }
}

/// Route writes of one kind (all `Absent`, or all `CasEquals`) with
/// distinct keys in key order, as the parallel arrays of `INSERT_ROUTES`
/// or `UPDATE_ROUTES`.
#[derive(Default)]
pub(crate) struct RouteColumns<'a> {
    type_id: Vec<i64>,
    zone_id: Vec<i64>,
    object_id: Vec<i64>,
    owner_node: Vec<i64>,
    owner_incarnation: Vec<i64>,
    route_version: Vec<i64>,
    save_timepoint_ms: Vec<i64>,
    state: Vec<&'a [u8]>,
    /// Updates only: the CAS version each write leaves, and the one it
    /// expects.
    next_cas: Vec<i64>,
    expected_cas: Vec<i64>,
}

impl<'a> RouteColumns<'a> {
    /// Adds `write` as the last row; the caller keeps one kind and the
    /// key order.
    pub fn push(&mut self, write: &'a RecordWrite) {
        let [type_id, zone_id, object_id] = key_values(write.key);
        self.type_id.push(type_id);
        self.zone_id.push(zone_id);
        self.object_id.push(object_id);
        self.owner_node.push(int(write.owner_node.0));
        self.owner_incarnation.push(int(write.owner_incarnation));
        self.route_version.push(int(write.route_version.0));
        self.save_timepoint_ms.push(int(write.save_timepoint_ms));
        self.state.push(&write.state);
        if let WriteCondition::CasEquals(expected) = write.condition {
            self.next_cas.push(int(applied_cas(write).0));
            self.expected_cas.push(int(expected.0));
        }
    }

    fn row_params(&self) -> [&(dyn ToSql + Sync); 8] {
        [
            &self.type_id,
            &self.zone_id,
            &self.object_id,
            &self.owner_node,
            &self.owner_incarnation,
            &self.route_version,
            &self.save_timepoint_ms,
            &self.state,
        ]
    }
}

/// Locks the existing rows of `columns`' keys in key order.
pub(crate) fn lock_routes<'a>(
    client: &'a Client,
    st: &'a Statements,
    columns: &'a RouteColumns<'a>,
) -> Pending<'a> {
    Box::pin(async move {
        let keys: [&(dyn ToSql + Sync); 3] =
            [&columns.type_id, &columns.zone_id, &columns.object_id];
        Reply::Count(client.execute(&st.lock_routes, &keys).await)
    })
}

/// Inserts the rows of `columns` whose key is absent; answers the keys
/// inserted.
pub(crate) fn insert_routes<'a>(
    client: &'a Client,
    st: &'a Statements,
    columns: &'a RouteColumns<'a>,
) -> Pending<'a> {
    Box::pin(
        async move { Reply::Rows(client.query(&st.insert_routes, &columns.row_params()).await) },
    )
}

/// Updates the rows of `columns` whose CAS version is the expected one;
/// answers the keys updated.
pub(crate) fn update_routes<'a>(
    client: &'a Client,
    st: &'a Statements,
    columns: &'a RouteColumns<'a>,
) -> Pending<'a> {
    Box::pin(async move {
        let row = columns.row_params();
        let params: [&(dyn ToSql + Sync); 10] = [
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            row[6],
            row[7],
            &columns.next_cas,
            &columns.expected_cas,
        ];
        Reply::Rows(client.query(&st.update_routes, &params).await)
    })
}
