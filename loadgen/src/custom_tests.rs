//! The custom workload's parser: bodies (fields, variables, JSON) and
//! workload files, refused with the field or line at fault.

use super::*;
use rand::SeedableRng;

fn render(spec: &str, player: u64, seq: u64) -> Vec<u8> {
    let mut out = Vec::new();
    Body::parse(spec)
        .expect("parses")
        .render(Vars { player, seq }, &mut out);
    out
}

#[test]
fn bodies_render_little_endian_with_variables() {
    assert_eq!(render("u64:{player} i64:1", 7, 0), {
        let mut v = 7u64.to_le_bytes().to_vec();
        v.extend_from_slice(&1i64.to_le_bytes());
        v
    });
    assert_eq!(
        render("i32:-2 u8:255 hex:0aff", 0, 0),
        [0xfe, 0xff, 0xff, 0xff, 0xff, 0x0a, 0xff]
    );
    assert_eq!(render("\"str:g {player}-{seq}\"", 12, 3), b"g 12-3");
    assert_eq!(render("u16:{seq}", 0, 0x1_0203), [0x03, 0x02]);
    assert_eq!(render("", 1, 1), b"");
    let body = Body::parse("u64:{player} str:p{player}").expect("parses");
    assert_eq!(body.len_max(), 8 + 1 + VAR_TEXT_LEN_MAX);
}

#[test]
fn a_json_body_is_sent_as_written_with_its_variables() {
    assert_eq!(render(r#"{"by":1}"#, 7, 3), br#"{"by":1}"#);
    assert_eq!(
        render(r#" {"id": {player}, "n": [{seq}, "{x}"]} "#, 7, 3),
        br#"{"id": 7, "n": [3, "{x}"]}"#
    );
    assert_eq!(render("[1, 2]", 0, 0), b"[1, 2]");
    let error = Body::parse(r#"{"by": }"#).unwrap_err();
    assert!(error.contains("not one JSON value"), "{error}");
    let custom = Custom::from_text(
        "setup make 2001 accept=32770 {\"by\": 0}\n3 add 2001 {\"by\": 1, \"who\": \"a b\"}\n",
        1024,
    )
    .expect("parses");
    let mut out = Vec::new();
    custom.requests[0]
        .body
        .render(Vars { player: 1, seq: 1 }, &mut out);
    assert_eq!(out, br#"{"by": 1, "who": "a b"}"#);
    assert_eq!(custom.setup[0].accept, [32770]);
    // Braces inside a quoted field are the field's.
    let quoted = Custom::from_text("1 say 303 u64:1 \"str:hi {seq}\"\n", 1024).expect("parses");
    let mut out = Vec::new();
    quoted.requests[0]
        .body
        .render(Vars { player: 1, seq: 4 }, &mut out);
    assert_eq!(&out[8..], b"hi 4");
    assert!(Custom::from_text("1 add 2001 u8:1 {\"by\": 1}\n", 1024)
        .unwrap_err()
        .contains("whole body"));
}

#[test]
fn bad_bodies_are_refused_with_the_field() {
    for (spec, needle) in [
        ("u64", "TYPE:VALUE"),
        ("u9:1", "unknown type"),
        ("u8:256", "out of range"),
        ("u64:-1", "out of range"),
        ("i64:x", "not a number"),
        ("u64:{guild}", "no variable"),
        ("str:{player", "unclosed"),
        ("hex:abc", "odd"),
        ("hex:zz", "hexadecimal"),
        ("\"str:open", "unclosed quote"),
    ] {
        let error = Body::parse(spec).expect_err(spec);
        assert!(error.contains(needle), "{spec}: {error}");
    }
    let many = vec!["u8:1"; FIELDS_MAX + 1].join(" ");
    assert!(Body::parse(&many).is_err());
    assert!(Body::parse(&vec!["u8:1"; FIELDS_MAX].join(" ")).is_ok());
}

const GUILD: &str = "\
# a comment
setup guild.create 300 u64:{player} str:g{player} accept=32770,32771
setup guild.join   301 u64:{player}

3 guild.incr 304 u64:{player} i64:1
1 guild.say  303 u64:{player} \"str:hello there\"
";

#[test]
fn a_workload_file_has_setup_and_a_weighted_mix() {
    let custom = Custom::from_text(GUILD, 65536).expect("parses");
    assert_eq!(custom.setup.len(), 2);
    assert_eq!(custom.setup[0].accept, vec![32770, 32771]);
    assert_eq!(custom.setup[1].route_id, 301);
    assert_eq!(custom.requests.len(), 2);
    assert_eq!(custom.requests[0].name, "guild.incr");
    let mut rng = SmallRng::seed_from_u64(3);
    let mut counts = [0u32; 2];
    for _ in 0..4000 {
        counts[custom.pick(&mut rng)] += 1;
    }
    assert!((2700..3300).contains(&counts[0]), "{counts:?}");
    let mut out = Vec::new();
    custom.requests[1]
        .body
        .render(Vars { player: 5, seq: 9 }, &mut out);
    assert_eq!(&out[8..], b"hello there");
}

#[test]
fn workload_files_are_bounded() {
    for (text, needle) in [
        ("", "1 to 8 weighted"),
        ("setup a 1", "1 to 8 weighted"),
        ("0 a 1", "positive weight"),
        ("x a 1", "neither"),
        ("1 a", "expected"),
        ("1 a/b 1", "no slashes"),
        ("1 a 1\n1 a 2", "two requests of one name"),
        ("1 a 1 accept=5", "setup lines"),
        ("setup s 1 accept=70000\n1 a 1", "u16"),
        ("1 a 1 hex:0000", ""),
    ] {
        match Custom::from_text(text, 1) {
            Ok(_) => assert!(needle.is_empty(), "{text:?} parsed"),
            Err(error) if needle.is_empty() => {
                assert!(error.contains("--max-body"), "{text:?}: {error}")
            }
            Err(error) => assert!(error.contains(needle), "{text:?}: {error}"),
        }
    }
    let nine: String = (0..9).map(|i| format!("1 r{i} 1\n")).collect();
    assert!(Custom::from_text(&nine, 64).is_err());
    let eight: String = (0..8).map(|i| format!("1 r{i} 1\n")).collect();
    assert_eq!(
        Custom::from_text(&eight, 64).expect("eight").requests.len(),
        8
    );
    let long = format!("1 {} 1", "n".repeat(NAME_LEN_MAX + 1));
    assert!(Custom::from_text(&long, 64).is_err());
    let huge = "#".repeat(WORKLOAD_FILE_BYTES_MAX + 1);
    assert!(Custom::from_text(&huge, 64).is_err());
}

#[test]
fn flags_make_a_one_request_workload() {
    let custom = Custom::from_flags(11, "i64:1", 65536).expect("parses");
    assert_eq!(custom.requests[0].name, "route-11");
    assert!(custom.setup.is_empty());
    let mut rng = SmallRng::seed_from_u64(1);
    assert_eq!(custom.pick(&mut rng), 0);
    assert!(Custom::from_flags(11, "u64:1", 4).is_err());
}
