//! What the nodes say about themselves during a run: every process's
//! `GET /cluster` every `POLL_INTERVAL`, and the store's ownership record
//! of every player, each stamped with its send and answer times on the
//! run's clock.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Time between two polls of one process's `/cluster`.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Time between two rounds of ownership reads (one a player).
pub const OWNER_INTERVAL: Duration = Duration::from_millis(300);

/// How long one admin request may take: a frozen node answers nothing.
const HTTP_TIMEOUT: Duration = Duration::from_millis(500);

/// How long an operator's call may take (a transfer waits for its moves).
const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// Largest admin answer read.
const HTTP_BODY_MAX: u64 = 1 << 20;

/// How a member looked to an observer.
#[derive(Clone, Debug)]
pub struct MemberView {
    pub node_id: u64,
    pub incarnation: u64,
    pub state: String,
}

/// One core's fence, when `/cluster` reports cores.
#[derive(Clone, Debug)]
pub struct CoreView {
    pub core: u64,
    pub fenced: bool,
}

/// One answered `GET /cluster`.
#[derive(Clone, Debug)]
pub struct Poll {
    /// The process that answered (its pid) and its start number.
    pub pid: u32,
    pub serial: u32,
    pub send_us: u64,
    pub answer_us: u64,
    pub node_id: u64,
    pub incarnation: u64,
    pub fenced: bool,
    pub members: Vec<MemberView>,
    /// `None` while the server does not report cores.
    pub cores: Option<Vec<CoreView>>,
}

/// One read of `/objects/player/<id>`.
#[derive(Clone, Debug)]
pub struct OwnerSeen {
    pub player: u64,
    pub at_us: u64,
    pub owner: u64,
    pub owner_incarnation: u64,
}

#[derive(Default)]
pub struct Observations {
    pub polls: Mutex<Vec<Poll>>,
    pub owners: Mutex<Vec<OwnerSeen>>,
}

/// `GET path` with a deadline: the status and the body, or `None`.
pub fn http_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, HTTP_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream
        .take(HTTP_BODY_MAX)
        .read_to_string(&mut response)
        .ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// `POST path` with the admin token and a deadline: the status and the
/// body, or `None`.
pub fn http_post(address: SocketAddr, path: &str, token: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, HTTP_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(ADMIN_CALL_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT)).ok()?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {token}\r\n\
         content-length: 0\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream
        .take(HTTP_BODY_MAX)
        .read_to_string(&mut response)
        .ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.trim().to_string();
    Some((status, body))
}

/// Whether a node (or a core) said it serves nothing: `serving: false`
/// where it reports `serving` (a lapsed lease stops serving without a
/// fence, and ends without a new incarnation), else `fenced`.
fn not_serving(json: &serde_json::Value) -> Option<bool> {
    match json["serving"].as_bool() {
        Some(serving) => Some(!serving),
        None => json["fenced"].as_bool(),
    }
}

/// The poll a `/cluster` body describes; `base` has the process and the
/// times filled in.
fn parse_cluster(body: &str, base: Poll) -> Option<Poll> {
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    let members = json["members"]
        .as_array()?
        .iter()
        .filter_map(|member| {
            Some(MemberView {
                node_id: member["node_id"].as_u64()?,
                incarnation: member["incarnation"].as_u64()?,
                state: member["state"].as_str()?.to_string(),
            })
        })
        .collect();
    let cores = json["cores"].as_array().map(|cores| {
        cores
            .iter()
            .filter_map(|core| {
                Some(CoreView {
                    core: core["core"].as_u64()?,
                    fenced: not_serving(core)?,
                })
            })
            .collect()
    });
    Some(Poll {
        node_id: json["node_id"].as_u64()?,
        incarnation: json["incarnation"].as_u64()?,
        fenced: not_serving(&json)?,
        members,
        cores,
        ..base
    })
}

/// Polls one process until it is retired.
pub fn poll_process(
    admin: SocketAddr,
    pid: u32,
    serial: u32,
    retired: Arc<AtomicBool>,
    clock: Instant,
    into: Arc<Observations>,
) {
    std::thread::spawn(move || {
        let us = |at: Instant| at.duration_since(clock).as_micros() as u64;
        while !retired.load(Ordering::Acquire) {
            let sent = Instant::now();
            let answer = http_get(admin, "/cluster");
            let answered = Instant::now();
            if let Some((200, body)) = answer {
                let base = Poll {
                    pid,
                    serial,
                    send_us: us(sent),
                    answer_us: us(answered),
                    node_id: 0,
                    incarnation: 0,
                    fenced: true,
                    members: Vec::new(),
                    cores: None,
                };
                if let Some(poll) = parse_cluster(&body, base) {
                    into.polls.lock().unwrap().push(poll);
                }
            }
            std::thread::sleep(POLL_INTERVAL.saturating_sub(answered - sent));
        }
    });
}

/// Reads every player's ownership record from whichever node answers,
/// until `stop`.
pub fn poll_owners(
    players: Vec<u64>,
    admins: Arc<RwLock<Vec<SocketAddr>>>,
    clock: Instant,
    into: Arc<Observations>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // Reads go to the node that answered last and move on only when it
        // does not answer: a frozen node then costs one timeout, not one
        // per player per round, and the reads stay dense during freezes.
        let mut next = 0usize;
        while !stop.load(Ordering::Acquire) {
            for &player in &players {
                let admins = admins.read().unwrap().clone();
                for _ in 0..admins.len() {
                    next %= admins.len();
                    let path = format!("/objects/player/{player}");
                    let Some((200, body)) = http_get(admins[next], &path) else {
                        next += 1;
                        continue;
                    };
                    let Ok(record) = serde_json::from_str::<serde_json::Value>(&body) else {
                        next += 1;
                        continue;
                    };
                    let (Some(owner), Some(owner_incarnation)) = (
                        record["owner"].as_u64(),
                        record["owner_incarnation"].as_u64(),
                    ) else {
                        next += 1;
                        continue;
                    };
                    into.owners.lock().unwrap().push(OwnerSeen {
                        player,
                        at_us: clock.elapsed().as_micros() as u64,
                        owner,
                        owner_incarnation,
                    });
                    break;
                }
            }
            std::thread::sleep(OWNER_INTERVAL);
        }
    })
}
