//! The client's side of the gateway's TLS and WebSocket listeners, sans
//! IO: protocol bytes in, wire bytes out, and back. `routerd client` and
//! loadgen drive it from their own IO (blocking threads, io_uring).
//! Behind the `client-layers` feature, so the fuzz targets and anything
//! else that needs only the codecs build without rustls.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};

use crate::websocket::{
    client_request, encode_masked, parse_client_response, Control, Decoder, Opcode, Role,
    UpgradeRequestError,
};

/// Why the layers cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// rustls refused the handshake or a record (certificate, alert,
    /// corrupt record).
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// The server's answer to the WebSocket upgrade was not a `101` with
    /// the right `Sec-WebSocket-Accept`.
    #[error("WebSocket upgrade: {0}")]
    Upgrade(#[from] UpgradeRequestError),
    /// A WebSocket frame from the server broke RFC 6455 or a bound.
    #[error("WebSocket: {0}")]
    WebSocket(#[from] crate::websocket::WsError),
    /// The server sent a Close frame, with its status code if it gave one.
    #[error("the server closed the WebSocket (code {0:?})")]
    Closed(Option<u16>),
}

/// A TLS client configuration for the gateway: trusting the certificates
/// of `ca_file` (PEM), or any certificate with `insecure` (tests only),
/// or the system's roots otherwise... of which this build knows none, so
/// one of the two is required.
pub fn client_config(
    ca_file: Option<&Path>,
    insecure: bool,
    alpn: &[u8],
) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?;
    let mut config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        let Some(ca_file) = ca_file else {
            return Err("--tls needs --ca-file (or --insecure, for tests)".into());
        };
        let mut roots = rustls::RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(ca_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|error| format!("cannot read {}: {error}", ca_file.display()))?;
        if certs.is_empty() {
            return Err(format!("{} holds no certificate", ca_file.display()));
        }
        for cert in certs {
            roots.add(cert).map_err(|error| error.to_string())?;
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// `--insecure`: accepts any certificate, still checking that the
/// handshake is signed by the key the certificate names.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

struct WsClientLayer {
    request: Option<Vec<u8>>,
    key: String,
    answer: Vec<u8>,
    upgraded: bool,
    decoder: Decoder,
    controls: Vec<Control>,
    owed: Vec<u8>,
    mask_state: u32,
}

/// A client connection's layers: TLS, WebSocket, or both.
pub struct ClientLayers {
    tls: Option<ClientConnection>,
    ws: Option<WsClientLayer>,
    between: Vec<u8>,
}

impl ClientLayers {
    /// `tls`: the configuration and the server's name; `websocket`: the
    /// `Host` of the upgrade, and a seed for the frames' masks.
    pub fn new(
        tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
        websocket: Option<(&str, u32)>,
    ) -> Result<ClientLayers, LayerError> {
        let tls = match tls {
            Some((config, name)) => {
                let mut conn = ClientConnection::new(config, name)?;
                conn.set_buffer_limit(None);
                Some(conn)
            }
            None => None,
        };
        let ws = websocket.map(|(host, seed)| {
            let mut key = [0u8; 16];
            let mut state = seed | 1;
            for byte in &mut key {
                state = xorshift(state);
                *byte = state as u8;
            }
            let (request, key) = client_request(host, key);
            WsClientLayer {
                request: Some(request),
                key,
                answer: Vec::new(),
                upgraded: false,
                decoder: Decoder::new(Role::Client, u64::from(u32::MAX)),
                controls: Vec::new(),
                owed: Vec::new(),
                mask_state: state,
            }
        });
        Ok(ClientLayers {
            tls,
            ws,
            between: Vec::new(),
        })
    }

    /// Whether the layers owe the server bytes with nothing to send (the
    /// handshake, a pong).
    pub fn wants_write(&self) -> bool {
        self.tls.as_ref().is_some_and(|tls| tls.wants_write())
            || self
                .ws
                .as_ref()
                .is_some_and(|ws| ws.request.is_some() || !ws.owed.is_empty())
    }

    /// Seals `protocol` (whole frames, maybe none) into `wire`: one
    /// WebSocket message per call. Before the TLS handshake is done rustls
    /// holds the plaintext and sends it once it is.
    pub fn seal(&mut self, protocol: &[u8], wire: &mut Vec<u8>) {
        let ws_out = if self.tls.is_some() {
            self.between.clear();
            &mut self.between
        } else {
            &mut *wire
        };
        match &mut self.ws {
            None => ws_out.extend_from_slice(protocol),
            Some(ws) => {
                // The upgrade request goes first; frames may follow it at
                // once (the server reads them after its 101).
                if let Some(request) = ws.request.take() {
                    ws_out.extend_from_slice(&request);
                }
                ws_out.append(&mut ws.owed);
                if !protocol.is_empty() {
                    ws.mask_state = xorshift(ws.mask_state);
                    encode_masked(
                        ws_out,
                        Opcode::Binary,
                        protocol,
                        ws.mask_state.to_le_bytes(),
                    );
                }
            }
        }
        if let Some(tls) = &mut self.tls {
            let plain = if self.ws.is_some() {
                &self.between[..]
            } else {
                protocol
            };
            if !plain.is_empty() {
                let _ = tls.writer().write_all(plain);
            }
            while tls.wants_write() {
                if tls.write_tls(wire).is_err() {
                    break;
                }
            }
        }
    }

    /// Opens received `wire` bytes; protocol bytes are appended to
    /// `protocol`.
    pub fn open(&mut self, mut wire: &[u8], protocol: &mut Vec<u8>) -> Result<(), LayerError> {
        self.between.clear();
        if let Some(tls) = &mut self.tls {
            let target = if self.ws.is_some() {
                &mut self.between
            } else {
                &mut *protocol
            };
            while !wire.is_empty() {
                tls.read_tls(&mut wire)
                    .map_err(|error| LayerError::Tls(rustls::Error::General(error.to_string())))?;
                tls.process_new_packets()?;
                match tls.reader().read_to_end(target) {
                    Ok(_) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(error) => {
                        return Err(LayerError::Tls(rustls::Error::General(error.to_string())))
                    }
                }
            }
        }
        let Some(ws) = &mut self.ws else {
            return Ok(());
        };
        let WsClientLayer {
            key,
            answer,
            upgraded,
            decoder,
            controls,
            owed,
            mask_state,
            ..
        } = ws;
        let input: &[u8] = if self.tls.is_some() {
            &self.between
        } else {
            wire
        };
        let frames = if *upgraded {
            input
        } else {
            answer.extend_from_slice(input);
            match parse_client_response(answer, key)? {
                None => return Ok(()),
                Some(taken) => {
                    *upgraded = true;
                    answer.drain(..taken);
                    &answer[..]
                }
            }
        };
        controls.clear();
        decoder.decode(frames, protocol, controls)?;
        answer.clear();
        for control in controls.drain(..) {
            match control {
                Control::Ping(payload) => {
                    *mask_state = xorshift(*mask_state);
                    encode_masked(owed, Opcode::Pong, &payload, mask_state.to_le_bytes());
                }
                Control::Pong => {}
                Control::Close(code) => return Err(LayerError::Closed(code)),
            }
        }
        Ok(())
    }
}

fn xorshift(mut state: u32) -> u32 {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    state
}
