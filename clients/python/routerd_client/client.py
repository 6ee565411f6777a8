"""The asyncio client: one session on one gateway at a time, moved by
`sys.redirect` and, if asked, reconnected after a lost connection."""

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
    server_error,
)
from .transport import Address, Transport, open_transport

log = logging.getLogger("routerd_client")

#: A token, or a function that returns one (called at every login, so a
#: reconnect or a redirect can log in with a fresh token).
TokenSource = Union[str, Callable[[], Union[str, Awaitable[str]]]]

#: The `sys.kicked` reason of a session whose token expired
#: (docs/protocol.md, section 2): the one kick after which reconnecting,
#: with a fresh token, is allowed.
TOKEN_EXPIRED = "token expired"

EVENTS = ("room_message", "kicked", "redirect", "push", "disconnected", "reconnected", "closed")


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

    def __init__(self, address: Address, transport: Transport, max_body: int) -> None:
        self.address = address
        self.transport = transport
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

    def take_seq(self) -> int:
        # A u32 the server sees as unique among this connection's requests
        # in flight; bounded by inflight_max, so the scan ends.
        while True:
            seq = self.next_seq
            self.next_seq = (self.next_seq + 1) & 0xFFFFFFFF
            if seq not in self.pending:
                return seq


class Client:
    """A routerd session. Create with `await Client.connect(...)`."""

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
        reconnect: Backoff | None = None,
        fallback_addresses: list[str] | None = None,
        rng: random.Random | None = None,
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
        self._reconnect = reconnect
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

    def inflight(self) -> int:
        return len(self._conn.pending) if self._conn else 0

    # Events.

    def on(self, event: str, handler: Callable[..., Any]) -> None:
        """Calls `handler` on `event`: `room_message` (RoomMessage), `kicked`
        (reason), `redirect` (Redirect), `push` (every PUSH as a Frame,
        unknown routes included), `disconnected` (the error), `reconnected`
        (address), `closed` (the error or None). A coroutine handler runs
        as a task."""
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

    async def call_json(self, route_id: int, value: object, *, timeout_s: float | None = None) -> object:
        """One request on a JSON route (a scripted type's, docs/scripts.md):
        ``value`` sent as UTF-8 JSON, the RESPONSE decoded from JSON (None
        for an empty one; a body that is not JSON as its text)."""
        body = json.dumps(value, separators=(",", ":")).encode()
        answer = await self.call(route_id, body, timeout_s=timeout_s)
        if not answer:
            return None
        text = answer.decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text

    callJson = call_json

    async def call(self, route_id: int, body: bytes = b"", *, timeout_s: float | None = None) -> bytes:
        """One request on any route (a user object type's included): the
        RESPONSE body, or the ERROR as a typed exception. The timeout
        covers waiting for a slot (the in-flight bound), a redirect or a
        reconnect, and the answer."""
        if len(body) > self._max_body:
            raise ValueError(f"body of {len(body)} bytes exceeds max_body {self._max_body}")
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
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
        # The request is in conn.pending from here on, with its slot: the
        # answer (or the connection's end) releases it, even if this caller
        # is cancelled.
        future = await self._send(conn, route_id, body)
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

    async def _send(self, conn: _Connection, route_id: int, body: bytes) -> asyncio.Future[bytes]:
        seq = conn.take_seq()
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        conn.pending[seq] = future
        try:
            await conn.transport.send(p.encode_frame(p.Kind.REQUEST, route_id, seq, body))
        except (ConnectionError, OSError) as error:
            # The reader sees the same end and fails what is pending.
            log.debug("send failed: %s", error)
        return future

    async def _await(self, future: asyncio.Future[bytes], remaining_s: float, timeout: float) -> bytes:
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(remaining_s, 0.0))
        except asyncio.TimeoutError:
            raise RequestTimeout(f"no answer within {timeout} s") from None

    # Typed calls of the built-in routes (docs/protocol.md, section 5).

    async def ping(self, data: bytes = b"", **kw: Any) -> bytes:
        return await self.call(p.Route.SYS_PING, data, **kw)

    async def player_get(self, **kw: Any) -> int:
        return p.decode_i64(await self.call(p.Route.PLAYER_GET, b"", **kw))

    async def player_incr(self, delta: int, **kw: Any) -> int:
        return p.decode_i64(await self.call(p.Route.PLAYER_INCR, p.encode_i64(delta), **kw))

    async def room_join(self, room_id: int, **kw: Any) -> int:
        return p.decode_u32(await self.call(p.Route.ROOM_JOIN, p.encode_u64(room_id), **kw))

    async def room_leave(self, room_id: int, **kw: Any) -> None:
        await self.call(p.Route.ROOM_LEAVE, p.encode_u64(room_id), **kw)

    async def room_say(self, room_id: int, text: str, **kw: Any) -> int:
        return p.decode_u32(await self.call(p.Route.ROOM_SAY, p.encode_say(room_id, text), **kw))

    # Connections.

    async def _fresh_token(self) -> str:
        if isinstance(self._token, str):
            return self._token
        token = self._token()
        return await token if inspect.isawaitable(token) else token

    async def _open(self, address: Address) -> _Connection:
        """A new connection to `address`, logged in."""
        transport = await open_transport(address, self._ssl, self._connect_timeout_s)
        conn = _Connection(address, transport, self._max_body)
        conn.reader = asyncio.ensure_future(self._read(conn))
        try:
            token = await self._fresh_token()
            await self._slots.acquire()
            future = await self._send(conn, p.Route.AUTH_LOGIN, token.encode("ascii"))
            body = await self._await(future, self._connect_timeout_s, self._connect_timeout_s)
            self.player_id = p.decode_u64(body)
        except BaseException:
            conn.retired = True
            await transport.close()
            raise
        return conn

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
        if frame.kind == p.Kind.PUSH:
            return self._on_push(conn, frame)
        future = conn.pending.pop(frame.seq, None)
        if future is None:
            # Route 0 answers no request: a frame-level refusal before the
            # server closes (section 1). Anything else unmatched is a
            # server fault, logged and dropped.
            if frame.kind == p.Kind.ERROR:
                conn.violation = str(server_error(*p.decode_error(frame.body)))
            log.warning("answer for no request in flight: seq %d", frame.seq)
            return
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
        self._emit("push", frame)
        if frame.route_id == p.Route.ROOM_MESSAGE:
            self._emit("room_message", p.decode_room_message(frame.body))
        elif frame.route_id == p.Route.SYS_KICKED:
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
        except (OSError, asyncio.TimeoutError, RouterdError) as error:
            log.warning("redirect to %s failed: %s", target, error)
            self._conn = None
            self._emit("disconnected", ConnectionLost(str(error)))
            if self._reconnect is None:
                return self._close_for_good(ConnectionLost(f"redirect to {target} failed: {error}"))
            return await self._reconnect_loop([target, conn.address, *self._fallbacks])
        self.redirects_followed += 1
        self._adopt(opened)

    def _on_end(self, conn: _Connection, error: RouterdError | None) -> None:
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
        # A kick is final, but for an expired token when a fresh one can be
        # had: two clients of one player would kick each other forever.
        may_reconnect = conn.kicked is None or (
            conn.kicked == TOKEN_EXPIRED and not isinstance(self._token, str)
        )
        if self._reconnect is None or not may_reconnect:
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
            except (OSError, asyncio.TimeoutError, RouterdError) as error:
                log.info("reconnect %d to %s failed: %s", attempt + 1, address, error)
                continue
            self.reconnects += 1
            self._adopt(opened)
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
