"""The asyncio client: one session on one gateway at a time, moved by
`sys.redirect` and reconnected after a lost connection. With `exactly_once`
(the default) it speaks protocol version 2 when the server does: keyed calls
retried until their deadline, and a lost session resumed (docs/protocol.md,
section 12)."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import ssl
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Union

from . import protocol as p
from .errors import (
    ConnectionLost,
    Kicked,
    NotSent,
    ProtocolViolation,
    RequestTimeout,
    RouterdError,
    ServerError,
    server_error,
)
from .retry import Retry, random_key, retryable
from .transport import Address, Transport, open_transport

log = logging.getLogger("routerd_client")

#: A token, or a function that returns one (called at every login, so a
#: reconnect or a redirect can log in with a fresh token).
TokenSource = Union[str, Callable[[], Union[str, Awaitable[str]]]]

#: The `sys.kicked` reason of a session whose token expired
#: (docs/protocol.md, section 2): the one kick after which reconnecting,
#: with a fresh token, is allowed. Also the reason an `auth.resume` is
#: refused for such a session kicked while its connection was lost.
TOKEN_EXPIRED = "token expired"

#: The reason an `auth.resume` is refused for a session kicked while its
#: connection was lost (a newer login of the player under `kick_old`, an
#: operator): the `sys.kicked` the client never read (section 12).
SESSION_KICKED = "session kicked"

EVENTS = (
    "room_message",
    "kicked",
    "redirect",
    "push",
    "disconnected",
    "reconnected",
    "resumed",
    "resume_failed",
    "closed",
)

#: `reconnect`'s default: `Backoff()` with `exactly_once`, none without.
_DEFAULT: Any = object()


@dataclass(frozen=True)
class Backoff:
    """Reconnect with full jitter: before attempt n (from 0) the client
    sleeps a uniform random time in [0, min(max_delay_s, base_delay_s * 2**n)]."""

    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    attempts_max: int = 20

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * (2**attempt)))


class _Connection:
    """One transport and the requests in flight on it."""

    def __init__(self, address: Address, transport: Transport, max_body: int, version: int) -> None:
        self.address = address
        self.transport = transport
        # The protocol version of its login: 2 sends keys, 1 none.
        self.version = version
        # The session was resumed on this connection rather than logged in.
        self.resumed = False
        self.decoder = p.FrameDecoder(max_body)
        # seq -> future; a future whose caller gave up (client timeout)
        # stays until its answer comes, so its seq is not reused early.
        self.pending: dict[int, asyncio.Future[bytes]] = {}
        self.next_seq = 1
        self.reader: asyncio.Task[None] | None = None
        self.kicked: str | None = None
        # Set once the client moves off this connection (redirect): its end
        # is then expected and fails nothing.
        self.retired = False
        self.moving_to: Address | None = None
        self.violation: str | None = None
        # It ended (the reader saw its end).
        self.ended = False
        # Its login (or resume) went out on it while it was open.
        self.login_sent = False
        # A frame came on it other than a frame-level refusal (route 0,
        # section 1).
        self.heard = False
        # Before any other frame, the refusal section 1 gives an unsupported
        # version: ERROR on route 0, BAD_REQUEST. At a version-2 login it
        # says the server does not speak version 2.
        self.version_refused = False

    def take_seq(self) -> int:
        # A u32 the server sees as unique among this connection's requests
        # in flight; bounded by inflight_max, so the scan ends.
        while True:
            seq = self.next_seq
            self.next_seq = (self.next_seq + 1) & 0xFFFFFFFF
            if seq not in self.pending:
                return seq


class _ClosedAtVersion2(ConnectionLost):
    """A version-2 connection the server closed right after its login went
    out, with no frame back but a frame-level refusal, on a client the
    server never answered in version 2; or, whatever the server answered
    before, with that refusal being section 1's for an unsupported version
    (a cluster rolled back to a build without version 2). What a server
    that does not speak version 2 does (section 12)."""


class _Sent:
    """What the attempts of one call sent."""

    # One went out with the request key: the call is never sent without it,
    # which could apply it twice.
    keyed = False
    # Sending it again could apply it twice: one went out without its key
    # (a version-1 server), or could not go with it.
    resend_unsafe = False


_KEY_NOT_CARRIED = (
    "not sent again: an earlier attempt went out with the request key, and the connection now "
    "speaks protocol version 1, which cannot carry it (the call may or may not have taken effect)"
)


class Client:
    """A routerd session. Create with `await Client.connect(...)`.

    `exactly_once` (default True): protocol version 2 when the server speaks
    it: request keys, retries of "maybe applied" failures with the same key
    until the call's deadline (`retry` says how), and resuming a lost
    session. False: version 1 exactly, every failure raised to the caller.
    `reconnect`: a `Backoff`, or None for no reconnects; by default
    `Backoff()` with `exactly_once`, none without."""

    def __init__(
        self,
        address: str,
        token: TokenSource,
        *,
        ssl_context: ssl.SSLContext | None = None,
        request_timeout_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        inflight_max: int = p.INFLIGHT_MAX_DEFAULT,
        max_body: int = p.MAX_BODY_DEFAULT,
        reconnect: Backoff | None = _DEFAULT,
        fallback_addresses: list[str] | None = None,
        rng: random.Random | None = None,
        exactly_once: bool = True,
        retry: Retry = Retry(),
    ) -> None:
        if inflight_max < 1:
            raise ValueError("inflight_max must be at least 1")
        self._address = Address.parse(address)
        self._fallbacks = [Address.parse(a) for a in fallback_addresses or []]
        self._token = token
        self._ssl = ssl_context
        self.request_timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self.inflight_max = inflight_max
        self._max_body = max_body
        self._exactly_once = exactly_once
        self._retry = retry
        if reconnect is _DEFAULT:
            reconnect = Backoff() if exactly_once else None
        self._reconnect: Backoff | None = reconnect
        # 2 once the server answered on a version-2 connection: from then on
        # a connection lost at a login is a lost connection, not a sign the
        # server does not speak version 2 (a node at its session cap closes
        # a new connection at once, as one that does not closes at a
        # version-2 login), unless the server said so: the route-0 refusal
        # of an unsupported version (section 1) right at the login, as after
        # the cluster was rolled back to a build without version 2. 1 once a
        # version-2 login was closed so and a version-1 one taken: kept
        # until the client is closed.
        self._server_version: int | None = None
        # The resumable session's `sys.session`, and the highest push
        # sequence number delivered from it.
        self._session: p.Session | None = None
        self._last_push_seq = 0
        self._rng = rng or random.Random()
        self._slots = asyncio.Semaphore(inflight_max)
        self._ready = asyncio.Event()
        self._conn: _Connection | None = None
        self._closed: RouterdError | None = None
        self._handlers: dict[str, list[Callable[..., Any]]] = {e: [] for e in EVENTS}
        self._background: set[asyncio.Task[Any]] = set()
        self.player_id: int | None = None
        #: Redirects followed and reconnects made, for callers and tests.
        self.redirects_followed = 0
        self.reconnects = 0

    @classmethod
    async def connect(cls, address: str, token: TokenSource, **options: Any) -> "Client":
        """Connects to `address` (`tcp://`, `tls://`, `ws://`, `wss://` or
        `host:port`) and logs in; raises `AuthFailed` and the like if the
        login is refused."""
        client = cls(address, token, **options)
        client._adopt(await client._open(client._address))
        return client

    @property
    def address(self) -> str:
        """The gateway the session is on now."""
        return str(self._conn.address if self._conn else self._address)

    @property
    def protocol_version(self) -> int:
        """The protocol version the client speaks: 2 when `exactly_once` and
        the server takes it, else 1."""
        if self._conn is not None:
            return self._conn.version
        return 2 if self._exactly_once and self._server_version != 1 else 1

    def inflight(self) -> int:
        return len(self._conn.pending) if self._conn else 0

    # Events.

    def on(self, event: str, handler: Callable[..., Any]) -> None:
        """Calls `handler` on `event`: `room_message` (RoomMessage), `kicked`
        (reason: the `sys.kicked` one, or `session kicked` or `token
        expired` when a refused resume said so), `redirect` (Redirect),
        `push` (every PUSH as a Frame, unknown routes included),
        `disconnected` (the error), `reconnected`
        (address, after every reconnect), `resumed` (address: the lost
        session was resumed, every push it missed arrives once and in
        order), `resume_failed` (the server's reason: the client logged in
        afresh, and pushes may have been lost; a refusal that says the
        session was kicked is a `kicked` instead), `closed` (the error or
        None). A coroutine handler runs as a task."""
        if event not in self._handlers:
            raise ValueError(f"unknown event {event!r}; events: {', '.join(EVENTS)}")
        self._handlers[event].append(handler)

    def _emit(self, event: str, *args: Any) -> None:
        for handler in self._handlers[event]:
            try:
                result = handler(*args)
                if inspect.isawaitable(result):
                    self._spawn(result)
            except Exception:  # a handler's fault must not end the session
                log.exception("handler of %s failed", event)

    def _spawn(self, awaitable: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(awaitable)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # Requests.

    async def call_json(self, route_id: int, value: object, **kw: Any) -> object:
        """One request on a JSON route (a scripted type's, docs/scripts.md):
        ``value`` sent as UTF-8 JSON, the RESPONSE decoded from JSON (None
        for an empty one; a body that is not JSON as its text)."""
        body = json.dumps(value, separators=(",", ":")).encode()
        answer = await self.call(route_id, body, **kw)
        if not answer:
            return None
        text = answer.decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text

    callJson = call_json

    async def call(
        self,
        route_id: int,
        body: bytes = b"",
        *,
        timeout_s: float | None = None,
        idempotent: bool = False,
        key: int | None = None,
    ) -> bytes:
        """One request on any route (a user object type's included): the
        RESPONSE body, or the ERROR as a typed exception. The timeout
        covers waiting for a slot (the in-flight bound), a redirect or a
        reconnect, and the answer.

        With `exactly_once` it covers the retries too: the call is sent with
        a request key (`key`, a u64 other than 0, or a fresh random one), and
        sent again with that key and body after a "maybe applied" failure or
        OVERLOADED, after a backoff, until the deadline; the caller sees one
        result. `idempotent=True` (a read): sent without a key, and still
        retried."""
        keyed = self._exactly_once and not idempotent
        room = self._max_body - (p.KEY_LEN if keyed else 0)
        if len(body) > room:
            with_key = " with its key" if keyed else ""
            raise ValueError(f"body of {len(body)} bytes exceeds max_body {self._max_body}{with_key}")
        if key == 0:
            raise ValueError("request key 0 means no key: use idempotent=True")
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not self._exactly_once:
            return await self._attempt(route_id, body, 0, deadline, timeout, _Sent())
        request_key = (random_key() if key is None else key) if keyed else 0
        sent = _Sent()
        # A failure not retried is the call's answer. One retried until the
        # deadline (or until the client closed) is reported as: the last
        # failure, but a maybe-applied one over one that was not (a later
        # attempt not sent, or refused before it ran, does not undo an
        # earlier one that was), and a failure the server gave over the
        # deadline's own timeout of the last attempt.
        maybe_applied: RouterdError | None = None
        last: RouterdError | None = None
        retry = 0
        while True:
            allowance = min(deadline - loop.time(), self._retry.attempt_timeout_s)
            try:
                return await self._attempt(route_id, body, request_key, loop.time() + allowance, allowance, sent)
            except RouterdError as error:
                deadline_cut = allowance < self._retry.attempt_timeout_s and isinstance(
                    error, (RequestTimeout, NotSent)
                )
                if not error.retry_safe and not (deadline_cut and maybe_applied is not None):
                    maybe_applied = error
                if not deadline_cut or last is None:
                    last = error
                if not retryable(error, idempotent or not sent.resend_unsafe):
                    raise
                failure = maybe_applied or last
                if self._closed is not None:
                    raise failure
                delay = self._retry.delay_s(retry, self._rng)
                if loop.time() + delay >= deadline:
                    raise failure
                await asyncio.sleep(delay)
                retry += 1

    async def _attempt(
        self, route_id: int, body: bytes, key: int, deadline: float, timeout: float, sent: _Sent
    ) -> bytes:
        """One send of a call and its answer, by `deadline`."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                await asyncio.wait_for(self._acquire(), max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                raise NotSent(f"no slot or no session within {timeout} s") from None
            # wait_for resumes this task a turn after _acquire returned: a
            # redirect may have stopped sends since, so check again here,
            # with no await between the check and the send.
            if self._ready.is_set() and self._closed is None and self._conn is not None:
                break
            self._slots.release()
        conn = self._conn
        assert conn is not None
        if key and conn.version == 2:
            sent.keyed = True
        elif key:
            # A version-1 connection carries no key.
            sent.resend_unsafe = True
            if sent.keyed:
                # Sent with its key before: sent without it, it would run
                # again if that one ran.
                self._slots.release()
                raise ConnectionLost(_KEY_NOT_CARRIED)
        # The request is in conn.pending from here on, with its slot: the
        # answer (or the connection's end) releases it, even if this caller
        # is cancelled.
        future = await self._send(conn, route_id, body, key)
        return await self._await(future, deadline - loop.time(), timeout)

    async def _acquire(self) -> None:
        """Waits for a session that takes requests and a free slot."""
        while True:
            await self._ready.wait()
            if self._closed is not None:
                raise NotSent(f"client closed: {self._closed}")
            await self._slots.acquire()
            if self._ready.is_set() and self._closed is None:
                return
            self._slots.release()

    async def _send(
        self, conn: _Connection, route_id: int, body: bytes, key: int = 0, version2: bool = False
    ) -> asyncio.Future[bytes]:
        """Sends a request on `conn`, keyed when `key` is not 0 (or
        `version2`) and `conn` speaks version 2. A login that the transport
        took is marked `login_sent`."""
        seq = conn.take_seq()
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        conn.pending[seq] = future
        if (key or version2) and conn.version == 2:
            frame = p.encode_keyed_request(route_id, seq, key, body)
        else:
            frame = p.encode_frame(p.Kind.REQUEST, route_id, seq, body)
        try:
            await conn.transport.send(frame)
        except (ConnectionError, OSError) as error:
            # The reader sees the same end and fails what is pending.
            log.debug("send failed: %s", error)
        else:
            if version2:
                conn.login_sent = True
        return future

    async def _await(self, future: asyncio.Future[bytes], remaining_s: float, timeout: float) -> bytes:
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(remaining_s, 0.0))
        except asyncio.TimeoutError:
            raise RequestTimeout(f"no answer within {timeout} s") from None

    # Typed calls of the built-in routes (docs/protocol.md, section 5). The
    # ones section 4 says may run again whatever happened (ping, player_get,
    # room_join, room_leave) are idempotent: sent without a key;
    # player_incr and room_say get one.

    async def ping(self, data: bytes = b"", **kw: Any) -> bytes:
        return await self.call(p.Route.SYS_PING, data, **{"idempotent": True, **kw})

    async def player_get(self, **kw: Any) -> int:
        return p.decode_i64(await self.call(p.Route.PLAYER_GET, b"", **{"idempotent": True, **kw}))

    async def player_incr(self, delta: int, **kw: Any) -> int:
        return p.decode_i64(await self.call(p.Route.PLAYER_INCR, p.encode_i64(delta), **kw))

    async def room_join(self, room_id: int, **kw: Any) -> int:
        body = await self.call(p.Route.ROOM_JOIN, p.encode_u64(room_id), **{"idempotent": True, **kw})
        return p.decode_u32(body)

    async def room_leave(self, room_id: int, **kw: Any) -> None:
        await self.call(p.Route.ROOM_LEAVE, p.encode_u64(room_id), **{"idempotent": True, **kw})

    async def room_say(self, room_id: int, text: str, **kw: Any) -> int:
        return p.decode_u32(await self.call(p.Route.ROOM_SAY, p.encode_say(room_id, text), **kw))

    # Connections.

    async def _fresh_token(self) -> str:
        if isinstance(self._token, str):
            return self._token
        token = self._token()
        return await token if inspect.isawaitable(token) else token

    async def _open(self, address: Address) -> _Connection:
        """A new connection to `address`, its session resumed or logged in.
        With `exactly_once` the login is a version-2 REQUEST; a server that
        closes at it does not speak version 2 (section 12), and the client
        logs in again, in version 1, on a new connection. Only that close
        counts (`_ClosedAtVersion2`): a refused connect, or a connection
        lost before the login went out, is a lost connection, and the next
        attempt is version 2. Once the server answered version 2, a close at
        the login counts only after section 1's refusal of an unsupported
        version (the cluster was rolled back to a build without version 2);
        a bare close (a node at its session cap) or one after any other
        frame is a lost connection. A call sent with its key is never sent
        again without it (`_attempt`)."""
        if not self._exactly_once or self._server_version == 1:
            return await self._open_with(address, 1)
        try:
            conn = await self._open_with(address, 2)
        except _ClosedAtVersion2 as error:
            log.info("%s closed at a version-2 login (%s): logging in with version 1", address, error)
            conn = await self._open_with(address, 1)
            self._server_version = 1
            if self._session is not None:
                self._forget_session("the server does not speak protocol version 2")
            return conn
        self._server_version = 2
        return conn

    async def _open_with(self, address: Address, version: int) -> _Connection:
        transport = await open_transport(address, self._ssl, self._connect_timeout_s)
        conn = _Connection(address, transport, self._max_body, version)
        conn.reader = asyncio.ensure_future(self._read(conn))
        try:
            if version == 2 and self._session is not None:
                await self._resume(conn, self._session)
            if not conn.resumed:
                token = await self._fresh_token()
                body = await self._handshake(conn, p.Route.AUTH_LOGIN, token.encode("ascii"))
                self.player_id = p.decode_u64(body)
        except BaseException as error:
            conn.retired = True
            await transport.close()
            refused = (
                version == 2
                and isinstance(error, ConnectionLost)
                and conn.login_sent
                and not conn.heard
                and (self._server_version is None or conn.version_refused)
            )
            if refused:
                raise _ClosedAtVersion2(error.reason) from error
            raise
        return conn

    async def _resume(self, conn: _Connection, session: p.Session) -> None:
        """`auth.resume` on `conn`; an ERROR (the window passed, say) forgets
        the session and leaves `conn` to log in. A refusal saying the
        session was kicked is the `sys.kicked` the client missed: a kick, so
        it raises `Kicked` (no login), but for an expired token when a fresh
        one can be had."""
        try:
            resume = p.encode_resume(session.token, self._last_push_seq)
            body = await self._handshake(conn, p.Route.AUTH_RESUME, resume)
        except ServerError as refused:
            # A lost connection keeps the session for the next attempt; a
            # refusal ends it.
            kicked = refused.code == p.Code.AUTH_FAILED and refused.reason in (SESSION_KICKED, TOKEN_EXPIRED)
            if kicked:
                self._session = None
                self._last_push_seq = 0
                self._emit("kicked", refused.reason)
                if not self._may_log_in_after_kick(refused.reason):
                    raise Kicked(refused.reason) from None
                return
            self._forget_session(refused.reason or refused.name)
            return
        self.player_id = p.decode_u64(body)
        conn.resumed = True

    def _may_log_in_after_kick(self, reason: str) -> bool:
        """A kick is final: two clients of one player would kick each other
        forever. But for an expired token, when reconnecting is on and a
        fresh token can be had (section 2)."""
        fresh_token = not isinstance(self._token, str)
        return self._reconnect is not None and reason == TOKEN_EXPIRED and fresh_token

    def _forget_session(self, reason: str) -> None:
        self._session = None
        self._last_push_seq = 0
        self._emit("resume_failed", reason)

    async def _handshake(self, conn: _Connection, route_id: int, body: bytes) -> bytes:
        """One login-time request on a connection not yet the session's
        (version 2 on a version-2 one), within the connect timeout."""
        if conn.ended:
            # Ended already (while a token was fetched, say): nothing would
            # answer it.
            raise ConnectionLost(f"the connection closed before route {route_id} was sent")
        await self._slots.acquire()
        future = await self._send(conn, route_id, body, 0, version2=True)
        return await self._await(future, self._connect_timeout_s, self._connect_timeout_s)

    async def _read(self, conn: _Connection) -> None:
        error: RouterdError | None = None
        try:
            while True:
                data = await conn.transport.recv()
                if not data:
                    break
                conn.decoder.feed(data)
                for frame in conn.decoder.frames():
                    self._on_frame(conn, frame)
        except (p.FrameError, ValueError) as violation:
            conn.violation = str(violation)
            error = ProtocolViolation(str(violation))
            await conn.transport.close()
        except asyncio.CancelledError:
            pass
        if error is None:
            await conn.transport.close()
        self._on_end(conn, error)

    def _on_frame(self, conn: _Connection, frame: p.Frame) -> None:
        if frame.kind != p.Kind.ERROR or frame.route_id != 0:
            conn.heard = True
        if frame.kind == p.Kind.PUSH:
            return self._on_push(conn, frame)
        future = conn.pending.pop(frame.seq, None)
        if future is None:
            # Route 0 answers no request: a frame-level refusal before the
            # server closes (section 1). Anything else unmatched is a
            # server fault, logged and dropped.
            if frame.kind == p.Kind.ERROR:
                code, reason = p.decode_error(frame.body)
                conn.violation = str(server_error(code, reason))
                # As a server refuses a version it does not speak; the
                # reason is for people (section 4).
                if frame.route_id == 0 and code == p.Code.BAD_REQUEST and not conn.heard:
                    conn.version_refused = True
            log.warning("answer for no request in flight: seq %d", frame.seq)
            return
        if conn.version == 2:
            # An answer on a version-2 connection (a login's, refused or
            # not, included): the server speaks version 2.
            self._server_version = 2
        self._slots.release()
        if not future.done():
            if frame.kind == p.Kind.RESPONSE:
                future.set_result(frame.body)
            else:
                code, reason = p.decode_error(frame.body)
                future.set_exception(server_error(code, reason))
        if conn.moving_to is not None and not conn.pending and conn is self._conn:
            self._spawn(self._move(conn))

    def _on_push(self, conn: _Connection, frame: p.Frame) -> None:
        if frame.route_id == p.Route.SYS_SESSION and conn.version == 2:
            # The resume token is a secret of the session: kept, never
            # handed to handlers.
            self._session = p.decode_session(frame.body)
            self._last_push_seq = 0
            return
        if frame.seq and self._session is not None:
            # A resumable session's pushes are numbered: one at or below the
            # last delivered came before the connection was lost and is
            # delivered again by the resume.
            if frame.seq <= self._last_push_seq:
                return
            self._last_push_seq = frame.seq
        self._emit("push", frame)
        if frame.route_id == p.Route.ROOM_MESSAGE:
            self._emit("room_message", p.decode_room_message(frame.body))
        elif frame.route_id == p.Route.SYS_KICKED:
            # A kick ends the session: a reconnect after one (a fresh
            # token's) logs in, never resumes.
            self._session = None
            conn.kicked = frame.body.decode("utf-8", errors="replace")
            self._emit("kicked", conn.kicked)
        elif frame.route_id == p.Route.SYS_REDIRECT:
            redirect = p.decode_redirect(frame.body)
            self._emit("redirect", redirect)
            self._redirect(conn, redirect)
        # Other PUSH routes are a newer server's: ignored (section 7).

    def _redirect(self, conn: _Connection, redirect: p.Redirect) -> None:
        # A connection still logging in is not `_conn` yet: a node that
        # places sessions on their player's node redirects right after the
        # login answer, and `_adopt` moves it once `_open` returns.
        if conn.retired or conn.moving_to is not None or self._closed is not None:
            return
        if redirect.gateway:
            target = conn.address.with_gateway(redirect.gateway)
        else:
            others = [a for a in self._fallbacks if a != conn.address]
            if not others:
                log.warning("sys.redirect named no gateway and none other is known")
                return
            target = self._rng.choice(others)
        # Stop sending here; once the answers owed here are in, move.
        conn.moving_to = target
        if conn is not self._conn:
            return
        self._ready.clear()
        if not conn.pending:
            self._spawn(self._move(conn))

    def _adopt(self, conn: _Connection) -> None:
        """Makes a connection `_open` returned the session's: ready, or
        moving on at once if it was redirected while it logged in."""
        self._conn = conn
        if conn.moving_to is not None:
            self._spawn(self._move(conn))
        else:
            self._ready.set()

    async def _move(self, conn: _Connection) -> None:
        if conn.retired or conn.moving_to is None:
            return
        conn.retired = True
        target = conn.moving_to
        await conn.transport.close()
        try:
            opened = await self._open(target)
        except Kicked as kicked:
            # Its resume told the session was kicked: final, as after
            # `sys.kicked`.
            self._conn = None
            self._emit("disconnected", kicked)
            return self._close_for_good(kicked)
        except (OSError, asyncio.TimeoutError, RouterdError) as error:
            log.warning("redirect to %s failed: %s", target, error)
            self._conn = None
            self._emit("disconnected", ConnectionLost(str(error)))
            if self._reconnect is None:
                return self._close_for_good(ConnectionLost(f"redirect to {target} failed: {error}"))
            return await self._reconnect_loop([target, conn.address, *self._fallbacks])
        self.redirects_followed += 1
        self._adopt(opened)
        if opened.resumed:
            self._emit("resumed", str(target))

    def _on_end(self, conn: _Connection, error: RouterdError | None) -> None:
        conn.ended = True
        if conn.retired:
            self._fail_pending(conn, ConnectionLost("the connection was left"))
            return
        if conn.kicked is not None:
            lost: RouterdError = Kicked(conn.kicked)
        elif error is not None:
            lost = error
        else:
            lost = ConnectionLost(conn.violation or "the server closed the connection")
        self._fail_pending(conn, lost)
        if conn is not self._conn or self._closed is not None:
            return
        self._conn = None
        self._ready.clear()
        self._emit("disconnected", lost)
        if conn.kicked is None:
            may_reconnect = self._reconnect is not None
        else:
            may_reconnect = self._may_log_in_after_kick(conn.kicked)
        if not may_reconnect:
            return self._close_for_good(lost)
        self._spawn(self._reconnect_loop([conn.address, *self._fallbacks]))

    def _fail_pending(self, conn: _Connection, error: RouterdError) -> None:
        pending, conn.pending = conn.pending, {}
        for future in pending.values():
            self._slots.release()
            if not future.done():
                future.set_exception(type(error)(error.reason))
                # A caller that gave up never reads it.
                future.exception()

    async def _reconnect_loop(self, addresses: list[Address]) -> None:
        assert self._reconnect is not None
        for attempt in range(self._reconnect.attempts_max):
            await asyncio.sleep(self._reconnect.delay_s(attempt, self._rng))
            if self._closed is not None:
                return
            address = addresses[attempt % len(addresses)]
            try:
                opened = await self._open(address)
            except Kicked as kicked:
                # Its resume told the session was kicked while the
                # connection was lost: final, as after `sys.kicked`.
                return self._close_for_good(kicked)
            except (OSError, asyncio.TimeoutError, RouterdError) as error:
                log.info("reconnect %d to %s failed: %s", attempt + 1, address, error)
                continue
            self.reconnects += 1
            self._adopt(opened)
            if opened.resumed:
                self._emit("resumed", str(address))
            self._emit("reconnected", str(address))
            return
        self._close_for_good(ConnectionLost(f"{self._reconnect.attempts_max} reconnects failed"))

    def _close_for_good(self, error: RouterdError | None) -> None:
        if self._closed is not None:
            return
        self._closed = error or NotSent("closed by the client")
        # Wake the waiting callers: they see the client closed.
        self._ready.set()
        self._emit("closed", error)

    async def close(self) -> None:
        """Closes the session; requests still in flight fail with
        `ConnectionLost`, those waiting to be sent with `NotSent`."""
        self._close_for_good(None)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.retired = True
            await conn.transport.close()
            if conn.reader is not None:
                await asyncio.gather(conn.reader, return_exceptions=True)
        for task in list(self._background):
            task.cancel()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
