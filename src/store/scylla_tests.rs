use super::*;

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
    assert_eq!(insert_member_cql("ks").matches('?').count(), 10);
    assert!(update_member_cql("ks").ends_with("WHERE node_id = ? IF version = ?"));
    assert_eq!(update_member_cql("ks").matches('?').count(), 11);
    assert!(select_member_cql("ks").ends_with("WHERE node_id = ?"));
    assert!(list_members_cql("ks").contains(&format!("LIMIT {MEMBERS_MAX}")));
    assert!(select_record_cql("ks").contains("FROM ks.routes"));
    let schema = schema_statements("ks", 3);
    assert_eq!(schema.len(), 3);
    assert!(schema[0].contains("'replication_factor': 3"));
    assert!(schema
        .iter()
        .all(|statement| statement.contains("IF NOT EXISTS")));
    assert!(schema_statements("ks", 0)[0].contains("'replication_factor': 1"));
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
