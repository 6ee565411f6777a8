"""Real `routerd serve` processes for the live tests: the binary named by
ROUTERD_BIN (the Rust test that runs these passes the CI build's), on
loopback ports, sharing one SQLite file when they form a cluster."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

SECRET = "client-library-test-secret"
#: A certificate and key for TLS listeners (tests/clients.rs makes them).
CERT_FILE = os.environ.get("ROUTERD_TEST_CERT_FILE")
KEY_FILE = os.environ.get("ROUTERD_TEST_KEY_FILE")
#: How long a node gets to print its addresses.
START_TIMEOUT_S = 20.0


def binary() -> str | None:
    return os.environ.get("ROUTERD_BIN")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Node:
    def __init__(self, process: subprocess.Popen[str], gateway: str, admin: str, log: list[str]) -> None:
        self.process = process
        self.gateway = gateway
        self.admin = admin
        self.log = log

    def url(self, scheme: str = "tcp") -> str:
        return f"{scheme}://{self.gateway}"

    def post(self, path: str) -> tuple[int, dict[str, object]]:
        request = urllib.request.Request(f"http://{self.admin}{path}", data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{self.admin}{path}", timeout=15) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def stop(self, timeout_s: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def wait_exit(self, timeout_s: float) -> int:
        return self.process.wait(timeout_s)


class Cluster:
    """Nodes of one test: their configs in a temporary directory."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="routerd-client-test-")
        self.dir = Path(self._dir.name)
        self.nodes: list[Node] = []
        self._starts = 0

    def config(self, node_id: int, gateway_port: int = 0, gateway_extra: str = "", extra: str = "") -> str:
        """`gateway_extra`: more keys of `[gateway]` (websocket_listen, say);
        `extra`: more sections (`[scripts]`, say)."""
        db = self.dir / "cluster.db"
        data = self.dir / f"data-{node_id}"
        return (
            f"[node]\nid = {node_id}\ndata_dir = {json.dumps(str(data))}\n"
            "[cores]\ncount = 1\nrecv_buffers = 64\nshutdown_deadline_ms = 3000\n"
            f'[store]\nbackend = "sqlite"\npath = {json.dumps(str(db))}\nsynchronous = "normal"\n'
            '[cluster]\nlisten = "127.0.0.1:0"\nsecret = "the client tests\' cluster secret"\n'
            "heartbeat_interval_ms = 100\nfence_after_ms = 400\ndown_after_ms = 800\n"
            "redirect_grace_ms = 5000\n"
            '[services.player]\npersist = "on_write"\n'
            f'[gateway]\nlisten = "127.0.0.1:{gateway_port}"\n{gateway_extra}\n'
            '[admin]\nlisten = "127.0.0.1:0"\n'
            f'[auth]\nsecret = "{SECRET}"\n{extra}'
        )

    def start(self, node_id: int, gateway_port: int = 0, gateway_extra: str = "", extra: str = "") -> Node:
        path = binary()
        assert path, "ROUTERD_BIN names no routerd binary"
        self._starts += 1
        config = self.dir / f"node-{node_id}-{self._starts}.toml"
        config.write_text(self.config(node_id, gateway_port, gateway_extra, extra))
        env = {k: v for k, v in os.environ.items() if k != "ROUTERD_AUTH_SECRET"}
        process = subprocess.Popen(
            [path, "serve", "--config", str(config)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        found: dict[str, str] = {}
        ready = threading.Event()
        log: list[str] = []

        def pump() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                log.append(line.rstrip())
                del log[:-2000]
                if not ready.is_set():
                    gateway = re.search(r"gateway=(\S+)", line)
                    admin = re.search(r"admin=(\S+)", line)
                    if gateway and admin:
                        found.update(gateway=gateway.group(1), admin=admin.group(1))
                        ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(START_TIMEOUT_S):
            process.kill()
            raise AssertionError(f"node {node_id} did not serve: {log[-20:]}")
        node = Node(process, found["gateway"], found["admin"], log)
        self.nodes.append(node)
        return node

    def wait_up(self, node: Node, peers: list[int], timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, body = node.get("/cluster")
            if status == 200:
                cluster = json.loads(body)
                states = {m["node_id"]: m["state"] for m in cluster.get("members", [])}
                if cluster.get("state") == "up" and all(states.get(p) == "up" for p in peers):
                    return
            time.sleep(0.05)
        raise AssertionError(f"members {peers} not up")

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        self._dir.cleanup()
