// The batch pages: #/batches lists every batch with its progress; #/batches/ID shows one batch's
// progress (done/total, rate, ETA), its failed targets with links to their jobs, and the
// Cancel, Retry, Publish and Discard actions. Loaded before app.js, whose router and helpers
// it uses.

function batchesPage() {
  const html = `<div class="toolbar"><h1 class="grow">Batches</h1></div>
    <div class="card" style="padding:0"><table id="batches">
      <thead><tr><th>Batch</th><th>State</th><th>Progress</th><th class="num">Failed</th><th>Action</th><th class="num">Started</th></tr></thead>
      <tbody><tr><td colspan="6" class="empty">Loading…</td></tr></tbody></table></div>`;
  const refresh = async () => renderBatches(await api('/api/batches'));
  mount(html, refresh, () => schedule(500), () => schedule(0)).catch(showError);
}

function renderBatches(rows) {
  const body = document.querySelector('#batches tbody');
  if (!body) return;
  if (!rows.length) {
    body.innerHTML = '<tr><td colspan="6" class="empty">No batches yet: <code>atelier batch submit --workbenches GLOB --tool TOOL --args JSON</code>.</td></tr>';
    return;
  }
  body.innerHTML = rows.map(batch => `<tr data-id="${esc(batch.batch_id)}" data-state="${esc(batch.state)}">
    <td><a class="mono" href="#/batches/${encodeURIComponent(batch.batch_id)}">${esc(shortId(batch.batch_id))}</a></td>
    <td><span class="badge ${esc(batch.state)}">${esc(batch.state.replaceAll('_', ' '))}</span></td>
    <td>${progressBar(batch)}</td><td class="num">${batch.failed}</td>
    <td class="small">${esc(batch.action)}</td><td class="num small">${time(batch.created_at_ms)}</td></tr>`).join('');
}

function progressBar(batch) {
  const done = batch.succeeded + batch.failed + batch.cancelled;
  const percent = batch.total ? Math.floor(100 * done / batch.total) : 100;
  return `<span class="progress" title="${percent}%"><span style="width:${percent}%"></span></span>
    <span class="mono small progress-text">${done} / ${batch.total}</span>`;
}

function batchPage(id) {
  const path = `/api/batches/${encodeURIComponent(id)}`;
  const html = `<div id="batch" data-batch="${esc(id)}"><div class="empty">Loading ${esc(id)}…</div></div>`;
  const refresh = async () => renderBatch(path, await api(path));
  // Children's events move the counts; a running batch is also looked at every 5 seconds.
  mount(html, refresh, () => schedule(500), () => schedule(0)).catch(showError);
}

/** Targets per second and the time left, from the batch's age and counts. */
function rate(batch) {
  const done = batch.succeeded + batch.failed + batch.cancelled;
  const end = batch.finished_at_ms || Date.now();
  const seconds = Math.max((end - batch.created_at_ms) / 1000, 0.001);
  const perSecond = done / seconds;
  const left = batch.total - done;
  const eta = batch.state === 'running' && perSecond > 0 ? duration(1000 * left / perSecond) : '—';
  return { perSecond, eta };
}

/** What the succeeded targets did, as `atelier batch status` says it (none for older batches). */
function outcomes(batch) {
  const changed = batch.changed ?? 0, answered = batch.answered ?? 0;
  return changed + answered ? ` (${changed} with changes, ${answered} answered without changes)` : '';
}

/** `{"count": 3}` as `3`, `{"percent": 5}` as `5%`. */
function tolerance(value) {
  if (!value) return 'any';
  return value.percent !== undefined ? `${value.percent}%` : `${value.count}`;
}

function renderBatch(path, { batch, failed }) {
  const root = document.getElementById('batch');
  if (!root) return;
  const running = batch.state === 'running';
  const { perSecond, eta } = rate(batch);
  root.innerHTML = `
    <div class="toolbar"><h1 class="grow mono">${esc(batch.batch_id)}</h1>
      <span class="badge ${esc(batch.state)}" id="batch-state">${esc(batch.state.replaceAll('_', ' '))}</span>
      <button id="batch-cancel" ${running && !batch.cancel_requested ? '' : 'disabled'}>Cancel</button>
      <button id="batch-retry" ${!running && batch.failed > 0 ? '' : 'disabled'}>Retry failed</button>
      <button id="batch-publish" ${!running && batch.succeeded > 0 ? '' : 'disabled'}>Publish</button>
      <button id="batch-discard" ${!running && batch.succeeded > 0 ? '' : 'disabled'}>Discard</button></div>
    <div class="card"><h2>Progress</h2>${progressBar(batch)}
      <div class="small" id="batch-counts" data-total="${batch.total}" data-succeeded="${batch.succeeded}"
        data-changed="${batch.changed ?? 0}" data-answered="${batch.answered ?? 0}"
        data-failed="${batch.failed}" data-running="${batch.running}" data-queued="${batch.queued}" data-cancelled="${batch.cancelled}">
        ${batch.succeeded} succeeded${outcomes(batch)} · ${batch.failed} failed · ${batch.running} running · ${batch.queued} queued · ${batch.cancelled} cancelled
        · ${perSecond.toFixed(1)} targets/s · ETA ${eta}</div>
      <div class="small muted">${esc(batch.action)} · concurrency ${batch.concurrency}
        · failures tolerated: ${esc(tolerance(batch.tolerate_failures))}</div>
      <div class="small" id="batch-spent">spent ${batch.spent ? batch.spent.tokens : 0} tokens · ${esc(cost(batch.spent && batch.spent.cost_usd))}${batch.budget
        ? ` · budget ${esc(budgetText(batch.budget))}` : ''}</div>
      ${batch.error ? `<div class="error small" id="batch-error">${esc(batch.error.code)}: ${esc(batch.error.message)}</div>` : ''}</div>
    <div class="card"><h2>Failed targets</h2><table id="batch-failures"><thead><tr><th class="num">#</th><th>Workbench</th><th>File</th><th>Job</th><th>Error</th></tr></thead>
      <tbody>${failed.map(target => `<tr data-workbench="${esc(target.workbench)}" data-code="${esc(target.error ? target.error.code : '')}">
        <td class="num">${target.index}</td>
        <td><a href="#/workbenches/${encodeURIComponent(target.workbench)}">${esc(target.workbench)}</a></td>
        <td class="mono small">${esc(target.file || '')}</td>
        <td>${target.job_id ? `<a class="mono job" href="#/jobs/${encodeURIComponent(target.job_id)}">${esc(shortId(target.job_id))}</a>` : '—'}</td>
        <td class="small"><b>${esc(target.error ? target.error.code : '')}</b> ${esc(target.error ? target.error.message : '')}</td></tr>`).join('')
        || '<tr><td colspan="5" class="empty">No failed targets.</td></tr>'}</tbody></table></div>`;
  bindAction(document.getElementById('batch-cancel'), `${path}/cancel`, 'Cancel requested', 'Stop dispatching and cancel the running targets?');
  bindAction(document.getElementById('batch-retry'), `${path}/retry`, 'Retrying the failed targets');
  bindAction(document.getElementById('batch-publish'), `${path}/publish`, 'Published the drafts of the succeeded targets');
  bindAction(document.getElementById('batch-discard'), `${path}/discard`, 'Discarded the drafts of the succeeded targets', 'Throw these drafts away?');
}
