//! The common body read without serde_json: one flat JSON object of plain
//! values (`{"by":1}`, `{"id":7,"name":"sword"}`), its names and strings
//! ASCII without escapes, its numbers integers of at most 15 digits. It is
//! most requests, and serde_json's walk (a visitor call per token, a UTF-8
//! check per string) cost about as much as building the table.
//!
//! Anything else, valid or not, is left to `value::push`'s serde_json
//! path: this reader gives up at the first byte it does not take, so it
//! never accepts what that path would refuse, and pushes what it would.

use std::ffi::c_int;

use mlua::ffi::{self, lua_State};

/// Digits an integer may have here: 15 are exact in a double.
const DIGITS_MAX: usize = 15;

/// Pushes `bytes` as a table when they are one flat object of plain
/// values, and says whether it did (the stack as it was when not).
///
/// # Safety
/// As `value::push`: a live state, no script code running.
pub(super) unsafe fn push(
    state: *mut lua_State,
    bytes: &[u8],
    fields_guessed: c_int,
    slots: c_int,
) -> bool {
    // SAFETY: this function's own contract (its `# Safety`); `slots` is
    // room for the table, a name and a value.
    unsafe {
        let top = ffi::lua_gettop(state);
        let mut text = Flat { bytes, at: 0 };
        text.skip_space();
        if text.peek() != Some(b'{') || ffi::lua_checkstack(state, slots) == 0 {
            return false;
        }
        text.at += 1;
        ffi::lua_createtable(state, 0, fields_guessed);
        if !text.members(state) {
            ffi::lua_settop(state, top);
            return false;
        }
        true
    }
}

/// Whether JSON takes `byte` as it is inside a string, and it is the same
/// character in UTF-8: printable ASCII but the quote and the backslash.
pub(super) fn is_plain(byte: &u8) -> bool {
    (b' '..0x80).contains(byte) && !matches!(byte, b'"' | b'\\')
}

/// JSON text and how far it has been read.
struct Flat<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Flat<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Takes `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        self.at += usize::from(next);
        next
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// The members after `{` and the end of the text, each set in the
    /// table on top; `false` at the first thing not taken here.
    ///
    /// # Safety
    /// A table on top of the stack, room for two more values.
    unsafe fn members(&mut self, state: *mut lua_State) -> bool {
        self.skip_space();
        let mut more = !self.eat(b'}');
        while more {
            let Some(name) = self.string() else {
                return false;
            };
            self.skip_space();
            if !self.eat(b':') {
                return false;
            }
            self.skip_space();
            // SAFETY: this function's own contract (its `# Safety`).
            unsafe {
                super::value::push_string(state, name);
                if !self.scalar(state) {
                    return false;
                }
                // A null sets nothing, as on the serde_json path.
                ffi::lua_rawset(state, -3);
            }
            self.skip_space();
            more = self.eat(b',');
            if more {
                self.skip_space();
            } else if !self.eat(b'}') {
                return false;
            }
        }
        self.skip_space();
        self.at == self.bytes.len()
    }

    /// A string of printable ASCII without escapes: its bytes.
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        let length = self.bytes[start..]
            .iter()
            .position(|byte| !is_plain(byte))?;
        self.at = start + length;
        let bytes = self.bytes;
        self.eat(b'"').then(|| &bytes[start..start + length])
    }

    /// Pushes the plain value next: a string, an integer, `true`, `false`
    /// or `null` (nil).
    ///
    /// # Safety
    /// Room for one value on the stack.
    unsafe fn scalar(&mut self, state: *mut lua_State) -> bool {
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            match self.peek() {
                Some(b'"') => match self.string() {
                    Some(text) => super::value::push_string(state, text),
                    None => return false,
                },
                Some(b't') if self.word(b"true") => ffi::lua_pushboolean(state, 1),
                Some(b'f') if self.word(b"false") => ffi::lua_pushboolean(state, 0),
                Some(b'n') if self.word(b"null") => ffi::lua_pushnil(state),
                _ => match self.integer() {
                    Some(number) => ffi::lua_pushnumber(state, number),
                    None => return false,
                },
            }
            true
        }
    }

    fn word(&mut self, word: &[u8]) -> bool {
        let next = self.bytes[self.at..].starts_with(word);
        self.at += if next { word.len() } else { 0 };
        next
    }

    /// An integer as JSON writes it (no leading zero, no `-0`), of at most
    /// `DIGITS_MAX` digits and no fraction or exponent.
    fn integer(&mut self) -> Option<f64> {
        let negative = self.eat(b'-');
        let start = self.at;
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.at += 1;
        }
        let digits = &self.bytes[start..self.at];
        let plain = match digits {
            [] | [b'0', _, ..] => false,
            [b'0'] => !negative,
            _ => digits.len() <= DIGITS_MAX,
        };
        if !plain || matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let value = digits
            .iter()
            .fold(0u64, |value, digit| value * 10 + u64::from(digit - b'0'));
        Some(if negative {
            -(value as f64)
        } else {
            value as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use mlua::Lua;

    use super::super::value;

    /// What a body becomes on the stack, written back as JSON (or `Err`
    /// when it is not JSON), by the whole `value::push` and by serde_json's
    /// path alone; and whether this reader took it.
    fn both_ways(body: &str) -> (Result<String, ()>, Result<String, ()>, bool) {
        let lua = Lua::new();
        let mut seen = (Err(()), Err(()), false);
        // SAFETY: the function works on its own frame of the live state,
        // with room checked, and leaves the stack empty.
        unsafe {
            lua.exec_raw::<()>((), |state| {
                let write = |pushed: bool| {
                    if !pushed {
                        return Err(());
                    }
                    let mut out = Vec::new();
                    value::write(state, -1, &mut out, 1 << 20).map_err(|_| ())?;
                    ffi_pop(state);
                    Ok(String::from_utf8(out).unwrap())
                };
                seen.2 = super::push(state, body.as_bytes(), 4, 3);
                if seen.2 {
                    ffi_pop(state);
                }
                seen.0 = write(value::push(state, body.as_bytes()).is_ok());
                seen.1 = write(value::push_by_serde(state, body.as_bytes()).is_ok());
            })
        }
        .unwrap();
        seen
    }

    unsafe fn ffi_pop(state: *mut mlua::ffi::lua_State) {
        // SAFETY: a value on top of the stack (the caller's word).
        unsafe { mlua::ffi::lua_pop(state, 1) };
    }

    #[test]
    fn flat_objects_are_read_here_as_serde_json_reads_them() {
        let taken = [
            r#"{"by":1}"#,
            r#"{}"#,
            " { \"a\" : -12 ,\n\t\"b\":\"x y\" , \"c\":true,\"d\":false,\"e\":null }\r\n",
            r#"{"a":1,"a":2}"#,
            "{\"a\":0,\"b\":-999999999999999,\"c\":\"\",\"d\":\"~\u{7f}\"}",
            r#"{"quote?":"no","path":"/a/b"}"#,
        ];
        for body in taken {
            let (whole, serde, here) = both_ways(body);
            assert!(here, "{body} is read here");
            assert_eq!(whole, serde, "{body}");
            assert!(whole.is_ok(), "{body}");
        }
    }

    #[test]
    fn everything_else_goes_to_serde_json_and_fares_as_it_would() {
        let left = [
            r#"{"a":1.5}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":01}"#,
            r#"{"a":1234567890123456}"#,
            r#"{"a":"\n"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"é":1}"#,
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            r#"{"a":1,}"#,
            r#"{"a":1}x"#,
            r#"{"a" 1}"#,
            r#"{"a":tru}"#,
            r#"{"a":-}"#,
            r#"{"a":1"#,
            r#"{"#,
            r#"[1,2]"#,
            r#""text""#,
            "7",
            "",
            "not json",
        ];
        for body in left {
            let (whole, serde, here) = both_ways(body);
            assert!(!here, "{body} is left to serde_json");
            assert_eq!(whole, serde, "{body}");
        }
    }
}
