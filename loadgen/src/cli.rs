//! Command line: every knob of a run, with defaults that are safe on a
//! 2-core machine (one generator thread, leaving the other core to the node).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::Serialize;

/// The secret of a fresh routerd checkout (`routerd::config::DEVELOPMENT_SECRET`);
/// kept as a copy so the generator does not link the whole node, and checked
/// against the node's source by a test.
pub const DEVELOPMENT_SECRET: &str = "routerd-development-secret";

/// The environment variable that gives the secret when `--secret` does not
/// (the server reads the same one).
pub const SECRET_ENV: &str = "ROUTERD_AUTH_SECRET";

/// Connections one run may open; each holds buffers and a player login.
pub const CONNECTIONS_MAX: usize = 100_000;

/// Pipeline depth per connection; the server's default `max_inflight` is 1024.
pub const PIPELINE_MAX: usize = 1024;

/// Players one run may spread its requests over.
pub const PLAYERS_MAX: u64 = 100_000_000;

/// Gateways one run may name with `--addr`.
pub const ADDRS_MAX: usize = 64;

/// The shortest --cut-every: a session must have time to resume and send
/// between two cuts.
pub const CUT_EVERY_MIN: Duration = Duration::from_millis(10);

/// The wire protocol spoken to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Proto {
    /// routerd's client protocol (docs/protocol.md).
    Routerd,
    /// Redis's RESP2: PING, INCR and GET on the key `player:<id>`.
    Resp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// `sys.ping` before login: answered by the gateway's auth service.
    Ping,
    /// `sys.ping` after login: answered by the player's object.
    PingRouted,
    /// `player.incr` by 1 on the session's player.
    Incr,
    /// A weighted mix of `player.get`, `player.incr` and `sys.ping`.
    Mixed,
    /// Members join rooms; a fraction of them `room.say`; PUSHes are timed.
    Room,
    /// Any route: `--route` and `--body`, or `--workload-file`.
    Custom,
}

impl Workload {
    /// Whether sessions must log in before the measured phase.
    pub fn needs_login(self) -> bool {
        !matches!(self, Workload::Ping)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distribution {
    Uniform,
    Zipfian,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Persist {
    Interval,
    OnWrite,
}

/// Drive a routerd node (or anything speaking docs/protocol.md), or a Redis
/// server with the same client (--proto resp), and measure it.
#[derive(Clone, Debug, Parser, Serialize)]
#[command(
    name = "loadgen",
    version,
    about = "routerd's io_uring load generator: drives a node over its client protocol \
             (docs/protocol.md: frames, routes, error codes), or Redis over RESP2 with the \
             same client, and measures it"
)]
pub struct Args {
    /// Client address of a gateway (ignored with --spawn-node). Give it
    /// several times to spread the connections over several gateways
    /// (connection i goes to the (i mod n)-th); redirects and reconnects
    /// may use any of them.
    /// A host name (`localhost:7400`) is resolved once, at start.
    #[arg(long = "addr", default_value = "127.0.0.1:7400", value_parser = parse_addr)]
    pub addrs: Vec<SocketAddr>,

    /// routerd: docs/protocol.md. resp: Redis's RESP2, with `sys.ping` as
    /// `PING <body>` (a bare `PING` when --body-bytes is 0), `player.incr`
    /// as `INCR player:<id>` and `player.get` as `GET player:<id>`;
    /// workloads ping, incr and mixed; no login.
    #[arg(long, value_enum, default_value_t = Proto::Routerd)]
    pub proto: Proto,

    #[arg(long, value_enum, default_value_t = Workload::Ping)]
    pub workload: Workload,

    /// --workload custom: the route id every request goes to (route ids
    /// and body layouts: docs/protocol.md, or your type's own table).
    #[arg(long, conflicts_with = "workload_file")]
    pub route: Option<u32>,

    /// --workload custom with --route: the body, fields in order, little
    /// endian: `u8:` `u16:` `u32:` `u64:` `i32:` `i64:` a number or
    /// `{player}` (the session's player) or `{seq}` (the request's number),
    /// `str:TEXT` (variables substituted inside), `hex:0a1b`; e.g.
    /// `--route 304 --body 'u64:{player} i64:1'`. A body starting with `{`
    /// or `[` is one JSON value, sent as written (a scripted route's, with
    /// `{player}` and `{seq}` filled in): `--route 2001 --body '{"by":1}'`.
    #[arg(long, default_value = "", requires = "route")]
    pub body: String,

    /// --workload custom: a file of requests, one a line: `WEIGHT NAME
    /// ROUTE BODY...` for the measured mix (up to 8, each reported under its
    /// name), `setup NAME ROUTE BODY... [accept=CODE,..]` for requests sent
    /// once after every login, in order (an ERROR with a listed code counts
    /// as done); `#` starts a comment.
    #[arg(long)]
    pub workload_file: Option<PathBuf>,

    /// The parsed custom workload (`Args::load_custom`).
    #[arg(skip)]
    #[serde(skip)]
    pub custom: Option<std::sync::Arc<crate::custom::Custom>>,

    /// Connections, one logged-in player at a time each.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,

    /// Players, ids player_base.. [default: one per connection]. A
    /// request acts on its session's own player, and a second login of a
    /// player kicks the first (kick_old), so players are dealt out to
    /// connections: connection i owns players i, i+C, i+2C, ... (C =
    /// --connections), and no player is ever on two connections at once.
    /// A connection logs in as its first player; after
    /// --requests-per-login requests it finishes what it has in flight,
    /// reconnects to the same gateway and logs in as its next player
    /// (round robin), so every player gets requests and each switch costs
    /// a reconnect and a login, as on a real gateway. With --proto resp
    /// the connection only moves to the next player's key.
    #[arg(long)]
    pub players: Option<u64>,

    /// With --players above --connections: requests a connection sends as
    /// one player before it moves to its next one.
    #[arg(long, default_value_t = 1000)]
    pub requests_per_login: u64,

    /// When a connection closes under the run, reconnect (the same gateway
    /// first, then the other --addr in turn) after a jittered exponential
    /// backoff (10 ms doubling to 1 s, at most 64 attempts), log in again
    /// and go on; requests in flight on it count as lost. Without it a
    /// closed connection stays closed and fails the run. A `sys.redirect`
    /// is followed either way; a kicked session is never reconnected.
    #[arg(long)]
    pub reconnect: bool,

    /// Send every `player.incr` and `room.say` as a version-2 REQUEST with a
    /// request key of its own (docs/protocol.md, section 12), so the server
    /// remembers each answer: measures what keys cost against a run
    /// without. A `player.incr` whose outcome is uncertain (UNAVAILABLE,
    /// TIMEOUT, INTERNAL, a lost connection) is sent again with its key
    /// (unmeasured, on the same player's next connection, up to 8 attempts);
    /// the report's `keys` line counts what the keys came to.
    #[arg(long)]
    pub keys: bool,

    /// Resumable sessions (docs/protocol.md, section 12): log in with a
    /// version-2 `auth.login`, keep the session's resume token and the
    /// highest push number received, and bring a connection that ends
    /// under the run (--cut-every, or closed by the server with
    /// --reconnect) back with `auth.resume`; a refused resume falls back
    /// to a fresh login. Every push's number is checked: one skipped or
    /// received twice fails the run. Requests in flight at a cut are lost
    /// (their answers are not replayed); add --keys to send the increments
    /// among them again with their keys, so they count once. The report's
    /// `resume` lines count cuts, resumes, refusals by reason, fresh
    /// logins and the push checks.
    #[arg(long)]
    pub resume: bool,

    /// With --resume: cut each session's connection abortively (a TCP
    /// reset, no goodbye) about this often (jittered, half to one and a
    /// half times; e.g. `500ms`), and resume it on a new connection at once.
    #[arg(long, value_parser = parse_duration)]
    #[serde(serialize_with = "ser_opt_duration")]
    pub cut_every: Option<Duration>,

    /// Closed loop: requests in flight per connection. Open loop: the most
    /// in flight per connection; more wait (their latency still counts from
    /// the intended send time).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,

    /// Closed loop: send the pipeline depth at once and wait for every
    /// answer before the next batch (what `redis-benchmark -P` does),
    /// instead of keeping the depth in flight. Fewer requests are in flight
    /// on average, so latency at a given throughput is lower: use it to
    /// compare with a tool that pipelines this way.
    #[arg(long)]
    pub batch: bool,

    /// Generator threads, each pinned to one CPU and driving its share of
    /// the connections.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,

    /// CPUs to pin the threads to, comma separated; default: the last
    /// `threads` CPUs (the node usually starts on CPU 0).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,

    /// Measured phase, e.g. `10s`, `500ms`, `1m`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    #[serde(serialize_with = "ser_duration")]
    pub duration: Duration,

    /// Load before the measured phase, excluded from the results.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    #[serde(serialize_with = "ser_duration")]
    pub warmup: Duration,

    /// Open loop: total requests per second, latency measured from each
    /// request's intended send time. Absent: closed loop.
    #[arg(long)]
    pub rate: Option<u64>,

    /// How long to wait for outstanding answers after the measured phase;
    /// what is still unanswered then is counted.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    #[serde(serialize_with = "ser_duration")]
    pub drain: Duration,

    /// New connections per second (over all threads) during setup.
    #[arg(long, default_value_t = 2000)]
    pub connect_rate: u64,

    /// HMAC secret for login tokens; wins over $ROUTERD_AUTH_SECRET
    /// [default: $ROUTERD_AUTH_SECRET, else the development secret].
    #[arg(long)]
    #[serde(skip)]
    pub secret: Option<String>,

    /// First player id: player index p (see --players) is player_base + p,
    /// and connection i first logs in as player_base + i.
    #[arg(long, default_value_t = 1)]
    pub player_base: u64,

    /// Which connection sends each open-loop request, and so which player:
    /// uniform, or zipfian (hot players). Open loop only: in closed loop
    /// every connection sends as fast as its pipeline allows, and zipfian
    /// without --rate is refused.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub dist: Distribution,

    /// Zipfian exponent.
    #[arg(long, default_value_t = 0.99)]
    pub zipf_s: f64,

    /// Mixed workload weights, `get,incr,ping`.
    #[arg(long, default_value = "4,1,1", value_parser = parse_mix)]
    pub mix: [u32; 3],

    /// Bytes of each `sys.ping` body.
    #[arg(long, default_value_t = 16)]
    pub body_bytes: usize,

    /// Room workload: members per room.
    #[arg(long, default_value_t = 8)]
    pub room_size: usize,

    /// Room workload: fraction of members that say (the rest only listen).
    #[arg(long, default_value_t = 0.25)]
    pub say_fraction: f64,

    /// Largest frame body (RESP: bulk string) accepted from the server.
    #[arg(long, default_value_t = wire::client::DEFAULT_MAX_BODY)]
    pub max_body: u32,

    /// Write the figures and the full configuration as JSON: totals, each
    /// kind of request under `ops`, failed requests by code, moves
    /// (redirects, reconnects), and one entry per second of the measured
    /// phase under `series` (by intended send time).
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Write, for each player that sent `player.incr`, one line `player
    /// acked max_counter uncertain`: the increments answered OK (each added
    /// one), the highest counter an answer showed, and the increments whose
    /// outcome is unknown (answered UNAVAILABLE, TIMEOUT or INTERNAL, lost
    /// with a connection, or unanswered at the end), counted over the whole
    /// run, warm-up included. A player's counter must then be at least
    /// `acked` and at most `acked + uncertain` above where it started.
    #[arg(long)]
    pub ledger: Option<PathBuf>,

    /// Write the latency percentile distribution (HdrHistogram text) of
    /// every answer; when several kinds of request were measured (mixed),
    /// each kind's also goes beside it (run.hgrm: run.get.hgrm, ...).
    #[arg(long)]
    pub hgrm: Option<PathBuf>,

    /// Write an HTML report (one self-contained file: the latency
    /// percentiles, and the throughput and p99 of each second, as inline
    /// SVG), drawn from the same summary --json writes.
    #[arg(long)]
    pub html: Option<PathBuf>,

    /// Start a routerd node on free loopback ports, run, stop it.
    #[arg(long)]
    pub spawn_node: bool,

    /// The routerd binary for --spawn-node [default: next to loadgen].
    #[arg(long)]
    pub routerd: Option<PathBuf>,

    /// --spawn-node: the node's CPUs [default: those the generator leaves free].
    #[arg(long, value_delimiter = ',')]
    pub node_cpus: Option<Vec<usize>>,

    /// --spawn-node: player persistence mode.
    #[arg(long, value_enum, default_value_t = Persist::Interval)]
    pub node_persist: Persist,

    /// --spawn-node: microseconds an idle core of the node busy-polls its
    /// ring before it sleeps (`cores.spin_before_park_us`).
    #[arg(long, default_value_t = 0)]
    pub node_spin_us: u64,

    /// Never print the per-second progress line (it is off unless stderr
    /// is a terminal anyway).
    #[arg(long)]
    pub quiet: bool,

    /// Print a per-second table on stdout as the run goes (second,
    /// requests/s, p50, p99, failed, bytes/s in and out), whether stdout is
    /// a terminal, a pipe or a file; the summary follows it.
    #[arg(long, conflicts_with = "quiet")]
    pub progress: bool,

    /// Speak TLS: to routerd's `gateway.tls_listen` (ALPN routerd), with
    /// --websocket to a `websocket_tls` listener (ALPN http/1.1), or with
    /// --proto resp to a Redis `--tls-port` (no ALPN).
    #[arg(long)]
    pub tls: bool,

    /// --tls: the CA certificate (PEM) that signed the server's.
    #[arg(long, requires = "tls")]
    pub ca_file: Option<PathBuf>,

    /// --tls: accept any certificate (tests and benchmarks on loopback).
    #[arg(long, requires = "tls", conflicts_with = "ca_file")]
    pub insecure: bool,

    /// --tls: the name the server's certificate must carry.
    #[arg(long, default_value = "localhost", requires = "tls")]
    pub server_name: String,

    /// Speak WebSocket to routerd's `gateway.websocket_listen`: the upgrade
    /// on `/`, then each batch of requests in one binary message.
    #[arg(long, conflicts_with = "spawn_node")]
    pub websocket: bool,
}

impl Args {
    /// The TLS and WebSocket layers every connection speaks through.
    pub fn layers(&self) -> Result<Option<crate::engine::LayerSpec>, String> {
        if !self.tls && !self.websocket {
            return Ok(None);
        }
        if self.websocket && self.proto == Proto::Resp {
            return Err("--websocket speaks routerd's protocol, not --proto resp".into());
        }
        let tls = if self.tls {
            let alpn: &[u8] = match (self.proto, self.websocket) {
                (_, true) => b"http/1.1",
                (Proto::Routerd, false) => b"routerd",
                (Proto::Resp, false) => b"",
            };
            let mut config =
                wire::layers::client_config(self.ca_file.as_deref(), self.insecure, alpn)?;
            if alpn.is_empty() {
                if let Some(config) = std::sync::Arc::get_mut(&mut config) {
                    config.alpn_protocols.clear();
                }
            }
            let name = rustls::pki_types::ServerName::try_from(self.server_name.clone())
                .map_err(|error| format!("--server-name: {error}"))?;
            Some((config, name))
        } else {
            None
        };
        Ok(Some(crate::engine::LayerSpec {
            tls,
            websocket_host: self.websocket.then(|| self.server_name.clone()),
        }))
    }
}

impl Args {
    /// Rejects combinations clap cannot express.
    pub fn validate(&self) -> Result<(), String> {
        if self.connections == 0 || self.connections > CONNECTIONS_MAX {
            return Err(format!("--connections must be in 1..={CONNECTIONS_MAX}"));
        }
        if self.addrs.is_empty() || self.addrs.len() > ADDRS_MAX {
            return Err(format!("--addr may be given 1 to {ADDRS_MAX} times"));
        }
        self.validate_players()?;
        self.validate_proto()?;
        self.validate_resume()?;
        if self.pipeline == 0 || self.pipeline > PIPELINE_MAX {
            return Err(format!("--pipeline must be in 1..={PIPELINE_MAX}"));
        }
        if self.threads == 0 || self.threads > self.connections {
            return Err("--threads must be in 1..=connections".to_string());
        }
        if let Some(cpus) = &self.cpus {
            if cpus.len() < self.threads {
                return Err("--cpus must name at least one CPU per thread".to_string());
            }
        }
        if self.duration.is_zero() {
            return Err("--duration must be positive".to_string());
        }
        if self.rate == Some(0) {
            return Err("--rate must be positive".to_string());
        }
        if self.batch && self.rate.is_some() {
            return Err(
                "--batch is a closed-loop discipline; it does not go with --rate".to_string(),
            );
        }
        if self.connect_rate == 0 {
            return Err("--connect-rate must be positive".to_string());
        }
        if self.player_base == 0 {
            return Err("--player-base must not be 0 (player ids are never 0)".to_string());
        }
        if self.mix.iter().all(|w| *w == 0) {
            return Err("--mix needs one positive weight".to_string());
        }
        if self.body_bytes > self.max_body as usize {
            return Err("--body-bytes must be at most --max-body".to_string());
        }
        if self.room_size == 0 || !(0.0..=1.0).contains(&self.say_fraction) {
            return Err("--room-size must be positive and --say-fraction in 0..=1".to_string());
        }
        if self.dist == Distribution::Zipfian && self.rate.is_none() {
            return Err(
                "--dist zipfian needs --rate: it picks which connection sends each \
                        open-loop request, and in closed loop every connection sends as fast \
                        as its pipeline allows, so there is nothing to skew"
                    .to_string(),
            );
        }
        if !self.zipf_s.is_finite() || self.zipf_s <= 0.0 {
            return Err("--zipf-s must be positive".to_string());
        }
        Ok(())
    }

    fn validate_players(&self) -> Result<(), String> {
        let players = self.player_count();
        if players < self.connections as u64 || players > PLAYERS_MAX {
            return Err(format!(
                "--players must be in --connections..={PLAYERS_MAX} (each connection needs a player)"
            ));
        }
        if self.player_base.checked_add(players).is_none() {
            return Err("--player-base + --players overflows a player id".to_string());
        }
        if self.requests_per_login == 0 {
            return Err("--requests-per-login must be positive".to_string());
        }
        if players > self.connections as u64 {
            match self.workload {
                Workload::Ping => {
                    return Err("--players needs a workload that acts on players; \
                                ping before login has none"
                        .to_string())
                }
                Workload::Room => {
                    return Err("--players does not go with --workload room: \
                                room members are connections"
                        .to_string())
                }
                Workload::PingRouted | Workload::Incr | Workload::Mixed | Workload::Custom => {}
            }
        }
        Ok(())
    }

    fn validate_resume(&self) -> Result<(), String> {
        if self.resume && !self.needs_login() {
            return Err(
                "--resume needs sessions: --proto routerd and a workload that logs in \
                        (not ping)"
                    .to_string(),
            );
        }
        match self.cut_every {
            Some(_) if !self.resume => Err("--cut-every goes with --resume".to_string()),
            Some(every) if every < CUT_EVERY_MIN => Err(format!(
                "--cut-every must be at least {} ms",
                CUT_EVERY_MIN.as_millis()
            )),
            _ => Ok(()),
        }
    }

    fn validate_proto(&self) -> Result<(), String> {
        if self.proto == Proto::Routerd {
            return Ok(());
        }
        if !matches!(
            self.workload,
            Workload::Ping | Workload::Incr | Workload::Mixed
        ) {
            return Err(
                "--proto resp has no login or rooms: use --workload ping, incr or mixed"
                    .to_string(),
            );
        }
        if self.spawn_node {
            return Err(
                "--spawn-node starts routerd; with --proto resp point --addr at a Redis server"
                    .to_string(),
            );
        }
        Ok(())
    }

    /// Reads `--route`/`--body` or `--workload-file` into `custom`; a
    /// custom workload needs one of them, and they need it.
    pub fn load_custom(&mut self) -> Result<(), String> {
        let wanted = self.route.is_some() || self.workload_file.is_some();
        if self.workload != Workload::Custom {
            if wanted {
                return Err("--route and --workload-file go with --workload custom".to_string());
            }
            return Ok(());
        }
        let custom = match (&self.route, &self.workload_file) {
            (Some(route), None) => {
                crate::custom::Custom::from_flags(*route, &self.body, self.max_body)?
            }
            (None, Some(path)) => {
                let text = read_bounded(path, crate::custom::WORKLOAD_FILE_BYTES_MAX)?;
                crate::custom::Custom::from_text(&text, self.max_body)
                    .map_err(|e| format!("{}: {e}", path.display()))?
            }
            _ => {
                return Err(
                    "--workload custom needs --route (and --body) or --workload-file".to_string(),
                )
            }
        };
        self.custom = Some(std::sync::Arc::new(custom));
        Ok(())
    }

    /// How the report names `op`: a custom request by its workload's name.
    pub fn op_name(&self, op: crate::workload::Op) -> String {
        match (op, &self.custom) {
            (crate::workload::Op::Custom(n), Some(custom)) => custom
                .requests
                .get(usize::from(n))
                .map_or_else(|| format!("custom-{n}"), |request| request.name.clone()),
            _ => op.name().to_string(),
        }
    }

    /// Players the run spreads its requests over.
    pub fn player_count(&self) -> u64 {
        self.players.unwrap_or(self.connections as u64)
    }

    /// Whether sessions must log in before they send.
    pub fn needs_login(&self) -> bool {
        self.proto == Proto::Routerd && self.workload.needs_login()
    }

    /// The token secret: `--secret`, else `$ROUTERD_AUTH_SECRET`, else the
    /// development secret. A flag on the command line is the most specific
    /// thing a user said, so it wins over the environment (the server's
    /// order, environment over config file, is about a different pair).
    pub fn effective_secret(&self) -> String {
        secret_from(self.secret.as_deref(), std::env::var(SECRET_ENV).ok())
    }
}

/// A file's text, refused past `bytes_max` (read no further than that).
fn read_bounded(path: &std::path::Path, bytes_max: usize) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(bytes_max as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() > bytes_max {
        return Err(format!("{}: over {bytes_max} bytes", path.display()));
    }
    Ok(text)
}

fn secret_from(flag: Option<&str>, env: Option<String>) -> String {
    flag.map(str::to_string)
        .or(env)
        .unwrap_or_else(|| DEVELOPMENT_SECRET.to_string())
}

/// `10s`, `250ms`, `2m`, `1.5s`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale_s) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("invalid duration {text:?} (try 10s, 500ms, 1m)"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("invalid duration {text:?}"));
    }
    Ok(Duration::from_secs_f64(value * scale_s))
}

fn parse_mix(text: &str) -> Result<[u32; 3], String> {
    let parts: Vec<&str> = text.split(',').collect();
    if parts.len() != 3 {
        return Err("--mix is three weights: get,incr,ping".to_string());
    }
    let mut mix = [0u32; 3];
    for (slot, part) in mix.iter_mut().zip(parts) {
        *slot = part
            .trim()
            .parse()
            .map_err(|_| format!("invalid weight {part:?}"))?;
    }
    Ok(mix)
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn ser_opt_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// `IP:PORT`, or `HOST:PORT` resolved to its first IPv4 address (else its
/// first), as routerd reads its own config addresses.
fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let resolved: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|error| {
            format!("{text:?} is neither IP:PORT nor HOST:PORT that resolves: {error}")
        })?
        .collect();
    resolved
        .iter()
        .find(|addr| addr.is_ipv4())
        .or_else(|| resolved.first())
        .copied()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    /// The help names the protocol document a user of custom routes needs.
    #[test]
    fn the_help_cites_the_protocol() {
        use clap::CommandFactory;
        let help = Args::command().render_help().to_string();
        assert!(help.contains("docs/protocol.md"), "{help}");
        let custom = Args::command().render_long_help().to_string();
        assert!(custom.contains("--workload-file"), "{custom}");
    }

    #[test]
    fn defaults_validate() {
        let args = Args::parse_from(["loadgen"]);
        assert_eq!(args.threads, 1);
        assert_eq!(args.mix, [4, 1, 1]);
        assert!(args.validate().is_ok());
        let bad = Args::parse_from(["loadgen", "--pipeline", "0"]);
        assert!(bad.validate().is_err());
    }

    #[test]
    fn resp_takes_only_what_redis_can_answer() {
        for workload in ["ping", "incr", "mixed"] {
            let args = Args::parse_from(["loadgen", "--proto", "resp", "--workload", workload]);
            assert_eq!(args.validate(), Ok(()), "{workload}");
            assert!(!args.needs_login());
        }
        for workload in ["ping-routed", "room"] {
            let args = Args::parse_from(["loadgen", "--proto", "resp", "--workload", workload]);
            assert!(args.validate().is_err(), "{workload}");
        }
        let spawn = Args::parse_from(["loadgen", "--proto", "resp", "--spawn-node"]);
        assert!(spawn.validate().expect_err("no routerd").contains("Redis"));
        let routed = Args::parse_from(["loadgen", "--workload", "incr"]);
        assert!(routed.needs_login());
    }

    #[test]
    fn addresses_may_name_a_host() {
        let addr = parse_addr("localhost:7400").expect("localhost resolves");
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_eq!(addr.port(), 7400);
        assert_eq!(
            parse_addr("10.0.0.1:1"),
            Ok(SocketAddr::from(([10, 0, 0, 1], 1)))
        );
        assert!(parse_addr("localhost").is_err());
    }

    #[test]
    fn players_and_addrs_are_bounded() {
        let args = Args::parse_from(["loadgen", "--connections", "4"]);
        assert_eq!(args.player_count(), 4);
        assert_eq!(args.addrs, vec![SocketAddr::from(([127, 0, 0, 1], 7400))]);
        let many = Args::parse_from([
            "loadgen",
            "--workload",
            "incr",
            "--connections",
            "4",
            "--players",
            "1000",
            "--addr",
            "127.0.0.1:1",
            "--addr",
            "127.0.0.1:2",
        ]);
        assert_eq!(many.validate(), Ok(()));
        assert_eq!(many.addrs.len(), 2);
        for bad in [
            vec!["--workload", "incr", "--connections", "4", "--players", "3"],
            vec!["--workload", "incr", "--players", "1000000000"],
            vec![
                "--workload",
                "incr",
                "--player-base",
                "18446744073709551615",
            ],
            vec!["--workload", "incr", "--requests-per-login", "0"],
            vec!["--workload", "ping", "--players", "100"],
            vec!["--workload", "room", "--players", "100"],
        ] {
            let mut argv = vec!["loadgen"];
            argv.extend(bad.iter());
            assert!(Args::parse_from(&argv).validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn zipfian_is_refused_in_closed_loop() {
        let closed = Args::parse_from(["loadgen", "--dist", "zipfian"]);
        let refusal = closed.validate().expect_err("zipfian without --rate");
        assert!(refusal.contains("--rate"), "{refusal}");
        let open = Args::parse_from(["loadgen", "--dist", "zipfian", "--rate", "1000"]);
        assert_eq!(open.validate(), Ok(()));
    }

    #[test]
    fn resume_needs_sessions_and_cuts_need_resume() {
        let args = |extra: &[&str]| {
            let mut argv = vec!["loadgen"];
            argv.extend(extra);
            Args::parse_from(&argv)
        };
        for good in [
            vec!["--workload", "room", "--resume"],
            vec![
                "--workload",
                "incr",
                "--resume",
                "--keys",
                "--cut-every",
                "200ms",
            ],
        ] {
            assert_eq!(args(&good).validate(), Ok(()), "{good:?}");
        }
        for (bad, says) in [
            (vec!["--workload", "ping", "--resume"], "sessions"),
            (
                vec!["--proto", "resp", "--workload", "incr", "--resume"],
                "sessions",
            ),
            (vec!["--workload", "incr", "--cut-every", "1s"], "--resume"),
            (
                vec!["--workload", "incr", "--resume", "--cut-every", "1ms"],
                "at least",
            ),
        ] {
            let refusal = args(&bad).validate().expect_err("refused");
            assert!(refusal.contains(says), "{bad:?}: {refusal}");
        }
    }

    #[test]
    fn the_secret_flag_wins_over_the_environment() {
        let env = Some("from-env".to_string());
        assert_eq!(secret_from(Some("from-flag"), env.clone()), "from-flag");
        assert_eq!(secret_from(None, env), "from-env");
        assert_eq!(secret_from(None, None), DEVELOPMENT_SECRET);
    }

    #[test]
    fn development_secret_matches_the_node() {
        let config = include_str!("../../src/config.rs");
        let needle = format!("DEVELOPMENT_SECRET: &str = \"{DEVELOPMENT_SECRET}\"");
        assert!(
            config.contains(&needle),
            "secret drifted from src/config.rs"
        );
    }
}
