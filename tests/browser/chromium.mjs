// What the browser scripts of tests/console_browser.rs share: their
// environment, a headless Chromium on a fresh profile, and the Rust test's
// lines on stdin.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

// The value of environment variable `name`; without one the script says
// `fail: ...` and exits 1.
export const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.log(`fail: ${name} is not set`);
    process.exit(1);
  }
  return value;
};

// No sandbox (the tests run as root in CI), no GPU, and nothing a first run
// or a background service would add to what the test measures.
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

// ROUTERD_CHROMIUM driven by playwright-core from ROUTERD_BROWSER_MODULES,
// on a profile of its own (named from `prefix`), with `options` for the
// context (a viewport). `close()` ends it and removes the profile.
export async function launchChromium(prefix, options = {}) {
  const modules = env("ROUTERD_BROWSER_MODULES");
  const { chromium } = await import(join(modules, "playwright-core", "index.mjs"));
  const profile = mkdtempSync(join(tmpdir(), prefix));
  const removeProfile = () => rmSync(profile, { recursive: true, force: true });
  let context;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: env("ROUTERD_CHROMIUM"),
      headless: true,
      args: FLAGS,
      ...options,
    });
  } catch (error) {
    removeProfile();
    throw error;
  }
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    close: async () => {
      await context.close();
      removeProfile();
    },
  };
}

// The Rust test's lines: `next()` resolves with the next one.
export function testLines() {
  const lines = createInterface({ input: process.stdin });
  return {
    next: () => new Promise((resolve) => lines.once("line", resolve)),
    close: () => lines.close(),
  };
}
