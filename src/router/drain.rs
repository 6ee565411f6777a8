//! Draining one core: every writable object is transferred to the node
//! rendezvous hashing picks among the others (the node that would be its
//! default if it were new), a bounded number at a time. The driver calls
//! `drain_step` when the drain starts, after every transfer that ends and
//! on a period; `drain_progress` says how far it is.
//!
//! The drain walks a snapshot of the core's keys taken when a pass starts,
//! each step going on where the last one stopped, so one pass over a core
//! costs O(entries) however many steps it takes (the entries are a hash
//! map, without an order to resume in); an object placed during a pass
//! waits for the next one. A key whose transfer did not move it is tried
//! again on a later pass, at most
//! `DRAIN_ATTEMPTS_MAX` times (after that it stays, and the shutdown that
//! follows the drain saves and releases it like any other).

use std::collections::{BTreeMap, BTreeSet};

use wire::ObjectKey;

use super::entry::Manager;
use super::types::{TransferDone, TransferError};

/// Transfers of one key a drain starts at most.
pub const DRAIN_ATTEMPTS_MAX: u8 = 3;

/// The drain of one core, inside its state machine.
pub(crate) struct DrainState {
    /// Transfers the drain keeps in flight at most.
    concurrency: usize,
    in_flight: BTreeSet<ObjectKey>,
    /// The keys of the current pass not yet looked at, the next one last.
    pass: Vec<ObjectKey>,
    /// Drain transfers of a key that did not move it.
    failures: BTreeMap<ObjectKey, u8>,
    moved: u64,
    not_moved: u64,
    /// The last step found an object to move and no other node to take it.
    no_target: bool,
}

impl DrainState {
    pub(crate) fn on_transfer_done(&mut self, done: &TransferDone) {
        if !self.in_flight.remove(&done.key) {
            // An operator's transfer, not one of the drain's.
            return;
        }
        if done.outcome.moved() {
            self.moved += 1;
        } else {
            self.not_moved += 1;
            *self.failures.entry(done.key).or_default() += 1;
        }
    }

    fn may_try(&self, key: &ObjectKey) -> bool {
        self.failures.get(key).copied().unwrap_or(0) < DRAIN_ATTEMPTS_MAX
    }
}

/// How far the drain of one core is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainProgress {
    /// A drain started on this core.
    pub started: bool,
    /// Writable objects still here, not moving.
    pub objects: usize,
    /// Transfers in flight (the drain's and any other).
    pub moving: usize,
    /// Transfers of the drain that moved their object.
    pub moved: u64,
    /// Transfers of the drain that did not.
    pub not_moved: u64,
    /// Objects the drain gave up on after `DRAIN_ATTEMPTS_MAX` transfers.
    pub given_up: usize,
    /// No other node takes objects now: what is left stays.
    pub no_target: bool,
}

impl DrainProgress {
    /// Nothing more will move: no transfer is in flight, and every object
    /// left was given up on, or there is nowhere to send it.
    pub fn finished(&self) -> bool {
        self.started && self.moving == 0 && (self.objects == self.given_up || self.no_target)
    }
}

impl DrainState {
    /// A drain keeping at most `concurrency` transfers in flight (at least
    /// one).
    pub(crate) fn new(concurrency: usize) -> DrainState {
        DrainState {
            concurrency: concurrency.max(1),
            in_flight: BTreeSet::new(),
            pass: Vec::new(),
            failures: BTreeMap::new(),
            moved: 0,
            not_moved: 0,
            no_target: false,
        }
    }

    /// How many more transfers the drain may start now.
    pub(crate) fn room(&self) -> usize {
        self.concurrency.saturating_sub(self.in_flight.len())
    }

    /// What the start of a drain transfer of `key` gave.
    pub(crate) fn started(&mut self, key: ObjectKey, started: Result<(), TransferError>) {
        match started {
            Ok(()) => {
                self.in_flight.insert(key);
            }
            // Someone else moves it (an operator's transfer).
            Err(TransferError::InProgress) => {}
            Err(_) => {
                self.not_moved += 1;
                *self.failures.entry(key).or_default() += 1;
            }
        }
    }

    /// Up to `room` writable, idle objects to move: the next ones of the
    /// current pass, then of a new pass (at most one new pass per step, so
    /// a step where nothing can move walks the entries once).
    pub(crate) fn candidates(
        &mut self,
        managers: &BTreeMap<u32, Manager>,
        room: usize,
    ) -> Vec<ObjectKey> {
        let mut candidates = Vec::new();
        let mut new_pass_taken = false;
        while candidates.len() < room {
            let Some(key) = self.pass.pop() else {
                if new_pass_taken {
                    break;
                }
                new_pass_taken = true;
                self.pass = managers
                    .values()
                    .flat_map(|manager| manager.entries.keys().copied())
                    .collect();
                continue;
            };
            let startable = managers
                .get(&key.type_id)
                .and_then(|manager| manager.entries.get(&key))
                .is_some_and(|entry| {
                    entry.is_writable()
                        && entry.transferring.is_none()
                        && entry.queued_transfer.is_none()
                        && !self.in_flight.contains(&key)
                        && self.may_try(&key)
                        // A key the old pass gave this step may come again.
                        && !candidates.contains(&key)
                });
            if startable {
                candidates.push(key);
            }
        }
        candidates
    }

    /// How far the drain is (a walk over every entry).
    pub(crate) fn progress(&self, managers: &BTreeMap<u32, Manager>) -> DrainProgress {
        let mut progress = DrainProgress {
            started: true,
            moved: self.moved,
            not_moved: self.not_moved,
            no_target: self.no_target,
            ..DrainProgress::default()
        };
        for (key, entry) in managers.values().flat_map(|manager| manager.entries.iter()) {
            if entry.transferring.is_some() || entry.queued_transfer.is_some() {
                progress.moving += 1;
            } else if entry.is_writable() {
                progress.objects += 1;
                if !self.may_try(key) {
                    progress.given_up += 1;
                }
            }
        }
        progress
    }

    /// Notes whether the last step found an object with nowhere to go.
    pub(crate) fn set_no_target(&mut self, no_target: bool) {
        self.no_target = no_target;
    }
}
