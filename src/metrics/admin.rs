//! The admin endpoint's own metrics, written by its one thread: what it
//! refused, and the rebalances it ran.

super::metric_set! {
    /// What the admin endpoint refused, and how its rebalances went.
    pub struct AdminStats {
        /// Mutating admin calls refused 401: no `Authorization: Bearer` header, or the wrong
        /// token.
        "routerd_admin_unauthorized_total" Counter { unauthorized }
        /// Rebalances this node ran over its own objects (POST /rebalance, or a member's join
        /// with cluster.rebalance_on_join).
        "routerd_rebalance_runs_total" Counter { rebalance_runs }
        /// Objects a rebalance moved from this node to their rendezvous node.
        "routerd_rebalance_moves_total" Counter { rebalance_moves }
        /// Objects a rebalance tried to move and did not (refused, not confirmed in time, or the
        /// record changed); they stay where they are.
        "routerd_rebalance_failures_total" Counter { rebalance_failures }
        /// Transfers of a rebalance in flight now (at most cluster.rebalance_concurrency).
        "routerd_rebalance_in_flight" Gauge { rebalance_in_flight }
    }
}
