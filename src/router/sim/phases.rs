//! The end of a run: the calm phase (faults off, everything back up, every
//! request must succeed) and the final clean shutdown of every node.

use wire::ObjectKey;

use super::counter::{COUNTER_TYPE_ID, OP_ADD};
use super::world::{Fate, World};

impl World {
    /// Runs events until `until_ms`, checking after each.
    pub(super) fn run_until(&mut self, until_ms: u64) -> Result<(), String> {
        while self
            .queue
            .first_key_value()
            .is_some_and(|((at, _), _)| *at <= until_ms)
        {
            self.next_step()?;
            self.check()?;
        }
        self.now_ms = self.now_ms.max(until_ms);
        Ok(())
    }

    /// Faults off, partitions healed, every node up; after the old locks
    /// expire, every request must succeed.
    pub(super) fn calm_phase(&mut self) -> Result<(), String> {
        self.faults = false;
        self.partitions.clear();
        // Shutdowns in progress end (by their deadline at the latest) first.
        let until = self.now_ms + 3_000;
        while self.nodes.values().any(|n| n.shutting_down) && self.now_ms < until {
            if !self.next_step()? {
                break;
            }
            self.check()?;
        }
        let down: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| !n.up)
            .map(|(id, _)| *id)
            .collect();
        for node in down {
            let incarnation = self.nodes[&node].incarnation + 1;
            self.start_node(node, incarnation);
        }
        let settle = self.now_ms + self.config.router.object_free_timeout_ms * 2;
        self.run_until(settle)?;
        for object_id in 0..self.config.keys {
            let key = ObjectKey::new(COUNTER_TYPE_ID, 0, object_id);
            for origin in 1..=self.config.nodes {
                self.submit(origin, key, OP_ADD, 1, true);
            }
        }
        let until = self.now_ms + 2_000;
        self.run_until(until)?;
        for (id, op) in &self.ops {
            if op.calm && op.fate != Fate::Acked {
                if std::env::var("ROUTERD_SIM_DEBUG").is_ok() {
                    eprintln!("store {:?}", self.table.load(op.key));
                    for (node, n) in &self.nodes {
                        for (c, core) in n.cores.iter().enumerate() {
                            for v in core.entries().filter(|v| v.key == op.key) {
                                eprintln!("node {node} core {c} {v:?} {:?}", core.counters());
                            }
                        }
                    }
                    eprintln!("now {}", self.now_ms);
                    for (id, n) in &self.nodes {
                        eprintln!(
                            "node {id} up {} shutting {} inc {}",
                            n.up, n.shutting_down, n.incarnation
                        );
                    }
                }
                return Err(format!(
                    "calm request {id:?} for {:?} ended {:?}",
                    op.key, op.fate
                ));
            }
        }
        self.calm_rooms()
    }

    /// Every node shuts down cleanly; then the store holds each counter.
    pub(super) fn final_check(&mut self) -> Result<(), String> {
        let nodes: Vec<u64> = self.nodes.keys().copied().collect();
        for node in nodes {
            if let Some(sim_node) = self.nodes.get_mut(&node) {
                sim_node.shutting_down = true;
            }
            for core in 0..self.config.cores {
                self.on_core(node, core, |c, now| c.shutdown(now, 2_000));
            }
        }
        let until = self.now_ms + 5_000;
        self.run_until(until)?;
        if let Some((id, _)) = self.nodes.iter().find(|(_, n)| n.up) {
            return Err(format!("node {id} did not finish its shutdown"));
        }
        self.checker.check_counters(self)
    }
}
