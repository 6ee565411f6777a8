"""asyncio client for routerd (docs/protocol.md; version 2 when the server
speaks it, see `Client`'s `exactly_once`).

    client = await Client.connect("tcp://127.0.0.1:7400", token)
    await client.player_incr(5)
"""

from .client import SESSION_KICKED, TOKEN_EXPIRED, Backoff, Client, TokenSource
from .errors import (
    AuthFailed,
    AuthRequired,
    BadRequest,
    ConnectionLost,
    DirectionRejected,
    Internal,
    Kicked,
    NotSent,
    Overloaded,
    ProtocolViolation,
    RequestTimeout,
    RouterdError,
    ServerError,
    ServerTimeout,
    Unavailable,
    UnknownRoute,
    server_error,
)
from .protocol import (
    Code,
    Frame,
    FrameDecoder,
    FrameError,
    Kind,
    Redirect,
    RoomMessage,
    Route,
    Session,
    encode_frame,
    encode_keyed_request,
)
from .retry import Retry, random_key
from .token import mint_token, token_for

__all__ = [
    "AuthFailed",
    "AuthRequired",
    "Backoff",
    "BadRequest",
    "Client",
    "Code",
    "ConnectionLost",
    "DirectionRejected",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "Internal",
    "Kicked",
    "Kind",
    "NotSent",
    "Overloaded",
    "ProtocolViolation",
    "Redirect",
    "RequestTimeout",
    "Retry",
    "RoomMessage",
    "Route",
    "RouterdError",
    "SESSION_KICKED",
    "ServerError",
    "ServerTimeout",
    "Session",
    "TOKEN_EXPIRED",
    "TokenSource",
    "Unavailable",
    "UnknownRoute",
    "encode_frame",
    "encode_keyed_request",
    "mint_token",
    "random_key",
    "server_error",
    "token_for",
]
