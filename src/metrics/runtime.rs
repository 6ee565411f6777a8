//! The runtime's counters (kept by the `shards` crate on each core) as the
//! node exports them: each core copies its own into its [`RuntimeStats`]
//! every `RUNTIME_MIRROR_INTERVAL`, and the process-wide registered-files
//! mode is read at scrape time.

use std::time::Duration;

use shards::RegisteredFiles;

use super::family::{Family, Kind, Series, Value};

/// How often a core copies the runtime's counters into its metrics: a
/// scrape lags by at most this, and the copy is a few field loads.
pub const RUNTIME_MIRROR_INTERVAL: Duration = Duration::from_millis(250);

super::metric_set! {
    /// The runtime's ring and buffer counters, one set per core.
    pub struct RuntimeStats {
        /// Times a connection's receive found its core's buffer ring empty and waited for a
        /// buffer to come back.
        "routerd_runtime_recv_buffer_waits_total" Counter { recv_buffer_waits }
        /// Receives past a connection's cores.recv_buffers_per_conn_max (a burst one kernel pass
        /// took) whose bytes were copied out of the buffer ring.
        "routerd_runtime_recv_buffer_spilled_total" Counter { recv_buffer_spilled }
        /// Times a connection held cores.recv_buffers_per_conn_max buffers and had its receive
        /// stopped until its reader gave some back.
        "routerd_runtime_recv_buffer_held_max_total" Counter { recv_buffer_held_max }
        /// Receive buffers filled and not yet given back to the ring.
        "routerd_runtime_recv_buffers_lent" Gauge { recv_buffers_lent }
        /// Receive buffers in the cores' rings.
        "routerd_runtime_recv_buffers" Gauge { recv_buffers }
        /// Ring operations submitted and not yet completed.
        "routerd_runtime_ops_in_flight" Gauge { ops_in_flight }
        /// Indexes of the registered file table in use (a socket, or a close not yet completed).
        "routerd_runtime_registered_files_in_use" Gauge { registered_files_in_use }
    }
}

impl RuntimeStats {
    /// Copies the runtime's counters of the calling core.
    pub fn mirror_core(&self) {
        let buffers = shards::recv_buffers();
        self.recv_buffer_waits
            .mirror(buffers.recv_buffer_waits_total);
        self.recv_buffer_spilled
            .mirror(buffers.recv_buffer_spilled_total);
        self.recv_buffer_held_max.mirror(buffers.held_max_total);
        self.recv_buffers_lent.set(i64::from(buffers.lent));
        self.recv_buffers.set(i64::from(buffers.buffers));
        self.ops_in_flight
            .set(i64::try_from(shards::ops_in_flight()).unwrap_or(i64::MAX));
        self.registered_files_in_use
            .set(i64::from(shards::file_table().in_use));
    }
}

/// 1 for the mode this process's sockets are named by in ring operations,
/// 0 for the others (the kernel probe at start decides).
pub(super) const REGISTERED_FILES_FAMILIES: &[Family<()>] = &[Family {
    name: "routerd_runtime_registered_files_mode",
    help: "1 for how ring operations name sockets (registered: the file table; \
           descriptors_only: this kernel keeps removed files open, so none; unprobed: the probe \
           could not run), 0 for the other modes.",
    kind: Kind::Gauge,
    label: Some("mode"),
    series: &[
        Series {
            label_value: Some(RegisteredFiles::Registered.name()),
            read: |_| mode_is(RegisteredFiles::Registered),
        },
        Series {
            label_value: Some(RegisteredFiles::DescriptorsOnly.name()),
            read: |_| mode_is(RegisteredFiles::DescriptorsOnly),
        },
        Series {
            label_value: Some(RegisteredFiles::Unprobed.name()),
            read: |_| mode_is(RegisteredFiles::Unprobed),
        },
    ],
}];

fn mode_is(mode: RegisteredFiles) -> Value<'static> {
    Value::Level(i64::from(shards::registered_files_mode() == mode))
}
