//! A connection's side of `--resume` (see `resume.rs`): the version-2
//! login, `auth.resume` on a new connection, its answer, and the check of
//! every numbered push.

use super::{Conn, Event, Kind, Phase, Verdict, Wire};
use crate::resume::{Refusal, Resumable};
use crate::stats::{Failure, Stats};

impl Conn {
    /// Logs in with version 2 so the server offers a resumable session,
    /// and resumes it after a lost connection (routerd only).
    pub fn with_resume(mut self, resume: bool) -> Conn {
        if let (Wire::Routerd(wire), true) = (&mut self.wire, resume) {
            wire.use_version_2_login();
            self.resumable = Some(Resumable::default());
        }
        self
    }

    /// On a new connection: sends `auth.resume` with the session's token
    /// and the last push received, if there is a session to take back
    /// (true); otherwise the caller logs in.
    pub fn start_resume(&mut self, now_ns: u64, stats: &mut Stats) -> bool {
        assert_eq!(self.phase, Phase::Idle);
        let Some(body) = self.resumable.as_ref().and_then(Resumable::resume_body) else {
            return false;
        };
        self.queue(Kind::Resume, &body, now_ns, false);
        self.phase = Phase::LoggingIn;
        stats.resume.attempted += 1;
        true
    }

    /// The session will not be taken back (the connection moves to another
    /// node or player): the next connection logs in afresh.
    pub fn forget_session(&mut self) {
        if let Some(resumable) = &mut self.resumable {
            resumable.forget();
        }
    }

    /// The highest push number received (0 without a resumable session).
    #[cfg(test)]
    pub fn last_push_seq(&self) -> u32 {
        self.resumable.as_ref().map_or(0, Resumable::last_push_seq)
    }

    /// Checks a PUSH's number against the session's sequence.
    pub(super) fn numbered_push(&mut self, push_seq: u32, stats: &mut Stats) {
        if let Some(resumable) = &mut self.resumable {
            resumable.pushed(push_seq, &mut stats.resume);
        }
    }

    /// The answer to `auth.resume`: the session is back (`Ready`, its
    /// rooms kept), or refused and the connection `Idle` to log in afresh.
    pub(super) fn apply_resume(
        &mut self,
        verdict: Verdict,
        stats: &mut Stats,
        events: &mut Vec<Event>,
    ) {
        if self.phase != Phase::LoggingIn {
            return;
        }
        let Some(resumable) = &mut self.resumable else {
            unreachable!("only a resumable connection sends auth.resume");
        };
        match verdict {
            Verdict::Ok { .. } => {
                stats.resume.resumed += 1;
                resumable.resumed();
                self.phase = Phase::Ready;
                events.push(Event::Resumed);
            }
            Verdict::Failed { failure, reason } => {
                let refusal = match failure {
                    Failure::Code(code) => Refusal::of(code, reason.as_deref().unwrap_or("")),
                    _ => Refusal::Other,
                };
                stats.resume.refused(refusal);
                resumable.forget();
                self.phase = Phase::Idle;
                events.push(Event::ResumeRefused);
            }
            Verdict::Malformed => {
                self.phase = Phase::Closed;
                events.push(Event::SetupFailed {
                    reason: "auth.resume: an answer that does not fit the request".to_string(),
                    transient: false,
                });
            }
        }
    }
}

#[cfg(test)]
#[path = "conn_resume_tests.rs"]
mod tests;
