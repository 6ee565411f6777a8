"""The frame codec of docs/protocol.md, sans-IO: bytes in, frames out.

Nothing here touches a socket, so the test vectors of the document check it
directly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

MAGIC = b"RT"
VERSION = 1
#: The version of a keyed REQUEST (section 12): a u64 request key before the
#: route's body.
VERSION_KEYED = 2
#: The bytes a request key adds to a body.
KEY_LEN = 8
#: A resume token's bytes (section 12).
RESUME_TOKEN_LEN = 16
HEADER_LEN = 16
#: The largest body the client accepts by default: the server's default
#: `gateway.max_body`, and so the longest body it sends (section 1).
MAX_BODY_DEFAULT = 65536
#: The server's default `gateway.max_inflight` (section 3).
INFLIGHT_MAX_DEFAULT = 1024
#: `room.say` text, in bytes (section 8).
SAY_TEXT_MAX = 1024

_HEADER = struct.Struct("<2sBBIII")


class Kind(IntEnum):
    REQUEST = 1
    RESPONSE = 2
    PUSH = 3
    ERROR = 4


class Route(IntEnum):
    SYS_PING = 1
    AUTH_LOGIN = 2
    AUTH_RESUME = 3
    PLAYER_GET = 10
    PLAYER_INCR = 11
    ROOM_JOIN = 20
    ROOM_LEAVE = 21
    ROOM_SAY = 22
    ROOM_MESSAGE = 100
    SYS_KICKED = 101
    SYS_REDIRECT = 102
    SYS_SESSION = 103


class Code(IntEnum):
    UNKNOWN_ROUTE = 1
    DIRECTION_REJECTED = 2
    AUTH_REQUIRED = 3
    AUTH_FAILED = 4
    BAD_REQUEST = 5
    OVERLOADED = 6
    UNAVAILABLE = 7
    TIMEOUT = 8
    INTERNAL = 9


@dataclass(frozen=True)
class Frame:
    kind: int
    route_id: int
    seq: int
    body: bytes


class FrameError(Exception):
    """The peer broke the framing rules: the connection must close."""


def encode_frame(kind: int, route_id: int, seq: int, body: bytes = b"") -> bytes:
    return _HEADER.pack(MAGIC, VERSION, kind, route_id, seq, len(body)) + body


def encode_keyed_request(route_id: int, seq: int, key: int, body: bytes = b"") -> bytes:
    """A version-2 REQUEST (section 12): the u64 request key (0 = no key),
    then the route's body; `body_len` counts both."""
    keyed = struct.pack("<Q", key) + body
    return _HEADER.pack(MAGIC, VERSION_KEYED, Kind.REQUEST, route_id, seq, len(keyed)) + keyed


class FrameDecoder:
    """The stream decoder of section 1, for frames a server sends.

    `feed` takes bytes as they arrive; `frames` yields every complete frame.
    A frame whose magic, version or kind is not version 1's, or whose body
    is longer than `max_body`, raises `FrameError` (section 1: a frame a
    receiver does not know is a violation, never skipped).
    """

    def __init__(self, max_body: int = MAX_BODY_DEFAULT) -> None:
        self._buffer = bytearray()
        self._max_body = max_body

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def buffered(self) -> int:
        return len(self._buffer)

    def next_frame(self) -> Frame | None:
        if len(self._buffer) < HEADER_LEN:
            return None
        magic, version, kind, route_id, seq, body_len = _HEADER.unpack_from(self._buffer)
        if magic != MAGIC:
            raise FrameError(f"bad magic {magic!r}")
        if version != VERSION:
            raise FrameError(f"unsupported version {version}")
        if kind not in (Kind.RESPONSE, Kind.PUSH, Kind.ERROR):
            raise FrameError(f"kind {kind} is not one a server sends")
        if body_len > self._max_body:
            raise FrameError(f"body_len {body_len} exceeds max_body {self._max_body}")
        end = HEADER_LEN + body_len
        if len(self._buffer) < end:
            return None
        body = bytes(self._buffer[HEADER_LEN:end])
        del self._buffer[:end]
        return Frame(kind, route_id, seq, body)

    def frames(self) -> list[Frame]:
        out = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out


# Bodies of the built-in routes (sections 5 and 6).


def encode_i64(value: int) -> bytes:
    return struct.pack("<q", value)


def encode_u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def decode_i64(body: bytes) -> int:
    _exact(body, 8)
    return int(struct.unpack("<q", body)[0])


def decode_u64(body: bytes) -> int:
    _exact(body, 8)
    return int(struct.unpack("<Q", body)[0])


def decode_u32(body: bytes) -> int:
    _exact(body, 4)
    return int(struct.unpack("<I", body)[0])


def encode_say(room_id: int, text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > SAY_TEXT_MAX:
        raise ValueError(f"room.say text is {len(data)} bytes, more than {SAY_TEXT_MAX}")
    return encode_u64(room_id) + data


def encode_error(code: int, reason: str = "") -> bytes:
    return struct.pack("<H", code) + reason.encode("utf-8")


def decode_error(body: bytes) -> tuple[int, str]:
    if len(body) < 2:
        raise FrameError(f"ERROR body of {len(body)} bytes has no code")
    return int(struct.unpack_from("<H", body)[0]), body[2:].decode("utf-8", errors="replace")


@dataclass(frozen=True)
class RoomMessage:
    room_id: int
    from_player_id: int
    text: str


def decode_room_message(body: bytes) -> RoomMessage:
    if len(body) < 16:
        raise FrameError(f"room.message body of {len(body)} bytes")
    room_id, sender = struct.unpack_from("<QQ", body)
    return RoomMessage(room_id, sender, body[16:].decode("utf-8", errors="replace"))


def encode_room_message(message: RoomMessage) -> bytes:
    return struct.pack("<QQ", message.room_id, message.from_player_id) + message.text.encode()


@dataclass(frozen=True)
class Redirect:
    grace_ms: int
    #: `host:port` of another gateway, or "" when the server named none.
    gateway: str


def decode_redirect(body: bytes) -> Redirect:
    if len(body) < 4:
        raise FrameError(f"sys.redirect body of {len(body)} bytes")
    (grace_ms,) = struct.unpack_from("<I", body)
    return Redirect(grace_ms, body[4:].decode("utf-8", errors="replace"))


def encode_redirect(redirect: Redirect) -> bytes:
    return struct.pack("<I", redirect.grace_ms) + redirect.gateway.encode()


# Version 2 (section 12).


@dataclass(frozen=True)
class Session:
    """`sys.session`: the session's resume token and how long after a lost
    connection it resumes."""

    token: bytes
    window_ms: int


def decode_session(body: bytes) -> Session:
    _exact(body, RESUME_TOKEN_LEN + 4)
    (window_ms,) = struct.unpack_from("<I", body, RESUME_TOKEN_LEN)
    return Session(bytes(body[:RESUME_TOKEN_LEN]), window_ms)


def encode_session(session: Session) -> bytes:
    return session.token + struct.pack("<I", session.window_ms)


def encode_resume(token: bytes, last_push_seq: int) -> bytes:
    """`auth.resume`'s body: the resume token, then the highest push
    sequence number received."""
    if len(token) != RESUME_TOKEN_LEN:
        raise ValueError(f"a resume token is {RESUME_TOKEN_LEN} bytes, not {len(token)}")
    return token + struct.pack("<I", last_push_seq & 0xFFFFFFFF)


def _exact(body: bytes, size: int) -> None:
    if len(body) != size:
        raise FrameError(f"body of {len(body)} bytes where {size} were due")
