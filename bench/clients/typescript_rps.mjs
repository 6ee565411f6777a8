// Requests a second through the TypeScript client (Node.js, TCP): CONNECTIONS sessions, each
// keeping PIPELINE player.incr in flight, for DURATION_S after WARMUP_S.
// Usage: node typescript_rps.mjs HOST:PORT SECRET CONNECTIONS PIPELINE WARMUP_S DURATION_S
// Prints `rps <figure>`.
import { connect, tokenFor } from "../../clients/typescript/dist/src/node.js";

const [address, secret, connections, pipeline, warmupS, durationS] = process.argv.slice(2);
const clients = [];
for (let i = 0; i < Number(connections); i++) clients.push(await connect(`tcp://${address}`, await tokenFor(secret, 200_000 + i)));
let counting = false;
let stop = false;
let done = 0;
const worker = async (client) => {
  while (!stop) {
    await client.playerIncr(1);
    if (counting) done++;
  }
};
const tasks = clients.flatMap((client) => Array.from({ length: Number(pipeline) }, () => worker(client)));
await new Promise((r) => setTimeout(r, Number(warmupS) * 1000));
counting = true;
const started = performance.now();
await new Promise((r) => setTimeout(r, Number(durationS) * 1000));
counting = false;
const elapsed = (performance.now() - started) / 1000;
stop = true;
await Promise.all(tasks);
for (const client of clients) client.close();
console.log(`rps ${Math.round(done / elapsed)}`);
