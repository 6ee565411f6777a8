//! Reading the configuration: the file, the environment overrides, the
//! checks of renamed and backend-specific keys, and validation.

use std::path::Path;

use super::*;

/// The longest `auth.resume_window_ms`: a detached session holds its
/// player for that long.
const RESUME_WINDOW_MS_MAX: u64 = 3_600_000;
/// The most `auth.resume_pushes_max`: every resumable session keeps that
/// many pushes.
const RESUME_PUSHES_MAX: u32 = 65_536;

impl Config {
    /// Reads `path`, or the built-in defaults (those of
    /// `tuning/default.toml`) when there is none, then applies environment
    /// overrides and validates.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                Config::from_toml(&text).map_err(|message| ConfigError::Parse {
                    path: path.to_path_buf(),
                    message,
                })?
            }
            None => Config::default(),
        };
        if let Ok(secret) = std::env::var(AUTH_SECRET_ENV) {
            config.auth.secret = Secret::new(secret);
        }
        if let Ok(url) = std::env::var("ROUTERD_STORE_URL") {
            config.store.url = url;
        }
        if let Ok(secret) = std::env::var(CLUSTER_SECRET_ENV) {
            config.cluster.secret = Secret::new(secret);
        }
        if let Ok(token) = std::env::var(ADMIN_TOKEN_ENV) {
            config.admin.token = Some(Secret::new(token));
        }
        config.validate()?;
        Ok(config)
    }

    /// Parses TOML text; the error names the offending key.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let table: toml::Table = text
            .parse()
            .map_err(|error: toml::de::Error| error.to_string())?;
        check_renamed_keys(&table)?;
        let config: Config = toml::from_str(text).map_err(|error| error.to_string())?;
        if let Some(toml::Value::Table(store)) = table.get("store") {
            check_store_keys(config.store.backend, store)?;
        }
        Ok(config)
    }

    /// Checks the relations between keys that serde alone cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_node_and_cores()?;
        self.validate_gateway()?;
        self.validate_admin()?;
        self.check_secrets()?;
        self.validate_resume()?;
        self.validate_store()?;
        self.validate_router()?;
        self.cluster.check_timing().map_err(ConfigError::Invalid)?;
        self.scripts.validate()?;
        Ok(())
    }

    /// `auth.resume_window_ms` and `auth.resume_pushes_max`.
    fn validate_resume(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| Err(ConfigError::Invalid(message.to_string()));
        if self.auth.resume_window_ms > RESUME_WINDOW_MS_MAX {
            return invalid("auth.resume_window_ms must be at most 3600000 (an hour)");
        }
        if !(1..=RESUME_PUSHES_MAX).contains(&self.auth.resume_pushes_max) {
            return invalid("auth.resume_pushes_max must be between 1 and 65536");
        }
        Ok(())
    }

    /// `node.id` and the `cores` section.
    fn validate_node_and_cores(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| Err(ConfigError::Invalid(message.to_string()));
        if self.node.id == 0 {
            return invalid("node.id must not be 0 (0 means \"no owner\")");
        }
        if self.node.id > super::NODE_ID_MAX {
            return invalid("node.id must be at most 9223372036854775807 (stores keep it signed)");
        }
        if let Some(cpus) = &self.cores.cpus {
            if cpus.is_empty() {
                return invalid("cores.cpus must name at least one CPU");
            }
        }
        if !self.cores.ring_depth.is_power_of_two() || self.cores.ring_depth > 32_768 {
            return invalid("cores.ring_depth must be a power of two, at most 32768");
        }
        if !self.cores.recv_buffers.is_power_of_two() || self.cores.recv_buffers > 32_768 {
            return invalid("cores.recv_buffers must be a power of two, at most 32768");
        }
        if self.cores.recv_buffer_bytes == 0 || self.cores.recv_buffer_bytes > 1 << 20 {
            return invalid("cores.recv_buffer_bytes must be between 1 and 1048576");
        }
        if self.cores.shutdown_deadline_ms < SHUTDOWN_DEADLINE_MIN_MS {
            return Err(ConfigError::Invalid(format!(
                "cores.shutdown_deadline_ms must be at least {SHUTDOWN_DEADLINE_MIN_MS}: a clean \
                 stop saves and releases every object, then writes `left`, within it, and a \
                 shorter one ends the cores before those writes (the unsaved changes lost)"
            )));
        }
        if !(1..=MESH_QUEUE_MAX).contains(&self.cores.mesh_queue_max) {
            return Err(ConfigError::Invalid(format!(
                "cores.mesh_queue_max must be between 1 and {MESH_QUEUE_MAX}: every channel \
                 between two cores holds that many slots from the start"
            )));
        }
        let per_conn_max = self.cores.recv_buffers_per_conn_max;
        if per_conn_max == 0 || per_conn_max > u32::from(self.cores.recv_buffers) {
            return invalid(
                "cores.recv_buffers_per_conn_max must be between 1 and cores.recv_buffers",
            );
        }
        Ok(())
    }

    /// The `admin` section's allow-lists (docs/protocol.md section 9).
    fn validate_admin(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| Err(ConfigError::Invalid(message.to_string()));
        for host in &self.admin.allowed_hosts {
            if host.is_empty() || host.contains(['/', ' ']) {
                return invalid(
                    "admin.allowed_hosts holds host names (`ops.example.com`) or \"*\"",
                );
            }
        }
        for origin in &self.admin.allowed_origins {
            if origin != "*" && !is_origin(origin) {
                return invalid(
                    "admin.allowed_origins holds origins (`https://ops.example.com`) or \"*\"",
                );
            }
        }
        Ok(())
    }

    /// The `gateway` section: bounds, timeouts, rates and TLS.
    fn validate_gateway(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| Err(ConfigError::Invalid(message.to_string()));
        if self.gateway.body_max_bytes == 0 || self.gateway.inflight_max == 0 {
            return invalid("gateway.body_max_bytes and gateway.inflight_max must be positive");
        }
        if self.gateway.body_max_bytes as usize > PAYLOAD_MAX_BYTES {
            return Err(ConfigError::Invalid(format!(
                "gateway.body_max_bytes must be at most {PAYLOAD_MAX_BYTES}: a request to an \
                 object on another node travels in one frame between nodes"
            )));
        }
        if self.gateway.request_timeout_ms == 0 || self.gateway.idle_timeout_ms == 0 {
            return invalid("gateway timeouts must be positive");
        }
        if self.gateway.session_requests_per_sec_max > 0
            && self.gateway.session_request_burst_max == 0
        {
            return invalid(
                "gateway.session_request_burst_max must be positive when \
                 gateway.session_requests_per_sec_max is set",
            );
        }
        if self.gateway.send_queue_max == 0 || self.gateway.send_queue_bytes_max == 0 {
            return invalid("queue bounds must be positive");
        }
        let gateway = &self.gateway;
        let needs_tls = gateway.tls_listen.is_some() || gateway.websocket_tls;
        if needs_tls && (gateway.tls_cert_file.is_none() || gateway.tls_key_file.is_none()) {
            return invalid(
                "gateway.tls_listen and gateway.websocket_tls need gateway.tls_cert_file and \
                 gateway.tls_key_file",
            );
        }
        if gateway.websocket_tls && gateway.websocket_listen.is_none() {
            return invalid("gateway.websocket_tls needs gateway.websocket_listen");
        }
        if gateway.tls_handshake_timeout_ms == 0
            || gateway.tls_client_hello_timeout_ms == 0
            || gateway.tls_handshakes_max == 0
            || gateway.tls_reload_interval_ms == 0
            || gateway.websocket_upgrade_timeout_ms == 0
        {
            return invalid(
                "gateway.tls_client_hello_timeout_ms, gateway.tls_handshake_timeout_ms, \
                 gateway.tls_handshakes_max, gateway.tls_reload_interval_ms and \
                 gateway.websocket_upgrade_timeout_ms must be positive",
            );
        }
        Ok(())
    }

    /// The `store` section.
    fn validate_store(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| Err(ConfigError::Invalid(message.to_string()));
        if self.store.backend == StoreBackend::Scylla && self.store.nodes.is_empty() {
            return invalid("store.backend = \"scylla\" needs store.nodes");
        }
        if self.store.backend == StoreBackend::Postgres && self.store.url.is_empty() {
            return invalid("store.backend = \"postgres\" needs store.url (or ROUTERD_STORE_URL)");
        }
        if self.store.pool_size == 0 || self.store.pool_size > POSTGRES_POOL_SIZE_MAX {
            return invalid("store.pool_size must be between 1 and 64");
        }
        if self.store.queue_max == 0 || self.store.batch_max == 0 {
            return invalid("store.queue_max and store.batch_max must be positive");
        }
        if self.store.state_max_bytes > PAYLOAD_MAX_BYTES {
            return Err(ConfigError::Invalid(format!(
                "store.state_max_bytes must be at most {PAYLOAD_MAX_BYTES}: a transfer carries \
                 the state in one frame between nodes"
            )));
        }
        let timeouts = STORE_REQUEST_TIMEOUT_MIN_MS..=STORE_REQUEST_TIMEOUT_MAX_MS;
        if !timeouts.contains(&self.store.request_timeout_ms) {
            return Err(ConfigError::Invalid(format!(
                "store.request_timeout_ms must be between {STORE_REQUEST_TIMEOUT_MIN_MS} and \
                 {STORE_REQUEST_TIMEOUT_MAX_MS} (10 minutes): a shorter one times out every \
                 request before the store could answer it (0: every request is dropped unrun), \
                 and the backends' own timeouts, derived from it, have bounds"
            )));
        }
        Ok(())
    }

    /// The `router` section.
    fn validate_router(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| Err(ConfigError::Invalid(message.to_string()));
        if self.router.request_keys_max > usize::from(u16::MAX) {
            // A saved state counts a player's remembered answers in a u16:
            // more would save a state no node could read back.
            return invalid("router.request_keys_max must be at most 65535");
        }
        if self.router.pull_attempts_max == 0 || self.router.forward_hops_max == 0 {
            return invalid(
                "router.pull_attempts_max and router.forward_hops_max must be positive",
            );
        }
        let router = &self.router;
        let sweep_timers = [
            router.object_save_interval_ms,
            router.object_free_timeout_ms,
            router.cache_free_timeout_ms,
        ];
        if sweep_timers
            .iter()
            .any(|ms| *ms < ROUTER_SWEEP_TIMERS_MIN_MS)
        {
            return Err(ConfigError::Invalid(format!(
                "router.object_save_interval_ms, router.object_free_timeout_ms and \
                 router.cache_free_timeout_ms must be at least {ROUTER_SWEEP_TIMERS_MIN_MS}: \
                 the router walks every entry at a quarter of the shortest"
            )));
        }
        if router.cache_retry_interval_ms == 0
            || router.object_retry_interval_ms == 0
            || router.cache_update_interval_ms == 0
        {
            return invalid(
                "router.cache_update_interval_ms, router.cache_retry_interval_ms and \
                 router.object_retry_interval_ms must be positive",
            );
        }
        if self.router.object_save_interval_ms >= self.router.object_free_timeout_ms {
            return invalid(
                "router.object_save_interval_ms must be below router.object_free_timeout_ms, \
                 or a live owner's ownership lock would expire between saves",
            );
        }
        Ok(())
    }

    /// Every secret of the config, with the listeners it guards. A new
    /// secret is added here, and the rules of [`secret`] then hold for it
    /// too: not empty, not `check-config`'s mask, and not its development
    /// value where other machines can reach what it guards. The cluster's
    /// guards only the link listeners: a node whose gateway is public but
    /// whose links stay on loopback forms no cluster beyond the machine.
    fn secrets(&self) -> [SecretKey<'_>; 2] {
        let mut cluster = vec![("cluster.listen", self.cluster.listen)];
        cluster.extend(
            self.cluster
                .advertise
                .map(|address| ("cluster.advertise", address)),
        );
        [
            SecretKey {
                key: "auth.secret",
                env: AUTH_SECRET_ENV,
                development: DEVELOPMENT_SECRET,
                value: &self.auth.secret,
                listeners: [
                    ("gateway.listen", Some(self.gateway.listen)),
                    ("gateway.tls_listen", self.gateway.tls_listen),
                    ("gateway.websocket_listen", self.gateway.websocket_listen),
                    ("admin.listen", Some(self.admin.listen)),
                ]
                .into_iter()
                .filter_map(|(key, address)| Some((key, address?)))
                .collect(),
            },
            SecretKey {
                key: "cluster.secret",
                env: CLUSTER_SECRET_ENV,
                development: DEVELOPMENT_CLUSTER_SECRET,
                value: &self.cluster.secret,
                listeners: cluster,
            },
        ]
    }

    /// The rules for secrets alone; [`Self::validate`] checks them too. A
    /// node checks them at start, so a config built in code cannot skip
    /// them.
    pub fn check_secrets(&self) -> Result<(), SecretError> {
        secret::check(&self.secrets())?;
        secret::check_admin_token(self.admin.token.as_ref(), self.admin.listen)
    }

    /// The SQLite file this node uses.
    pub fn sqlite_path(&self) -> PathBuf {
        self.store
            .path
            .clone()
            .unwrap_or_else(|| self.node.data_dir.join("routerd.db"))
    }

    /// The effective configuration as TOML, defaults filled in, without
    /// the keys of store backends other than the chosen one (so the output
    /// loads back).
    pub fn to_toml(&self) -> String {
        let mut table = toml::Table::try_from(self).expect("a Config always serializes");
        if let Some(toml::Value::Table(store)) = table.get_mut("store") {
            store.retain(|key, _| self.store.backend.uses(key));
        }
        let mut text = toml::to_string_pretty(&table).expect("a TOML table always serializes");
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text
    }
}

/// Keys renamed when the file's names were made uniform (`x_max`, unit
/// last, counts named as counts): an old config fails naming the new key
/// rather than only "unknown field".
pub(super) const RENAMED_KEYS: [(&str, &str, &str); 6] = [
    ("gateway", "max_body", "body_max_bytes"),
    ("gateway", "max_inflight", "inflight_max"),
    ("gateway", "max_sessions", "sessions_max"),
    ("router", "retry_max_ttl", "pull_attempts_max"),
    ("router", "transfer_max_ttl", "forward_hops_max"),
    ("router", "entries_max_per_core", "entries_per_core_max"),
];

fn check_renamed_keys(table: &toml::Table) -> Result<(), String> {
    for (section, old, new) in RENAMED_KEYS {
        let present = table
            .get(section)
            .and_then(toml::Value::as_table)
            .is_some_and(|keys| keys.contains_key(old));
        if present {
            return Err(format!("{section}.{old} was renamed to {section}.{new}"));
        }
    }
    Ok(())
}

/// A `[store]` key the chosen backend does not read is an error naming it.
/// Unknown keys were reported by serde already.
fn check_store_keys(backend: StoreBackend, store: &toml::Table) -> Result<(), String> {
    for key in store.keys() {
        if backend.uses(key) {
            continue;
        }
        let owners: Vec<&str> = StoreBackend::ALL
            .iter()
            .filter(|other| other.keys().contains(&key.as_str()))
            .map(|other| other.name())
            .collect();
        return Err(format!(
            "store.{key} does not apply to store.backend = \"{}\" (it is read by: {})",
            backend.name(),
            owners.join(", ")
        ));
    }
    Ok(())
}

/// Whether `value` is an origin as a browser sends it: a scheme and an
/// authority, no path (`https://ops.example.com`, `http://10.0.0.5:8080`).
fn is_origin(value: &str) -> bool {
    value
        .split_once("://")
        .map(|(_, authority)| authority.trim_end_matches('/'))
        .is_some_and(|authority| !authority.is_empty() && !authority.contains('/'))
}
