"""Typed failures, each marked retry-safe or not as docs/protocol.md's
table "Which failures are safe to retry" (section 4) says."""

from __future__ import annotations

from .protocol import Code

#: Codes after which the request changed nothing (section 4's table).
_NOT_APPLIED = frozenset(
    {
        Code.UNKNOWN_ROUTE,
        Code.DIRECTION_REJECTED,
        Code.AUTH_REQUIRED,
        Code.AUTH_FAILED,
        Code.BAD_REQUEST,
        Code.OVERLOADED,
    }
)


class RouterdError(Exception):
    """A failed request or connection.

    `retry_safe` is True only when the request certainly did not take
    effect; a False one is "maybe applied" (a retried `player.incr` may
    count twice).
    """

    code: int | None = None
    name: str = "ERROR"
    retry_safe: bool = False

    def __init__(self, reason: str = "") -> None:
        super().__init__(f"{self.name}: {reason}" if reason else self.name)
        self.reason = reason


class ServerError(RouterdError):
    """An ERROR frame: the protocol's code and reason."""

    def __init__(self, code: int, reason: str = "") -> None:
        self.code = code
        try:
            self.name = Code(code).name
        except ValueError:
            self.name = f"CODE_{code}"
        self.retry_safe = code in _NOT_APPLIED
        super().__init__(reason)


class UnknownRoute(ServerError): ...


class DirectionRejected(ServerError): ...


class AuthRequired(ServerError): ...


class AuthFailed(ServerError): ...


class BadRequest(ServerError): ...


class Overloaded(ServerError): ...


class Unavailable(ServerError): ...


class ServerTimeout(ServerError): ...


class Internal(ServerError): ...


_BY_CODE: dict[int, type[ServerError]] = {
    Code.UNKNOWN_ROUTE: UnknownRoute,
    Code.DIRECTION_REJECTED: DirectionRejected,
    Code.AUTH_REQUIRED: AuthRequired,
    Code.AUTH_FAILED: AuthFailed,
    Code.BAD_REQUEST: BadRequest,
    Code.OVERLOADED: Overloaded,
    Code.UNAVAILABLE: Unavailable,
    Code.TIMEOUT: ServerTimeout,
    Code.INTERNAL: Internal,
}


def server_error(code: int, reason: str) -> ServerError:
    """The typed exception of an ERROR frame; a code this client does not
    know is a plain `ServerError`, maybe applied."""
    return _BY_CODE.get(code, ServerError)(code, reason)


class ConnectionLost(RouterdError):
    """The connection closed before the answer came: maybe applied."""

    name = "CONNECTION_LOST"


class RequestTimeout(RouterdError):
    """No answer within the client's own timeout: maybe applied."""

    name = "CLIENT_TIMEOUT"


class NotSent(RouterdError):
    """Refused before it was sent (the client is closed or could not
    reconnect): not applied."""

    name = "NOT_SENT"
    retry_safe = True


class Kicked(RouterdError):
    """The server sent `sys.kicked` and closed the connection; the reason is
    its text (`token expired` when the login's token expired)."""

    name = "KICKED"


class ProtocolViolation(RouterdError):
    """The server broke the framing rules; the client closed the
    connection."""

    name = "PROTOCOL_VIOLATION"
