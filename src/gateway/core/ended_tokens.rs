//! The tokens of resumable sessions that ended while a resume could still
//! come (their window passed, they were kicked): a resume with one is told
//! why (`resume window expired`, `session kicked`...) rather than `unknown
//! session`, for a while after (docs/protocol.md, section 12).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::resume::{ResumeRefusal, ResumeToken, TokenEvent};
use super::FastMap;

/// One core's ended tokens, at most `max` of them: past it the oldest is
/// forgotten first. Sessions end as fast as clients log in and drop (a
/// `kick_old` login loop ends one a login), and each token stayed a minute
/// at least: without the bound their memory grew with the login rate.
#[derive(Default)]
pub(super) struct EndedTokens {
    /// What a resume with each is told, and since when (`None`: stamped
    /// by the next prune).
    refusals: FastMap<ResumeToken, (ResumeRefusal, Option<Instant>)>,
    /// The tokens in the order they ended, oldest first; a token pruned
    /// since is skipped when its turn comes.
    order: VecDeque<ResumeToken>,
}

impl EndedTokens {
    /// What a resume with `token` is told, if it ended here.
    pub(super) fn refusal(&self, token: &ResumeToken) -> Option<ResumeRefusal> {
        self.refusals.get(token).map(|(refusal, _)| *refusal)
    }

    /// Remembers `token` as ended at `at` with `refusal`, forgetting the
    /// oldest past `max` (their forgetting goes to `events`).
    pub(super) fn insert(
        &mut self,
        (token, refusal, at): (ResumeToken, ResumeRefusal, Option<Instant>),
        max: usize,
        events: &mut Vec<TokenEvent>,
    ) {
        if self.refusals.insert(token, (refusal, at)).is_none() {
            self.order.push_back(token);
        }
        while self.refusals.len() > max.max(1) {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if self.refusals.remove(&oldest).is_some() {
                events.push(TokenEvent::Forgotten(oldest));
            }
        }
    }

    /// Forgets the tokens remembered for `memory` at `now`.
    pub(super) fn prune(&mut self, now: Instant, memory: Duration, events: &mut Vec<TokenEvent>) {
        self.refusals.retain(|token, (_, at)| {
            let keep = now.saturating_duration_since(*at.get_or_insert(now)) < memory;
            if !keep {
                events.push(TokenEvent::Forgotten(*token));
            }
            keep
        });
        let refusals = &self.refusals;
        self.order.retain(|token| refusals.contains_key(token));
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.refusals.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_bound_the_oldest_token_is_forgotten_first() {
        let mut ended = EndedTokens::default();
        let mut events = Vec::new();
        for n in 0..5u8 {
            ended.insert(([n; 16], ResumeRefusal::Kicked, None), 3, &mut events);
        }
        assert_eq!(ended.len(), 3);
        assert_eq!(ended.refusal(&[0; 16]), None);
        assert_eq!(ended.refusal(&[1; 16]), None);
        assert_eq!(ended.refusal(&[4; 16]), Some(ResumeRefusal::Kicked));
        let forgotten: Vec<_> = events
            .iter()
            .map(|event| match event {
                TokenEvent::Forgotten(token) => token[0],
                TokenEvent::Held(..) => panic!("{event:?}"),
            })
            .collect();
        assert_eq!(forgotten, vec![0, 1]);
        // Pruned tokens leave the order too: the bound counts the live ones.
        let now = Instant::now();
        ended.prune(now, Duration::from_secs(60), &mut events);
        ended.prune(
            now + Duration::from_secs(61),
            Duration::from_secs(60),
            &mut events,
        );
        assert_eq!(ended.len(), 0);
        assert!(ended.order.is_empty());
    }
}
