//! The router's metrics: the counters its sans-IO core keeps, the gauges
//! its driver computes, and what the driver counts itself.

super::counter_set! {
    /// The router core's counters: plain fields the state machine
    /// increments (the simulator clones and compares them); the driver
    /// mirrors them into [`RouterCounterCells`] after each batch of effects.
    pub struct RouterCounters mirrored by RouterCounterCells {
        /// Requests that entered the router: from a client, a service, or another node.
        "routerd_router_requests_total" { requests_total }
        /// Answers the router emitted for requests that wait for one.
        "routerd_router_replies_total" { replies_total }
        /// Requests an object's handler ran on this node.
        "routerd_router_handled_total" { handled_total }
        /// Requests sent to the owning node by the node where they entered.
        "routerd_router_sends_total" { sends_total }
        /// Requests passed on by a node that received them routed (a stale route repaired by
        /// forwarding).
        "routerd_router_forwards_total" { forwards_total }
        /// Requests refused because they had taken router.forward_hops_max hops.
        "routerd_router_forward_hops_exceeded_total" { forward_hops_exceeded_total }
        /// Reads of an ownership record from the store, retries included.
        "routerd_router_pulls_total" { pulls_total }
        /// Route repairs (re-reads, claims) requests caused.
        "routerd_router_repairs_total" { repair_attempts_total }
        /// Objects this node claimed: ownership written with a store compare-and-set.
        "routerd_router_claims_total" { claims_total }
        /// Saves of writable objects that the store applied.
        "routerd_router_saves_total" { saves_total }
        /// Store writes refused because another write changed the record first.
        "routerd_router_cas_conflicts_total" { cas_conflicts_total }
        /// Store writes whose outcome is unknown (a timeout, a lost connection).
        "routerd_router_store_indeterminate_total" { store_indeterminate_total }
        /// Objects moved to another node.
        "routerd_router_transfers_total" { transfers_total }
        /// Transfers whose ownership write the store did not apply; the object stays here or its
        /// route is re-read.
        "routerd_router_transfers_failed_total" { transfers_failed_total }
        /// Transfers whose target did not confirm within router.transfer_ack_timeout_ms.
        "routerd_router_transfer_ack_timeouts_total" { transfer_ack_timeouts_total }
        /// Route updates sent to the node a request came from.
        "routerd_router_update_syncs_total" { update_syncs_sent_total }
        /// Route updates received and applied.
        "routerd_router_update_syncs_applied_total" { update_syncs_applied_total }
        /// Requests refused because router.pending_queue_max requests waited on one object.
        "routerd_router_pending_queue_full_total" { pending_queue_full_total }
        /// Objects refused because a core held router.entries_per_core_max entries.
        "routerd_router_entries_full_total" { entries_full_total }
        /// Idle writable objects saved and released (kept as route caches).
        "routerd_router_degrades_total" { degrades_total }
        /// Idle route caches freed.
        "routerd_router_caches_freed_total" { caches_freed_total }
        /// Times this core fenced: the node was declared down (or its id taken), so it served
        /// nothing and kept its writable objects aside until it rejoined.
        "routerd_router_fences_total" { fences_total }
        /// Requests for a writable object answered UNAVAILABLE because the node's membership lease
        /// had run out (it serves again once a heartbeat applies, or after a rejoin).
        "routerd_router_lease_lapsed_refusals_total" { lease_lapsed_refusals_total }
        /// One-way events (object timers, messages between objects, answers to calls, gateway
        /// notices) that met a core which could not serve, past the most it keeps to run once it
        /// serves again (65,536 events or 64 MiB of bodies): dropped.
        "routerd_router_paused_events_dropped_total" { paused_events_dropped_total }
        /// Requests answered UNAVAILABLE because the write they waited for failed again, or had no
        /// known outcome, on its retry: one giving their object's ownership up (a release, a
        /// transfer's removal: who owns the object is unknown until its next retry, a backoff
        /// away), or the save of an on_write change (the copy keeps it for a later save).
        "routerd_router_write_retry_refusals_total" { write_retry_refusals_total }
        /// Pushes to a session of a node declared down (the run that opened the session ended):
        /// each also told the session's player its session was gone.
        "routerd_router_pushes_to_ended_sessions_total" { pushes_to_ended_sessions_total }
        /// Copies kept aside through a fence that were written back by compare-and-set under the
        /// node's new incarnation: nothing of theirs was lost.
        "routerd_router_readopts_total" { readopts_total }
        /// Writes of a copy retried after a failure or an unknown outcome (a save, a release, a
        /// readopt): the copy is kept, never silently forgotten.
        "routerd_router_write_retries_total" { write_retries_total }
        /// Copies with unsaved changes dropped because another node owned the record by the time
        /// they could be written (this node had been declared down), or a shutdown's deadline
        /// passed before their write applied.
        "routerd_router_unsaved_objects_dropped_total" { unsaved_objects_dropped_total }
        /// The changes those dropped copies held that no save had made durable.
        "routerd_router_unsaved_changes_dropped_total" { unsaved_changes_dropped_total }
        /// Objects claimed at once because the owner's incarnation had ended (declared down or
        /// left), without waiting for a lock to expire.
        "routerd_router_claims_of_ended_owners_total" { dead_owner_claims_total }
        /// Messages to another node that its link could not take (queue full, link down); requests
        /// among them were retried or answered.
        "routerd_router_send_failures_total" { send_failures_total }
        /// Requests a stateless service ran on this node.
        "routerd_router_service_requests_total" { service_requests_total }
        /// Timer events delivered to the objects that armed them.
        "routerd_router_object_timers_total" { object_timers_total }
    }
}

super::metric_set! {
    /// What the router's driver keeps itself: gauges it recomputes on a
    /// period and the messages it could not send.
    pub struct RouterStats {
        /// Writable objects held.
        "routerd_router_objects" Gauge { objects }
        /// Route caches held.
        "routerd_router_caches" Gauge { caches }
        /// Requests queued behind objects that are loading, saving or moving.
        "routerd_router_pending" Gauge { pending }
        /// Messages for another node dropped because no link to it exists (requests among them
        /// are answered UNAVAILABLE).
        "routerd_router_unroutable_total" Counter { unroutable }
        /// Successful answers a router turn made and did not send: the core's lease ran out
        /// during the turn (a pause inside a busy turn), so another node may have taken the
        /// objects over; their requests stay uncertain.
        "routerd_router_answers_withheld_total" Counter { answers_withheld }
        /// Messages from objects to objects of the same core refused because cores.mesh_queue_max
        /// such messages already waited in the core's queue (a request among them is answered
        /// OVERLOADED): the bound a message to another core meets in the mesh.
        "routerd_router_local_queue_full_total" Counter { local_queue_full }
        /// Client requests of this core's sessions dropped before they ran, because they waited
        /// past the gateway's request timeout (their clients were answered TIMEOUT): a core
        /// behind its clients runs what they still wait for, not what they gave up on.
        "routerd_router_requests_expired_total" Counter { expired_before_run }
        /// Client requests of this node's sessions answered by this node (its own objects, or
        /// refused here).
        "routerd_router_client_requests_local_total" Counter { client_answers_local }
        /// Client requests of this node's sessions answered by another node: they crossed a link
        /// to the object's owner and back.
        "routerd_router_client_requests_remote_total" Counter { client_answers_remote }
    }
}
