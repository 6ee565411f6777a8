//! The ScyllaDB backend's membership part: the members table's statements
//! and the membership lane's requests (a write is one lightweight
//! transaction on the node's row; a list reads every row).

use super::*;

/// The columns of a membership row after its key, in statement order.
const MEMBER_COLUMNS: &str =
    "incarnation, state, heartbeat, gateway, admin, cluster, core_count, actors, version";

pub(crate) fn insert_member_cql(keyspace: &str) -> String {
    format!(
        "INSERT INTO {keyspace}.members (node_id, {MEMBER_COLUMNS}) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
    )
}

pub(crate) fn update_member_cql(keyspace: &str) -> String {
    format!(
        "UPDATE {keyspace}.members SET incarnation = ?, state = ?, heartbeat = ?, gateway = ?, \
         admin = ?, cluster = ?, core_count = ?, actors = ?, version = ? \
         WHERE node_id = ? IF version = ?"
    )
}

pub(crate) fn select_member_cql(keyspace: &str) -> String {
    format!("SELECT node_id, {MEMBER_COLUMNS} FROM {keyspace}.members WHERE node_id = ?")
}

pub(crate) fn list_members_cql(keyspace: &str) -> String {
    format!("SELECT node_id, {MEMBER_COLUMNS} FROM {keyspace}.members LIMIT {MEMBERS_MAX}")
}

impl Statements {
    pub(super) async fn write_member(
        &self,
        write: &MemberWrite,
    ) -> Result<MemberOutcome, BackendError> {
        let row = &write.row;
        let next = write.next_version();
        let fields = (
            row.incarnation as i64,
            row.state as i32,
            row.heartbeat as i64,
            row.gateway.as_str(),
            row.admin.as_str(),
            membership::encode_addresses(&row.cluster),
            row.core_count as i32,
            membership::encode_actors(&row.actors),
            next.0 as i64,
        );
        let result = match write.condition {
            MemberCondition::Absent => {
                let values = (row.node_id.0 as i64, fields);
                self.session
                    .execute_unpaged(&self.insert_member, values)
                    .await
            }
            MemberCondition::VersionEquals(expected) => {
                let values = (fields, row.node_id.0 as i64, expected.0 as i64);
                self.session
                    .execute_unpaged(&self.update_member, values)
                    .await
            }
        };
        let result = match result {
            Ok(result) => result,
            Err(error) if write_error_is_indeterminate(&error) => {
                return Ok(MemberOutcome::Indeterminate)
            }
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
            Some(true) => Ok(MemberOutcome::Applied(next)),
            // The LWT row's other columns differ between Scylla and
            // Cassandra: read the row that refused the write instead.
            Some(false) => Ok(MemberOutcome::Conflict(
                self.select_members(&self.select_member, (row.node_id.0 as i64,))
                    .await?
                    .pop(),
            )),
            None => Err(BackendError::Corrupt("LWT result without [applied]")),
        }
    }

    pub(super) async fn list_members(&self) -> Result<Vec<MemberRow>, BackendError> {
        let mut members = self.select_members(&self.list_members, ()).await?;
        members.sort_by_key(|member| member.node_id);
        members.truncate(MEMBERS_MAX);
        Ok(members)
    }

    async fn select_members(
        &self,
        statement: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> Result<Vec<MemberRow>, BackendError> {
        let result = self
            .session
            .execute_unpaged(statement, values)
            .await
            .map_err(scylla_error)?
            .into_rows_result()
            .map_err(scylla_error)?;
        let mut members = Vec::new();
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
        );
        for row in result.rows::<Columns>().map_err(scylla_error)? {
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
            ) = row.map_err(scylla_error)?;
            let corrupt = |error: membership::DecodeError| BackendError::Corrupt(error.0);
            members.push(MemberRow {
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
                version: MemberVersion(version as u64),
            });
        }
        Ok(members)
    }
}
