"""The client against a scripted server on loopback: what a real node
rarely does on demand (no answer, an unknown frame kind)."""

from __future__ import annotations

import asyncio
import unittest
from typing import Awaitable, Callable

from routerd_client import Client, ConnectionLost, ProtocolViolation, RequestTimeout, Route
from routerd_client import protocol as p

from case import AsyncTestCase

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """A REQUEST's route, seq and body (a version-2 one's request key
    dropped)."""
    header = await reader.readexactly(16)
    route_id = int.from_bytes(header[4:8], "little")
    seq = int.from_bytes(header[8:12], "little")
    body = await reader.readexactly(int.from_bytes(header[12:16], "little"))
    return route_id, seq, body[p.KEY_LEN :] if header[2] == p.VERSION_KEYED else body


async def accept_login(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    route_id, seq, _ = await read_frame(reader)
    assert route_id == Route.AUTH_LOGIN
    writer.write(p.encode_frame(p.Kind.RESPONSE, route_id, seq, p.encode_u64(9)))


async def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Polls `condition` until it holds, failing with `what` after `timeout_s`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.01)


class Fake(AsyncTestCase):
    async def serve(self, script: Script) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await accept_login(reader, writer)
            try:
                await script(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.addAsyncCleanup(server.wait_closed)
        self.addCleanup(server.close)
        return "tcp://127.0.0.1:%d" % server.sockets[0].getsockname()[1]

    async def test_no_answer_is_a_client_timeout_maybe_applied_and_its_seq_is_kept(self) -> None:
        seqs: list[int] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            _, seq, _ = await read_frame(reader)
            seqs.append(seq)
            _, seq, _ = await read_frame(reader)
            seqs.append(seq)
            await asyncio.sleep(5)

        client = await Client.connect(await self.serve(silent), "t")
        with self.assertRaises(RequestTimeout) as timeout:
            await client.ping(b"x", timeout_s=0.1)
        self.assertFalse(timeout.exception.retry_safe)
        self.assertEqual(client.inflight(), 1, "the seq stays taken until its answer")
        with self.assertRaises(RequestTimeout):
            await client.ping(b"y", timeout_s=0.1)
        # The second frame was sent; the server reads it when it is next
        # scheduled, which on a loaded machine may be after the timeout.
        await wait_until(lambda: len(seqs) == 2, "the server read both requests")
        self.assertEqual(len(set(seqs)), 2, "a seq in flight is not reused")
        await client.close()

    async def test_an_unknown_frame_kind_closes_and_fails_what_was_in_flight(self) -> None:
        async def newer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_frame(reader)
            writer.write(p.encode_frame(7, 0, 0, b"from the future"))
            await asyncio.sleep(5)

        closed: asyncio.Queue[object] = asyncio.Queue()
        # Version 1's behaviour: with exactly_once the ping would be retried
        # on a new connection (test_exactly_once_fake.py).
        client = await Client.connect(await self.serve(newer), "t", exactly_once=False)
        client.on("closed", closed.put_nowait)
        with self.assertRaises(ProtocolViolation) as violation:
            await client.ping(b"x", timeout_s=5)
        self.assertFalse(violation.exception.retry_safe)
        self.assertIsInstance(await asyncio.wait_for(closed.get(), 5), ProtocolViolation)
        await client.close()

    async def test_call_json_sends_json_and_decodes_the_answer(self) -> None:
        bodies: list[bytes] = []

        async def scripted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for answer in (b'{"n":5}', b"", b"plain"):
                route_id, seq, body = await read_frame(reader)
                bodies.append(body)
                writer.write(p.encode_frame(p.Kind.RESPONSE, route_id, seq, answer))
            await asyncio.sleep(5)

        client = await Client.connect(await self.serve(scripted), "t")
        self.assertEqual(await client.call_json(2001, {"by": 5}, timeout_s=5), {"n": 5})
        self.assertIsNone(await client.callJson(2002, {"id": 7}, timeout_s=5))
        self.assertEqual(await client.call_json(2003, None, timeout_s=5), "plain")
        self.assertEqual(bodies, [b'{"by":5}', b'{"id":7}', b"null"])
        await client.close()

    async def test_unknown_push_routes_are_ignored(self) -> None:
        async def pushes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            _, seq, body = await read_frame(reader)
            writer.write(p.encode_frame(p.Kind.PUSH, 4242, 0, b"new push"))
            writer.write(p.encode_frame(p.Kind.RESPONSE, Route.SYS_PING, seq, body))
            await asyncio.sleep(5)

        seen: list[p.Frame] = []
        client = await Client.connect(await self.serve(pushes), "t")
        client.on("push", seen.append)
        self.assertEqual(await client.ping(b"ok"), b"ok")
        self.assertEqual(seen, [p.Frame(p.Kind.PUSH, 4242, 0, b"new push")])
        await client.close()

    async def test_a_closed_connection_fails_requests_as_connection_lost(self) -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_frame(reader)

        # Version 1's behaviour: with exactly_once the call would be retried
        # with its key on a new connection (test_exactly_once_fake.py).
        client = await Client.connect(await self.serve(hang_up), "t", exactly_once=False)
        with self.assertRaises(ConnectionLost) as lost:
            await client.player_incr(1, timeout_s=5)
        self.assertFalse(lost.exception.retry_safe)
        await client.close()


if __name__ == "__main__":
    unittest.main()
