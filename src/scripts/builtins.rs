//! Builtins whose Luau versions do all their work inside one C call, where
//! the call budget (checked at Luau's safepoints, `budget.rs`) cannot stop
//! them, replaced before the VM is sandboxed:
//! - `string.find` with `plain` (or a pattern without special characters)
//!   and `string.split` compared the needle at every position of the
//!   haystack: O(n * m), an hour for a 16 MiB haystack and an 8 MiB needle,
//!   and minutes for a state of 1 MiB searched for a body of 64 KiB. Here
//!   they search in linear time (`memchr::memmem`); a pattern with special
//!   characters still goes to Luau's matcher (docs/scripts.md says what
//!   that costs).
//! - `table.move` walked its whole range, holes included: a range of 2^31
//!   ran tens of seconds. Here a range longer than `MOVE_RANGE_MAX` is an
//!   error.

use mlua::{Function, Lua, MultiValue, Table, Value};

/// The longest range `table.move` takes: a few milliseconds of C.
const MOVE_RANGE_MAX: i64 = 1 << 22;

/// The characters that make a `string.find` pattern more than plain text.
const PATTERN_SPECIALS: &[u8] = b"^$*+?.([%-";

/// Replaces the builtins above in `lua`'s `string` and `table`.
pub(super) fn install(lua: &Lua) -> mlua::Result<()> {
    let globals = lua.globals();
    let string: Table = globals.raw_get("string")?;
    let luau_find: Function = string.raw_get("find")?;
    string.raw_set(
        "find",
        lua.create_function(move |_, args: MultiValue| find(&luau_find, args))?,
    )?;
    string.raw_set("split", lua.create_function(split)?)?;
    let table: Table = globals.raw_get("table")?;
    let luau_move: Function = table.raw_get("move")?;
    table.raw_set(
        "move",
        lua.create_function(move |_, args: MultiValue| bounded_move(&luau_move, args))?,
    )?;
    Ok(())
}

/// `string.find(s, pattern, init, plain)`.
fn find(luau_find: &Function, args: MultiValue) -> mlua::Result<MultiValue> {
    let (Some(Value::String(haystack)), Some(Value::String(needle))) = (args.front(), args.get(1))
    else {
        return luau_find.call(args);
    };
    let plain = args
        .get(3)
        .is_some_and(|plain| plain.as_boolean() != Some(false) && !plain.is_nil());
    let needle_bytes = needle.as_bytes();
    if !plain
        && needle_bytes
            .iter()
            .any(|byte| PATTERN_SPECIALS.contains(byte))
    {
        return luau_find.call(args);
    }
    let haystack = haystack.as_bytes();
    let len = haystack.len() as i64;
    let init = match args.get(2) {
        None | Some(Value::Nil) => 1,
        Some(Value::Integer(init)) => *init,
        Some(Value::Number(init)) if init.fract() == 0.0 => *init as i64,
        Some(_) => return luau_find.call(args),
    };
    // Lua's rule: a negative start counts from the end; past the end + 1
    // nothing is found.
    let start = if init < 0 {
        (len + init + 1).max(1)
    } else {
        init.max(1)
    };
    if start > len + 1 {
        return Ok(MultiValue::from_vec(vec![Value::Nil]));
    }
    let from = (start - 1) as usize;
    Ok(
        match memchr::memmem::find(&haystack[from..], &needle_bytes) {
            Some(at) => {
                let first = (from + at) as i64 + 1;
                let last = first + needle_bytes.len() as i64 - 1;
                MultiValue::from_vec(vec![Value::Integer(first), Value::Integer(last)])
            }
            None => MultiValue::from_vec(vec![Value::Nil]),
        },
    )
}

/// `string.split(s, separator)`: the pieces between non-overlapping
/// occurrences of `separator` (`","` by default), left to right, as
/// Luau's: an empty separator gives each byte (and nothing for an empty
/// string).
fn split(
    lua: &Lua,
    (text, separator): (mlua::String, Option<mlua::String>),
) -> mlua::Result<Table> {
    let text = text.as_bytes();
    let separator = separator.as_ref().map(|separator| separator.as_bytes());
    let separator: &[u8] = separator.as_deref().unwrap_or(b",");
    let pieces = lua.create_table()?;
    let mut index = 0;
    let mut push = |piece: &[u8]| -> mlua::Result<()> {
        index += 1;
        pieces.raw_set(index, lua.create_string(piece)?)
    };
    if separator.is_empty() {
        for byte in text.chunks(1) {
            push(byte)?;
        }
        return Ok(pieces);
    }
    let mut start = 0;
    // Non-overlapping, left to right, as Luau's.
    for at in memchr::memmem::find_iter(&text, separator) {
        push(&text[start..at])?;
        start = at + separator.len();
    }
    push(&text[start..])?;
    Ok(pieces)
}

/// `table.move(a1, f, e, t, a2)`, refused past `MOVE_RANGE_MAX` elements.
fn bounded_move(luau_move: &Function, args: MultiValue) -> mlua::Result<MultiValue> {
    let whole = |value: Option<&Value>| match value {
        Some(Value::Integer(value)) => Some(*value),
        Some(Value::Number(value)) if value.fract() == 0.0 => Some(*value as i64),
        _ => None,
    };
    if let (Some(first), Some(last)) = (whole(args.get(1)), whole(args.get(2))) {
        if last.saturating_sub(first) >= MOVE_RANGE_MAX {
            return Err(mlua::Error::runtime(format!(
                "table.move: a range of {} elements is past the {MOVE_RANGE_MAX} a call may move",
                last.saturating_sub(first).saturating_add(1)
            )));
        }
    }
    luau_move.call(args)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use mlua::{Lua, LuaOptions, StdLib};

    /// A VM with the standard libraries, `replaced` or as Luau has them.
    fn vm(replaced: bool) -> Lua {
        let libs = StdLib::TABLE | StdLib::STRING;
        let lua = Lua::new_with(libs, LuaOptions::default()).unwrap();
        if replaced {
            super::install(&lua).unwrap();
        }
        lua
    }

    /// What `expression` gives, as text: its values, a table's items.
    fn shown(lua: &Lua, expression: &str) -> String {
        let code = format!(
            "local function show(...)
               local values, out = table.pack(...), {{}}
               for i = 1, values.n do
                 local v = values[i]
                 out[i] = if type(v) == 'table' then '{{' .. table.concat(v, '|') .. '}}' else tostring(v)
               end
               return table.concat(out, ',')
             end
             return show({expression})"
        );
        lua.load(code).eval::<String>().unwrap()
    }

    #[test]
    fn find_and_split_answer_as_luaus_own() {
        let (ours, luaus) = (vm(true), vm(false));
        let cases = [
            r#"("hello world"):find("o")"#,
            r#"("hello world"):find("o", 6)"#,
            r#"("hello"):find("l", -2)"#,
            r#"("hello"):find("l", -99)"#,
            r#"("hello"):find("", 10)"#,
            r#"("hello"):find("", 6)"#,
            r#"("hello"):find("", 0)"#,
            r#"("a.b"):find(".", 1, true)"#,
            r#"("a.b"):find("%.")"#,
            r#"("a.b"):find("(b)")"#,
            r#"("abc"):find("x")"#,
            r#"("abc"):find("c", 3, false)"#,
            r#"("a\0b"):find("\0", 1, 1)"#,
            r#"string.split("a,b,,c")"#,
            r#"string.split("a--b--", "--")"#,
            r#"string.split("abc", "")"#,
            r#"string.split("", "")"#,
            r#"string.split("", ",")"#,
            r#"string.split("aaa", "aa")"#,
            r#"("x y"):split(" ")"#,
        ];
        for case in cases {
            assert_eq!(shown(&ours, case), shown(&luaus, case), "{case}");
        }
    }

    /// Luau compared the needle at every position: 2^37 byte compares
    /// here, seconds in one C call the budget cannot stop.
    #[test]
    fn a_plain_find_and_a_split_take_linear_time() {
        let lua = vm(true);
        let started = Instant::now();
        let found: Option<i64> = lua
            .load(
                "local hay, needle = string.rep('a', 2^19), string.rep('a', 2^18) .. 'b'
                 assert(#string.split(hay, needle) == 1)
                 return (string.find(hay, needle, 1, true))",
            )
            .eval()
            .unwrap();
        assert_eq!(found, None);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_move_of_a_huge_range_is_refused_at_once() {
        let lua = vm(true);
        let started = Instant::now();
        let error = lua
            .load("table.move({}, 1, 2^31 - 2, 2, {})")
            .exec()
            .unwrap_err();
        assert!(error.to_string().contains("table.move"), "{error}");
        assert!(started.elapsed() < Duration::from_millis(100));
        let moved: String = lua
            .load("return table.concat(table.move({1, 2, 3}, 1, 3, 2, {0}), ',')")
            .eval()
            .unwrap();
        assert_eq!(moved, "0,1,2,3");
    }
}
