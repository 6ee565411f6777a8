//! The per-core auth service: the target of every session before login.
//! Stateless: `sys.ping` is echoed, and `auth.login` verifies the token.
//! Whether a verified player may log in (the duplicate-login policy) is the
//! player object's decision, made once for the whole cluster: the driver
//! hands it the login (`ServicesSide::login`) and binds the session with the
//! answer (`GatewayCore::complete_login`).

use std::time::Instant;

use wire::client::{encode_error_body, route, ErrorCode, FrameKind};

use super::core::{EgressRef, GatewayCore};
use super::Ingress;

pub struct AuthService {
    secret: Vec<u8>,
}

/// What the auth service did with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthStep {
    /// Answered here (a ping, a refused token, a wrong route).
    Answered,
    /// The token names `player_id`, valid now and until `expiry_unix_s`:
    /// the login goes to its player object.
    Verified { player_id: u64, expiry_unix_s: u64 },
    /// A well-formed version-2 `auth.resume`: the session `token` names
    /// is looked for (`driver/resume.rs`).
    Resume {
        token: super::core::ResumeToken,
        last_push_seq: u32,
    },
}

/// An `auth.resume` body: the 16-byte token, then `u32 last_push_seq`.
const RESUME_BODY_LEN: usize = 20;

impl AuthService {
    pub fn new(secret: &[u8]) -> AuthService {
        AuthService {
            secret: secret.to_vec(),
        }
    }

    /// Handles one ingress addressed to auth on the session's own core.
    /// `now_unix_s` is the wall clock for token expiry.
    pub fn handle(
        &self,
        gateway: &mut GatewayCore,
        ingress: &Ingress<'_>,
        now: Instant,
        now_unix_s: u64,
    ) -> AuthStep {
        let reply = |gateway: &mut GatewayCore, kind: FrameKind, body: &[u8]| {
            let _ = gateway.egress(
                &EgressRef {
                    session_id: ingress.session_id,
                    session_epoch: ingress.binding.session_epoch,
                    player_id: ingress.binding.player_id,
                    kind: kind as u8,
                    route_id: ingress.route_id,
                    seq: ingress.seq,
                    body,
                    connection: Some(ingress.connection),
                },
                now,
            );
        };
        match ingress.route_id {
            route::SYS_PING => {
                reply(gateway, FrameKind::Response, ingress.body);
                AuthStep::Answered
            }
            route::AUTH_LOGIN => {
                match wire::token::verify_with_expiry(&self.secret, ingress.body, now_unix_s) {
                    Ok((player_id, expiry_unix_s)) => AuthStep::Verified {
                        player_id,
                        expiry_unix_s,
                    },
                    Err(error) => {
                        let body = encode_error_body(ErrorCode::AuthFailed, &error.to_string());
                        reply(gateway, FrameKind::Error, &body);
                        AuthStep::Answered
                    }
                }
            }
            route::AUTH_RESUME => {
                let reason = match (ingress.request_key, ingress.body.len()) {
                    (None, _) => "auth.resume is a version-2 REQUEST",
                    (Some(_), RESUME_BODY_LEN) => {
                        let (token, last) = ingress.body.split_at(16);
                        return AuthStep::Resume {
                            token: token.try_into().expect("16 bytes"),
                            last_push_seq: u32::from_le_bytes(last.try_into().expect("4 bytes")),
                        };
                    }
                    (Some(_), _) => "auth.resume body is a 16-byte token and a u32",
                };
                let body = encode_error_body(ErrorCode::BadRequest, reason);
                reply(gateway, FrameKind::Error, &body);
                AuthStep::Answered
            }
            // The route table lets only the routes above reach a
            // session that is not logged in.
            _ => {
                let body = encode_error_body(ErrorCode::BadRequest, "not an auth route");
                reply(gateway, FrameKind::Error, &body);
                AuthStep::Answered
            }
        }
    }
}
