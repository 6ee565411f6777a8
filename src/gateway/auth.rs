//! The per-core auth service: the target of every session before login.
//! Stateless: `sys.ping` is echoed, `auth.login` verifies the token, asks
//! the duplicate-login policy, binds the session with the epoch its request
//! was snapshotted at, and answers the player id under the new epoch.

use std::sync::Arc;
use std::time::Instant;

use wire::client::{encode_error_body, route, ErrorCode, FrameKind};

use super::core::{EgressRef, GatewayCore};
use super::login::{LoginDecision, LoginPolicy};
use super::session::Target;
use super::Ingress;

pub struct AuthService {
    secret: Vec<u8>,
    policy: Arc<dyn LoginPolicy>,
}

impl AuthService {
    pub fn new(secret: &[u8], policy: Arc<dyn LoginPolicy>) -> AuthService {
        AuthService {
            secret: secret.to_vec(),
            policy,
        }
    }

    /// Handles one ingress addressed to auth on the session's own core, and
    /// returns the new binding when it logged the session in.
    /// `now_unix_s` is the wall clock for token expiry; sessions the policy
    /// displaced are appended to `kicks` for the driver (they may live on
    /// other cores).
    pub fn handle(
        &self,
        gateway: &mut GatewayCore,
        ingress: &Ingress<'_>,
        now: Instant,
        now_unix_s: u64,
        kicks: &mut Vec<u64>,
    ) -> Option<super::Binding> {
        let reply = |gateway: &mut GatewayCore,
                     kind: FrameKind,
                     epoch: u32,
                     player_id: u64,
                     body: &[u8]| {
            let _ = gateway.egress(
                &EgressRef {
                    session_id: ingress.session_id,
                    session_epoch: epoch,
                    player_id,
                    kind: kind as u8,
                    route_id: ingress.route_id,
                    seq: ingress.seq,
                    body,
                },
                now,
            );
        };
        let epoch = ingress.binding.session_epoch;
        let player = ingress.binding.player_id;
        let fail = |gateway: &mut GatewayCore, code: ErrorCode, reason: &str| {
            reply(
                gateway,
                FrameKind::Error,
                epoch,
                player,
                &encode_error_body(code, reason),
            );
        };
        match ingress.route_id {
            route::SYS_PING => {
                reply(gateway, FrameKind::Response, epoch, player, ingress.body);
                None
            }
            route::AUTH_LOGIN => {
                let player_id = match wire::token::verify(&self.secret, ingress.body, now_unix_s) {
                    Ok(player_id) => player_id,
                    Err(error) => {
                        fail(gateway, ErrorCode::AuthFailed, &error.to_string());
                        return None;
                    }
                };
                let kick = match self.policy.admit(player_id, ingress.session_id) {
                    LoginDecision::Admit { kick } => kick,
                    LoginDecision::Reject { reason } => {
                        fail(gateway, ErrorCode::AuthFailed, reason);
                        return None;
                    }
                };
                match gateway.apply_binding(ingress.session_id, Target::Player, player_id, epoch) {
                    Ok(binding) => {
                        kicks.extend(kick);
                        reply(
                            gateway,
                            FrameKind::Response,
                            binding.session_epoch,
                            player_id,
                            &player_id.to_le_bytes(),
                        );
                        Some(binding)
                    }
                    Err(_) => {
                        // Lost the epoch race (counted by apply_binding): the
                        // answer would be stale anyway; the client gets
                        // TIMEOUT. Undo the registration, kick nobody.
                        self.policy.release(player_id, ingress.session_id);
                        None
                    }
                }
            }
            // The route table lets only the two routes above reach a
            // session that is not logged in.
            _ => {
                fail(gateway, ErrorCode::BadRequest, "not an auth route");
                None
            }
        }
    }
}
