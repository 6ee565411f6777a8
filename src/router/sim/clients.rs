//! The simulator's random client operations and node lifecycle: requests,
//! transfers, crashes, restarts, shutdowns, partitions.

use rand::Rng;
use wire::ObjectKey;

use super::counter::{COUNTER_TYPE_ID, OP_ADD, OP_GET};
use super::world::{Fate, World};
use crate::store::NodeId;

impl World {
    pub(super) fn random_key(&mut self) -> ObjectKey {
        ObjectKey::new(COUNTER_TYPE_ID, 0, self.rng.gen_range(0..self.config.keys))
    }

    pub(super) fn up_nodes(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.up && !n.shutting_down)
            .map(|(id, _)| *id)
            .collect()
    }

    pub(super) fn client_step(&mut self) -> Result<(), String> {
        let up = self.up_nodes();
        let roll = self.rng.gen_range(0..100);
        let faults = self.faults;
        match roll {
            0..=29 if !up.is_empty() => {
                let origin = up[self.rng.gen_range(0..up.len())];
                let key = self.random_key();
                let delta = self.rng.gen_range(1..=5);
                self.submit(origin, key, OP_ADD, delta, false);
            }
            30..=39 if !up.is_empty() => {
                let origin = up[self.rng.gen_range(0..up.len())];
                let key = self.random_key();
                self.submit(origin, key, OP_GET, 0, false);
            }
            40..=74 => self.room_step(),
            75..=84 => self.random_transfer(),
            85..=88 if faults => self.crash_random(),
            89..=91 if faults => self.restart_random(),
            92..=93 if faults => self.shutdown_random(),
            94..=96 if faults => {
                let a = self.rng.gen_range(1..=self.config.nodes);
                let b = self.rng.gen_range(1..=self.config.nodes);
                if a != b {
                    self.partitions.insert((a.min(b), a.max(b)));
                }
            }
            97..=99 => self.partitions.clear(),
            _ => {}
        }
        Ok(())
    }

    pub(super) fn random_transfer(&mut self) {
        let keys: Vec<ObjectKey> = self.tracked_keys().collect();
        let key = keys[self.rng.gen_range(0..keys.len())];
        let core = self.core_of(key);
        let holder = self.nodes.iter().find_map(|(id, n)| {
            let writable = n.up
                && n.cores[core as usize]
                    .entries()
                    .any(|v| v.key == key && v.writable);
            writable.then_some(*id)
        });
        let Some(holder) = holder else {
            return;
        };
        let target = self.rng.gen_range(1..=self.config.nodes);
        let notify = self.rng.gen_bool(0.8);
        let mut started = false;
        self.on_core(holder, core, |c, now| {
            started = c.transfer(now, key, NodeId(target), notify).is_ok();
        });
        if started {
            self.report.transfers += 1;
        }
    }

    /// Takes `node` down (crash or end of shutdown): memory is lost, its
    /// clients' requests lose their connection.
    pub(super) fn take_down(&mut self, node: u64) {
        let Some(sim_node) = self.nodes.get_mut(&node) else {
            return;
        };
        sim_node.up = false;
        sim_node.shutting_down = false;
        sim_node.cores.clear();
        let incarnation = sim_node.incarnation + 1;
        for (id, op) in self.ops.iter_mut() {
            if id.origin_node == NodeId(node) && op.fate == Fate::Pending {
                op.fate = Fate::Unknown;
            }
        }
        self.checker.node_down(node);
        let peers: Vec<u64> = self.nodes.keys().copied().collect();
        for peer in peers {
            self.with_cores(peer, |core| core.on_node_down(NodeId(node), incarnation));
        }
    }

    pub(super) fn crash_random(&mut self) {
        let up = self.up_nodes();
        if up.len() > 1 {
            let node = up[self.rng.gen_range(0..up.len())];
            self.report.crashes += 1;
            self.take_down(node);
        }
    }

    pub(super) fn restart_random(&mut self) {
        let down: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| !n.up)
            .map(|(id, _)| *id)
            .collect();
        if !down.is_empty() {
            let node = down[self.rng.gen_range(0..down.len())];
            let incarnation = self.nodes[&node].incarnation + 1;
            self.start_node(node, incarnation);
        }
    }

    pub(super) fn shutdown_random(&mut self) {
        let up = self.up_nodes();
        if up.len() > 1 {
            let node = up[self.rng.gen_range(0..up.len())];
            if let Some(sim_node) = self.nodes.get_mut(&node) {
                sim_node.shutting_down = true;
            }
            for core in 0..self.config.cores {
                self.on_core(node, core, |c, now| c.shutdown(now, 2_000));
            }
        }
    }

    pub(super) fn finish_shutdowns(&mut self) {
        let done: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.up && n.shutting_down && n.cores.iter().all(|c| c.is_shutdown_complete())
            })
            .map(|(id, _)| *id)
            .collect();
        for node in done {
            self.take_down(node);
        }
    }
}
