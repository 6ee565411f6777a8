//! Membership, as a sans-IO state machine: this node's join, heartbeat and
//! lease, and its view of the other members, all through the store's
//! membership table (`store::membership`) and this node's own monotonic
//! clock. The driver performs its actions (table reads and writes) and
//! feeds back their answers and the time; the simulator drives the same
//! machine.
//!
//! - Join: a start reads its row. No row: insert incarnation 1. A row that
//!   ended (`left`, `down`): take the next incarnation by CAS on the
//!   version read. A live row: watch it; its heartbeat advancing means a
//!   live process holds the id, and the start is refused; standing still
//!   for `down_wait_ms` (the longer of this process's `down_after_ms` and
//!   the lease of the process that wrote the row) means that process is
//!   gone, and the start takes the next incarnation as an observer would
//!   declare it down.
//! - Heartbeat: every `heartbeat_interval_ms`, a CAS on the version this
//!   node wrote last. Applied: the lease runs to the write's send time +
//!   `fence_after_ms`. A lease that runs out stops the node serving (it
//!   keeps everything) until a later heartbeat applies: that CAS on the
//!   version it wrote proves nobody declared it down meanwhile. Refused
//!   because an observer declared it down: the node fences (its
//!   incarnation is over) and rejoins with a higher one. Refused because
//!   the row shows an incarnation this process did not take: another
//!   process took the id; this one watches the row as a start does, and
//!   exits if that heartbeat moves (it never takes a live process's id).
//! - Observing (`observing.rs`): every half interval a node polls the
//!   table version and the rows of the few peers it watches (its
//!   successors on a hash ring of the live members), and lists the rows
//!   changed since the version it last listed at, only when the version
//!   moved. A watched member whose row stood still (one version) for
//!   `down_wait_ms` since this node first read it is declared down by CAS
//!   on that version, so a late heartbeat wins and the declaration fails.
//!   The lowest live node deletes the rows of nodes that `left`
//!   `left_retention_ms` after it first saw them so.
//!
//! See `ClusterConfig::check_timing` for why a fenced node has stopped
//! serving before anyone may declare it down. That rule spans two
//! processes' configs, so every row carries its process's timers, and a
//! row is taken for dead only after the longer of this node's
//! `down_after_ms` and the row's own lease with the rule's margin
//! (`down_wait_ms`): a member started with other timers than this node's
//! is never declared down while it may still serve.

mod check;
mod joining;
mod observing;

use std::collections::BTreeMap;

use crate::config::ClusterConfig;
use crate::ids::NodeId;
use crate::store::{
    AdvertisedActor, MemberCondition, MemberOutcome, MemberRow, MemberState, MemberTimers,
    MemberVersion, MemberWrite, MembershipError, TableVersion,
};

pub use observing::WATCHED_PER_NODE;
use observing::{Listing, Observed};

/// The timers a node running `config` writes in its row.
pub fn timers_of(config: &ClusterConfig) -> MemberTimers {
    MemberTimers {
        heartbeat_interval_ms: config.heartbeat_interval_ms,
        fence_after_ms: config.fence_after_ms,
        down_after_ms: config.down_after_ms,
    }
}

/// How long a row written with `theirs` must stand still on the clock of a
/// node running `own` before that node may take its process for dead: its
/// own `down_after_ms`, and never less than the row's process's lease plus
/// the timing rule's margin (twice the longer heartbeat interval). With
/// the same timers on both sides that is `down_after_ms` (the config check
/// holds it to at least the lease plus the margin). A row without timers
/// (written by a build that did not record them) is judged by this node's
/// own, as every node then had to run the same ones.
pub fn down_wait_ms(own: MemberTimers, theirs: Option<MemberTimers>) -> u64 {
    let Some(theirs) = theirs else {
        return own.down_after_ms;
    };
    let margin = own
        .heartbeat_interval_ms
        .max(theirs.heartbeat_interval_ms)
        .saturating_mul(2);
    own.down_after_ms
        .max(theirs.fence_after_ms.saturating_add(margin))
}

/// What this node advertises in its row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advertisement {
    pub gateway: String,
    pub admin: String,
    pub cluster: Vec<String>,
    pub core_count: u32,
    pub actors: Vec<AdvertisedActor>,
}

/// Why a membership write was made; its answer comes back with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteTag {
    /// Taking an incarnation (a start or a rejoin).
    Join { sent_at_ms: u64 },
    /// A heartbeat (or a state change riding one).
    Heartbeat { heartbeat: u64, sent_at_ms: u64 },
    /// Declaring `node` down.
    DeclareDown { node: NodeId },
}

/// Why a membership table operation came back without an answer: the
/// write it carried may or may not have happened.
#[derive(Debug, thiserror::Error)]
pub enum MemberOpError {
    /// The store answered with an error.
    #[error("the store answered: {0}")]
    Store(#[from] MembershipError),
    /// No answer within the driver's wait.
    #[error("no answer within {waited_ms} ms")]
    TimedOut { waited_ms: u64 },
    /// The driver did not send it: the node is leaving.
    #[error("not sent: the node is leaving")]
    NotSent,
    /// The node is cut off from the store (a network fault).
    #[error("cut off from the store")]
    CutOff,
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read the table version and the rows of `nodes` (`store::Store::
    /// poll_members`); answer with `on_polled` or `on_poll_failed`.
    Poll { nodes: Vec<NodeId> },
    /// Read one page of the rows changed after `since` with node ids above
    /// `after`; answer with `on_listed` or `on_list_failed`.
    List { since: TableVersion, after: NodeId },
    /// One conditional write; answer with `on_written`.
    Write { tag: WriteTag, write: MemberWrite },
    /// Delete the row of `node`, which left, by CAS on `version`; answer
    /// with `on_deleted`.
    Delete {
        node: NodeId,
        version: MemberVersion,
    },
}

/// What happened, for the driver to pass on (to every core's router, the
/// catalog, the links, the admin view).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// This node holds `incarnation` (first start).
    Joined { incarnation: u64 },
    /// A live process holds this node's id: the start must fail.
    Refused { node: NodeId },
    /// The lease now runs until `until_ms`.
    Lease { until_ms: u64 },
    /// The lease ends at `at_ms` (its end, or now when time jumped) with no
    /// heartbeat applied to renew it: serve nothing from then until one
    /// does. `cause` says why, for the log.
    LeaseLapsed { at_ms: u64, cause: String },
    /// A heartbeat applied after a lapse: serving again, same incarnation.
    LeaseRenewed { lapsed_for_ms: u64 },
    /// Declared down: this incarnation is over; serve nothing until the
    /// rejoin.
    Fenced { cause: String },
    /// Another process took this node's id and heartbeats as
    /// `incarnation`: this process must exit without serving again.
    TakenOver { incarnation: u64 },
    /// Rejoined as `incarnation` after a fence; the lease runs to
    /// `lease_until_ms`.
    Rejoined {
        incarnation: u64,
        lease_until_ms: u64,
    },
    /// Another member's incarnation or state changed.
    Member { row: MemberRow },
    /// Another member's row was deleted (it had left).
    Removed { node: NodeId },
}

#[derive(Clone, Debug)]
enum Phase {
    /// Reading this node's own row to take an incarnation; `watching` a
    /// live row: its version and when it was first seen so.
    Starting {
        watching: Option<(MemberVersion, u64, u64)>,
    },
    /// A join write is in flight.
    Joining,
    Serving(Serving),
    /// Declared down: rejoining. `row` is the row that told us.
    Fenced {
        row: Option<MemberRow>,
    },
    /// The row shows an incarnation this process did not take, not ended:
    /// watched as a start watches a live row (its version and heartbeat,
    /// and when they were first seen so).
    Displaced {
        watching: (MemberVersion, u64, u64),
    },
    /// Refused: another process holds the id. Terminal.
    Refused,
}

#[derive(Clone, Debug)]
struct Serving {
    incarnation: u64,
    version: MemberVersion,
    heartbeat: u64,
    state: MemberState,
    /// A heartbeat write in flight: its heartbeat value.
    in_flight: Option<u64>,
    next_heartbeat_ms: u64,
    /// A state to write with the next heartbeat.
    wanted_state: MemberState,
    /// The lease this node's router holds: the send time of the last
    /// applied join or heartbeat + `fence_after_ms`. Past it the node
    /// serves nothing until a later heartbeat applies.
    lease_until_ms: u64,
    /// Since when the lease has been out (`None`: it holds).
    lapsed_at_ms: Option<u64>,
    /// Heartbeats sent before this time extend nothing: time jumped
    /// after them (`clock_jumped`), so their send time undercounts.
    renew_from_ms: u64,
    /// The send time of the last heartbeat the store applied.
    last_applied_ms: u64,
    /// What went wrong with the last heartbeat that did not apply.
    last_failure: Option<String>,
}

/// One node's membership machine.
pub struct Membership {
    me: NodeId,
    /// This node's heartbeat interval, lease and wait before declaring,
    /// as its row carries them.
    timers: MemberTimers,
    left_retention_ms: u64,
    advert: Advertisement,
    phase: Phase,
    observed: BTreeMap<NodeId, Observed>,
    /// A poll in flight: whether it asked for this node's own row.
    polling: Option<bool>,
    /// When the last poll was answered; `None` after one failed (see
    /// `observing::restart_watch_after_gap`).
    polled_ok_ms: Option<u64>,
    next_poll_ms: u64,
    /// A listing in progress.
    listing: Option<Listing>,
    /// The table version the view holds every change up to.
    listed: Option<TableVersion>,
    /// The peers this node watches, while `ring_dirty` is false.
    watched: Vec<NodeId>,
    /// The lowest live node id (this one included), with `watched`.
    lowest_live: NodeId,
    ring_dirty: bool,
    /// Whether this node took an incarnation before (a later one is a
    /// rejoin).
    ever_joined: bool,
    /// The state last asked for (`set_state`), whatever the phase then: a
    /// rejoin advertises it again. Dropped or forgotten, a drain asked for
    /// while fenced, or before a fence, came back as `up`, and the others
    /// placed new objects on the draining node.
    asked_state: Option<MemberState>,
    /// The highest incarnation this process has held: a row showing a
    /// higher one was written by another process.
    held_incarnation: u64,
    actions: Vec<Action>,
    events: Vec<Event>,
    /// What `check` saw last, to hold the next step to it.
    checked: check::Checked,
}

impl Membership {
    pub fn new(me: NodeId, config: &ClusterConfig, advert: Advertisement) -> Membership {
        Membership {
            me,
            timers: timers_of(config),
            left_retention_ms: config.left_retention_ms,
            advert,
            phase: Phase::Starting { watching: None },
            observed: BTreeMap::new(),
            polling: None,
            polled_ok_ms: None,
            next_poll_ms: 0,
            listing: None,
            listed: None,
            watched: Vec::new(),
            lowest_live: me,
            ring_dirty: true,
            ever_joined: false,
            asked_state: None,
            held_incarnation: 0,
            actions: Vec::new(),
            events: Vec::new(),
            checked: check::Checked::default(),
        }
    }

    /// How often the driver should call `on_tick`.
    pub fn tick_ms(&self) -> u64 {
        (self.timers.heartbeat_interval_ms / 2).max(1)
    }

    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// This node's incarnation, once it has one.
    pub fn incarnation(&self) -> Option<u64> {
        match &self.phase {
            Phase::Serving(serving) => Some(serving.incarnation),
            _ => None,
        }
    }

    /// This node's state as written (or to be written).
    pub fn state(&self) -> Option<MemberState> {
        match &self.phase {
            Phase::Serving(serving) => Some(serving.wanted_state),
            Phase::Fenced { .. } | Phase::Displaced { .. } => Some(MemberState::Down),
            _ => None,
        }
    }

    /// Whether this node may serve at `now_ms`: it holds an incarnation
    /// and its lease runs.
    pub fn is_serving(&self, now_ms: u64) -> bool {
        matches!(&self.phase, Phase::Serving(serving) if now_ms < serving.lease_until_ms)
    }

    /// Time passed that the monotonic clock did not see (`cause` says
    /// which clock saw it): the lease may already have run out in real
    /// time, so it ends now, and only a heartbeat sent from now on renews
    /// it (one is sent at once).
    pub fn clock_jumped(&mut self, now_ms: u64, cause: String) {
        let Phase::Serving(serving) = &mut self.phase else {
            return;
        };
        serving.renew_from_ms = now_ms;
        serving.lease_until_ms = serving.lease_until_ms.min(now_ms);
        serving.next_heartbeat_ms = now_ms;
        if serving.lapsed_at_ms.is_none() {
            serving.lapsed_at_ms = Some(now_ms);
        }
        self.events.push(Event::LeaseLapsed {
            at_ms: now_ms,
            cause,
        });
        self.on_tick(now_ms);
    }

    /// The state the store last applied for this node.
    pub fn written_state(&self) -> Option<MemberState> {
        match &self.phase {
            Phase::Serving(serving) => Some(serving.state),
            _ => None,
        }
    }

    /// Every other member as last read.
    pub fn members(&self) -> impl Iterator<Item = &MemberRow> {
        self.observed.values().map(|observed| &observed.row)
    }

    /// How long ago (this node's clock) the heartbeat of `node` last moved.
    pub fn heartbeat_age_ms(&self, node: NodeId, now_ms: u64) -> Option<u64> {
        self.observed
            .get(&node)
            .map(|observed| now_ms.saturating_sub(observed.since_ms))
    }

    /// When (this node's clock) the row of each member this node watches
    /// last moved: of the others it reads only what changed, so it cannot
    /// tell their heartbeats.
    pub fn heartbeats_moved_at(&self) -> BTreeMap<NodeId, u64> {
        self.watched
            .iter()
            .filter_map(|node| Some((*node, self.observed.get(node)?.since_ms)))
            .collect()
    }

    /// Whether the view holds every change up to a table version read
    /// (the first listing is done).
    pub fn has_listed(&self) -> bool {
        self.listed.is_some()
    }

    /// Changes the state this node advertises (`up` once it serves,
    /// `draining`, `left` at a clean exit); written at the next heartbeat,
    /// or by the rejoin of a fenced node.
    pub fn set_state(&mut self, now_ms: u64, state: MemberState) {
        self.asked_state = Some(state);
        if let Phase::Serving(serving) = &mut self.phase {
            serving.wanted_state = state;
            serving.next_heartbeat_ms = now_ms;
        }
        self.on_tick(now_ms);
    }

    /// The driver's periodic call: writes a heartbeat when one is due,
    /// polls the table when a poll is due, and deletes the rows of nodes
    /// that left long enough ago.
    pub fn on_tick(&mut self, now_ms: u64) {
        self.check_lease(now_ms);
        if matches!(self.phase, Phase::Refused) {
            return;
        }
        if self.polling.is_none() && now_ms >= self.next_poll_ms {
            self.next_poll_ms = now_ms + self.tick_ms();
            self.poll();
        }
        self.delete_left(now_ms);
        let Phase::Serving(serving) = &mut self.phase else {
            return;
        };
        if serving.in_flight.is_some() || now_ms < serving.next_heartbeat_ms {
            return;
        }
        let heartbeat = serving.heartbeat + 1;
        serving.in_flight = Some(heartbeat);
        serving.next_heartbeat_ms = now_ms + self.timers.heartbeat_interval_ms;
        let (incarnation, state, version) =
            (serving.incarnation, serving.wanted_state, serving.version);
        let row = self.row(incarnation, state, heartbeat, version);
        let write = MemberWrite {
            row,
            condition: MemberCondition::VersionEquals(version),
        };
        self.actions.push(Action::Write {
            tag: WriteTag::Heartbeat {
                heartbeat,
                sent_at_ms: now_ms,
            },
            write,
        });
    }

    fn row(
        &self,
        incarnation: u64,
        state: MemberState,
        heartbeat: u64,
        version: MemberVersion,
    ) -> MemberRow {
        MemberRow {
            node_id: self.me,
            incarnation,
            state,
            heartbeat,
            gateway: self.advert.gateway.clone(),
            admin: self.advert.admin.clone(),
            cluster: self.advert.cluster.clone(),
            core_count: self.advert.core_count,
            actors: self.advert.actors.clone(),
            timers: Some(self.timers()),
            version,
        }
    }

    /// The timers this node runs with, as its row carries them.
    pub fn timers(&self) -> MemberTimers {
        self.timers
    }

    /// How long `row` must stand still on this node's clock before this
    /// node may take its process for dead (see `down_wait_ms`).
    pub fn down_wait_ms(&self, row: &MemberRow) -> u64 {
        down_wait_ms(self.timers, row.timers)
    }

    /// A lease that ran out stops the node serving; it keeps its
    /// incarnation and its objects, and serves again once a heartbeat (a
    /// CAS on the version it wrote, so nobody declared it down meanwhile)
    /// applies. Reported once per lapse, with its cause.
    fn check_lease(&mut self, now_ms: u64) {
        let Phase::Serving(serving) = &mut self.phase else {
            return;
        };
        if now_ms < serving.lease_until_ms || serving.lapsed_at_ms.is_some() {
            return;
        }
        serving.lapsed_at_ms = Some(serving.lease_until_ms);
        let failure = match (&serving.last_failure, serving.in_flight) {
            (Some(failure), _) => failure.clone(),
            (None, Some(heartbeat)) => format!("heartbeat #{heartbeat} is still unanswered"),
            (None, None) => "no heartbeat was sent (this process did not run)".to_string(),
        };
        let cause = format!(
            "no heartbeat applied for {} ms (cluster.fence_after_ms = {}): {failure}",
            now_ms.saturating_sub(serving.last_applied_ms),
            self.timers.fence_after_ms
        );
        self.events.push(Event::LeaseLapsed {
            at_ms: serving.lease_until_ms,
            cause,
        });
    }

    /// The answer to a write (`Err`: no answer in time, or a store error,
    /// described for the log: the write may or may not have happened).
    pub fn on_written(
        &mut self,
        now_ms: u64,
        tag: WriteTag,
        write: &MemberWrite,
        outcome: Result<MemberOutcome, MemberOpError>,
    ) {
        let failure = match &outcome {
            Err(failure) => Some(failure.to_string()),
            Ok(MemberOutcome::Indeterminate) => Some("its outcome is unknown".to_string()),
            Ok(_) => None,
        };
        let outcome = outcome.unwrap_or(MemberOutcome::Indeterminate);
        match tag {
            WriteTag::Join { sent_at_ms } => self.joined(now_ms, sent_at_ms, write, outcome),
            WriteTag::Heartbeat {
                heartbeat,
                sent_at_ms,
            } => {
                // The answer to a heartbeat of an incarnation that ended
                // meanwhile (a fence and a rejoin came first) says nothing
                // of this one.
                let current = matches!(&self.phase,
                    Phase::Serving(serving) if serving.incarnation == write.row.incarnation);
                if !current {
                    return;
                }
                if let (Some(failure), Phase::Serving(serving)) = (failure, &mut self.phase) {
                    serving.last_failure = Some(format!(
                        "heartbeat #{heartbeat}, sent {} ms ago, failed: {failure}",
                        now_ms.saturating_sub(sent_at_ms)
                    ));
                }
                self.heartbeat_written(now_ms, heartbeat, sent_at_ms, write.row.state, outcome)
            }
            WriteTag::DeclareDown { node } => self.declared(now_ms, node, write, outcome),
        }
    }

    /// The answer to a heartbeat that carried `carried` as this node's
    /// state.
    fn heartbeat_written(
        &mut self,
        now_ms: u64,
        heartbeat: u64,
        sent_at_ms: u64,
        carried: MemberState,
        outcome: MemberOutcome,
    ) {
        self.check_lease(now_ms);
        let Phase::Serving(serving) = &mut self.phase else {
            return;
        };
        if serving.in_flight == Some(heartbeat) {
            serving.in_flight = None;
        }
        match outcome {
            MemberOutcome::Applied(version) => {
                serving.version = version;
                serving.heartbeat = heartbeat;
                // What this write carried, not what is wanted now: a state
                // asked for while it was in flight is written by the next
                // heartbeat (`set_state` made it due), and until then the
                // store does not have it (`leave` waits for `left` to be
                // written, not merely wanted).
                serving.state = carried;
                serving.last_applied_ms = serving.last_applied_ms.max(sent_at_ms);
                serving.last_failure = None;
                // A heartbeat sent before time jumped renews nothing: its
                // send time undercounts.
                if sent_at_ms >= serving.renew_from_ms {
                    let until_ms = sent_at_ms + self.timers.fence_after_ms;
                    serving.lease_until_ms = serving.lease_until_ms.max(until_ms);
                    self.events.push(Event::Lease { until_ms });
                    if now_ms < serving.lease_until_ms {
                        if let Some(lapsed_at) = serving.lapsed_at_ms.take() {
                            self.events.push(Event::LeaseRenewed {
                                lapsed_for_ms: now_ms.saturating_sub(lapsed_at),
                            });
                        }
                    }
                }
            }
            MemberOutcome::Conflict(Some(row))
                if row.incarnation == serving.incarnation
                    && row.state != MemberState::Down
                    && row.heartbeat >= serving.heartbeat =>
            {
                // Our own earlier heartbeat, applied though its answer was
                // lost: adopt its version. It extends no lease (which one
                // applied is unknown); the next heartbeat will.
                serving.version = row.version;
                serving.heartbeat = row.heartbeat;
                serving.next_heartbeat_ms = now_ms;
            }
            MemberOutcome::Conflict(row) => self.lose(now_ms, row, "a heartbeat was refused"),
            // Unknown: no lease extension; the next heartbeat tells.
            MemberOutcome::Indeterminate => {}
        }
        self.on_tick(now_ms);
    }
}

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
