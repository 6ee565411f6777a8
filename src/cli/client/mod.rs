//! `routerd client`: a line-oriented client of the client protocol
//! (docs/protocol.md), to try a node by hand or from a script.
//!
//! ```text
//! printf 'incr 5\nget\n' | routerd client --addr 127.0.0.1:7400 --player-id 42
//! OK login 42
//! OK incr 5
//! OK get 5
//! ```
//!
//! It reads one command a line from stdin ([`command::HELP`]) and prints one
//! line to stdout for every frame the server sends, as it arrives: `OK ...`
//! for a RESPONSE, `ERROR <CODE>: <reason>` for an ERROR, `PUSH ...` for a
//! PUSH. Everything else (bad commands, why it stopped) goes to stderr.
//!
//! Requests go one at a time: the next command is read only once the
//! previous one is answered, so a script's answers come in its order and
//! pushes in between, wherever they arrive. At the end of stdin nothing is
//! owed any more and it exits 0, unless a command was not understood or a
//! request was answered ERROR: then it runs the rest of the script and
//! exits 1, as a script's `set -e` needs. It also exits non-zero when the
//! connection cannot be made, the server closes it (a kick included), an
//! answer does not come within `--timeout-ms`, or the server breaks the
//! protocol.
//!
//! Plain blocking IO: a reader thread decodes and prints server frames, a
//! stdin thread reads commands, and the main thread sends requests and
//! waits on one channel fed by both.

mod command;
mod input;
mod reader;
mod render;

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustls::pki_types::ServerName;
use wire::client::{encode_frame, FrameKind};
use wire::layers::ClientLayers;

use self::command::{Command, Sent, HELP, LINE_MAX};
use self::input::Line;
use crate::config::Config;

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest server frame body accepted. The server echoes at most a
/// [`LINE_MAX`] ping and pushes at most a 1 KiB room message, so the
/// protocol's default `max_body` is ample; anything larger is a violation.
const SERVER_BODY_MAX: u32 = wire::client::DEFAULT_MAX_BODY;
/// Lifetime of a token minted for `--player-id`.
const TOKEN_TTL_SECS: u64 = 3600;
/// Longest `--timeout-ms` and `--keepalive-ms`: an hour.
const TIME_MAX_MS: u64 = 3_600_000;

/// `routerd client`'s arguments.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = HELP)]
pub struct ClientArgs {
    /// The gateway to connect to, HOST:PORT.
    #[arg(long)]
    pub addr: String,
    /// Log in as this player, with a token signed by the configured secret
    /// (`auth.secret`; ROUTERD_AUTH_SECRET wins).
    #[arg(long, conflicts_with = "token")]
    pub player_id: Option<u64>,
    /// Log in with this token (`routerd token` prints one).
    #[arg(long)]
    pub token: Option<String>,
    /// Config file whose secret signs the `--player-id` token.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// How long to wait for each answer (1 ms to an hour); the server
    /// answers within its `request_timeout_ms` (10 s by default), so keep
    /// this above it.
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1..=TIME_MAX_MS))]
    pub timeout_ms: u64,
    /// Send a silent `sys.ping` after this long without a request (up to an
    /// hour), so the server's `idle_timeout_ms` (60 s by default) does not
    /// close a session waiting for the next command; 0 never does.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(0..=TIME_MAX_MS))]
    pub keepalive_ms: u64,
    /// Speak TLS (to `gateway.tls_listen`, or with --websocket to a
    /// `gateway.websocket_tls` listener).
    #[arg(long)]
    pub tls: bool,
    /// The CA certificate (PEM) that signed the gateway's certificate.
    #[arg(long, requires = "tls")]
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (tests only: anyone on the path can read and
    /// change the session).
    #[arg(long, requires = "tls", conflicts_with = "ca_file")]
    pub insecure: bool,
    /// Speak WebSocket (to `gateway.websocket_listen`): the upgrade on `/`,
    /// then each request in one binary message.
    #[arg(long)]
    pub websocket: bool,
    /// The server name the TLS certificate must carry (default: the host
    /// of --addr).
    #[arg(long, requires = "tls")]
    pub server_name: Option<String>,
}

/// Why the client stopped with a failure.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot resolve {addr}: {source}")]
    Resolve { addr: String, source: io::Error },
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("login failed (the ERROR line above says why){hint}")]
    LoginFailed {
        /// Where the `--player-id` token's secret came from, when this
        /// client signed it: the usual cause is a server with another.
        hint: String,
    },
    #[error("no answer to {name} (seq {seq}) within {timeout_ms} ms")]
    Timeout {
        name: &'static str,
        seq: u32,
        timeout_ms: u64,
    },
    #[error("{0}")]
    Closed(Closed),
    #[error("cannot send to the server: {0}")]
    Send(io::Error),
    #[error("cannot start the client: {0}")]
    Setup(io::Error),
    #[error("cannot read stdin: {0}")]
    Stdin(io::Error),
    #[error("{bad_commands} command(s) not understood, {error_answers} request(s) answered ERROR")]
    Unsuccessful {
        bad_commands: u64,
        error_answers: u64,
    },
}

/// How the reader thread ended.
#[derive(Debug, thiserror::Error)]
pub enum Closed {
    #[error("the server closed the connection")]
    ByServer,
    #[error("the server closed the connection after sys.kicked")]
    Kicked,
    #[error("connection lost: {0}")]
    Io(io::Error),
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    #[error("cannot write to stdout: {0}")]
    Stdout(io::Error),
}

/// Runs the client until `quit`, the end of stdin, or a failure.
pub fn run(args: &ClientArgs) -> Result<(), ClientError> {
    let token = login_token(args)?;
    let stream = connect(&args.addr)?;
    let layers = layers(args)?;
    let mut session = Session::start(stream, layers, args)?;
    let result = session.login(token).map_err(|error| match error {
        ClientError::LoginFailed { .. } => ClientError::LoginFailed {
            hint: minted_token_hint(args),
        },
        other => other,
    });
    let result = result.and_then(|()| {
        if io::IsTerminal::is_terminal(&io::stdin()) {
            eprintln!("routerd client: connected to {}; type help", args.addr);
        }
        session.commands()
    });
    session.finish();
    result
}

/// For a failed login with a token this client signed: which secret signed
/// it, and that the server's must be the same.
fn minted_token_hint(args: &ClientArgs) -> String {
    if args.player_id.is_none() {
        return String::new();
    }
    let source = if std::env::var_os(crate::config::AUTH_SECRET_ENV).is_some() {
        format!("{} from the environment", crate::config::AUTH_SECRET_ENV)
    } else if let Some(path) = &args.config {
        format!("auth.secret of {}", path.display())
    } else {
        "the development secret (no --config, no ROUTERD_AUTH_SECRET)".to_string()
    };
    format!(
        "; the --player-id token was signed with {source}: the server must use the same \
         secret (check its auth.secret, or ROUTERD_AUTH_SECRET, which wins over it)"
    )
}

/// The token to log in with, if any: `--token` as given, or one minted for
/// `--player-id` with the configured secret.
fn login_token(args: &ClientArgs) -> Result<Option<String>, ClientError> {
    if let Some(token) = &args.token {
        if token.len() > wire::token::MAX_TOKEN_LEN {
            return Err(ClientError::Usage(format!(
                "--token is longer than {} bytes, so no server accepts it",
                wire::token::MAX_TOKEN_LEN
            )));
        }
        return Ok(Some(token.clone()));
    }
    let Some(player_id) = args.player_id else {
        return Ok(None);
    };
    if player_id == 0 {
        return Err(ClientError::Usage("player ids are never 0".into()));
    }
    let config =
        Config::load(args.config.as_deref()).map_err(|e| ClientError::Usage(e.to_string()))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| ClientError::Usage(format!("the clock is before 1970: {e}")))?
        .as_secs();
    Ok(Some(wire::token::mint(
        config.auth.secret.as_bytes(),
        player_id,
        now.saturating_add(TOKEN_TTL_SECS),
    )))
}

/// The TLS and WebSocket layers `args` ask for, if any.
fn layers(args: &ClientArgs) -> Result<Option<Arc<Mutex<ClientLayers>>>, ClientError> {
    let host = args
        .addr
        .rsplit_once(':')
        .map_or(&args.addr[..], |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let tls = if args.tls {
        // The WebSocket listener offers http/1.1, the TLS one routerd.
        let alpn: &[u8] = if args.websocket {
            b"http/1.1"
        } else {
            b"routerd"
        };
        let config = wire::layers::client_config(args.ca_file.as_deref(), args.insecure, alpn)
            .map_err(ClientError::Usage)?;
        let name = args.server_name.as_deref().unwrap_or(host).to_owned();
        let name = ServerName::try_from(name)
            .map_err(|error| ClientError::Usage(format!("bad server name: {error}")))?;
        Some((config, name))
    } else {
        None
    };
    if tls.is_none() && !args.websocket {
        return Ok(None);
    }
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |elapsed| elapsed.subsec_nanos());
    let websocket = args.websocket.then_some((host, seed));
    let layers =
        ClientLayers::new(tls, websocket).map_err(|error| ClientError::Usage(error.to_string()))?;
    Ok(Some(Arc::new(Mutex::new(layers))))
}

/// The connection's write side: protocol bytes go through the layers
/// (under their lock, so TLS records leave in order with the reader's
/// handshake and pong bytes).
struct Link {
    stream: TcpStream,
    layers: Option<Arc<Mutex<ClientLayers>>>,
}

impl Link {
    fn write_all(&self, protocol: &[u8]) -> io::Result<()> {
        let Some(layers) = &self.layers else {
            return (&self.stream).write_all(protocol);
        };
        let mut layers = layers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut wire = Vec::new();
        layers.seal(protocol, &mut wire);
        (&self.stream).write_all(&wire)
    }
}

fn connect(addr: &str) -> Result<TcpStream, ClientError> {
    let resolve = |source| ClientError::Resolve {
        addr: addr.to_string(),
        source,
    };
    let addresses: Vec<SocketAddr> = addr.to_socket_addrs().map_err(resolve)?.collect();
    let mut last_error = io::Error::new(io::ErrorKind::NotFound, "no address");
    for address in addresses {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(stream) => {
                // Small frames, one at a time: never wait for Nagle.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(error) => last_error = error,
        }
    }
    Err(ClientError::Connect {
        addr: addr.to_string(),
        source: last_error,
    })
}

/// The one request in flight, shared with the reader thread so it can
/// print the answer with what was asked (`OK join room=7 members=2`).
#[derive(Debug)]
struct InFlight {
    seq: u32,
    sent: Sent,
}

type Pending = Arc<Mutex<Option<InFlight>>>;

fn lock(pending: &Pending) -> MutexGuard<'_, Option<InFlight>> {
    // Both holders only move a small value in or out under the lock, so a
    // poisoned lock still holds a consistent value.
    pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the main thread waits for, from either helper thread.
enum Event {
    /// The reader printed the answer to `seq`; `ok` unless it was an ERROR.
    Answered { seq: u32, ok: bool },
    /// The reader stopped.
    Closed(Closed),
    /// The stdin thread read one line (or the end).
    Input(io::Result<Option<Line>>),
}

struct Session {
    /// The write side; the reader thread holds a clone of its stream.
    stream: Link,
    pending: Pending,
    events: Receiver<Event>,
    /// One token lets the stdin thread read one line, so at most one line
    /// is ever waiting and none is read while a request is in flight.
    stdin_tokens: SyncSender<()>,
    token_given: bool,
    /// A line that arrived while a keepalive was in flight.
    stashed: Option<io::Result<Option<Line>>>,
    next_seq: u32,
    /// Lines that were not a command (unknown, malformed, too long).
    bad_commands: u64,
    /// Requests of the script answered ERROR.
    error_answers: u64,
    timeout: Duration,
    keepalive: Option<Duration>,
    last_sent: Instant,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Session {
    fn start(
        stream: TcpStream,
        layers: Option<Arc<Mutex<ClientLayers>>>,
        args: &ClientArgs,
    ) -> Result<Session, ClientError> {
        let (events_tx, events) = mpsc::channel();
        let timeout = Duration::from_millis(args.timeout_ms);
        // A request is a few bytes; a server that will not take them within
        // the answer timeout will not answer either.
        stream
            .set_write_timeout(Some(timeout))
            .map_err(ClientError::Setup)?;
        let read_side = stream.try_clone().map_err(ClientError::Setup)?;
        let read_layers = layers.clone();
        let pending: Pending = Arc::default();
        let reader = {
            let (pending, events) = (pending.clone(), events_tx.clone());
            std::thread::Builder::new()
                .name("client-reader".into())
                .spawn(move || reader::read_loop(read_side, read_layers, &pending, &events))
                .map_err(ClientError::Setup)?
        };
        let (stdin_tokens, tokens) = mpsc::sync_channel(1);
        // Not joined: it may be blocked reading a terminal when the client
        // ends, and process exit ends it.
        std::thread::Builder::new()
            .name("client-stdin".into())
            .spawn(move || stdin_loop(&tokens, &events_tx))
            .map_err(ClientError::Setup)?;
        let stream = Link { stream, layers };
        // TLS's ClientHello and the WebSocket upgrade leave now; requests
        // follow (rustls holds them until its handshake is done).
        if stream.layers.is_some() {
            stream.write_all(&[]).map_err(ClientError::Send)?;
        }
        Ok(Session {
            stream,
            pending,
            events,
            stdin_tokens,
            token_given: false,
            stashed: None,
            next_seq: 1,
            bad_commands: 0,
            error_answers: 0,
            timeout,
            keepalive: (args.keepalive_ms > 0).then(|| Duration::from_millis(args.keepalive_ms)),
            last_sent: Instant::now(),
            reader: Some(reader),
        })
    }

    fn login(&mut self, token: Option<String>) -> Result<(), ClientError> {
        let Some(token) = token else {
            return Ok(());
        };
        match self.call(Sent::Login, token.into_bytes())? {
            true => Ok(()),
            false => Err(ClientError::LoginFailed {
                hint: String::new(),
            }),
        }
    }

    /// Reads and runs commands until `quit` or the end of stdin.
    fn commands(&mut self) -> Result<(), ClientError> {
        loop {
            let text = match self.next_line()? {
                None => return self.outcome(),
                Some(Line::Text(text)) => text,
                Some(Line::TooLong) => {
                    eprintln!("routerd client: line longer than {LINE_MAX} bytes, skipped");
                    self.bad_commands += 1;
                    continue;
                }
                Some(Line::NotUtf8) => {
                    eprintln!("routerd client: line is not UTF-8, skipped");
                    self.bad_commands += 1;
                    continue;
                }
            };
            let command = match command::parse(&text) {
                Ok(Some(command)) => command,
                Ok(None) => continue,
                Err(error) => {
                    eprintln!("routerd client: {error}");
                    self.bad_commands += 1;
                    continue;
                }
            };
            match command {
                Command::Quit => return self.outcome(),
                Command::Help => eprintln!("{HELP}"),
                Command::Wait(duration) => self.listen(duration)?,
                command => {
                    if let Some((sent, body)) = command.request() {
                        if !self.call(sent, body)? {
                            self.error_answers += 1;
                        }
                    }
                }
            }
        }
    }

    /// How the script went, once it ended: a failure if any line was not
    /// understood or any request was answered ERROR.
    fn outcome(&self) -> Result<(), ClientError> {
        if self.bad_commands == 0 && self.error_answers == 0 {
            return Ok(());
        }
        Err(ClientError::Unsuccessful {
            bad_commands: self.bad_commands,
            error_answers: self.error_answers,
        })
    }

    /// Sends one request and waits for the reader to print its answer.
    /// Returns whether it was a RESPONSE (not an ERROR).
    fn call(&mut self, sent: Sent, body: Vec<u8>) -> Result<bool, ClientError> {
        let route_id = sent.route_id();
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let name = sent.name();
        {
            let mut pending = lock(&self.pending);
            assert!(pending.is_none(), "one request in flight at a time");
            // Recorded before the write, so the answer always finds it.
            *pending = Some(InFlight { seq, sent });
        }
        let mut frame = Vec::new();
        encode_frame(&mut frame, FrameKind::Request, route_id, seq, &body);
        if let Err(error) = self.stream.write_all(&frame) {
            return Err(self.closed_or(ClientError::Send(error)));
        }
        self.last_sent = Instant::now();
        let deadline = self.last_sent + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Answered { seq: answered, ok }) => {
                    assert_eq!(answered, seq, "the reader answers only what is in flight");
                    return Ok(ok);
                }
                Ok(Event::Closed(closed)) => return Err(ClientError::Closed(closed)),
                Ok(Event::Input(input)) => self.stash(input),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(ClientError::Timeout {
                        name,
                        seq,
                        timeout_ms: self.timeout.as_millis() as u64,
                    })
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.reader_gone()),
            }
        }
    }

    /// The next input line, keeping the session alive while waiting.
    fn next_line(&mut self) -> Result<Option<Line>, ClientError> {
        loop {
            // A keepalive below may stash the line it was waiting for.
            if let Some(input) = self.stashed.take() {
                return input.map_err(ClientError::Stdin);
            }
            if !self.token_given {
                // The stdin thread holds no token now, so this never blocks;
                // a failure means it has ended after reporting the end.
                let _ = self.stdin_tokens.try_send(());
                self.token_given = true;
            }
            match self.next_event(None)? {
                Some(Event::Input(input)) => {
                    self.token_given = false;
                    return input.map_err(ClientError::Stdin);
                }
                Some(Event::Answered { seq, .. }) => {
                    unreachable!("answer to seq {seq} with nothing in flight")
                }
                Some(Event::Closed(closed)) => return Err(ClientError::Closed(closed)),
                None => {}
            }
        }
    }

    /// `wait`: prints pushes (the reader does) for `duration`.
    fn listen(&mut self, duration: Duration) -> Result<(), ClientError> {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            match self.next_event(Some(until))? {
                Some(Event::Input(input)) => self.stash(input),
                Some(Event::Answered { seq, .. }) => {
                    unreachable!("answer to seq {seq} with nothing in flight")
                }
                Some(Event::Closed(closed)) => return Err(ClientError::Closed(closed)),
                None => {}
            }
        }
        Ok(())
    }

    /// The next event before `until` (if given), or `None` after sending a
    /// keepalive or reaching `until`.
    fn next_event(&mut self, until: Option<Instant>) -> Result<Option<Event>, ClientError> {
        let keepalive_at = self.keepalive.map(|every| self.last_sent + every);
        let wake = match (until, keepalive_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let received = match wake {
            Some(at) => self
                .events
                .recv_timeout(at.saturating_duration_since(Instant::now())),
            None => self
                .events
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(event) => Ok(Some(event)),
            Err(RecvTimeoutError::Disconnected) => Err(self.reader_gone()),
            Err(RecvTimeoutError::Timeout) => {
                if keepalive_at.is_some_and(|at| at <= Instant::now()) {
                    self.call(Sent::Keepalive, Vec::new())?;
                }
                Ok(None)
            }
        }
    }

    fn stash(&mut self, input: io::Result<Option<Line>>) {
        assert!(self.stashed.is_none(), "one stdin token, one line");
        self.token_given = false;
        self.stashed = Some(input);
    }

    /// A failed write usually means the server closed the connection: the
    /// reader's account of why is the better message when it has one.
    fn closed_or(&self, error: ClientError) -> ClientError {
        match self.events.recv_timeout(Duration::from_millis(100)) {
            Ok(Event::Closed(closed)) => ClientError::Closed(closed),
            _ => error,
        }
    }

    fn reader_gone(&self) -> ClientError {
        ClientError::Closed(Closed::Io(io::Error::other("reader thread ended")))
    }

    /// Closes the connection and waits for the reader to print its last
    /// line, so no output is cut mid-line.
    fn finish(&mut self) {
        let _ = self.stream.stream.shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

fn stdin_loop(tokens: &Receiver<()>, events: &Sender<Event>) {
    let stdin = io::stdin();
    let mut stdin = stdin.lock();
    while tokens.recv().is_ok() {
        let input = input::read_line(&mut stdin, LINE_MAX);
        let end = !matches!(input, Ok(Some(_)));
        if events.send(Event::Input(input)).is_err() || end {
            return;
        }
    }
}
