// Exactly-once effects through real nodes (ROUTERD_BIN): a keyed player.incr whose answer is lost,
// by a cut connection or by kill -9 of the node that ran it, is sent again with its key and
// counts once (docs/protocol.md, section 12). A proxy in the test runs the increment through
// and drops its answer, so the first attempt certainly applied.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, connect as netConnect, Server, Socket } from "node:net";

import * as p from "../src/protocol.js";
import { connect, tokenFor, ConnectionLost, ServerError } from "../src/node.js";
import type { Client, ClientOptions } from "../src/node.js";
import { Cluster, Node, SECRET, skipReason } from "./nodes.js";

const skip = skipReason() ?? undefined;
const FAST = { reconnect: { baseDelayMs: 20, maxDelayMs: 200, attemptsMax: 200 } };
// A failover on a loaded machine: the survivor declares the killed node down, and then serves its
// player, only while its own heartbeats commit in time, which may take tens of seconds at a load of
// many times the cores.
const FAILOVER_MS = 60_000;

/** connect, again while the login fails UNAVAILABLE or TIMEOUT: a node just started (or loaded) may
 * not serve the player for a moment, and connect rejects with a failed login as it is. */
async function connectWhenServed(url: string, token: string, options: ClientOptions = {}, timeoutMs = 20_000): Promise<Client> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await connect(url, token, options);
    } catch (error) {
      const passing = error instanceof ServerError && (error.code === p.Code.UNAVAILABLE || error.code === p.Code.TIMEOUT);
      if (!passing || Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** Splits a byte stream into frames. */
class Frames {
  private buffer = new Uint8Array(0);

  feed(data: Uint8Array): Uint8Array[] {
    const grown = new Uint8Array(this.buffer.length + data.length);
    grown.set(this.buffer);
    grown.set(data, this.buffer.length);
    this.buffer = grown;
    const out: Uint8Array[] = [];
    while (this.buffer.length >= 16) {
      const end = 16 + new DataView(this.buffer.buffer, this.buffer.byteOffset).getUint32(12, true);
      if (this.buffer.length < end) break;
      out.push(this.buffer.slice(0, end));
      this.buffer = this.buffer.slice(end);
    }
    return out;
  }
}

const routeOf = (frame: Uint8Array) => new DataView(frame.buffer, frame.byteOffset).getUint32(4, true);

/**
 * A TCP proxy to a gateway. Armed, it drops the next player.incr RESPONSE and then cuts the
 * connection ("cut") or leaves it hanging ("hold"); it records the key of every player.incr.
 */
class Proxy {
  readonly incrKeys: bigint[] = [];
  private armed: "cut" | "hold" | null = null;
  private onSwallowed: () => void = () => {};
  private readonly sockets = new Set<Socket>();
  private server!: Server;
  port = 0;

  constructor(private readonly upstream: () => string) {}

  async start(): Promise<void> {
    this.server = createServer((client) => this.relay(client));
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  url(): string {
    return `tcp://127.0.0.1:${this.port}`;
  }

  /** Resolves once the next player.incr answer was dropped. */
  swallowNextIncr(then: "cut" | "hold"): Promise<void> {
    this.armed = then;
    return new Promise((resolve) => (this.onSwallowed = resolve));
  }

  private relay(client: Socket): void {
    const [host, port] = this.upstream().split(":");
    const server = netConnect({ host, port: Number(port) });
    for (const socket of [client, server]) {
      this.sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => {
        this.sockets.delete(socket);
        client.destroy();
        server.destroy();
      });
    }
    const up = new Frames();
    client.on("data", (data: Buffer) => {
      for (const frame of up.feed(new Uint8Array(data))) {
        if (routeOf(frame) === p.Route.PLAYER_INCR && frame[2] === p.VERSION_KEYED) {
          this.incrKeys.push(new DataView(frame.buffer, frame.byteOffset).getBigUint64(16, true));
        }
        server.write(frame);
      }
    });
    const down = new Frames();
    server.on("data", (data: Buffer) => {
      for (const frame of down.feed(new Uint8Array(data))) {
        if (this.armed !== null && frame[3] === p.Kind.RESPONSE && routeOf(frame) === p.Route.PLAYER_INCR) {
          const then = this.armed;
          this.armed = null;
          this.onSwallowed();
          if (then === "cut") {
            client.destroy();
            server.destroy();
          }
          return;
        }
        client.write(frame);
      }
    });
  }

  close(): void {
    this.server.close();
    for (const socket of this.sockets) socket.destroy();
  }
}

test("a keyed player.incr whose answer a cut connection lost is sent again with its key and counts once", { skip }, async () => {
  const cluster = new Cluster();
  const node = await cluster.start(1);
  const proxy = new Proxy(() => node.gateway);
  await proxy.start();
  try {
    const client = await connectWhenServed(proxy.url(), await tokenFor(SECRET, 1201), FAST);
    assert.equal(client.protocolVersion, 2);
    const before = await client.playerGet();
    const swallowed = proxy.swallowNextIncr("cut");
    assert.equal(await client.playerIncr(5), before + 5n, "the first run's answer");
    await swallowed;
    assert.equal(await client.playerGet(), before + 5n, "counted once");
    assert.ok(proxy.incrKeys.length >= 2 && proxy.incrKeys.every((key) => key === proxy.incrKeys[0]), `keys ${proxy.incrKeys}`);
    assert.equal(client.reconnects, 1);
    client.close();

    // The same cut without exactlyOnce: the caller is told "maybe applied", and it was.
    const plain = await connectWhenServed(proxy.url(), await tokenFor(SECRET, 1201), { exactlyOnce: false });
    proxy.swallowNextIncr("cut");
    await assert.rejects(plain.playerIncr(1), ConnectionLost);
    plain.close();
    // Read with retries: on a loaded machine the node may answer a read
    // UNAVAILABLE for a moment (a lapsed lease), as it may any.
    const check = await connectWhenServed(node.url(), await tokenFor(SECRET, 1201), FAST);
    assert.equal(await check.playerGet(), before + 6n);
    check.close();
  } finally {
    proxy.close();
    await cluster.close();
  }
});

test("a keyed player.incr whose node is killed (-9) after running it is answered once by the new owner", { skip }, async () => {
  const cluster = new Cluster();
  let proxy: Proxy | null = null;
  try {
    const one = await cluster.start(1);
    const two = await cluster.start(2);
    await cluster.waitUp(one, [2]);
    await cluster.waitUp(two, [1]);
    const player = 1202;
    const first = await connectWhenServed(one.url(), await tokenFor(SECRET, player));
    const before = await first.playerIncr(1);
    first.close();
    const record = await one.getJson(`/objects/player/${player}`);
    const [owner, other]: Node[] = record.owner === 1 ? [one, two] : [two, one];
    proxy = new Proxy(() => owner.gateway);
    await proxy.start();
    // Reconnects for as long as the call may wait: with FAST's 200 the loop could give up (about
    // 20 s) before a slow failover.
    const client = await connectWhenServed(proxy.url(), await tokenFor(SECRET, player), {
      reconnect: { baseDelayMs: 20, maxDelayMs: 200, attemptsMax: 100_000 },
      fallbackAddresses: [other.url()],
    });
    const swallowed = proxy.swallowNextIncr("hold");
    const answer = client.playerIncr(10, { timeoutMs: FAILOVER_MS });
    // Bounded, and failed by the call's own failure: an unanswered wait would hang the suite.
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        swallowed,
        answer.then(() => new Promise<never>(() => {})),
        new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("the proxy held no answer within 10 s")), 10_000))),
      ]);
    } finally {
      clearTimeout(timer);
    }
    owner.process.kill("SIGKILL");
    assert.equal(await answer, before + 10n, "the first run's answer, from the new owner");
    assert.equal(client.address, other.url());
    assert.equal(await client.playerGet(), before + 10n, "counted once");
    assert.ok(proxy.incrKeys.length >= 1);
    client.close();
  } finally {
    proxy?.close();
    await cluster.close();
  }
});
