//! The client's command language: one command a line, parsed into the
//! request it sends (sans-IO, so every rule is unit-tested without a
//! socket).

use std::time::Duration;

use wire::client::route;

use crate::builtins::room::SAY_TEXT_MAX;

/// Longest command line, in bytes. It bounds every request body the client
/// builds (a `ping` text, a `say` text) far below the protocol's default
/// `max_body`.
pub const LINE_MAX: usize = 4096;
/// Longest `wait`: an hour is already more than any script should need.
pub const WAIT_MAX_MS: u64 = 3_600_000;

/// One parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `sys.ping` with the rest of the line as its body.
    Ping(String),
    /// `player.get`.
    Get,
    /// `player.incr` by a signed delta.
    Incr(i64),
    /// `room.join`.
    Join(u64),
    /// `room.leave`.
    Leave(u64),
    /// `room.say`: room, then the rest of the line as text.
    Say(u64, String),
    /// Keep printing pushes for this long before the next command.
    Wait(Duration),
    /// Print the command list on stderr.
    Help,
    /// Close the connection and exit 0.
    Quit,
}

/// What is in flight: enough of the command to print its answer, and the
/// route it went on (docs/protocol.md, "5. Route table").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    Login,
    Ping,
    Get,
    Incr,
    Join(u64),
    Leave(u64),
    Say(u64),
    /// A `sys.ping` the client sends on its own to keep an idle session
    /// open; its answer is not printed.
    Keepalive,
}

impl Sent {
    /// The route the answer must echo.
    pub fn route_id(&self) -> u32 {
        match self {
            Sent::Login => route::AUTH_LOGIN,
            Sent::Ping | Sent::Keepalive => route::SYS_PING,
            Sent::Get => route::PLAYER_GET,
            Sent::Incr => route::PLAYER_INCR,
            Sent::Join(_) => route::ROOM_JOIN,
            Sent::Leave(_) => route::ROOM_LEAVE,
            Sent::Say(_) => route::ROOM_SAY,
        }
    }

    /// The command's name as the output prints it (`OK get 42`).
    pub fn name(&self) -> &'static str {
        match self {
            Sent::Login => "login",
            Sent::Ping => "ping",
            Sent::Get => "get",
            Sent::Incr => "incr",
            Sent::Join(_) => "join",
            Sent::Leave(_) => "leave",
            Sent::Say(_) => "say",
            Sent::Keepalive => "keepalive",
        }
    }
}

impl Command {
    /// The request this command sends (what it is, and its body; the
    /// route is [`Sent::route_id`]), or `None` for the local commands
    /// (`wait`, `help`, `quit`).
    pub fn request(&self) -> Option<(Sent, Vec<u8>)> {
        Some(match self {
            Command::Ping(text) => (Sent::Ping, text.as_bytes().to_vec()),
            Command::Get => (Sent::Get, Vec::new()),
            Command::Incr(delta) => (Sent::Incr, delta.to_le_bytes().to_vec()),
            Command::Join(room) => (Sent::Join(*room), room.to_le_bytes().to_vec()),
            Command::Leave(room) => (Sent::Leave(*room), room.to_le_bytes().to_vec()),
            Command::Say(room, text) => {
                let mut body = room.to_le_bytes().to_vec();
                body.extend_from_slice(text.as_bytes());
                (Sent::Say(*room), body)
            }
            Command::Wait(_) | Command::Help | Command::Quit => return None,
        })
    }
}

/// The command list `help` prints.
pub const HELP: &str = "\
commands (one a line; blank lines and lines starting with # are skipped):
  ping [text]      sys.ping, echoed back
  get              player.get: the counter
  incr N           player.incr by N (may be negative)
  join R           room.join room R
  say R text...    room.say: text to every logged-in member of room R
  leave R          room.leave room R
  wait MS          print pushes for MS milliseconds, then go on
  help             this list
  quit             close the connection and exit";

/// Parses one line (without its line terminator). `Ok(None)` for a blank
/// line or a `#` comment; the error is a sentence for the user.
pub fn parse(line: &str) -> Result<Option<Command>, String> {
    if line.len() > LINE_MAX {
        return Err(format!("line longer than {LINE_MAX} bytes"));
    }
    let line = line.trim_start();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let (word, rest) = split_word(line);
    let command = match word {
        "ping" => Command::Ping(rest.to_string()),
        "get" => no_argument(Command::Get, "get", rest)?,
        "incr" => Command::Incr(one_argument("incr N", rest)?),
        "join" => Command::Join(one_argument("join R", rest)?),
        "leave" => Command::Leave(one_argument("leave R", rest)?),
        "say" => {
            let (room, text) = split_word(rest);
            let room = number("say R text...", room)?;
            if text.len() > SAY_TEXT_MAX {
                return Err(format!(
                    "say: text is {} bytes, the protocol allows {SAY_TEXT_MAX}",
                    text.len()
                ));
            }
            Command::Say(room, text.to_string())
        }
        "wait" => {
            let ms: u64 = one_argument("wait MS", rest)?;
            if ms > WAIT_MAX_MS {
                return Err(format!("wait: at most {WAIT_MAX_MS} ms"));
            }
            Command::Wait(Duration::from_millis(ms))
        }
        "help" => no_argument(Command::Help, "help", rest)?,
        "quit" | "exit" => no_argument(Command::Quit, "quit", rest)?,
        other => return Err(format!("unknown command {other:?} (try help)")),
    };
    Ok(Some(command))
}

/// The first whitespace-separated word and the rest, the rest's leading
/// whitespace removed (a `say` text keeps its inner and trailing spaces).
fn split_word(text: &str) -> (&str, &str) {
    match text.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim_start()),
        None => (text, ""),
    }
}

fn no_argument(command: Command, name: &str, rest: &str) -> Result<Command, String> {
    if rest.trim().is_empty() {
        Ok(command)
    } else {
        Err(format!("{name} takes no argument"))
    }
}

fn one_argument<T: std::str::FromStr>(usage: &str, rest: &str) -> Result<T, String> {
    let rest = rest.trim_end();
    if rest.is_empty() || rest.contains(char::is_whitespace) {
        return Err(format!("usage: {usage}"));
    }
    number(usage, rest)
}

fn number<T: std::str::FromStr>(usage: &str, word: &str) -> Result<T, String> {
    word.parse()
        .map_err(|_| format!("usage: {usage} ({word:?} is not a number in range)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Command {
        parse(line)
            .unwrap_or_else(|error| panic!("{line:?}: {error}"))
            .unwrap_or_else(|| panic!("{line:?} is blank"))
    }

    #[test]
    fn every_command_parses() {
        assert_eq!(ok("ping"), Command::Ping(String::new()));
        assert_eq!(
            ok("ping hello  world"),
            Command::Ping("hello  world".into())
        );
        assert_eq!(ok("get"), Command::Get);
        assert_eq!(ok("  get  "), Command::Get);
        assert_eq!(ok("incr 5"), Command::Incr(5));
        assert_eq!(ok("incr -9223372036854775808"), Command::Incr(i64::MIN));
        assert_eq!(ok("join 7"), Command::Join(7));
        assert_eq!(ok("leave 7\t"), Command::Leave(7));
        assert_eq!(
            ok("say 7 hello  there "),
            Command::Say(7, "hello  there ".into())
        );
        assert_eq!(ok("say 7"), Command::Say(7, String::new()));
        assert_eq!(ok("wait 250"), Command::Wait(Duration::from_millis(250)));
        assert_eq!(ok("help"), Command::Help);
        assert_eq!(ok("quit"), Command::Quit);
        assert_eq!(ok("exit"), Command::Quit);
    }

    #[test]
    fn blanks_and_comments_are_skipped() {
        for line in ["", "   ", "\t", "# a comment", "  # indented"] {
            assert_eq!(parse(line), Ok(None), "{line:?}");
        }
    }

    #[test]
    fn mistakes_are_sentences_not_panics() {
        let cases = [
            ("frobnicate", "unknown command"),
            ("get 3", "get takes no argument"),
            ("incr", "usage: incr N"),
            ("incr five", "usage: incr N"),
            ("incr 1 2", "usage: incr N"),
            ("incr 9223372036854775808", "not a number in range"),
            ("join -1", "usage: join R"),
            ("leave", "usage: leave R"),
            ("say", "usage: say R text..."),
            ("say x hi", "usage: say R text..."),
            ("wait 3600001", "at most 3600000 ms"),
            ("quit now", "quit takes no argument"),
        ];
        for (line, expected) in cases {
            let error = parse(line).expect_err(line);
            assert!(error.contains(expected), "{line:?}: {error}");
        }
    }

    #[test]
    fn limits_are_enforced_before_anything_is_sent() {
        let long = format!("ping {}", "x".repeat(LINE_MAX));
        assert!(parse(&long).unwrap_err().contains("longer than"));
        let at_limit = format!("say 1 {}", "y".repeat(SAY_TEXT_MAX));
        assert!(matches!(ok(&at_limit), Command::Say(1, text) if text.len() == SAY_TEXT_MAX));
        let over = format!("say 1 {}", "y".repeat(SAY_TEXT_MAX + 1));
        assert!(parse(&over)
            .unwrap_err()
            .contains("the protocol allows 1024"));
    }

    #[test]
    fn requests_follow_the_route_table() {
        let (sent, body) = ok("incr -2").request().unwrap();
        assert_eq!((sent, sent.route_id()), (Sent::Incr, 11));
        assert_eq!(body, (-2i64).to_le_bytes());
        let (sent, body) = ok("say 7 hi").request().unwrap();
        assert_eq!((sent.route_id(), sent.name()), (22, "say"));
        assert_eq!(&body[..8], &7u64.to_le_bytes());
        assert_eq!(&body[8..], b"hi");
        let (sent, body) = ok("get").request().unwrap();
        assert_eq!((sent.route_id(), body.len()), (10, 0));
        let (sent, body) = ok("ping hi").request().unwrap();
        assert_eq!((sent.route_id(), body), (1, b"hi".to_vec()));
        for (line, route_id) in [("join 3", 20), ("leave 3", 21)] {
            let (sent, body) = ok(line).request().unwrap();
            assert_eq!(sent.route_id(), route_id);
            assert_eq!(body, 3u64.to_le_bytes());
        }
        assert_eq!(Sent::Login.route_id(), 2);
        assert_eq!(Sent::Keepalive.route_id(), 1);
        for line in ["wait 1", "help", "quit"] {
            assert!(ok(line).request().is_none(), "{line}");
        }
    }
}
