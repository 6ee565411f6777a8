//! The handshake: a session from its `auth.login` to its binding. The
//! player object decides a login; until it does, the session's further
//! requests are held, and released in order once the login ends.

use std::time::Instant;

use wire::client::{encode_error_body, ErrorCode, FrameKind, Header};

use super::egress::{error_code_of, Answered};
use super::{GatewayCore, PushError};
use crate::gateway::session::{Binding, EpochExpired, Target};
use crate::gateway::{Notice, NoticeKind};

/// Why a bind failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("unknown session")]
    UnknownSession,
    #[error(transparent)]
    EpochExpired(#[from] EpochExpired),
}

/// A login of one session waiting for the player object.
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingLogin {
    /// The `auth.login` request's seq.
    pub(super) seq: u32,
    pub(super) player_id: u64,
}

/// A request read while its session's login was pending: header and body,
/// replayed through `on_request` when the login ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldFrame {
    pub header: Header,
    pub body: Vec<u8>,
    /// The request key of a version-2 REQUEST, `None` for version 1.
    pub request_key: Option<u64>,
}

/// How a login the player object decided ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoginOutcome<'a> {
    /// The player object bound the session as `player_id`, under the
    /// epoch `begin_login` returned: bind it here too.
    Admitted { player_id: u64, session_epoch: u32 },
    /// Answer this ERROR; the session stays logged out.
    Refused(ErrorCode, &'a str),
}

impl GatewayCore {
    /// Starts the login of `session_id` as `player_id` by its in-flight
    /// `auth.login` request `seq` (the token was verified): the player
    /// object decides (duplicate logins are decided there, cluster-wide),
    /// and until `complete_login` the session's further requests wait.
    /// Returns the epoch the session will have once bound (the player
    /// object addresses its pushes with it), or `None` if the session is
    /// gone or already logging in.
    pub fn begin_login(&mut self, session_id: u64, seq: u32, player_id: u64) -> Option<u32> {
        let entry = self.sessions.get_mut(&session_id)?;
        if entry.login().is_some() || !entry.session.is_live() {
            return None;
        }
        // An offer of resuming left by an earlier login that never ended
        // (it timed out) is not this login's: a version-2 one offers anew.
        if entry
            .resume
            .as_ref()
            .is_some_and(|resume| resume.is_offer())
        {
            entry.resume = None;
        }
        entry.transit().login = Some(PendingLogin { seq, player_id });
        entry.session.session_epoch.checked_add(1)
    }

    /// The player object's decision on the login `seq` of `session_id`:
    /// binds the session (the epoch compare-and-set) and answers the login
    /// with the player id, or answers the refusal. Requests held meanwhile
    /// are released for the driver to replay (`take_released`). Returns the
    /// new binding, if the session was bound. A decision for a login that
    /// is no longer pending (timed out, session closed) is dropped and
    /// counted as a late answer (`late_login`).
    pub fn complete_login(
        &mut self,
        session_id: u64,
        seq: u32,
        outcome: LoginOutcome<'_>,
        now: Instant,
    ) -> Option<Binding> {
        let pending = self
            .sessions
            .get(&session_id)
            .and_then(|entry| entry.login())
            .filter(|pending| pending.seq == seq);
        let (Some(pending), Some(entry)) = (pending, self.sessions.get_mut(&session_id)) else {
            return self.late_login(session_id, outcome);
        };
        let transit = entry.transit();
        transit.login = None;
        if !transit.held.is_empty() {
            self.released.push(session_id);
        }
        entry.settle();
        let Some(inflight) = entry.inflight.remove(seq) else {
            return self.late_login(session_id, outcome);
        };
        let epoch = entry.session.session_epoch;
        let (kind, body, binding) = match outcome {
            LoginOutcome::Admitted { .. } => {
                match self.apply_binding(session_id, Target::Services, pending.player_id, epoch) {
                    Ok(binding) => (
                        FrameKind::Response,
                        pending.player_id.to_le_bytes().to_vec(),
                        Some(binding),
                    ),
                    // Nothing else binds a session while its login is
                    // pending; a failed bind is a bug, answered as one.
                    Err(_) => (
                        FrameKind::Error,
                        encode_error_body(ErrorCode::Internal, ""),
                        None,
                    ),
                }
            }
            LoginOutcome::Refused(code, reason) => {
                (FrameKind::Error, encode_error_body(code, reason), None)
            }
        };
        if let Some((route_index, _)) = self.routes.lookup_indexed(inflight.route_id) {
            let answered = Answered {
                route_index,
                deadline: inflight.deadline,
                answer_slot: crate::metrics::answer_slot(error_code_of(kind, &body)),
            };
            self.record_latency(answered, now);
        }
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return binding;
        };
        let pushed = entry.outbox.push_frame(kind, inflight.route_id, seq, &body);
        if pushed == Err(PushError::Full) {
            self.close_slow_reader(session_id);
            return binding;
        }
        self.settle_resume_offer(session_id, binding.is_some());
        binding
    }

    /// The player object's decision on a login that already ended here: it
    /// timed out, or its session closed. An admission left the player
    /// object bound to a session this gateway never bound, so no close
    /// will ever unbind it: under `single` the player could not log in
    /// again, and its pushes would go nowhere. An `Unbound` notice for that
    /// binding undoes it (the player object drops only the very binding it
    /// names), unless a later login of the same session holds, or is about
    /// to hold, that same binding.
    fn late_login(&mut self, session_id: u64, outcome: LoginOutcome<'_>) -> Option<Binding> {
        self.metrics.gateway.late_answers.inc();
        let LoginOutcome::Admitted {
            player_id,
            session_epoch,
        } = outcome
        else {
            return None;
        };
        let binding = Binding {
            target: Target::Services,
            player_id,
            session_epoch,
        };
        if self.release_unless_bound(session_id, binding) {
            self.metrics.gateway.late_logins_undone.inc();
        }
        None
    }

    /// A target asks whether `session_id` is still bound as `bound` (a
    /// player object that refused a login under `single` because of it).
    /// One that is not (closed, never bound, bound again since, or unknown
    /// to this start of the node: session ids name their start) is
    /// released: an `Unbound` notice lets the target forget it.
    pub fn check_session(&mut self, session_id: u64, bound: Binding) {
        if self.release_unless_bound(session_id, bound) {
            self.metrics.gateway.stale_sessions_released.inc();
        }
    }

    /// A push met no session holding the binding it named (unknown
    /// session, stale epoch, another player): whoever pushed still counts
    /// that session as its player's, after a close whose unbind was lost,
    /// or from before this node restarted. The player is told, as a session
    /// check tells it (`check_session`), unless the session is about to
    /// hold that binding.
    pub(super) fn release_pushed_binding(&mut self, push: &super::egress::EgressRef<'_>) {
        if push.player_id == 0 {
            return;
        }
        let binding = Binding {
            target: Target::Services,
            player_id: push.player_id,
            session_epoch: push.session_epoch,
        };
        self.check_session(push.session_id, binding);
    }

    /// Queues an `Unbound` notice for `binding` of `session_id` unless the
    /// session holds that binding, or is about to (a login of the same
    /// player pending: it makes the same binding). Whether it did.
    fn release_unless_bound(&mut self, session_id: u64, binding: Binding) -> bool {
        if let Some(entry) = self.sessions.get(&session_id) {
            let rebinding = entry
                .login()
                .is_some_and(|login| login.player_id == binding.player_id);
            if rebinding || entry.session.binding() == binding {
                return false;
            }
        }
        self.notices.push(Notice {
            kind: NoticeKind::Unbound,
            session_id,
            binding,
        });
        true
    }

    /// Sessions whose held requests the driver must replay now, with the
    /// requests, in arrival order.
    pub fn take_released(&mut self, into: &mut Vec<(u64, Vec<HeldFrame>)>) {
        for session_id in std::mem::take(&mut self.released) {
            if let Some(entry) = self.sessions.get_mut(&session_id) {
                if entry.login().is_none() {
                    let held = entry
                        .transit
                        .as_mut()
                        .map(|transit| std::mem::take(&mut transit.held))
                        .unwrap_or_default();
                    into.push((session_id, held));
                    entry.settle();
                }
            }
        }
    }

    /// The bind CAS (`apply_binding` in docs/origins.md) on one session,
    /// counted: `binds` for a winner, `binds_epoch_expired` for a loser.
    pub fn apply_binding(
        &mut self,
        session_id: u64,
        target: Target,
        player_id: u64,
        expected_epoch: u32,
    ) -> Result<Binding, BindError> {
        let entry = self
            .sessions
            .get_mut(&session_id)
            .ok_or(BindError::UnknownSession)?;
        match entry
            .session
            .apply_binding(target, player_id, expected_epoch)
        {
            Ok(binding) => {
                self.metrics.gateway.binds.inc();
                Ok(binding)
            }
            Err(expired) => {
                self.metrics.gateway.binds_epoch_expired.inc();
                tracing::warn!(session_id, %expired, "bind lost the epoch race");
                Err(expired.into())
            }
        }
    }
}
