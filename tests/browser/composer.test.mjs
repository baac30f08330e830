// Headless Chromium on the workbench page of `atelier up` (started by tests/tests/composer.rs):
// the composer lists the allowed models, sends a message with one of them, follows the run live
// (phases, tool calls, the answer as it streams), approves the destructive call inline, shows
// the answer and the draft; a second message is refused with DRAFT_EXISTS (and what to do)
// until the draft is published.
// Prints `RESULT {json}` at the end; screenshots go to ARTIFACTS.
import { runPage } from './launch.mjs';

const url = process.env.DASHBOARD_URL;
const workbench = process.env.WORKBENCH;

const result = {};
const text = (page, selector) => page.$eval(selector, el => el.textContent.replace(/\s+/g, ' ').trim());
await runPage({ width: 1400, height: 1200 }, result, async ({ page, shot }) => {
  await page.goto(`${url}/#/workbenches/${workbench}`);
  await page.waitForSelector('#composer-model option[value="scripted"]', { state: 'attached' });
  result.models = await page.$$eval('#composer-model option', options => options.map(o => o.value));
  await page.fill('#composer-text', 'Rewrite notes.md');
  await page.selectOption('#composer-model', 'scripted');
  await page.click('#composer-send');

  await page.waitForSelector('#run #approve', { timeout: 60000 });
  result.approval = await text(page, '#run #approval');
  result.phasesAtApproval = await page.$$eval('#run-phases li', items => items.map(li => `${li.dataset.phase}:${li.dataset.done}`));
  result.sendDisabledWhileRunning = await page.$eval('#composer-send', button => button.disabled);
  await shot('c1-approval');
  await page.click('#run #approve');

  // The answer as it streams: what the run shows while it is still running.
  const partial = new Set();
  const deadline = Date.now() + 60000;
  while (Date.now() < deadline) {
    const seen = await page.evaluate(() => ({
      state: document.getElementById('run')?.dataset.state,
      text: (document.getElementById('run-answer')?.textContent || '').replace(/\s+/g, ' ').trim(),
    }));
    if (['succeeded', 'failed', 'cancelled'].includes(seen.state)) break;
    if (seen.text) partial.add(seen.text);
    await page.waitForTimeout(100);
  }
  result.partialAnswers = [...partial];
  await page.waitForSelector('#run[data-state="succeeded"]', { timeout: 30000 });
  await page.waitForSelector('#run-outcome');
  result.phases = await page.$$eval('#run-phases li', items => items.map(li => `${li.dataset.phase}:${li.dataset.done}`));
  result.tools = await page.$$eval('#run-tools li', items => items.map(li => `${li.dataset.tool}:${li.dataset.status}`));
  result.outcome = await text(page, '#run-outcome');
  result.answer = await text(page, '#run-answer');
  await page.waitForSelector('#conversation li[data-id="m2"][data-role="assistant"]');
  result.conversation = await page.$$eval('#conversation li[data-id]', items => items.map(li => `${li.dataset.id}:${li.dataset.role}`));
  await page.waitForSelector('#draft-files li[data-path="notes.md"]');
  result.diffText = await page.$eval('#draft-files li[data-path="notes.md"] pre.unified', pre => pre.textContent);
  result.continueShown = await page.$eval('#composer-continue-label', label => !label.hidden);
  await shot('c2-answered');

  // A second message while the draft is there: refused at once, with the code and what to do.
  await page.fill('#composer-text', 'And once more');
  await page.click('#composer-send');
  await page.waitForSelector('#composer-error:not([hidden])');
  result.refused = { code: await page.$eval('#composer-error', el => el.dataset.code), text: await text(page, '#composer-error') };
  result.keptText = await page.$eval('#composer-text', area => area.value);

  await page.click('#publish');
  await page.waitForSelector('#draft-empty', { timeout: 20000 });
  await page.waitForFunction(() => document.getElementById('composer-continue-label').hidden);
  await shot('c3-published');
});
