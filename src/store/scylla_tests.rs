use super::cql::*;
use super::members::*;
use super::*;
use crate::store::membership::{MemberState, MEMBERS_PAGE_MAX};

fn write(condition: WriteCondition) -> RecordWrite {
    RecordWrite {
        key: ObjectKey::new(3, 4, u64::MAX),
        condition,
        owner_node: NodeId(2),
        owner_incarnation: 3,
        route_version: RouteVersion(100),
        save_timepoint_ms: 5,
        state: vec![1, 2],
    }
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

const FULL: [&str; 10] = [
    "[applied]",
    "type_id",
    "zone_id",
    "object_id",
    "cas_version",
    "owner_node",
    "route_version",
    "save_timepoint_ms",
    "state",
    "owner_incarnation",
];

#[test]
fn applied_insert_gets_cas_one_and_update_gets_expected_plus_one() {
    let columns = names(&FULL);
    let mut values = vec![None; FULL.len()];
    values[0] = Some(CqlValue::Boolean(true));
    let insert = map_lwt_row(&columns, &values, &write(WriteCondition::Absent));
    assert_eq!(
        insert.ok(),
        Some(LwtResult::Done(WriteOutcome::Applied(CasVersion(1))))
    );
    let update = map_lwt_row(
        &names(&["[applied]"]),
        &values[..1],
        &write(WriteCondition::CasEquals(CasVersion(7))),
    );
    assert_eq!(
        update.ok(),
        Some(LwtResult::Done(WriteOutcome::Applied(CasVersion(8))))
    );
}

#[test]
fn refused_write_returns_the_current_record_from_the_row() {
    let columns = names(&FULL);
    let values = vec![
        Some(CqlValue::Boolean(false)),
        Some(CqlValue::Int(3)),
        Some(CqlValue::Int(4)),
        Some(CqlValue::BigInt(-1)),
        Some(CqlValue::BigInt(9)),
        Some(CqlValue::BigInt(1)),
        Some(CqlValue::BigInt(42)),
        Some(CqlValue::BigInt(77)),
        Some(CqlValue::Blob(vec![9, 9])),
        Some(CqlValue::BigInt(6)),
    ];
    let outcome = map_lwt_row(
        &columns,
        &values,
        &write(WriteCondition::CasEquals(CasVersion(8))),
    );
    let expected = RouteRecord {
        key: ObjectKey::new(3, 4, u64::MAX),
        owner_node: NodeId(1),
        owner_incarnation: 6,
        route_version: RouteVersion(42),
        save_timepoint_ms: 77,
        cas_version: CasVersion(9),
        state: vec![9, 9],
    };
    assert_eq!(
        outcome.ok(),
        Some(LwtResult::Done(WriteOutcome::Conflict(Some(expected))))
    );
}

#[test]
fn refused_update_of_a_missing_row_is_a_conflict_without_record() {
    let columns = names(&FULL);
    let mut values = vec![None; FULL.len()];
    values[0] = Some(CqlValue::Boolean(false));
    let outcome = map_lwt_row(
        &columns,
        &values,
        &write(WriteCondition::CasEquals(CasVersion(1))),
    );
    assert_eq!(
        outcome.ok(),
        Some(LwtResult::Done(WriteOutcome::Conflict(None)))
    );
}

#[test]
fn a_row_with_only_the_condition_columns_needs_a_read() {
    // Cassandra answers a refused `IF cas_version = ?` with just these.
    let columns = names(&["[applied]", "cas_version"]);
    let values = vec![Some(CqlValue::Boolean(false)), Some(CqlValue::BigInt(4))];
    let outcome = map_lwt_row(
        &columns,
        &values,
        &write(WriteCondition::CasEquals(CasVersion(1))),
    );
    assert_eq!(outcome.ok(), Some(LwtResult::ConflictNeedsRead));
}

#[test]
fn a_row_without_applied_is_an_error() {
    let columns = names(&["cas_version"]);
    let values = vec![Some(CqlValue::BigInt(4))];
    assert!(map_lwt_row(&columns, &values, &write(WriteCondition::Absent)).is_err());
    let columns = names(&["[applied]"]);
    let values = vec![Some(CqlValue::Int(1))];
    assert!(map_lwt_row(&columns, &values, &write(WriteCondition::Absent)).is_err());
}

#[test]
fn a_refused_row_with_a_null_field_is_an_error_not_a_default() {
    let columns = names(&FULL);
    let mut values = vec![None; FULL.len()];
    values[0] = Some(CqlValue::Boolean(false));
    values[4] = Some(CqlValue::BigInt(2));
    assert!(map_lwt_row(&columns, &values, &write(WriteCondition::Absent)).is_err());
}

#[test]
fn statements_use_lwt_and_the_keyspace() {
    assert!(insert_if_absent_cql("ks").ends_with("IF NOT EXISTS"));
    assert!(insert_if_absent_cql("ks").contains("INSERT INTO ks.routes"));
    assert!(update_if_cas_cql("ks").ends_with("IF cas_version = ?"));
    assert_eq!(update_if_cas_cql("ks").matches('?').count(), 10);
    assert_eq!(insert_if_absent_cql("ks").matches('?').count(), 8);
    assert!(insert_member_cql("ks").ends_with("IF NOT EXISTS"));
    assert_eq!(insert_member_cql("ks").matches('?').count(), 13);
    assert!(update_member_cql("ks").ends_with("WHERE p = 0 AND node_id = ? IF version = ?"));
    assert_eq!(update_member_cql("ks").matches('?').count(), 14);
    assert!(update_member_cql("ks").contains("timers = ?"));
    assert!(heartbeat_member_cql("ks").contains("SET heartbeat = ?, version = ? WHERE"));
    assert!(!heartbeat_member_cql("ks").contains("table_version"));
    assert!(bump_version_cql("ks").ends_with("WHERE p = 0 IF table_version = ?"));
    assert!(select_member_cql("ks").ends_with("WHERE p = 0 AND node_id = ?"));
    assert!(list_members_cql("ks").contains(&format!("LIMIT {}", MEMBERS_PAGE_MAX + 1)));
    assert!(select_record_cql("ks").contains("FROM ks.routes"));
    // Every member row and the version share one partition, so that a
    // change and its version move are one conditional batch.
    let table = membership_table_cql("ks");
    assert!(table.contains("table_version bigint STATIC"), "{table}");
    assert!(table.contains("PRIMARY KEY (p, node_id)"), "{table}");
    // A table made before the timers gets their column at open.
    assert!(table.contains("timers blob"), "{table}");
    assert_eq!(
        add_timers_column_cql("ks"),
        "ALTER TABLE ks.membership ADD timers blob"
    );
    assert!(timers_column_cql().contains("FROM system_schema.columns"));
    assert!(timers_column_cql().contains("column_name = 'timers'"));
    let tables = table_statements("ks");
    assert_eq!(tables.len(), 2);
    assert!(tables
        .iter()
        .all(|statement| statement.contains("IF NOT EXISTS")));
    let keyspace = create_keyspace_cql("ks", 3, Tablets::Disabled);
    assert!(keyspace.starts_with("CREATE KEYSPACE IF NOT EXISTS ks "));
    assert!(keyspace.contains("'replication_factor': 3"));
    assert!(create_keyspace_cql("ks", 0, Tablets::Disabled).contains("'replication_factor': 1"));
}

#[test]
fn the_keyspace_asks_for_vnodes_and_can_do_without_the_option() {
    let disabled = create_keyspace_cql("ks", 3, Tablets::Disabled);
    assert!(
        disabled.ends_with(" AND tablets = {'enabled': false}"),
        "{disabled}"
    );
    let plain = create_keyspace_cql("ks", 3, Tablets::Unspecified);
    assert!(!plain.contains("tablets"), "{plain}");
    assert!(disabled.starts_with(&plain));
    // Only a refusal of the statement's text or options is retried
    // without the option; a server that cannot run it is not.
    let refusal = |db: DbError| {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, "no".to_string()))
    };
    assert!(refuses_an_option(&refusal(DbError::SyntaxError)));
    assert!(refuses_an_option(&refusal(DbError::ConfigError)));
    assert!(refuses_an_option(&refusal(DbError::Invalid)));
    assert!(!refuses_an_option(&refusal(DbError::ServerError)));
    assert!(!refuses_an_option(&refusal(DbError::Unauthorized)));
    assert!(!refuses_an_option(&ExecutionError::EmptyPlan));
}

/// A table's partition key columns and how a statement names one
/// partition: by a bound value, or, for the membership partition, by
/// its one constant.
fn partition_key(cql: &str) -> &'static [&'static str] {
    if cql.contains("ks.routes") {
        &["type_id", "zone_id", "object_id"]
    } else if cql.contains("ks.membership") {
        &["p"]
    } else {
        panic!("a statement of no known table: {cql}")
    }
}

/// Whether `cql` names exactly one partition: an INSERT lists every key
/// column with a value; an UPDATE or SELECT says `column = ?` for each in
/// its WHERE, and never `IN`.
fn names_one_partition(cql: &str) -> bool {
    let key = partition_key(cql);
    if cql.starts_with("INSERT") {
        let columns = cql
            .split_once('(')
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(columns, _)| columns)
            .unwrap_or_default();
        let columns: Vec<&str> = columns.split(',').map(str::trim).collect();
        return key.iter().all(|column| columns.contains(column)) && cql.contains(" VALUES (");
    }
    let Some((_, condition)) = cql.split_once(" WHERE ") else {
        return false;
    };
    let condition = condition.split(" IF ").next().unwrap_or_default();
    key.iter().all(|column| {
        // `IN` on a partition key names several partitions; on the
        // membership partition's clustering column it does not.
        let bound = condition.contains(&format!("{column} = ?"))
            && !condition.contains(&format!("{column} IN"));
        bound || (*column == "p" && condition.starts_with("p = 0"))
    })
}

#[test]
fn every_statement_has_its_consistency_and_partition_rule() {
    let specs = statement_specs("ks");
    let texts: Vec<String> = [
        insert_if_absent_cql("ks"),
        update_if_cas_cql("ks"),
        select_record_cql("ks"),
        init_version_cql("ks"),
        select_version_cql("ks"),
        select_member_cql("ks"),
        select_members_cql("ks"),
        list_members_cql("ks"),
        heartbeat_member_cql("ks"),
        insert_member_cql("ks"),
        update_member_cql("ks"),
        bump_version_cql("ks"),
    ]
    .to_vec();
    // In the order `Statements` takes them.
    let cql: Vec<&str> = specs.iter().map(|spec| spec.cql.as_str()).collect();
    assert_eq!(cql, texts.iter().map(String::as_str).collect::<Vec<_>>());
    for spec in &specs {
        let lwt = spec.cql.contains(" IF ");
        let serial = matches!(
            spec.consistency,
            Consistency::Serial | Consistency::LocalSerial
        );
        if lwt {
            assert_eq!(spec.consistency, Consistency::Quorum, "{}", spec.cql);
            assert_eq!(
                spec.serial_consistency,
                Some(SerialConsistency::Serial),
                "{}",
                spec.cql
            );
            assert!(
                names_one_partition(&spec.cql),
                "LWT on one partition: {}",
                spec.cql
            );
        } else {
            assert_eq!(spec.serial_consistency, None, "{}", spec.cql);
        }
        // ScyllaDB refuses SERIAL over more than one partition.
        if serial {
            assert!(
                names_one_partition(&spec.cql),
                "SERIAL on one partition: {}",
                spec.cql
            );
        }
    }
    // Every read is SERIAL, of one partition: the membership listing too,
    // so that it sees every change the polled version counted.
    for read in specs.iter().filter(|spec| spec.cql.starts_with("SELECT")) {
        assert_eq!(read.consistency, Consistency::Serial, "{}", read.cql);
        assert!(names_one_partition(&read.cql), "{}", read.cql);
    }
    // The checker itself tells the shapes apart.
    assert!(!names_one_partition(
        "SELECT a FROM ks.routes WHERE type_id IN ? AND zone_id = ? AND object_id = ?"
    ));
    assert!(!names_one_partition(
        "SELECT a FROM ks.membership WHERE node_id = ?"
    ));
    assert!(!names_one_partition(
        "UPDATE ks.routes SET a = ? WHERE type_id = ? AND zone_id = ? IF a = ?"
    ));
    assert!(!names_one_partition(
        "INSERT INTO ks.routes (type_id, zone_id) VALUES (?, ?)"
    ));
}

#[test]
fn keyspace_names_are_identifiers_only() {
    assert!(validate_keyspace("routerd").is_ok());
    assert!(validate_keyspace("r_2").is_ok());
    for bad in ["", "1abc", "a-b", "a b", "ks; DROP", "a.b", &"k".repeat(49)] {
        assert!(validate_keyspace(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn timeouts_are_indeterminate_and_refusals_are_not() {
    use scylla::errors::WriteType;
    let timeout = ExecutionError::RequestTimeout(Duration::from_millis(5));
    assert!(write_error_is_indeterminate(&timeout));
    let cas_timeout = ExecutionError::LastAttemptError(RequestAttemptError::DbError(
        DbError::WriteTimeout {
            consistency: Consistency::Serial,
            received: 1,
            required: 2,
            write_type: WriteType::Cas,
        },
        "timeout".to_string(),
    ));
    assert!(write_error_is_indeterminate(&cas_timeout));
    let unavailable = ExecutionError::LastAttemptError(RequestAttemptError::DbError(
        DbError::Unavailable {
            consistency: Consistency::Quorum,
            required: 2,
            alive: 1,
        },
        "unavailable".to_string(),
    ));
    assert!(!write_error_is_indeterminate(&unavailable));
    assert!(!write_error_is_indeterminate(&ExecutionError::EmptyPlan));
}

/// A rolling upgrade is refused while an older node's heartbeat moves in
/// `members`; rows that stand still (a crashed node) or ended do not
/// hold the migration back.
#[test]
fn an_older_node_heartbeating_in_members_refuses_the_migration() {
    let (up, left, down) = (
        MemberState::Up as i32,
        MemberState::Left as i32,
        MemberState::Down as i32,
    );
    let before = [(1, up, 10), (2, up, 7), (3, left, 4), (4, down, 9)];
    // Node 1 heartbeats on: refused, naming it.
    let after = [(1, up, 16), (2, up, 7), (3, left, 4), (4, down, 9)];
    assert_eq!(legacy_heartbeat_moved(&before, &after), Some(1));
    // Nothing moved (every older node stopped, or crashed): migrated.
    assert_eq!(legacy_heartbeat_moved(&before, &before), None);
    // A lingering process of a node that left, or one declared down,
    // moves its heartbeat but serves nothing: migrated.
    let lingering = [(1, up, 10), (2, up, 7), (3, left, 5), (4, down, 11)];
    assert_eq!(legacy_heartbeat_moved(&before, &lingering), None);
    // A node that started between the two reads: refused.
    let started = [(1, up, 10), (2, up, 7), (5, up, 1)];
    assert_eq!(legacy_heartbeat_moved(&before, &started), Some(5));
    let message = MigrateError::OlderNodesRunning {
        keyspace: "routerd".to_string(),
        node: 1,
    }
    .to_string();
    assert!(message.contains("routerd.members (node 1)"), "{message}");
    assert!(message.contains("stop every node"), "{message}");
}
