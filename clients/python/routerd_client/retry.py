"""Exactly-once calls (docs/protocol.md, section 12): request keys, and
which failures a call is sent again after, with the same key."""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from .errors import NotSent, RouterdError, ServerError
from .protocol import Code

#: ERROR codes after which a request may have taken effect and a retry with
#: its key may succeed.
_MAYBE_APPLIED = frozenset({Code.UNAVAILABLE, Code.TIMEOUT, Code.INTERNAL})


@dataclass(frozen=True)
class Retry:
    """How a call is sent again: before retry n (from 0) the client sleeps
    a uniform random time in [0, min(max_delay_s, base_delay_s * 2**n)]
    (full jitter), until the call's deadline; one attempt waits at most
    `attempt_timeout_s` for its answer before it counts as a client-side
    timeout and is sent again."""

    base_delay_s: float = 0.02
    max_delay_s: float = 1.0
    attempt_timeout_s: float = 5.0

    def delay_s(self, retry: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * (2**retry)))


def random_key() -> int:
    """A fresh request key: 64 random bits, never 0 (0 is "no key")."""
    while True:
        key = secrets.randbits(64)
        if key:
            return key


def retryable(error: RouterdError, resend_is_safe: bool) -> bool:
    """Whether a failed attempt is sent again. OVERLOADED and a request
    never sent changed nothing, so any call is; a "maybe applied" failure
    (UNAVAILABLE, TIMEOUT, INTERNAL, a lost connection, a client-side
    timeout) only when the resend cannot apply twice: a keyed request, or an
    idempotent one. Anything else (a refusal, an application code) is the
    call's answer."""
    if isinstance(error, NotSent):
        return True
    if isinstance(error, ServerError):
        if error.code == Code.OVERLOADED:
            return True
        return resend_is_safe and error.code in _MAYBE_APPLIED
    # ConnectionLost, Kicked, RequestTimeout, ProtocolViolation: the
    # connection or the answer was lost.
    return resend_is_safe
