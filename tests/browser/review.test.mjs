// Headless Chromium on the workbench page of `atelier up`'s dashboard (started by
// tests/tests/review.rs after a draft of WORKBENCH added sheets to book.xlsx, a slide to
// deck.pptx and notes.md): reads what the draft panel shows of each addition.
// Prints `RESULT {json}` at the end; screenshots go to ARTIFACTS.
import { runPage } from './launch.mjs';

const url = process.env.DASHBOARD_URL;
const workbench = process.env.WORKBENCH;

const result = {};
const grid = (page, sheet) => page.$$eval(`#draft-files table.added-sheet[data-sheet="${sheet}"] tr`,
  rows => rows.map(row => [...row.children].map(cell => cell.textContent)));
await runPage({ width: 1400, height: 1200 }, result, async ({ page, shot }) => {
  await page.goto(`${url}/#/workbenches/${workbench}`);
  await page.waitForSelector('#draft-files table.added-sheet[data-sheet="Forecast"]', { timeout: 20000 });
  result.forecast = await grid(page, 'Forecast');
  result.forecastFormula = await page.$eval('table.added-sheet[data-sheet="Forecast"] td[data-cell="B2"]', td => td.title);
  const big = await grid(page, 'Big');
  result.bigRows = big.length;
  result.bigColumns = big[0].length;
  result.bigCut = await page.$eval('#draft-files li[data-path="book.xlsx"] .more-cells', el => el.textContent);
  result.slides = await page.$$eval('#draft-files li[data-path="deck.pptx"] .units li', items => items.map(li => li.textContent));
  result.notes = await page.$eval('#draft-files li[data-path="notes.md"] pre.unified', pre => pre.textContent);
  await shot('r1-review');
});
