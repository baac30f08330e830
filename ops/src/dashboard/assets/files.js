// Workbenches and their files in the browser: the list of workbenches (#/workbenches) with a
// filter and "New workbench"; on a workbench's page the files card — the published files, or
// the draft's with each marked added/modified/deleted — with upload (drag and drop or the
// picker, several at once, each with its progress and, when refused, its code), download of
// either version and a preview: grids with sheet tabs for CSV/TSV and workbooks, a document's
// paragraphs and tables, slides with their text, PDF pages, text (markdown rendered); a
// modified file shows its draft and published versions side by side. Every action is an
// endpoint of docs/dashboard.md. Loaded before app.js, whose router and helpers it uses.

const ACTIVE_STATES = ['queued', 'running', 'awaiting_approval'];
const filesUi = { filter: '', maxUpload: null, workbench: null, view: null, listing: '', preview: null };

function bytes(n) {
  if (n == null) return '—';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = n / 1024, unit = 0;
  for (; value >= 1024 && unit < units.length - 1; unit++) value /= 1024;
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

function wbPath(name) { return `/api/workbenches/${encodeURIComponent(name)}`; }
function filePath(path) { return path.split('/').map(encodeURIComponent).join('/'); }

// ---- the list of workbenches -------------------------------------------------------------------

function workbenchesPage() {
  const html = `
    <div class="toolbar">
      <h1 class="grow">Workbenches</h1>
      <label class="small">Filter <input id="wb-filter" type="search" placeholder="name" value="${esc(filesUi.filter)}"></label>
    </div>
    <form class="card toolbar" id="wb-create" aria-labelledby="wb-create-title">
      <h2 id="wb-create-title" class="grow">New workbench</h2>
      <label class="small" for="wb-name">Name</label>
      <input id="wb-name" name="name" required maxlength="64" placeholder="letters, digits, . _ -" aria-describedby="wb-create-error">
      <button class="primary" id="wb-create-button" type="submit">Create</button>
      <div class="small error" id="wb-create-error" role="alert" hidden></div>
    </form>
    <div class="card scroll-x" style="padding:0"><table id="workbenches">
      <caption class="visually-hidden">Workbenches</caption>
      <thead><tr><th scope="col">Name</th><th scope="col" class="num">Files</th><th scope="col">Draft</th><th scope="col">Running job</th><th scope="col">Last activity</th><th scope="col">Model</th></tr></thead>
      <tbody><tr><td colspan="6" class="empty">Loading…</td></tr></tbody></table></div>`;
  const refresh = async () => {
    const [benches, jobs] = await Promise.all([api('/api/workbenches'), api('/api/jobs').catch(() => [])]);
    renderWorkbenches(benches, jobs);
  };
  mount(html, refresh, event => { if (event.kind.type !== 'assistant_delta') schedule(500); }, () => schedule(0)).catch(showError);
  document.getElementById('wb-filter').addEventListener('input', event => {
    filesUi.filter = event.target.value.trim();
    schedule(0);
  });
  wireCreate();
}

/** One row per workbench, with what its jobs say: the running one, the latest's model, when. */
function renderWorkbenches(benches, jobs) {
  const body = document.querySelector('#workbenches tbody');
  if (!body) return;
  const shown = benches.filter(b => !filesUi.filter || b.name.toLowerCase().includes(filesUi.filter.toLowerCase()));
  if (!shown.length) {
    body.innerHTML = `<tr><td colspan="6" class="empty">${benches.length ? 'No workbench matches the filter.' : 'No workbench yet: create one above.'}</td></tr>`;
    return;
  }
  const now = Date.now();
  body.innerHTML = shown.map(bench => {
    const own = jobs.filter(job => job.workbench === bench.name);
    const running = own.find(job => ACTIVE_STATES.includes(job.state));
    const latest = own.reduce((last, job) => (!last || job.created_at_ms > last.created_at_ms ? job : last), null);
    const last = Math.max(bench.created_at_ms, bench.draft ? bench.draft.started_at_ms : 0, ...own.map(job => job.updated_at_ms));
    const draft = bench.has_draft
      ? `<span class="badge awaiting_approval">draft</span> <span class="small muted">${bench.draft ? esc(ago(now - bench.draft.started_at_ms)) : ''}</span>`
      : '<span class="muted">—</span>';
    return `<tr data-workbench="${esc(bench.name)}">
      <th scope="row"><a href="#/workbenches/${encodeURIComponent(bench.name)}">${esc(bench.name)}</a></th>
      <td class="num">${bench.file_count}</td>
      <td>${draft}</td>
      <td>${running ? `<a class="mono" href="#/jobs/${encodeURIComponent(running.job_id)}">${esc(shortId(running.job_id))}</a> ${badge(running.state)}` : '<span class="muted">—</span>'}</td>
      <td class="small">${esc(ago(now - last))}</td>
      <td class="mono small">${esc(latest ? latest.model : '—')}</td></tr>`;
  }).join('');
}

function wireCreate() {
  const form = document.getElementById('wb-create');
  const error = document.getElementById('wb-create-error');
  form.addEventListener('submit', async event => {
    event.preventDefault();
    const name = document.getElementById('wb-name').value.trim();
    const button = document.getElementById('wb-create-button');
    button.disabled = true;
    try {
      await api('/api/workbenches', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name }) });
      toast(`Created ${name}`);
      location.hash = `#/workbenches/${encodeURIComponent(name)}`;
    } catch (failure) {
      error.textContent = failure.message;
      error.dataset.code = failure.code || '';
      error.hidden = false;
      button.disabled = false;
    }
  });
}

// ---- the files of a workbench ------------------------------------------------------------------

/** The files card of the workbench page (filled by `refreshFiles`). */
function filesCard() {
  return `<section class="card" id="files" aria-labelledby="files-title">
    <div class="toolbar"><h2 id="files-title" class="grow">Files</h2>
      <div class="segmented" role="group" aria-label="version shown" id="files-views"></div></div>
    <div class="dropzone" id="dropzone" tabindex="0" role="button" aria-describedby="drop-help">
      <span>Drop files here or</span> <label class="link-button">choose files<input type="file" id="file-picker" multiple class="visually-hidden"></label>
      <div class="small muted" id="drop-help"></div>
    </div>
    <ul class="uploads" id="uploads" aria-live="polite"></ul>
    <div class="scroll-x"><table id="file-list" class="files">
      <caption class="visually-hidden">Files of the workbench</caption>
      <thead><tr><th scope="col">Name</th><th scope="col">Status</th><th scope="col" class="kind">Kind</th><th scope="col" class="num">Size</th><th scope="col">Actions</th></tr></thead>
      <tbody><tr><td colspan="5" class="empty">Loading…</td></tr></tbody></table></div>
    <div id="preview" class="preview" hidden></div>
  </section>`;
}

/** Binds the card's upload controls once per page. */
function wireFiles(name) {
  Object.assign(filesUi, { workbench: name, view: null, listing: '', preview: null });
  const zone = document.getElementById('dropzone');
  const picker = document.getElementById('file-picker');
  picker.addEventListener('change', () => { uploadAll(name, [...picker.files]); picker.value = ''; });
  zone.addEventListener('keydown', event => {
    if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); picker.click(); }
  });
  ['dragenter', 'dragover'].forEach(type => zone.addEventListener(type, event => { event.preventDefault(); zone.classList.add('over'); }));
  ['dragleave', 'drop'].forEach(type => zone.addEventListener(type, () => zone.classList.remove('over')));
  zone.addEventListener('drop', event => {
    event.preventDefault();
    uploadAll(name, [...event.dataTransfer.files]);
  });
  if (filesUi.maxUpload == null) api('/api/status').then(status => { filesUi.maxUpload = status.max_upload_bytes; }).catch(() => {});
}

/** The card for `history` (the workbench's conversation state): the view's files, marked. */
async function refreshFiles(name, history) {
  if (!document.getElementById('files')) return;
  const view = history.has_draft ? (filesUi.view || 'draft') : 'published';
  const listing = await api(`${wbPath(name)}/files?view=${view}`);
  document.getElementById('drop-help').textContent = history.has_draft
    ? 'The workbench has a draft: publish or discard it before adding files (as atelier wb add refuses them).'
    : 'Files are added to the published files, as atelier wb add adds them.';
  document.getElementById('files-views').innerHTML = history.has_draft
    ? ['draft', 'published'].map(v => `<button type="button" data-view="${v}" aria-pressed="${v === listing.view}">${v === 'draft' ? 'Draft' : 'Published'}</button>`).join('')
    : '';
  document.querySelectorAll('#files-views button').forEach(button => button.addEventListener('click', () => {
    filesUi.view = button.dataset.view;
    filesUi.listing = '';
    schedule(0);
  }));
  const key = JSON.stringify(listing.files) + listing.view;
  if (key === filesUi.listing) return;
  filesUi.listing = key;
  renderFiles(name, listing);
  refreshPreview(name, listing);
}

function renderFiles(name, listing) {
  const body = document.querySelector('#file-list tbody');
  if (!listing.files.length) {
    body.innerHTML = '<tr><td colspan="5" class="empty">No files yet: drop some above.</td></tr>';
    return;
  }
  body.innerHTML = listing.files.map(file => {
    // A deleted file is only in the published state.
    const version = file.status === 'deleted' ? 'published' : listing.view;
    const href = `${wbPath(name)}/files/${filePath(file.path)}?view=${version}`;
    return `<tr data-path="${esc(file.path)}" data-status="${esc(file.status)}">
      <th scope="row" class="mono">${esc(file.path)}</th>
      <td>${file.status === 'unchanged' ? '<span class="muted small">unchanged</span>' : `<span class="file-status ${esc(file.status)}">${esc(file.status)}</span>`}</td>
      <td class="kind small">${esc(file.kind)}</td>
      <td class="num small">${esc(bytes(file.size))}</td>
      <td class="file-actions"><button type="button" class="small preview-button" data-path="${esc(file.path)}" data-status="${esc(file.status)}" aria-label="Preview ${esc(file.path)}">Preview</button>
        <a class="small download" href="${href}" download aria-label="Download the ${esc(version)} ${esc(file.path)}">Download</a></td></tr>`;
  }).join('');
  body.querySelectorAll('.preview-button').forEach(button => button.addEventListener('click', () => {
    filesUi.preview = { path: button.dataset.path, status: button.dataset.status };
    refreshPreview(name, listing, true);
  }));
}

// ---- uploads -----------------------------------------------------------------------------------

/** Uploads `files` one request each, in turn, each with its progress line. */
async function uploadAll(name, files) {
  const list = document.getElementById('uploads');
  const items = files.map(file => {
    const item = document.createElement('li');
    item.dataset.name = file.name;
    item.innerHTML = `<span class="mono">${esc(file.name)}</span> <progress max="100" value="0" aria-label="uploading ${esc(file.name)}"></progress> <span class="small outcome">waiting…</span>`;
    list.append(item);
    return item;
  });
  for (const [index, file] of files.entries()) await uploadOne(name, file, items[index]);
  filesUi.listing = '';
  schedule(0);
}

function uploadOne(name, file, item) {
  const outcome = item.querySelector('.outcome');
  const bar = item.querySelector('progress');
  const done = (ok, text, code) => {
    item.dataset.state = ok ? 'done' : 'refused';
    item.dataset.code = code || '';
    outcome.textContent = text;
    outcome.className = `small outcome ${ok ? '' : 'error'}`;
    if (ok) bar.value = 100;
  };
  if (filesUi.maxUpload != null && file.size > filesUi.maxUpload) {
    done(false, `FILE_TOO_LARGE: ${bytes(file.size)} is over the ${bytes(filesUi.maxUpload)} an upload may hold`, 'FILE_TOO_LARGE');
    return Promise.resolve();
  }
  return new Promise(resolve => {
    const form = new FormData();
    form.append('file', file, file.name);
    const request = new XMLHttpRequest();
    request.open('POST', `${wbPath(name)}/files`);
    request.setRequestHeader('X-Atelier-Csrf', '1');
    request.setRequestHeader('Accept', 'application/json');
    request.upload.addEventListener('progress', event => {
      if (event.lengthComputable) {
        bar.value = Math.round(100 * event.loaded / event.total);
        outcome.textContent = `${bytes(event.loaded)} of ${bytes(event.total)}`;
      }
    });
    request.addEventListener('load', () => {
      let body = {};
      try { body = JSON.parse(request.responseText); } catch { body = {}; }
      if (request.status >= 200 && request.status < 300) done(true, `added (${bytes(file.size)})`);
      else {
        const error = body.error || { code: String(request.status), message: request.statusText };
        done(false, `${error.code}: ${error.message}`, error.code);
      }
      resolve();
    });
    request.addEventListener('error', () => { done(false, 'the upload did not reach the dashboard: try again', 'NETWORK'); resolve(); });
    request.send(form);
  });
}

// ---- previews ----------------------------------------------------------------------------------

/** Shows the chosen file's preview; a modified file's draft and published side by side. */
function refreshPreview(name, listing, chosen = false) {
  const box = document.getElementById('preview');
  const wanted = filesUi.preview;
  if (!box || !wanted) return;
  const file = listing.files.find(f => f.path === wanted.path);
  if (!file) { box.hidden = true; filesUi.preview = null; return; }
  const versions = file.status === 'modified' ? ['draft', 'published']
    : file.status === 'deleted' ? ['published'] : [listing.view];
  box.hidden = false;
  box.dataset.path = file.path;
  box.innerHTML = `<div class="toolbar"><h3 class="grow" id="preview-title">Preview of <span class="mono">${esc(file.path)}</span></h3>
      <button type="button" class="small" id="preview-close">Close preview</button></div>
    <div class="preview-panes ${versions.length > 1 ? 'side-by-side' : ''}">${versions.map(version =>
      `<section class="pane" data-version="${esc(version)}" aria-label="${esc(version)} version">${versions.length > 1 ? `<h4>${version === 'draft' ? 'Draft' : 'Published'}</h4>` : ''}<div class="pane-body"><div class="muted small">Loading…</div></div></section>`).join('')}</div>`;
  document.getElementById('preview-close').addEventListener('click', () => { filesUi.preview = null; box.hidden = true; });
  for (const pane of box.querySelectorAll('.pane')) loadPane(name, file.path, pane, {});
  if (chosen) box.scrollIntoView({ block: 'nearest' });
}

/** Loads one page of a version's preview into `pane`: a first page replaces, "load more" adds. */
async function loadPane(name, path, pane, { sheet, offset }) {
  const params = new URLSearchParams({ view: pane.dataset.version });
  if (sheet) params.set('sheet', sheet);
  if (offset) params.set('offset', offset);
  const body = pane.querySelector('.pane-body');
  let page;
  try {
    page = await api(`${wbPath(name)}/preview/${filePath(path)}?${params}`);
  } catch (error) {
    body.innerHTML = `<div class="error preview-error" data-code="${esc(error.code || '')}" role="alert">${esc(error.message)}</div>`;
    return;
  }
  if (!offset) body.innerHTML = previewFrame(page);
  const target = body.querySelector('.preview-content');
  target.insertAdjacentHTML('beforeend', previewPage(page));
  const more = body.querySelector('.load-more');
  if (more) {
    more.hidden = page.next_offset == null;
    more.onclick = () => loadPane(name, path, pane, { sheet: page.sheet, offset: page.next_offset });
  }
  body.querySelectorAll('[role="tab"]').forEach(tab => tab.addEventListener('click', () =>
    loadPane(name, path, pane, { sheet: tab.dataset.sheet })));
  const count = body.querySelector('.preview-count');
  if (count && page.total != null) count.textContent = `${Math.min(page.offset + shownOf(page), page.total)} of ${page.total} ${unitOf(page)}`;
}

function shownOf(page) {
  return (page.rows || page.blocks || page.slides || page.pages || page.lines || []).length;
}

function unitOf(page) {
  return { grid: 'rows', document: 'blocks', slides: 'slides', pages: 'pages', text: 'lines' }[page.kind] || '';
}

/** What stays while pages are added: sheet tabs, the grid's header, the count, "load more". */
function previewFrame(page) {
  const tabs = page.sheets && page.sheets.length
    ? `<div class="sheet-tabs" role="tablist" aria-label="sheets">${page.sheets.map(sheet =>
      `<button type="button" role="tab" data-sheet="${esc(sheet)}" aria-selected="${sheet === page.sheet}">${esc(sheet)}</button>`).join('')}</div>` : '';
  const more = '<button type="button" class="small load-more" hidden>Load more</button>';
  const count = `<div class="small muted preview-count" aria-live="polite"></div>`;
  switch (page.kind) {
    case 'grid': {
      const head = `<tr><th scope="col" class="row-number"><span class="visually-hidden">row</span></th>${page.columns.map(c => `<th scope="col">${esc(c)}</th>`).join('')}</tr>`;
      const cut = page.columns_cut ? `<div class="small muted">Only the first ${page.columns.length} columns are shown (used range ${esc(page.used_range)}).</div>` : '';
      return `${tabs}<div class="grid-scroll"><table class="preview-grid mono small" data-sheet="${esc(page.sheet || '')}"><thead>${head}</thead><tbody class="preview-content"></tbody></table></div>${cut}${count}${more}`;
    }
    case 'none':
      return `<div class="muted preview-content"></div>`;
    default:
      return `<div class="preview-content preview-${esc(page.kind)}"></div>${count}${more}`;
  }
}

function cellText(value) {
  if (value === null || value === undefined) return '';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** One page's content, to add inside the frame's `.preview-content`. */
function previewPage(page) {
  switch (page.kind) {
    case 'grid':
      return page.rows.map((row, i) => `<tr><th scope="row" class="row-number">${page.first_row + i}</th>${row.map(value => `<td${typeof value === 'number' ? ' class="num"' : ''}>${esc(cellText(value))}</td>`).join('')}</tr>`).join('');
    case 'document':
      return page.blocks.map(block => block.type === 'table'
        ? `<table class="doc-table small">${(block.rows || []).map(row => `<tr>${row.map(cell => `<td>${esc(cellText(cell))}</td>`).join('')}</tr>`).join('')}</table>`
        : block.heading_level ? `<h4 class="doc-heading">${esc(block.text)}</h4>` : `<p>${esc(block.text)}</p>`).join('');
    case 'slides':
      return page.slides.map(slide => `<section class="slide" data-slide="${slide.index + 1}" aria-label="slide ${slide.index + 1}">
        <h4><span class="muted small">Slide ${slide.index + 1}</span> ${esc(slide.title || '')}</h4>
        ${(slide.body || []).length ? `<ul>${slide.body.map(p => `<li>${esc(p)}</li>`).join('')}</ul>` : ''}
        ${(slide.other_text || []).filter(Boolean).map(t => `<p class="small">${esc(t)}</p>`).join('')}
        ${(slide.tables || []).map(table => `<table class="doc-table small">${(table.rows || table || []).map(row => `<tr>${[].concat(row).map(cell => `<td>${esc(cellText(cell))}</td>`).join('')}</tr>`).join('')}</table>`).join('')}
        ${slide.notes ? `<div class="small muted">Notes: ${esc(slide.notes)}</div>` : ''}</section>`).join('');
    case 'pages':
      return page.pages.map(p => `<section class="pdf-page" aria-label="page ${p.page}"><h4 class="small muted">Page ${p.page}</h4><pre>${esc(p.text)}</pre></section>`).join('');
    case 'text':
      return page.markdown && !page.offset
        ? `<div class="markdown">${markdown(page.lines.join('\n'))}</div>`
        : `<pre class="text-lines">${esc(page.lines.join('\n'))}${page.lines.length ? '\n' : ''}</pre>`;
    default:
      return esc(page.reason || 'No preview: download the file.');
  }
}
