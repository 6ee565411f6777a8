//! A node's hottest objects for the admin endpoint (`GET /hot-objects`):
//! each core's space-saving counter (see `router::hot`) read at once, the
//! rows of all cores by requests. A key is counted on the core its
//! requests enter (the key's core), so the cores' rows name distinct keys.

use futures_channel::oneshot;
use serde_json::{json, Value};

use super::listing::ListRefused;
use super::{Command, Ops};
use crate::router::HotObject;

impl Ops {
    /// The node's hottest objects, most requested first, as JSON: each with
    /// its requests, the bound on how many of them were another key's
    /// (`error`), its core, and the time the counts cover.
    pub async fn hot_objects(&self) -> Result<Value, ListRefused> {
        let parts = self
            .ask_every_core(
                |reply: oneshot::Sender<(Vec<HotObject>, u64)>| Command::HotObjects { reply },
            )
            .await?;
        let covered_ms = parts.iter().map(|(_, covered)| *covered).max().unwrap_or(0);
        let mut rows: Vec<(usize, HotObject)> = parts
            .into_iter()
            .enumerate()
            .flat_map(|(core, (hot, _))| hot.into_iter().map(move |row| (core, row)))
            .collect();
        rows.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then(a.1.key.cmp(&b.1.key)));
        let objects: Vec<Value> = rows
            .iter()
            .map(|(core, row)| {
                json!({
                    "type_id": row.key.type_id,
                    "zone_id": row.key.zone_id,
                    "id": row.key.object_id,
                    "core": core,
                    "requests": row.requests,
                    "error": row.error,
                })
            })
            .collect();
        Ok(json!({
            "node_id": self.0.view.me().0,
            "covered_ms": covered_ms,
            "objects": objects,
        }))
    }
}
