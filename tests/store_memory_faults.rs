//! The memory backend's fault injection does what a test asks.

use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use routerd::config::StoreConfig;
use routerd::store::{
    open_memory, CasVersion, Fault, LoadError, MembershipError, NodeId, RecordWrite, RouteVersion,
    TableVersion, WriteCondition, WriteError, WriteOutcome, FAULTS_MAX,
};
use wire::ObjectKey;

fn insert(id: u64) -> RecordWrite {
    RecordWrite {
        key: ObjectKey::new(1, 0, id),
        condition: WriteCondition::Absent,
        owner_node: NodeId(1),
        owner_incarnation: 1,
        route_version: RouteVersion(1),
        save_timepoint_ms: 0,
        state: vec![1],
    }
}

#[test]
fn a_failed_call_applies_nothing_and_faults_are_consumed_in_order() {
    let (store, faults) = open_memory(&StoreConfig::default());
    assert!(faults.inject(Fault::Fail, 2));
    assert!(matches!(
        block_on(store.write(insert(1))),
        Err(WriteError::Backend(_))
    ));
    assert!(matches!(
        block_on(store.load(insert(1).key)),
        Err(LoadError::Backend(_))
    ));
    assert_eq!(faults.pending(), 0);
    assert_eq!(block_on(store.load(insert(1).key)).expect("load"), None);
    assert_eq!(
        block_on(store.write(insert(1))).expect("write"),
        WriteOutcome::Applied(CasVersion(1))
    );
}

#[test]
fn a_timeout_is_indeterminate_applied_or_not_as_chosen() {
    let (store, faults) = open_memory(&StoreConfig::default());
    faults.inject(Fault::TimeoutApplied, 1);
    assert_eq!(
        block_on(store.write(insert(1))).expect("write"),
        WriteOutcome::Indeterminate
    );
    assert!(block_on(store.load(insert(1).key)).expect("load").is_some());
    faults.inject(Fault::TimeoutNotApplied, 1);
    assert_eq!(
        block_on(store.write(insert(2))).expect("write"),
        WriteOutcome::Indeterminate
    );
    assert_eq!(block_on(store.load(insert(2).key)).expect("load"), None);
    faults.inject(Fault::TimeoutApplied, 1);
    assert!(matches!(
        block_on(store.load(insert(1).key)),
        Err(LoadError::Timeout)
    ));
    faults.inject(Fault::TimeoutApplied, 1);
    assert!(matches!(
        block_on(store.list_members(TableVersion(0), NodeId(0))),
        Err(MembershipError::Timeout)
    ));
}

#[test]
fn a_delay_answers_later_and_past_the_timeout_is_indeterminate() {
    let config = StoreConfig {
        request_timeout_ms: 200,
        ..StoreConfig::default()
    };
    let (store, faults) = open_memory(&config);
    faults.inject(Fault::Delay(Duration::from_millis(50)), 1);
    let started = Instant::now();
    assert_eq!(
        block_on(store.write(insert(1))).expect("write"),
        WriteOutcome::Applied(CasVersion(1))
    );
    assert!(started.elapsed() >= Duration::from_millis(50));
    faults.inject(Fault::Delay(Duration::from_secs(10)), 1);
    let started = Instant::now();
    assert_eq!(
        block_on(store.write(insert(2))).expect("write"),
        WriteOutcome::Indeterminate
    );
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // The delayed write took effect: the caller must re-read to know.
    assert!(block_on(store.load(insert(2).key)).expect("load").is_some());
}

#[test]
fn injected_faults_are_bounded() {
    let (_store, faults) = open_memory(&StoreConfig::default());
    assert!(faults.inject(Fault::Fail, FAULTS_MAX));
    assert!(!faults.inject(Fault::Fail, 1));
    assert_eq!(faults.pending(), FAULTS_MAX);
}
