//! A router core's store operations performed on the node's store handle:
//! each starts at once and its reply comes back as a future.

use crate::router::types::{StoreFailure, StoreOp, StoreReply};
use crate::store::{LoadError, Store, WriteError, WriteOutcome};

/// Starts `op` at once (a full store queue answers at once) and returns its
/// reply's future.
pub(super) fn perform_store_op(
    store: Store,
    op: StoreOp,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = StoreReply>>> {
    match op {
        StoreOp::Load(key) => {
            let load = store.load(key);
            Box::pin(async move {
                match load.await {
                    Ok(record) => StoreReply::Loaded(record),
                    Err(LoadError::Overloaded) => StoreReply::Failed(StoreFailure::Busy),
                    Err(_) => StoreReply::Failed(StoreFailure::Failed),
                }
            })
        }
        StoreOp::Write(mut write) => {
            write.save_timepoint_ms = unix_now_ms();
            let key = write.key;
            let written = store.write(write);
            Box::pin(async move {
                match written.await {
                    Ok(outcome) => StoreReply::Written(outcome),
                    Err(error) => {
                        if matches!(error, WriteError::StateTooLarge { .. }) {
                            // The store counts it (`too_large`) and logs it
                            // at most every 5 s without the object; said
                            // here, at each retry, with the object's key.
                            tracing::warn!(
                                object_type = key.type_id,
                                zone = key.zone_id,
                                object = key.object_id,
                                %error,
                                "an object's state is too large to save: its changes stay \
                                 unsaved until it shrinks"
                            );
                        }
                        StoreReply::Failed(write_failure(&error))
                    }
                }
            })
        }
        StoreOp::WriteBatch(mut writes) => {
            let now = unix_now_ms();
            for write in &mut writes {
                write.save_timepoint_ms = now;
            }
            let len = writes.len();
            let written = store.write_batch(writes);
            Box::pin(async move {
                match written.await {
                    Ok(outcomes) if outcomes.len() == len => StoreReply::WrittenBatch(outcomes),
                    // A short answer is a backend fault; the safe reading of
                    // every write in it is "unknown".
                    Ok(_) => StoreReply::WrittenBatch(vec![WriteOutcome::Indeterminate; len]),
                    Err(error) => StoreReply::Failed(write_failure(&error)),
                }
            })
        }
    }
}

/// The record's save time is for operators reading the store (`GET
/// /objects/...`): wall-clock unix milliseconds, stamped here because the
/// state machine runs on its monotonic clock. No node decides anything by
/// it: two nodes' wall clocks may disagree.
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// Every `WriteError` means the write did not happen (a write that may
/// have happened is `WriteOutcome::Indeterminate`), so the router may retry.
fn write_failure(error: &WriteError) -> StoreFailure {
    match error {
        WriteError::Overloaded => StoreFailure::Busy,
        _ => StoreFailure::Failed,
    }
}
