// Headless Chromium on the workbench page of a running `atelier dashboard` (started by
// tests/tests/dashboard.rs, after one job wrote notes.md into the draft of WORKBENCH): reads the
// conversation, the draft's start and content diff, rewinds to the first message (the draft goes),
// regenerates (the answer and the draft come back), regenerates from the first message (after
// saying what goes), publishes, and restores checkpoint 1. The draft's file and the page of the
// job that wrote it show the contract the plan holds the file to.
// Prints `RESULT {json}` at the end; screenshots go to ARTIFACTS.
import { runPage } from './launch.mjs';

const url = process.env.DASHBOARD_URL;
const workbench = process.env.WORKBENCH;

const result = {};
const ids = page => page.$$eval('#conversation li[data-id]', items => items.map(li => `${li.dataset.id}:${li.dataset.role}`));
await runPage({ width: 1400, height: 1200 }, result, async ({ page, shot }) => {
  // From the jobs list, the workbench link opens its page.
  await page.goto(`${url}/#/jobs`);
  await page.click(`a[href="#/workbenches/${workbench}"]`);
  await page.waitForSelector('#conversation li[data-id="m2"][data-role="assistant"]');
  result.before = await ids(page);
  result.diffText = await page.$eval('#draft-files li[data-path="notes.md"] pre.unified', pre => pre.textContent);
  result.draftOrigin = await page.$eval('#draft-origin', el => el.textContent.trim());
  result.heldTo = await page.$eval('#draft-files li[data-path="notes.md"] .held-to', el => el.textContent.trim());
  const originJob = await page.$eval('#draft-origin a', a => decodeURIComponent(a.getAttribute('href').split('/').pop()));
  await shot('w1-conversation');

  await page.click('#conversation li[data-id="m1"] button.rewind');
  await page.waitForSelector('#draft-empty', { timeout: 20000 });
  await page.waitForSelector('#conversation li[data-role="system"]');
  result.afterRewind = await ids(page);
  await shot('w2-rewound');

  await page.click('#regenerate');
  await page.waitForSelector('#conversation li[data-role="assistant"]', { timeout: 60000 });
  await page.waitForSelector('#draft-files li[data-path="notes.md"]', { timeout: 20000 });
  result.afterRegenerate = await ids(page);
  result.answer = await page.$eval('#conversation li[data-role="assistant"] .text', el => el.textContent.trim());
  await shot('w3-regenerated');

  // Regenerate from the first message: the page says first what goes.
  await page.click('#conversation li[data-id="m1"] button.regenerate-from');
  await page.waitForSelector('#conversation li[data-id="m7"][data-role="assistant"]', { timeout: 60000 });
  result.regenerateDialog = result.lastDialog;
  result.afterRegenerateFrom = await ids(page);
  await page.waitForSelector('#draft-files li[data-path="notes.md"]', { timeout: 20000 });

  await page.click('#publish');
  await page.waitForSelector('#draft-empty', { timeout: 20000 });
  await page.waitForSelector('#checkpoints li[data-id="1"] button.restore:not([disabled])');
  await page.click('#checkpoints li[data-id="1"] button.restore');
  await page.waitForSelector('#checkpoints li[data-id="2"][data-reason="before_restore"]', { timeout: 20000 });
  result.checkpoints = await page.$$eval('#checkpoints li[data-id]', items => items.map(li => `${li.dataset.id}:${li.dataset.reason}`));
  result.lastMessage = await page.$eval('#conversation li:last-child .text', el => el.textContent.trim());
  await shot('w4-restored');

  // The job that first wrote the draft: its plan shows the contract under the item.
  await page.goto(`${url}/#/jobs/${encodeURIComponent(originJob)}`);
  await page.waitForSelector('#plan-items li[data-index="1"] ul.contracts li');
  result.planContracts = await page.$$eval('#plan-items li[data-index="1"] ul.contracts li', items => items.map(li => li.textContent.trim()));
  await shot('w5-job-contracts');
});
