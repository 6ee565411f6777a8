//! The end of a run: the calm phase (faults off, every process resumed and
//! reconnected, every node up; once membership settled every request must
//! succeed) and the final clean shutdown of every node.

use wire::ObjectKey;

use super::check::Invariant;
use super::counter::{COUNTER_TYPE_ID, OP_ADD};
use super::world::{Fate, World};

/// How long the calm phase waits for membership to settle: restarts wait
/// for the old row to be declared down, rejoins take a round trip or two.
const SETTLE_MAX_MS: u64 = 5_000;
/// Starts of down nodes the calm phase makes at most (a start is refused
/// when the node's old row still looks alive).
const CALM_STARTS_MAX: usize = 5;

impl World {
    /// Faults off; once the cluster settled, every request must succeed.
    pub(super) fn calm_phase(&mut self) -> Result<(), String> {
        self.faults = false;
        self.store_stalled_until_ms = 0;
        self.partitions.clear();
        for node in self.nodes.values_mut() {
            node.store_cut_until_ms = 0;
        }
        self.resume_all();
        // Shutdowns in progress end (by their deadline at the latest) first.
        let until = self.now_ms + 3_000;
        self.run_while(until, |world| world.nodes.values().any(|n| n.shutting_down))?;
        self.settle()?;
        // Copies an outside writer made stale notice it at their next save.
        let settled_from = self.now_ms + 2 * self.config.router.object_save_interval_ms;
        self.settled_from_ms = Some(settled_from);
        self.run_until(settled_from)?;
        for object_id in 0..self.config.keys {
            let key = ObjectKey::new(COUNTER_TYPE_ID, 0, object_id);
            for origin in 1..=self.config.nodes {
                self.submit(origin, key, OP_ADD, 1, true);
            }
        }
        self.run_until(self.now_ms + 1_000)?;
        if let Some((id, op)) = self
            .ops
            .iter()
            .find(|(_, op)| op.calm && op.fate != Fate::Acked)
        {
            if std::env::var("ROUTERD_SIM_DEBUG").is_ok() {
                self.debug_key(op.key);
            }
            let error = Invariant::Calm.fail(format!(
                "calm request {id:?} for {:?} ended {:?}",
                op.key, op.fate
            ));
            self.unless_disabled(Err(error))?;
        }
        let rooms = self.calm_rooms();
        self.unless_disabled(rooms)?;
        self.check_all_answered()
    }

    /// Starts every node that is down and waits until membership settled:
    /// every node serves, unfenced, and knows every other's incarnation.
    fn settle(&mut self) -> Result<(), String> {
        let deadline = self.now_ms + SETTLE_MAX_MS;
        let mut starts = 0;
        while !self.membership_settled() {
            for node in self.down_nodes() {
                if starts == CALM_STARTS_MAX {
                    return Err(Invariant::Calm.fail(format!("node {node} never started")));
                }
                starts += 1;
                self.start_node(node);
            }
            if self.now_ms >= deadline {
                return Err(Invariant::Calm.fail(self.unsettled()));
            }
            if !self.next_step()? {
                break;
            }
            self.check()?;
        }
        Ok(())
    }

    /// Why membership has not settled.
    fn unsettled(&self) -> String {
        let mut why = format!("membership not settled after {SETTLE_MAX_MS} ms:");
        for (id, n) in &self.nodes {
            let now = n.clock.local(self.now_ms);
            let cores: Vec<String> = n
                .cores
                .iter()
                .map(|c| {
                    format!(
                        "inc {} fenced {} serves {}",
                        c.incarnation(),
                        c.is_fenced(),
                        c.may_serve(now)
                    )
                })
                .collect();
            let view: Vec<String> = n
                .membership
                .iter()
                .flat_map(|m| m.members())
                .map(|r| format!("{:?}:{}:{:?}", r.node_id, r.incarnation, r.state))
                .collect();
            let own = n.membership.as_ref().map(|m| (m.incarnation(), m.state()));
            why.push_str(&format!(
                " node {id} up {} cores {cores:?} membership {own:?} sees {view:?};",
                n.up
            ));
        }
        why
    }

    fn debug_key(&self, key: ObjectKey) {
        eprintln!("store {:?}", self.table.load(key));
        for (node, n) in &self.nodes {
            for (c, core) in n.cores.iter().enumerate() {
                for v in core.entries().filter(|v| v.key == key) {
                    eprintln!("node {node} core {c} {v:?} {:?}", core.counters());
                }
            }
            eprintln!(
                "node {node} up {} shutting {} process {}",
                n.up, n.shutting_down, n.process
            );
        }
        eprintln!("now {}", self.now_ms);
    }

    /// Every node shuts down cleanly; then the store holds each counter.
    pub(super) fn final_check(&mut self) -> Result<(), String> {
        let nodes: Vec<u64> = self.nodes.keys().copied().collect();
        for node in nodes {
            self.shut_down(node);
        }
        let until = self.now_ms + 5_000;
        while self.nodes.values().any(|n| n.up) && self.now_ms < until {
            if !self.next_step()? {
                break;
            }
            self.check()?;
        }
        if let Some((id, _)) = self.nodes.iter().find(|(_, n)| n.up) {
            return Err(Invariant::Calm.fail(format!("node {id} did not finish its shutdown")));
        }
        self.unless_disabled(self.checker.check_counters(self))
    }
}
