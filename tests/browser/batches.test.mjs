// Headless Chromium on the batch pages of a running `atelier dashboard` (started by
// tests/tests/dashboard.rs after a batch BATCH ended with one failed target, whose file was
// then fixed): from the batches list opens the batch, reads its counts and failed target,
// follows the failed target's job link and comes back, retries (the batch ends succeeded) and
// publishes. Prints `RESULT {json}` at the end; screenshots go to ARTIFACTS.
import { runPage } from './launch.mjs';

const url = process.env.DASHBOARD_URL;
const batch = process.env.BATCH;

const result = {};
const counts = page => page.$eval('#batch-counts', el => ({ ...el.dataset }));
await runPage({ width: 1400, height: 1000 }, result, async ({ page, shot }) => {
  await page.goto(`${url}/#/batches`);
  await page.waitForSelector(`#batches tr[data-id="${batch}"]`);
  result.listState = await page.$eval(`#batches tr[data-id="${batch}"]`, tr => tr.dataset.state);
  result.listProgress = await page.$eval(`#batches tr[data-id="${batch}"] .progress-text`, el => el.textContent.trim());
  await shot('b1-list');

  await page.click(`#batches tr[data-id="${batch}"] a`);
  await page.waitForSelector('#batch-counts');
  result.before = await counts(page);
  result.failures = await page.$$eval('#batch-failures tr[data-workbench]',
    rows => rows.map(tr => ({ workbench: tr.dataset.workbench, code: tr.dataset.code })));
  await shot('b2-batch');

  await page.click('#batch-failures a.job');
  await page.waitForFunction(() => location.hash.startsWith('#/jobs/'));
  result.jobHash = await page.evaluate(() => location.hash);
  await page.goBack();
  await page.waitForSelector('#batch-retry:not([disabled])');

  await page.click('#batch-retry');
  await page.waitForSelector('#batch-state.succeeded', { timeout: 60000 });
  result.after = await counts(page);
  result.countsText = await page.$eval('#batch-counts', el => el.textContent.replace(/\s+/g, ' ').trim());
  await shot('b3-retried');

  await page.waitForSelector('#batch-publish:not([disabled])');
  await page.click('#batch-publish');
  // The toast of the retry may still show: wait for the publish's own.
  await page.waitForFunction(() => /^(Published|error)/i.test(document.querySelector('#toast').textContent.trim()),
    null, { timeout: 20000 }).catch(() => {});
  result.toast = await page.$eval('#toast', el => el.textContent.trim());
});
