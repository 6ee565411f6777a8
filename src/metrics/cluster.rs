//! The cluster's metrics: links between the cores of different nodes,
//! their handshakes, and membership as this node sees it. Link counters
//! are per core (each core has its own links); membership gauges are
//! written by the core that runs membership (core 0) only, so the sum over
//! cores is its view.

super::metric_set! {
    /// One core's links and, on core 0, the node's membership view.
    pub struct ClusterStats {
        /// Members of the cluster as this node last read the membership table, by state (this
        /// node included).
        "routerd_cluster_members" Gauge (state) {
            members_joining = "joining",
            members_up = "up",
            members_draining = "draining",
            members_left = "left",
            members_down = "down",
        }
        /// 1 while this node serves no object: its membership lease ran out (until a heartbeat
        /// applies again), or it was declared down (until it rejoins with a new incarnation).
        "routerd_cluster_fenced" Gauge { fenced }
        /// Frames this core sent to other nodes' cores.
        "routerd_cluster_link_frames_sent_total" Counter { frames_sent }
        /// Sends of this core's links, by the message frames each carried (0: a ping alone).
        /// Beside `routerd_cluster_link_frames_sent_total`: how many frames a send carries, that
        /// is how well the frames of one loop turn share one send.
        "routerd_cluster_link_sends_total" Counter (frames) {
            sends_0 = "0",
            sends_1 = "1",
            sends_2_to_7 = "2-7",
            sends_8_to_63 = "8-63",
            sends_64_up = "64+",
        }
        /// Sealed records this core sent on its links: each holds the frames that queued in one
        /// send turn, under one AES-GCM tag (frames per record = frames sent / records sent).
        "routerd_cluster_link_records_sent_total" Counter { records_sent }
        /// Bytes of the sealed records this core sent on its links, heads and tags included.
        "routerd_cluster_link_record_bytes_sent_total" Counter { record_bytes_sent }
        /// Frames this core received from other nodes, validated (checksum and structure).
        "routerd_cluster_link_frames_received_total" Counter { frames_received }
        /// Link records this core received and authenticated: each is one send of the peer's
        /// (or a 256 KiB part of one), so frames received over records is frames per send as
        /// the receiver sees it.
        "routerd_cluster_link_records_received_total" Counter { records_received }
        /// Frames from another node that failed validation; each closed its link.
        "routerd_cluster_link_frames_invalid_total" Counter { frames_invalid }
        /// Messages for another node that no link took, by reason.
        "routerd_cluster_link_send_failed_total" Counter (reason) {
            send_failed_queue_full = "queue_full",
            send_failed_link_down = "link_down",
            send_failed_unknown_node = "unknown_node",
        }
        /// Link records (each a batch of frames) whose tag failed: forged, altered, replayed or
        /// sealed with another key; or bytes after a handshake that are no sealed record at all
        /// (refused before a tag could be checked). Each closed its link.
        "routerd_link_auth_failures_total" Counter { link_auth_failures }
        /// Links this core dialled again after one failed or closed.
        "routerd_cluster_link_reconnects_total" Counter { reconnects }
        /// Links closed when the node fenced, because successful answers made before the fence
        /// waited in them to be written: those answers never leave.
        "routerd_cluster_links_closed_at_fence_total" Counter { links_closed_at_fence }
        /// Links in (dialled by another node's core) that this core closed because nothing, not
        /// even a ping, arrived on them for three of the dialler's ping intervals: a dialler that
        /// gave the link up across a cut, or a peer that went silent.
        "routerd_cluster_links_closed_silent_total" Counter { links_closed_silent }
        /// Link connections closed before their handshake finished because 64 were handshaking
        /// on the core: the oldest is closed to admit the newest.
        "routerd_cluster_handshakes_evicted_total" Counter { handshakes_evicted }
        /// Link handshakes refused (by this core, or by the peer this core dialled), by reason.
        "routerd_cluster_handshakes_refused_total" Counter (reason) {
            refused_version = "version",
            refused_cluster_name = "cluster_name",
            refused_bad_secret = "bad_secret",
            refused_stale_incarnation = "stale_incarnation",
            refused_wrong_node = "wrong_node",
            refused_malformed = "malformed",
            refused_timeout = "timeout",
            refused_not_member = "not_member",
        }
        /// Round trips of link pings (sent by a dialling core, answered by the peer's core).
        "routerd_cluster_link_rtt_seconds" Histogram { link_rtt }
    }
}
