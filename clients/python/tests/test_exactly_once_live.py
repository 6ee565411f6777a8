"""Exactly-once effects through real nodes (ROUTERD_BIN): a keyed
`player.incr` whose answer is lost, by a cut connection or by `kill -9` of
the node that ran it, is sent again with its key and counts once
(docs/protocol.md, section 12). A proxy in the test runs the increment
through and drops its answer, so the first attempt certainly applied."""

from __future__ import annotations

import asyncio
import json
import unittest
from typing import Callable

from routerd_client import Backoff, Client, ConnectionLost, RouterdError, ServerTimeout, Unavailable, token_for
from routerd_client import protocol as p

import nodes
from case import AsyncTestCase
from nodes import SECRET
from test_live import need_binary

FAST = {"reconnect": Backoff(0.02, 0.2, 200)}
#: A failover on a loaded machine: the survivor declares the killed node
#: down, and then serves its player, only while its own heartbeats commit in
#: time, which may take tens of seconds at a load of many times the cores.
FAILOVER_S = 60.0


async def connect_when_served(url: str, token: str, timeout_s: float = 20.0, **options: object) -> Client:
    """`Client.connect`, again while the login fails UNAVAILABLE or TIMEOUT: a
    node just started (or loaded) may not serve the player for a moment, and
    `connect` raises a failed login as it is."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            return await Client.connect(url, token, **options)
        except (Unavailable, ServerTimeout):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


class Proxy:
    """A TCP proxy to a gateway. Armed, it drops the next `player.incr`
    RESPONSE and then cuts the connection ("cut") or leaves it hanging
    ("hold"); it records the key of every keyed `player.incr`."""

    def __init__(self, upstream: Callable[[], str]) -> None:
        self._upstream = upstream
        self.incr_keys: list[int] = []
        self._armed: str | None = None
        self.swallowed = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def swallow_next_incr(self, then: str) -> None:
        self._armed = then
        self.swallowed.clear()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        host, port = self._upstream().rsplit(":", 1)
        try:
            server_reader, server_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        self._writers |= {client_writer, server_writer}

        async def frames(reader: asyncio.StreamReader, on_frame: Callable[[bytes], bool]) -> None:
            try:
                while True:
                    header = await reader.readexactly(16)
                    frame = header + await reader.readexactly(int.from_bytes(header[12:16], "little"))
                    if not on_frame(frame):
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            client_writer.close()
            server_writer.close()

        def up(frame: bytes) -> bool:
            if int.from_bytes(frame[4:8], "little") == p.Route.PLAYER_INCR and frame[2] == p.VERSION_KEYED:
                self.incr_keys.append(int.from_bytes(frame[16:24], "little"))
            server_writer.write(frame)
            return True

        def down(frame: bytes) -> bool:
            route = int.from_bytes(frame[4:8], "little")
            if self._armed is not None and frame[3] == p.Kind.RESPONSE and route == p.Route.PLAYER_INCR:
                then, self._armed = self._armed, None
                self.swallowed.set()
                return then != "cut"
            client_writer.write(frame)
            return True

        await asyncio.gather(frames(client_reader, up), frames(server_reader, down))

    def close(self) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()


class ExactlyOnceLive(AsyncTestCase):
    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        need_binary()
        self.cluster = nodes.Cluster()

    async def asyncTearDown(self) -> None:
        self.cluster.close()

    async def test_an_incr_whose_answer_a_cut_connection_lost_is_sent_again_and_counts_once(self) -> None:
        node = self.cluster.start(1)
        proxy = Proxy(lambda: node.gateway)
        await proxy.start()
        try:
            client = await connect_when_served(proxy.url(), token_for(SECRET, 1301), **FAST)
            self.assertEqual(client.protocol_version, 2)
            before = await client.player_get()
            proxy.swallow_next_incr("cut")
            self.assertEqual(await client.player_incr(5), before + 5, "the first run's answer")
            self.assertTrue(proxy.swallowed.is_set())
            self.assertEqual(await client.player_get(), before + 5, "counted once")
            self.assertGreaterEqual(len(proxy.incr_keys), 2)
            self.assertEqual(set(proxy.incr_keys), {proxy.incr_keys[0]})
            self.assertEqual(client.reconnects, 1)
            await client.close()

            # The same cut without exactly_once: the caller is told "maybe
            # applied", and it was.
            plain = await connect_when_served(proxy.url(), token_for(SECRET, 1301), exactly_once=False)
            proxy.swallow_next_incr("cut")
            with self.assertRaises(ConnectionLost):
                await plain.player_incr(1)
            await plain.close()
            # Read with retries: on a loaded machine the node may answer a
            # read UNAVAILABLE for a moment (a lapsed lease), as it may any.
            async with await connect_when_served(node.url(), token_for(SECRET, 1301), **FAST) as check:
                self.assertEqual(await check.player_get(), before + 6)
        finally:
            proxy.close()

    async def test_an_incr_whose_node_is_killed_after_running_it_is_answered_once_by_the_new_owner(self) -> None:
        one = self.cluster.start(1)
        two = self.cluster.start(2)
        self.cluster.wait_up(one, [2])
        self.cluster.wait_up(two, [1])
        player = 1302
        async with await connect_when_served(one.url(), token_for(SECRET, player)) as first:
            before = await first.player_incr(1)
        status, body = one.get(f"/objects/player/{player}")
        self.assertEqual(status, 200, body)
        owner, other = (one, two) if json.loads(body)["owner"] == 1 else (two, one)
        proxy = Proxy(lambda: owner.gateway)
        await proxy.start()
        try:
            # Reconnects for as long as the call may wait: with FAST's 200
            # the loop could give up (about 20 s) before a slow failover.
            client = await connect_when_served(
                proxy.url(),
                token_for(SECRET, player),
                fallback_addresses=[other.url()],
                reconnect=Backoff(0.02, 0.2, 100_000),
            )
            proxy.swallow_next_incr("hold")
            answer = asyncio.ensure_future(client.player_incr(10, timeout_s=FAILOVER_S))
            await asyncio.wait_for(proxy.swallowed.wait(), 10)
            owner.process.kill()
            try:
                value = await answer
            except RouterdError as error:
                tail = "\n".join(other.log[-30:])
                raise AssertionError(f"no answer within {FAILOVER_S} s ({error}); the survivor's log:\n{tail}")
            self.assertEqual(value, before + 10, "the first run's answer, from the new owner")
            self.assertEqual(client.address, other.url())
            self.assertEqual(await client.player_get(), before + 10, "counted once")
            await client.close()
        finally:
            proxy.close()


if __name__ == "__main__":
    unittest.main()
