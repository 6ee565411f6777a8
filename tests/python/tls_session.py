"""An independent client of routerd's TLS listener, on Python's `ssl` module:
logs in and increments over TLS 1.3 and TLS 1.2 (ALPN `routerd`), and
resumes each: TLS 1.3 from the ticket the server sends after the handshake
(read with the answers), TLS 1.2 from its session.

Usage: tls_session.py HOST PORT CA_FILE SECRET PLAYER_ID
Prints one line per step and `ok` at the end; exits non-zero on a mismatch.
"""

import hashlib
import hmac
import socket
import ssl
import struct
import sys
import time

HEADER = struct.Struct("<2sBBIII")
AUTH_LOGIN, PLAYER_INCR = 2, 11


def token(secret, player_id):
    payload = f"v1.{player_id}.{int(time.time()) + 3600}"
    mac = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    return f"{payload}.{mac}".encode()


def call(conn, route, seq, body):
    conn.sendall(HEADER.pack(b"RT", 1, 1, route, seq, len(body)) + body)
    head = b""
    while len(head) < HEADER.size:
        chunk = conn.recv(HEADER.size - len(head))
        assert chunk, "closed"
        head += chunk
    magic, _, kind, _, answered, length = HEADER.unpack(head)
    assert (magic, kind, answered) == (b"RT", 2, seq), (magic, kind, answered)
    body = b""
    while len(body) < length:
        body += conn.recv(length - len(body))
    return body


def session(host, port, context, secret, player, session=None):
    raw = socket.create_connection((host, port), timeout=5)
    conn = context.wrap_socket(raw, server_hostname="localhost", session=session)
    assert conn.selected_alpn_protocol() == "routerd", conn.selected_alpn_protocol()
    assert struct.unpack("<Q", call(conn, AUTH_LOGIN, 1, token(secret, player)))[0] == player
    a = struct.unpack("<q", call(conn, PLAYER_INCR, 2, struct.pack("<q", 1)))[0]
    b = struct.unpack("<q", call(conn, PLAYER_INCR, 3, struct.pack("<q", 1)))[0]
    assert b == a + 1, (a, b)
    return conn


def main():
    host, port, ca, secret, player = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    for version, name in [(ssl.TLSVersion.TLSv1_3, "TLSv1.3"), (ssl.TLSVersion.TLSv1_2, "TLSv1.2")]:
        context = ssl.create_default_context(cafile=ca)
        context.minimum_version = version
        context.maximum_version = version
        context.set_alpn_protocols(["routerd"])
        conn = session(host, port, context, secret, player)
        assert conn.version() == name, conn.version()
        assert not conn.session_reused, f"{name}: a first connection cannot resume"
        print(f"{name} login incr")
        # A TLS 1.3 ticket arrives after the handshake; `session` holds it
        # once the client has read past it (the answers above).
        saved = conn.session
        assert saved is not None and (version == ssl.TLSVersion.TLSv1_2 or saved.has_ticket), name
        conn.close()
        again = session(host, port, context, secret, player, session=saved)
        assert again.version() == name, again.version()
        assert again.session_reused, f"{name} session not resumed"
        print(f"{name} resumed")
        again.close()
    print("ok")


main()
