"""Byte transports: TCP and TLS from the standard library, WebSocket with
the optional `websockets` package. Each carries the protocol's frames as a
byte stream; over WebSocket every binary message holds whole frames."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Protocol

#: Bytes a TCP transport lets queue in the kernel's and asyncio's buffers
#: before a send waits for them to drain.
WRITE_BUFFER_MAX = 256 * 1024
#: Bytes one read asks for.
READ_CHUNK = 64 * 1024

#: How long closing waits for the peer's end of a TLS shutdown.
CLOSE_WAIT_S = 1.0

SCHEMES = ("tcp", "tls", "ws", "wss")


class Transport(Protocol):
    async def send(self, data: bytes) -> None: ...

    async def recv(self) -> bytes:
        """The next bytes, or b"" once the connection ended."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Address:
    scheme: str
    host: str
    port: int
    path: str = "/"

    @staticmethod
    def parse(text: str) -> "Address":
        """`tcp://host:port`, `tls://…`, `ws://host:port/path`, `wss://…`,
        or a bare `host:port` (TCP)."""
        scheme, sep, rest = text.partition("://")
        if not sep:
            scheme, rest = "tcp", text
        if scheme not in SCHEMES:
            raise ValueError(f"scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
        hostport, slash, path = rest.partition("/")
        host, colon, port = hostport.rpartition(":")
        if not colon or not port.isdigit():
            raise ValueError(f"address {text!r} has no port")
        host = host.strip("[]")
        return Address(scheme, host, int(port), "/" + path if slash else "/")

    def with_gateway(self, hostport: str) -> "Address":
        """The gateway a `sys.redirect` names, on this address's transport."""
        moved = Address.parse(f"{self.scheme}://{hostport}")
        return Address(self.scheme, moved.host, moved.port, self.path)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        tail = self.path if self.scheme in ("ws", "wss") else ""
        return f"{self.scheme}://{host}:{self.port}{tail}"


class StreamTransport:
    """TCP, or TLS over TCP, with asyncio's streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def send(self, data: bytes) -> None:
        if self._writer.is_closing():
            raise ConnectionResetError("the connection is closed")
        self._writer.write(data)
        if self._writer.transport.get_write_buffer_size() > WRITE_BUFFER_MAX:
            await self._writer.drain()

    async def recv(self) -> bytes:
        try:
            return await self._reader.read(READ_CHUNK)
        except (ConnectionError, OSError):
            return b""

    async def close(self) -> None:
        self._writer.close()
        try:
            # A TLS peer that does not answer close_notify would hold this
            # for asyncio's 30 s shutdown timeout: nothing is owed at close,
            # so give up sooner and drop the connection.
            await asyncio.wait_for(self._writer.wait_closed(), CLOSE_WAIT_S)
        except asyncio.TimeoutError:
            self._writer.transport.abort()
        except (ConnectionError, OSError, ssl.SSLError):
            pass


class WebSocketTransport:
    """A WebSocket connection (the `websockets` package): each send is one
    binary message."""

    def __init__(self, socket: object) -> None:
        self._socket = socket

    async def send(self, data: bytes) -> None:
        await self._socket.send(data)  # type: ignore[attr-defined]

    async def recv(self) -> bytes:
        from websockets.exceptions import ConnectionClosed

        try:
            message = await self._socket.recv()  # type: ignore[attr-defined]
        except ConnectionClosed:
            return b""
        if isinstance(message, str):
            # The server sends binary messages only; a text one is a
            # violation, ending the connection like a bad frame.
            raise ValueError("text message on a routerd WebSocket")
        return bytes(message)

    async def close(self) -> None:
        await self._socket.close()  # type: ignore[attr-defined]


async def open_transport(
    address: Address, ssl_context: ssl.SSLContext | None, timeout_s: float
) -> Transport:
    if address.scheme in ("tcp", "tls"):
        context = None
        if address.scheme == "tls":
            context = ssl_context or ssl.create_default_context()
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(address.host, address.port, ssl=context), timeout_s
        )
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return StreamTransport(reader, writer)
    try:
        from websockets.asyncio.client import connect
    except ImportError as error:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "the WebSocket transport needs the `websockets` package: "
            "pip install 'routerd-client[websocket]'"
        ) from error
    context = None
    if address.scheme == "wss":
        context = ssl_context or ssl.create_default_context()
    socket_ = await asyncio.wait_for(
        connect(str(address), ssl=context, max_size=None, compression=None), timeout_s
    )
    return WebSocketTransport(socket_)
