// Every test vector of docs/protocol.md through the encoder and decoder, and token minting.

import { test } from "node:test";
import assert from "node:assert/strict";

import * as p from "../src/protocol.js";
import { mintToken } from "../src/token.js";
import { ServerError, NotSent } from "../src/errors.js";
import { encodeFields, hexBytes, vectors } from "./vectors.js";

const KINDS: Record<string, number> = { REQUEST: 1, RESPONSE: 2, PUSH: 3, ERROR: 4 };

test("every frame vector encodes and decodes", () => {
  let checked = 0;
  for (const v of vectors()) {
    if (!v.frame) continue;
    const kind = KINDS[v.kind];
    const route = Number(v.route.split(" ")[0]);
    const seq = Number(v.seq);
    const body = hexBytes(v.body);
    const frame = hexBytes(v.frame);
    assert.deepEqual(encodeFields(v.fields), body, v.name);
    if (v.version === "2") {
      // A version-2 REQUEST: the key before the route's body (section 12).
      const key = BigInt(v.request_key);
      assert.deepEqual(p.encodeKeyedRequest(route, seq, key, body), frame, v.name);
      assert.equal(new DataView(frame.buffer, frame.byteOffset).getBigUint64(16, true), key);
      assert.deepEqual(frame.subarray(24), body);
    } else assert.deepEqual(p.encodeFrame(kind, route, seq, body), frame, v.name);
    if (kind !== p.Kind.REQUEST) {
      const decoder = new p.FrameDecoder();
      // A byte at a time: a frame cut anywhere decodes once whole.
      for (let i = 0; i < frame.length - 1; i++) {
        decoder.feed(frame.subarray(i, i + 1));
        assert.equal(decoder.next(), null, v.name);
      }
      decoder.feed(frame.subarray(frame.length - 1));
      assert.deepEqual(decoder.frames(), [{ kind, routeId: route, seq, body }], v.name);
      assert.equal(decoder.buffered(), 0);
    } else if (v.version !== "2") {
      assert.deepEqual(frame.subarray(16), body);
    }
    if (v.kind === "ERROR") {
      const { code, reason } = p.decodeError(body);
      assert.equal(code, Number(v.code.split(" ")[0]));
      assert.equal(reason, v.reason);
      assert.deepEqual(p.encodeError(code, reason), body);
    } else if (route === p.Route.ROOM_MESSAGE) {
      assert.deepEqual(p.encodeRoomMessage(p.decodeRoomMessage(body)), body);
    } else if (route === p.Route.SYS_REDIRECT) {
      const redirect = p.decodeRedirect(body);
      assert.equal(redirect.graceMs, 5000);
      assert.deepEqual(p.encodeRedirect(redirect), body);
    } else if (route === p.Route.ROOM_SAY) {
      const roomId = new DataView(body.buffer, body.byteOffset).getBigUint64(0, true);
      assert.deepEqual(p.encodeSay(roomId, p.fromUtf8(body.subarray(8))), body);
    } else if (route === p.Route.PLAYER_INCR && v.kind === "RESPONSE") {
      assert.deepEqual(p.encodeI64(p.decodeI64(body)), body);
    } else if (route === p.Route.PLAYER_INCR) {
      assert.deepEqual(p.encodeI64(BigInt(v.fields.split(" ")[1])), body);
    } else if ((route === p.Route.AUTH_LOGIN || route === p.Route.AUTH_RESUME) && v.kind === "RESPONSE") {
      assert.equal(p.decodeU64(body), 42n);
    } else if (route === p.Route.SYS_SESSION) {
      const session = p.decodeSession(body);
      assert.equal(session.windowMs, 30000);
      assert.deepEqual(p.encodeSession(session), body);
    } else if (route === p.Route.AUTH_RESUME && v.kind === "REQUEST") {
      assert.deepEqual(p.encodeResume(body.subarray(0, 16), 5), body);
    }
    checked++;
  }
  assert.ok(checked >= 10, `${checked} frame vectors`);
});

test("the token vector", async () => {
  const [v] = vectors().filter((x) => x.token);
  const token = await mintToken(v.secret, BigInt(v.player_id), BigInt(v.expiry));
  assert.equal(token, v.token);
  assert.ok(token.startsWith(v.signed + "."));
  await assert.rejects(mintToken(v.secret, 0, 1), RangeError);
});

test("three frames in one read and a cut fourth", () => {
  const one = p.encodeFrame(p.Kind.RESPONSE, 11, 2, p.encodeI64(42));
  const stream = new Uint8Array(one.length * 4);
  for (let i = 0; i < 4; i++) stream.set(one, i * one.length);
  const decoder = new p.FrameDecoder();
  decoder.feed(stream.subarray(0, one.length * 3 + 5));
  assert.equal(decoder.frames().length, 3);
  decoder.feed(stream.subarray(one.length * 3 + 5));
  assert.equal(decoder.frames().length, 1);
});

test("an unknown kind, version or magic and a long body are violations", () => {
  const good = p.encodeFrame(p.Kind.PUSH, 100, 0, new Uint8Array(16));
  for (const [offset, value] of [[3, 5], [3, 1], [2, 2], [0, 0x41]]) {
    const bad = good.slice();
    bad[offset] = value;
    const decoder = new p.FrameDecoder();
    decoder.feed(bad);
    assert.throws(() => decoder.next(), p.FrameError, `byte ${offset} = ${value}`);
  }
  const short = new p.FrameDecoder(15);
  short.feed(good.subarray(0, 16));
  assert.throws(() => short.next(), p.FrameError);
});

test("errors carry code, name and retry safety as protocol.md's table says", () => {
  const safe = [1, 2, 3, 4, 5, 6].map((code) => new ServerError(code, "").retrySafe);
  const maybe = [7, 8, 9, 77].map((code) => new ServerError(code, "").retrySafe);
  assert.deepEqual(safe, [true, true, true, true, true, true]);
  assert.deepEqual(maybe, [false, false, false, false]);
  assert.equal(new ServerError(3, "login first").message, "AUTH_REQUIRED: login first");
  assert.equal(new ServerError(77, "").codeName, "CODE_77");
  assert.equal(new NotSent("x").retrySafe, true);
});

test("room.say text bound", () => {
  p.encodeSay(1, "x".repeat(p.SAY_TEXT_MAX));
  assert.throws(() => p.encodeSay(1, "x".repeat(p.SAY_TEXT_MAX + 1)), RangeError);
});
