//! The ScyllaDB backend's membership part.
//!
//! Every member row and the table version live in ONE partition of the
//! `membership` table (`p = 0`, a row per node id, the version a static
//! column), because a lightweight transaction, and a conditional batch,
//! spans one partition only. A membership change is one conditional batch
//! there: the row's update `IF version = <expected>` (or its insert `IF NOT
//! EXISTS`) and the version's `IF table_version = <read>`; Paxos applies
//! the batch whole or not at all, so the row never changes without the
//! version moving, nor the version without the row. A heartbeat is one
//! lightweight transaction on its row that leaves the version alone.
//!
//! A write first reads the row (SERIAL) to tell a heartbeat from a change
//! and the version to condition on; the batch's conditions make that read
//! safe to act on (a row or version that moved since refuses the batch). A
//! batch refused only because another node's change moved the version is
//! sent again, at most `VERSION_RACES_MAX` times.
//!
//! The cost of one partition: every node's heartbeat is a Paxos round on
//! it, 2·N a second with the default timers, serialised by Paxos. Fine for
//! tens of nodes; at hundreds, contention on that partition (not row reads)
//! is the bound, and it is not measured here (no ScyllaDB in this build's
//! tests).
//!
//! A store made before the table version had a `members` table with a
//! partition per node: at open, the first node to create the version
//! (`INSERT ... IF NOT EXISTS` of the static column) copies those rows in.

use scylla::statement::batch::{Batch, BatchType};

use super::*;
use crate::store::membership::{
    is_change, tombstone, MemberPage, MemberPoll, MemberState, TableVersion, MEMBERS_PAGE_MAX,
    POLL_ROWS_MAX,
};

/// How often a change is sent again because other nodes' changes moved
/// the table version between its read and its batch; past it the write
/// fails (nothing applied) and the node's next tick tries again.
pub(crate) const VERSION_RACES_MAX: usize = 8;

/// The columns of a stored row, in statement order.
const COLUMNS: &str = "node_id, incarnation, state, heartbeat, gateway, admin, cluster, \
     core_count, actors, version, changed, deleted, timers";

pub(crate) fn membership_table_cql(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.membership (p int, node_id bigint, \
         table_version bigint STATIC, incarnation bigint, state int, heartbeat bigint, \
         gateway text, admin text, cluster blob, core_count int, actors blob, version bigint, \
         changed bigint, deleted boolean, timers blob, PRIMARY KEY (p, node_id))"
    )
}

/// Whether the membership table has the `timers` column (a table made
/// before it has not; `ALTER TABLE ... ADD` has no `IF NOT EXISTS`).
pub(crate) fn timers_column_cql() -> &'static str {
    "SELECT column_name FROM system_schema.columns WHERE keyspace_name = ? \
     AND table_name = 'membership' AND column_name = 'timers'"
}

/// Adds the `timers` column to a membership table made before it: its
/// rows read as written without timers (unknown to their readers).
pub(crate) fn add_timers_column_cql(keyspace: &str) -> String {
    format!("ALTER TABLE {keyspace}.membership ADD timers blob")
}

/// Creates the table version of a new membership partition (applied once,
/// by the first node to open the store).
pub(crate) fn init_version_cql(keyspace: &str) -> String {
    format!("INSERT INTO {keyspace}.membership (p, table_version) VALUES (0, 1) IF NOT EXISTS")
}

pub(crate) fn select_version_cql(keyspace: &str) -> String {
    format!("SELECT table_version FROM {keyspace}.membership WHERE p = 0 LIMIT 1")
}

pub(crate) fn select_member_cql(keyspace: &str) -> String {
    format!("SELECT {COLUMNS} FROM {keyspace}.membership WHERE p = 0 AND node_id = ?")
}

pub(crate) fn select_members_cql(keyspace: &str) -> String {
    format!("SELECT {COLUMNS} FROM {keyspace}.membership WHERE p = 0 AND node_id IN ?")
}

/// One page of the rows changed after the second value with ids above the
/// first, filtered inside the one partition.
pub(crate) fn list_members_cql(keyspace: &str) -> String {
    format!(
        "SELECT {COLUMNS} FROM {keyspace}.membership WHERE p = 0 AND node_id > ? \
         AND changed > ? LIMIT {} ALLOW FILTERING",
        MEMBERS_PAGE_MAX + 1
    )
}

/// A heartbeat: the row's heartbeat and version, nothing else.
pub(crate) fn heartbeat_member_cql(keyspace: &str) -> String {
    format!(
        "UPDATE {keyspace}.membership SET heartbeat = ?, version = ? \
         WHERE p = 0 AND node_id = ? IF version = ?"
    )
}

/// A change's row part, in a batch with `bump_version_cql`.
pub(crate) fn insert_member_cql(keyspace: &str) -> String {
    format!(
        "INSERT INTO {keyspace}.membership (p, {COLUMNS}) \
         VALUES (0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
    )
}

/// A change's row part (or a deletion's), in a batch with
/// `bump_version_cql`.
pub(crate) fn update_member_cql(keyspace: &str) -> String {
    format!(
        "UPDATE {keyspace}.membership SET incarnation = ?, state = ?, heartbeat = ?, \
         gateway = ?, admin = ?, cluster = ?, core_count = ?, actors = ?, timers = ?, \
         version = ?, changed = ?, deleted = ? WHERE p = 0 AND node_id = ? IF version = ?"
    )
}

pub(crate) fn bump_version_cql(keyspace: &str) -> String {
    format!("UPDATE {keyspace}.membership SET table_version = ? WHERE p = 0 IF table_version = ?")
}

/// The rows of the table before the table version (a partition a node).
pub(crate) fn legacy_members_cql(keyspace: &str) -> String {
    format!(
        "SELECT node_id, incarnation, state, heartbeat, gateway, admin, cluster, core_count, \
         actors, version FROM {keyspace}.members"
    )
}

/// A stored row and whether it is a tombstone (the version its last
/// change made is read for listings by the server's filter, not here).
pub(crate) struct Stored {
    pub row: MemberRow,
    pub deleted: bool,
}

impl Stored {
    fn visible(self) -> MemberRow {
        if self.deleted {
            tombstone(self.row.node_id, self.row.incarnation, self.row.version)
        } else {
            self.row
        }
    }
}

type Columns = (
    i64,
    i64,
    i32,
    i64,
    String,
    String,
    Vec<u8>,
    i32,
    Vec<u8>,
    i64,
    Option<i64>,
    Option<bool>,
    Option<Vec<u8>>,
);

fn stored_from(columns: Columns) -> Result<Stored, BackendError> {
    let (
        node_id,
        incarnation,
        state,
        heartbeat,
        gateway,
        admin,
        cluster,
        cores,
        actors,
        version,
        _changed,
        deleted,
        timers,
    ) = columns;
    let corrupt = |error: membership::DecodeError| BackendError::Corrupt(error.0);
    Ok(Stored {
        row: MemberRow {
            node_id: NodeId(node_id as u64),
            incarnation: incarnation as u64,
            state: membership::decode_state(i64::from(state)).map_err(corrupt)?,
            heartbeat: heartbeat as u64,
            gateway,
            admin,
            cluster: membership::decode_addresses(&cluster).map_err(corrupt)?,
            core_count: u32::try_from(cores)
                .map_err(|_| BackendError::Corrupt("negative core_count"))?,
            actors: membership::decode_actors(&actors).map_err(corrupt)?,
            timers: membership::decode_timers(timers.as_deref().unwrap_or_default())
                .map_err(corrupt)?,
            version: MemberVersion(version as u64),
        },
        deleted: deleted.unwrap_or(false),
    })
}

/// What a conditional statement or batch answered.
enum Lwt {
    Applied,
    Refused,
    Unknown,
}

fn lwt_answer(
    result: Result<scylla::response::query_result::QueryResult, ExecutionError>,
) -> Result<Lwt, BackendError> {
    let result = match result {
        Ok(result) => result,
        Err(error) if write_error_is_indeterminate(&error) => return Ok(Lwt::Unknown),
        Err(error) => return Err(scylla_error(error)),
    };
    let applied = result
        .into_rows_result()
        .map_err(scylla_error)?
        .maybe_first_row::<Row>()
        .map_err(scylla_error)?
        .and_then(|row| row.columns.into_iter().next().flatten())
        .and_then(|value| value.as_boolean());
    match applied {
        Some(true) => Ok(Lwt::Applied),
        Some(false) => Ok(Lwt::Refused),
        None => Err(BackendError::Corrupt("LWT result without [applied]")),
    }
}

/// The values of `update_member_cql` for `row` at `version`.
#[allow(clippy::type_complexity)]
fn update_values(
    row: &MemberRow,
    version: MemberVersion,
    changed: i64,
    deleted: bool,
    expected: MemberVersion,
) -> (
    (
        i64,
        i32,
        i64,
        &str,
        &str,
        Vec<u8>,
        i32,
        Vec<u8>,
        Vec<u8>,
        i64,
        i64,
        bool,
    ),
    i64,
    i64,
) {
    (
        (
            row.incarnation as i64,
            row.state as i32,
            row.heartbeat as i64,
            row.gateway.as_str(),
            row.admin.as_str(),
            membership::encode_addresses(&row.cluster),
            row.core_count as i32,
            membership::encode_actors(&row.actors),
            membership::encode_timers(row.timers),
            version.0 as i64,
            changed,
            deleted,
        ),
        row.node_id.0 as i64,
        expected.0 as i64,
    )
}

/// How long the first node of this version watches the rows of an older
/// `members` table before it migrates them: longer than an older node's
/// heartbeat interval (500 ms by default) several times over.
pub(super) const LEGACY_WATCH_MS: u64 = 3000;

/// A node of an older version still heartbeating in `members`, seen in two
/// reads of its rows (`(node, state, heartbeat)`) `LEGACY_WATCH_MS` apart:
/// the first live row (not `left` or `down`) whose heartbeat moved.
pub(super) fn legacy_heartbeat_moved(
    before: &[(i64, i32, i64)],
    after: &[(i64, i32, i64)],
) -> Option<i64> {
    let ended = |state: i32| {
        u8::try_from(state)
            .ok()
            .and_then(MemberState::from_u8)
            .is_some_and(MemberState::is_ended)
    };
    after.iter().find_map(|&(node, state, heartbeat)| {
        let moved = before
            .iter()
            .find(|row| row.0 == node)
            .is_none_or(|row| row.2 != heartbeat);
        (moved && !ended(state)).then_some(node)
    })
}

/// Why the membership table could not be migrated.
#[derive(Debug, thiserror::Error)]
pub(super) enum MigrateError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Older nodes heartbeat in `members`, which this version does not
    /// read: a rolling upgrade would let the new nodes declare them down
    /// and claim their objects while they serve.
    #[error(
        "an older routerd still heartbeats in {keyspace}.members (node {node}): stop every node \
         of the older version, then start this one (docs/cluster.md: moving an existing cluster \
         is a full restart)"
    )]
    OlderNodesRunning { keyspace: String, node: i64 },
}

impl Statements {
    /// The `(node, state, heartbeat)` of every row of the older `members`
    /// table, or `None` when there is no such table.
    async fn legacy_heartbeats(&self) -> Result<Option<Vec<(i64, i32, i64)>>, BackendError> {
        let cql = format!(
            "SELECT node_id, state, heartbeat FROM {}.members",
            self.keyspace
        );
        let Ok(rows) = self.session.query_unpaged(cql, ()).await else {
            return Ok(None);
        };
        let rows = rows.into_rows_result().map_err(scylla_error)?;
        let rows = rows
            .rows::<(i64, i32, i64)>()
            .map_err(scylla_error)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(scylla_error)?;
        Ok(Some(rows))
    }

    /// Refuses the migration while a node of an older version heartbeats
    /// in `members` (see `MigrateError::OlderNodesRunning`); only a store
    /// whose membership version does not exist yet is looked at.
    async fn refuse_rolling_upgrade(&self) -> Result<(), MigrateError> {
        if self.table_version().await.is_ok() {
            return Ok(());
        }
        let Some(before) = self.legacy_heartbeats().await? else {
            return Ok(());
        };
        if before.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(LEGACY_WATCH_MS)).await;
        let after = self.legacy_heartbeats().await?.unwrap_or_default();
        match legacy_heartbeat_moved(&before, &after) {
            Some(node) => Err(MigrateError::OlderNodesRunning {
                keyspace: self.keyspace.clone(),
                node,
            }),
            None => Ok(()),
        }
    }

    /// Creates the membership partition's version and, on a store made
    /// before it, copies the old per-node rows in (stamped 1), unless a
    /// node of the older version still runs.
    pub(super) async fn migrate_members(&self) -> Result<(), MigrateError> {
        self.refuse_rolling_upgrade().await?;
        let created = lwt_answer(self.session.execute_unpaged(&self.init_version, ()).await)?;
        if !matches!(created, Lwt::Applied) {
            return Ok(());
        }
        let legacy = legacy_members_cql(&self.keyspace);
        let Ok(legacy) = self.session.query_unpaged(legacy, ()).await else {
            // No older table: a new store.
            return Ok(());
        };
        let rows = legacy.into_rows_result().map_err(scylla_error)?;
        type Legacy = (
            i64,
            i64,
            i32,
            i64,
            String,
            String,
            Vec<u8>,
            i32,
            Vec<u8>,
            i64,
        );
        for row in rows.rows::<Legacy>().map_err(scylla_error)? {
            let (
                node,
                incarnation,
                state,
                heartbeat,
                gateway,
                admin,
                cluster,
                cores,
                actors,
                version,
            ) = row.map_err(scylla_error)?;
            let values = (
                node,
                incarnation,
                state,
                heartbeat,
                gateway,
                admin,
                cluster,
                cores,
                actors,
                version,
                1_i64,
                false,
                Vec::<u8>::new(),
            );
            self.session
                .execute_unpaged(&self.insert_member, values)
                .await
                .map_err(scylla_error)?;
        }
        Ok(())
    }

    async fn table_version(&self) -> Result<TableVersion, BackendError> {
        let rows = self
            .session
            .execute_unpaged(&self.select_version, ())
            .await
            .map_err(scylla_error)?
            .into_rows_result()
            .map_err(scylla_error)?;
        match rows
            .maybe_first_row::<(Option<i64>,)>()
            .map_err(scylla_error)?
        {
            Some((Some(version),)) => Ok(TableVersion(version as u64)),
            _ => Err(BackendError::Corrupt("the membership version is missing")),
        }
    }

    async fn stored(
        &self,
        statement: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> Result<Vec<Stored>, BackendError> {
        let rows = self
            .session
            .execute_unpaged(statement, values)
            .await
            .map_err(scylla_error)?
            .into_rows_result()
            .map_err(scylla_error)?;
        let mut stored = Vec::new();
        for row in rows.rows::<Columns>().map_err(scylla_error)? {
            stored.push(stored_from(row.map_err(scylla_error)?)?);
        }
        Ok(stored)
    }

    async fn stored_one(&self, node: NodeId) -> Result<Option<Stored>, BackendError> {
        Ok(self
            .stored(&self.select_member, (node.0 as i64,))
            .await?
            .pop())
    }

    pub(super) async fn poll_members(&self, nodes: &[NodeId]) -> Result<MemberPoll, BackendError> {
        let version = self.table_version().await?;
        let ids: Vec<i64> = nodes
            .iter()
            .take(POLL_ROWS_MAX)
            .map(|node| node.0 as i64)
            .collect();
        let rows = if ids.is_empty() {
            Vec::new()
        } else {
            self.stored(&self.select_members, (ids,)).await?
        };
        Ok(MemberPoll {
            version,
            rows: rows.into_iter().map(Stored::visible).collect(),
        })
    }

    pub(super) async fn list_members(
        &self,
        since: TableVersion,
        after: NodeId,
    ) -> Result<MemberPage, BackendError> {
        let rows = self
            .stored(&self.list_members, (after.0 as i64, since.0 as i64))
            .await?;
        let mut page = MemberPage::default();
        for stored in rows {
            if page.rows.len() + page.deleted.len() == MEMBERS_PAGE_MAX {
                page.more = true;
                break;
            }
            match (stored.deleted, since == TableVersion(0)) {
                (true, true) => {}
                (true, false) => page.deleted.push(stored.row.node_id),
                (false, _) => page.rows.push(stored.row),
            }
        }
        Ok(page)
    }

    pub(super) async fn write_member(
        &self,
        write: &MemberWrite,
    ) -> Result<MemberOutcome, BackendError> {
        let row = &write.row;
        let next = write.next_version();
        for _ in 0..VERSION_RACES_MAX {
            let current = self.stored_one(row.node_id).await?;
            let holds = match (write.condition, &current) {
                (MemberCondition::Absent, None) => true,
                (MemberCondition::VersionEquals(expected), Some(stored)) => {
                    stored.row.version == expected
                }
                _ => false,
            };
            if !holds {
                return Ok(MemberOutcome::Conflict(current.map(Stored::visible)));
            }
            let answer = match (&current, write.condition) {
                (Some(stored), MemberCondition::VersionEquals(expected))
                    if !stored.deleted && !is_change(&stored.row, row) =>
                {
                    let values = (
                        row.heartbeat as i64,
                        next.0 as i64,
                        row.node_id.0 as i64,
                        expected.0 as i64,
                    );
                    let result = self
                        .session
                        .execute_unpaged(&self.heartbeat_member, values)
                        .await;
                    match lwt_answer(result)? {
                        Lwt::Applied => return Ok(MemberOutcome::Applied(next)),
                        Lwt::Unknown => return Ok(MemberOutcome::Indeterminate),
                        // Only the row's version is in the condition: the
                        // row moved, and the read that follows says how.
                        Lwt::Refused => {
                            let current = self.stored_one(row.node_id).await?;
                            return Ok(MemberOutcome::Conflict(current.map(Stored::visible)));
                        }
                    }
                }
                (_, condition) => self.change(row, next, false, condition).await?,
            };
            match answer {
                Lwt::Applied => return Ok(MemberOutcome::Applied(next)),
                Lwt::Unknown => return Ok(MemberOutcome::Indeterminate),
                // The row or the version moved: read again, and either
                // the row tells the conflict or the batch goes again.
                Lwt::Refused => continue,
            }
        }
        Err(version_races())
    }

    pub(super) async fn delete_member(
        &self,
        node: NodeId,
        expected: MemberVersion,
    ) -> Result<MemberOutcome, BackendError> {
        let next = MemberVersion(expected.0.wrapping_add(1));
        for _ in 0..VERSION_RACES_MAX {
            let current = self.stored_one(node).await?;
            let holds = current.as_ref().is_some_and(|stored| {
                !stored.deleted
                    && stored.row.version == expected
                    && stored.row.state == MemberState::Left
            });
            let stored = match current {
                Some(stored) if holds => stored,
                current => return Ok(MemberOutcome::Conflict(current.map(Stored::visible))),
            };
            let gone = tombstone(node, stored.row.incarnation, next);
            let condition = MemberCondition::VersionEquals(expected);
            match self.change(&gone, next, true, condition).await? {
                Lwt::Applied => return Ok(MemberOutcome::Applied(next)),
                Lwt::Unknown => return Ok(MemberOutcome::Indeterminate),
                Lwt::Refused => continue,
            }
        }
        Err(version_races())
    }

    /// One conditional batch in the membership partition: `row` written at
    /// `version` under `condition`, and the table version moved by one
    /// under the condition that it is still the one read.
    async fn change(
        &self,
        row: &MemberRow,
        version: MemberVersion,
        deleted: bool,
        condition: MemberCondition,
    ) -> Result<Lwt, BackendError> {
        let table = self.table_version().await?;
        let stamp = table.0 as i64 + 1;
        let bump = (stamp, table.0 as i64);
        let mut batch = Batch::new(BatchType::Logged);
        batch.set_consistency(Consistency::Quorum);
        batch.set_serial_consistency(Some(SerialConsistency::Serial));
        let result = match condition {
            MemberCondition::Absent => {
                batch.append_statement(self.insert_member.clone());
                batch.append_statement(self.bump_version.clone());
                let insert = (
                    row.node_id.0 as i64,
                    row.incarnation as i64,
                    row.state as i32,
                    row.heartbeat as i64,
                    row.gateway.as_str(),
                    row.admin.as_str(),
                    membership::encode_addresses(&row.cluster),
                    row.core_count as i32,
                    membership::encode_actors(&row.actors),
                    version.0 as i64,
                    stamp,
                    deleted,
                    membership::encode_timers(row.timers),
                );
                self.session.batch(&batch, (insert, bump)).await
            }
            MemberCondition::VersionEquals(expected) => {
                batch.append_statement(self.update_member.clone());
                batch.append_statement(self.bump_version.clone());
                let (fields, node, expected) =
                    update_values(row, version, stamp, deleted, expected);
                let update = (
                    fields.0, fields.1, fields.2, fields.3, fields.4, fields.5, fields.6, fields.7,
                    fields.8, fields.9, fields.10, fields.11, node, expected,
                );
                self.session.batch(&batch, (update, bump)).await
            }
        };
        lwt_answer(result)
    }
}

fn version_races() -> BackendError {
    BackendError::Scylla(Arc::new(std::io::Error::other(format!(
        "the membership table version moved {VERSION_RACES_MAX} times under one change; \
         nothing was written"
    ))))
}
