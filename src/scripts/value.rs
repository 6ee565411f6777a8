//! The one value model between clients, the store and Luau: JSON. A request
//! body (on a `json` route), an object's state and a handler's answer cross
//! into Luau and back through here, straight between JSON text and values
//! on the VM's stack: no JSON tree and no Rust handle per Lua value in
//! between (each handle costs a slot in mlua's reference thread, which was
//! most of a small call's cost).
//!
//! A Lua table whose keys are exactly 1..n (n > 0) is a JSON array; any
//! other table is a JSON object (number keys become their decimal text),
//! its fields in the order of their names, so the same table always
//! encodes to the same bytes; an empty table is `{}`. Integers that fit
//! `i64` stay integers; other numbers are floats. Functions, userdata and
//! other values that JSON cannot hold are an error, as is nesting deeper
//! than `DEPTH_MAX` (a table that holds itself).
//!
//! Everything here works on a raw `lua_State` and must run where Luau
//! cannot raise an error: outside a script's own code, where the VM's
//! memory bound does not hold (an allocation is then refused only when the
//! process itself is out of memory, which aborts anyway), and with room on
//! the stack checked before each level.

use std::cell::Cell;
use std::ffi::{c_int, CStr};
use std::fmt;
use std::ops::Range;

use mlua::ffi::{self, lua_State};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::flat;

/// Tables deeper than this do not convert (a cycle, or a runaway script).
const DEPTH_MAX: usize = 64;

/// Room a decoded array or object starts with when the text does not say
/// its length (serde_json never does): most bodies and states are a few
/// fields, and a table that grows field by field pays a rehash each time.
const FIELDS_GUESSED: c_int = 4;

/// Stack slots one level of a conversion uses: the table, a key, a value.
const SLOTS_PER_LEVEL: c_int = 3;

/// Pushes the JSON text `bytes` as one Lua value (`null` is nil), or says
/// why it is not JSON and leaves the stack as it was.
///
/// # Safety
/// `state` is a live Luau state, no script code running (its memory
/// bound does not hold).
pub(super) unsafe fn push(state: *mut lua_State, bytes: &[u8]) -> Result<(), serde_json::Error> {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        if flat::push(state, bytes, FIELDS_GUESSED, SLOTS_PER_LEVEL) {
            return Ok(());
        }
        push_by_serde(state, bytes)
    }
}

/// [`push`] by serde_json alone, for any JSON text (`flat` reads the
/// common flat object faster).
///
/// # Safety
/// As [`push`].
pub(super) unsafe fn push_by_serde(
    state: *mut lua_State,
    bytes: &[u8],
) -> Result<(), serde_json::Error> {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        let top = ffi::lua_gettop(state);
        let mut json = serde_json::Deserializer::from_slice(bytes);
        let pushed = Decoder { state }
            .deserialize(&mut json)
            .and_then(|()| json.end());
        if pushed.is_err() {
            ffi::lua_settop(state, top);
        }
        pushed
    }
}

/// Pushes `bytes` as a Lua string.
///
/// # Safety
/// As [`push`].
pub(super) unsafe fn push_string(state: *mut lua_State, bytes: &[u8]) {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        ffi::lua_pushlstring(state, bytes.as_ptr().cast(), bytes.len());
    }
}

/// Why a value was not written.
#[derive(Debug, PartialEq)]
pub(super) enum Unwritten {
    /// Its text would be longer than the most it was given: a table can
    /// hold one table many times over, so a small value can stand for more
    /// text than any node holds, and the writing stops at the bound.
    Longer,
    /// It has no JSON form: why.
    Invalid(String),
}

impl From<String> for Unwritten {
    fn from(why: String) -> Unwritten {
        Unwritten::Invalid(why)
    }
}

/// Appends the value at `index` to `out` as JSON text of at most `limit`
/// bytes, or says why it did not (`out` then holds part of it). The stack
/// is left as it was.
///
/// # Safety
/// `state` is a live Luau state and `index` a valid index on its stack.
pub(super) unsafe fn write(
    state: *mut lua_State,
    index: c_int,
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), Unwritten> {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe { encode(state, index, out, limit).map(|_| ()) }
}

/// How a value written as JSON comes back when the text is pushed again.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Fidelity {
    /// As an equal table: a table of strings, numbers and booleans under
    /// string keys (or an array of them), every string UTF-8, no `-0`, no
    /// metatable.
    Same,
    /// Changed (a key's type, a replaced byte, a nested table's identity,
    /// a metatable dropped) or not a table at all.
    Changed,
}

/// [`write`], saying too whether the text decodes back to an equal value:
/// a state that does can be kept as its table for the object's next call
/// instead of being decoded again.
///
/// # Safety
/// As [`write`], with room for one more value on the stack.
pub(super) unsafe fn write_state(
    state: *mut lua_State,
    index: c_int,
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<Fidelity, Unwritten> {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        // A metatable does not come back with the JSON.
        let plain_table = match ffi::lua_type(state, index) {
            ffi::LUA_TTABLE if ffi::lua_getmetatable(state, index) != 0 => {
                ffi::lua_pop(state, 1);
                false
            }
            found => found == ffi::LUA_TTABLE,
        };
        let same = encode(state, index, out, limit)?;
        Ok(if plain_table && same {
            Fidelity::Same
        } else {
            Fidelity::Changed
        })
    }
}

/// Writes as [`write`] does; `Ok(true)` when the text decodes back to an
/// equal value (a nested table never does: it comes back as another one).
///
/// # Safety
/// As [`write`].
unsafe fn encode(
    state: *mut lua_State,
    index: c_int,
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<bool, Unwritten> {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        let index = ffi::lua_absindex(state, index);
        let top = ffi::lua_gettop(state);
        let (fields, scratch) = BUFFERS.take();
        let end = out.len().saturating_add(limit);
        let mut encoder = Encoder {
            state,
            out,
            end,
            fields,
            scratch,
            same: true,
        };
        let written = encoder.value(index, 0);
        let same = encoder.same;
        encoder.fields.clear();
        BUFFERS.set((encoder.fields, encoder.scratch));
        ffi::lua_settop(state, top);
        written?;
        if out.len() > end {
            return Err(Unwritten::Longer);
        }
        Ok(same)
    }
}

/// The bytes a value leaves as (an answer, a push, a send), at most
/// `limit` of them, appended to `out`: a string as its bytes, nil as
/// nothing, anything else as JSON.
///
/// # Safety
/// As [`write`].
pub(super) unsafe fn write_answer(
    state: *mut lua_State,
    index: c_int,
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), Unwritten> {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        match ffi::lua_type(state, index) {
            ffi::LUA_TNIL => Ok(()),
            ffi::LUA_TSTRING => {
                let bytes = string_at(state, index);
                if bytes.len() > limit {
                    return Err(Unwritten::Longer);
                }
                out.extend_from_slice(bytes);
                Ok(())
            }
            _ => write(state, index, out, limit),
        }
    }
}

/// The bytes of the string at `index`, borrowed from the VM: valid while
/// that string is on the stack or held by a table left unchanged.
///
/// # Safety
/// The value at `index` is a string (`lua_tolstring` would turn a number
/// into one in place, which would change a table's key under a walk).
pub(super) unsafe fn string_at<'a>(state: *mut lua_State, index: c_int) -> &'a [u8] {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        let mut len = 0usize;
        let text = ffi::lua_tolstring(state, index, &mut len);
        if text.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(text.cast(), len)
    }
}

/// The name Luau gives a type, for an error.
///
/// # Safety
/// `state` is a live Luau state and `index` a valid index on its stack.
pub(super) unsafe fn type_name(state: *mut lua_State, index: c_int) -> String {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        let name = ffi::lua_typename(state, ffi::lua_type(state, index));
        if name.is_null() {
            return "value".to_string();
        }
        CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

/// An object's fields and the room to sort them in.
type Buffers = (Vec<(Range<usize>, Range<usize>)>, Vec<u8>);

thread_local! {
    /// The encoder's buffers, kept between calls so that writing a value
    /// allocates nothing but what `out` grows by.
    static BUFFERS: Cell<Buffers> = const { Cell::new((Vec::new(), Vec::new())) };
}

/// Pushes Lua values onto the stack as a JSON document is read.
#[derive(Clone, Copy)]
struct Decoder {
    state: *mut lua_State,
}

impl Decoder {
    /// Room for one more level, or serde's error.
    fn room<E: serde::de::Error>(self) -> Result<(), E> {
        // SAFETY: the state is live (the contract of `push`).
        match unsafe { ffi::lua_checkstack(self.state, SLOTS_PER_LEVEL) } {
            0 => Err(E::custom("nested too deep for the VM's stack")),
            _ => Ok(()),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Decoder {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, json: D) -> Result<(), D::Error> {
        json.deserialize_any(self)
    }
}

// Every `unsafe` block below is sound because the state is live with its
// memory bound not holding (the contract of `push`), and `room` was checked
// for the level, so no push can fail or raise.
impl<'de> Visitor<'de> for Decoder {
    type Value = ();

    fn expecting(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        out.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        // SAFETY: as the note on this impl says.
        unsafe { ffi::lua_pushnil(self.state) };
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, flag: bool) -> Result<(), E> {
        // SAFETY: as the note on this impl says.
        unsafe { ffi::lua_pushboolean(self.state, c_int::from(flag)) };
        Ok(())
    }

    // Luau numbers are doubles: integers beyond 2^53 lose digits, as they
    // would in JavaScript.
    fn visit_i64<E: serde::de::Error>(self, integer: i64) -> Result<(), E> {
        self.visit_f64(integer as f64)
    }

    fn visit_u64<E: serde::de::Error>(self, integer: u64) -> Result<(), E> {
        self.visit_f64(integer as f64)
    }

    fn visit_f64<E: serde::de::Error>(self, number: f64) -> Result<(), E> {
        // SAFETY: as the note on this impl says.
        unsafe { ffi::lua_pushnumber(self.state, number) };
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<(), E> {
        // SAFETY: as the note on this impl says.
        unsafe { push_string(self.state, text.as_bytes()) };
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        self.room()?;
        let guessed = items.size_hint().map_or(FIELDS_GUESSED, clamp);
        // SAFETY: as the note on this impl says.
        unsafe { ffi::lua_createtable(self.state, guessed, 0) };
        let mut index: ffi::lua_Integer = 0;
        // A null keeps its place: the next item's index counts it.
        while let Some(()) = items.next_element_seed(self)? {
            index += 1;
            // SAFETY: as the note on this impl says.
            unsafe { ffi::lua_rawseti(self.state, -2, index) };
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<(), A::Error> {
        self.room()?;
        let guessed = fields.size_hint().map_or(FIELDS_GUESSED, clamp);
        // SAFETY: as the note on this impl says.
        unsafe { ffi::lua_createtable(self.state, 0, guessed) };
        while let Some(()) = fields.next_key_seed(self)? {
            fields.next_value_seed(self)?;
            // SAFETY: as the note on this impl says.
            unsafe { ffi::lua_rawset(self.state, -3) };
        }
        Ok(())
    }
}

fn clamp(len: usize) -> c_int {
    c_int::try_from(len).unwrap_or(c_int::MAX)
}

/// Writes the values on a stack as JSON.
struct Encoder<'a> {
    state: *mut lua_State,
    out: &'a mut Vec<u8>,
    /// The length `out` may not pass: looked at before each value, so a
    /// value that repeats a table stops after about `limit` bytes.
    end: usize,
    /// The fields of the objects being written, innermost last: each the
    /// range in `out` of its name (its JSON text inside the quotes) and of
    /// its whole `"name":value` member.
    fields: Vec<(Range<usize>, Range<usize>)>,
    /// Where an object's members are put in order.
    scratch: Vec<u8>,
    /// Whether the text written so far decodes back to equal values.
    same: bool,
}

enum JsonNumber {
    Integer(i64),
    Float(f64),
}

/// A whole number within `i64` is written as an integer (`2^53` as
/// `9007199254740992`, not `9007199254740992.0`); any other as a float.
fn json_number(number: f64) -> Result<JsonNumber, String> {
    const I64_END: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if number.fract() == 0.0 && (-I64_END..I64_END).contains(&number) {
        return Ok(JsonNumber::Integer(number as i64));
    }
    if !number.is_finite() {
        return Err(format!("{number} has no JSON form"));
    }
    Ok(JsonNumber::Float(number))
}

/// Appends `integer`'s decimal text: most numbers in states and answers
/// are integers, and serde_json's writer costs more than the digits.
fn write_integer(out: &mut Vec<u8>, integer: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = integer.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if integer < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

impl Encoder<'_> {
    /// The value at the absolute `index`; leaves the stack as it found it
    /// when it returns `Ok`.
    unsafe fn value(&mut self, index: c_int, depth: usize) -> Result<(), Unwritten> {
        if self.out.len() > self.end {
            return Err(Unwritten::Longer);
        }
        // SAFETY: `write`'s contract, under which every encoder step runs
        // (a live state, a valid absolute index, room checked per table).
        unsafe {
            let state = self.state;
            match ffi::lua_type(state, index) {
                ffi::LUA_TNIL => self.out.extend_from_slice(b"null"),
                ffi::LUA_TBOOLEAN => match ffi::lua_toboolean(state, index) {
                    0 => self.out.extend_from_slice(b"false"),
                    _ => self.out.extend_from_slice(b"true"),
                },
                ffi::LUA_TNUMBER => self.number(ffi::lua_tonumber(state, index))?,
                ffi::LUA_TSTRING => self.text(string_at(state, index)),
                ffi::LUA_TTABLE => {
                    // A table inside a value comes back as a new table,
                    // no longer shared with whatever else held it.
                    self.same &= depth == 0;
                    if depth >= DEPTH_MAX {
                        return Err(format!("a table nested deeper than {DEPTH_MAX}").into());
                    }
                    if ffi::lua_checkstack(state, SLOTS_PER_LEVEL) == 0 {
                        let why = "a table nested too deep for the VM's stack";
                        return Err(why.to_string().into());
                    }
                    self.table(index, depth + 1)?;
                }
                _ => {
                    let why = format!("a {} has no JSON form", type_name(state, index));
                    return Err(why.into());
                }
            }
            Ok(())
        }
    }

    fn number(&mut self, number: f64) -> Result<(), String> {
        // `-0` is written `0`.
        self.same &= number != 0.0 || number.is_sign_positive();
        match json_number(number)? {
            JsonNumber::Integer(integer) => write_integer(self.out, integer),
            JsonNumber::Float(number) => {
                serde_json::to_writer(&mut *self.out, &number).map_err(|error| error.to_string())?
            }
        }
        Ok(())
    }

    /// A string, its bytes taken as UTF-8 (anything else replaced).
    fn text(&mut self, bytes: &[u8]) {
        // Most names and strings are ASCII that JSON takes as it is: the
        // same text serde_json writes, without its walk over the bytes.
        if bytes.iter().all(flat::is_plain) {
            self.out.push(b'"');
            self.out.extend_from_slice(bytes);
            self.out.push(b'"');
            return;
        }
        let text = String::from_utf8_lossy(bytes);
        self.same &= matches!(text, std::borrow::Cow::Borrowed(_));
        // Writing a str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *self.out, &*text);
    }

    unsafe fn table(&mut self, index: c_int, depth: usize) -> Result<(), Unwritten> {
        // SAFETY: `write`'s contract, under which every encoder step runs
        // (a live state, a valid absolute index, room checked per table).
        unsafe {
            let len = ffi::lua_objlen(self.state, index);
            if len > 0 && self.is_array(index, len) {
                self.out.push(b'[');
                for at in 1..=len {
                    if at > 1 {
                        self.out.push(b',');
                    }
                    ffi::lua_rawgeti(self.state, index, at as ffi::lua_Integer);
                    self.value(ffi::lua_gettop(self.state), depth)?;
                    ffi::lua_pop(self.state, 1);
                }
                self.out.push(b']');
                return Ok(());
            }
            self.object(index, depth)
        }
    }

    /// Whether the table's keys are exactly 1..=len.
    unsafe fn is_array(&mut self, index: c_int, len: usize) -> bool {
        // SAFETY: `write`'s contract, under which every encoder step runs
        // (a live state, a valid absolute index, room checked per table).
        unsafe {
            let state = self.state;
            let mut count = 0usize;
            let mut iter = 0;
            loop {
                iter = ffi::lua_rawiter(state, index, iter);
                if iter < 0 {
                    return count == len;
                }
                count += 1;
                let key = (ffi::lua_type(state, -2) == ffi::LUA_TNUMBER)
                    .then(|| ffi::lua_tonumber(state, -2));
                ffi::lua_pop(state, 2);
                let in_range =
                    key.is_some_and(|key| key.fract() == 0.0 && key >= 1.0 && key <= len as f64);
                if !in_range {
                    return false;
                }
            }
        }
    }

    /// A table as a JSON object, its fields sorted by name. Two keys with
    /// the same text (`1` and `"1"`) are one field, the later in the walk;
    /// the other must still have a JSON form. Members are written in walk
    /// order and put in order afterwards only when the walk did not meet
    /// them so (a one-field object never moves).
    unsafe fn object(&mut self, index: c_int, depth: usize) -> Result<(), Unwritten> {
        // SAFETY: `write`'s contract, under which every encoder step runs
        // (a live state, a valid absolute index, room checked per table).
        unsafe {
            let state = self.state;
            let start = self.out.len();
            let first = self.fields.len();
            let mut in_order = true;
            self.out.push(b'{');
            let mut iter = 0;
            loop {
                iter = ffi::lua_rawiter(state, index, iter);
                if iter < 0 {
                    break;
                }
                if self.fields.len() > first {
                    self.out.push(b',');
                }
                let member = self.out.len();
                self.name(-2)?;
                // The name's text inside its quotes, what fields sort by.
                let name = member + 1..self.out.len() - 1;
                self.out.push(b':');
                self.value(ffi::lua_gettop(state), depth)?;
                if let Some((last, _)) = self.fields[first..].last() {
                    in_order &= self.out[last.clone()] < self.out[name.clone()];
                }
                self.fields.push((name, member..self.out.len()));
                ffi::lua_pop(state, 2);
            }
            if in_order {
                self.out.push(b'}');
            } else {
                self.reorder(start, first);
            }
            self.fields.truncate(first);
            Ok(())
        }
    }

    /// Rewrites the object from `start` in `out`, whose members are
    /// `fields[first..]`, with its members sorted by name, the later of
    /// two of the same name kept.
    fn reorder(&mut self, start: usize, first: usize) {
        let out = &*self.out;
        let fields = &mut self.fields[first..];
        // A stable sort keeps fields of the same name in walk order.
        fields.sort_by(|a, b| out[a.0.clone()].cmp(&out[b.0.clone()]));
        self.scratch.clear();
        self.scratch.push(b'{');
        for (at, (name, member)) in fields.iter().enumerate() {
            if fields
                .get(at + 1)
                .is_some_and(|next| out[next.0.clone()] == out[name.clone()])
            {
                continue;
            }
            if self.scratch.len() > 1 {
                self.scratch.push(b',');
            }
            self.scratch.extend_from_slice(&out[member.clone()]);
        }
        self.scratch.push(b'}');
        self.out.truncate(start);
        self.out.extend_from_slice(&self.scratch);
    }

    /// The key at `index` as a JSON object's name.
    unsafe fn name(&mut self, index: c_int) -> Result<(), String> {
        // SAFETY: `write`'s contract, under which every encoder step runs
        // (a live state, a valid absolute index, room checked per table).
        unsafe {
            let state = self.state;
            match ffi::lua_type(state, index) {
                ffi::LUA_TSTRING => self.text(string_at(state, index)),
                ffi::LUA_TNUMBER => {
                    // The key comes back as a string.
                    self.same = false;
                    let text = match json_number(ffi::lua_tonumber(state, index))? {
                        JsonNumber::Integer(integer) => integer.to_string(),
                        JsonNumber::Float(number) => serde_json::Number::from_f64(number)
                            .map_or_else(|| number.to_string(), |number| number.to_string()),
                    };
                    self.text(text.as_bytes());
                }
                _ => return Err(format!("a table key of type {}", type_name(state, index))),
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn integers_are_written_as_their_decimal_text() {
        for integer in [
            0,
            7,
            -7,
            10,
            -10,
            99,
            1 << 53,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ] {
            let mut out = b"x".to_vec();
            super::write_integer(&mut out, integer);
            assert_eq!(out, format!("x{integer}").into_bytes());
        }
    }
}
