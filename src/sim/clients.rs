//! The fault phase's random steps: client requests and transfers, and the
//! faults of the cluster: crashes, restarts, shutdowns, pauses,
//! partitions, store cut-offs and outside writes.

use rand::RngExt;
use wire::ObjectKey;

use super::counter::{COUNTER_TYPE_ID, OP_ADD, OP_GET};
use super::world::World;
use crate::ids::NodeId;

impl World {
    pub(super) fn random_key(&mut self) -> ObjectKey {
        ObjectKey::new(
            COUNTER_TYPE_ID,
            0,
            self.rng.random_range(0..self.config.keys),
        )
    }

    /// Nodes whose gateway takes clients: serving, not shutting down (a
    /// paused one too: its clients do not know).
    pub(super) fn up_nodes(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.serving() && !n.shutting_down)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The nodes not running (crashed, or stopped and not started again).
    pub(super) fn down_nodes(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| !n.up)
            .map(|(id, _)| *id)
            .collect()
    }

    /// One random step, in per mille.
    pub(super) fn client_step(&mut self) {
        let up = self.up_nodes();
        let roll = self.rng.random_range(0..1000);
        let faults = self.faults;
        match roll {
            0..=299 if !up.is_empty() => {
                let origin = up[self.rng.random_range(0..up.len())];
                let key = self.random_key();
                let delta = self.rng.random_range(1..=5);
                self.submit(origin, key, OP_ADD, delta, false);
            }
            300..=399 if !up.is_empty() => {
                let origin = up[self.rng.random_range(0..up.len())];
                let key = self.random_key();
                self.submit(origin, key, OP_GET, 0, false);
            }
            400..=749 => self.room_step(),
            750..=809 => self.random_transfer(),
            810..=817 if faults => self.crash_random(),
            818..=829 if faults => self.restart_random(),
            830..=833 if faults => self.shutdown_random(),
            834..=841 if faults => self.pause_random(),
            842..=845 if faults => self.cut_random(),
            846..=853 if faults => {
                let key = self.random_tracked_key();
                self.outside_write(key);
            }
            854..=859 if faults => {
                let a = self.rng.random_range(1..=self.config.nodes);
                let b = self.rng.random_range(1..=self.config.nodes);
                if a != b {
                    self.partitions.insert((a.min(b), a.max(b)));
                }
            }
            860..=869 => self.partitions.clear(),
            870..=873 if faults => self.stall_store(),
            _ => {}
        }
    }

    fn random_tracked_key(&mut self) -> ObjectKey {
        let keys: Vec<ObjectKey> = self.tracked_keys().collect();
        keys[self.rng.random_range(0..keys.len())]
    }

    pub(super) fn random_transfer(&mut self) {
        let key = self.random_tracked_key();
        let core = self.core_of(key);
        let holder = self.nodes.iter().find_map(|(id, n)| {
            let writable = n.serving()
                && n.paused.is_none()
                && n.cores[core as usize]
                    .entries()
                    .any(|v| v.key == key && v.writable);
            writable.then_some(*id)
        });
        let Some(holder) = holder else {
            return;
        };
        let target = self.rng.random_range(1..=self.config.nodes);
        let notify = self.rng.random_bool(0.8);
        let mut started = false;
        self.on_core(holder, core, |c, now| {
            started = c.transfer(now, key, NodeId(target), notify).is_ok();
        });
        if started {
            self.report.transfers += 1;
        }
    }

    pub(super) fn crash_random(&mut self) {
        let up = self.up_nodes();
        if up.len() > 1 {
            let node = up[self.rng.random_range(0..up.len())];
            self.report.crashes += 1;
            self.take_down(node);
        }
    }

    pub(super) fn restart_random(&mut self) {
        let down = self.down_nodes();
        if !down.is_empty() {
            let node = down[self.rng.random_range(0..down.len())];
            self.start_node(node);
        }
    }

    pub(super) fn shutdown_random(&mut self) {
        let up = self.up_nodes();
        if up.len() > 1 {
            let node = up[self.rng.random_range(0..up.len())];
            self.shut_down(node);
        }
    }

    /// Freezes a running process: shorter than its lease, between the lease
    /// and a declaration, longer than `down_after_ms`, or longer than the
    /// lock lifetime (`object_free_timeout_ms`).
    pub(super) fn pause_random(&mut self) {
        let running: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up && n.paused.is_none())
            .map(|(id, _)| *id)
            .collect();
        if running.is_empty() {
            return;
        }
        let node = running[self.rng.random_range(0..running.len())];
        let cluster = &self.config.cluster;
        let (fence, down) = (cluster.fence_after_ms, cluster.down_after_ms);
        let lock = self.config.router.object_free_timeout_ms;
        let duration = match self.rng.random_range(0..4) {
            0 => self.rng.random_range(10..fence),
            1 => self.rng.random_range(fence..down),
            2 => self.rng.random_range(down..lock),
            _ => self.rng.random_range(lock..=lock + down * 2),
        };
        self.pause(node, duration);
    }
}
