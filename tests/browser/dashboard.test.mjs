// Headless Chromium against a running `atelier dashboard` (started by tests/tests/dashboard.rs).
// Prints READY once the job list is open (the Rust test then submits JOB_ID), follows the job
// from running to succeeded without a reload, opens its page, reads the plan, the tool I/O
// log and the job's outcome, clicks Publish and waits for the draft to be gone. Prints `RESULT {json}` at the end;
// screenshots go to ARTIFACTS.
import { runPage } from './launch.mjs';

const url = process.env.DASHBOARD_URL;
const jobId = process.env.JOB_ID;

const result = { sawRunning: false, sawSucceeded: false, reloaded: true };
await runPage({ width: 1400, height: 1000 }, result, async ({ page, shot }) => {
  await page.goto(`${url}/#/jobs`);
  await page.waitForSelector('#jobs tbody');
  await page.waitForSelector('#live.on', { timeout: 15000 });
  // A marker that a reload would wipe.
  await page.evaluate(() => { window.__sameDocument = 'still here'; });
  console.log('READY');

  const row = `tr[data-job-id="${jobId}"]`;
  await page.waitForSelector(`${row}[data-state="running"]`, { timeout: 60000 });
  result.sawRunning = true;
  await shot('1-running');
  await page.waitForSelector(`${row}[data-state="succeeded"]`, { timeout: 90000 });
  result.sawSucceeded = true;
  result.reloaded = (await page.evaluate(() => window.__sameDocument)) !== 'still here';
  await page.waitForSelector(`${row} .outcome`);
  result.listOutcome = await page.$eval(`${row} .outcome`, el => el.textContent.trim());
  result.listCost = await page.$eval(`${row} td.cost`, el => el.textContent.trim());
  result.spending = await page.$$eval('#spending tbody tr[data-model]', rows => rows.map(r => r.dataset.model));
  await shot('2-succeeded');

  await page.click(`${row} a`);
  await page.waitForSelector('#plan-items li');
  await page.waitForSelector('.io-call[data-tool="table_export"][data-status="ok"]');
  await page.waitForSelector('#draft-files li');
  result.planItems = await page.$$eval('#plan-items li', items => items.map(li => ({
    label: li.querySelector('.label b').textContent, status: li.dataset.status })));
  result.toolCalls = await page.$$eval('.io-call', calls => calls.map(c => ({ tool: c.dataset.tool, status: c.dataset.status })));
  result.draftBefore = await page.$$eval('#draft-files li', items => items.map(li => li.dataset.path));
  result.outcome = await page.$eval('#job-outcome', el => ({ ...el.dataset, text: el.textContent.trim() }));
  result.cost = await page.$eval('#job-cost', el => el.textContent.trim());
  await shot('3-job');

  await page.click('#publish');
  await page.waitForSelector('#draft-empty', { timeout: 20000 });
  result.draftGone = true;
  result.reloaded = result.reloaded || (await page.evaluate(() => window.__sameDocument)) !== 'still here';
  await shot('4-published');

  await page.click('a[data-nav="workers"]');
  await page.waitForSelector('.pool[data-pool="tabular"] [data-stat="instances"]');
  result.workers = await page.$$eval('.pool', pools => Object.fromEntries(pools.map(p =>
    [p.dataset.pool, Number(p.querySelector('[data-stat="instances"]').textContent)])));
  result.poolDemand = await page.$$eval('.pool', pools => Object.fromEntries(pools.map(p =>
    [p.dataset.pool, {
      slots: p.querySelector('[data-stat="slots"]').textContent,
      pending: Number(p.querySelector('[data-stat="pending"]').textContent),
      autoscale: p.querySelector('[data-autoscale]').dataset.autoscale,
    }])));
  await shot('5-workers');
  await page.click('a[data-nav="throughput"]');
  await page.waitForSelector('#jobs-chart rect');
  result.chartBars = await page.$$eval('#jobs-chart rect', rects => rects.length);
  await shot('6-throughput');
});
