"""An independent client of routerd's WebSocket listener, on the `websockets`
package: two sessions log in, one increments its counter twice, both join a
room, one says something and the other receives the room.message push.

Usage: ws_session.py URL SECRET PLAYER_ID [--ca-file PEM]
Prints one line per step and `ok` at the end; exits non-zero on any
mismatch. Each binary message it sends holds whole protocol frames; answers
may arrive several to a message and are split by the frame header.
"""

import asyncio
import hashlib
import hmac
import ssl
import struct
import sys
import time

import websockets

HEADER = struct.Struct("<2sBBIII")  # magic, version, kind, route, seq, len
REQUEST, RESPONSE, PUSH, ERROR = 1, 2, 3, 4
AUTH_LOGIN, PLAYER_INCR, ROOM_JOIN, ROOM_SAY, ROOM_MESSAGE = 2, 11, 20, 22, 100


def token(secret: str, player_id: int) -> bytes:
    payload = f"v1.{player_id}.{int(time.time()) + 3600}"
    mac = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    return f"{payload}.{mac}".encode()


def frame(route: int, seq: int, body: bytes) -> bytes:
    return HEADER.pack(b"RT", 1, REQUEST, route, seq, len(body)) + body


class Session:
    def __init__(self, ws):
        self.ws = ws
        self.seq = 0
        self.buffer = b""
        self.pushes = []

    async def frames(self):
        while True:
            while len(self.buffer) >= HEADER.size:
                magic, _, kind, route, seq, length = HEADER.unpack_from(self.buffer)
                assert magic == b"RT", self.buffer[:16]
                if len(self.buffer) < HEADER.size + length:
                    break
                body = self.buffer[HEADER.size : HEADER.size + length]
                self.buffer = self.buffer[HEADER.size + length :]
                yield kind, route, seq, body
            message = await asyncio.wait_for(self.ws.recv(), 5)
            assert isinstance(message, bytes), "the server sent a text message"
            self.buffer += message

    async def call(self, route: int, body: bytes) -> bytes:
        self.seq += 1
        await self.ws.send(frame(route, self.seq, body))
        async for kind, route_id, seq, answer in self.frames():
            if kind == PUSH:
                self.pushes.append((route_id, answer))
                continue
            assert seq == self.seq, (seq, self.seq)
            assert kind == RESPONSE, (kind, answer)
            return answer

    async def push(self, route: int) -> bytes:
        for route_id, body in self.pushes:
            if route_id == route:
                return body
        async for kind, route_id, _, body in self.frames():
            if kind == PUSH and route_id == route:
                return body


async def main():
    url, secret, player = sys.argv[1], sys.argv[2], int(sys.argv[3])
    context = None
    if "--ca-file" in sys.argv:
        context = ssl.create_default_context(cafile=sys.argv[sys.argv.index("--ca-file") + 1])
    async with websockets.connect(url, ssl=context, max_size=None) as first, websockets.connect(
        url, ssl=context, max_size=None
    ) as second:
        a, b = Session(first), Session(second)
        assert struct.unpack("<Q", await a.call(AUTH_LOGIN, token(secret, player)))[0] == player
        assert struct.unpack("<Q", await b.call(AUTH_LOGIN, token(secret, player + 1)))[0] == player + 1
        print("logged in")
        first_value = struct.unpack("<q", await a.call(PLAYER_INCR, struct.pack("<q", 5)))[0]
        second_value = struct.unpack("<q", await a.call(PLAYER_INCR, struct.pack("<q", 2)))[0]
        assert second_value == first_value + 2, (first_value, second_value)
        print(f"incr {first_value} {second_value}")
        room = struct.pack("<Q", 7000 + player)
        await a.call(ROOM_JOIN, room)
        await b.call(ROOM_JOIN, room)
        await a.call(ROOM_SAY, room + b"hello over websocket")
        pushed = await b.push(ROOM_MESSAGE)
        room_id, sender = struct.unpack_from("<QQ", pushed)
        assert (room_id, sender, pushed[16:]) == (7000 + player, player, b"hello over websocket")
        print("room push")
        # A ping is answered with a pong (the package waits for it).
        await asyncio.wait_for(await first.ping(), 5)
        print("pong")
    print("ok")


asyncio.run(main())
