//! `--resume`: sessions log in with a version-2 `auth.login`, keep the
//! resume token of their `sys.session` PUSH and the highest push sequence
//! number they received, and a connection that ends under the run (cut on
//! purpose with `--cut-every`, closed by the server, a node that went away)
//! comes back with `auth.resume` instead of a login (docs/protocol.md,
//! section 12). The server then delivers every push after the last one the
//! client had, once, in order: the ledger checks it push by push, and its
//! `push_gaps` and `push_duplicates` must stay 0.
//!
//! A refused resume (`resume window expired`, `unknown session`, `pushes
//! lost`, anything else) falls back to a fresh login on the same
//! connection; the pushes the old session had not delivered are gone then,
//! which is what the refusal says, so they are not counted as gaps.

use std::fmt::Write as _;

use serde::Serialize;

/// Bytes of a resume token.
pub const TOKEN_LEN: usize = 16;

/// A session's resume token: a secret of the session, never printed.
pub type Token = [u8; TOKEN_LEN];

/// What the run's resumes came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ResumeLedger {
    /// Connections cut abortively on purpose (`--cut-every`).
    pub cuts: u64,
    /// `auth.resume` requests sent.
    pub attempted: u64,
    /// Resumes answered with the session's player.
    pub resumed: u64,
    /// Refusals by their reason.
    pub refused_expired: u64,
    pub refused_unknown_session: u64,
    pub refused_pushes_lost: u64,
    /// Refused with another error (a code or reason the protocol does not
    /// list for `auth.resume`).
    pub refused_other: u64,
    /// Fresh logins after a refused resume.
    pub fresh_logins: u64,
    /// Pushes that came right behind a resume's answer, in the same read:
    /// the kept pushes the server delivered again (a lower bound, since a
    /// long replay may take more than one read).
    pub pushes_replayed: u64,
    /// Numbered pushes checked against the session's sequence.
    pub pushes_checked: u64,
    /// Pushes skipped: a push numbered past the next expected one (the
    /// skipped ones were never delivered). Exactly-once forbids it.
    pub push_gaps: u64,
    /// Pushes numbered at or below one already received: delivered twice.
    /// Exactly-once forbids it.
    pub push_duplicates: u64,
}

/// Why the server refused an `auth.resume`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Expired,
    UnknownSession,
    PushesLost,
    Other,
}

impl Refusal {
    /// An `auth.resume` ERROR: `AUTH_FAILED` with the reasons of
    /// docs/protocol.md's table, anything else is `Other`.
    pub fn of(code: u16, reason: &str) -> Refusal {
        const AUTH_FAILED: u16 = wire::client::ErrorCode::AuthFailed as u16;
        match (code, reason) {
            (AUTH_FAILED, "resume window expired") => Refusal::Expired,
            (AUTH_FAILED, "unknown session") => Refusal::UnknownSession,
            (AUTH_FAILED, "pushes lost") => Refusal::PushesLost,
            _ => Refusal::Other,
        }
    }
}

/// The token of a `sys.session` PUSH's body (the token, then `u32
/// resume_window_ms`); `None` if the body does not fit.
pub fn parse_offer(body: &[u8]) -> Option<Token> {
    let (token, window) = body.split_first_chunk::<TOKEN_LEN>()?;
    (window.len() == 4).then_some(*token)
}

impl ResumeLedger {
    pub fn refused(&mut self, refusal: Refusal) {
        let count = match refusal {
            Refusal::Expired => &mut self.refused_expired,
            Refusal::UnknownSession => &mut self.refused_unknown_session,
            Refusal::PushesLost => &mut self.refused_pushes_lost,
            Refusal::Other => &mut self.refused_other,
        };
        *count += 1;
    }

    pub fn refusals(&self) -> u64 {
        self.refused_expired
            + self.refused_unknown_session
            + self.refused_pushes_lost
            + self.refused_other
    }

    /// What breaks exactly-once delivery of pushes, in words; `None` when
    /// nothing does.
    pub fn violation(&self) -> Option<String> {
        if self.push_gaps == 0 && self.push_duplicates == 0 {
            return None;
        }
        Some(format!(
            "{} pushes skipped and {} delivered twice in a session's sequence \
             (--resume promises every push once, in order)",
            self.push_gaps, self.push_duplicates
        ))
    }

    /// The report's line.
    pub fn row(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "  resume        cuts {}  attempted {}  resumed {}  refused {} (expired {}, unknown \
             session {}, pushes lost {}, other {})  fresh logins {}",
            self.cuts,
            self.attempted,
            self.resumed,
            self.refusals(),
            self.refused_expired,
            self.refused_unknown_session,
            self.refused_pushes_lost,
            self.refused_other,
            self.fresh_logins
        );
        let _ = writeln!(
            out,
            "  push seq      checked {}  replayed {}  gaps {}  duplicates {}",
            self.pushes_checked, self.pushes_replayed, self.push_gaps, self.push_duplicates
        );
        out
    }

    pub fn merge(&mut self, other: &ResumeLedger) {
        self.cuts += other.cuts;
        self.attempted += other.attempted;
        self.resumed += other.resumed;
        self.refused_expired += other.refused_expired;
        self.refused_unknown_session += other.refused_unknown_session;
        self.refused_pushes_lost += other.refused_pushes_lost;
        self.refused_other += other.refused_other;
        self.fresh_logins += other.fresh_logins;
        self.pushes_replayed += other.pushes_replayed;
        self.pushes_checked += other.pushes_checked;
        self.push_gaps += other.push_gaps;
        self.push_duplicates += other.push_duplicates;
    }
}

/// One connection's resumable session: its token once the server offered
/// one, and the highest push number received.
#[derive(Debug, Default)]
pub struct Resumable {
    token: Option<Token>,
    last_push_seq: u32,
    /// A resume was just answered: the pushes decoded right behind the
    /// answer, in the same read, are the server's replay.
    replaying: bool,
}

impl Resumable {
    /// The server offered resuming with `token` (a `sys.session` PUSH): a
    /// new session, which numbers its pushes from 1.
    pub fn offered(&mut self, token: Token) {
        self.token = Some(token);
        self.last_push_seq = 0;
    }

    /// The `auth.resume` body (after the request key): the token and the
    /// last push received; `None` without a session to resume.
    pub fn resume_body(&self) -> Option<[u8; TOKEN_LEN + 4]> {
        let token = self.token?;
        let mut body = [0; TOKEN_LEN + 4];
        body[..TOKEN_LEN].copy_from_slice(&token);
        body[TOKEN_LEN..].copy_from_slice(&self.last_push_seq.to_le_bytes());
        Some(body)
    }

    /// The session is gone (refused, or the connection moves to another
    /// player or node): the next connection logs in afresh.
    pub fn forget(&mut self) {
        *self = Resumable::default();
    }

    /// The resume was answered: what follows in this read is the replay.
    pub fn resumed(&mut self) {
        self.replaying = true;
    }

    /// The read is over: later pushes are new ones.
    pub fn read_done(&mut self) {
        self.replaying = false;
    }

    #[cfg(test)]
    pub fn last_push_seq(&self) -> u32 {
        self.last_push_seq
    }

    /// A PUSH numbered `seq` arrived. Seq 0 is an unnumbered push (a
    /// version-1 session, or a server with resuming off): nothing to check.
    pub fn pushed(&mut self, seq: u32, ledger: &mut ResumeLedger) {
        if seq == 0 || self.token.is_none() {
            return;
        }
        ledger.pushes_checked += 1;
        if self.replaying {
            ledger.pushes_replayed += 1;
        }
        // Numbering wraps past 0 after 2^32 pushes (the server's too).
        let expected = self.last_push_seq.checked_add(1).unwrap_or(1);
        if seq == expected {
            self.last_push_seq = seq;
        } else if seq < expected {
            ledger.push_duplicates += 1;
        } else {
            ledger.push_gaps += u64::from(seq - expected);
            self.last_push_seq = seq;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(token_byte: u8) -> Resumable {
        let mut session = Resumable::default();
        let mut body = vec![token_byte; TOKEN_LEN];
        body.extend_from_slice(&30_000u32.to_le_bytes());
        session.offered(parse_offer(&body).expect("a token and a window"));
        session
    }

    #[test]
    fn the_token_and_the_last_push_make_the_resume_body() {
        assert_eq!(
            Resumable::default().resume_body(),
            None,
            "nothing to resume yet"
        );
        assert_eq!(parse_offer(&[1; TOKEN_LEN]), None, "no window");
        assert_eq!(parse_offer(&[1; TOKEN_LEN + 5]), None, "a byte too many");
        let mut session = offered(9);
        let mut ledger = ResumeLedger::default();
        session.pushed(1, &mut ledger);
        session.pushed(2, &mut ledger);
        let body = session.resume_body().expect("a session");
        assert_eq!(&body[..TOKEN_LEN], &[9; TOKEN_LEN]);
        assert_eq!(body[TOKEN_LEN..], 2u32.to_le_bytes());
        session.forget();
        assert_eq!(session.resume_body(), None);
    }

    #[test]
    fn a_skipped_or_repeated_push_number_is_counted() {
        let mut session = offered(1);
        let mut ledger = ResumeLedger::default();
        for seq in [1, 2, 2, 5, 3, 6] {
            session.pushed(seq, &mut ledger);
        }
        // 3 and 4 skipped by 5; the second 2 and the late 3 repeated.
        assert_eq!(
            (
                ledger.pushes_checked,
                ledger.push_gaps,
                ledger.push_duplicates
            ),
            (6, 2, 2)
        );
        assert_eq!(session.last_push_seq(), 6);
        assert!(ledger.violation().is_some());
        // Unnumbered pushes, and pushes before any offer, are not checked.
        session.pushed(0, &mut ledger);
        Resumable::default().pushed(7, &mut ledger);
        assert_eq!(ledger.pushes_checked, 6);
    }

    #[test]
    fn a_new_offer_numbers_from_one_and_only_the_replay_counts_as_replayed() {
        let mut session = offered(1);
        let mut ledger = ResumeLedger::default();
        session.pushed(1, &mut ledger);
        session.resumed();
        session.pushed(2, &mut ledger);
        session.pushed(3, &mut ledger);
        session.read_done();
        session.pushed(4, &mut ledger);
        session.offered([2; TOKEN_LEN]);
        session.pushed(1, &mut ledger);
        assert_eq!(ledger.pushes_replayed, 2);
        assert_eq!(ledger.violation(), None);
    }

    #[test]
    fn refusals_are_told_apart_by_their_reason() {
        let auth_failed = wire::client::ErrorCode::AuthFailed as u16;
        let mut ledger = ResumeLedger::default();
        for (code, reason) in [
            (auth_failed, "resume window expired"),
            (auth_failed, "unknown session"),
            (auth_failed, "pushes lost"),
            (auth_failed, "something new"),
            (7, "unknown session"),
        ] {
            ledger.refused(Refusal::of(code, reason));
        }
        assert_eq!(
            (
                ledger.refused_expired,
                ledger.refused_unknown_session,
                ledger.refused_pushes_lost,
                ledger.refused_other
            ),
            (1, 1, 1, 2)
        );
        assert_eq!(ledger.refusals(), 5);
    }
}
