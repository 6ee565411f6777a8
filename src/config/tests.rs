//! The configuration's tests: keys, defaults, overrides, validation, and
//! the shipped tuning profiles.

use std::path::Path;

use super::load::RENAMED_KEYS;
use super::*;

#[test]
fn unknown_key_is_an_error_naming_it() {
    let error = Config::from_toml("[gateway]\nmax_inflihgt = 3\n").unwrap_err();
    assert!(error.contains("max_inflihgt"), "{error}");
    let error = Config::from_toml("[gatewya]\n").unwrap_err();
    assert!(error.contains("gatewya"), "{error}");
}

#[test]
fn each_listener_has_a_body_codec_and_a_bad_one_is_refused_by_name() {
    let config = Config::from_toml(
        "[gateway]\nbody_codec = \"msgpack\"\nwebsocket_body_codec = \"msgpack\"\n",
    )
    .unwrap();
    assert_eq!(config.gateway.body_codec, BodyCodec::Msgpack);
    assert_eq!(config.gateway.tls_body_codec, BodyCodec::None);
    assert_eq!(config.gateway.websocket_body_codec, BodyCodec::Msgpack);
    assert_eq!(Config::default().gateway.body_codec, BodyCodec::None);
    let error = Config::from_toml("[gateway]\ntls_body_codec = \"xml\"\n").unwrap_err();
    assert!(error.contains("tls_body_codec"), "{error}");
    assert!(error.contains("`none` or `msgpack`"), "{error}");
}

#[test]
fn defaults_are_the_seed_values() {
    let config = Config::default();
    assert_eq!(config.router.cache_update_interval_ms, 1_800_000);
    assert_eq!(config.router.cache_free_timeout_ms, 600_000);
    assert_eq!(config.router.object_free_timeout_ms, 1_500_000);
    assert_eq!(config.router.object_save_interval_ms, 600_000);
    assert_eq!(config.router.cache_retry_interval_ms, 256);
    assert_eq!(config.router.object_retry_interval_ms, 256);
    assert_eq!(config.router.pull_attempts_max, 3);
    assert_eq!(config.router.forward_hops_max, 16);
    assert_eq!(config.gateway.body_max_bytes, 65536);
    assert_eq!(config.gateway.inflight_max, 1024);
    assert_eq!(config.gateway.request_timeout_ms, 10_000);
    assert_eq!(config.gateway.idle_timeout_ms, 60_000);
    assert_eq!(config.services.player.persist, Persist::Interval);
    assert_eq!(config.auth.duplicate_login, DuplicateLogin::KickOld);
    config.validate().unwrap();
}

#[test]
fn the_admins_allowed_hosts_and_origins_are_names_and_origins() {
    let mut config = Config::default();
    config.admin.allowed_hosts = vec!["ops.example.com".into(), "*".into()];
    config.admin.allowed_origins = vec!["https://ops.example.com".into(), "*".into()];
    config.validate().unwrap();
    for (hosts, origins) in [
        (vec!["http://ops.example.com"], vec![]),
        (vec![""], vec![]),
        (vec![], vec!["ops.example.com"]),
        (vec![], vec!["https://ops.example.com/console"]),
        (vec![], vec!["https://"]),
    ] {
        config.admin.allowed_hosts = hosts.iter().map(|host| host.to_string()).collect();
        config.admin.allowed_origins = origins.iter().map(|origin| origin.to_string()).collect();
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("admin.allowed_"), "{error}");
    }
}

#[test]
fn a_connections_receive_buffers_are_bounded_by_the_ring() {
    let runtime = shards::RuntimeConfig::new(shards::CorePlacement::Count(1));
    let mut config = Config::default();
    assert_eq!(
        config.cores.recv_buffers_per_conn_max,
        runtime.recv_buffers_per_conn_max
    );
    for refused in [0, u32::from(config.cores.recv_buffers) + 1] {
        config.cores.recv_buffers_per_conn_max = refused;
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("cores.recv_buffers_per_conn_max"), "{error}");
    }
    config.cores.recv_buffers_per_conn_max = u32::from(config.cores.recv_buffers);
    config.validate().unwrap();
}

#[test]
fn effective_config_round_trips_but_for_its_secrets() {
    let mut config = Config::default();
    config.auth.secret = Secret::new("hunter2-but-longer");
    let text = config.to_toml();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains(MASK), "{text}");
    let mut parsed = Config::from_toml(&text).unwrap();
    // Read back, the mask is refused rather than used as a key.
    assert_eq!(
        parsed.check_secrets(),
        Err(SecretError::Masked { key: "auth.secret" })
    );
    parsed.auth.secret = config.auth.secret.clone();
    parsed.cluster.secret = config.cluster.secret.clone();
    assert_eq!(parsed, config);
    assert!(!format!("{config:?}").contains("hunter2"));
}

#[test]
fn the_development_secret_is_refused_on_a_public_listener() {
    let mut config = Config::default();
    config.gateway.listen = "0.0.0.0:7400".parse().unwrap();
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("auth.secret"), "{error}");
    assert!(error.contains("ROUTERD_AUTH_SECRET"), "{error}");
    assert!(error.contains("gateway.listen"), "{error}");
    config.auth.secret = Secret::new("an operator's own secret");
    // Links on loopback: the cluster's development secret guards
    // nothing other machines reach.
    config.validate().unwrap();
    // The cluster secret obeys the same rule, named by its own key,
    // for the link listener and for the address advertised.
    config.cluster.listen = "10.1.2.3:7600".parse().unwrap();
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("cluster.secret"), "{error}");
    assert!(error.contains("ROUTERD_CLUSTER_SECRET"), "{error}");
    assert!(error.contains("cluster.listen"), "{error}");
    config.cluster.listen = "127.0.0.1:7600".parse().unwrap();
    config.cluster.advertise = Some("10.1.2.3:7600".parse().unwrap());
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("cluster.advertise"), "{error}");
    config.cluster.secret = Secret::new("the cluster's own secret");
    config.validate().unwrap();
}

#[test]
fn issue_keys_parse() {
    let text = r#"
        [node]
        id = 3
        data_dir = "/tmp/x"
        [cores]
        cpus = [0, 1]
        [gateway]
        listen = "127.0.0.1:7500"
        body_max_bytes = 1024
        [auth]
        secret = "s"
        duplicate_login = "multi"
        [store]
        backend = "memory"
        [router]
        pull_attempts_max = 5
        [services.player]
        persist = "on_write"
    "#;
    let config = Config::from_toml(text).unwrap();
    config.validate().unwrap();
    assert_eq!(config.node.id, 3);
    assert_eq!(config.cores.cpus, Some(vec![0, 1]));
    assert_eq!(config.auth.duplicate_login, DuplicateLogin::Multi);
    assert_eq!(config.store.backend, StoreBackend::Memory);
    assert_eq!(config.services.player.persist, Persist::OnWrite);
    assert_eq!(config.router.pull_attempts_max, 5);
}

#[test]
fn relations_are_checked() {
    let mut config = Config::default();
    config.node.id = 0;
    assert!(config.validate().is_err());
    config.node.id = crate::config::NODE_ID_MAX;
    assert!(config.validate().is_ok());
    config.node.id = crate::config::NODE_ID_MAX + 1;
    assert!(config.validate().is_err());
    let mut config = Config::default();
    config.router.object_save_interval_ms = config.router.object_free_timeout_ms;
    assert!(config.validate().is_err());
    let mut config = Config::default();
    config.store.backend = StoreBackend::Postgres;
    assert!(config.validate().is_err(), "postgres without a url");
    config.store.url = "postgresql://routerd@127.0.0.1:5432/routerd".to_string();
    config.validate().unwrap();
    config.store.pool_size = 0;
    assert!(config.validate().is_err());
    config.store.pool_size = POSTGRES_POOL_SIZE_MAX + 1;
    assert!(config.validate().is_err());
    // A request rate needs a bucket to hold its tokens; no rate needs none.
    let mut config = Config::default();
    config.gateway.session_request_burst_max = 0;
    let error = config.validate().unwrap_err().to_string();
    assert!(
        error.contains("gateway.session_request_burst_max"),
        "{error}"
    );
    config.gateway.session_requests_per_sec_max = 0;
    config.validate().unwrap();
}

/// Values every check passed that broke the node at run time: timers that
/// made the router walk and save every entry every millisecond, and bodies
/// or states no frame between nodes could carry.
#[test]
fn timers_and_sizes_the_node_cannot_run_with_are_refused() {
    let refused = |change: &dyn Fn(&mut Config), key: &str| {
        let mut config = Config::default();
        change(&mut config);
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains(key), "{key}: {error}");
    };
    refused(
        &|c| c.router.object_save_interval_ms = 0,
        "router.object_save_interval_ms",
    );
    refused(
        &|c| c.router.cache_free_timeout_ms = 0,
        "router.cache_free_timeout_ms",
    );
    refused(
        &|c| c.router.object_retry_interval_ms = 0,
        "router.object_retry_interval_ms",
    );
    refused(
        &|c| c.gateway.body_max_bytes = 2 << 20,
        "gateway.body_max_bytes",
    );
    refused(
        &|c| c.store.state_max_bytes = wire::frame::MAX_FRAME_LEN,
        "store.state_max_bytes",
    );
    refused(
        &|c| c.router.request_keys_max = 65_536,
        "router.request_keys_max",
    );
    let mut config = Config::default();
    config.gateway.body_max_bytes = PAYLOAD_MAX_BYTES as u32;
    config.store.state_max_bytes = PAYLOAD_MAX_BYTES;
    config.router.object_save_interval_ms = ROUTER_SWEEP_TIMERS_MIN_MS;
    config.router.request_keys_max = 65_535;
    config.validate().unwrap();
}

#[test]
fn the_client_limits_parse_from_their_keys() {
    let text = "[gateway]\nsession_requests_per_sec_max = 10\nsession_request_burst_max = 3\n\
                [services.room]\ncreated_per_session_max = 4\nrooms_per_node_max = 5\n";
    let config = Config::from_toml(text).unwrap();
    assert_eq!(config.gateway.session_requests_per_sec_max, 10);
    assert_eq!(config.gateway.session_request_burst_max, 3);
    assert_eq!(config.services.room.created_per_session_max, 4);
    assert_eq!(config.services.room.rooms_per_node_max, 5);
}

#[test]
fn renamed_keys_parse_and_old_names_are_refused_naming_both() {
    let text = "[gateway]\nbody_max_bytes = 10\ninflight_max = 11\nsessions_max = 12\n\
                [router]\npull_attempts_max = 13\nforward_hops_max = 14\n\
                entries_per_core_max = 15\n";
    let config = Config::from_toml(text).unwrap();
    assert_eq!(config.gateway.body_max_bytes, 10);
    assert_eq!(config.gateway.inflight_max, 11);
    assert_eq!(config.gateway.sessions_max, 12);
    assert_eq!(config.router.pull_attempts_max, 13);
    assert_eq!(config.router.forward_hops_max, 14);
    assert_eq!(config.router.entries_per_core_max, 15);
    for (section, old, new) in RENAMED_KEYS {
        let error = Config::from_toml(&format!("[{section}]\n{old} = 1\n")).unwrap_err();
        assert!(error.contains(&format!("{section}.{old}")), "{error}");
        assert!(error.contains(&format!("{section}.{new}")), "{error}");
    }
}

#[test]
fn a_key_of_another_store_backend_is_an_error_naming_it() {
    let cases = [
        ("sqlite", "keyspace = \"k\"", "store.keyspace"),
        ("sqlite", "nodes = []", "store.nodes"),
        ("memory", "path = \"x.db\"", "store.path"),
        ("scylla", "synchronous = \"normal\"", "store.synchronous"),
        ("scylla", "path = \"x.db\"", "store.path"),
    ];
    for (backend, line, key) in cases {
        let text = format!("[store]\nbackend = \"{backend}\"\nnodes = [\"h:1\"]\n{line}\n");
        let text = if backend == "scylla" {
            text
        } else {
            text.replace("nodes = [\"h:1\"]\n", "")
        };
        let error = Config::from_toml(&text).unwrap_err();
        assert!(error.contains(key), "{backend}: {error}");
    }
    // The default backend is sqlite, named or not.
    let error = Config::from_toml("[store]\nreplication_factor = 3\n").unwrap_err();
    assert!(error.contains("store.replication_factor"), "{error}");
    // Each backend's own keys and the common ones are accepted.
    Config::from_toml("[store]\npath = \"x.db\"\nsynchronous = \"normal\"\nqueue_max = 5\n")
        .unwrap();
    Config::from_toml(
        "[store]\nbackend = \"scylla\"\nnodes = [\"h:1\"]\nkeyspace = \"k\"\n\
         replication_factor = 3\nbatch_max = 7\n",
    )
    .unwrap();
}

#[test]
fn every_store_key_is_common_or_declared_by_a_backend() {
    // A new [store] field must say which backend reads it, or the key
    // check above would refuse it for every backend.
    let store = StoreConfig {
        path: Some(PathBuf::from("x.db")),
        ..StoreConfig::default()
    };
    let table = toml::Table::try_from(&store).unwrap();
    for key in table.keys() {
        assert!(
            StoreBackend::ALL.iter().any(|backend| backend.uses(key)),
            "store.{key} is read by no backend"
        );
    }
    for backend in StoreBackend::ALL {
        let named = toml::Value::try_from(backend).unwrap();
        assert_eq!(named.as_str(), Some(backend.name()));
    }
}

#[test]
fn effective_config_of_each_backend_loads_back() {
    for backend in StoreBackend::ALL {
        let mut config = Config::default();
        config.store.backend = backend;
        config.store.nodes = vec!["h:9042".to_string()];
        let text = config.to_toml();
        let parsed = Config::from_toml(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        assert_eq!(parsed.store.backend, backend);
        // `path` is shown only when set.
        for key in ["synchronous", "nodes", "keyspace", "replication_factor"] {
            let shown = text
                .lines()
                .any(|line| line.starts_with(&format!("{key} =")));
            assert_eq!(shown, backend.keys().contains(&key), "{backend:?} {key}");
        }
    }
}

/// The shipped tuning profiles load and keep their promises.
mod tuning_tests {
    use super::*;

    fn profile(name: &str) -> Config {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tuning")
            .join(name);
        Config::load(Some(&path)).unwrap_or_else(|error| panic!("{name}: {error}"))
    }

    #[test]
    fn default_profile_is_the_built_in_default() {
        // `routerd serve` without --config must mean tuning/default.toml.
        let mut expected = Config::default();
        if let Ok(secret) = std::env::var(AUTH_SECRET_ENV) {
            expected.auth.secret = Secret::new(secret);
        }
        if let Ok(url) = std::env::var("ROUTERD_STORE_URL") {
            expected.store.url = url;
        }
        assert_eq!(profile("default.toml"), expected);
    }

    #[test]
    fn shipped_profiles_are_valid() {
        for entry in
            std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning")).unwrap()
        {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(Some(&path))
                    .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            }
        }
    }
}

#[test]
fn a_registered_type_has_a_services_section_of_its_own() {
    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct GuildSettings {
        members_max: u32,
    }
    let text = "[services.player]\npersist = \"on_write\"\n[services.guild]\nmembers_max = 64\n";
    let config = Config::from_toml(text).unwrap();
    assert_eq!(config.services.player.persist, Persist::OnWrite);
    let guild: GuildSettings = config.services.section("guild").unwrap();
    assert_eq!(guild, GuildSettings { members_max: 64 });
    // A type without a section gets its defaults.
    let other: GuildSettings = config.services.section("match").unwrap();
    assert_eq!(other, GuildSettings::default());
    // The type's own keys are checked by the type's own struct.
    let typo = Config::from_toml("[services.guild]\nmembers_mx = 1\n").unwrap();
    let error = typo.services.section::<GuildSettings>("guild").unwrap_err();
    assert!(
        error.to_string().contains("[services.guild]") && error.to_string().contains("members_mx"),
        "{error}"
    );
    // A section nothing registered is refused, naming what is.
    config
        .services
        .check_registered(&["player", "room", "guild"])
        .unwrap();
    let error = config
        .services
        .check_registered(&["player", "room"])
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config: [services.guild] names no registered object type or service (this node \
         registers player, room)"
    );
    // The built-ins' sections still refuse unknown keys.
    let error = Config::from_toml("[services.room]\nmembers_mx = 1\n").unwrap_err();
    assert!(error.contains("members_mx"), "{error}");
}

#[test]
fn listen_addresses_may_name_a_host() {
    let text = "[gateway]\nlisten = \"localhost:7400\"\n[admin]\nlisten = \"localhost:9464\"\n\
                [cluster]\nlisten = \"localhost:7600\"\nadvertise = \"localhost:7600\"\n";
    let config = Config::from_toml(text).unwrap();
    assert!(config.gateway.listen.ip().is_loopback());
    assert_eq!(config.gateway.listen.port(), 7400);
    assert_eq!(config.admin.listen.port(), 9464);
    assert_eq!(config.cluster.advertise.map(|a| a.port()), Some(7600));
    let error = Config::from_toml("[gateway]\nlisten = \"localhost\"\n").unwrap_err();
    assert!(error.contains("neither IP:PORT nor a host name"), "{error}");
}

#[test]
fn resume_settings_are_read_and_bounded() {
    let defaults = Config::default();
    assert_eq!(
        (
            defaults.auth.resume_window_ms,
            defaults.auth.resume_pushes_max
        ),
        (30_000, 1024)
    );
    let text = "[auth]\nresume_window_ms = 0\nresume_pushes_max = 16\n";
    let config = Config::from_toml(text).unwrap();
    config.validate().unwrap();
    assert_eq!(
        (config.auth.resume_window_ms, config.auth.resume_pushes_max),
        (0, 16)
    );
    let mut config = Config::default();
    config.auth.resume_pushes_max = 0;
    assert!(config.validate().is_err());
    config.auth.resume_pushes_max = 65_537;
    assert!(config.validate().is_err());
    let mut config = Config::default();
    config.auth.resume_window_ms = 3_600_001;
    assert!(config.validate().is_err());
}

/// A shutdown deadline of a few milliseconds ended the cores before a
/// clean stop had saved and released its objects and written `left`.
#[test]
fn a_shutdown_deadline_too_short_to_release_the_objects_is_refused() {
    for refused in [0, 5, SHUTDOWN_DEADLINE_MIN_MS - 1] {
        let mut config = Config::default();
        config.cores.shutdown_deadline_ms = refused;
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("cores.shutdown_deadline_ms"), "{error}");
        assert!(error.contains("at least 1000"), "{error}");
    }
    let mut config = Config::default();
    config.cores.shutdown_deadline_ms = SHUTDOWN_DEADLINE_MIN_MS;
    config.validate().unwrap();
    let error = Config::from_toml("[cores]\nshutdown_deadline_ms = 0\n")
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(error.contains("cores.shutdown_deadline_ms"), "{error}");
}

/// Every core-to-core channel's slots are allocated at start: the bound
/// is refused past `MESH_QUEUE_MAX`, as at 0.
#[test]
fn the_mesh_queue_bound_is_bounded() {
    for refused in [0, MESH_QUEUE_MAX + 1, usize::MAX] {
        let mut config = Config::default();
        config.cores.mesh_queue_max = refused;
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("cores.mesh_queue_max"), "{refused}: {error}");
    }
    let mut config = Config::default();
    config.cores.mesh_queue_max = MESH_QUEUE_MAX;
    config.validate().unwrap();
    config.cores.mesh_queue_max = 1;
    config.validate().unwrap();
}

/// A store request timeout of 0 dropped every request unrun; one past
/// what the backends' own timeouts hold panicked in SQLite's busy timeout
/// (over i32::MAX ms) or made PostgreSQL refuse the session's settings.
#[test]
fn the_store_request_timeout_is_bounded_both_ways() {
    for refused in [
        0,
        STORE_REQUEST_TIMEOUT_MIN_MS - 1,
        STORE_REQUEST_TIMEOUT_MAX_MS + 1,
    ]
    .into_iter()
    .chain([1 << 30, i32::MAX as u64 + 1, u64::MAX])
    {
        let mut config = Config::default();
        config.store.request_timeout_ms = refused;
        let error = config.validate().unwrap_err().to_string();
        assert!(
            error.contains("store.request_timeout_ms"),
            "{refused}: {error}"
        );
    }
    for accepted in [STORE_REQUEST_TIMEOUT_MIN_MS, STORE_REQUEST_TIMEOUT_MAX_MS] {
        let mut config = Config::default();
        config.store.request_timeout_ms = accepted;
        config.validate().unwrap();
    }
}
