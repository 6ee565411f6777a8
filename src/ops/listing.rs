//! Listings for the admin endpoint and the console: a node's objects of one
//! type and its sessions, a page at a time.
//!
//! Objects and sessions live on the cores, so a listing asks every core for
//! its first `limit` rows above the cursor (`after`, an object or session
//! id), merges them and keeps the first `limit`: a page costs each core one
//! walk of what it holds and never a copy of all of it, and the admin
//! thread never holds more than `cores x limit` rows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_channel::oneshot;
use serde_json::{json, Value};

use super::{Command, Ops, Unreached};
use crate::gateway::GatewayHandle;
use crate::router::driver::RouterDriver;

/// Rows a page holds at most; a caller asking for more is refused.
pub const PAGE_LIMIT_MAX: usize = 500;
/// Rows a page holds when the caller does not say.
pub const PAGE_LIMIT_DEFAULT: usize = 100;
/// Listings a node runs at once; past them a listing is answered busy.
pub const LISTINGS_AT_ONCE_MAX: usize = 4;

/// How long the admin side waits for each core's part of a listing.
pub(super) const CORE_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Where a page starts and how long it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageAsk {
    /// Only rows whose id is above this one; `None`: from the first.
    pub after: Option<u64>,
    /// At most this many rows, 1 to [`PAGE_LIMIT_MAX`].
    pub limit: usize,
}

impl PageAsk {
    /// What each core is asked for: one row past the page, so that the
    /// merge knows whether another page follows.
    fn one_more(self) -> PageAsk {
        PageAsk {
            after: self.after,
            limit: self.limit + 1,
        }
    }

    /// Reads `after=` and `limit=` (and the listing's own keys, which
    /// `other` takes: `true` when it knew the key) from a query string.
    pub fn parse(
        query: Option<&str>,
        mut other: impl FnMut(&str, &str) -> Result<bool, String>,
    ) -> Result<PageAsk, String> {
        let mut page = PageAsk {
            after: None,
            limit: PAGE_LIMIT_DEFAULT,
        };
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "after" => {
                    let after = value
                        .parse()
                        .map_err(|_| "after must be an id (a number)".to_string())?;
                    page.after = Some(after);
                }
                "limit" => match value.parse::<usize>() {
                    Ok(limit) if (1..=PAGE_LIMIT_MAX).contains(&limit) => page.limit = limit,
                    _ => return Err(format!("limit must be 1 to {PAGE_LIMIT_MAX}")),
                },
                _ => {
                    if !other(key, value)? {
                        return Err(format!("unknown query key {key:?}"));
                    }
                }
            }
        }
        Ok(page)
    }
}

/// One object of a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectRow {
    pub object_id: u64,
    pub zone_id: u32,
    pub core: usize,
    /// This node may change it; `false`: a route cache (it knows the
    /// owner) or a copy held aside by a fence.
    pub writable: bool,
    pub owner_node: u64,
    pub route_version: u64,
    pub cas_version: Option<u64>,
}

/// One session of a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub session_id: u64,
    pub core: usize,
    /// 0 before a login.
    pub player_id: u64,
    pub session_epoch: u32,
    pub inflight: usize,
}

/// A core's part of an objects listing (run on the core).
pub(super) fn core_objects(
    router: &RouterDriver,
    core: usize,
    type_id: u32,
    page: PageAsk,
) -> Vec<ObjectRow> {
    router
        .objects_page(type_id, page.after, page.limit)
        .into_iter()
        .map(|view| ObjectRow {
            object_id: view.key.object_id,
            zone_id: view.key.zone_id,
            core,
            writable: view.writable,
            owner_node: view.owner_node.0,
            route_version: view.route_version.0,
            cas_version: view.cas_version.map(|version| version.0),
        })
        .collect()
}

/// A core's part of a sessions listing (run on the core).
pub(super) fn core_sessions(
    gateway: &GatewayHandle,
    core: usize,
    player: Option<u64>,
    page: PageAsk,
) -> Vec<SessionRow> {
    gateway
        .sessions_page(player, page.after, page.limit)
        .into_iter()
        .map(|row| SessionRow {
            session_id: row.session_id,
            core,
            player_id: row.player_id,
            session_epoch: row.session_epoch,
            inflight: row.inflight,
        })
        .collect()
}

/// Why a listing has no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListRefused {
    /// A core's command queue was full, or it did not answer in time.
    Busy,
    /// The node is stopping.
    Stopped,
}

impl From<Unreached> for ListRefused {
    fn from(unreached: Unreached) -> ListRefused {
        match unreached {
            Unreached::Busy => ListRefused::Busy,
            Unreached::Stopped => ListRefused::Stopped,
        }
    }
}

/// The first `limit` rows of the cores' parts, by id, and the cursor of
/// the next page (`None` when this one is the last). Each part must hold
/// up to `limit + 1` rows (see [`PageAsk::one_more`]): a core with exactly
/// `limit` rows left would otherwise look like the last page.
fn merge<T>(parts: Vec<Vec<T>>, limit: usize, id: impl Fn(&T) -> u64) -> (Vec<T>, Option<u64>) {
    let mut rows: Vec<T> = parts.into_iter().flatten().collect();
    rows.sort_unstable_by_key(&id);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = if more { rows.last().map(&id) } else { None };
    (rows, next)
}

/// A listing under way, counted against `LISTINGS_AT_ONCE_MAX` until it
/// drops.
struct ListingTurn<'a>(&'a AtomicUsize);

impl<'a> ListingTurn<'a> {
    fn take(listings: &'a AtomicUsize) -> Result<ListingTurn<'a>, ListRefused> {
        listings
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < LISTINGS_AT_ONCE_MAX).then_some(running + 1)
            })
            .map(|_| ListingTurn(listings))
            .map_err(|_| ListRefused::Busy)
    }
}

impl Drop for ListingTurn<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Ops {
    /// A page of this node's objects of `type_id`, as JSON.
    pub async fn list_objects(&self, type_id: u32, page: PageAsk) -> Result<Value, ListRefused> {
        let _turn = ListingTurn::take(&self.0.listings)?;
        let parts = self
            .ask_every_core(
                |reply: oneshot::Sender<Vec<ObjectRow>>| Command::ListObjects {
                    page: page.one_more(),
                    type_id,
                    reply,
                },
            )
            .await?;
        let (rows, next) = merge(parts, page.limit, |row| row.object_id);
        let objects: Vec<Value> = rows
            .iter()
            .map(|row| {
                json!({
                    "id": row.object_id,
                    "zone_id": row.zone_id,
                    "core": row.core,
                    "writable": row.writable,
                    "owner": row.owner_node,
                    "route_version": row.route_version,
                    "cas_version": row.cas_version,
                })
            })
            .collect();
        Ok(json!({
            "node_id": self.0.view.me().0,
            "type_id": type_id,
            "objects": objects,
            "next_after": next,
        }))
    }

    /// Each core's session count and a page of this node's sessions (of
    /// `player` only, if given), as JSON.
    pub async fn list_sessions(
        &self,
        player: Option<u64>,
        page: PageAsk,
    ) -> Result<Value, ListRefused> {
        let _turn = ListingTurn::take(&self.0.listings)?;
        let parts = self
            .ask_every_core(|reply: oneshot::Sender<(usize, Vec<SessionRow>)>| {
                Command::ListSessions {
                    page: page.one_more(),
                    player,
                    reply,
                }
            })
            .await?;
        let cores: Vec<Value> = parts
            .iter()
            .enumerate()
            .map(|(core, (count, _))| json!({ "core": core, "sessions": count }))
            .collect();
        let total: usize = parts.iter().map(|(count, _)| count).sum();
        let rows = parts.into_iter().map(|(_, rows)| rows).collect();
        let (rows, next) = merge(rows, page.limit, |row| row.session_id);
        let sessions: Vec<Value> = rows
            .iter()
            .map(|row| {
                json!({
                    "session_id": row.session_id,
                    "core": row.core,
                    "player_id": row.player_id,
                    "session_epoch": row.session_epoch,
                    "inflight": row.inflight,
                })
            })
            .collect();
        Ok(json!({
            "node_id": self.0.view.me().0,
            "total": total,
            "cores": cores,
            "sessions": sessions,
            "next_after": next,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_asked_within_its_bounds() {
        let none = |_: &str, _: &str| Ok(false);
        assert_eq!(
            PageAsk::parse(None, none),
            Ok(PageAsk {
                after: None,
                limit: PAGE_LIMIT_DEFAULT
            })
        );
        let max = format!("limit={PAGE_LIMIT_MAX}&after=7");
        assert_eq!(
            PageAsk::parse(Some(&max), none),
            Ok(PageAsk {
                after: Some(7),
                limit: PAGE_LIMIT_MAX
            })
        );
        let over = format!("limit={}", PAGE_LIMIT_MAX + 1);
        assert!(PageAsk::parse(Some(&over), none).is_err());
        assert!(PageAsk::parse(Some("limit=0"), none).is_err());
        assert!(PageAsk::parse(Some("after=x"), none).is_err());
        assert!(PageAsk::parse(Some("what=1"), none).is_err());
        let mut player = None;
        let page = PageAsk::parse(Some("player=9&limit=2"), |key, value| {
            player = value.parse::<u64>().ok();
            Ok(key == "player")
        });
        assert_eq!(page.unwrap().limit, 2);
        assert_eq!(player, Some(9));
    }

    #[test]
    fn at_most_so_many_listings_run_at_once() {
        let listings = AtomicUsize::new(0);
        let turns: Vec<_> = (0..LISTINGS_AT_ONCE_MAX)
            .map(|_| ListingTurn::take(&listings).expect("a turn"))
            .collect();
        assert_eq!(ListingTurn::take(&listings).err(), Some(ListRefused::Busy));
        drop(turns);
        assert_eq!(listings.load(Ordering::Acquire), 0);
        assert!(ListingTurn::take(&listings).is_ok());
    }

    #[test]
    fn pages_merge_in_id_order_and_say_where_the_next_starts() {
        let (rows, next) = merge(vec![vec![5, 9], vec![1, 7, 8]], 3, |id| *id);
        assert_eq!(rows, [1, 5, 7]);
        assert_eq!(next, Some(7));
        let (rows, next) = merge(vec![vec![5], vec![1]], 3, |id| *id);
        assert_eq!(rows, [1, 5]);
        assert_eq!(next, None);
        // One core holds the page and one more: another page follows.
        let (rows, next) = merge(vec![vec![1, 2, 3], vec![]], 2, |id| *id);
        assert_eq!(rows, [1, 2]);
        assert_eq!(next, Some(2));
    }
}
