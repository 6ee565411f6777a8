//! Counters and gauges, one set per core, summed over cores by the admin
//! endpoint. Each is written only by its own core, so an update is a relaxed
//! load and store (no locked instruction on the hot path), and the admin
//! thread's reads may lag by a few updates, never tear.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// A monotonic counter written by one core.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Copies a monotonic count kept elsewhere on the same core (a sans-IO
    /// state machine's own counter).
    pub fn mirror(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

/// A gauge written by one core.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }

    pub fn add(&self, delta: i64) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The gateway's counters (`GatewayStats` of the seed), named as
/// docs/protocol.md lists them.
#[derive(Debug, Default)]
pub struct GatewayStats {
    pub sessions_accepted: Counter,
    pub sessions_refused: Counter,
    pub sessions_active: Gauge,
    pub ingress_unknown_route: Counter,
    pub ingress_direction_rejected: Counter,
    pub ingress_auth_required: Counter,
    pub ingress_protocol_violation: Counter,
    pub ingress_overloaded: Counter,
    pub ingress_bad_request: Counter,
    pub egress_unknown_session: Counter,
    pub egress_stale_epoch: Counter,
    pub egress_owner_mismatch: Counter,
    pub egress_route_not_found: Counter,
    pub egress_direction_rejected: Counter,
    pub egress_send_failed: Counter,
    pub binds: Counter,
    pub binds_epoch_expired: Counter,
    pub kicks: Counter,
    pub timeouts: Counter,
    pub late_answers: Counter,
    pub slow_readers_closed: Counter,
    pub idle_closed: Counter,
    /// `Unbound` notices sent to a session's target (kicks of live sessions).
    pub notices_unbound: Counter,
    /// `Disconnected` notices (natural closes of live sessions).
    pub notices_disconnected: Counter,
}

/// The router's counters and gauges.
#[derive(Debug, Default)]
pub struct RouterStats {
    pub objects: Gauge,
    pub caches: Gauge,
    pub pending: Gauge,
    pub saves: Counter,
    pub cas_conflicts: Counter,
    pub forwards: Counter,
    pub transfers: Counter,
    pub pulls: Counter,
    pub repairs: Counter,
    pub update_syncs: Counter,
    /// Messages for another node while no link to it exists.
    pub unroutable: Counter,
    /// Idle writable objects saved and downgraded to caches.
    pub degrades: Counter,
    /// Idle caches freed.
    pub caches_freed: Counter,
}

/// Everything one core reports.
#[derive(Debug, Default)]
pub struct CoreMetrics {
    pub gateway: GatewayStats,
    pub router: RouterStats,
}

/// The node's metrics: one [`CoreMetrics`] per core plus the runtime's
/// mesh counters.
#[derive(Clone, Debug, Default)]
pub struct NodeMetrics {
    pub cores: Vec<Arc<CoreMetrics>>,
    pub mesh: Vec<Arc<shards::MeshStats>>,
}

impl NodeMetrics {
    pub fn new(core_count: usize) -> Self {
        Self {
            cores: (0..core_count).map(|_| Arc::default()).collect(),
            mesh: Vec::new(),
        }
    }

    fn sum(&self, read: impl Fn(&CoreMetrics) -> i64) -> i64 {
        self.cores.iter().map(|core| read(core)).sum()
    }

    /// The Prometheus text exposition of every metric, summed over cores.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let g = |f: fn(&GatewayStats) -> i64| self.sum(|c| f(&c.gateway));
        let r = |f: fn(&RouterStats) -> i64| self.sum(|c| f(&c.router));
        fn c(counter: &Counter) -> i64 {
            counter.get() as i64
        }
        counter(
            &mut out,
            "routerd_gateway_sessions_accepted_total",
            g(|s| c(&s.sessions_accepted)),
        );
        counter(
            &mut out,
            "routerd_gateway_sessions_refused_total",
            g(|s| c(&s.sessions_refused)),
        );
        gauge(
            &mut out,
            "routerd_gateway_sessions_active",
            g(|s| s.sessions_active.get()),
        );
        header(
            &mut out,
            "routerd_gateway_ingress_rejected_total",
            "counter",
        );
        for (reason, value) in [
            ("unknown_route", g(|s| c(&s.ingress_unknown_route))),
            (
                "direction_rejected",
                g(|s| c(&s.ingress_direction_rejected)),
            ),
            ("auth_required", g(|s| c(&s.ingress_auth_required))),
            (
                "protocol_violation",
                g(|s| c(&s.ingress_protocol_violation)),
            ),
            ("overloaded", g(|s| c(&s.ingress_overloaded))),
            ("bad_request", g(|s| c(&s.ingress_bad_request))),
        ] {
            labelled(
                &mut out,
                "routerd_gateway_ingress_rejected_total",
                reason,
                value,
            );
        }
        header(&mut out, "routerd_gateway_egress_rejected_total", "counter");
        for (reason, value) in [
            ("unknown_session", g(|s| c(&s.egress_unknown_session))),
            ("stale_epoch", g(|s| c(&s.egress_stale_epoch))),
            ("owner_mismatch", g(|s| c(&s.egress_owner_mismatch))),
            ("route_not_found", g(|s| c(&s.egress_route_not_found))),
            ("direction_rejected", g(|s| c(&s.egress_direction_rejected))),
            ("send_failed", g(|s| c(&s.egress_send_failed))),
        ] {
            labelled(
                &mut out,
                "routerd_gateway_egress_rejected_total",
                reason,
                value,
            );
        }
        counter(&mut out, "routerd_gateway_binds_total", g(|s| c(&s.binds)));
        counter(
            &mut out,
            "routerd_gateway_binds_epoch_expired_total",
            g(|s| c(&s.binds_epoch_expired)),
        );
        counter(&mut out, "routerd_gateway_kicks_total", g(|s| c(&s.kicks)));
        counter(
            &mut out,
            "routerd_gateway_timeouts_total",
            g(|s| c(&s.timeouts)),
        );
        counter(
            &mut out,
            "routerd_gateway_late_answers_total",
            g(|s| c(&s.late_answers)),
        );
        counter(
            &mut out,
            "routerd_gateway_slow_readers_closed_total",
            g(|s| c(&s.slow_readers_closed)),
        );
        counter(
            &mut out,
            "routerd_gateway_idle_closed_total",
            g(|s| c(&s.idle_closed)),
        );
        header(&mut out, "routerd_gateway_notices_total", "counter");
        labelled_kind(
            &mut out,
            "routerd_gateway_notices_total",
            "unbound",
            g(|s| c(&s.notices_unbound)),
        );
        labelled_kind(
            &mut out,
            "routerd_gateway_notices_total",
            "disconnected",
            g(|s| c(&s.notices_disconnected)),
        );
        gauge(&mut out, "routerd_router_objects", r(|s| s.objects.get()));
        gauge(&mut out, "routerd_router_caches", r(|s| s.caches.get()));
        gauge(&mut out, "routerd_router_pending", r(|s| s.pending.get()));
        counter(&mut out, "routerd_router_saves_total", r(|s| c(&s.saves)));
        counter(
            &mut out,
            "routerd_router_cas_conflicts_total",
            r(|s| c(&s.cas_conflicts)),
        );
        counter(
            &mut out,
            "routerd_router_forwards_total",
            r(|s| c(&s.forwards)),
        );
        counter(
            &mut out,
            "routerd_router_transfers_total",
            r(|s| c(&s.transfers)),
        );
        counter(&mut out, "routerd_router_pulls_total", r(|s| c(&s.pulls)));
        counter(
            &mut out,
            "routerd_router_repairs_total",
            r(|s| c(&s.repairs)),
        );
        counter(
            &mut out,
            "routerd_router_update_syncs_total",
            r(|s| c(&s.update_syncs)),
        );
        counter(
            &mut out,
            "routerd_router_unroutable_total",
            r(|s| c(&s.unroutable)),
        );
        counter(
            &mut out,
            "routerd_router_degrades_total",
            r(|s| c(&s.degrades)),
        );
        counter(
            &mut out,
            "routerd_router_caches_freed_total",
            r(|s| c(&s.caches_freed)),
        );
        let mesh = |read: fn(&shards::MeshStats) -> &AtomicU64| -> i64 {
            self.mesh
                .iter()
                .map(|m| read(m).load(Ordering::Relaxed) as i64)
                .sum()
        };
        counter(&mut out, "routerd_mesh_sent_total", mesh(|m| &m.sent_total));
        counter(&mut out, "routerd_mesh_full_total", mesh(|m| &m.full_total));
        counter(
            &mut out,
            "routerd_mesh_closed_total",
            mesh(|m| &m.closed_total),
        );
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, value: i64) {
    header(out, name, "counter");
    let _ = writeln!(out, "{name} {value}");
}

fn gauge(out: &mut String, name: &str, value: i64) {
    header(out, name, "gauge");
    let _ = writeln!(out, "{name} {value}");
}

fn labelled(out: &mut String, name: &str, reason: &str, value: i64) {
    let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {value}");
}

fn labelled_kind(out: &mut String, name: &str, kind: &str, value: i64) {
    let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_sums_over_cores() {
        let metrics = NodeMetrics::new(2);
        metrics.cores[0].gateway.sessions_accepted.add(2);
        metrics.cores[1].gateway.sessions_accepted.inc();
        metrics.cores[1].gateway.egress_stale_epoch.inc();
        metrics.cores[0].router.objects.set(5);
        let text = metrics.render();
        assert!(
            text.contains("routerd_gateway_sessions_accepted_total 3\n"),
            "{text}"
        );
        assert!(
            text.contains("routerd_gateway_egress_rejected_total{reason=\"stale_epoch\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("routerd_router_objects 5\n"), "{text}");
        assert!(
            text.contains("routerd_gateway_ingress_rejected_total{reason=\"unknown_route\"} 0\n")
        );
    }
}
