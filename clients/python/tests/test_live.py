"""The client against real routerd nodes (ROUTERD_BIN): login, incr/get,
a room push, errors with code and reason, sys.redirect during a drain,
reconnect after a restart, the in-flight bound, token expiry."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
import unittest

from routerd_client import (
    AuthFailed,
    Backoff,
    BadRequest,
    Client,
    ConnectionLost,
    Kicked,
    RoomMessage,
    UnknownRoute,
    mint_token,
    token_for,
)

import nodes
from case import AsyncTestCase
from nodes import SECRET

#: Requests the drain test keeps in flight while the node drains.
DRAIN_PIPELINE = 8


def need_binary() -> None:
    if nodes.binary():
        return
    if os.environ.get("CI"):
        raise AssertionError("ROUTERD_BIN is not set: the live tests need the routerd binary")
    raise unittest.SkipTest("ROUTERD_BIN is not set")


class OneNode(AsyncTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        need_binary()
        cls.cluster = nodes.Cluster()
        cls.ws_port = nodes.free_port()
        cls.tls_port = nodes.free_port()
        extra = f'websocket_listen = "127.0.0.1:{cls.ws_port}"\n'
        if nodes.CERT_FILE:
            extra += (
                f'tls_listen = "127.0.0.1:{cls.tls_port}"\n'
                f"tls_cert_file = {json.dumps(nodes.CERT_FILE)}\ntls_key_file = {json.dumps(nodes.KEY_FILE)}\n"
            )
        cls.node = cls.cluster.start(1, gateway_extra=extra)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.cluster.close()

    async def test_login_incr_get(self) -> None:
        async with await Client.connect(self.node.url(), token_for(SECRET, 501)) as client:
            self.assertEqual(client.player_id, 501)
            before = await client.player_get()
            self.assertEqual(await client.player_incr(5), before + 5)
            self.assertEqual(await client.player_incr(-2), before + 3)
            self.assertEqual(await client.player_get(), before + 3)
            self.assertEqual(await client.ping(b"hello"), b"hello")

    async def test_websocket_login_incr_and_a_push_from_a_tcp_client(self) -> None:
        try:
            import websockets  # noqa: F401
        except ImportError:
            if os.environ.get("CI"):
                raise
            self.skipTest("no websockets package")
        got: asyncio.Queue[RoomMessage] = asyncio.Queue()
        ws = await Client.connect(f"ws://127.0.0.1:{self.ws_port}/", token_for(SECRET, 510))
        tcp = await Client.connect(self.node.url(), token_for(SECRET, 511))
        ws.on("room_message", got.put_nowait)
        try:
            before = await ws.player_get()
            self.assertEqual(await ws.player_incr(7), before + 7)
            await ws.room_join(79)
            await tcp.room_join(79)
            await tcp.room_say(79, "over tcp, to ws")
            self.assertEqual(await asyncio.wait_for(got.get(), 5), RoomMessage(79, 511, "over tcp, to ws"))
            answers = await asyncio.gather(*(ws.ping(bytes([i])) for i in range(32)))
            self.assertEqual(answers, [bytes([i]) for i in range(32)])
        finally:
            await ws.close()
            await tcp.close()

    async def test_tls_login_and_incr(self) -> None:
        if not nodes.CERT_FILE:
            if os.environ.get("CI"):
                raise AssertionError("ROUTERD_TEST_CERT_FILE is not set")
            self.skipTest("ROUTERD_TEST_CERT_FILE is not set (tests/clients.rs makes one)")
        context = ssl.create_default_context(cafile=nodes.CERT_FILE)
        url = f"tls://127.0.0.1:{self.tls_port}"
        async with await Client.connect(url, token_for(SECRET, 512), ssl_context=context) as client:
            before = await client.player_get()
            self.assertEqual(await client.player_incr(2), before + 2)
        # A client that does not trust the certificate does not get in.
        with self.assertRaises(ssl.SSLError):
            await Client.connect(url, token_for(SECRET, 512))

    async def test_room_push_reaches_a_second_client(self) -> None:
        got: asyncio.Queue[RoomMessage] = asyncio.Queue()
        a = await Client.connect(self.node.url(), token_for(SECRET, 502))
        b = await Client.connect(self.node.url(), token_for(SECRET, 503))
        b.on("room_message", got.put_nowait)
        try:
            await a.room_join(77)
            self.assertEqual(await b.room_join(77), 2)
            self.assertEqual(await a.room_say(77, "hello b"), 2)
            message = await asyncio.wait_for(got.get(), 5)
            self.assertEqual(message, RoomMessage(77, 502, "hello b"))
        finally:
            await a.close()
            await b.close()

    async def test_errors_carry_code_reason_and_retry_safety(self) -> None:
        async with await Client.connect(self.node.url(), token_for(SECRET, 504)) as client:
            with self.assertRaises(UnknownRoute) as unknown:
                await client.call(9999, b"")
            self.assertEqual((unknown.exception.code, unknown.exception.reason), (1, "unknown route"))
            self.assertTrue(unknown.exception.retry_safe)
            with self.assertRaises(BadRequest) as bad:
                await client.room_say(424242, "not a member")
            self.assertEqual(bad.exception.code, 5)
            self.assertTrue(bad.exception.retry_safe)
            # The session still serves after refusals.
            self.assertEqual(await client.ping(b"x"), b"x")
        forged = mint_token("not the secret", 504, int(time.time()) + 60)
        with self.assertRaises(AuthFailed) as failed:
            await Client.connect(self.node.url(), forged)
        self.assertEqual(failed.exception.reason, "token signature does not match")

    async def test_the_inflight_bound_holds_requests_back(self) -> None:
        async with await Client.connect(self.node.url(), token_for(SECRET, 505), inflight_max=4) as client:
            seen = []

            async def one(i: int) -> bytes:
                seen.append(client.inflight())
                return await client.ping(str(i).encode())

            answers = await asyncio.gather(*(one(i) for i in range(64)))
            self.assertEqual(answers, [str(i).encode() for i in range(64)])
            self.assertLessEqual(max(seen), 4)
            self.assertEqual(client.inflight(), 0)

    async def test_an_expired_token_kicks_and_a_fresh_one_reconnects(self) -> None:
        tokens = []

        def fresh() -> str:
            # The first login's token ends within 2 s; later ones last.
            ttl = 2 if not tokens else 3600
            tokens.append(mint_token(SECRET, 506, int(time.time()) + ttl))
            return tokens[-1]

        kicked: asyncio.Queue[str] = asyncio.Queue()
        reconnected: asyncio.Queue[str] = asyncio.Queue()
        client = await Client.connect(self.node.url(), fresh, reconnect=Backoff(0.01, 0.1, 10))
        client.on("kicked", kicked.put_nowait)
        client.on("reconnected", reconnected.put_nowait)
        try:
            self.assertEqual(await asyncio.wait_for(kicked.get(), 5), "token expired")
            await asyncio.wait_for(reconnected.get(), 5)
            self.assertEqual(await client.ping(b"again"), b"again")
            self.assertEqual(len(tokens), 2)
        finally:
            await client.close()


class Drain(AsyncTestCase):
    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        need_binary()
        self.cluster = nodes.Cluster()
        self.one = self.cluster.start(1)
        self.two = self.cluster.start(2)
        self.cluster.wait_up(self.one, [2])
        self.cluster.wait_up(self.two, [1])

    async def asyncTearDown(self) -> None:
        self.cluster.close()

    async def test_redirect_during_a_drain_fails_no_request(self) -> None:
        client = await Client.connect(self.one.url(), token_for(SECRET, 601))
        start = await client.player_get()
        acked = 0
        stop = asyncio.Event()

        async def worker() -> None:
            nonlocal acked
            while not stop.is_set():
                await client.player_incr(1)
                acked += 1

        workers = [asyncio.create_task(worker()) for _ in range(DRAIN_PIPELINE)]
        await asyncio.sleep(0.2)
        status, _ = await asyncio.to_thread(self.one.post, "/drain")
        self.assertEqual(status, 202)
        deadline = time.monotonic() + 20
        while client.redirects_followed == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        stop.set()
        # Any failed request raises here.
        await asyncio.gather(*workers)
        self.assertEqual(client.redirects_followed, 1)
        self.assertEqual(client.address, self.two.url())
        self.assertEqual(await client.player_get(), start + acked)
        await client.close()
        self.assertEqual(await asyncio.to_thread(self.one.wait_exit, 20), 0)


class Placement(AsyncTestCase):
    """Nodes with `gateway.place_sessions`: a login away from the player's
    node is answered, then redirected there; the client follows at once."""

    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        need_binary()
        self.cluster = nodes.Cluster()
        self.one = self.cluster.start(1, gateway_extra="place_sessions = true\n")
        self.two = self.cluster.start(2, gateway_extra="place_sessions = true\n")
        self.cluster.wait_up(self.one, [2])
        self.cluster.wait_up(self.two, [1])

    async def asyncTearDown(self) -> None:
        self.cluster.close()

    async def test_a_login_away_from_the_player_moves_to_its_node(self) -> None:
        player = 801
        # Created on its rendezvous node, wherever it first logs in.
        first = await Client.connect(self.one.url(), token_for(SECRET, player))
        self.assertEqual(await first.player_incr(1), 1)
        await first.close()
        status, body = self.one.get(f"/objects/player/{player}")
        self.assertEqual(status, 200, body)
        owner, away = (self.one, self.two) if json.loads(body)["owner"] == 1 else (self.two, self.one)
        client = await Client.connect(away.url(), token_for(SECRET, player))
        deadline = time.monotonic() + 10
        while client.redirects_followed == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self.assertEqual(client.redirects_followed, 1)
        self.assertEqual(client.address, owner.url())
        self.assertEqual(await client.player_incr(1), 2)
        await client.close()


class Restart(AsyncTestCase):
    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        need_binary()
        self.cluster = nodes.Cluster()

    async def asyncTearDown(self) -> None:
        self.cluster.close()

    async def test_reconnect_after_the_node_restarts(self) -> None:
        port = nodes.free_port()
        node = self.cluster.start(1, gateway_port=port)
        lost: asyncio.Queue[object] = asyncio.Queue()
        client = await Client.connect(node.url(), token_for(SECRET, 701), reconnect=Backoff(0.02, 0.3, 60))
        client.on("disconnected", lost.put_nowait)
        try:
            counter = await client.player_incr(3)
            self.assertEqual(await asyncio.to_thread(node.stop), 0)
            error = await asyncio.wait_for(lost.get(), 10)
            self.assertIsInstance(error, (ConnectionLost, Kicked))
            self.assertFalse(error.retry_safe)
            # Waits for the session to come back, then is sent.
            pending = asyncio.create_task(client.player_incr(1, timeout_s=30))
            await asyncio.sleep(0.2)
            self.assertFalse(pending.done())
            await asyncio.to_thread(self.cluster.start, 1, port)
            self.assertEqual(await pending, counter + 1)
            self.assertEqual(client.reconnects, 1)
        finally:
            await client.close()


if __name__ == "__main__":
    unittest.main()
