//! The primitives that other threads touch (a remote wake, the mesh
//! signal, a task's scheduled flag): std's, or loom's under `--cfg loom`,
//! whose model checker then runs the loom tests through every interleaving
//! and every ordering the memory model allows. Run them with
//! `RUSTFLAGS="--cfg loom" cargo test -p shards --lib loom_`.
//!
//! Loom models `SeqCst` loads and stores as `AcqRel` (weaker than the real
//! thing) but `SeqCst` fences exactly, so the code here relies on
//! read-modify-writes or fences, never on a `SeqCst` store followed by a
//! load of another variable: what loom passes then holds on hardware.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
