// Headless Chromium on the workbenches and files of `atelier up` (started by
// tests/tests/files_http.rs with the scripted model): create WORKBENCH from the list (a bad
// name first), upload PENGUINS by the picker and QUARTERLY by drag and drop, preview both (the
// CSV's first rows and "load more", the workbook's sheet tabs), upload CRAFTED by keyboard and
// see its preview refused with its code, drop `../x.csv` and see it refused; send a message
// whose run adds summary.xlsx, preview the draft's added sheet, download it into DOWNLOADS,
// publish, and see the file published; then the page at 390 px wide.
// Prints `RESULT {json}` at the end; screenshots go to ARTIFACTS.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runPage } from './launch.mjs';

const url = process.env.DASHBOARD_URL;
const workbench = process.env.WORKBENCH;

const result = {};
const rowsOf = (page, selector) => page.$$eval(selector, rows => rows.map(row => [...row.children].map(cell => cell.textContent.trim())));
const listed = page => page.$$eval('#file-list tbody tr[data-path]', rows => rows.map(row => `${row.dataset.path}:${row.dataset.status}`));

/** Drops a file of `bytes` named `name` on the drop zone, as a browser's drag and drop does. */
async function drop(page, name, bytes) {
  await page.evaluate(({ data, name }) => {
    const raw = Uint8Array.from(atob(data), c => c.charCodeAt(0));
    const transfer = new DataTransfer();
    transfer.items.add(new File([raw], name));
    const zone = document.getElementById('dropzone');
    for (const type of ['dragenter', 'dragover', 'drop']) {
      zone.dispatchEvent(new DragEvent(type, { dataTransfer: transfer, bubbles: true, cancelable: true }));
    }
  }, { data: Buffer.from(bytes).toString('base64'), name });
}

/** Every control of the files card without a name a screen reader can read. */
function unlabeled(page) {
  return page.$$eval('#files button, #files a, #files input, #files [role="tab"]', controls => controls
    .filter(control => {
      const labelled = control.getAttribute('aria-label') || control.textContent.trim()
        || (control.labels && [...control.labels].some(label => label.textContent.trim()));
      return !labelled;
    })
    .map(control => control.outerHTML.slice(0, 80)));
}

await runPage({ width: 1280, height: 900 }, result, async ({ page, shot: save }) => {
  // The page from its top (the header is sticky), as a person first sees it.
  const shot = async name => { await page.evaluate(() => window.scrollTo(0, 0)); await save(name); };
  // The list, a refused name, then the workbench.
  await page.goto(`${url}/#/workbenches`);
  await page.waitForSelector('#workbenches tbody');
  result.navActive = await page.$eval('nav a[data-nav="workbenches"]', a => a.classList.contains('active'));
  await page.fill('#wb-name', '../bad');
  await page.click('#wb-create-button');
  await page.waitForSelector('#wb-create-error:not([hidden])');
  result.badName = await page.$eval('#wb-create-error', el => el.dataset.code);
  await page.fill('#wb-name', workbench);
  await page.click('#wb-create-button');
  await page.waitForSelector(`#workbench[data-workbench="${workbench}"] #dropzone`);

  // Two uploads: by the picker and by drag and drop.
  await page.setInputFiles('#file-picker', process.env.PENGUINS);
  await page.waitForSelector('#uploads li[data-name="penguins.csv"][data-state]');
  await drop(page, 'quarterly_data.xlsx', readFileSync(process.env.QUARTERLY));
  await page.waitForSelector('#uploads li[data-name="quarterly_data.xlsx"][data-state]');
  result.uploads = await page.$$eval('#uploads li', items => items.map(li => `${li.dataset.name}:${li.dataset.state}`));
  await page.waitForSelector('#file-list tr[data-path="quarterly_data.xlsx"]');
  await page.waitForSelector('#file-list tr[data-path="penguins.csv"]');
  result.listedFirst = await listed(page);

  // The CSV's preview, opened by keyboard: its header, first rows, then more.
  await page.focus('#file-list button.preview-button[data-path="penguins.csv"]');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#preview[data-path="penguins.csv"] table.preview-grid tbody tr');
  result.csvHeader = await page.$$eval('#preview table.preview-grid thead th', cells => cells.map(th => th.textContent.trim()));
  result.csvFirst = (await rowsOf(page, '#preview table.preview-grid tbody tr'))[0];
  result.csvRows = await page.$$eval('#preview table.preview-grid tbody tr', rows => rows.length);
  await page.click('#preview .load-more');
  await page.waitForFunction(() => document.querySelectorAll('#preview table.preview-grid tbody tr').length > 50);
  result.csvRowsAfterMore = await page.$$eval('#preview table.preview-grid tbody tr', rows => rows.length);
  result.csvCount = await page.$eval('#preview .preview-count', el => el.textContent);

  // The workbook's sheet tabs, and another sheet.
  await page.click('#file-list button.preview-button[data-path="quarterly_data.xlsx"]');
  await page.waitForSelector('#preview[data-path="quarterly_data.xlsx"] [role="tab"]');
  result.tabs = await page.$$eval('#preview [role="tab"]', tabs => tabs.map(tab => tab.textContent));
  await page.click('#preview [role="tab"][data-sheet="Q2"]');
  await page.waitForSelector('#preview table.preview-grid[data-sheet="Q2"] tbody tr');
  result.q2 = await rowsOf(page, '#preview table.preview-grid[data-sheet="Q2"] tbody tr');
  result.q2Selected = await page.$eval('#preview [role="tab"][aria-selected="true"]', tab => tab.dataset.sheet);
  result.unlabeled = await unlabeled(page);
  await shot('f1-files-1280');

  // A crafted workbook, uploaded from the keyboard (as `wb add` takes it), refused at preview;
  // a path leaving the workbench refused at upload; the page goes on.
  const [chooser] = await Promise.all([page.waitForEvent('filechooser'), page.focus('#dropzone').then(() => page.keyboard.press('Enter'))]);
  await chooser.setFiles(process.env.CRAFTED);
  await page.waitForSelector('#uploads li[data-name="crafted.xlsx"][data-state]');
  await page.waitForSelector('#file-list tr[data-path="crafted.xlsx"]');
  await page.click('#file-list button.preview-button[data-path="crafted.xlsx"]');
  await page.waitForSelector('#preview[data-path="crafted.xlsx"] .preview-error');
  result.craftedPreview = await page.$eval('#preview .preview-error', el => el.dataset.code);
  await drop(page, '../x.csv', Buffer.from('a\n1\n'));
  await page.waitForSelector('#uploads li[data-name="../x.csv"][data-state]');
  result.escape = await page.$eval('#uploads li[data-name="../x.csv"]', li => `${li.dataset.state}:${li.dataset.code}`);
  result.uploadsAll = await page.$$eval('#uploads li', items => items.map(li => `${li.dataset.name}:${li.dataset.state}:${li.dataset.code}`));

  // A message whose run adds summary.xlsx: the draft's files, the added sheet's cells.
  await page.waitForSelector('#composer-model option[value="scripted"]', { state: 'attached' });
  await page.fill('#composer-text', 'Add a summary of quarterly_data.xlsx to summary.xlsx');
  await page.selectOption('#composer-model', 'scripted');
  await page.click('#composer-send');
  await page.waitForSelector('#run[data-state="succeeded"]', { timeout: 90000 });
  await page.waitForSelector('#file-list tr[data-path="summary.xlsx"][data-status="added"]');
  result.listedDraft = await listed(page);
  result.viewButtons = await page.$$eval('#files-views button', buttons => buttons.map(b => `${b.dataset.view}:${b.getAttribute('aria-pressed')}`));
  await page.click('#file-list button.preview-button[data-path="summary.xlsx"]');
  await page.waitForSelector('#preview[data-path="summary.xlsx"] [role="tab"][data-sheet="Summary"]');
  await page.click('#preview [role="tab"][data-sheet="Summary"]');
  await page.waitForSelector('#preview table.preview-grid[data-sheet="Summary"] tbody tr');
  result.summary = await rowsOf(page, '#preview table.preview-grid[data-sheet="Summary"] tbody tr');
  await shot('f2-draft-preview-1280');
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.click('#file-list tr[data-path="summary.xlsx"] a.download'),
  ]);
  result.downloadName = download.suggestedFilename();
  await download.saveAs(join(process.env.DOWNLOADS, 'summary.xlsx'));

  // Published: the file is one of the published files.
  await page.click('#draft #publish');
  await page.waitForSelector('#file-list tr[data-path="summary.xlsx"][data-status="unchanged"]');
  result.listedPublished = await listed(page);
  result.viewButtonsAfter = await page.$$eval('#files-views button', buttons => buttons.length);

  // The same page 390 px wide: nothing wider than the screen, the preview still there.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.click('#file-list button.preview-button[data-path="quarterly_data.xlsx"]');
  await page.waitForSelector('#preview[data-path="quarterly_data.xlsx"] table.preview-grid tbody tr');
  result.narrowWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  await shot('f3-files-390');
  await page.goto(`${url}/#/workbenches`);
  await page.waitForSelector(`#workbenches tr[data-workbench="${workbench}"]`);
  result.benchRow = (await rowsOf(page, `#workbenches tr[data-workbench="${workbench}"]`))[0];
  result.narrowListWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  await shot('f4-workbenches-390');
});
