//! The join's check of the store against the incarnation this node
//! remembers.

use super::*;
use crate::config::StoreConfig;
use crate::store::{open_memory, Fault};

/// Node 1 on a SQLite config (the memory store is never checked), its
/// data in `data_dir`; the store itself is a memory one, for its faults.
fn config(data_dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.node.id = 1;
    config.node.data_dir = data_dir.to_path_buf();
    config.store.backend = StoreBackend::Sqlite;
    config
}

fn reached() -> Reached {
    let loopback: SocketAddr = "127.0.0.1:7400".parse().unwrap();
    Reached {
        gateway: loopback,
        admin: "127.0.0.1:7401".parse().unwrap(),
        gateway_addresses: advertised_listeners(loopback, None, &[]),
        cluster: vec!["127.0.0.1:7402".parse().unwrap()],
    }
}

#[test]
fn a_store_that_never_saw_the_node_is_refused_at_every_start_though_a_read_failed() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    std::fs::write(incarnation_record::path(dir.path(), 1), "7\n").unwrap();
    let (store, faults) = open_memory(&StoreConfig::default());
    let registry = Registry::default();
    // The first read of the node's own row fails once.
    faults.inject(Fault::Fail, 1);
    for start in 0..2 {
        match join(&config, &store, &registry, &reached(), 1) {
            Err(NodeError::StoreForgot(error)) => {
                assert!(
                    error.to_string().contains("ran as incarnation 7"),
                    "{error}"
                )
            }
            Err(error) => panic!("start {start}: {error}"),
            Ok((_, joined)) => panic!(
                "start {start} serves incarnation {} from a store that never saw node 1",
                joined.incarnation
            ),
        }
    }
    assert_eq!(faults.pending(), 0);
    // Refused before the join: the store holds no row of node 1.
    let poll = futures_lite::future::block_on(store.poll_members(vec![NodeId(1)])).unwrap();
    assert!(poll.rows.is_empty(), "{:?}", poll.rows);
}

#[test]
fn a_store_that_never_answers_the_read_is_refused_before_the_join() {
    let (store, faults) = open_memory(&StoreConfig::default());
    faults.inject(Fault::Fail, 100);
    let error = own_row(&store, NodeId(1), Duration::from_millis(300)).unwrap_err();
    assert!(matches!(error, NodeError::OwnRowUnread { .. }), "{error}");
    assert!(error.to_string().contains("membership row"), "{error}");
}
