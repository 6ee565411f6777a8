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

import { join } from "node:path";

import { env, launchChromium, testLines } from "./chromium.mjs";

const STEP_TIMEOUT_MS = 15000;
const url = env("ROUTERD_CONSOLE_URL");
const shots = env("ROUTERD_SCREENSHOTS");
const lines = testLines();
const nextLine = lines.next;

let browser;
try {
  browser = await launchChromium("routerd-console-", { viewport: { width: 1280, height: 900 } });
  const page = browser.page;
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

  // The history: node 1's requests chart gains points and its line moves
  // while the test's load runs.
  await page.selectOption("#chart-scope", "node 1");
  const requestsChart = '#charts figure[data-chart="requests"]';
  const chartState = () =>
    page.evaluate((selector) => {
      const figure = document.querySelector(selector);
      const lines = [...(figure?.querySelectorAll("polyline") ?? [])].map((line) => line.getAttribute("points"));
      return { points: Number(figure?.dataset.points ?? 0), line: lines.join(" ") };
    }, requestsChart);
  await page.waitForFunction((selector) => Number(document.querySelector(selector)?.dataset.points) >= 3, requestsChart, {
    timeout: STEP_TIMEOUT_MS,
  });
  const before = await chartState();
  await page.waitForTimeout(2500);
  const after = await chartState();
  if (!(after.points > before.points) || after.line === before.line || after.line === "") {
    throw new Error(`the requests chart did not move: ${JSON.stringify({ before, after })}`);
  }
  const charts = await page.locator("#charts figure").count();
  if (charts !== 7) throw new Error(`${charts} charts, not 7`);
  await page.locator("#charts").screenshot({ path: join(shots, "2-charts-under-load.png") });
  console.log("seen: the requests chart moves under load");

  // Per route: player.incr is called on node 1, every second.
  await page.waitForFunction(
    () =>
      [...document.querySelectorAll("#routes tbody tr")].some(
        (row) => row.cells[1]?.textContent === "player.incr" && Number(row.cells[2]?.textContent) > 0,
      ),
    null,
    { timeout: STEP_TIMEOUT_MS },
  );
  // Node health: CPU and memory of node 1 are figures.
  await page.waitForFunction(
    () => {
      const row = [...document.querySelectorAll("#health tbody tr")].find((r) => r.cells[0]?.textContent === "1");
      return row && Number.isFinite(Number(row.cells[1].textContent)) && row.cells[2].textContent.endsWith("MiB");
    },
    null,
    { timeout: STEP_TIMEOUT_MS },
  );
  console.log("seen: player.incr per route and node 1's health");

  // By object type (GET /calls-by-type of each node): the player type,
  // which player.incr addresses, has calls, and is called every second.
  try {
    await page.waitForFunction(
      () => {
        const row = document.querySelector('#types tbody tr[data-type="player"]');
        return row && Number(row.cells[7]?.textContent) > 0 && Number(row.cells[2]?.textContent) > 0;
      },
      null,
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch (error) {
    const shown = await page.locator("#types").textContent();
    throw new Error(`the player type's calls: ${error.message}; the table: ${JSON.stringify(shown)}`);
  }
  await page.locator("#types").screenshot({ path: join(shots, "12-calls-by-type.png") });
  console.log("seen: the player type's calls by type");

  // A narrow window: the members table is not clipped on the right.
  await page.setViewportSize({ width: 420, height: 900 });
  await page.waitForTimeout(300);
  const overflow = await page.evaluate(() => {
    const widest = Math.max(...[...document.querySelectorAll("#members td")].map((td) => td.getBoundingClientRect().right));
    // What sticks out, to say so when something does (a scrolling box's
    // content is inside its box, so only its box counts).
    const outside = [...document.querySelectorAll("body *")]
      .filter((node) => !node.closest(".scroll *") && node.getBoundingClientRect().right > window.innerWidth + 0.5)
      .slice(0, 5)
      .map((node) => `${node.tagName.toLowerCase()}${node.id ? "#" + node.id : ""}.${node.className}`);
    return { page: document.documentElement.scrollWidth, widest, viewport: window.innerWidth, outside };
  });
  if (overflow.page > overflow.viewport || overflow.widest > overflow.viewport) {
    throw new Error(`clipped at 420 px: ${JSON.stringify(overflow)}`);
  }
  await page.screenshot({ path: join(shots, "3-narrow-420px.png"), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
  console.log("seen: the members table fits 420 px");

  // The player the test keeps busy (77): its record, and its session on node 1.
  await page.fill("#lookup-id", "77");
  await page.click('#lookup-form button[type="submit"]');
  await page.waitForFunction(
    () => /^node \d/.test(document.querySelector("#lookup-result dd")?.textContent ?? ""),
    null,
    { timeout: STEP_TIMEOUT_MS },
  );
  // The state viewer decodes the player: its counter, which the test's
  // increments (saved on write) keep above 0.
  await page.waitForFunction(
    () => {
      const terms = [...document.querySelectorAll("#lookup-result dt")];
      const counter = terms.find((dt) => dt.textContent === "counter");
      return Number(counter?.nextElementSibling?.textContent) > 0;
    },
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
  console.log("seen: player 77's owner, saved counter and session");

  // A room.message to room 5 (player 88 is in it) as the system.
  await page.fill("#message-room", "5");
  await page.fill("#message-text", "hello from the operators");
  await page.click('#message-form button[type="submit"]');
  await page.waitForFunction(() => /Message sent to room 5/.test(document.querySelector("#action-result")?.textContent ?? ""), null, {
    timeout: STEP_TIMEOUT_MS,
  });
  console.log("seen: a message to room 5 sent from the page");
  console.log("message sent");
  if ((await nextLine()) !== "received") throw new Error("player 88 did not get the room's message");

  // Player 88's idle session on node 1, kicked from the page: the test
  // then reads sys.kicked and the close on that connection.
  await page.fill("#sessions-player", "88");
  await page.click('#sessions-form button[type="submit"]');
  const victim = '#sessions-result tbody tr:has(td:nth-child(3):text-is("88"))';
  await page.waitForSelector(victim, { timeout: STEP_TIMEOUT_MS });
  await page.locator(`${victim} button.kick`).click();
  try {
    await page.waitForFunction(
      () =>
        /kicked/.test(document.querySelector("#action-result")?.textContent ?? "") &&
        ![...document.querySelectorAll("#sessions-result tbody tr td:nth-child(3)")].some((td) => td.textContent === "88"),
      null,
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch (error) {
    const said = await page.locator("#action-result").textContent();
    const listed = await page.locator("#sessions-result").textContent();
    throw new Error(`the kick: ${error.message}; the page said ${JSON.stringify(said)}, listed ${JSON.stringify(listed)}`);
  }
  await page.screenshot({ path: join(shots, "6-session-kicked.png"), fullPage: true });
  console.log("seen: player 88's session kicked from the page");

  console.log("kill 3");
  if ((await nextLine()) !== "killed") throw new Error("the test did not kill node 3");
  await waitState(3, "down", "after kill -9");
  await page.screenshot({ path: join(shots, "4-member-down.png"), fullPage: true });
  console.log("seen: node 3 down");

  await state(2).locator("button.drain").click();
  await page.waitForSelector('#members tbody tr[data-node="2"]:is([data-state="draining"], [data-state="left"])', {
    timeout: STEP_TIMEOUT_MS,
  });
  console.log("seen: node 2 draining");
  // The drain's answer stays on the page through the refreshes after it.
  await page.waitForTimeout(2500);
  const result = await page.locator("#action-result").textContent();
  if (!/Node 2 drains/.test(result)) throw new Error(`the drain's result is gone: ${JSON.stringify(result)}`);
  console.log("seen: the drain's result stays");
  await waitState(2, "left", "after the drain");
  await page.screenshot({ path: join(shots, "5-drained.png"), fullPage: true });
  console.log("seen: node 2 left");
  if (errors.length > 0) throw new Error(`errors on the page: ${errors.join("; ")}`);
  console.log("done");
} catch (error) {
  console.log(`fail: ${error.message}`);
  process.exitCode = 1;
} finally {
  await browser?.close();
  lines.close();
}
