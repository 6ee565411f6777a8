//! The time budget of a script's call (or a file's top level while it
//! loads): Luau's interrupt, at its safepoints, raises an overrun in the
//! script once the call has run past its budget.

use std::cell::Cell;
use std::ffi::c_int;
use std::time::{Duration, Instant};

use mlua::ffi::{self, lua_State};

use super::value;

/// The words of a budget overrun, raised inside the script.
const OVERRUN: &[u8] = b"the call ran past its budget";

/// Safepoints between two looks at the clock: a look costs as much as a
/// small handler's own work, and a few safepoints are a few loop
/// iterations or calls.
const SAFEPOINTS_PER_LOOK: u32 = 8;

/// The budget of the call running on this thread now (a thread runs one
/// VM call at a time: its core's, or a loader's).
///
/// The clock starts at the call's first look, not at its start: a call
/// that meets fewer safepoints than `SAFEPOINTS_PER_LOOK` (most handlers)
/// never reads the clock, and the few safepoints before the first look
/// are the same slack every later look already has.
struct Budget {
    /// The time the call may run, while one runs.
    armed: Cell<Option<Duration>>,
    /// When the budget ends, from the call's first look at the clock.
    deadline: Cell<Option<Instant>>,
    /// Safepoints met since the call started.
    safepoints: Cell<u32>,
    /// Sticky once past the deadline: every later interrupt fails again,
    /// so a script's own `pcall` cannot swallow the overrun and go on.
    exceeded: Cell<bool>,
}

thread_local! {
    static BUDGET: Budget = const {
        Budget {
            armed: Cell::new(None),
            deadline: Cell::new(None),
            safepoints: Cell::new(0),
            exceeded: Cell::new(false),
        }
    };
}

/// Luau calls this at its safepoints (calls, returns, loop back edges):
/// past the deadline it raises the overrun in the script. It looks at the
/// clock at every `SAFEPOINTS_PER_LOOK`th.
pub(super) unsafe extern "C-unwind" fn interrupt(state: *mut lua_State, gc: c_int) {
    // SAFETY: Luau calls this with its live state while a script runs, so
    // inside a protected call, which catches the error raised here.
    unsafe {
        // A garbage collector step is not a place to raise an error.
        if gc >= 0 {
            return;
        }
        let past = BUDGET.with(|budget| {
            let Some(armed) = budget.armed.get() else {
                return false;
            };
            if budget.exceeded.get() {
                return true;
            }
            let safepoints = budget.safepoints.get().wrapping_add(1);
            budget.safepoints.set(safepoints);
            if safepoints % SAFEPOINTS_PER_LOOK != 0 {
                return false;
            }
            let now = Instant::now();
            let Some(deadline) = budget.deadline.get() else {
                budget.deadline.set(Some(now + armed));
                return false;
            };
            budget.exceeded.set(now >= deadline);
            budget.exceeded.get()
        });
        if past {
            // A safepoint promises no free slot on the stack.
            ffi::lua_rawcheckstack(state, 1);
            value::push_string(state, OVERRUN);
            // Nothing of this frame needs dropping: the error unwinds it.
            ffi::lua_error(state);
        }
    }
}

/// Starts a budget of `budget` for the call about to run on this thread.
pub(super) fn arm(budget: Duration) {
    BUDGET.with(|now| {
        now.exceeded.set(false);
        now.safepoints.set(0);
        now.deadline.set(None);
        now.armed.set(Some(budget));
    });
}

/// Ends the budget `arm` set: whether the call ran past it.
pub(super) fn disarm() -> bool {
    BUDGET.with(|now| {
        now.armed.set(None);
        now.exceeded.replace(false)
    })
}
