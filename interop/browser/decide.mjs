// Plays the person at the approval page, in a real headless Chromium.
//
//   node decide.mjs LINK TOOL CHOICE
//
// Opens the one-time LINK, waits for the card of a call to TOOL, reloads
// (the inbox must survive), clicks CHOICE (allow_once, allow_for_run,
// always_allow or deny) and prints one JSON line with what the page said.
// Run it from the folder playwright-core is installed in (.tools).
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const { chromium } = createRequire(join(process.cwd(), "package.json"))("playwright-core");

const [link, tool, choice] = process.argv.slice(2);
if (!link || !tool || !choice) {
  console.error("usage: node decide.mjs LINK TOOL CHOICE");
  process.exit(2);
}

const profile = mkdtempSync(join(tmpdir(), "airlock-chromium-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = await browser.newPage();
  await page.goto(link);
  const card = page.locator("li.call", { hasText: tool }).first();
  await card.waitFor({ timeout: 20000 });
  await page.reload();
  await card.waitFor({ timeout: 20000 });
  const seen = {
    tool: await card.locator("h2").textContent(),
    arguments: await card.locator("pre.arguments").textContent(),
    countdown: await card.locator(".countdown").textContent(),
    buttons: await card.locator("button").allTextContents(),
  };
  await card.locator(`button[data-choice="${choice}"]`).click();
  await card.locator(".result").filter({ hasText: /\S/ }).waitFor({ timeout: 20000 });
  const said = {
    state: await card.getAttribute("data-state"),
    message: await card.locator(".result").textContent(),
  };
  console.log(JSON.stringify({ seen, said }));
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
