// Drives the console's history, hottest objects, sessions, push and room
// browser in headless Chromium for tests/console_browser.rs (its second
// test). The environment is console.mjs's, and ROUTERD_ROOM_NODE, the node
// that holds room 9. It prints `pushed` once the page pushed to player
// 42's session and waits for `received` on its stdin; every step that
// fails prints `fail: <why>` and exits 1; the last line is `done`.

import { join } from "node:path";

import { env, launchChromium, testLines } from "./chromium.mjs";

const STEP_TIMEOUT_MS = 15000;
const url = env("ROUTERD_CONSOLE_URL");
const shots = env("ROUTERD_SCREENSHOTS");
const roomNode = env("ROUTERD_ROOM_NODE");
const lines = testLines();
const nextLine = lines.next;
const wait = (what, fn, arg) =>
  page.waitForFunction(fn, arg, { timeout: STEP_TIMEOUT_MS }).catch((error) => {
    throw new Error(`${what}: ${error.message.split("\n")[0]}`);
  });

let browser;
let page;
try {
  browser = await launchChromium("routerd-console-", { viewport: { width: 1280, height: 900 } });
  page = browser.page;
  const errors = [];
  page.on("pageerror", (error) => errors.push(String(error)));
  page.on("dialog", (dialog) => dialog.accept());

  // The charts after a reload start before the page was (re)loaded: they
  // come from node 1's own history, not from this page's readings.
  await page.goto(url);
  await page.waitForSelector("#members tbody tr", { timeout: STEP_TIMEOUT_MS });
  const reloaded = Date.now();
  await page.reload();
  await page.selectOption("#chart-scope", "node 1");
  await wait(
    "the history after a reload",
    (reloaded) => {
      const figure = document.querySelector('#charts figure[data-chart="requests"]');
      return figure && Number(figure.dataset.since) < reloaded - 4000 && Number(figure.dataset.points) >= 3;
    },
    reloaded,
  );
  await page.selectOption("#chart-scope", "cluster");
  await wait("the cluster's history", () => Number(document.querySelector('#charts figure[data-chart="requests"]')?.dataset.points) >= 3);
  await page.locator("#charts").screenshot({ path: join(shots, "7-history-after-reload.png") });
  console.log("seen: the charts start before the page, after a reload");

  // The hottest objects: player 41, whose requests the test keeps going.
  await wait("player 41 the hottest", () => {
    const first = document.querySelector("#hot-table tbody tr");
    return first?.cells[0].textContent === "player" && first.cells[1].textContent === "41" && Number(first.cells[4].textContent) > 0;
  });
  await page.locator("#hot").screenshot({ path: join(shots, "8-hottest-objects.png") });
  console.log("seen: player 41 the hottest object");

  // Node 1's sessions, 50 a page: forward to page 2 and back.
  await page.selectOption("#sessions-node", "1");
  await page.fill("#sessions-player", "");
  await page.click('#sessions-form button[type="submit"]');
  await wait("page 1", () => /^Page 1: 1–50 of \d+/.test(document.querySelector("#sessions-page")?.textContent ?? ""));
  await page.click("#sessions-next");
  await wait("page 2", () => /^Page 2: 51–/.test(document.querySelector("#sessions-page")?.textContent ?? "") && !document.querySelector("#sessions-previous").disabled);
  await page.screenshot({ path: join(shots, "9-sessions-paged.png"), fullPage: true });
  await page.click("#sessions-previous");
  await wait("back to page 1", () => /^Page 1: 1–50/.test(document.querySelector("#sessions-page")?.textContent ?? ""));
  console.log("seen: node 1's sessions paged forward and back");

  // Player 42, logged in on node 2, found from node 1's page; a push to it.
  await page.fill("#sessions-player", "42");
  await page.check("#sessions-everywhere");
  await page.click('#sessions-form button[type="submit"]');
  const row = '#sessions-result tbody tr:has(td:nth-child(3):text-is("42"))';
  await page.waitForSelector(row, { timeout: STEP_TIMEOUT_MS });
  const node = await page.locator(`${row} td:nth-child(6)`).textContent();
  if (node !== "2") throw new Error(`player 42 found on node ${node}, not 2`);
  await page.fill("#push-text", "hello, player 42");
  await page.locator(`${row} button.push`).click();
  await wait("the push said", () => /^Pushed to session/.test(document.querySelector("#action-result")?.textContent ?? ""));
  console.log("pushed");
  if ((await nextLine()) !== "received") throw new Error("player 42 did not get the push");
  await page.screenshot({ path: join(shots, "10-found-and-pushed.png"), fullPage: true });
  console.log("seen: player 42 found on node 2 and pushed to");

  // Room 9 on the node that holds it: two members, both online.
  await page.selectOption("#rooms-node", roomNode);
  await page.click('#rooms-form button[type="submit"]');
  const room = '#rooms-list tbody tr:has(td:first-child:text-is("9"))';
  await page.waitForSelector(room, { timeout: STEP_TIMEOUT_MS });
  await page.locator(`${room} button.open-room`).click();
  await wait("room 9's members", () => /^Room 9 on node \d+: 2 members, 2 online/.test(document.querySelector("#room-summary")?.textContent ?? ""));
  await page.locator("#room-view").screenshot({ path: join(shots, "11-room-members.png") });
  console.log("seen: room 9's two members online");
  if (errors.length > 0) throw new Error(`errors on the page: ${errors.join("; ")}`);
  console.log("done");
} catch (error) {
  console.log(`fail: ${error.message}`);
  process.exitCode = 1;
} finally {
  await browser?.close();
  lines.close();
}
