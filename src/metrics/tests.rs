use std::collections::BTreeSet;
use std::time::Duration;

use super::*;

#[test]
fn render_sums_over_cores() {
    let metrics = crate::testing::node_metrics(2);
    metrics.cores[0].gateway.sessions_accepted.add(2);
    metrics.cores[1].gateway.sessions_accepted.inc();
    metrics.cores[1].gateway.egress_stale_epoch.inc();
    metrics.cores[0].router.objects.set(5);
    metrics.cores[1].router_counters.mirror(&RouterCounters {
        claims_total: 4,
        ..RouterCounters::default()
    });
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
    assert!(text.contains("routerd_router_claims_total 4\n"), "{text}");
    assert!(text.contains("routerd_gateway_ingress_rejected_total{reason=\"unknown_route\"} 0\n"));
    assert!(text.contains(&format!(
        "routerd_build_info{{version=\"{}\"}} 1\n",
        crate::VERSION
    )));
}

#[test]
fn histograms_sum_buckets_over_cores_cumulatively() {
    let metrics = crate::testing::node_metrics(2);
    // player.get's index in the built-in table.
    let (get, _) = crate::testing::builtin_routes()
        .lookup_indexed(wire::client::route::PLAYER_GET)
        .unwrap();
    metrics.cores[0]
        .requests
        .record(get, Duration::from_micros(30));
    metrics.cores[1]
        .requests
        .record(get, Duration::from_millis(2));
    metrics.cores[1]
        .requests
        .record(get, Duration::from_secs(60));
    assert_eq!(metrics.cores[1].requests.route(get).unwrap().count(), 2);
    let text = metrics.render();
    let series = "routerd_gateway_request_duration_seconds";
    for (le, want) in [("0.00003", 1), ("0.002", 2), ("10", 2), ("+Inf", 3)] {
        let line = format!("{series}_bucket{{route=\"player.get\",le=\"{le}\"}} {want}\n");
        assert!(text.contains(&line), "{line}\n{text}");
    }
    assert!(text.contains(&format!("{series}_count{{route=\"player.get\"}} 3\n")));
    assert!(text.contains(&format!("{series}_sum{{route=\"player.get\"}} 60.002")));
}

/// Every family of every struct, by name, with its declared kind and the
/// kinds its series read.
fn all_families() -> Vec<(&'static str, Kind, Vec<Kind>)> {
    fn kinds<S: 'static>(
        families: &[Family<S>],
        instance: &S,
    ) -> Vec<(&'static str, Kind, Vec<Kind>)> {
        families
            .iter()
            .map(|family| {
                let read = family
                    .series
                    .iter()
                    .map(|series| match (series.read)(instance) {
                        Value::Count(_) => Kind::Counter,
                        Value::Level(_) => Kind::Gauge,
                        Value::Distribution(_) => Kind::Histogram,
                    })
                    .collect();
                (family.name, family.kind, read)
            })
            .collect()
    }
    let mut all = Vec::new();
    all.extend(kinds(GatewayStats::FAMILIES, &GatewayStats::default()));
    all.push((
        gateway::REQUEST_LATENCY.name,
        Kind::Histogram,
        vec![Kind::Histogram],
    ));
    all.extend(kinds(RouterStats::FAMILIES, &RouterStats::default()));
    all.extend(kinds(
        RouterCounterCells::FAMILIES,
        &RouterCounterCells::default(),
    ));
    all.extend(kinds(StoreStats::FAMILIES, &StoreStats::default()));
    all.extend(kinds(MESH_FAMILIES, &shards::MeshStats::default()));
    all.extend(kinds(BUILD_FAMILIES, &()));
    all
}

#[test]
fn every_series_reads_its_familys_kind_and_names_are_unique() {
    let mut names = BTreeSet::new();
    for (name, kind, read) in all_families() {
        assert!(names.insert(name), "{name} is declared twice");
        assert!(!read.is_empty(), "{name} has no series");
        for series_kind in read {
            assert_eq!(series_kind, kind, "{name}");
        }
        match kind {
            Kind::Counter => assert!(name.ends_with("_total"), "{name}"),
            _ => assert!(!name.ends_with("_total"), "{name}"),
        }
    }
    assert!(names.insert(STORE_QUEUE_FAMILIES[0].name));
}

#[test]
fn router_counters_are_all_exported_and_mirrored() {
    // Every field of the core's counters has a series, and mirror copies it:
    // set each to a distinct value and find each value once.
    let families = RouterCounterCells::FAMILIES;
    let series: usize = families.iter().map(|family| family.series.len()).sum();
    let plain = RouterCounters {
        requests_total: 1,
        replies_total: 2,
        handled_total: 3,
        sends_total: 4,
        forwards_total: 5,
        forward_hops_exceeded_total: 6,
        pulls_total: 7,
        repair_attempts_total: 8,
        claims_total: 9,
        saves_total: 10,
        cas_conflicts_total: 11,
        store_indeterminate_total: 12,
        transfers_total: 13,
        transfers_failed_total: 14,
        transfer_ack_timeouts_total: 15,
        update_syncs_sent_total: 16,
        update_syncs_applied_total: 17,
        pending_queue_full_total: 18,
        entries_full_total: 19,
        degrades_total: 20,
        caches_freed_total: 21,
        fences_total: 22,
        dead_owner_claims_total: 23,
        send_failures_total: 24,
        service_requests_total: 25,
        object_timers_total: 26,
        lease_lapsed_refusals_total: 27,
        readopts_total: 28,
        write_retries_total: 29,
        unsaved_objects_dropped_total: 30,
        unsaved_changes_dropped_total: 31,
        write_retry_refusals_total: 32,
        pushes_to_ended_sessions_total: 33,
        paused_events_dropped_total: 34,
    };
    assert_eq!(series, 34);
    let cells = RouterCounterCells::default();
    cells.mirror(&plain);
    let mut seen: Vec<u64> = families
        .iter()
        .flat_map(|family| family.series)
        .map(|series| match (series.read)(&cells) {
            Value::Count(value) => value,
            _ => panic!("a router counter reads a count"),
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=34).collect::<Vec<u64>>());
}
