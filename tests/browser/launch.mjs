// Headless Chromium with a throwaway profile, shared by the browser tests.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Opens Chromium (CHROMIUM_PATH, default /usr/bin/chromium); `close()` also removes the profile. */
export async function launch(viewport) {
  const profile = mkdtempSync(join(tmpdir(), 'atelier-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
    headless: true,
    viewport,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, close };
}

/**
 * Runs `test({ page, shot })` on a page of a fresh Chromium, then prints `RESULT {json}` of
 * `result` (with `error` when the test threw) and closes the browser. Dialogs are accepted (the
 * last one's text in `result.lastDialog`), the page's errors go to stderr, and `shot(name)` saves
 * a full-page screenshot into ARTIFACTS.
 */
export async function runPage(viewport, result, test) {
  const { context, close } = await launch(viewport);
  try {
    const page = context.pages()[0] ?? await context.newPage();
    page.on('dialog', dialog => { result.lastDialog = dialog.message(); dialog.accept(); });
    page.on('console', message => { if (message.type() === 'error') console.error('page:', message.text()); });
    const artifacts = process.env.ARTIFACTS || '.';
    const shot = name => page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
    await test({ page, shot });
  } catch (error) {
    console.error(error);
    result.error = String(error);
  } finally {
    console.log(`RESULT ${JSON.stringify(result)}`);
    await close();
  }
}
