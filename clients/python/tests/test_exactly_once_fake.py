"""The client against scripted servers on loopback, speaking the frames of
docs/protocol.md section 12 as a routerd that serves them would (and as one
that does not): version-2 logins and the fallback to version 1, request
keys, retries with the same key, and resuming a session."""

from __future__ import annotations

import asyncio
import unittest
from dataclasses import dataclass
from typing import Awaitable, Callable

from routerd_client import Backoff, Client, ConnectionLost, Kicked, NotSent, Retry, RoomMessage, RouterdError, ServerError
from routerd_client import protocol as p

from case import AsyncTestCase

#: Fast retries and reconnects, so a test spends its time on the script.
FAST = {"retry": Retry(0.005, 0.02, 2.0), "reconnect": Backoff(0.005, 0.02, 20)}
TOKEN = bytes(range(0x10, 0x20))


@dataclass
class Request:
    """A REQUEST as the server reads it: the key split off a version-2 body."""

    version: int
    route_id: int
    seq: int
    key: int
    body: bytes


class Peer:
    """One accepted connection, read frame by frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def next(self) -> Request | None:
        try:
            header = await self.reader.readexactly(16)
            body = await self.reader.readexactly(int.from_bytes(header[12:16], "little"))
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        version, key = header[2], 0
        if version == p.VERSION_KEYED:
            key, body = int.from_bytes(body[:8], "little"), body[8:]
        return Request(version, int.from_bytes(header[4:8], "little"), int.from_bytes(header[8:12], "little"), key, body)

    async def expect(self, route_id: int, version: int) -> Request:
        request = await self.next()
        assert request is not None, f"the client closed where route {route_id} was due"
        assert (request.route_id, request.version) == (route_id, version), request
        return request

    def answer(self, request: Request, body: bytes) -> None:
        self.writer.write(p.encode_frame(p.Kind.RESPONSE, request.route_id, request.seq, body))

    def refuse(self, request: Request, code: int, reason: str) -> None:
        self.writer.write(p.encode_frame(p.Kind.ERROR, request.route_id, request.seq, p.encode_error(code, reason)))

    def push(self, route_id: int, seq: int, body: bytes) -> None:
        self.writer.write(p.encode_frame(p.Kind.PUSH, route_id, seq, body))

    def say(self, seq: int, text: str) -> None:
        self.push(p.Route.ROOM_MESSAGE, seq, p.encode_room_message(RoomMessage(7, 42, text)))

    def close(self) -> None:
        self.writer.close()


Script = Callable[[Peer], Awaitable[None]]


async def login(peer: Peer, version: int = 2) -> Request:
    request = await peer.expect(p.Route.AUTH_LOGIN, version)
    assert request.key == 0, "a login carries no key"
    peer.answer(request, p.encode_u64(42))
    return request


class KeyedCounter:
    """A player's counter behind a scripted server that remembers request
    keys as an object does: a keyed `player.incr` runs once, an unkeyed one
    every time it arrives. `runs` counts the runs and `logins` the protocol
    version of every login."""

    def __init__(self) -> None:
        self.counter = 0
        self.runs = 0
        self.logins: list[int] = []
        self._answers: dict[int, int] = {}

    def serve(self, cut: bool) -> Script:
        """Logs in whatever the version, then serves `player.incr`; `cut`:
        closes after the first run, unanswered."""

        async def script(peer: Peer) -> None:
            login = await peer.next()
            assert login is not None and login.route_id == p.Route.AUTH_LOGIN, login
            self.logins.append(login.version)
            peer.answer(login, p.encode_u64(42))
            while (request := await peer.next()) is not None:
                assert request.route_id == p.Route.PLAYER_INCR, request
                answer = self._answers.get(request.key)
                if not request.key or answer is None:
                    self.runs += 1
                    self.counter += p.decode_i64(request.body)
                    answer = self.counter
                    if request.key:
                        self._answers[request.key] = answer
                if cut:
                    return
                peer.answer(request, p.encode_i64(answer))

        return script


def refuse_version_2(peer: Peer) -> None:
    """What a server that does not speak version 2 does at a version-2
    frame (section 1): an ERROR on route 0 naming the version, then the
    close."""
    reason = "unsupported protocol version 2, expected 1"
    peer.writer.write(p.encode_frame(p.Kind.ERROR, 0, 0, p.encode_error(p.Code.BAD_REQUEST, reason)))
    peer.close()


async def close_at_once(peer: Peer) -> None:
    """A node at its session cap: accepts, then closes with no frame."""
    peer.close()


class ExactlyOnce(AsyncTestCase):
    async def serve(self, *scripts: Script) -> str:
        """A server whose n-th connection runs scripts[n] (a connection past
        them is closed at once); every script must finish by the test's end."""
        queue = list(scripts)
        self.runs: list[asyncio.Task[None]] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if not queue:
                writer.close()
                return
            script = queue.pop(0)
            task = asyncio.current_task()
            assert task is not None
            self.runs.append(task)  # type: ignore[arg-type]
            try:
                await script(Peer(reader, writer))
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.addAsyncCleanup(server.wait_closed)
        self.addCleanup(server.close)
        return "tcp://127.0.0.1:%d" % server.sockets[0].getsockname()[1]

    async def scripts_done(self, count: int) -> None:
        while len(self.runs) < count:
            await asyncio.sleep(0.005)
        await asyncio.wait_for(asyncio.gather(*self.runs), 15)

    async def until(self, check: Callable[[], bool]) -> None:
        async def wait() -> None:
            while not check():
                await asyncio.sleep(0.005)

        await asyncio.wait_for(wait(), 15)

    async def test_a_keyed_call_is_sent_again_with_its_key_and_body_reads_go_unkeyed(self) -> None:
        keys: list[int] = []

        async def script(peer: Peer) -> None:
            await login(peer)
            for code, reason in [(7, "player unavailable"), (8, "no answer in time"), (6, "too many in-flight requests")]:
                attempt = await peer.expect(p.Route.PLAYER_INCR, 2)
                keys.append(attempt.key)
                assert attempt.body == p.encode_i64(5)
                peer.refuse(attempt, code, reason)
            last = await peer.expect(p.Route.PLAYER_INCR, 2)
            keys.append(last.key)
            peer.answer(last, p.encode_i64(5))
            # A read runs again harmlessly: no key, version 1.
            peer.answer(await peer.expect(p.Route.PLAYER_GET, 1), p.encode_i64(5))
            # A refusal is the call's answer at once.
            peer.refuse(await peer.expect(p.Route.ROOM_SAY, 2), 5, "not a member of room 7")
            following = await peer.expect(p.Route.PLAYER_INCR, 2)
            assert following.key != keys[0], "every call its own key"
            peer.answer(following, p.encode_i64(6))
            await peer.next()

        client = await Client.connect(await self.serve(script), "t", **FAST)
        self.assertEqual(client.protocol_version, 2)
        self.assertEqual(await client.player_incr(5), 5)
        self.assertEqual(len(keys), 4)
        self.assertNotEqual(keys[0], 0)
        self.assertEqual(set(keys), {keys[0]}, "one key for every attempt")
        self.assertEqual(await client.player_get(), 5)
        with self.assertRaises(ServerError) as refused:
            await client.room_say(7, "hi")
        self.assertEqual(refused.exception.code, 5)
        self.assertEqual(await client.player_incr(1), 6)
        await client.close()
        await self.scripts_done(1)

    async def test_a_keyed_call_gives_up_at_its_deadline_with_the_last_failure(self) -> None:
        attempts = 0

        async def script(peer: Peer) -> None:
            nonlocal attempts
            await login(peer)
            while (request := await peer.next()) is not None:
                attempts += 1
                peer.refuse(request, 7, "player unavailable")

        client = await Client.connect(await self.serve(script), "t", **FAST)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with self.assertRaises(ServerError) as failed:
            await client.player_incr(1, timeout_s=1.0)
        self.assertEqual(failed.exception.code, 7)
        self.assertLess(loop.time() - started, 5.0)
        self.assertGreaterEqual(attempts, 2)
        await client.close()

    async def test_a_client_side_timeout_is_retried_with_the_same_key_on_the_same_connection(self) -> None:
        async def script(peer: Peer) -> None:
            await login(peer)
            first = await peer.expect(p.Route.PLAYER_INCR, 2)
            # Every later attempt (more than one on a slow machine) is
            # answered, as a server that remembers the key would.
            while (again := await peer.next()) is not None:
                assert (again.route_id, again.key) == (p.Route.PLAYER_INCR, first.key)
                assert again.seq != first.seq, "the first seq stays taken"
                peer.answer(again, p.encode_i64(3))

        client = await Client.connect(await self.serve(script), "t", **{**FAST, "retry": Retry(0.005, 0.02, 0.1)})
        self.assertEqual(await client.player_incr(3), 3)
        await client.close()
        await self.scripts_done(1)

    async def test_a_lost_connection_sends_the_call_again_after_a_fresh_login(self) -> None:
        keys: list[int] = []

        async def first(peer: Peer) -> None:
            await login(peer)
            keys.append((await peer.expect(p.Route.PLAYER_INCR, 2)).key)

        async def second(peer: Peer) -> None:
            await login(peer)
            again = await peer.expect(p.Route.PLAYER_INCR, 2)
            assert (again.key, again.body) == (keys[0], p.encode_i64(2))
            peer.answer(again, p.encode_i64(2))
            await peer.next()

        client = await Client.connect(await self.serve(first, second), "t", **FAST)
        events: list[str] = []
        client.on("resumed", lambda _: events.append("resumed"))
        client.on("reconnected", lambda _: events.append("reconnected"))
        self.assertEqual(await client.player_incr(2), 2)
        self.assertEqual(events, ["reconnected"])
        await client.close()
        await self.scripts_done(2)

    async def test_a_server_that_closes_at_a_version_2_login_gets_a_version_1_one(self) -> None:
        async def old(peer: Peer) -> None:
            request = await peer.next()
            assert request is not None and request.version == 2
            peer.writer.write(p.encode_frame(p.Kind.ERROR, 0, 0, p.encode_error(5, "unsupported version 2")))

        async def in_version_1(peer: Peer) -> None:
            await login(peer, 1)
            await peer.expect(p.Route.PLAYER_INCR, 1)

        async def again(peer: Peer) -> None:
            await login(peer, 1)
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"ok")
            await peer.next()

        client = await Client.connect(await self.serve(old, in_version_1, again), "t", **FAST)
        self.assertEqual(client.protocol_version, 1)
        # Sent without a key, so sending it again could count twice: the
        # caller gets the failure.
        with self.assertRaises(ConnectionLost):
            await client.player_incr(1)
        self.assertEqual(await client.ping(b"ok"), b"ok")
        await client.close()
        await self.scripts_done(3)

    async def test_a_close_at_accept_after_version_2_answered_is_a_lost_connection(self) -> None:
        # The keyed call runs and its connection drops before the answer;
        # the reconnect lands on a node at its session cap, which accepts
        # and closes at once with no frame (docs/protocol.md, section 8), as
        # a server that does not speak version 2 closes at a version-2
        # login. This server answered version 2 before: that close is a lost
        # connection, and the next one logs in with version 2 and sends the
        # call again with its key, which runs once.
        counter = KeyedCounter()
        url = await self.serve(counter.serve(cut=True), close_at_once, counter.serve(cut=False))
        client = await Client.connect(url, "t", **FAST)
        try:
            self.assertEqual(await client.player_incr(1), 1)
            self.assertEqual(counter.runs, 1, "the call ran once")
            self.assertEqual(counter.logins, [2, 2])
            self.assertEqual(client.protocol_version, 2)
        finally:
            await client.close()
        await self.scripts_done(3)

    async def test_a_call_once_sent_with_its_key_is_never_sent_without_it(self) -> None:
        # The client takes the server for a version-1 one while a keyed
        # call it sent waits to be sent again: after a rollback (the tests
        # below), or by any other path. Sent without its key, the call would
        # run a second time.
        counter = KeyedCounter()
        url = await self.serve(counter.serve(cut=True), counter.serve(cut=False))
        client = await Client.connect(url, "t", **FAST)
        client._server_version = 1
        try:
            with self.assertRaises(ConnectionLost) as failed:
                await client.player_incr(1)
            self.assertFalse(failed.exception.retry_safe)
            self.assertIn("request key", failed.exception.reason)
            self.assertEqual(counter.runs, 1, "the call ran once")
            self.assertEqual(counter.logins, [2, 1])
        finally:
            await client.close()
        await self.scripts_done(2)

    async def rolled_back(self, resumable: bool) -> None:
        """The node answered version 2; the operator rolls the cluster back.
        The reconnect's version-2 frame (a resume, or a login when the server
        sent no `sys.session`) is refused as an unsupported version, as
        section 1 says, which is evidence enough even though the server spoke
        version 2 before: the client logs in with version 1 and keeps
        serving. The keyed call in flight at the drop may have run and cannot
        carry its key now: it fails ("key not carried") and is not sent
        again."""

        async def new_build(peer: Peer) -> None:
            await login(peer)
            if resumable:
                peer.push(p.Route.SYS_SESSION, 0, p.encode_session(p.Session(TOKEN, 30000)))
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"")
            await peer.expect(p.Route.PLAYER_INCR, 2)

        async def old_build_refuses(peer: Peer) -> None:
            await peer.expect(p.Route.AUTH_RESUME if resumable else p.Route.AUTH_LOGIN, 2)
            refuse_version_2(peer)

        async def old_build(peer: Peer) -> None:
            await login(peer, 1)
            # The first request is the new ping: the call in flight was not
            # sent again without its key.
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"ok")
            incr = await peer.expect(p.Route.PLAYER_INCR, 1)
            assert incr.body == p.encode_i64(2), incr
            peer.answer(incr, p.encode_i64(2))
            await peer.next()

        url = await self.serve(new_build, old_build_refuses, old_build)
        client = await Client.connect(url, "t", **FAST)
        events: list[str] = []
        client.on("resume_failed", lambda reason: events.append(f"resume_failed: {reason}"))
        client.on("reconnected", lambda _: events.append("reconnected"))
        try:
            await client.ping()
            with self.assertRaises(ConnectionLost) as failed:
                await client.player_incr(1)
            self.assertFalse(failed.exception.retry_safe)
            self.assertIn("request key", failed.exception.reason)
            self.assertEqual(client.protocol_version, 1)
            self.assertEqual(await client.ping(b"ok"), b"ok")
            self.assertEqual(await client.player_incr(2), 2)
            forgotten = ["resume_failed: the server does not speak protocol version 2"] if resumable else []
            self.assertEqual(events, [*forgotten, "reconnected"])
        finally:
            await client.close()
        await self.scripts_done(3)

    async def test_a_rolled_back_server_refusing_the_version_2_resume_gets_a_version_1_login(self) -> None:
        await self.rolled_back(resumable=True)

    async def test_a_rolled_back_server_refusing_the_version_2_login_gets_a_version_1_login(self) -> None:
        await self.rolled_back(resumable=False)

    async def test_after_version_2_answered_only_the_version_refusal_at_the_login_counts(self) -> None:
        # A route-0 ERROR after another frame, or of another code, is a
        # lost connection: the next login is version 2 again.
        async def push_then_refuse(peer: Peer) -> None:
            await peer.expect(p.Route.AUTH_LOGIN, 2)
            peer.push(999, 0, b"")
            refuse_version_2(peer)

        async def another_code(peer: Peer) -> None:
            await peer.expect(p.Route.AUTH_LOGIN, 2)
            fault = p.encode_error(p.Code.INTERNAL, "server fault: see the server log")
            peer.writer.write(p.encode_frame(p.Kind.ERROR, 0, 0, fault))
            peer.close()

        counter = KeyedCounter()
        url = await self.serve(counter.serve(cut=True), push_then_refuse, another_code, counter.serve(cut=False))
        client = await Client.connect(url, "t", **FAST)
        try:
            self.assertEqual(await client.player_incr(1), 1)
            self.assertEqual(counter.runs, 1, "the call ran once")
            self.assertEqual(counter.logins, [2, 2])
            self.assertEqual(client.protocol_version, 2)
        finally:
            await client.close()
        await self.scripts_done(4)

    async def test_exactly_once_false_speaks_version_1_and_raises_every_failure(self) -> None:
        async def script(peer: Peer) -> None:
            await login(peer, 1)
            peer.refuse(await peer.expect(p.Route.PLAYER_INCR, 1), 7, "player unavailable")
            await peer.next()

        client = await Client.connect(await self.serve(script), "t", exactly_once=False)
        self.assertEqual(client.protocol_version, 1)
        with self.assertRaises(ServerError) as failed:
            await client.player_incr(1)
        self.assertEqual(failed.exception.code, 7)
        await client.close()
        await self.scripts_done(1)

    async def test_resume_delivers_pushes_once_in_order_and_resends_the_call_in_flight(self) -> None:
        keys: list[int] = []

        async def first(peer: Peer) -> None:
            await login(peer)
            peer.push(p.Route.SYS_SESSION, 0, p.encode_session(p.Session(TOKEN, 30000)))
            # Pushes once the client listens for them.
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"")
            for seq in (1, 2, 3):
                peer.say(seq, f"m{seq}")
            keys.append((await peer.expect(p.Route.PLAYER_INCR, 2)).key)

        async def second(peer: Peer) -> None:
            resume = await peer.expect(p.Route.AUTH_RESUME, 2)
            assert resume.body == p.encode_resume(TOKEN, 3), resume
            peer.answer(resume, p.encode_u64(42))
            # The third again (a server may repeat what it is not sure
            # arrived), then the missed ones.
            for seq in (3, 4, 5):
                peer.say(seq, f"m{seq}")
            again = await peer.expect(p.Route.PLAYER_INCR, 2)
            assert again.key == keys[0]
            peer.answer(again, p.encode_i64(9))
            await peer.next()

        client = await Client.connect(await self.serve(first, second), "t", **FAST)
        texts: list[str] = []
        events: list[str] = []
        routes: list[int] = []
        client.on("room_message", lambda m: texts.append(m.text))
        client.on("resumed", lambda _: events.append("resumed"))
        client.on("resume_failed", lambda reason: events.append(f"failed: {reason}"))
        client.on("push", lambda frame: routes.append(frame.route_id))
        await client.ping()
        await self.until(lambda: len(texts) == 3)
        self.assertEqual(await client.player_incr(9), 9)
        await self.until(lambda: len(texts) >= 5)
        self.assertEqual(texts, ["m1", "m2", "m3", "m4", "m5"])
        self.assertEqual(events, ["resumed"])
        self.assertNotIn(p.Route.SYS_SESSION, routes, "the token stays in the client")
        await client.close()
        await self.scripts_done(2)

    async def test_resume_refused_logs_in_afresh_and_says_pushes_may_be_lost(self) -> None:
        keys: list[int] = []

        async def first(peer: Peer) -> None:
            await login(peer)
            peer.push(p.Route.SYS_SESSION, 0, p.encode_session(p.Session(TOKEN, 30000)))
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"")
            peer.say(1, "before")
            keys.append((await peer.expect(p.Route.PLAYER_INCR, 2)).key)

        async def second(peer: Peer) -> None:
            peer.refuse(await peer.expect(p.Route.AUTH_RESUME, 2), 4, "resume window expired")
            again = await login(peer)
            assert again.body == b"the player's token"
            peer.push(p.Route.SYS_SESSION, 0, p.encode_session(p.Session(bytes(b ^ 0xFF for b in TOKEN), 30000)))
            retried = await peer.expect(p.Route.PLAYER_INCR, 2)
            assert retried.key == keys[0]
            peer.answer(retried, p.encode_i64(1))
            # The new session numbers its pushes from 1 again.
            peer.say(1, "after")
            await peer.next()

        client = await Client.connect(await self.serve(first, second), "the player's token", **FAST)
        texts: list[str] = []
        failures: list[str] = []
        client.on("room_message", lambda m: texts.append(m.text))
        client.on("resume_failed", failures.append)
        await client.ping()
        await self.until(lambda: len(texts) == 1)
        self.assertEqual(await client.player_incr(1), 1)
        await self.until(lambda: len(texts) == 2)
        self.assertEqual(texts, ["before", "after"])
        self.assertEqual(failures, ["resume window expired"])
        await client.close()
        await self.scripts_done(2)

    async def test_a_kicked_session_is_not_resumed_the_reconnect_logs_in(self) -> None:
        async def first(peer: Peer) -> None:
            await login(peer)
            peer.push(p.Route.SYS_SESSION, 0, p.encode_session(p.Session(TOKEN, 30000)))
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"")
            peer.push(p.Route.SYS_KICKED, 1, b"token expired")

        async def second(peer: Peer) -> None:
            assert (await login(peer)).body == b"fresh"
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"")
            await peer.next()

        client = await Client.connect(await self.serve(first, second), lambda: "fresh", **FAST)
        reconnected = asyncio.Event()
        client.on("reconnected", lambda _: reconnected.set())
        await client.ping()
        await asyncio.wait_for(reconnected.wait(), 5)
        await client.ping()
        await client.close()
        await self.scripts_done(2)

    async def test_a_resume_refused_session_kicked_is_a_kick_and_no_login_follows(self) -> None:
        # Under kick_old the session was kicked by a newer login of the
        # player while its connection was lost: logging in again would kick
        # that one in turn.
        after: list[Request | None] = []

        async def first(peer: Peer) -> None:
            await login(peer)
            peer.push(p.Route.SYS_SESSION, 0, p.encode_session(p.Session(TOKEN, 30000)))
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"")

        async def second(peer: Peer) -> None:
            peer.refuse(await peer.expect(p.Route.AUTH_RESUME, 2), 4, "session kicked")
            after.append(await peer.next())

        # A token function, which could give a fresh token: still no login.
        client = await Client.connect(await self.serve(first, second), lambda: "fresh", **FAST)
        events: list[str] = []
        closed: asyncio.Future[RouterdError | None] = asyncio.get_running_loop().create_future()
        client.on("kicked", lambda reason: events.append(f"kicked: {reason}"))
        client.on("resume_failed", lambda reason: events.append(f"resume_failed: {reason}"))
        client.on("reconnected", lambda _: events.append("reconnected"))
        client.on("closed", lambda error: closed.done() or closed.set_result(error))
        try:
            await client.ping()
            await self.scripts_done(2)
            self.assertEqual(after, [None], "the client closed after the refusal, no login")
            error = await asyncio.wait_for(closed, 5)
            self.assertIsInstance(error, Kicked)
            assert error is not None
            self.assertEqual(error.reason, "session kicked")
            self.assertEqual(events, ["kicked: session kicked"])
            with self.assertRaises(NotSent):
                await client.ping()
        finally:
            await client.close()

    async def test_a_resume_refused_token_expired_logs_in_with_a_fresh_token(self) -> None:
        async def first(peer: Peer) -> None:
            await login(peer)
            peer.push(p.Route.SYS_SESSION, 0, p.encode_session(p.Session(TOKEN, 30000)))
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"")

        async def second(peer: Peer) -> None:
            peer.refuse(await peer.expect(p.Route.AUTH_RESUME, 2), 4, "token expired")
            assert (await login(peer)).body == b"fresh 2"
            peer.answer(await peer.expect(p.Route.SYS_PING, 1), b"")
            await peer.next()

        tokens: list[str] = []

        def token() -> str:
            tokens.append(f"fresh {len(tokens) + 1}")
            return tokens[-1]

        client = await Client.connect(await self.serve(first, second), token, **FAST)
        events: list[str] = []
        reconnected = asyncio.Event()
        client.on("kicked", lambda reason: events.append(f"kicked: {reason}"))
        client.on("resume_failed", lambda reason: events.append(f"resume_failed: {reason}"))
        client.on("reconnected", lambda _: reconnected.set())
        await client.ping()
        await asyncio.wait_for(reconnected.wait(), 5)
        await client.ping()
        self.assertEqual(events, ["kicked: token expired"])
        await client.close()
        await self.scripts_done(2)

    async def test_a_failover_refusing_the_reconnects_logins_is_waited_out_until_the_deadline(self) -> None:
        # The owner dies with the call in flight; the survivor refuses the
        # player's logins UNAVAILABLE until it declares the owner down, for
        # longer than one attempt's timeout and than the reconnect backoff's
        # first delays: the client keeps reconnecting and the call keeps its
        # key until the survivor serves.
        keys: list[int] = []
        refusals = 0

        async def owner(peer: Peer) -> None:
            await login(peer)
            keys.append((await peer.expect(p.Route.PLAYER_INCR, 2)).key)

        async def refusing(peer: Peer) -> None:
            nonlocal refusals
            refusals += 1
            peer.refuse(await peer.expect(p.Route.AUTH_LOGIN, 2), 7, "object unavailable")
            await peer.next()

        async def survivor(peer: Peer) -> None:
            await login(peer)
            # Every attempt is answered, as a server that remembers the key
            # would (a loaded machine may time the first out and send another).
            while (again := await peer.next()) is not None:
                assert again.route_id == p.Route.PLAYER_INCR, again
                keys.append(again.key)
                peer.answer(again, p.encode_i64(10))

        refused = [refusing] * 8
        options = {"retry": Retry(0.005, 0.02, 0.05), "reconnect": Backoff(0.05, 0.1, 100)}
        client = await Client.connect(await self.serve(owner, *refused, survivor), "t", **options)
        try:
            self.assertEqual(await client.player_incr(10, timeout_s=10), 10)
        finally:
            await client.close()
        self.assertEqual(refusals, 8)
        self.assertGreaterEqual(len(keys), 2)
        self.assertEqual(set(keys), {keys[0]}, "one key for every run")
        await self.scripts_done(10)

    async def test_a_retrys_refusal_is_the_answer_and_close_reports_the_lost_connection(self) -> None:
        async def first(peer: Peer) -> None:
            await login(peer)
            await peer.expect(p.Route.PLAYER_INCR, 2)

        async def second(peer: Peer) -> None:
            await login(peer)
            peer.refuse(await peer.expect(p.Route.PLAYER_INCR, 2), 5, "counter would overflow")
            await peer.expect(p.Route.PLAYER_INCR, 2)

        client = await Client.connect(await self.serve(first, second), "t", **FAST)
        with self.assertRaises(ServerError) as refused:
            await client.player_incr(1)
        self.assertEqual(refused.exception.code, 5)
        # The next call's connection is lost and no server takes the
        # reconnect; the caller closes: "maybe applied", not NotSent.
        lost = asyncio.ensure_future(client.player_incr(1))
        # Closed once the second server took the call and hung up (not at a
        # fixed time: on a loaded machine the call may not be sent by then).
        await self.until(lambda: len(self.runs) >= 2 and self.runs[1].done())
        await client.close()
        with self.assertRaises(ConnectionLost):
            await lost
        await self.scripts_done(2)


if __name__ == "__main__":
    unittest.main()
