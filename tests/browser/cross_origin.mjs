// A page of another origin against the admin endpoint, for
// tests/console_browser.rs: the CSRF a browser allows without CORS.
//
// The Rust test starts a node and runs this script with
//   ROUTERD_ADMIN_URL        the admin endpoint (http://127.0.0.1:PORT)
//   ROUTERD_CHROMIUM         the browser (Debian's /usr/bin/chromium)
//   ROUTERD_BROWSER_MODULES  where playwright-core is installed (npm ci here)
// This script serves a page from an origin of its own (another port) whose
// script sends `POST /log-level` with body `trace` to the admin endpoint as
// `fetch(.., {method: "POST", mode: "no-cors"})`: a "simple" request, sent
// without a preflight, whose answer the page cannot read. It prints `sent`
// once the browser made the request (the Rust test then checks that the
// filter did not change), or `fail: <why>` and exits 1.

import { createServer } from "node:http";

import { env, launchChromium } from "./chromium.mjs";

const admin = env("ROUTERD_ADMIN_URL");

const page_html = `<!doctype html>
<title>loading</title>
<script>
  fetch(${JSON.stringify(admin + "/log-level")}, {
    method: "POST",
    mode: "no-cors",
    headers: { "Content-Type": "text/plain" },
    body: "trace",
  }).then(
    () => { document.title = "sent"; },
    (error) => { document.title = "error: " + error; },
  );
</script>`;
const server = createServer((request, response) => {
  response.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
  response.end(page_html);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const origin = `http://127.0.0.1:${server.address().port}`;

let browser;
let failed = null;
try {
  browser = await launchChromium("routerd-cross-origin-");
  const page = browser.page;
  await page.goto(`${origin}/`);
  await page.waitForFunction(() => document.title !== "loading", null, { timeout: 15000 });
  const title = await page.title();
  if (title !== "sent") {
    failed = `the page says ${title}`;
  }
} catch (error) {
  failed = String(error).split("\n")[0];
} finally {
  await browser?.close();
  server.close();
}
if (failed) {
  console.log(`fail: ${failed}`);
  process.exit(1);
}
console.log(`sent from ${origin}`);
