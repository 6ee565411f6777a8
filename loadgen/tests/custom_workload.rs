//! loadgen's custom workloads against a real node: `guild-node` (the
//! guild example, which serves routerd's built-in types too), started on
//! loopback from the same target directory as this loadgen.
//!
//! - A built-in route by id (`--route 11`, `player.incr`, `--body i64:1`):
//!   every answer loadgen counted is an increment the node kept.
//! - A workload file for the guild type: setup lines create and join a
//!   guild per player (a second run finds them created: the accepted code),
//!   a mix of `guild.incr` and `guild.say` (whose pushes are the type's
//!   own); the guilds' counters hold exactly the `guild.incr` answers.
//! - A scripted type's JSON route (examples/scripts/, `counter.add`) with
//!   a JSON body, from the flags and from a workload file: every answer is
//!   a RESPONSE, and the counters hold exactly the answered additions.
//! - `--keys` on the built-in increments: the report's `keys` ledger counts
//!   every increment once, no value twice, and the node's counters hold
//!   exactly the keys acknowledged.
//! - The `.hlog` beside the `.hgrm` reads back (hdrhistogram's interval log
//!   reader) with one interval per second and the run's total count.
//!
//! `cargo test --workspace` builds `guild-node` first; alone, build it
//! with `cargo build -p guild` (the test fails in CI without it and skips
//! elsewhere, saying so).

mod support;

use std::path::Path;

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use support::{counter, guild_node, loadgen_run, player_counters, Node, Session};

const GUILD_INCR: u32 = 304;
const GUILD_JOIN: u32 = 301;
/// examples/scripts/counter.luau's `counter.get`, keyed by the body's `id`.
const COUNTER_GET: u32 = 2002;

/// Runs loadgen against `node` with `args`, one second, no warm-up (so
/// every answer is measured and counted); returns its JSON summary.
fn loadgen(node: &Node, dir: &Path, name: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--workload", "custom"];
    all.extend_from_slice(args);
    loadgen_run(node, dir, name, &all)
}

/// Every interval of an `.hlog`: its histogram's count.
fn hlog_counts(path: &Path) -> Vec<u64> {
    let bytes = std::fs::read(path).expect("an .hlog beside the .hgrm");
    let mut deserializer = Deserializer::new();
    IntervalLogIterator::new(&bytes)
        .map(|entry| entry.expect("a well-formed interval log"))
        .filter_map(|entry| match entry {
            LogEntry::Interval(interval) => Some(interval),
            _ => None,
        })
        .map(|interval| {
            let encoded = base64::engine::general_purpose::STANDARD
                .decode(interval.encoded_histogram())
                .expect("base64");
            let histogram: Histogram<u64> = deserializer
                .deserialize(&mut encoded.as_slice())
                .expect("a V2 histogram");
            histogram.len()
        })
        .collect()
}

fn responses(summary: &serde_json::Value, op: &str) -> u64 {
    let op_summary = &summary["ops"][op];
    assert_eq!(
        op_summary["failed"].as_object().map(|failed| failed.len()),
        Some(0),
        "{op}: {op_summary}"
    );
    op_summary["responses"].as_u64().expect("responses")
}

#[test]
fn a_built_in_route_by_id_is_counted_and_logged_per_second() {
    let Some(binary) = guild_node() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let node = Node::start(&binary, dir.path());
    let summary = loadgen(
        &node,
        dir.path(),
        "incr",
        &["--route", "11", "--body", "i64:1"],
    );
    assert_eq!(summary["protocol_errors"], 0, "{summary}");
    let answered = responses(&summary, "route-11");
    assert!(answered > 0, "{summary}");
    assert_eq!(summary["responses"].as_u64(), Some(answered));

    // Players 1 and 2 (one per connection) hold every counted increment,
    // and no other: each answer loadgen counted is one the node applied.
    assert_eq!(player_counters(&node, &[1, 2]), answered as i64);

    let counts = hlog_counts(&dir.path().join("incr.hlog"));
    assert!(!counts.is_empty() && counts.len() <= 2, "{counts:?}");
    assert_eq!(counts.iter().sum::<u64>(), answered);
}

#[test]
fn a_workload_file_load_tests_the_guild_type() {
    let Some(binary) = guild_node() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let node = Node::start(&binary, dir.path());
    let workload = dir.path().join("guild.workload");
    std::fs::write(
        &workload,
        "# a guild per player, created once (32770: the id is taken, by an earlier run)\n\
         setup guild.create 300 u64:{player} str:g{player} accept=32770\n\
         setup guild.join 301 u64:{player}\n\
         3 guild.incr 304 u64:{player} i64:1\n\
         1 guild.say 303 u64:{player} \"str:hello {seq}\"\n",
    )
    .expect("workload written");
    let workload = workload.display().to_string();
    let mut incremented = 0;
    for run in ["first", "again"] {
        let summary = loadgen(&node, dir.path(), run, &["--workload-file", &workload]);
        assert_eq!(summary["protocol_errors"], 0, "{summary}");
        let incr = responses(&summary, "guild.incr");
        let say = responses(&summary, "guild.say");
        assert!(incr > 0 && say > 0, "{summary}");
        // Each say pushed to its one member: the sender's own session.
        assert!(summary["other_pushes"].as_u64() > Some(0), "{summary}");
        incremented += incr;
        let counts = hlog_counts(&dir.path().join(format!("{run}.hlog")));
        assert_eq!(counts.iter().sum::<u64>(), incr + say, "{run}");
        assert!(dir.path().join(format!("{run}.guild.incr.hgrm")).is_file());
    }
    let kept: i64 = [1u64, 2]
        .into_iter()
        .map(|player| {
            let mut session = Session::login(&node, player);
            session.call(GUILD_JOIN, &player.to_le_bytes());
            let mut body = player.to_le_bytes().to_vec();
            body.extend_from_slice(&0i64.to_le_bytes());
            counter(&session.call(GUILD_INCR, &body))
        })
        .sum();
    assert_eq!(kept, incremented as i64);
}

/// `counter.get` of `player` (examples/scripts/counter.luau): its `n`.
fn scripted_counter(node: &Node, player: u64) -> i64 {
    let body =
        Session::login(node, player).call(COUNTER_GET, format!(r#"{{"id": {player}}}"#).as_bytes());
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("a JSON answer");
    answer["n"].as_i64().expect("n")
}

#[test]
fn a_scripted_route_is_driven_with_a_json_body() {
    let Some(binary) = guild_node() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scripts");
    let node = Node::start_with(
        &binary,
        dir.path(),
        &format!("[scripts]\ndir = {:?}\n", scripts.display().to_string()),
    );
    let summary = loadgen(
        &node,
        dir.path(),
        "add",
        &["--route", "2001", "--body", r#"{"by": 1}"#],
    );
    assert_eq!(summary["protocol_errors"], 0, "{summary}");
    // No ERROR among them (a body the script refused would be one).
    let added = responses(&summary, "route-2001");
    assert!(added > 0, "{summary}");
    let kept: i64 = [1, 2].into_iter().map(|p| scripted_counter(&node, p)).sum();
    assert_eq!(
        kept, added as i64,
        "each answer an addition the object kept"
    );

    // A workload file: JSON to the end of the line, `{player}` filled in
    // (counter.get is keyed by the body's `id`).
    let workload = dir.path().join("counter.workload");
    std::fs::write(
        &workload,
        "3 counter.add 2001 {\"by\": 2, \"note\": \"two words\"}\n\
         1 counter.get 2002 {\"id\": {player}}\n",
    )
    .expect("workload written");
    let summary = loadgen(
        &node,
        dir.path(),
        "mix",
        &["--workload-file", &workload.display().to_string()],
    );
    assert_eq!(summary["protocol_errors"], 0, "{summary}");
    let added_two = responses(&summary, "counter.add");
    assert!(
        added_two > 0 && responses(&summary, "counter.get") > 0,
        "{summary}"
    );
    let kept: i64 = [1, 2].into_iter().map(|p| scripted_counter(&node, p)).sum();
    assert_eq!(kept, (added + 2 * added_two) as i64);
}

#[test]
fn keyed_increments_count_once_in_the_ledger_and_on_the_node() {
    let Some(binary) = guild_node() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let node = Node::start(&binary, dir.path());
    let ledger = dir.path().join("keys.ledger");
    let summary = loadgen_run(
        &node,
        dir.path(),
        "keys",
        &[
            "--workload",
            "incr",
            "--keys",
            "--ledger",
            ledger.to_str().expect("a UTF-8 path"),
        ],
    );
    assert_eq!(summary["protocol_errors"], 0, "{summary}");
    let keys = &summary["keys"];
    let acknowledged = keys["acknowledged"].as_u64().expect("keys in the JSON");
    assert!(acknowledged > 0, "{summary}");
    assert_eq!(
        Some(acknowledged),
        summary["ops"]["incr"]["responses"].as_u64()
    );
    assert_eq!(keys["duplicates"], 0, "{summary}");
    assert_eq!(keys["given_up"], 0, "{summary}");
    // The node's counters hold exactly the acknowledged keys.
    assert_eq!(player_counters(&node, &[1, 2]), acknowledged as i64);
    let text = std::fs::read_to_string(&ledger).expect("ledger written");
    let acked: u64 = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split(' ').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(acked, acknowledged);
}
