//! TLS on the client listeners with rustls (the ring provider): TLS 1.3
//! and 1.2, the certificate chain and key from PEM files, re-read when
//! they change, ALPN `routerd` on the TLS listener (`http/1.1` on the
//! WebSocket one, what browsers offer), resumption by tickets (1.3 and
//! 1.2) and by session id (1.2). Records are made and opened in
//! userspace; see the parent module for where kernel TLS would go.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, ServerConnection};

use super::Refusal;
use crate::config::GatewayConfig;
use crate::metrics::CoreMetrics;

/// The ALPN protocol of the TLS client listener.
pub const ALPN_ROUTERD: &[u8] = b"routerd";
/// What the WebSocket listener offers over TLS: the upgrade is HTTP/1.1.
const ALPN_HTTP1: &[u8] = b"http/1.1";
/// TLS 1.2 sessions one node keeps for resumption by session id (tickets
/// need no server state).
const SESSION_CACHE_MAX: usize = 4096;
/// The first byte of a TLS record carrying a handshake message.
const RECORD_HANDSHAKE: u8 = 0x16;

/// Why the TLS listeners cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("cannot read {key} {path}: {source}")]
    Read {
        key: &'static str,
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("gateway.tls_cert_file {0} holds no certificate")]
    NoCertificate(PathBuf),
    #[error("gateway.tls_key_file {path} is not a usable key: {source}")]
    Key {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("gateway.tls_key_file does not match gateway.tls_cert_file: {0}")]
    Mismatch(rustls::Error),
    #[error("cannot build the TLS configuration: {0}")]
    Config(rustls::Error),
}

/// The certificate every TLS handshake of the node presents, swapped
/// whole when the files change (handshakes in progress keep the one they
/// started with).
#[derive(Debug)]
pub struct ReloadingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|current| current.clone())
    }
}

/// The node's TLS configurations: one per listener kind, sharing the
/// certificate (and so its reloads).
pub struct TlsSetup {
    pub gateway: Arc<ServerConfig>,
    pub websocket: Arc<ServerConfig>,
    cert: Arc<ReloadingCert>,
}

/// aws-lc-rs: a full handshake's cost is mostly the server's signature,
/// and with the default RSA-2048 certificate ring's took 72 % of a core
/// busy with handshakes (`bench/handshakes_vs_nginx.sh`).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Reads the certificate chain and key of `config`, if any TLS listener
/// is configured.
pub fn setup(config: &GatewayConfig) -> Result<Option<TlsSetup>, TlsSetupError> {
    let needed = config.tls_listen.is_some() || config.websocket_tls;
    let (Some(cert_file), Some(key_file), true) =
        (&config.tls_cert_file, &config.tls_key_file, needed)
    else {
        return Ok(None);
    };
    let provider = provider();
    let cert = Arc::new(ReloadingCert {
        current: RwLock::new(Arc::new(load_certified_key(
            cert_file, key_file, &provider,
        )?)),
    });
    let build = |alpn: &[u8]| -> Result<Arc<ServerConfig>, TlsSetupError> {
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(TlsSetupError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(cert.clone());
        server.alpn_protocols = vec![alpn.to_vec()];
        server.ticketer =
            rustls::crypto::aws_lc_rs::Ticketer::new().map_err(TlsSetupError::Config)?;
        server.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_MAX);
        Ok(Arc::new(server))
    };
    Ok(Some(TlsSetup {
        gateway: build(ALPN_ROUTERD)?,
        websocket: build(ALPN_HTTP1)?,
        cert,
    }))
}

fn load_certified_key(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsSetupError> {
    let chain = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsSetupError::Read {
            key: "gateway.tls_cert_file",
            path: cert_file.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsSetupError::NoCertificate(cert_file.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|source| TlsSetupError::Read {
        key: "gateway.tls_key_file",
        path: key_file.to_owned(),
        source,
    })?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|source| TlsSetupError::Key {
            path: key_file.to_owned(),
            source,
        })?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(TlsSetupError::Mismatch)?;
    Ok(certified)
}

/// What identifies a file's version without reading it.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Re-reads the certificate and key every `interval` when either file
/// changed; a pair that does not load (half written, mismatched) keeps the
/// one in use and is counted, and is tried again at the next change. The
/// thread ends once the node dropped its configurations.
pub fn watch(setup: &TlsSetup, config: &GatewayConfig, metrics: Arc<CoreMetrics>) {
    let (Some(cert_file), Some(key_file)) =
        (config.tls_cert_file.clone(), config.tls_key_file.clone())
    else {
        return;
    };
    let cert: Weak<ReloadingCert> = Arc::downgrade(&setup.cert);
    let interval = Duration::from_millis(config.tls_reload_interval_ms);
    let spawned = std::thread::Builder::new()
        .name("tls-reload".into())
        .spawn(move || {
            let provider = provider();
            let mut seen = (stamp(&cert_file), stamp(&key_file));
            loop {
                std::thread::sleep(interval);
                let Some(cert) = cert.upgrade() else {
                    return;
                };
                let now = (stamp(&cert_file), stamp(&key_file));
                if now == seen {
                    continue;
                }
                seen = now;
                match load_certified_key(&cert_file, &key_file, &provider) {
                    Ok(certified) => {
                        if let Ok(mut current) = cert.current.write() {
                            *current = Arc::new(certified);
                        }
                        metrics.gateway.tls_reloads_ok.inc();
                        tracing::info!(file = %cert_file.display(), "TLS certificate reloaded");
                    }
                    Err(error) => {
                        metrics.gateway.tls_reloads_failed.inc();
                        tracing::warn!(%error, "TLS certificate not reloaded; the old one stays");
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the TLS reload thread; certificates stay as loaded");
    }
}

/// How a handshake finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeKind {
    Full,
    Resumed,
}

pub(super) enum TlsOpened {
    Bytes { finished: Option<HandshakeKind> },
    Close(Refusal),
}

/// One connection's TLS state.
pub struct TlsLayer {
    conn: ServerConnection,
    seen_first_byte: bool,
    /// The whole ClientHello arrived: rustls answered it (or refused it).
    hello_answered: bool,
    handshaking: bool,
}

impl TlsLayer {
    pub(super) fn new(config: Arc<ServerConfig>) -> Result<TlsLayer, rustls::Error> {
        let mut conn = ServerConnection::new(config)?;
        // The outbox bounds what waits for this connection (in frames);
        // rustls's own bound would only cut a batch in two.
        conn.set_buffer_limit(None);
        Ok(TlsLayer {
            conn,
            seen_first_byte: false,
            hello_answered: false,
            handshaking: true,
        })
    }

    pub(super) fn is_handshaking(&self) -> bool {
        self.handshaking
    }

    /// Whether the client's whole ClientHello arrived (the first-bytes
    /// deadline is met).
    pub(super) fn hello_answered(&self) -> bool {
        self.hello_answered
    }

    pub(super) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Opens one receive's records; plaintext is appended to `out`. An
    /// error leaves an alert queued for [`Self::finish`].
    pub(super) fn open(&mut self, mut wire: &[u8], out: &mut Vec<u8>) -> TlsOpened {
        if !self.seen_first_byte && !wire.is_empty() {
            self.seen_first_byte = true;
            if wire[0] != RECORD_HANDSHAKE {
                return TlsOpened::Close(Refusal::TlsPlaintext);
            }
        }
        let failed = |handshaking: bool| {
            TlsOpened::Close(if handshaking {
                Refusal::TlsBadHandshake
            } else {
                Refusal::TlsError
            })
        };
        while !wire.is_empty() {
            if self.conn.read_tls(&mut wire).is_err() {
                return failed(self.handshaking);
            }
            if self.conn.process_new_packets().is_err() {
                return failed(self.handshaking);
            }
            // rustls answers a whole ClientHello at once (ServerHello, or a
            // HelloRetryRequest).
            self.hello_answered |= self.conn.wants_write() || !self.conn.is_handshaking();
            // Everything rustls opened, each round, so its buffer never
            // fills; WouldBlock is "no more for now", Ok is close_notify
            // (the peer's end of stream follows it).
            match self.conn.reader().read_to_end(out) {
                Ok(_) => {}
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return failed(self.handshaking),
            }
        }
        let mut finished = None;
        if self.handshaking && !self.conn.is_handshaking() {
            self.handshaking = false;
            finished = Some(match self.conn.handshake_kind() {
                Some(rustls::HandshakeKind::Resumed) => HandshakeKind::Resumed,
                _ => HandshakeKind::Full,
            });
        }
        TlsOpened::Bytes { finished }
    }

    /// Seals `plain` (maybe empty) and what the handshake owes into `wire`.
    pub(super) fn seal(&mut self, plain: &[u8], wire: &mut Vec<u8>) {
        if !plain.is_empty() {
            // Unbounded buffers (see `new`): the write takes all of it.
            let _ = self.conn.writer().write_all(plain);
        }
        while self.conn.wants_write() {
            if self.conn.write_tls(wire).is_err() {
                break;
            }
        }
    }

    pub(super) fn finish(&mut self, plain: &[u8], wire: &mut Vec<u8>) {
        if !self.handshaking {
            let _ = self.conn.writer().write_all(plain);
            self.conn.send_close_notify();
        }
        self.seal(&[], wire);
    }
}
