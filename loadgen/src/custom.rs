//! Custom workloads (`--workload custom`): requests to any route, so an
//! object type of your own can be load tested. Either one route and body
//! on the command line (`--route 304 --body 'u64:{player} i64:1'`), or a
//! workload file (`--workload-file`) with a weighted mix and setup
//! requests sent once after every login:
//!
//! ```text
//! # setup NAME ROUTE BODY... [accept=CODE,...]: after each login, in order,
//! # each waiting for its answer; an ERROR whose code is listed counts as done.
//! setup guild.create 300 u64:{player} str:g{player} accept=32770
//! setup guild.join   301 u64:{player}
//! # WEIGHT NAME ROUTE BODY...: the measured mix.
//! 10 guild.incr 304 u64:{player} i64:1
//! 1  guild.say  303 u64:{player} "str:hello there"
//! ```
//!
//! A body is fields in order, little endian as docs/protocol.md's bodies
//! are: `u8:` `u16:` `u32:` `u64:` `i32:` `i64:` with a number or a
//! variable, `str:TEXT` (UTF-8, variables substituted inside), `hex:0a1b`.
//! Variables: `{player}`, the session's player id, and `{seq}`, the
//! request's number in its generator thread (from 1; 0 in setup). A field
//! with spaces is quoted whole ("str:two words"). A body that starts
//! with `{` or `[` is one JSON value instead (a scripted route's, see
//! docs/scripts.md), sent as written with `{player}` and `{seq}` filled
//! in: `--route 2001 --body '{"by": 1}'`, or on a workload line, where it
//! runs to the end of the line (`10 counter.add 2001 {"by": 1}`). Any
//! RESPONSE to the route counts as an answer (its body is the type's
//! own); an ERROR counts as a failure under its code.

use rand::rngs::SmallRng;
use rand::RngExt;

/// Requests of the measured mix at most (each is measured apart).
pub const CUSTOM_REQUESTS_MAX: usize = 8;

/// Setup requests after a login at most.
pub const SETUP_REQUESTS_MAX: usize = 8;

/// Longest request name, in bytes.
pub const NAME_LEN_MAX: usize = 32;

/// Fields of one body at most.
pub const FIELDS_MAX: usize = 32;

/// Largest workload file read.
pub const WORKLOAD_FILE_BYTES_MAX: usize = 64 * 1024;

/// Codes one setup line may accept at most.
pub const ACCEPT_CODES_MAX: usize = 8;

/// The longest decimal text a variable renders to (`u64::MAX`).
const VAR_TEXT_LEN_MAX: usize = 20;

/// The values a body's variables take for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vars {
    pub player: u64,
    pub seq: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    Player,
    Seq,
}

impl Var {
    fn parse(name: &str) -> Option<Var> {
        match name {
            "player" => Some(Var::Player),
            "seq" => Some(Var::Seq),
            _ => None,
        }
    }

    fn value(self, vars: Vars) -> u64 {
        match self {
            Var::Player => vars.player,
            Var::Seq => vars.seq,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    U8,
    U16,
    U32,
    U64,
    I32,
    I64,
}

impl Width {
    fn parse(name: &str) -> Option<Width> {
        Some(match name {
            "u8" => Width::U8,
            "u16" => Width::U16,
            "u32" => Width::U32,
            "u64" => Width::U64,
            "i32" => Width::I32,
            "i64" => Width::I64,
            _ => return None,
        })
    }

    fn bytes(self) -> usize {
        match self {
            Width::U8 => 1,
            Width::U16 => 2,
            Width::U32 | Width::I32 => 4,
            Width::U64 | Width::I64 => 8,
        }
    }

    fn range(self) -> (i128, i128) {
        match self {
            Width::U8 => (0, u8::MAX.into()),
            Width::U16 => (0, u16::MAX.into()),
            Width::U32 => (0, u32::MAX.into()),
            Width::U64 => (0, u64::MAX.into()),
            Width::I32 => (i32::MIN.into(), i32::MAX.into()),
            Width::I64 => (i64::MIN.into(), i64::MAX.into()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(Var),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Field {
    /// A literal, range-checked at parse time.
    Number {
        width: Width,
        value: i128,
    },
    /// A variable, taken modulo 2^width (two's complement for signed).
    Variable {
        width: Width,
        var: Var,
    },
    Text(Vec<Piece>),
    Bytes(Vec<u8>),
}

/// A request body with its variables still to fill in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Body {
    fields: Vec<Field>,
}

impl Body {
    /// Parses whitespace-separated fields (a field may be quoted whole), or
    /// a JSON body: text whose first character is `{` or `[` is one JSON
    /// value, sent as it is written ([`Body::json`]).
    pub fn parse(spec: &str) -> Result<Body, String> {
        if spec.trim_start().starts_with(['{', '[']) {
            return Body::json(spec.trim());
        }
        Body::from_tokens(&tokens(spec)?)
    }

    /// A JSON body (a scripted route's `codec = "json"`, docs/scripts.md):
    /// `text` as it is, with `{player}` and `{seq}` replaced by their
    /// numbers (`{"id": {player}}`); every other brace is the JSON's own.
    /// Refused unless it is one JSON value once the variables are filled.
    pub fn json(text: &str) -> Result<Body, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some((at, var, len)) = next_var(rest) {
            if at > 0 {
                pieces.push(Piece::Text(rest[..at].to_string()));
            }
            pieces.push(Piece::Var(var));
            rest = &rest[at + len..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        let body = Body {
            fields: vec![Field::Text(pieces)],
        };
        let mut sample = Vec::new();
        body.render(Vars { player: 1, seq: 1 }, &mut sample);
        serde_json::from_slice::<serde_json::Value>(&sample)
            .map_err(|error| format!("{text}: not one JSON value ({error})"))?;
        Ok(body)
    }

    fn from_tokens(tokens: &[String]) -> Result<Body, String> {
        if tokens.len() > FIELDS_MAX {
            return Err(format!("a body has at most {FIELDS_MAX} fields"));
        }
        let fields = tokens
            .iter()
            .map(|token| parse_field(token))
            .collect::<Result<Vec<Field>, String>>()?;
        Ok(Body { fields })
    }

    /// Appends the body for `vars` to `out`.
    pub fn render(&self, vars: Vars, out: &mut Vec<u8>) {
        for field in &self.fields {
            match field {
                Field::Number { width, value } => put_int(out, *width, *value as u64),
                Field::Variable { width, var } => put_int(out, *width, var.value(vars)),
                Field::Text(pieces) => {
                    for piece in pieces {
                        match piece {
                            Piece::Text(text) => out.extend_from_slice(text.as_bytes()),
                            Piece::Var(var) => {
                                out.extend_from_slice(var.value(vars).to_string().as_bytes())
                            }
                        }
                    }
                }
                Field::Bytes(bytes) => out.extend_from_slice(bytes),
            }
        }
    }

    /// The most bytes `render` can write, whatever the variables hold.
    pub fn len_max(&self) -> usize {
        self.fields
            .iter()
            .map(|field| match field {
                Field::Number { width, .. } | Field::Variable { width, .. } => width.bytes(),
                Field::Text(pieces) => pieces
                    .iter()
                    .map(|piece| match piece {
                        Piece::Text(text) => text.len(),
                        Piece::Var(_) => VAR_TEXT_LEN_MAX,
                    })
                    .sum(),
                Field::Bytes(bytes) => bytes.len(),
            })
            .sum()
    }
}

/// Little endian, the low `width` bytes of `value`.
fn put_int(out: &mut Vec<u8>, width: Width, value: u64) {
    out.extend_from_slice(&value.to_le_bytes()[..width.bytes()]);
}

fn parse_field(token: &str) -> Result<Field, String> {
    let Some((kind, value)) = token.split_once(':') else {
        return Err(format!(
            "body field {token:?} is not TYPE:VALUE (u8 u16 u32 u64 i32 i64 str hex)"
        ));
    };
    match kind {
        "str" => Ok(Field::Text(parse_text(value)?)),
        "hex" => parse_hex(value).map(Field::Bytes),
        _ => {
            let width = Width::parse(kind)
                .ok_or_else(|| format!("body field {token:?}: unknown type {kind:?}"))?;
            if let Some(name) = value.strip_prefix('{').and_then(|v| v.strip_suffix('}')) {
                let var = Var::parse(name)
                    .ok_or_else(|| format!("body field {token:?}: no variable {name:?}"))?;
                return Ok(Field::Variable { width, var });
            }
            let number: i128 = value
                .parse()
                .map_err(|_| format!("body field {token:?}: {value:?} is not a number"))?;
            let (low, high) = width.range();
            if !(low..=high).contains(&number) {
                return Err(format!("body field {token:?}: out of range for {kind}"));
            }
            Ok(Field::Number {
                width,
                value: number,
            })
        }
    }
}

/// The first `{player}` or `{seq}` in `text`: where, which, its length.
fn next_var(text: &str) -> Option<(usize, Var, usize)> {
    [("{player}", Var::Player), ("{seq}", Var::Seq)]
        .into_iter()
        .filter_map(|(name, var)| Some((text.find(name)?, var, name.len())))
        .min_by_key(|(at, _, _)| *at)
}

/// Text with `{player}` and `{seq}` inside.
fn parse_text(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("str:{text}: an unclosed {{"))?;
        let name = &rest[open + 1..open + close];
        let var = Var::parse(name).ok_or_else(|| format!("str:{text}: no variable {name:?}"))?;
        pieces.push(Piece::Var(var));
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Ok(pieces)
}

fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("hex:{text}: an odd number of digits"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("hex:{text}: not hexadecimal"))
        })
        .collect()
}

/// Splits on whitespace; a double-quoted run is one token (no escapes).
fn tokens(line: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_token = false;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_token = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_token {
                    tokens.push(std::mem::take(&mut current));
                    in_token = false;
                }
            }
            c => {
                current.push(c);
                in_token = true;
            }
        }
    }
    if quoted {
        return Err(format!("an unclosed quote in {line:?}"));
    }
    if in_token {
        tokens.push(current);
    }
    Ok(tokens)
}

/// One request of a custom workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// How the report names it (its own line and `.hgrm`).
    pub name: String,
    pub route_id: u32,
    /// Share of the mix (setup requests: 0).
    pub weight: u32,
    pub body: Body,
    /// Setup only: ERROR codes that count as done.
    pub accept: Vec<u16>,
}

/// A parsed custom workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Custom {
    /// Sent after every login, in order, each after the last one's answer.
    pub setup: Vec<Request>,
    /// The measured mix; never empty.
    pub requests: Vec<Request>,
    /// Running sums of the weights, for `pick`.
    cumulative: Vec<u32>,
}

impl Custom {
    /// One route and body from the command line, named `route-<id>`.
    pub fn from_flags(route_id: u32, body: &str, max_body: u32) -> Result<Custom, String> {
        let body = Body::parse(body).map_err(|e| format!("--body: {e}"))?;
        let request = Request {
            name: format!("route-{route_id}"),
            route_id,
            weight: 1,
            body,
            accept: Vec::new(),
        };
        Custom::new(Vec::new(), vec![request], max_body)
    }

    /// A workload file's text (see the module's documentation).
    pub fn from_text(text: &str, max_body: u32) -> Result<Custom, String> {
        if text.len() > WORKLOAD_FILE_BYTES_MAX {
            return Err(format!(
                "a workload file is at most {WORKLOAD_FILE_BYTES_MAX} bytes"
            ));
        }
        let mut setup = Vec::new();
        let mut requests = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |e: String| format!("line {}: {e}", number + 1);
            // A JSON body runs from its `{` or `[` to the end of the line,
            // quotes and spaces included.
            let (head, json) = split_json(line);
            let words = tokens(head).map_err(at)?;
            let (mut request, is_setup) = parse_line(&words).map_err(at)?;
            if let Some(json) = json {
                if !request.body.fields.is_empty() {
                    return Err(at("a JSON body is the whole body".to_string()));
                }
                request.body = Body::json(json).map_err(at)?;
            }
            if is_setup {
                setup.push(request);
            } else {
                requests.push(request);
            }
        }
        Custom::new(setup, requests, max_body)
    }

    fn new(setup: Vec<Request>, requests: Vec<Request>, max_body: u32) -> Result<Custom, String> {
        if requests.is_empty() || requests.len() > CUSTOM_REQUESTS_MAX {
            return Err(format!(
                "a custom workload has 1 to {CUSTOM_REQUESTS_MAX} weighted requests"
            ));
        }
        if setup.len() > SETUP_REQUESTS_MAX {
            return Err(format!("at most {SETUP_REQUESTS_MAX} setup requests"));
        }
        for request in setup.iter().chain(&requests) {
            if request.body.len_max() > max_body as usize {
                return Err(format!(
                    "{}: its body can reach {} bytes, over --max-body {max_body}",
                    request.name,
                    request.body.len_max()
                ));
            }
        }
        for (i, request) in requests.iter().enumerate() {
            if requests[..i].iter().any(|other| other.name == request.name) {
                return Err(format!("{}: two requests of one name", request.name));
            }
        }
        let mut total = 0u32;
        let mut cumulative = Vec::with_capacity(requests.len());
        for request in &requests {
            total = total
                .checked_add(request.weight)
                .ok_or("the weights add up past u32")?;
            cumulative.push(total);
        }
        if total == 0 {
            return Err("a custom workload needs one positive weight".to_string());
        }
        Ok(Custom {
            setup,
            requests,
            cumulative,
        })
    }

    /// The index of the next request of the mix, by weight.
    pub fn pick(&self, rng: &mut SmallRng) -> usize {
        let total = *self.cumulative.last().expect("never empty");
        let point = rng.random_range(0..total);
        self.cumulative.partition_point(|&sum| sum <= point)
    }
}

/// A workload line cut where its JSON body starts: the fourth word (after
/// `WEIGHT NAME ROUTE` or `setup NAME ROUTE`, and any `accept=`) when it
/// begins with `{` or `[`.
fn split_json(line: &str) -> (&str, Option<&str>) {
    let mut words = 0;
    let mut in_word = false;
    let mut quoted = false;
    for (at, c) in line.char_indices() {
        if c.is_whitespace() && !quoted {
            in_word = false;
            continue;
        }
        if !in_word {
            in_word = true;
            words += 1;
            if words >= 4 && (c == '{' || c == '[') {
                return (&line[..at], Some(line[at..].trim_end()));
            }
        }
        if c == '"' {
            quoted = !quoted;
        }
    }
    (line, None)
}

/// `setup NAME ROUTE FIELDS... [accept=CODES]` or `WEIGHT NAME ROUTE FIELDS...`.
fn parse_line(words: &[String]) -> Result<(Request, bool), String> {
    let [first, name, route, fields @ ..] = words else {
        return Err("expected `WEIGHT NAME ROUTE BODY...` or `setup NAME ROUTE BODY...`".into());
    };
    let is_setup = first == "setup";
    let weight = if is_setup {
        0
    } else {
        first
            .parse()
            .map_err(|_| format!("{first:?} is neither `setup` nor a weight"))?
    };
    if name.is_empty() || name.len() > NAME_LEN_MAX || name.contains(['/', '\\']) {
        return Err(format!(
            "name {name:?}: 1 to {NAME_LEN_MAX} bytes, no slashes (it names a file)"
        ));
    }
    let route_id = route
        .parse()
        .map_err(|_| format!("route {route:?} is not a route id (u32)"))?;
    let (accept_words, body_words): (Vec<&String>, Vec<&String>) =
        fields.iter().partition(|w| w.starts_with("accept="));
    let mut accept = Vec::new();
    for word in accept_words {
        if !is_setup {
            return Err("accept= is for setup lines (the mix counts errors)".to_string());
        }
        for code in word["accept=".len()..].split(',') {
            accept.push(
                code.parse()
                    .map_err(|_| format!("accept code {code:?} is not a u16"))?,
            );
        }
    }
    if accept.len() > ACCEPT_CODES_MAX {
        return Err(format!("at most {ACCEPT_CODES_MAX} accept codes"));
    }
    let body_words: Vec<String> = body_words.into_iter().cloned().collect();
    Ok((
        Request {
            name: name.clone(),
            route_id,
            weight,
            body: Body::from_tokens(&body_words)?,
            accept,
        },
        is_setup,
    ))
}

#[cfg(test)]
#[path = "custom_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "conn_custom_tests.rs"]
mod conn_tests;
