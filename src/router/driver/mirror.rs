//! The core's metrics, mirrored from the router core's counters and
//! gauges: the counters after every batch of inputs (a few field copies),
//! the gauges periodically (a walk over every entry).

use super::RouterDriver;
use crate::metrics::RouterStats;

impl RouterDriver {
    /// The gauges: a walk over every entry, so periodic (see
    /// `GAUGES_MIRROR_INTERVAL`).
    pub(super) fn mirror_gauges(&self) {
        let (objects, caches, queued) = self.0.core.borrow().gauges();
        let stats: &RouterStats = &self.0.metrics.router;
        stats.objects.set(objects as i64);
        stats.caches.set(caches as i64);
        stats.pending.set(queued as i64);
        let core = self.0.core.borrow();
        let unfit = self.0.metrics.objects_by_type.set(core.objects_by_type());
        debug_assert_eq!(unfit, 0, "more object types than the metrics count");
    }

    /// The counters: a few field copies, after every batch of inputs.
    pub(super) fn mirror_metrics(&self) {
        let core = self.0.core.borrow();
        self.0.metrics.router_counters.mirror(core.counters());
        self.0
            .metrics
            .router
            .unroutable
            .mirror(self.0.unroutable_total.get());
        self.0
            .metrics
            .router
            .answers_withheld
            .mirror(self.0.answers_withheld_total.get());
        self.0
            .metrics
            .router
            .local_queue_full
            .mirror(self.0.local_queue_full_total.get());
        self.0
            .metrics
            .router
            .expired_before_run
            .mirror(self.0.expired_before_run_total.get());
        self.mirror_client_answers();
    }

    /// The counts of answered client requests. Answers from other cores
    /// and nodes arrive outside a batch of inputs, so the gauges' period
    /// mirrors them as well.
    pub(super) fn mirror_client_answers(&self) {
        let (local, remote) = self.0.client_answers.get();
        let stats = &self.0.metrics.router;
        stats.client_answers_local.mirror(local);
        stats.client_answers_remote.mirror(remote);
    }
}
