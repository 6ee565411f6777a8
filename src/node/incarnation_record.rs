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

/// Before a join writes anything: a store with no row of node `node`
/// would give it incarnation 1, which its record in `data_dir` may say
/// is a store that never saw it. Checked before the join, not only after
/// (`check_and_record`): a join writes the node's row, and the next start
/// on the same store would take incarnation 2 from it and pass for a
/// store rolled back, so a restart policy turned the refusal into serving.
pub fn check_before_join(data_dir: &Path, node: u64, row_exists: bool) -> Result<(), RecordError> {
    if row_exists {
        return Ok(());
    }
    let (_, shown, remembered) = remembered(data_dir, node)?;
    match judge(remembered, 1) {
        Verdict::Forgotten { remembered } => Err(RecordError::Forgotten {
            node,
            remembered,
            given: 1,
            path: shown,
        }),
        Verdict::RolledBack { .. } | Verdict::Newer => Ok(()),
    }
}

/// Checks the incarnation `given` to node `node` against its record in
/// `data_dir` and records it. A record that cannot be written is logged,
/// not fatal: the node serves as it did before records existed.
pub fn check_and_record(data_dir: &Path, node: u64, given: u64) -> Result<(), RecordError> {
    let (path, shown, remembered) = remembered(data_dir, node)?;
    match judge(remembered, given) {
        Verdict::Forgotten { remembered } => {
            return Err(RecordError::Forgotten {
                node,
                remembered,
                given,
                path: shown,
            })
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
    let partial = path.with_extension("incarnation.partial");
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
}
