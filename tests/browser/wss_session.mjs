// Drives headless Chromium (Debian's, through playwright-core) to
// wss_session.html against a routerd WebSocket-over-TLS listener with a
// self-signed certificate. Usage:
//   node wss_session.mjs WSS_URL TOKEN_A TOKEN_B ROOM
// Prints the page's result as JSON; exits 1 unless it is ok.
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = process.env.ROUTERD_BROWSER_MODULES || join(here, "node_modules");
const { chromium } = createRequire(join(modules, "..", "noop.js"))("playwright-core");
const [url, tokenA, tokenB, room] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), "routerd-chromium-"));
// A fresh profile each run (playwright's persistent context is how a
// user-data-dir is given).
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.ROUTERD_CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--ignore-certificate-errors",
  ],
});
let code = 1;
try {
  const page = await context.newPage();
  const query = new URLSearchParams({ url, token_a: tokenA, token_b: tokenB, room });
  await page.goto(`${pathToFileURL(join(here, "wss_session.html"))}?${query}`);
  const result = await page.evaluate(() => Promise.race([
    window.result,
    new Promise((resolve) => setTimeout(() => resolve({ ok: false, error: "timed out" }), 15000)),
  ]));
  console.log(JSON.stringify(result));
  code = result.ok ? 0 : 1;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
