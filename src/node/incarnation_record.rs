//! What a node remembers of its last run: the incarnation the store gave
//! it, in `<node.data_dir>/node-<id>.incarnation`.
//!
//! A store never gives one node id an incarnation twice: a node's row is
//! kept (as a tombstone once it left), and each join takes the next one
//! (docs/cluster.md, "What the store must be"). So a join that gets
//! incarnation 1 when this node already ran as incarnation 7 is a store
//! that has never seen the node: another database (`store.url` or
//! `store.path` pointing elsewhere after an edit) or one that lost its
//! data. Serving from it would start a second cluster beside the first,
//! each holding its own copy of the same objects, and the objects' saved
//! state would look lost. The node refuses to start and says how to
//! proceed if the new store is meant.
//!
//! A join that gets an incarnation above 1 but not above the one
//! remembered is a store rolled back (a restored backup, a failover to an
//! asynchronous replica). docs/cluster.md allows a restore with every node
//! stopped, so that start goes on, with a warning, and the record follows
//! the store.
//!
//! The memory store forgets everything at each start by design: it is not
//! checked.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// What a join's incarnation says, against the one remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Later than the last run (or no run remembered): record it.
    Newer,
    /// The store has never seen this node, which ran as `remembered`.
    Forgotten { remembered: u64 },
    /// The store went back to before the last run, which was `remembered`.
    RolledBack { remembered: u64 },
}

/// Judges the incarnation `given` by a join, the last run's being
/// `remembered`.
pub fn judge(remembered: Option<u64>, given: u64) -> Verdict {
    match remembered {
        Some(remembered) if given <= remembered && given <= 1 => Verdict::Forgotten { remembered },
        Some(remembered) if given <= remembered => Verdict::RolledBack { remembered },
        _ => Verdict::Newer,
    }
}

/// Why a node does not start with the store it joined.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error(
        "refusing to start: node {node} last ran as incarnation {remembered} ({path}), and the \
         store has no record of it (it gave incarnation {given}): it is not the store this node \
         ran on, or it lost its data, and serving from it would keep a second copy of every \
         object beside the first cluster's. Check store.url or store.path; if the new store is \
         meant (a new cluster), remove {path}"
    )]
    Forgotten {
        node: u64,
        remembered: u64,
        given: u64,
        path: String,
    },
    #[error("refusing to start: cannot read {path}: {cause} (remove it if it is not this node's)")]
    Unreadable { path: String, cause: String },
}

/// The record of node `node` in `data_dir`.
pub fn path(data_dir: &Path, node: u64) -> PathBuf {
    data_dir.join(format!("node-{node}.incarnation"))
}

/// Where a refused start notes the incarnation the store that forgot
/// node `node` gave it (see `check_before_join`).
fn refused_path(data_dir: &Path, node: u64) -> PathBuf {
    data_dir.join(format!("node-{node}.incarnation-refused"))
}

/// Before a join writes anything, with the incarnation of the node's row
/// as the store holds it (`None`: no row). A store with no row of node
/// `node` would give it incarnation 1, which its record in `data_dir` may
/// say is a store that never saw it. Checked before the join, not only
/// after (`check_and_record`): a join writes the node's row, and the next
/// start on the same store would take incarnation 2 from it and pass for
/// a store rolled back, so a restart policy turned the refusal into
/// serving. For the same reason a row that is only what a refused start
/// left (its incarnation is the one noted at the refusal) is refused too.
pub fn check_before_join(data_dir: &Path, node: u64, row: Option<u64>) -> Result<(), RecordError> {
    let (_, shown, remembered) = remembered(data_dir, node)?;
    let Some(remembered) = remembered else {
        return Ok(());
    };
    // What the store gave this node: nothing yet, or only the refused
    // start's incarnation; either way what a join would get is judged as
    // a first one.
    let given = match row {
        None => 1,
        Some(row) if refused(data_dir, node) == Some(row) => row,
        Some(_) => return Ok(()),
    };
    match judge(Some(remembered), 1) {
        Verdict::Forgotten { remembered } => Err(RecordError::Forgotten {
            node,
            remembered,
            given,
            path: shown,
        }),
        Verdict::RolledBack { .. } | Verdict::Newer => Ok(()),
    }
}

/// The incarnation noted by a start refused after its join, if any (an
/// unreadable note is none: the record itself still judges).
fn refused(data_dir: &Path, node: u64) -> Option<u64> {
    read(&refused_path(data_dir, node)).ok().flatten()
}

/// Checks the incarnation `given` to node `node` against its record in
/// `data_dir` and records it. A record that cannot be written is logged,
/// not fatal: the node serves as it did before records existed.
pub fn check_and_record(data_dir: &Path, node: u64, given: u64) -> Result<(), RecordError> {
    let (path, shown, remembered) = remembered(data_dir, node)?;
    match judge(remembered, given) {
        Verdict::Forgotten { remembered } => {
            // The join wrote this node's row, which the refused start
            // leaves as `left`: noted, so the next start reads that row
            // as no history (`check_before_join`) rather than taking the
            // next incarnation from it for a rollback.
            let noted = refused_path(data_dir, node);
            if let Err(error) = write(data_dir, &noted, given) {
                tracing::warn!(path = %noted.display(), %error, "cannot note the refused start");
            }
            return Err(RecordError::Forgotten {
                node,
                remembered,
                given,
                path: shown,
            });
        }
        Verdict::RolledBack { remembered } => tracing::warn!(
            node,
            remembered,
            given,
            "the store went back to before this node's last run (a restored backup, or a \
             failover to an asynchronous replica): what was acknowledged after it is lost, and \
             is safe only if every node was stopped (docs/cluster.md)"
        ),
        Verdict::Newer => {}
    }
    // A start that serves ends what a refused one noted.
    match std::fs::remove_file(refused_path(data_dir, node)) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(%error, "cannot remove the note of a refused start")
        }
        _ => {}
    }
    if let Err(error) = write(data_dir, &path, given) {
        tracing::warn!(
            path = %shown,
            %error,
            "cannot record this node's incarnation: a store that forgot the node will not be \
             noticed at the next start"
        );
    }
    Ok(())
}

/// Node `node`'s record in `data_dir`: its path, as shown in errors, and
/// the incarnation it remembers (`None` without a record).
fn remembered(data_dir: &Path, node: u64) -> Result<(PathBuf, String, Option<u64>), RecordError> {
    let path = path(data_dir, node);
    let shown = path.display().to_string();
    let remembered = read(&path).map_err(|cause| RecordError::Unreadable {
        path: shown.clone(),
        cause,
    })?;
    Ok((path, shown, remembered))
}

/// The remembered incarnation, `None` without a record.
fn read(path: &Path) -> Result<Option<u64>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{:?} is not an incarnation number", text.trim())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error.to_string()),
    }
}

/// Replaces the record whole: written beside it, synced, renamed over it
/// and the directory synced, so a crash leaves the old record or the new.
fn write(data_dir: &Path, path: &Path, incarnation: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(data_dir)?;
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let mut file = std::fs::File::create(&partial)?;
    writeln!(file, "{incarnation}")?;
    file.sync_all()?;
    std::fs::rename(&partial, path)?;
    std::fs::File::open(data_dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_is_judged_against_the_last_run() {
        assert_eq!(judge(None, 1), Verdict::Newer);
        assert_eq!(judge(None, 9), Verdict::Newer);
        assert_eq!(judge(Some(7), 8), Verdict::Newer);
        // Incarnation 1 again: the store never saw this node.
        assert_eq!(judge(Some(7), 1), Verdict::Forgotten { remembered: 7 });
        assert_eq!(judge(Some(1), 1), Verdict::Forgotten { remembered: 1 });
        // Above 1 but not past the last run: rolled back.
        assert_eq!(judge(Some(7), 5), Verdict::RolledBack { remembered: 7 });
        assert_eq!(judge(Some(7), 7), Verdict::RolledBack { remembered: 7 });
    }

    #[test]
    fn the_record_follows_the_store_and_refuses_one_that_forgot() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        check_and_record(&data, 3, 1).unwrap();
        check_and_record(&data, 3, 2).unwrap();
        assert_eq!(read(&path(&data, 3)).unwrap(), Some(2));
        let error = check_and_record(&data, 3, 1).unwrap_err();
        assert!(matches!(
            error,
            RecordError::Forgotten {
                remembered: 2,
                given: 1,
                ..
            }
        ));
        assert!(error.to_string().contains("node-3.incarnation"), "{error}");
        // Refused, the record is kept; another node's is its own.
        assert_eq!(read(&path(&data, 3)).unwrap(), Some(2));
        check_and_record(&data, 4, 1).unwrap();
        // A rollback goes on and is recorded.
        check_and_record(&data, 3, 5).unwrap();
        check_and_record(&data, 3, 4).unwrap();
        assert_eq!(read(&path(&data, 3)).unwrap(), Some(4));
        std::fs::write(path(&data, 3), "seven\n").unwrap();
        assert!(matches!(
            check_and_record(&data, 3, 9),
            Err(RecordError::Unreadable { .. })
        ));
    }

    #[test]
    fn the_row_a_refused_start_left_is_refused_again() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        check_and_record(&data, 3, 7).unwrap();
        check_before_join(&data, 3, Some(7)).unwrap();
        check_before_join(&data, 3, None).unwrap_err();
        // A join took incarnation 1 all the same, refused after it: the
        // row it leaves (`left`, incarnation 1) is no history of node 3.
        check_and_record(&data, 3, 1).unwrap_err();
        assert!(matches!(
            check_before_join(&data, 3, Some(1)),
            Err(RecordError::Forgotten { remembered: 7, .. })
        ));
        // The own store (a higher row) serves, and the note goes.
        check_before_join(&data, 3, Some(7)).unwrap();
        check_and_record(&data, 3, 8).unwrap();
        assert!(!refused_path(&data, 3).exists());
        check_before_join(&data, 3, Some(1)).unwrap();
        // A removed record (a new store meant) is not refused by the note.
        check_and_record(&data, 4, 9).unwrap();
        check_and_record(&data, 4, 1).unwrap_err();
        std::fs::remove_file(path(&data, 4)).unwrap();
        check_before_join(&data, 4, Some(1)).unwrap();
        check_and_record(&data, 4, 2).unwrap();
        assert_eq!(read(&path(&data, 4)).unwrap(), Some(2));
    }
}
