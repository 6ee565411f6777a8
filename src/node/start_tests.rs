//! The join's check of the store against the incarnation this node
//! remembers.

use super::*;
use crate::config::StoreConfig;
use crate::gateway_addresses::Transport;
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

fn reached_on(gateway: &str, admin: &str, tls: Option<&str>, cluster: &str) -> Reached {
    let gateway: SocketAddr = gateway.parse().unwrap();
    let mut gateway_addresses = GatewayAddresses::plain(gateway.to_string());
    if let Some(tls) = tls {
        gateway_addresses.set(Transport::Tls, tls);
    }
    Reached {
        gateway,
        admin: admin.parse().unwrap(),
        gateway_addresses,
        cluster: vec![cluster.parse().unwrap(); 2],
    }
}

/// A first node on `0.0.0.0` without `advertise` started alone and
/// advertised `0.0.0.0`, which the nodes that joined later dialed:
/// it is refused whenever a node of another machine may join (its
/// links are reached off loopback), and stays allowed on a node whose
/// links listen on loopback, as a single node's do by default.
#[test]
fn alone_an_unspecified_address_is_refused_unless_the_links_are_on_loopback() {
    let single = reached_on("0.0.0.0:7400", "0.0.0.0:9464", None, "127.0.0.1:7600");
    assert_eq!(single.unreachable_off_machine(), None);
    assert_eq!(
        single.unreachable(),
        Some(("gateway.advertise", "0.0.0.0:7400".parse().unwrap())),
        "beside other members it is still refused"
    );
    let links = reached_on("10.0.0.5:7400", "10.0.0.5:9464", None, "0.0.0.0:7600");
    assert_eq!(
        links.unreachable_off_machine(),
        Some(("cluster.advertise", "0.0.0.0:7600".parse().unwrap()))
    );
    let admin = reached_on("10.0.0.5:7400", "[::]:9464", None, "10.0.0.5:7600");
    assert_eq!(
        admin.unreachable_off_machine(),
        Some(("admin.advertise", "[::]:9464".parse().unwrap()))
    );
    let tls = reached_on(
        "10.0.0.5:7400",
        "10.0.0.5:9464",
        Some("0.0.0.0:7443"),
        "10.0.0.5:7600",
    );
    assert_eq!(
        tls.unreachable_off_machine(),
        Some(("gateway.advertise", "0.0.0.0:7443".parse().unwrap()))
    );
    let reachable = reached_on("10.0.0.5:7400", "10.0.0.5:9464", None, "10.0.0.5:7600");
    assert_eq!(reachable.unreachable_off_machine(), None);
    assert_eq!(reachable.unreachable(), None);
}
