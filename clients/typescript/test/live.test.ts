// The client against real routerd nodes (ROUTERD_BIN): login, incr/get, a room push, errors with
// code and reason, sys.redirect during a drain, reconnect after a restart, the in-flight bound,
// token expiry.

import { test, after } from "node:test";
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

import { connect, mintToken, tokenFor, RoomMessage, ServerError, ConnectionLost, Kicked, RouterdError, Client } from "../src/node.js";
import { Cluster, SECRET, freePort, skipReason } from "./nodes.js";

const skip = skipReason() ?? undefined;
/** Requests the drain test keeps in flight while the node drains. */
const DRAIN_PIPELINE = 8;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function once<T>(client: Client, event: "room_message" | "kicked" | "reconnected" | "disconnected", timeoutMs = 5000): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${event} within ${timeoutMs} ms`)), timeoutMs);
    client.on(event, ((value: T) => {
      clearTimeout(timer);
      resolve(value);
    }) as never);
  });
}

const single = new Cluster();
after(() => single.close());
let wsPort = 0;
let tlsPort = 0;
const CERT_FILE = process.env.ROUTERD_TEST_CERT_FILE;
const KEY_FILE = process.env.ROUTERD_TEST_KEY_FILE;
const nodeOf = (() => {
  let started: ReturnType<Cluster["start"]> | null = null;
  return () =>
    (started ??= (async () => {
      wsPort = await freePort();
      tlsPort = await freePort();
      let extra = `websocket_listen = "127.0.0.1:${wsPort}"\n`;
      if (CERT_FILE) extra += `tls_listen = "127.0.0.1:${tlsPort}"\ntls_cert_file = ${JSON.stringify(CERT_FILE)}\ntls_key_file = ${JSON.stringify(KEY_FILE)}\n`;
      return single.start(1, 0, extra);
    })());
})();

test("login, incr and get", { skip }, async () => {
  const node = await nodeOf();
  const client = await connect(node.url(), await tokenFor(SECRET, 801));
  assert.equal(client.playerId, 801n);
  const before = await client.playerGet();
  assert.equal(await client.playerIncr(5), before + 5n);
  assert.equal(await client.playerIncr(-2), before + 3n);
  assert.equal(await client.playerGet(), before + 3n);
  assert.deepEqual(await client.ping(new TextEncoder().encode("hi")), new TextEncoder().encode("hi"));
  client.close();
});

test("WebSocket: login, incr, and a push from a TCP client", { skip }, async () => {
  const node = await nodeOf();
  const ws = await connect(`ws://127.0.0.1:${wsPort}/`, await tokenFor(SECRET, 810));
  const tcp = await connect(node.url(), await tokenFor(SECRET, 811));
  const got = once<RoomMessage>(ws, "room_message");
  const before = await ws.playerGet();
  assert.equal(await ws.playerIncr(7), before + 7n);
  await ws.roomJoin(80);
  await tcp.roomJoin(80);
  await tcp.roomSay(80, "over tcp, to ws");
  assert.deepEqual(await got, { roomId: 80n, fromPlayerId: 811n, text: "over tcp, to ws" });
  const answers = await Promise.all(Array.from({ length: 32 }, (_, i) => ws.ping(Uint8Array.of(i))));
  assert.deepEqual(answers, Array.from({ length: 32 }, (_, i) => Uint8Array.of(i)));
  ws.close();
  tcp.close();
});

test("TLS: login and incr, and a client that does not trust the certificate stays out", { skip }, async () => {
  if (!CERT_FILE) {
    if (process.env.CI) throw new Error("ROUTERD_TEST_CERT_FILE is not set");
    return;
  }
  await nodeOf();
  const url = `tls://127.0.0.1:${tlsPort}`;
  const client = await connect(url, await tokenFor(SECRET, 812), { tls: { ca: readFileSync(CERT_FILE) } });
  const before = await client.playerGet();
  assert.equal(await client.playerIncr(2), before + 2n);
  client.close();
  await assert.rejects(connect(url, await tokenFor(SECRET, 812)), /self.signed|certificate/i);
});

test("wss:// with a certificate Node's WebSocket does not trust fails at once, naming the certificate", { skip }, async () => {
  if (!CERT_FILE) {
    if (process.env.CI) throw new Error("ROUTERD_TEST_CERT_FILE is not set");
    return;
  }
  const secure = new Cluster();
  try {
    const port = await freePort();
    const extra =
      `websocket_listen = "127.0.0.1:${port}"\nwebsocket_tls = true\n` +
      `tls_cert_file = ${JSON.stringify(CERT_FILE)}\ntls_key_file = ${JSON.stringify(KEY_FILE)}\n`;
    await secure.start(1, 0, extra);
    const started = Date.now();
    const refused = connect(`wss://127.0.0.1:${port}/`, await tokenFor(SECRET, 813), {
      tls: { ca: readFileSync(CERT_FILE) },
      connectTimeoutMs: 5000,
    });
    await assert.rejects(refused, /certificate.*NODE_EXTRA_CA_CERTS/is);
    assert.ok(Date.now() - started < 2000, `refused after ${Date.now() - started} ms, not at once`);
  } finally {
    await secure.close();
  }
});

test("a room push reaches a second client", { skip }, async () => {
  const node = await nodeOf();
  const a = await connect(node.url(), await tokenFor(SECRET, 802));
  const b = await connect(node.url(), await tokenFor(SECRET, 803));
  const got = once<RoomMessage>(b, "room_message");
  await a.roomJoin(78);
  assert.equal(await b.roomJoin(78), 2);
  assert.equal(await a.roomSay(78, "hello b"), 2);
  assert.deepEqual(await got, { roomId: 78n, fromPlayerId: 802n, text: "hello b" });
  a.close();
  b.close();
});

test("errors carry code, reason and retry safety", { skip }, async () => {
  const node = await nodeOf();
  const client = await connect(node.url(), await tokenFor(SECRET, 804));
  const unknown = await client.call(9999).catch((e: ServerError) => e);
  assert.ok(unknown instanceof ServerError);
  assert.deepEqual([unknown.code, unknown.codeName, unknown.reason, unknown.retrySafe], [1, "UNKNOWN_ROUTE", "unknown route", true]);
  const bad = await client.roomSay(424242, "not a member").catch((e: ServerError) => e);
  assert.ok(bad instanceof ServerError);
  assert.equal(bad.code, 5);
  client.close();
  const forged = await mintToken("not the secret", 804, Math.floor(Date.now() / 1000) + 60);
  const refused = await connect(node.url(), forged).catch((e: ServerError) => e);
  assert.ok(refused instanceof ServerError);
  assert.deepEqual([refused.code, refused.reason], [4, "token signature does not match"]);
});

test("the in-flight bound holds requests back", { skip }, async () => {
  const node = await nodeOf();
  const client = await connect(node.url(), await tokenFor(SECRET, 805), { inflightMax: 4 });
  let most = 0;
  const answers = await Promise.all(
    Array.from({ length: 64 }, (_, i) => {
      const answer = client.ping(new TextEncoder().encode(String(i)));
      most = Math.max(most, client.inflight());
      return answer.then((body) => new TextDecoder().decode(body));
    }),
  );
  assert.deepEqual(answers, Array.from({ length: 64 }, (_, i) => String(i)));
  assert.equal(most, 4);
  assert.equal(client.inflight(), 0);
  client.close();
});

test("an expired token kicks, and a fresh one reconnects", { skip }, async () => {
  const node = await nodeOf();
  const tokens: string[] = [];
  const fresh = async () => {
    // The first login's token ends within 2 s; later ones last.
    tokens.push(await mintToken(SECRET, 806, Math.floor(Date.now() / 1000) + (tokens.length === 0 ? 2 : 3600)));
    return tokens[tokens.length - 1];
  };
  const client = await connect(node.url(), fresh, { reconnect: { baseDelayMs: 10, maxDelayMs: 100, attemptsMax: 10 } });
  const kicked = once<string>(client, "kicked");
  const reconnected = once<string>(client, "reconnected", 8000);
  assert.equal(await kicked, "token expired");
  await reconnected;
  assert.equal(new TextDecoder().decode(await client.ping(new TextEncoder().encode("again"))), "again");
  assert.equal(tokens.length, 2);
  client.close();
});

test("sys.redirect during a drain fails no request", { skip }, async () => {
  const cluster = new Cluster();
  try {
    const one = await cluster.start(1);
    const two = await cluster.start(2);
    await cluster.waitUp(one, [2]);
    await cluster.waitUp(two, [1]);
    const client = await connect(one.url(), await tokenFor(SECRET, 901));
    const start = await client.playerGet();
    let acked = 0n;
    let stop = false;
    const worker = async () => {
      while (!stop) {
        await client.playerIncr(1);
        acked += 1n;
      }
    };
    const workers = Array.from({ length: DRAIN_PIPELINE }, worker);
    await sleep(200);
    assert.equal(await one.post("/drain"), 202);
    const deadline = Date.now() + 20_000;
    while (client.redirectsFollowed === 0 && Date.now() < deadline) await sleep(50);
    await sleep(300);
    stop = true;
    // Any failed request rejects here.
    await Promise.all(workers);
    assert.equal(client.redirectsFollowed, 1);
    assert.equal(client.address, two.url());
    assert.equal(await client.playerGet(), start + acked);
    client.close();
    assert.equal(await one.exited, 0);
  } finally {
    await cluster.close();
  }
});

test("a login away from the player's node is redirected there, and the client follows at once", { skip }, async () => {
  const cluster = new Cluster();
  try {
    const one = await cluster.start(1, 0, "place_sessions = true\n");
    const two = await cluster.start(2, 0, "place_sessions = true\n");
    await cluster.waitUp(one, [2]);
    await cluster.waitUp(two, [1]);
    const player = 951;
    // Created on its rendezvous node, wherever it first logs in.
    const first = await connect(one.url(), await tokenFor(SECRET, player));
    assert.equal(await first.playerIncr(1), 1n);
    first.close();
    const record = await one.getJson(`/objects/player/${player}`);
    const [owner, away] = record.owner === 1 ? [one, two] : [two, one];
    const client = await connect(away.url(), await tokenFor(SECRET, player));
    const deadline = Date.now() + 10_000;
    while (client.redirectsFollowed === 0 && Date.now() < deadline) await sleep(20);
    assert.equal(client.redirectsFollowed, 1);
    assert.equal(client.address, owner.url());
    assert.equal(await client.playerIncr(1), 2n);
    client.close();
  } finally {
    await cluster.close();
  }
});

test("reconnect after the node restarts", { skip }, async () => {
  const cluster = new Cluster();
  try {
    const port = await freePort();
    const node = await cluster.start(1, port);
    const client = await connect(node.url(), await tokenFor(SECRET, 902), { reconnect: { baseDelayMs: 20, maxDelayMs: 300, attemptsMax: 60 } });
    const lost = once<RouterdError>(client, "disconnected", 10_000);
    const counter = await client.playerIncr(3);
    assert.equal(await node.stop(), 0);
    const error = await lost;
    assert.ok(error instanceof ConnectionLost || error instanceof Kicked);
    assert.equal(error.retrySafe, false);
    // Waits for the session to come back, then is sent.
    let done = false;
    const pending = client.playerIncr(1, { timeoutMs: 30_000 }).finally(() => (done = true));
    await sleep(200);
    assert.equal(done, false);
    await cluster.start(1, port);
    assert.equal(await pending, counter + 1n);
    assert.equal(client.reconnects, 1);
    client.close();
  } finally {
    await cluster.close();
  }
});
