//! The admin endpoint's own metrics, written by its one thread: what it
//! refused, and the rebalances it ran.

super::metric_set! {
    /// What the admin endpoint refused, and how its rebalances went.
    pub struct AdminStats {
        /// Mutating admin calls refused 401: no `Authorization: Bearer` header, or the wrong
        /// token.
        "routerd_admin_unauthorized_total" Counter { unauthorized }
        /// Admin requests refused on their head or for their time, by reason: `unauthorized`
        /// (401), `too_large` (413: Content-Length over the body bound), `origin` (403: a
        /// mutating call from another origin), `host` (421: a Host that is not the endpoint's),
        /// `slots` (503: every slot taken), `deadline` (a head or body not sent in time, or an
        /// answer its client read nothing of for 2 s), `evicted` (a connection still sending its
        /// head, closed for a newer one), `bad_request` (400 or 405: arguments, a body or a
        /// method the call does not take, here or at the member it was forwarded to).
        "routerd_admin_refused_total" Counter (reason) {
            refused_unauthorized = "unauthorized",
            refused_too_large = "too_large",
            refused_origin = "origin",
            refused_host = "host",
            refused_slots = "slots",
            refused_deadline = "deadline",
            refused_evicted = "evicted",
            refused_bad_request = "bad_request",
        }
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
