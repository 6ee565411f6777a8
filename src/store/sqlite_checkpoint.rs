//! The SQLite store's checkpointer: a thread with a connection of its own
//! that copies the WAL back into the database file, so that no commit does.
//!
//! Left to itself, SQLite checkpoints inside the COMMIT that takes the WAL
//! past 1000 pages: most often an object group commit, which still holds
//! the lanes' write gate while it copies up to ~4 MB into the file and
//! syncs it. A heartbeat waits behind it, and on a slow or busy disk that
//! is seconds: long enough for the node's lease to lapse over our own
//! housekeeping. So every connection runs with `wal_autocheckpoint = 0`,
//! each lane's WAL hook tells this thread how long the WAL is after each
//! of its commits, and past `CHECKPOINT_PAGES` this thread runs a PASSIVE
//! checkpoint. A passive checkpoint takes no write lock and waits for
//! nobody: the lanes commit on while it copies.
//!
//! SQLite starts the WAL over from its beginning only at a write that
//! begins with all of it copied, and a checkpoint beside the writes never
//! quite gets there: a write began, or committed, while it ran. So each
//! checkpoint ends with a catch-up: the object lane is held back for one
//! more passive checkpoint, which copies what was written meanwhile, and
//! its next write starts the WAL over. The catch-up runs only when that is
//! little (`CATCH_UP_PAGES_MAX`, about 1 MB) or the WAL is long
//! (`WAL_PAGES_HOLD`: then the object writes wait for the copy, as they
//! would have in their commit, rather than the WAL growing on). The
//! membership lane is never held: a heartbeat that commits during a
//! catch-up only puts the restart off to the next checkpoint.
//!
//! A checkpoint that fails is logged (a warning each `WARN_INTERVAL_MS` at
//! most, the others at debug) and tried again at the next commit past the
//! threshold, `RETRY_AFTER_MS` after the failure at the earliest. The WAL
//! grows meanwhile, without bound while they keep failing (a disk that
//! fails checkpoints fails commits soon after); a WAL past `WAL_PAGES_WARN`
//! is warned of the same way. A long WAL costs disk space, slower reads and
//! a longer recovery at the next open, never a write.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::hooks::Wal;
use rusqlite::Connection;

/// WAL pages past which a checkpoint runs: SQLite's own default.
pub(super) const CHECKPOINT_PAGES: u32 = 1000;

/// The most a catch-up copies while the object lane waits, in pages,
/// unless the WAL is past `WAL_PAGES_HOLD`; more, and another checkpoint
/// runs beside the writes first.
const CATCH_UP_PAGES_MAX: u32 = CHECKPOINT_PAGES / 4;

/// A WAL this long (~16 MB of 4 KiB pages) is caught up whatever that
/// costs the object lane: its writes outran the checkpoints beside them,
/// and now wait for them instead, as they would have in their commits.
const WAL_PAGES_HOLD: u32 = 4 * CHECKPOINT_PAGES;

/// A WAL this long (~80 MB) even after a catch-up is warned of: a reader
/// holds checkpoints back, or other processes' writes outrun them.
const WAL_PAGES_WARN: u32 = 20 * CHECKPOINT_PAGES;

/// After a failed checkpoint the next waits this long at least, so a disk
/// that fails every checkpoint is not asked at every commit.
const RETRY_AFTER_MS: u64 = 1000;

/// At most one warning of each kind this often; the others go to debug.
const WARN_INTERVAL_MS: u64 = 30_000;

/// What the lanes tell the checkpointer thread, which waits on it.
#[derive(Default)]
pub(super) struct Checkpoints {
    state: Mutex<State>,
    wake: Condvar,
    /// The WAL's length in pages after the last commit of either lane
    /// (the two lanes' may land out of order, by a commit's few pages).
    wal_pages: AtomicU32,
    /// Held by the object lane through each write transaction, and by the
    /// checkpointer through a catch-up.
    objects: Mutex<()>,
    /// The checkpointer waits for `objects`: the object lane, which would
    /// otherwise take it again at once, lets it have the next turn.
    catch_up_waiting: AtomicBool,
}

#[derive(Default)]
struct State {
    /// A commit left the WAL past the threshold since the last checkpoint
    /// began.
    due: bool,
    /// Lanes still serving: the thread ends with the last of them.
    lanes: usize,
    /// Tests hold checkpoints back to see what the commits alone do.
    #[cfg(test)]
    paused: bool,
}

impl State {
    fn paused(&self) -> bool {
        #[cfg(test)]
        if self.paused {
            return true;
        }
        false
    }
}

/// A lane's WAL hook on the checkpointer. The lane's worker owns it;
/// dropped as the lane ends, and the checkpointer ends with the last.
pub(super) struct LaneHook {
    checkpoints: Arc<Checkpoints>,
}

impl LaneHook {
    /// The object lane's turn for one write transaction: it waits while a
    /// catch-up runs.
    pub(super) fn write_turn(&self) -> MutexGuard<'_, ()> {
        // The checkpointer holds the flag only until it has the lock, which
        // the object lane does not hold here, so this ends at once.
        while self.checkpoints.catch_up_waiting.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        self.checkpoints.objects_turn()
    }
}

impl Drop for LaneHook {
    fn drop(&mut self) {
        self.checkpoints.lock().lanes -= 1;
        self.checkpoints.wake.notify_all();
    }
}

impl Checkpoints {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned state is still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn objects_turn(&self) -> MutexGuard<'_, ()> {
        // It guards no data.
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object lane held back for a catch-up, once its write
    /// transaction in progress, if any, has ended.
    fn catch_up_turn(&self) -> MutexGuard<'_, ()> {
        self.catch_up_waiting.store(true, Ordering::Release);
        let turn = self.objects_turn();
        self.catch_up_waiting.store(false, Ordering::Release);
        turn
    }

    /// Hooks a lane's `connection`: each of its commits says how long the
    /// WAL is, and one that leaves it past the threshold wakes the
    /// checkpointer. The hook runs inside the commit, so it only takes a
    /// lock that nobody holds for long.
    pub(super) fn hook(
        self: &Arc<Self>,
        connection: &mut Connection,
    ) -> Result<LaneHook, rusqlite::Error> {
        let checkpoints = self.clone();
        connection.wal_hook(Some(move |_: &mut Wal, pages: c_int| {
            let pages = u32::try_from(pages).unwrap_or(0);
            checkpoints.wal_pages.store(pages, Ordering::Release);
            if pages >= CHECKPOINT_PAGES {
                checkpoints.lock().due = true;
                checkpoints.wake.notify_all();
            }
            Ok(())
        }))?;
        self.lock().lanes += 1;
        Ok(LaneHook {
            checkpoints: self.clone(),
        })
    }

    /// Holds checkpoints back (`true`) or lets them run again.
    #[cfg(test)]
    pub(super) fn pause(&self, paused: bool) {
        self.lock().paused = paused;
        self.wake.notify_all();
    }

    /// Waits until a checkpoint is due and `not_before` has passed: `false`
    /// once every lane has ended.
    fn next(&self, not_before: Instant) -> bool {
        let mut state = self.lock();
        loop {
            if state.lanes == 0 {
                return false;
            }
            // A write that started the WAL over since (after a catch-up)
            // left nothing to do.
            if self.wal_pages.load(Ordering::Acquire) < CHECKPOINT_PAGES {
                state.due = false;
            }
            let now = Instant::now();
            if state.due && !state.paused() && now >= not_before {
                state.due = false;
                return true;
            }
            state = if state.due && now < not_before {
                let wait = self.wake.wait_timeout(state, not_before - now);
                wait.unwrap_or_else(PoisonError::into_inner).0
            } else {
                let wait = self.wake.wait(state);
                wait.unwrap_or_else(PoisonError::into_inner)
            };
        }
    }
}

/// Starts the checkpointer thread on `connection`, a connection of its
/// own to the store's file. It ends once every hooked lane has ended.
pub(super) fn spawn(checkpoints: Arc<Checkpoints>, connection: Connection) -> std::io::Result<()> {
    let checkpointer = Checkpointer {
        connection,
        checkpoints,
        failed: Warnings::default(),
        long: Warnings::default(),
    };
    std::thread::Builder::new()
        .name("store-sqlite-checkpoint".to_string())
        .spawn(move || checkpointer.run())?;
    Ok(())
}

struct Checkpointer {
    connection: Connection,
    checkpoints: Arc<Checkpoints>,
    /// Warnings of failed checkpoints.
    failed: Warnings,
    /// Warnings of a WAL past `WAL_PAGES_WARN`.
    long: Warnings,
}

impl Checkpointer {
    fn run(mut self) {
        let mut not_before = Instant::now();
        while self.checkpoints.next(not_before) {
            match self.checkpoint() {
                Ok(wal) => self.copied(wal),
                Err(error) => {
                    not_before = Instant::now() + Duration::from_millis(RETRY_AFTER_MS);
                    self.failed(&error);
                }
            }
        }
    }

    /// A checkpoint beside the lanes' writes, then the catch-up, with the
    /// object lane held back, of what they wrote meanwhile.
    fn checkpoint(&self) -> Result<Copied, rusqlite::Error> {
        let wal = passive(&self.connection)?;
        let _objects = self.checkpoints.catch_up_turn();
        // No object commit runs now: this is what the catch-up would copy
        // (less, when the WAL started over meanwhile).
        let pages = self.checkpoints.wal_pages.load(Ordering::Acquire);
        if pages.saturating_sub(wal.copied) > CATCH_UP_PAGES_MAX && pages < WAL_PAGES_HOLD {
            // The writes outran it: another runs beside them first.
            return Ok(wal);
        }
        passive(&self.connection)
    }

    fn copied(&mut self, wal: Copied) {
        if wal.pages < WAL_PAGES_WARN {
            return;
        }
        match self.long.due() {
            Some(suppressed) => tracing::warn!(
                pages = wal.pages,
                copied = wal.copied,
                suppressed,
                "the SQLite WAL is still long after a checkpoint: a reader holds checkpoints \
                 back, or the writes of other processes sharing the file outrun them"
            ),
            None => tracing::debug!(pages = wal.pages, copied = wal.copied, "SQLite WAL long"),
        }
    }

    fn failed(&mut self, error: &rusqlite::Error) {
        match self.failed.due() {
            Some(suppressed) => tracing::warn!(
                %error,
                suppressed,
                "a SQLite WAL checkpoint failed; the WAL grows until one succeeds (tried again \
                 at the next commit past {CHECKPOINT_PAGES} pages)"
            ),
            None => tracing::debug!(%error, "a SQLite WAL checkpoint failed"),
        }
    }
}

/// What a checkpoint left: the WAL's length and how much of it is in the
/// database file, in pages.
struct Copied {
    pages: u32,
    copied: u32,
}

/// Runs one PASSIVE checkpoint: it copies what no reader still needs,
/// without waiting for any lock. Another connection's checkpoint running
/// (SQLite's busy flag) is not a failure: that one copies.
fn passive(connection: &Connection) -> Result<Copied, rusqlite::Error> {
    let (_busy, pages, copied) =
        connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })?;
    // -1 when the file is not in WAL mode, which the store never leaves.
    Ok(Copied {
        pages: u32::try_from(pages).unwrap_or(0),
        copied: u32::try_from(copied).unwrap_or(0),
    })
}

/// One kind of warning, rate-limited: a line at warn level each
/// `WARN_INTERVAL_MS` at most, counting the ones it held back.
#[derive(Default)]
struct Warnings {
    last: Option<Instant>,
    suppressed: u64,
}

impl Warnings {
    /// `Some(lines held back since the last)` when a warning is due now;
    /// `None` (counted) when this one goes to debug.
    fn due(&mut self) -> Option<u64> {
        let interval = Duration::from_millis(WARN_INTERVAL_MS);
        if self.last.is_some_and(|last| last.elapsed() < interval) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(Instant::now());
        Some(std::mem::take(&mut self.suppressed))
    }
}
