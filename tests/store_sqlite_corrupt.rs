//! A damaged SQLite store is refused at start: its 100-byte header and
//! page 1 (the schema) intact, its table pages overwritten, a file every
//! cheap check would pass. The start runs `PRAGMA quick_check` and exits 1
//! naming the file and what SQLite found, instead of serving with a store
//! that fails every login.

mod support;

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

use support::ServeProcess;

/// SQLite's default page size, which the store does not change.
const PAGE_BYTES: u64 = 4096;
/// Players logged in before the stop, so the routes table has rows.
const PLAYERS: u64 = 200;

fn body(dir: &std::path::Path, db: &std::path::Path) -> String {
    format!(
        "[node]\nid = 1\ndata_dir = {data:?}\n[cores]\ncount = 1\nrecv_buffers = 64\n\
         [store]\nbackend = \"sqlite\"\npath = {db:?}\n\
         [services.player]\npersist = \"on_write\"\n",
        data = dir.join("data").display().to_string(),
        db = db.display().to_string(),
    )
}

#[test]
fn a_store_with_overwritten_table_pages_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("routerd.db");
    let text = body(dir.path(), &db);
    let node = ServeProcess::start(dir.path(), &text);
    for player in 1..=PLAYERS {
        let mut client = node.connect();
        client.login(player, 1);
    }
    assert!(node.stop().success(), "a clean stop");
    // Move every page out of the WAL into the file, so that no newer
    // page copy in the WAL hides the damage.
    {
        let connection = rusqlite::Connection::open(&db).expect("open the store file");
        connection
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            })
            .expect("checkpoint");
        let routes: i64 = connection
            .query_row("SELECT count(*) FROM routes", [], |row| row.get(0))
            .expect("routes");
        assert!(routes >= PLAYERS as i64, "{routes} routes");
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&db)
        .expect("store file");
    let length = file.seek(SeekFrom::End(0)).expect("length");
    let pages = length / PAGE_BYTES;
    assert!(pages >= 3, "the store has table pages ({length} bytes)");
    let mut header = [0u8; 100];
    file.seek(SeekFrom::Start(0)).expect("seek");
    file.read_exact(&mut header).expect("header");
    assert!(header.starts_with(b"SQLite format 3\0"));
    // Every page after page 1 becomes garbage.
    file.seek(SeekFrom::Start(PAGE_BYTES)).expect("seek");
    let garbage: Vec<u8> = (0..length - PAGE_BYTES)
        .map(|byte| (byte * 31 + 7) as u8)
        .collect();
    file.write_all(&garbage).expect("overwrite");
    file.sync_all().expect("sync");
    drop(file);

    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"));
    command
        .args(["serve", "--config"])
        .arg(dir.path().join("node.toml"));
    let exited = support::run_to_exit(command, Duration::from_secs(20));
    let Some((status, stderr)) = exited else {
        panic!("routerd started on a damaged store instead of refusing it");
    };
    let code = status.code().unwrap_or(-1);
    println!("the refused start said: {stderr}");
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&db.display().to_string()),
        "the message names the file: {stderr}"
    );
    assert!(
        stderr.contains("damaged") || stderr.contains("malformed") || stderr.contains("corrupt"),
        "the message says what SQLite found: {stderr}"
    );
}
