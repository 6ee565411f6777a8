// The demo chat page (demo/) in a real Chromium, over the gateway's WebSocket listener: two pages
// join one room, one says something, the other shows it; a screenshot is kept as an artifact.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, Server } from "node:http";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, extname, join, normalize } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { tokenFor } from "../src/node.js";
import { Cluster, SECRET, freePort, skipReason } from "./nodes.js";

const here = dirname(fileURLToPath(import.meta.url));
const packageDir = join(here, "..", "..");
const repoRoot = join(packageDir, "..", "..");
const modules = process.env.ROUTERD_BROWSER_MODULES ?? join(repoRoot, "tests", "browser", "node_modules");
const chromiumPath = process.env.ROUTERD_CHROMIUM ?? "/usr/bin/chromium";
const artifacts = process.env.ROUTERD_ARTIFACTS_DIR ?? join(repoRoot, "target", "browser-artifacts");
/** What the flags leave out, Chromium would reach for on the network or the GPU. */
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

function browserSkip(): string | undefined {
  const reason = skipReason();
  if (reason) return reason;
  const missing = !existsSync(join(modules, "playwright-core")) ? `no playwright-core in ${modules}` : !existsSync(chromiumPath) ? `no Chromium at ${chromiumPath}` : null;
  if (missing && process.env.CI) throw new Error(`${missing} (CI installs it with .ci/test_deps.sh)`);
  return missing ?? undefined;
}

const TYPES: Record<string, string> = { ".html": "text/html", ".js": "text/javascript", ".map": "application/json" };

/** The package directory over HTTP (ES modules do not load from file:// pages). */
function serveStatic(): Promise<{ server: Server; base: string }> {
  const server = createServer((request, response) => {
    const path = normalize(decodeURIComponent(new URL(request.url ?? "/", "http://x").pathname));
    const file = join(packageDir, path);
    if (!file.startsWith(packageDir) || !existsSync(file)) {
      response.writeHead(404).end();
      return;
    }
    response.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
    response.end(readFileSync(file));
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ server, base: `http://127.0.0.1:${(server.address() as { port: number }).port}` })),
  );
}

const skip = browserSkip();
const cluster = new Cluster();
after(() => cluster.close());

test("two pages chat in one room over WebSocket", { skip, timeout: 60_000 }, async () => {
  const wsPort = await freePort();
  await cluster.start(1, 0, `websocket_listen = "127.0.0.1:${wsPort}"`);
  const { server, base } = await serveStatic();
  const { chromium } = await import(pathToFileURL(join(modules, "playwright-core", "index.mjs")).href);
  const profile = mkdtempSync(join(tmpdir(), "routerd-chromium-"));
  const context = await chromium.launchPersistentContext(profile, { executablePath: chromiumPath, headless: true, args: CHROMIUM_ARGS });
  try {
    const url = async (player: number) =>
      `${base}/demo/index.html?ws=${encodeURIComponent(`ws://127.0.0.1:${wsPort}/`)}&room=31&token=${encodeURIComponent(await tokenFor(SECRET, player))}`;
    const alice = await context.newPage();
    const bob = await context.newPage();
    await alice.goto(await url(3101));
    await bob.goto(await url(3102));
    for (const page of [alice, bob]) {
      await page.waitForSelector("#status[data-ready]", { timeout: 15_000 });
      assert.equal(await page.getAttribute("#status", "data-ready"), "true", await page.textContent("#status"));
    }
    await alice.fill("#text", "hello from alice");
    await alice.click("#send");
    await bob.waitForSelector("#log li.message", { timeout: 10_000 });
    assert.equal(await bob.textContent("#log li.message"), "player 3101: hello from alice");
    mkdirSync(artifacts, { recursive: true });
    await bob.screenshot({ path: join(artifacts, "clients-demo-chat.png") });
  } finally {
    await context.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
});
