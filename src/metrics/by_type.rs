//! Calls, errors and latency by object type: the per-route answer counts
//! and latency histograms (`routerd_gateway_requests_total{route, code}`,
//! `routerd_gateway_request_duration_seconds{route}`) added up over the
//! routes whose requests go to each type, as the route table says. A
//! type's p99 is read from its routes' histograms merged bucket by bucket,
//! never averaged from the routes' own p99s: a slow route of few calls
//! weighs what its calls weigh.
//!
//! Sans-IO: it reads the cores' counters as a scrape does and allocates
//! one row per type; the admin endpoint's `GET /calls-by-type` shows it.

use super::gateway::{RequestCounts, RequestLatency, ANSWER_CODES};
use super::histogram::{BUCKET_BOUNDS, BUCKET_BOUNDS_LEN};
use crate::route::{Direction, RouteTable, Served};

/// The finite buckets and `+Inf`, as [`super::Histogram`] keeps them.
pub const LATENCY_BUCKETS: usize = BUCKET_BOUNDS_LEN + 1;

/// The answer codes counted as the server's failures (the console's and
/// `/history`'s errors); every other code but `OK` is a refusal.
pub const SERVER_ERROR_CODES: [&str; 4] = ["UNAVAILABLE", "TIMEOUT", "INTERNAL", "OVERLOADED"];

/// What the requests to one type came to, over the node's life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeCalls {
    pub type_id: u32,
    /// The registered object type's name; `None` for a service or a type
    /// the node knows only by its routes.
    pub name: Option<&'static str>,
    /// A stateless service's routes rather than an object type's.
    pub service: bool,
    /// The client-to-server routes that address the type, by id.
    pub routes: Vec<&'static str>,
    /// Answers by code, indexed like [`ANSWER_CODES`].
    pub answers: [u64; ANSWER_CODES.len()],
    /// Answered requests by latency bucket (each bucket's own count, not
    /// cumulative), indexed like [`BUCKET_BOUNDS`] then `+Inf`.
    pub latency: [u64; LATENCY_BUCKETS],
}

impl TypeCalls {
    fn new(type_id: u32, name: Option<&'static str>, service: bool) -> TypeCalls {
        TypeCalls {
            type_id,
            name,
            service,
            routes: Vec::new(),
            answers: [0; ANSWER_CODES.len()],
            latency: [0; LATENCY_BUCKETS],
        }
    }

    /// Requests answered, whatever the answer.
    pub fn calls(&self) -> u64 {
        self.answers.iter().sum()
    }

    /// Answers with a code of [`SERVER_ERROR_CODES`].
    pub fn errors(&self) -> u64 {
        self.count_where(|code| SERVER_ERROR_CODES.contains(&code))
    }

    /// Answers with any other error code: the request was refused.
    pub fn refused(&self) -> u64 {
        self.count_where(|code| code != "OK" && !SERVER_ERROR_CODES.contains(&code))
    }

    fn count_where(&self, keep: impl Fn(&str) -> bool) -> u64 {
        ANSWER_CODES
            .iter()
            .zip(self.answers)
            .filter(|(code, _)| keep(code))
            .map(|(_, count)| count)
            .sum()
    }

    /// The latency buckets cumulated, as `le` series read.
    pub fn cumulative_latency(&self) -> [u64; LATENCY_BUCKETS] {
        let mut total = 0;
        self.latency.map(|count| {
            total += count;
            total
        })
    }

    /// The `q` quantile of the latency in seconds, as Prometheus's
    /// `histogram_quantile` reads the same buckets; `None` before the first
    /// timed answer.
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        quantile(q, &self.cumulative_latency())
    }
}

/// `histogram_quantile(q, ...)` over cumulative counts of the shared
/// buckets: linear within the bucket the rank falls in, the last finite
/// bound when it falls in `+Inf`.
pub fn quantile(q: f64, cumulative: &[u64; LATENCY_BUCKETS]) -> Option<f64> {
    let total = cumulative[LATENCY_BUCKETS - 1];
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let (mut lower_bound, mut lower_count) = (0.0, 0.0);
    for (index, &count) in cumulative.iter().enumerate() {
        let count = count as f64;
        let Some(&(bound_ns, _)) = BUCKET_BOUNDS.get(index) else {
            return Some(lower_bound);
        };
        let upper = bound_ns as f64 / 1e9;
        if count >= rank {
            let in_bucket = count - lower_count;
            return Some(if in_bucket > 0.0 {
                lower_bound + (upper - lower_bound) * ((rank - lower_count) / in_bucket)
            } else {
                upper
            });
        }
        (lower_bound, lower_count) = (upper, count);
    }
    Some(lower_bound)
}

/// One row per type: every type of `types` (type id, name), zero calls
/// included, in their order, then any other type or service a route of
/// `routes` addresses, by type id. Each row adds up its routes' answers
/// and latency over the cores (`answers` and `latency` of each core, as
/// one scrape reads them). Routes no type serves (`auth.login`) and push
/// routes are in no row.
pub fn calls_by_type<'c>(
    routes: &RouteTable,
    types: &[(u32, &'static str)],
    cores: impl Iterator<Item = (&'c RequestCounts, &'c RequestLatency)> + Clone,
) -> Vec<TypeCalls> {
    let mut rows: Vec<TypeCalls> = types
        .iter()
        .map(|&(type_id, name)| TypeCalls::new(type_id, Some(name), false))
        .collect();
    let mut others: Vec<TypeCalls> = Vec::new();
    for (index, route) in routes.routes().iter().enumerate() {
        if route.direction != Direction::ClientToServer {
            continue;
        }
        let Some(target) = routes.target(route.route_id) else {
            continue;
        };
        let row = match rows.iter().position(|row| row.type_id == target.type_id) {
            Some(at) => &mut rows[at],
            None => {
                let at = match others.iter().position(|row| row.type_id == target.type_id) {
                    Some(at) => at,
                    None => {
                        let service = matches!(target.served, Served::Service(_));
                        others.push(TypeCalls::new(target.type_id, None, service));
                        others.len() - 1
                    }
                };
                &mut others[at]
            }
        };
        row.routes.push(route.name);
        for (counts, latency) in cores.clone() {
            for (slot, answered) in row.answers.iter_mut().enumerate() {
                *answered += counts.get(index, slot);
            }
            if let Some(histogram) = latency.route(index) {
                for (bucket, timed) in row.latency.iter_mut().enumerate() {
                    *timed += histogram.bucket(bucket);
                }
            }
        }
    }
    others.sort_by_key(|row| row.type_id);
    rows.extend(others);
    rows
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::builtins::{PLAYER_TYPE_ID, ROOM_TYPE_ID};
    use crate::metrics::{answer_slot, CoreMetrics};
    use crate::route::{ClientRoute, KeyFrom, Pick};
    use wire::client::{route, ErrorCode};

    fn index_of(table: &RouteTable, route_id: u32) -> usize {
        table.lookup_indexed(route_id).unwrap().0
    }

    fn rows(table: &RouteTable, cores: &[CoreMetrics]) -> Vec<TypeCalls> {
        let types = [(PLAYER_TYPE_ID, "player"), (ROOM_TYPE_ID, "room")];
        calls_by_type(
            table,
            &types,
            cores.iter().map(|core| (&core.answers, &core.requests)),
        )
    }

    #[test]
    fn a_types_calls_are_its_routes_answers_over_every_core() {
        let table = crate::testing::builtin_routes();
        let cores = [CoreMetrics::default(), CoreMetrics::default()];
        let (incr, get, say) = (
            index_of(&table, route::PLAYER_INCR),
            index_of(&table, route::PLAYER_GET),
            index_of(&table, route::ROOM_SAY),
        );
        cores[0].answers.count(incr, answer_slot(None));
        cores[1].answers.count(incr, answer_slot(None));
        cores[1].answers.count(get, answer_slot(None));
        cores[0]
            .answers
            .count(get, answer_slot(Some(ErrorCode::Timeout as u16)));
        cores[0]
            .answers
            .count(say, answer_slot(Some(ErrorCode::BadRequest as u16)));
        // auth.login's answers belong to no type.
        let login = index_of(&table, route::AUTH_LOGIN);
        cores[0].answers.count(login, answer_slot(None));

        let rows = rows(&table, &cores);
        let names: Vec<_> = rows.iter().map(|row| row.name).collect();
        assert_eq!(names, [Some("player"), Some("room")]);
        let (player, room) = (&rows[0], &rows[1]);
        assert!(
            player.routes.contains(&"player.incr"),
            "{:?}",
            player.routes
        );
        assert!(player.routes.contains(&"player.get"));
        assert!(!player.routes.contains(&"auth.login"));
        // The room.* routes address the player's object, which relays to
        // the room: no client route addresses a room.
        assert!(player.routes.contains(&"room.say"));
        assert!(room.routes.is_empty(), "{:?}", room.routes);
        assert_eq!(
            (player.calls(), player.errors(), player.refused()),
            (5, 1, 1)
        );
        assert_eq!(room.calls(), 0);
        assert!(!player.service && !room.service);
    }

    #[test]
    fn a_types_p99_is_read_from_its_routes_histograms_merged() {
        let table = crate::testing::builtin_routes();
        let cores = [CoreMetrics::default(), CoreMetrics::default()];
        let (incr, get) = (
            index_of(&table, route::PLAYER_INCR),
            index_of(&table, route::PLAYER_GET),
        );
        // 990 fast calls of one route, 10 slow ones of another: the merged
        // p99 falls at the fast route's edge; the average of the two
        // routes' p99s would be half a second.
        for _ in 0..990 {
            cores[0].requests.record(incr, Duration::from_micros(50));
        }
        for _ in 0..10 {
            cores[1].requests.record(get, Duration::from_secs(1));
        }
        let player = &rows(&table, &cores)[0];
        assert_eq!(player.cumulative_latency()[LATENCY_BUCKETS - 1], 1000);
        let p99 = player.latency_quantile(0.99).unwrap();
        assert!((p99 - 50e-6).abs() < 1e-9, "{p99}");
        // Past the 99th call the slow ones count: the p99.5 is in their bucket.
        let p995 = player.latency_quantile(0.995).unwrap();
        assert!(p995 > 0.5 && p995 <= 1.0, "{p995}");
        // Nothing timed: no quantile.
        assert_eq!(rows(&table, &cores)[1].latency_quantile(0.99), None);
    }

    #[test]
    fn the_quantile_is_prometheus_histogram_quantile() {
        let mut cumulative = [0; LATENCY_BUCKETS];
        // Four in the bucket (20 us, 30 us], i.e. index 5, nothing after.
        for count in &mut cumulative[5..] {
            *count = 4;
        }
        assert_eq!(BUCKET_BOUNDS[5].0, 30_000);
        let median = quantile(0.5, &cumulative).unwrap();
        assert!((median - 25e-6).abs() < 1e-12, "{median}");
        // Everything past the last bound: that bound.
        let mut beyond = [0; LATENCY_BUCKETS];
        beyond[LATENCY_BUCKETS - 1] = 3;
        assert_eq!(quantile(0.99, &beyond), Some(10.0));
        assert_eq!(quantile(0.99, &[0; LATENCY_BUCKETS]), None);
    }

    #[test]
    fn a_route_of_an_unnamed_type_or_a_service_gets_a_row_of_its_own() {
        let declared = [
            (
                ClientRoute::request(500, "guild.join", KeyFrom::Session),
                150,
                Served::Object,
            ),
            (
                ClientRoute::request(501, "echo.say", KeyFrom::Session),
                300,
                Served::Service(Pick::Rendezvous),
            ),
            (
                ClientRoute::request(502, "guild.leave", KeyFrom::Session),
                150,
                Served::Object,
            ),
        ];
        let table = RouteTable::build(declared).unwrap();
        let cores = [CoreMetrics::default()];
        cores[0].answers.count(
            index_of(&table, 502),
            answer_slot(Some(ErrorCode::Internal as u16)),
        );
        let rows = rows(&table, &cores);
        let shown: Vec<_> = rows
            .iter()
            .map(|row| (row.type_id, row.name, row.service, row.routes.clone()))
            .collect();
        assert_eq!(
            shown,
            [
                (PLAYER_TYPE_ID, Some("player"), false, vec![]),
                (ROOM_TYPE_ID, Some("room"), false, vec![]),
                (150, None, false, vec!["guild.join", "guild.leave"]),
                (300, None, true, vec!["echo.say"]),
            ]
        );
        assert_eq!((rows[2].calls(), rows[2].errors()), (1, 1));
    }
}
