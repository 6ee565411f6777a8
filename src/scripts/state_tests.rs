//! The state table a call gets: the one the object's last call left, when
//! the VM kept it (its JSON decodes back to an equal table), or its JSON
//! decoded afresh. What a handler sees must not depend on which: a kept
//! table is the object's alone, and a state is what its saved JSON says,
//! as it is after a restart or a move.

use super::tests::{library_of, refusal_of, Probe, COUNTER, RAW_HANDLER_BODY};
use crate::object::ErrorCode;

/// The example counter with `top` before its table and `counter.raw`'s
/// handler replaced by `handler`.
fn counter_with(top: &str, handler: &str) -> String {
    let script = format!("{top}\n{}", COUNTER.replace(RAW_HANDLER_BODY, handler));
    assert!(script.contains(handler));
    script
}

#[test]
fn a_kept_state_cannot_be_changed_from_another_objects_call() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with(
        "local held",
        "if req == \"hold\" then held = state end\n      \
         if req == \"write\" then held.n = 999 end\n      \
         return state.n",
    );
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut alice = Probe::new(&library, 200);
    let mut bob = Probe::new(&library, 200);
    bob.object_id = 8;
    assert_eq!(alice.answer(2001, r#"{"by": 5}"#), r#"{"n":5}"#);
    assert_eq!(alice.answer(2003, "hold"), "5");
    let (code, reason) = refusal_of(bob.call(2003, "write"));
    assert_eq!(code, ErrorCode::Internal);
    assert!(reason.contains("readonly"), "{reason}");
    assert_eq!(alice.answer(2003, "look"), "5", "alice's state is hers");
    assert_eq!(alice.state()["n"], 5);
}

#[test]
fn a_result_the_object_did_not_keep_is_not_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let library = library_of(dir.path(), &[("counter.luau", COUNTER)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.answer(2001, r#"{"by": 5}"#), r#"{"n":5}"#);
    let unkept = counter.run(2001, r#"{"by": 3}"#).unwrap();
    assert_eq!(unkept.answer, br#"{"n":8}"#);
    assert_eq!(
        counter.answer(2001, r#"{"by": 1}"#),
        r#"{"n":6}"#,
        "the +3 was not kept"
    );
}

#[test]
fn a_state_its_json_would_change_is_decoded_afresh_for_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with(
        "local nested",
        "if req == \"number key\" then state[5] = \"x\" end\n      \
         if req == \"minus zero\" then state.z = -1 / math.huge end\n      \
         if req == \"bad utf8\" then state.s = \"\\255\" end\n      \
         if req == \"metatable\" then setmetatable(state, {}) end\n      \
         if req == \"nested\" then state.t = {} nested = state.t end\n      \
         return {\n        \
           [\"number key\"] = state[5] ~= nil,\n        \
           [\"minus zero\"] = state.z ~= nil and 1 / state.z < 0,\n        \
           [\"bad utf8\"] = state.s == \"\\255\",\n        \
           metatable = getmetatable(state) ~= nil,\n        \
           nested = nested ~= nil and rawequal(state.t, nested),\n      \
         }",
    );
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let cases = [
        "number key",
        "minus zero",
        "bad utf8",
        "metatable",
        "nested",
    ];
    for (at, case) in cases.into_iter().enumerate() {
        let mut object = Probe::new(&library, 200);
        object.object_id = 10 + at as u64;
        let changed: serde_json::Value = serde_json::from_str(&object.answer(2003, case)).unwrap();
        assert_eq!(changed[case], true, "{case}: in the call that did it");
        let next: serde_json::Value = serde_json::from_str(&object.answer(2003, "look")).unwrap();
        assert_eq!(next[case], false, "{case}: the next call sees the JSON's");
    }
}

/// Floats a JSON reader that is not exact takes back a unit in the last
/// place off: a state holding one drifted at every save and load.
#[test]
fn a_float_in_a_state_comes_back_from_its_json_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with(
        "",
        "if req ~= \"look\" then state.f = tonumber(req) end\n      return state.f",
    );
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    for float in ["-1.81996730402717e-179", "1.0715660391465826e-75", "0.1"] {
        let mut saved = Probe::new(&library, 200);
        assert_eq!(saved.answer(2003, float), float);
        // Another object with the saved JSON, as after a restart.
        let mut loaded = Probe::new(&library, 200);
        loaded.object_id = 8;
        loaded.version = saved.version;
        loaded.state = saved.state.clone();
        assert_eq!(loaded.answer(2003, "look"), float, "{:?}", saved.state);
    }
}

#[test]
fn strings_are_written_as_json_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with("", "state.last = req\n      return { [req] = req }");
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    let texts = [
        "plain",
        "",
        "a\"b",
        "back\\slash",
        "\u{1}ctl",
        "\u{1f}",
        "\u{7f}del",
        "tab\t",
        "é",
        "\u{2028}",
        "/",
    ];
    for text in texts {
        let expected = serde_json::to_string(&serde_json::json!({ text: text })).unwrap();
        assert_eq!(counter.answer(2003, text), expected, "{text:?}");
        let state = serde_json::json!({ "last": text, "n": 0 });
        assert_eq!(counter.state(), state, "{text:?}");
    }
}
