//! Tests of the membership machine against the in-memory table.

use super::*;
use crate::store::MemberTable;

fn fenced(events: &[Event]) -> bool {
    events.iter().any(|e| matches!(e, Event::Fenced { .. }))
}

fn rejoined_as(events: &[Event], incarnation: u64) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::Rejoined { incarnation: i, .. } if *i == incarnation))
}

fn config() -> ClusterConfig {
    ClusterConfig::default()
}

fn node(id: u64) -> Membership {
    let advert = Advertisement {
        gateway: format!("127.0.0.1:{}", 7400 + id),
        core_count: 1,
        ..Advertisement::default()
    };
    Membership::new(NodeId(id), &config(), advert)
}

/// Performs `m`'s actions against `table` at `now`, answering each at
/// once; returns the events.
fn run(m: &mut Membership, table: &mut MemberTable, now: u64) -> Vec<Event> {
    run_failing(m, table, now, |_| false)
}

/// Performs `m`'s actions at `now` until it has none left, answering each
/// at once: a write whose tag `fails` picks is answered as failed (not
/// applied), lists and the other writes go to `table`; returns the events.
fn run_failing(
    m: &mut Membership,
    table: &mut MemberTable,
    now: u64,
    fails: impl Fn(&WriteTag) -> bool,
) -> Vec<Event> {
    m.on_tick(now);
    loop {
        m.check(now).unwrap();
        let actions = m.take_actions();
        if actions.is_empty() {
            return m.take_events();
        }
        for action in actions {
            match action {
                Action::Poll { nodes } => m.on_polled(now, table.poll(&nodes)),
                Action::List { since, after } => m.on_listed(now, table.list_page(since, after)),
                Action::Delete { node, version } => {
                    m.on_deleted(now, node, Ok(table.delete(node, version)))
                }
                Action::Write { tag, write } if fails(&tag) => m.on_written(
                    now,
                    tag,
                    &write,
                    Err(MemberOpError::TimedOut { waited_ms: 0 }),
                ),
                Action::Write { tag, write } => {
                    let outcome = table.write(&write);
                    m.on_written(now, tag, &write, Ok(outcome));
                }
            }
        }
    }
}

/// Ticks `m` every half interval from `from` to `to`.
fn run_until(m: &mut Membership, table: &mut MemberTable, from: u64, to: u64) -> Vec<Event> {
    let mut events = Vec::new();
    let mut now = from;
    while now <= to {
        events.extend(run(m, table, now));
        now += m.tick_ms();
    }
    events
}

#[test]
fn a_first_start_takes_incarnation_one_and_a_lease() {
    let mut table = MemberTable::default();
    let mut m = node(1);
    let events = run(&mut m, &mut table, 1000);
    assert!(events.contains(&Event::Joined { incarnation: 1 }));
    assert!(events.contains(&Event::Lease {
        until_ms: 1000 + config().fence_after_ms
    }));
    // Heartbeats renew the lease from their send time.
    let events = run_until(&mut m, &mut table, 1250, 1600);
    assert!(events.contains(&Event::Lease {
        until_ms: 1500 + config().fence_after_ms
    }));
    m.set_state(1600, MemberState::Up);
    run(&mut m, &mut table, 1600);
    assert_eq!(table.get(NodeId(1)).unwrap().state, MemberState::Up);
}

#[test]
fn a_start_with_the_id_of_a_live_node_is_refused() {
    let mut table = MemberTable::default();
    let mut live = node(1);
    run(&mut live, &mut table, 0);
    let mut second = node(1);
    run(&mut second, &mut table, 100);
    // The live node heartbeats; the second start sees it advance.
    run_until(&mut live, &mut table, 250, 600);
    let events = run(&mut second, &mut table, 700);
    assert_eq!(events, vec![Event::Refused { node: NodeId(1) }]);
    assert_eq!(table.get(NodeId(1)).unwrap().incarnation, 1);
}

#[test]
fn a_restart_after_a_crash_takes_the_next_incarnation_once_the_row_stood_still() {
    let mut table = MemberTable::default();
    let mut crashed = node(1);
    run(&mut crashed, &mut table, 0);
    // Crashed: it writes no more. A new start watches the row for
    // down_after before it takes the id.
    let mut restart = node(1);
    let early = run_until(
        &mut restart,
        &mut table,
        100,
        100 + config().down_after_ms - 1,
    );
    assert!(early.is_empty(), "{early:?}");
    let events = run(&mut restart, &mut table, 100 + config().down_after_ms);
    assert!(
        events.contains(&Event::Joined { incarnation: 2 }),
        "{events:?}"
    );
}

/// A start watching the row of its id counts the row's standing still
/// only over answered polls: after a store outage (no poll answered, and
/// no heartbeat of the process holding the id applied either) the first
/// poll restarts the watch, and that process's next heartbeat refuses the
/// start. Before, the first poll after an outage longer than
/// `down_after_ms` took the id from the live process.
#[test]
fn a_start_watch_restarts_after_a_store_outage() {
    let mut table = MemberTable::default();
    let mut live = node(1);
    run_until(&mut live, &mut table, 0, 300);
    let mut second = node(1);
    assert!(run(&mut second, &mut table, 400).is_empty());
    // The store is gone for longer than down_after: nobody polls or writes.
    let back = 400 + config().down_after_ms + 1_000;
    let events = run(&mut second, &mut table, back);
    assert!(events.is_empty(), "{events:?}");
    run(&mut live, &mut table, back + 10);
    let events = run(&mut second, &mut table, back + 250);
    assert_eq!(events, vec![Event::Refused { node: NodeId(1) }]);
    assert_eq!(table.get(NodeId(1)).unwrap().incarnation, 1);
}

/// A node started with a longer lease than the default (6 s, heartbeat
/// 500 ms: its own config passes with `down_after_ms` 7 s).
fn long_lease() -> ClusterConfig {
    ClusterConfig {
        fence_after_ms: 6000,
        down_after_ms: 7000,
        ..config()
    }
}

fn node_with(id: u64, config: &ClusterConfig) -> Membership {
    let advert = Advertisement {
        gateway: format!("127.0.0.1:{}", 7400 + id),
        core_count: 1,
        ..Advertisement::default()
    };
    Membership::new(NodeId(id), config, advert)
}

#[test]
fn the_wait_before_a_declaration_covers_the_rows_own_lease() {
    let own = timers_of(&config());
    // Same timers, or a row that carries none: this node's down_after.
    assert_eq!(down_wait_ms(own, Some(own)), config().down_after_ms);
    assert_eq!(down_wait_ms(own, None), config().down_after_ms);
    // A longer lease: that lease and twice the longer heartbeat interval.
    let long = timers_of(&long_lease());
    assert_eq!(down_wait_ms(own, Some(long)), 6000 + 2 * 500);
    let slow_beat = MemberTimers {
        heartbeat_interval_ms: 1500,
        fence_after_ms: 3000,
        down_after_ms: 6000,
    };
    assert_eq!(down_wait_ms(own, Some(slow_beat)), 3000 + 2 * 1500);
    // A shorter lease never shortens this node's own wait.
    assert_eq!(
        down_wait_ms(long, Some(own)),
        long_lease().down_after_ms,
        "{long:?}"
    );
    // A row's values are not trusted to be small.
    let absurd = MemberTimers {
        heartbeat_interval_ms: u64::MAX,
        fence_after_ms: u64::MAX,
        down_after_ms: u64::MAX,
    };
    assert_eq!(down_wait_ms(own, Some(absurd)), u64::MAX);
}

#[test]
fn a_restart_waits_out_the_lease_of_the_process_it_replaces_not_its_own_config() {
    let mut table = MemberTable::default();
    let mut crashed = node_with(1, &long_lease());
    run(&mut crashed, &mut table, 0);
    assert_eq!(
        table.get(NodeId(1)).unwrap().timers,
        Some(timers_of(&long_lease()))
    );
    // Restarted with the default timers: its own down_after (4 s) is
    // shorter than the old process's lease (6 s) and margin.
    let mut restart = node(1);
    let early = run_until(&mut restart, &mut table, 100, 100 + 7000 - 1);
    assert!(early.is_empty(), "{early:?}");
    let events = run(&mut restart, &mut table, 100 + 7000);
    assert!(
        events.contains(&Event::Joined { incarnation: 2 }),
        "{events:?}"
    );
    assert_eq!(
        table.get(NodeId(1)).unwrap().timers,
        Some(timers_of(&config())),
        "the row carries the new process's timers"
    );
}

#[test]
fn a_state_asked_for_during_a_heartbeat_counts_as_written_only_once_written() {
    let mut table = MemberTable::default();
    let mut m = node(1);
    run(&mut m, &mut table, 0);
    // A heartbeat leaves carrying `joining`...
    m.on_tick(config().heartbeat_interval_ms);
    let in_flight = m.take_actions();
    let Some(Action::Write { tag, write }) = in_flight
        .into_iter()
        .find(|action| matches!(action, Action::Write { .. }))
    else {
        panic!("a heartbeat is due");
    };
    assert_eq!(write.row.state, MemberState::Joining);
    // ... `left` is asked for meanwhile, and then that heartbeat applies:
    // the store holds `joining`, so `left` is not written yet.
    let now = config().heartbeat_interval_ms + 1;
    m.set_state(now, MemberState::Left);
    let outcome = table.write(&write);
    m.on_written(now, tag, &write, Ok(outcome));
    assert_eq!(m.written_state(), Some(MemberState::Joining));
    // The next heartbeat carries it.
    run(&mut m, &mut table, now + 1);
    assert_eq!(m.written_state(), Some(MemberState::Left));
    assert_eq!(table.get(NodeId(1)).unwrap().state, MemberState::Left);
}

#[test]
fn a_restart_after_a_clean_leave_or_a_declaration_joins_at_once() {
    let mut table = MemberTable::default();
    let mut first = node(1);
    run(&mut first, &mut table, 0);
    first.set_state(10, MemberState::Left);
    run(&mut first, &mut table, 10);
    assert_eq!(table.get(NodeId(1)).unwrap().state, MemberState::Left);
    let mut again = node(1);
    let events = run(&mut again, &mut table, 20);
    assert!(
        events.contains(&Event::Joined { incarnation: 2 }),
        "{events:?}"
    );
}

#[test]
fn an_observer_declares_a_stalled_member_down_after_down_after_of_its_own_clock() {
    let mut table = MemberTable::default();
    let mut a = node(1);
    let mut b = node(2);
    run(&mut a, &mut table, 0);
    run(&mut b, &mut table, 0);
    // Both heartbeat for a while; then `a` stops (a crash or a pause).
    for now in (250..=1000).step_by(250) {
        run(&mut a, &mut table, now);
        run(&mut b, &mut table, now);
    }
    // b's clock: it saw a's last heartbeat at 1000 (or 1250).
    let before = run_until(&mut b, &mut table, 1250, 1000 + config().down_after_ms - 1);
    assert!(
        before
            .iter()
            .all(|e| !matches!(e, Event::Member { row } if row.state == MemberState::Down)),
        "declared too early: {before:?}"
    );
    let after = run_until(
        &mut b,
        &mut table,
        1000 + config().down_after_ms,
        1500 + config().down_after_ms,
    );
    let down = after.iter().any(|e| {
        matches!(e, Event::Member { row } if row.node_id == NodeId(1) && row.state == MemberState::Down)
    });
    assert!(down, "{after:?}");
    // `a` resumes: its next heartbeat is refused, it fences and rejoins
    // with a higher incarnation.
    let events = run(&mut a, &mut table, 9000);
    assert!(fenced(&events), "{events:?}");
    assert!(rejoined_as(&events, 2), "{events:?}");
}

#[test]
fn a_late_heartbeat_wins_over_a_declaration() {
    let mut table = MemberTable::default();
    let mut a = node(1);
    let mut b = node(2);
    run(&mut a, &mut table, 0);
    run(&mut b, &mut table, 0);
    // b polls every tick while a stands still, and decides to declare a
    // down on what it read...
    let late = config().down_after_ms;
    let tick = b.tick_ms();
    run_until(&mut b, &mut table, tick, late - tick);
    b.on_tick(late);
    let polled = b
        .take_actions()
        .into_iter()
        .find_map(|action| match action {
            Action::Poll { nodes } => Some(nodes),
            _ => None,
        });
    b.on_polled(late, table.poll(&polled.expect("a poll is due")));
    let declare = b.take_actions();
    let Some((tag, write)) = declare.iter().find_map(|action| match action {
        Action::Write {
            tag: tag @ WriteTag::DeclareDown { .. },
            write,
        } => Some((*tag, write.clone())),
        _ => None,
    }) else {
        panic!("no declaration: {declare:?}");
    };
    // ...but a's heartbeat lands first: the declaration's CAS fails.
    run(&mut a, &mut table, 500);
    let outcome = table.write(&write);
    assert!(matches!(outcome, MemberOutcome::Conflict(_)));
    b.on_written(late, tag, &write, Ok(outcome));
    assert_eq!(table.get(NodeId(1)).unwrap().state, MemberState::Joining);
    assert!(!b
        .take_events()
        .iter()
        .any(|e| matches!(e, Event::Member { row } if row.state == MemberState::Down)));
}

/// Performs `m`'s actions at `now`, answering every heartbeat write as
/// failed (not applied); lists and other writes go to `table`.
fn run_with_failing_heartbeats(
    m: &mut Membership,
    table: &mut MemberTable,
    now: u64,
) -> Vec<Event> {
    run_failing(m, table, now, |tag| {
        matches!(tag, WriteTag::Heartbeat { .. })
    })
}

#[test]
fn a_lease_that_ran_out_pauses_the_node_and_a_later_heartbeat_renews_it() {
    // The store stops answering heartbeats for longer than fence_after,
    // then answers again before anyone declared the node down: the node
    // stopped serving at the lease's end, keeps its incarnation (and so its
    // objects), and serves again once a heartbeat applies.
    let mut table = MemberTable::default();
    let mut m = node(1);
    let events = run(&mut m, &mut table, 0);
    assert!(events.contains(&Event::Joined { incarnation: 1 }));
    let lease_end = config().fence_after_ms;
    let mut failing = Vec::new();
    let mut now = m.tick_ms();
    while now <= lease_end + m.tick_ms() {
        failing.extend(run_with_failing_heartbeats(&mut m, &mut table, now));
        now += m.tick_ms();
    }
    assert!(
        failing.iter().all(|e| !matches!(e, Event::Lease { .. })),
        "{failing:?}"
    );
    let lapse = failing.iter().find_map(|e| match e {
        Event::LeaseLapsed { at_ms, cause } => Some((*at_ms, cause.clone())),
        _ => None,
    });
    let (at_ms, cause) = lapse.expect("the lapse is reported");
    assert_eq!(at_ms, lease_end);
    assert!(
        cause.contains("no answer"),
        "the cause names the failure: {cause}"
    );
    assert!(!m.is_serving(now));
    assert!(!fenced(&failing), "a lapse is not a fence: {failing:?}");
    let events = run_until(&mut m, &mut table, now, now + 1_000);
    assert!(!fenced(&events), "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::LeaseRenewed { .. })),
        "{events:?}"
    );
    assert!(m.is_serving(now + 1_000));
    assert_eq!(m.incarnation(), Some(1));
    assert_eq!(table.get(NodeId(1)).map(|r| r.incarnation), Some(1));
}

#[test]
fn a_lost_heartbeat_answer_extends_nothing_and_its_write_is_adopted() {
    let mut table = MemberTable::default();
    let mut m = node(1);
    run(&mut m, &mut table, 0);
    m.on_tick(500);
    let actions = m.take_actions();
    let (tag, write) = actions
        .into_iter()
        .find_map(|action| match action {
            Action::Write { tag, write } => Some((tag, write)),
            _ => None,
        })
        .expect("a heartbeat");
    // Applied in the store, but the answer never came.
    assert!(matches!(table.write(&write), MemberOutcome::Applied(_)));
    m.on_written(
        500,
        tag,
        &write,
        Err(MemberOpError::TimedOut { waited_ms: 0 }),
    );
    assert!(
        m.take_events().is_empty(),
        "no lease from an unknown outcome"
    );
    // The next heartbeat conflicts with that write, adopts it, and the
    // one after extends the lease: no fence.
    let events = run_until(&mut m, &mut table, 1000, 1500);
    assert!(!fenced(&events), "{events:?}");
    assert!(
        events.iter().any(|e| matches!(e, Event::Lease { .. })),
        "{events:?}"
    );
}

#[test]
fn a_node_cut_from_the_store_and_declared_down_meanwhile_rejoins_with_the_next_incarnation() {
    let mut table = MemberTable::default();
    let mut m = node(1);
    let mut observer = node(2);
    run(&mut m, &mut table, 0);
    run(&mut observer, &mut table, 0);
    let (events, now) = cut_off_until_declared_down(&mut m, &mut observer, &mut table);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::LeaseLapsed { .. })),
        "{events:?}"
    );
    assert_eq!(table.get(NodeId(1)).unwrap().state, MemberState::Down);
    // The store answers again: the heartbeat is refused, the node fences
    // and takes the next incarnation.
    let events = run(&mut m, &mut table, now);
    assert!(fenced(&events), "{events:?}");
    assert!(rejoined_as(&events, 2), "{events:?}");
    assert_eq!(table.get(NodeId(1)).unwrap().incarnation, 2);
}

/// Fails every store operation of `m` from its next tick until `observer`
/// declared it down; returns `m`'s events and the time.
fn cut_off_until_declared_down(
    m: &mut Membership,
    observer: &mut Membership,
    table: &mut MemberTable,
) -> (Vec<Event>, u64) {
    let mut now = m.tick_ms();
    let mut events = Vec::new();
    while table.get(NodeId(1)).unwrap().state != MemberState::Down {
        m.on_tick(now);
        for action in m.take_actions() {
            match action {
                Action::Poll { .. } => m.on_poll_failed(),
                Action::List { .. } => m.on_list_failed(),
                Action::Delete { node, .. } => {
                    m.on_deleted(now, node, Err(MemberOpError::TimedOut { waited_ms: 0 }))
                }
                Action::Write { tag, write } => m.on_written(
                    now,
                    tag,
                    &write,
                    Err(MemberOpError::TimedOut { waited_ms: 0 }),
                ),
            }
        }
        events.extend(m.take_events());
        run(observer, table, now);
        now += m.tick_ms();
        assert!(now < 10 * config().down_after_ms, "never declared down");
    }
    (events, now)
}

#[test]
fn a_drain_stays_asked_for_through_a_fence_and_a_rejoin() {
    // Asked for while serving, then fenced: the rejoin wrote `up`, and
    // the others placed new objects on the draining node again. Asked for
    // while fenced: it was dropped.
    for asked_while_fenced in [false, true] {
        let mut table = MemberTable::default();
        let mut m = node(1);
        let mut observer = node(2);
        run(&mut m, &mut table, 0);
        run(&mut observer, &mut table, 0);
        m.set_state(0, MemberState::Up);
        if !asked_while_fenced {
            m.set_state(0, MemberState::Draining);
        }
        run(&mut m, &mut table, 0);
        let (_, now) = cut_off_until_declared_down(&mut m, &mut observer, &mut table);
        if asked_while_fenced {
            m.set_state(now, MemberState::Draining);
        }
        let events = run(&mut m, &mut table, now);
        assert!(rejoined_as(&events, 2), "{events:?}");
        let tick = m.tick_ms();
        run_until(&mut m, &mut table, now, now + 2 * tick);
        assert_eq!(
            table.get(NodeId(1)).unwrap().state,
            MemberState::Draining,
            "asked while fenced: {asked_while_fenced}"
        );
    }
}

/// Starts a second process with `m`'s id once `m`'s row stood still for
/// `down_after` (as `m` frozen or cut off from the store would leave it),
/// from `from`; returns it serving, and the time.
fn take_over(table: &mut MemberTable, from: u64) -> (Membership, u64) {
    let mut second = node(1);
    let mut now = from;
    loop {
        let events = run(&mut second, table, now);
        if events.iter().any(|e| matches!(e, Event::Joined { .. })) {
            return (second, now);
        }
        assert!(now < from + 10 * config().down_after_ms, "no takeover");
        now += second.tick_ms();
    }
}

#[test]
fn a_process_whose_id_was_taken_by_a_live_process_exits_instead_of_rejoining() {
    let mut table = MemberTable::default();
    let mut first = node(1);
    run(&mut first, &mut table, 0);
    // `first` is cut off from the store; another process takes the id.
    let (mut second, now) = take_over(&mut table, 100);
    assert_eq!(second.incarnation(), Some(2));
    // The cut heals: `first`'s heartbeat is refused by incarnation 2, a
    // row it never wrote. It watches instead of taking incarnation 3...
    let events = run(&mut first, &mut table, now);
    assert!(fenced(&events), "{events:?}");
    assert!(
        !events.iter().any(|e| matches!(e, Event::Rejoined { .. })),
        "{events:?}"
    );
    assert_eq!(table.get(NodeId(1)).unwrap().incarnation, 2);
    // ...and the live process heartbeats: `first` must go.
    let events = run_until(&mut second, &mut table, now, now + 1_000);
    assert!(!fenced(&events), "{events:?}");
    let events = run(&mut first, &mut table, now + 1_000);
    assert_eq!(events, vec![Event::TakenOver { incarnation: 2 }]);
    assert_eq!(table.get(NodeId(1)).unwrap().incarnation, 2);
    assert_eq!(second.incarnation(), Some(2));
}

#[test]
fn a_process_whose_id_was_taken_by_a_process_that_died_rejoins_after_down_after() {
    let mut table = MemberTable::default();
    let mut first = node(1);
    run(&mut first, &mut table, 0);
    let (_second, now) = take_over(&mut table, 100);
    // The second process dies at once; `first` watches its still row.
    let events = run(&mut first, &mut table, now);
    assert!(fenced(&events), "{events:?}");
    let early = run_until(
        &mut first,
        &mut table,
        now + 250,
        now + config().down_after_ms - 250,
    );
    assert!(
        !early
            .iter()
            .any(|e| matches!(e, Event::Rejoined { .. } | Event::TakenOver { .. })),
        "{early:?}"
    );
    let events = run_until(
        &mut first,
        &mut table,
        now + config().down_after_ms,
        now + config().down_after_ms + 500,
    );
    assert!(rejoined_as(&events, 3), "{events:?}");
}

#[test]
fn a_clock_jump_ends_the_lease_and_only_a_later_heartbeat_renews_it() {
    let mut table = MemberTable::default();
    let mut m = node(1);
    run(&mut m, &mut table, 0);
    // A heartbeat leaves at 500...
    m.on_tick(500);
    let (tag, write) = m
        .take_actions()
        .into_iter()
        .find_map(|action| match action {
            Action::Write { tag, write } => Some((tag, write)),
            _ => None,
        })
        .expect("a heartbeat");
    // ...time jumps at 600 (a suspend), then that heartbeat's answer comes.
    m.clock_jumped(600, "a suspend".into());
    let events = m.take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::LeaseLapsed { at_ms: 600, .. })),
        "{events:?}"
    );
    assert!(!m.is_serving(600));
    let outcome = table.write(&write);
    m.on_written(601, tag, &write, Ok(outcome));
    let events = m.take_events();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Lease { .. })),
        "a heartbeat sent before the jump renews nothing: {events:?}"
    );
    assert!(!m.is_serving(601));
    // The heartbeat sent at the jump does.
    let events = run(&mut m, &mut table, 602);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::LeaseRenewed { .. })),
        "{events:?}"
    );
    assert!(m.is_serving(602));
    assert_eq!(m.incarnation(), Some(1));
}

#[path = "membership_observing_tests.rs"]
mod observing;
