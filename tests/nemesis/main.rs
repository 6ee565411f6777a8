//! A Jepsen-style test of routerd on real processes: 3 to 5 `routerd
//! serve` nodes on one store (a SQLite file on a small filesystem of its
//! own, or a throwaway PostgreSQL server behind a proxy of the test's),
//! clients with two or three sessions per player on different nodes
//! (`duplicate_login = "multi"`) sending +1 increments and gets, and a
//! nemesis drawn from a seed: every dependency (node processes, the
//! network between nodes and to the store, the store server, the disk,
//! operators' admin calls, the configuration's timers) misbehaving in
//! every way `faults::KINDS` lists. The checker then holds the history to
//! what the protocol promises (see `check.rs`).
//!
//! Knobs (environment): `NEMESIS_SEED` (default: random, printed),
//! `NEMESIS_SECONDS` (default 60), `NEMESIS_STORE` = `sqlite`, `postgres`
//! or `both` (default), `NEMESIS_PERSIST` = `interval` (default) or
//! `on_write`, `NEMESIS_NODES` (3 to 5, default 3), `NEMESIS_PLAYERS`
//! (default 6), `NEMESIS_KEYS=1` (increments carry request keys and
//! uncertain ones are retried until answered, and the checker demands
//! exactly-once, see `client.rs` and `exactly.rs`; default 0: version-1
//! increments, never retried), `NEMESIS_NETNS=false` (loopback even as
//! root), `NEMESIS_FAULTS=freeze_mid,kill` (the kinds of fault drawn; default the
//! kinds `faults::KINDS` marks on by default, `all` for every kind),
//! `NEMESIS_SAVE_MS` and `NEMESIS_STORE_TIMEOUT_MS` (the save interval and
//! the store's request timeout; default drawn from the seed, among the
//! values `procs.rs` marks on by default, or among all with
//! `NEMESIS_TIMERS=all`, which in one run of two also gives a node a lease
//! twice the others'), `NEMESIS_LONG_LEASE=N|none` (that node, or none),
//! `NEMESIS_HISTORY=FILE` (every operation, fault and poll written there,
//! one a line, in time order). Partitions need root and `ip netns`, the
//! disk faults root and tmpfs; without them the run says so and does the
//! rest. `bench/nemesis.sh` runs longer schedules.

#[path = "../support/mod.rs"]
mod support;

mod check;
mod check_tests;
mod client;
mod cluster;
mod exactly;
mod faults;
mod observe;
mod operator;
mod procs;
mod report;
mod store;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use check::{FinalRead, History};
use client::Session;
use cluster::{Cluster, SETTLE_TIMEOUT, TAKEN_MESSAGE};
use faults::{plan, Abilities, Fault};
use procs::{NodeSpec, Timers, DOWN_AFTER_MS};
use store::{Postgres, Sqlite, Store};
use support::netns::{Family, Net, HOSTS_MAX};

/// The nemesis's namespaces: names `rdm...`, addresses 10.200.0.0 to
/// 10.249.255.255, apart from the other tests' nets.
const NETS: Family = Family {
    prefix: "rdm",
    second_octet_min: 200,
};

/// Runs never overlap: each needs the machine's two CPUs to itself, as
/// far as timing goes.
static ONE_RUN: Mutex<()> = Mutex::new(());

/// Node counts a run accepts.
const NODES_MIN: usize = 3;
const NODES_MAX: usize = 5;

/// Namespace hosts beside the nodes': a takeover's second process, a node
/// that joins.
const HOSTS_EXTRA: usize = 2;

/// Players a run accepts at most (each has two or three sessions).
const PLAYERS_MAX: u64 = 32;

/// Takeovers the standalone test tries before it gives up on starting a
/// second process.
const TAKEOVER_ATTEMPTS: usize = 3;

/// How long a final read may keep trying one node.
const FINAL_READ_LIMIT: Duration = Duration::from_secs(15);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not valid")),
        Err(_) => default,
    }
}

/// A run's settings, from the environment.
struct Settings {
    seed: u64,
    seconds: u64,
    persist: String,
    nodes: usize,
    players: u64,
    /// `NEMESIS_KEYS`: increments carry request keys and are retried.
    keyed: bool,
    /// `NEMESIS_FAULTS`: the kinds of fault to draw from, or the default.
    faults: Option<Vec<String>>,
    timers: Timers,
}

impl Settings {
    /// The environment that replays this run on `kind`.
    fn reproduce(&self, kind: &str) -> String {
        let mut faults = self.faults.as_ref().map_or(String::new(), |faults| {
            format!(" NEMESIS_FAULTS={}", faults.join(","))
        });
        if self.keyed {
            faults += " NEMESIS_KEYS=1";
        }
        let long_lease = self
            .timers
            .long_lease_node
            .map_or("none".to_string(), |node| node.to_string());
        format!(
            "NEMESIS_SEED={} NEMESIS_SECONDS={} NEMESIS_PERSIST={} NEMESIS_STORE={kind} \
             NEMESIS_NODES={} NEMESIS_PLAYERS={}{faults} NEMESIS_SAVE_MS={} \
             NEMESIS_STORE_TIMEOUT_MS={} NEMESIS_LONG_LEASE={long_lease}",
            self.seed,
            self.seconds,
            self.persist,
            self.nodes,
            self.players,
            self.timers.save_interval_ms,
            self.timers.store_timeout_ms
        )
    }
}

impl Settings {
    fn from_env() -> Settings {
        let seed = env_or("NEMESIS_SEED", rand::random::<u64>() % 1_000_000);
        let persist: String = env_or("NEMESIS_PERSIST", "interval".to_string());
        assert!(
            persist == "interval" || persist == "on_write",
            "NEMESIS_PERSIST is interval or on_write, not {persist:?}"
        );
        let nodes = env_or("NEMESIS_NODES", NODES_MIN);
        assert!(
            (NODES_MIN..=NODES_MAX).contains(&nodes) && nodes + HOSTS_EXTRA <= HOSTS_MAX,
            "NEMESIS_NODES is {NODES_MIN} to {NODES_MAX}"
        );
        let players = env_or("NEMESIS_PLAYERS", 6u64);
        assert!(
            (1..=PLAYERS_MAX).contains(&players),
            "NEMESIS_PLAYERS is 1 to {PLAYERS_MAX}"
        );
        let faults = std::env::var("NEMESIS_FAULTS").ok().map(|list| {
            let kinds: Vec<String> = list
                .split(',')
                .map(|kind| kind.trim().to_string())
                .collect();
            for kind in &kinds {
                let names: Vec<&str> = faults::KINDS.iter().map(|kind| kind.name).collect();
                assert!(
                    faults::known(kind),
                    "NEMESIS_FAULTS names {kind:?}, not all or one of {}",
                    names.join(", ")
                );
            }
            kinds
        });
        Settings {
            faults,
            timers: Timers::draw(seed),
            seed,
            seconds: env_or("NEMESIS_SECONDS", 60),
            persist,
            nodes,
            players,
            keyed: env_or::<u8>("NEMESIS_KEYS", 0) != 0,
        }
    }
}

fn store_selected(store: &str) -> bool {
    let chosen: String = env_or("NEMESIS_STORE", "both".to_string());
    assert!(
        ["sqlite", "postgres", "both"].contains(&chosen.as_str()),
        "NEMESIS_STORE is sqlite, postgres or both, not {chosen:?}"
    );
    chosen == "both" || chosen == store
}

/// Namespaces for `hosts` hosts, or `None` after saying why not.
/// `NEMESIS_NETNS=0` runs on loopback even where namespaces work.
fn namespaces(hosts: usize) -> Option<Net> {
    if !env_or("NEMESIS_NETNS", true) {
        println!("partitions skipped: NEMESIS_NETNS=false; nodes run on loopback");
        return None;
    }
    match Net::build(&NETS, hosts) {
        Ok(net) => Some(net),
        Err(why) => {
            println!(
                "partitions skipped: network namespaces unavailable ({why}); nodes run on loopback"
            );
            None
        }
    }
}

/// The store of a run on `kind`, or `None` when it is not installed.
fn open_store(kind: &str, dir: &std::path::Path, net: Option<&Net>) -> Option<Store> {
    match kind {
        "sqlite" => {
            println!("with SQLite, the store server's and its connections' faults do not apply");
            Some(Store::Sqlite(Sqlite::open(dir)))
        }
        _ => Postgres::start(net)
            .expect("PostgreSQL starts")
            .map(|pg| Store::Postgres(Box::new(pg))),
    }
}

/// Stops the clients and pollers when a run ends, also by a panic.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Two or three sessions a player, each on another node slot.
fn start_sessions(
    cluster: &Cluster,
    settings: &Settings,
    players: &[u64],
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<client::Op>>> {
    let mut sessions = Vec::new();
    for &player in players {
        let count = 2 + (player as usize % 2);
        for session in 0..count {
            let worker = Session {
                player,
                session,
                slot: (player as usize + session) % settings.nodes,
                seed: settings.seed ^ (player << 8) ^ session as u64,
                keyed: settings.keyed,
            };
            let (gateways, stop, clock) = (cluster.gateways.clone(), stop.clone(), cluster.clock);
            sessions.push(std::thread::spawn(move || {
                worker.run(gateways, clock, stop)
            }));
        }
    }
    sessions
}

/// Injects every planned fault in turn: what happened, and the fault that
/// could not be injected, if one could not.
fn run_schedule(
    cluster: &mut Cluster,
    schedule: &[faults::Planned],
) -> (Vec<cluster::Injected>, Option<String>) {
    let mut injected = Vec::new();
    for planned in schedule {
        std::thread::sleep(faults::ms(planned.gap_ms));
        match cluster.inject(&planned.fault) {
            Ok(done) => injected.push(done),
            Err(error) => return (injected, Some(format!("{}: {error}", planned.fault))),
        }
    }
    (injected, None)
}

/// Every player's counter through a fresh session on every node.
fn final_reads(cluster: &Cluster, players: &[u64]) -> Vec<FinalRead> {
    let mut finals = Vec::new();
    for slot in 0..cluster.nodes.len() {
        let gateway = cluster.gateways.read().unwrap()[slot];
        for &player in players {
            let value = client::read_counter(gateway, player, FINAL_READ_LIMIT);
            finals.push(FinalRead {
                slot,
                player,
                at_us: cluster.us(),
                value,
            });
        }
    }
    finals
}

/// Prints the run's report; fails the test on a violation or on a fault
/// that could not be injected, with the seed that reproduces it.
fn judge(
    kind: &str,
    settings: &Settings,
    schedule: &str,
    history: &History,
    verdict: &check::Verdict,
    failure: Option<String>,
) {
    let report = format!(
        "nemesis on {kind}, seed {}, persist {}, timers: {}\n{}{}",
        settings.seed,
        settings.persist,
        settings.timers,
        history.summary(),
        verdict.render()
    );
    println!("{report}");
    if let Ok(path) = std::env::var("NEMESIS_HISTORY") {
        match history.write(std::path::Path::new(&path)) {
            Ok(()) => println!("history written to {path}"),
            Err(error) => println!("history not written to {path}: {error}"),
        }
    }
    if let Some(failure) = failure {
        panic!(
            "a fault could not be injected (seed {}): {failure}; reproduce with {}\n{schedule}{report}",
            settings.seed,
            settings.reproduce(kind)
        );
    }
    assert!(
        verdict.is_clean(),
        "violations found (seed {}); reproduce with {}\n{schedule}{report}",
        settings.seed,
        settings.reproduce(kind)
    );
}

/// One whole run on `kind` (`sqlite` or `postgres`).
fn nemesis(kind: &str) {
    if !store_selected(kind) {
        println!("skipped: NEMESIS_STORE does not select {kind}");
        return;
    }
    let _one = ONE_RUN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let settings = Settings::from_env();
    println!(
        "nemesis on {kind}: seed {} ({} s, persist {}, {} nodes, {} players, {}); reproduce with {}",
        settings.seed,
        settings.seconds,
        settings.persist,
        settings.nodes,
        settings.players,
        if settings.keyed {
            "keyed increments, retried"
        } else {
            "version-1 increments, never retried"
        },
        settings.reproduce(kind)
    );
    let dir = tempfile::tempdir().unwrap();
    let net = namespaces(settings.nodes + HOSTS_EXTRA);
    let Some(store) = open_store(kind, dir.path(), net.as_ref()) else {
        return;
    };
    let spec = NodeSpec::new(dir.path(), &settings.persist, &store, settings.timers);
    let can = Abilities {
        partitions: net.is_some(),
        store_server: matches!(store, Store::Postgres(_)),
        disk: matches!(&store, Store::Sqlite(sqlite) if sqlite.disk.is_some()),
        cpus: spec.cpus,
        players: settings.players,
        timers: settings.timers,
        kinds: settings.faults.clone(),
    };
    let clock = Instant::now();
    let mut cluster = Cluster::start(settings.nodes, spec, store, net, clock, settings.players)
        .expect("cluster starts");
    cluster.keyed = settings.keyed;
    let schedule = plan(settings.seed, settings.seconds, settings.nodes, &can);
    let schedule_text = render_schedule(&schedule);
    println!("timers: {}", settings.timers);
    print!("{schedule_text}");

    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_panic = StopOnDrop(stop.clone());
    let players: Vec<u64> = (1..=settings.players).collect();
    let owners = observe::poll_owners(
        players.clone(),
        cluster.admins.clone(),
        clock,
        cluster.observations.clone(),
        stop.clone(),
    );
    let sessions = start_sessions(&cluster, &settings, &players, &stop);

    let (injected, failure) = run_schedule(&mut cluster, &schedule);
    cluster.heal_all();
    // A quiet end, to the run's length and at least `down_after_ms`: the
    // last fault's effects settle while the clients go on.
    let quiet_until = (clock + Duration::from_secs(settings.seconds))
        .max(Instant::now() + faults::ms(DOWN_AFTER_MS));
    std::thread::sleep(quiet_until.saturating_duration_since(Instant::now()));
    let settle_from = Instant::now();
    let settled = cluster.settle(SETTLE_TIMEOUT);
    let settle_took = settle_from.elapsed();
    stop.store(true, Ordering::Release);
    let mut ops: Vec<client::Op> = sessions
        .into_iter()
        .flat_map(|session| session.join().expect("session thread"))
        .collect();
    ops.append(&mut cluster.burst_ops);
    owners.join().unwrap();
    // Answers in flight when the clients stopped have landed by now.
    std::thread::sleep(Duration::from_secs(1));
    let finals_from = Instant::now();
    let finals = final_reads(&cluster, &players);
    println!(
        "run ended at {:.1} s: settled in {:.1} s, final reads took {:.1} s",
        clock.elapsed().as_secs_f64(),
        settle_took.as_secs_f64(),
        finals_from.elapsed().as_secs_f64()
    );
    cluster.retire_all();
    let history = History {
        ops,
        polls: std::mem::take(&mut *cluster.observations.polls.lock().unwrap()),
        owners: std::mem::take(&mut *cluster.observations.owners.lock().unwrap()),
        kills: cluster.kills.clone(),
        injected,
        takeovers: cluster.takeovers.clone(),
        finals,
        interval: settings.persist == "interval",
        declarations: Default::default(),
        owners_by_player: Default::default(),
    };
    let check_from = Instant::now();
    let mut verdict = history.check();
    println!("checked in {:.1} s", check_from.elapsed().as_secs_f64());
    if !settled {
        verdict.notes.push(format!(
            "the cluster did not settle within {SETTLE_TIMEOUT:?} after the last fault"
        ));
    }
    drop(cluster);
    judge(kind, &settings, &schedule_text, &history, &verdict, failure);
}

/// The schedule as every run prints it, and a violation again.
fn render_schedule(schedule: &[faults::Planned]) -> String {
    let mut out = format!("schedule ({} faults):\n", schedule.len());
    for planned in schedule {
        out += &format!(
            "  after {} ms: [{}] {}\n",
            planned.gap_ms,
            planned.fault.kind(),
            planned.fault
        );
    }
    out
}

#[test]
fn nemesis_on_sqlite() {
    nemesis("sqlite");
}

#[test]
fn nemesis_on_postgres() {
    nemesis("postgres");
}

/// Item 2 alone: node 1's first process is cut off (frozen on SQLite, cut
/// from the store on PostgreSQL) until its row stood still for
/// `down_after_ms`, a second process starts with id 1, the first is let
/// back: it must exit 1 saying its id was taken, and never serve beside
/// the second.
fn takeover(kind: &str) {
    if !store_selected(kind) {
        println!("skipped: NEMESIS_STORE does not select {kind}");
        return;
    }
    let _one = ONE_RUN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let nodes = NODES_MIN;
    let net = namespaces(nodes + HOSTS_EXTRA);
    let Some(store) = open_store(kind, dir.path(), net.as_ref()) else {
        return;
    };
    let spec = NodeSpec::new(dir.path(), "on_write", &store, Timers::STEADY);
    let clock = Instant::now();
    let mut cluster = Cluster::start(nodes, spec, store, net, clock, 1).expect("cluster starts");
    // On SQLite a frozen first process may hold the file's write lock, so
    // the second cannot open the store: settle and try again.
    let mut done = Vec::new();
    for _ in 0..TAKEOVER_ATTEMPTS {
        let attempt = cluster
            .inject(&Fault::Takeover { slot: 0 })
            .expect("takeover runs");
        for note in &attempt.notes {
            println!("{note}");
        }
        done.push(attempt);
        if !cluster.takeovers.is_empty() {
            break;
        }
        assert!(cluster.settle(SETTLE_TIMEOUT), "the cluster settles");
    }
    assert!(
        !cluster.takeovers.is_empty(),
        "no second process with id 1 started in {TAKEOVER_ATTEMPTS} attempts"
    );
    // The survivor serves node 1 and the cluster settles around it.
    assert!(cluster.settle(SETTLE_TIMEOUT), "the cluster settles");
    cluster.retire_all();
    let history = History {
        ops: Vec::new(),
        polls: std::mem::take(&mut *cluster.observations.polls.lock().unwrap()),
        owners: Vec::new(),
        kills: cluster.kills.clone(),
        injected: done,
        takeovers: cluster.takeovers.clone(),
        finals: Vec::new(),
        interval: false,
        declarations: Default::default(),
        owners_by_player: Default::default(),
    };
    let verdict = history.check();
    // How far the incarnations of node 1 went: two processes that keep
    // taking the row from each other climb fast.
    let mut climbed: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
    for poll in history.polls.iter().filter(|poll| poll.node_id == 1) {
        let seen = climbed
            .entry(poll.pid)
            .or_insert((poll.incarnation, poll.incarnation));
        seen.0 = seen.0.min(poll.incarnation);
        seen.1 = seen.1.max(poll.incarnation);
    }
    for (pid, (low, high)) in climbed {
        println!("node 1 pid {pid}: incarnations {low} to {high}");
    }
    println!("{}", verdict.render());
    drop(cluster);
    let outcome = &history.takeovers[0];
    assert!(
        outcome.first_exited_as_fixed,
        "the first process of node 1 should exit 1 saying its id {TAKEN_MESSAGE}: {}",
        outcome.description
    );
    assert!(verdict.is_clean(), "{}", verdict.render());
}

#[test]
fn takeover_on_sqlite() {
    takeover("sqlite");
}

#[test]
fn takeover_on_postgres() {
    takeover("postgres");
}
