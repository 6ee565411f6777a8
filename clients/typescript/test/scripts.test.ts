// callJson against a real node (ROUTERD_BIN) running the example scripts (examples/scripts/): a
// JSON value in, the handler's answer decoded, the same object read back by its key field, a
// script's refusal as a ServerError with its reason, and a string answer as its text.

import { test, after } from "node:test";
import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";
import assert from "node:assert/strict";

import { connect, tokenFor, ServerError } from "../src/node.js";
import { Cluster, SECRET, skipReason } from "./nodes.js";

const skip = skipReason() ?? undefined;
/** The repository's example scripts: this file runs from clients/typescript/dist/test. */
const SCRIPTS = resolve(dirname(fileURLToPath(import.meta.url)), "../../../../examples/scripts");
/** examples/scripts/counter.luau's routes. */
const COUNTER_ADD = 2001;
const COUNTER_GET = 2002;
const COUNTER_RAW = 2003;

const cluster = new Cluster();
after(() => cluster.close());

test("callJson reaches a scripted type and decodes its answer", { skip }, async () => {
  const node = await cluster.start(1, 0, "", `[scripts]\ndir = ${JSON.stringify(SCRIPTS)}\n`);
  const client = await connect(node.url(), await tokenFor(SECRET, 901));
  assert.deepEqual(await client.callJson(COUNTER_ADD, { by: 5 }), { n: 5 });
  assert.deepEqual(await client.callJson(COUNTER_ADD, { by: 2 }), { n: 7 });
  assert.deepEqual(await client.callJson(COUNTER_GET, { id: 901 }), { n: 7 });
  const refused = await client.callJson(COUNTER_ADD, { by: 2_000_000 }).catch((e: ServerError) => e);
  assert.ok(refused instanceof ServerError);
  assert.deepEqual([refused.codeName, refused.reason], ["BAD_REQUEST", "counter would pass 1000000"]);
  assert.deepEqual(await client.callJson(COUNTER_GET, { id: 901 }), { n: 7 }, "the refusal changed nothing");
  // A raw route gets the JSON text as bytes; its answer is a string.
  assert.equal(await client.callJson(COUNTER_RAW, [1, 2]), "got 5 bytes");
  client.close();
});
