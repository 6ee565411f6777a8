// Drives the routerd console in headless Chromium for tests/console_browser.rs.
//
// The Rust test starts a three-node cluster and runs this script with
//   ROUTERD_CONSOLE_URL      the console of node 1 (http://127.0.0.1:PORT/console/)
//   ROUTERD_CHROMIUM         the browser (Debian's /usr/bin/chromium)
//   ROUTERD_BROWSER_MODULES  where playwright-core is installed (npm ci here)
//   ROUTERD_SCREENSHOTS      the directory the screenshots go to
// and talks to it line by line: this script prints `kill 3` when the page
// shows three members up and waits for `killed` on its stdin before it
// looks for node 3 down. Every step that fails prints `fail: <why>` and
// exits 1; the last line is `done`.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const STEP_TIMEOUT_MS = 15000;
const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.log(`fail: ${name} is not set`);
    process.exit(1);
  }
  return value;
};

const url = env("ROUTERD_CONSOLE_URL");
const shots = env("ROUTERD_SCREENSHOTS");
const { chromium } = await import(join(env("ROUTERD_BROWSER_MODULES"), "playwright-core", "index.mjs"));

const lines = createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => lines.once("line", resolve));

const profile = mkdtempSync(join(tmpdir(), "routerd-console-"));
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: env("ROUTERD_CHROMIUM"),
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1280, height: 900 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors = [];
  page.on("pageerror", (error) => errors.push(String(error)));
  page.on("dialog", (dialog) => dialog.accept());

  const state = (node) => page.locator(`#members tbody tr[data-node="${node}"]`);
  const waitState = async (node, want, what) => {
    try {
      await page.waitForSelector(`#members tbody tr[data-node="${node}"][data-state="${want}"]`, {
        timeout: STEP_TIMEOUT_MS,
      });
    } catch {
      const seen = await state(node).getAttribute("data-state").catch(() => "no row");
      throw new Error(`${what}: node ${node} is ${seen}, not ${want}`);
    }
  };

  await page.goto(url);
  await page.waitForFunction(
    () => document.querySelectorAll("#members tbody tr").length === 3,
    null,
    { timeout: STEP_TIMEOUT_MS },
  );
  for (const node of [1, 2, 3]) await waitState(node, "up", "three members");
  // Node 1's figures come from two of its own scrapes; the test keeps a
  // player's requests going through it, so they are numbers.
  await page.waitForFunction(
    () => {
      const cells = document.querySelectorAll('#members tbody tr[data-node="1"] td');
      const perSecond = Number(cells[5]?.textContent);
      return perSecond > 0 && /[µm]?s$/.test(cells[6]?.textContent ?? "") && cells[7]?.textContent.endsWith("%");
    },
    null,
    { timeout: STEP_TIMEOUT_MS },
  );
  await page.screenshot({ path: join(shots, "1-three-members.png"), fullPage: true });
  console.log("seen: three members up, node 1 with requests/s, p99 and error ratio");

  // The player the test keeps busy (77): its record, and its session on node 1.
  await page.fill("#lookup-id", "77");
  await page.click('#lookup-form button[type="submit"]');
  await page.waitForFunction(
    () => /^node \d/.test(document.querySelector("#lookup-result dd")?.textContent ?? ""),
    null,
    { timeout: STEP_TIMEOUT_MS },
  );
  await page.selectOption("#sessions-node", "1");
  await page.fill("#sessions-player", "77");
  await page.click('#sessions-form button[type="submit"]');
  await page.waitForFunction(
    () => [...document.querySelectorAll("#sessions-result tbody tr td:nth-child(3)")].some((td) => td.textContent === "77"),
    null,
    { timeout: STEP_TIMEOUT_MS },
  );
  console.log("seen: player 77's owner and session");

  console.log("kill 3");
  if ((await nextLine()) !== "killed") throw new Error("the test did not kill node 3");
  await waitState(3, "down", "after kill -9");
  await page.screenshot({ path: join(shots, "2-member-down.png"), fullPage: true });
  console.log("seen: node 3 down");

  await state(2).locator("button.drain").click();
  await page.waitForSelector('#members tbody tr[data-node="2"]:is([data-state="draining"], [data-state="left"])', {
    timeout: STEP_TIMEOUT_MS,
  });
  console.log("seen: node 2 draining");
  await waitState(2, "left", "after the drain");
  await page.screenshot({ path: join(shots, "3-drained.png"), fullPage: true });
  console.log("seen: node 2 left");
  if (errors.length > 0) throw new Error(`errors on the page: ${errors.join("; ")}`);
  console.log("done");
} catch (error) {
  console.log(`fail: ${error.message}`);
  process.exitCode = 1;
} finally {
  await context?.close();
  rmSync(profile, { recursive: true, force: true });
  lines.close();
}
