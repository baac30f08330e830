// Atelier ops dashboard: plain JS, no dependencies. Views are hash routes that read the JSON API
// (/api/...); the live stream (/api/live, server-sent events fed by the EVENTS stream) triggers
// debounced refreshes of the view on screen, so nothing needs a reload.
'use strict';

const STATES = ['queued', 'running', 'awaiting_approval', 'succeeded', 'failed', 'cancelled'];
const view = document.getElementById('view');
const ui = { route: null, refresh: null, timer: null, filters: { state: '', workbench: '', q: '' } };

// ---- helpers -------------------------------------------------------------------------------

function esc(value) {
  return String(value ?? '').replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

async function api(path, options = {}) {
  const init = { credentials: 'same-origin', headers: { 'Accept': 'application/json' }, ...options };
  if (init.method === 'POST') init.headers['X-Atelier-Csrf'] = '1';
  const response = await fetch(path, init);
  if (response.status === 401) { location.href = '/login'; throw new Error('sign in needed'); }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = body.error || { code: String(response.status), message: response.statusText };
    throw Object.assign(new Error(`${error.code}: ${error.message}`), { code: error.code });
  }
  return body;
}

function toast(text, bad = false) {
  const el = document.getElementById('toast');
  el.textContent = text;
  el.className = bad ? 'bad' : '';
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.hidden = true; }, bad ? 7000 : 3500);
}

function duration(ms) {
  if (ms == null) return '—';
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function ago(ms) { return ms == null ? '—' : `${duration(ms)} ago`; }
function time(ms) { return ms ? new Date(ms).toLocaleTimeString() : '—'; }
function badge(state) { return `<span class="badge ${esc(state)}">${esc(String(state).replace('_', ' '))}</span>`; }
function tokens(n) { return n >= 10000 ? `${(n / 1000).toFixed(1)}k` : String(n ?? 0); }
/** An amount in dollars, or `unknown` where the model profile has no prices (never $0). */
function cost(usd) {
  if (usd === undefined || usd === null) return 'unknown';
  return usd >= 0.1 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
}
/** A budget's limits: `3000 tokens · $0.50`. */
function budgetText(budget) {
  const limits = [];
  if (budget && budget.tokens != null) limits.push(`${budget.tokens} tokens`);
  if (budget && budget.usd != null) limits.push(cost(budget.usd));
  return limits.join(' · ');
}
function shortId(id) { return id.length > 14 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id; }

function progress(done, failed, total) {
  if (!total) return '<span class="muted">—</span>';
  const pct = n => `${(100 * n / total).toFixed(1)}%`;
  return `<div class="small">${done}/${total}${failed ? ` · <span class="error">${failed} failed</span>` : ''}</div>
    <div class="progress" title="${done} done, ${failed} failed, ${total} total">
      <div class="done" style="width:${pct(done)}"></div><div class="failed" style="width:${pct(failed)}"></div></div>`;
}

// A small Markdown renderer for plans and summaries (headings, lists, task boxes, code, emphasis).
function markdown(text) {
  const inline = s => esc(s)
    .replace(/`([^`]+)`/g, '<code>$1</code>')
    .replace(/\*\*([^*]+)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|\W)\*([^*]+)\*(?=\W|$)/g, '$1<em>$2</em>');
  const out = [];
  let list = false, code = false;
  const close = () => { if (list) { out.push('</ul>'); list = false; } };
  for (const line of String(text || '').split('\n')) {
    if (line.trim().startsWith('```')) { close(); out.push(code ? '</pre>' : '<pre>'); code = !code; continue; }
    if (code) { out.push(esc(line) + '\n'); continue; }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const task = line.match(/^\s*[-*]\s+\[([ xX!])\]\s+(.*)$/);
    const bullet = line.match(/^\s*(?:[-*]|\d+\.)\s+(.*)$/);
    if (heading) { close(); out.push(`<h3>${inline(heading[2])}</h3>`); }
    else if (task) {
      if (!list) { out.push('<ul>'); list = true; }
      const mark = task[1] === ' ' ? '☐' : task[1] === '!' ? '<span class="error">✗</span>' : '<span style="color:var(--ok)">☑</span>';
      out.push(`<li class="task">${mark} ${inline(task[2])}</li>`);
    } else if (bullet) { if (!list) { out.push('<ul>'); list = true; } out.push(`<li>${inline(bullet[1])}</li>`); }
    else if (!line.trim()) close();
    else { close(); out.push(`<p>${inline(line)}</p>`); }
  }
  close();
  if (code) out.push('</pre>');
  return out.join('');
}

function prettyJson(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return String(text ?? ''); }
}

// Text that may be long: a preview, with the rest behind a toggle.
function expandable(label, text, open = false) {
  if (text == null || text === '') return '';
  const body = prettyJson(text);
  const long = body.length > 600;
  return `<details ${open && !long ? 'open' : ''}><summary>${esc(label)} · ${body.length.toLocaleString()} chars${long ? ' (large: click to expand)' : ''}</summary><pre>${esc(body)}</pre></details>`;
}

// ---- routing and live updates -----------------------------------------------------------------

const routes = [
  [/^#\/jobs\/(.+)$/, m => jobPage(decodeURIComponent(m[1]))],
  [/^#\/workbenches$/, () => workbenchesPage()],
  [/^#\/workbenches\/(.+)$/, m => workbenchPage(decodeURIComponent(m[1]))],
  [/^#\/batches\/(.+)$/, m => batchPage(decodeURIComponent(m[1]))],
  [/^#\/batches$/, () => batchesPage()],
  [/^#\/workers$/, () => workersPage()],
  [/^#\/throughput$/, () => throughputPage()],
  [/^(#\/jobs)?$/, () => jobsPage()],
];

function navigate() {
  const hash = location.hash || '#/jobs';
  for (const [pattern, render] of routes) {
    const match = hash.match(pattern);
    if (match) {
      ui.route = hash;
      document.querySelectorAll('[data-nav]').forEach(a => a.classList.toggle('active', hash.startsWith(`#/${a.dataset.nav}`)));
      render(match);
      return;
    }
  }
  location.hash = '#/jobs';
}

// Refreshes the current view soon (coalescing bursts of events).
function schedule(delay = 150) {
  clearTimeout(ui.timer);
  ui.timer = setTimeout(() => { if (ui.refresh) ui.refresh().catch(error => console.warn(error)); }, delay);
}

function connectLive() {
  const live = document.getElementById('live');
  const source = new EventSource('/api/live');
  source.addEventListener('hello', () => { live.className = 'live on'; live.textContent = 'live'; schedule(0); });
  source.addEventListener('job', message => {
    const event = JSON.parse(message.data);
    if (ui.onEvent) ui.onEvent(event);
  });
  source.addEventListener('lagged', () => schedule(0));
  source.onerror = () => { live.className = 'live off'; live.textContent = 'reconnecting…'; };
  // Between events, ages and durations still move.
  setInterval(() => { if (ui.tick) ui.tick(); }, 5000);
}

function mount(html, refresh, onEvent, tick) {
  view.innerHTML = html;
  ui.refresh = refresh;
  ui.onEvent = onEvent;
  ui.tick = tick;
  return refresh();
}

// ---- jobs list ----------------------------------------------------------------------------------

function jobsPage() {
  const f = ui.filters;
  const html = `
    <div class="toolbar">
      <h1 class="grow">Jobs</h1>
      <input id="q" type="search" placeholder="Search by job id" value="${esc(f.q)}" aria-label="search by id">
      <select id="f-state" aria-label="state"><option value="">all states</option>${STATES.map(s => `<option ${s === f.state ? 'selected' : ''} value="${s}">${s.replace('_', ' ')}</option>`).join('')}</select>
      <select id="f-workbench" aria-label="workbench"><option value="">all workbenches</option></select>
    </div>
    <div class="card" style="padding:0"><table id="jobs">
      <thead><tr><th>Job</th><th>State</th><th>Workbench</th><th>Model</th><th>Phase</th><th>Plan</th><th class="num">Age</th><th class="num">Duration</th><th class="num">Tokens</th><th class="num">Cost</th><th>Now</th></tr></thead>
      <tbody><tr><td colspan="11" class="empty">Loading…</td></tr></tbody></table></div>
    <div class="card"><h2>Spending by model and day</h2><p class="small muted">The jobs listed above, by the day they were created (Prometheus keeps the whole history: <code>atelier_model_cost_usd_total</code>).</p>
      <table id="spending"><thead><tr><th>Day</th><th>Model</th><th class="num">Jobs</th><th class="num">Tokens</th><th class="num">Cost</th></tr></thead><tbody></tbody></table></div>`;
  const refresh = async () => {
    const params = new URLSearchParams(Object.entries(ui.filters).filter(([, v]) => v));
    const [rows, benches] = await Promise.all([api(`/api/jobs?${params}`), api('/api/workbenches').catch(() => [])]);
    fillWorkbenches(benches);
    renderJobs(rows);
    renderSpending(rows);
  };
  mount(html, refresh, () => schedule(), () => schedule(0)).catch(showError);
  const change = () => {
    f.q = document.getElementById('q').value.trim();
    f.state = document.getElementById('f-state').value;
    f.workbench = document.getElementById('f-workbench').value;
    schedule(0);
  };
  document.getElementById('q').addEventListener('input', change);
  document.getElementById('f-state').addEventListener('change', change);
  document.getElementById('f-workbench').addEventListener('change', change);
}

function fillWorkbenches(benches) {
  const select = document.getElementById('f-workbench');
  if (!select || select.options.length - 1 === benches.length) return;
  select.innerHTML = '<option value="">all workbenches</option>' + benches.map(b =>
    `<option ${b.name === ui.filters.workbench ? 'selected' : ''} value="${esc(b.name)}">${esc(b.name)}${b.has_draft ? ' · draft' : ''}</option>`).join('');
}

function renderJobs(rows) {
  const body = document.querySelector('#jobs tbody');
  if (!body) return;
  if (!rows.length) { body.innerHTML = '<tr><td colspan="11" class="empty">No jobs match. Submit one with <code>atelier submit WORKBENCH "message"</code>.</td></tr>'; return; }
  body.innerHTML = rows.map(job => {
    const now = job.current && (job.current.tool
      ? `<span class="mono">${esc(job.current.tool)}</span>`
      : job.current.item ? `item ${job.current.item}/${job.current.total}` : '');
    return `<tr class="job-row" data-job-id="${esc(job.job_id)}" data-state="${esc(job.state)}">
      <td><a class="mono" href="#/jobs/${encodeURIComponent(job.job_id)}" title="${esc(job.job_id)}">${esc(shortId(job.job_id))}</a></td>
      <td>${badge(job.state)}${job.error ? `<div class="small error">${esc(job.error.code)}</div>` : ''}${job.outcome ? `<div class="small muted outcome" data-kind="${esc(job.outcome.kind)}">${esc(outcomeBrief(job.outcome))}</div>` : ''}</td>
      <td><a href="#/workbenches/${encodeURIComponent(job.workbench)}">${esc(job.workbench)}</a></td>
      <td class="small mono">${esc(job.model)}</td>
      <td>${esc(job.phase)}</td>
      <td>${progress(job.items_done, job.items_failed, job.items_total)}</td>
      <td class="num">${esc(duration(job.age_ms))}</td>
      <td class="num">${esc(duration(job.duration_ms))}</td>
      <td class="num" title="${job.prompt_tokens} prompt + ${job.completion_tokens} completion">${esc(tokens(job.tokens))}</td>
      <td class="num cost">${esc(cost(job.cost_usd))}</td>
      <td class="small">${now || ''}</td></tr>`;
  }).join('');
  body.querySelectorAll('tr.job-row').forEach(tr => tr.addEventListener('click', event => {
    if (event.target.tagName !== 'A') location.hash = `#/jobs/${encodeURIComponent(tr.dataset.jobId)}`;
  }));
}

/** Tokens and cost per (day, model) of `rows`; a cost is unknown when any job's is. */
function renderSpending(rows) {
  const body = document.querySelector('#spending tbody');
  if (!body) return;
  const groups = new Map();
  for (const job of rows) {
    const day = new Date(job.created_at_ms).toISOString().slice(0, 10);
    const key = `${day}\u0000${job.model}`;
    const group = groups.get(key) || { day, model: job.model, jobs: 0, tokens: 0, cost: 0 };
    group.jobs += 1;
    group.tokens += job.tokens;
    group.cost = group.cost === null || job.cost_usd == null ? null : group.cost + job.cost_usd;
    groups.set(key, group);
  }
  const sorted = [...groups.values()].sort((a, b) => b.day.localeCompare(a.day) || a.model.localeCompare(b.model));
  body.innerHTML = sorted.map(g => `<tr data-day="${esc(g.day)}" data-model="${esc(g.model)}"><td>${esc(g.day)}</td><td class="mono small">${esc(g.model)}</td>
      <td class="num">${g.jobs}</td><td class="num">${esc(tokens(g.tokens))}</td><td class="num">${esc(cost(g.cost))}</td></tr>`).join('')
    || '<tr><td colspan="5" class="empty">No jobs.</td></tr>';
}

/** What a succeeded job did, as `atelier job` says it: `changed 2 files: a.csv, b.txt`. */
function outcomeText(outcome) {
  if (outcome.kind !== 'changed') return 'answered without changes';
  const files = outcome.files || [];
  const named = files.slice(0, 10).join(', ') + (files.length > 10 ? ` and ${files.length - 10} more` : '');
  return `changed ${files.length} ${files.length === 1 ? 'file' : 'files'}: ${named}`;
}

/** The job list's short form: `changed 2 files`, `answered`. */
function outcomeBrief(outcome) {
  if (outcome.kind !== 'changed') return 'answered';
  const count = (outcome.files || []).length;
  return `changed ${count} ${count === 1 ? 'file' : 'files'}`;
}

// ---- one job ------------------------------------------------------------------------------------

function jobPage(id) {
  const html = `<div id="job" data-job-id="${esc(id)}"><div class="empty">Loading job ${esc(id)}…</div></div>`;
  const refresh = async () => {
    const page = await api(`/api/jobs/${encodeURIComponent(id)}`);
    const diff = await api(`/api/workbenches/${encodeURIComponent(page.job.workbench)}/diff`).catch(() => null);
    renderJob(page, diff);
  };
  mount(html, refresh, event => { if (event.job_id === id && event.kind.type !== 'assistant_delta') schedule(); else if (event.job_id === id) schedule(400); }, null)
    .catch(showError);
}

function renderJob({ job, trace, contracts }, diff) {
  const root = document.getElementById('job');
  if (!root) return;
  const open = new Set([...root.querySelectorAll('details[open]')].map(d => d.dataset.key));
  const terminal = ['succeeded', 'failed', 'cancelled'].includes(job.state);
  root.innerHTML = `
    <div class="toolbar">
      <div class="grow"><a href="#/jobs" class="small">← Jobs</a>
        <h1><span class="mono">${esc(job.job_id)}</span> <span id="job-state" data-state="${esc(job.state)}">${badge(job.state)}</span></h1>
        <div class="muted">${esc(job.message)}</div></div>
    </div>
    <div class="grid cols-2">
      <div>
        <div class="card"><h2>Timeline</h2>${timeline(trace, job)}</div>
        <div class="card"><h2>Tool I/O log <span class="muted small">${countCalls(trace)} calls · ${job.model_turns} model turns</span></h2>${ioLog(trace, open)}</div>
      </div>
      <div>
        <div class="card"><h2>Job</h2>
          <dl class="kv">
            <dt>workbench</dt><dd>${esc(job.workbench)}</dd>
            <dt>model</dt><dd class="mono">${esc(job.model)}</dd>
            <dt>phase</dt><dd>${esc(job.phase)}${trace.current && trace.current.tool ? ` · <span class="mono">${esc(trace.current.tool)}</span>` : ''}</dd>
            <dt>created</dt><dd>${esc(new Date(job.created_at_ms).toLocaleString())}</dd>
            <dt>duration</dt><dd>${esc(duration((terminal ? job.updated_at_ms : Date.now()) - job.created_at_ms))}</dd>
            <dt>tokens</dt><dd>${job.prompt_tokens} prompt · ${job.completion_tokens} completion</dd>
            <dt>cost</dt><dd id="job-cost">${esc(cost(job.cost_usd))}${job.cost_usd == null ? ' <span class="small muted">(the model profile has no prices)</span>' : ''}</dd>
            ${job.budget ? `<dt>budget</dt><dd id="job-budget">${esc(budgetText(job.budget))}</dd>` : ''}
            <dt>calls</dt><dd>${job.tool_calls} tool calls · ${job.model_turns} model turns</dd>
            ${job.error ? `<dt>error</dt><dd class="error"><b>${esc(job.error.code)}</b> ${esc(job.error.message)}</dd>` : ''}
            ${job.outcome ? `<dt>outcome</dt><dd id="job-outcome" data-kind="${esc(job.outcome.kind)}" data-files="${esc((job.outcome.files || []).join('\n'))}">${esc(outcomeText(job.outcome))}</dd>` : ''}
          </dl>
          ${approvalBox(job)}
          <div class="actions">
            <button id="cancel" class="danger" ${terminal ? 'disabled' : ''}>Cancel</button>
            <button id="resume" ${job.state === 'failed' || job.state === 'cancelled' ? '' : 'disabled'}>Resume</button>
          </div>
        </div>
        <div class="card" id="draft"><h2>Draft of ${esc(job.workbench)}</h2>${draftBox(diff)}</div>
        <div class="card"><h2>Plan <span class="muted small">${job.items.filter(i => i.status === 'done').length}/${job.items.length} done</span></h2>
          ${planItems(job, trace, contracts || [])}
          ${job.plan_md ? `<details data-key="plan-md" ${open.has('plan-md') ? 'open' : ''}><summary>plan.md</summary><div class="markdown">${markdown(job.plan_md)}</div></details>` : ''}
        </div>
        ${job.summary || trace.summary ? `<div class="card"><h2>Summary</h2><div class="markdown" id="summary">${markdown(job.summary || trace.summary)}</div></div>` : ''}
      </div>
    </div>`;
  wireJobActions(job);
}

function countCalls(trace) { return trace.log.filter(e => e.kind === 'call').length; }

function timeline(trace, job) {
  if (!trace.phases.length) return '<div class="muted">No phase has started yet.</div>';
  const start = trace.accepted_ms || trace.phases[0].started_ms;
  const end = trace.finished_ms || Date.now();
  const span = Math.max(end - start, 1);
  const place = (from, to) => `left:${(100 * (from - start) / span).toFixed(2)}%;width:${(100 * ((to || end) - from) / span).toFixed(2)}%`;
  const lanes = trace.phases.map(p => `<div class="lane" data-phase="${esc(p.phase)}"><span>${esc(p.phase)}</span>
      <div class="track"><div class="bar ${esc(p.phase)} ${p.ended_ms ? '' : 'open'}" style="${place(p.started_ms, p.ended_ms)}" title="${time(p.started_ms)} → ${time(p.ended_ms)}"></div></div>
      <span class="small muted">${esc(duration((p.ended_ms || end) - p.started_ms))}</span></div>`).join('');
  const items = trace.items.map(i => `<div class="lane"><span class="small">item ${i.index}</span>
      <div class="track"><div class="bar implement ${i.ended_ms ? '' : 'open'}" style="${place(i.started_ms, i.ended_ms)};${i.status === 'failed' ? 'background:#ffa8a8' : ''}" title="${esc(i.label)}"></div></div>
      <span class="small muted">${esc(duration((i.ended_ms || end) - i.started_ms))}</span></div>`).join('');
  return `<div class="timeline">${lanes}${items}</div><div class="small muted">${time(start)} → ${trace.finished_ms ? time(trace.finished_ms) : 'now'} · ${esc(job.phase)}</div>`;
}

function planItems(job, trace, contracts) {
  if (!job.items.length) return '<div class="muted">No plan yet.</div>';
  const traced = new Map(trace.items.map(i => [i.index, i]));
  const held = index => contracts.filter(c => c.item === index);
  return `<ol class="items" id="plan-items">${job.items.map(item => {
    const t = traced.get(item.index);
    const running = t && !t.ended_ms && job.state === 'running';
    const status = running ? 'running' : item.status;
    return `<li data-index="${item.index}" data-status="${esc(status)}"><span class="mono muted">${item.index}.</span>
      <span class="label"><b>${esc(item.label)}</b>${item.description ? ` — <span class="muted">${esc(item.description)}</span>` : ''}
      ${contractList(held(item.index))}
      ${item.failure ? `<div class="small error">${esc(item.failure)}</div>` : ''}</span>
      <span class="small muted">${item.attempts ? `${item.attempts} attempt${item.attempts > 1 ? 's' : ''}` : ''}${t && t.ended_ms ? ` · ${duration(t.ended_ms - t.started_ms)}` : ''}</span>
      ${badge(status)}</li>`;
  }).join('')}</ol>`;
}

/** What each target must hold: the plan's contract lines (rendered by the engine). */
function contractList(lines) {
  if (!lines.length) return '';
  return `<ul class="contracts mono small">${lines.map(c => `<li data-path="${esc(c.path)}">${esc(c.line)}</li>`).join('')}</ul>`;
}

/** The contract lines of the files `changed` (a Set of paths), by path. */
function contractsByPath(contracts, changed) {
  const byPath = new Map();
  for (const c of contracts) {
    if (changed.has(c.path)) byPath.set(c.path, [...(byPath.get(c.path) || []), c]);
  }
  return byPath;
}

function ioLog(trace, open) {
  if (!trace.log.length) return '<div class="muted">Nothing yet.</div>';
  return `<ul class="log" id="io-log">${trace.log.map((entry, n) => logEntry(entry, n, open)).join('')}</ul>`;
}

function logEntry(entry, n, open) {
  switch (entry.kind) {
    case 'phase': return `<li class="phase-mark">${esc(entry.phase)} <span class="small muted">${time(entry.at_ms)}</span></li>`;
    case 'item': return `<li class="item-mark">Item ${entry.index}/${entry.total}: ${esc(entry.label)}${entry.attempt > 1 ? ` <span class="badge">attempt ${entry.attempt}</span>` : ''}</li>`;
    case 'turn': return `<li class="turn"><div class="head"><b>model</b> <span class="small muted">turn ${entry.turn} · ${esc(duration(entry.elapsed_ms))} · ${entry.prompt_tokens}+${entry.completion_tokens} tokens</span>
        ${entry.tool_calls.length ? `<span class="small">→ ${entry.tool_calls.map(t => `<span class="mono">${esc(t)}</span>`).join(', ')}</span>` : ''}</div>
        ${entry.text ? `<div class="markdown small">${markdown(entry.text)}</div>` : ''}</li>`;
    case 'call': {
      const key = `call-${entry.call_id}`;
      const status = entry.status;
      return `<li class="io-call ${esc(status)}" data-tool="${esc(entry.tool)}" data-status="${esc(status)}" data-call-id="${esc(entry.call_id)}">
        <div class="head"><span class="tool">${esc(entry.tool)}</span>${entry.path ? `<span class="mono small">${esc(entry.path)}</span>` : ''}
          ${badge(status === 'ok' ? 'ok' : status)}
          <span class="small muted">${entry.elapsed_ms != null ? esc(duration(entry.elapsed_ms)) : '…'}${entry.worker ? ` · ${esc(entry.worker)}` : ''}${entry.pool ? ` · ${esc(entry.pool)} pool` : ''}</span></div>
        ${entry.error ? `<div class="small error"><b>${esc(entry.error.code)}</b> ${esc(entry.error.message)}</div>` : ''}
        <details data-key="${esc(key)}-args" ${open.has(`${key}-args`) ? 'open' : ''}><summary>arguments</summary><pre>${esc(entry.arguments ? prettyJson(entry.arguments) : '(not recorded in the events yet)')}</pre></details>
        ${entry.result != null ? `<details data-key="${esc(key)}-result" ${open.has(`${key}-result`) ? 'open' : ''}><summary>result · ${(entry.result_bytes ?? entry.result.length).toLocaleString()} bytes${(entry.result_bytes ?? 0) > 600 ? ' (large: click to expand)' : ''}</summary><pre>${esc(prettyJson(entry.result))}</pre></details>` : ''}
      </li>`;
    }
    case 'approval': return `<li class="io-call awaiting_approval"><div class="head"><b>approval</b> <span class="mono">${esc(entry.tool)}</span>
        ${entry.approved == null ? badge('awaiting_approval') : entry.approved ? badge('ok') : badge('failed')}</div>${expandable('arguments', entry.arguments)}</li>`;
    case 'warning': return `<li class="turn"><span class="badge awaiting_approval">loop</span> ${esc(entry.text)}</li>`;
    default: return '';
  }
}

function approvalBox(job) {
  const pending = job.pending_approval;
  if (!pending) return '';
  const why = pending.why ? ` <span class="small">(${esc(pending.action_class)}: ${esc(pending.why)})</span>` : '';
  return `<div class="approval" id="approval"><b>Waiting for approval:</b> <span class="mono">${esc(pending.tool)}</span>${why}
    <span class="small muted">since ${time(pending.requested_at_ms)}</span>
    <pre class="mono small">${esc(prettyJson(pending.arguments))}</pre>
    <div class="actions"><button id="approve" class="primary">Approve</button><button id="reject" class="danger">Reject</button></div></div>`;
}

/** The draft's files and what changed inside them; `held` (a Map path → contract lines), the
 * contracts the plan of the job that wrote the draft holds those files to. */
function draftBox(diff, held) {
  if (!diff) return '<div class="muted">The draft could not be read.</div>';
  if (!diff.has_draft) return '<div class="muted" id="draft-empty">No draft: the published files are current.</div>';
  const contents = new Map((diff.files || []).map(f => [f.path, f.content]));
  const files = [...diff.added.map(p => ['added', p]), ...diff.modified.map(p => ['modified', p]), ...diff.deleted.map(p => ['deleted', p])];
  return `<ul class="diff" id="draft-files">${files.map(([kind, path]) => `<li class="${kind}" data-path="${esc(path)}"> ${esc(path)}${heldTo(held && held.get(path))}${contentBox(contents.get(path))}</li>`).join('') || '<li class="muted">(no changes)</li>'}</ul>
    <div class="actions"><button id="publish" class="primary">Publish</button><button id="discard" class="danger">Discard</button></div>`;
}

/** The contract lines a draft file is held to, if any. */
function heldTo(lines) {
  if (!lines || !lines.length) return '';
  return `<div class="small held-to">held to ${lines.map(c => `<span class="mono contract">${esc(c.line)}</span>`).join(', ')}</div>`;
}

/** What changed inside one file (the review's content diff), with its bounded sample. */
function contentBox(content) {
  if (!content) return '';
  const more = truncated => truncated ? '<div class="muted small">… more changes than shown</div>' : '';
  const units = (name, changes, show) => `<div class="small">${name}: +${changes.added} −${changes.removed} ~${changes.changed}</div>
    <ul class="units mono small">${changes.sample.map(u => `<li class="${u.op}">${u.op} ${u.position}: ${esc(u.op === 'changed' ? `${show(u.old)} → ${show(u.new)}` : show(u.new ?? u.old))}</li>`).join('')}</ul>${more(changes.truncated)}`;
  switch (content.format) {
    case 'text':
      return `<div class="small">lines: +${content.lines_added} −${content.lines_removed}</div><pre class="mono small unified">${esc(content.unified)}</pre>${more(content.truncated)}`;
    case 'table':
      return units('rows', content.rows, row => (row || []).join(','));
    case 'workbook':
      return `${content.sheets_added.length ? `<div class="small">sheets added: ${esc(content.sheets_added.join(', '))}</div>` : ''}${content.sheets_removed.length ? `<div class="small">sheets removed: ${esc(content.sheets_removed.join(', '))}</div>` : ''}
        ${content.sheets.map(sheet => `<div class="small">sheet ${esc(sheet.sheet)}: ${sheet.cells_changed} cell(s)</div>
        <table class="cells mono small" data-sheet="${esc(sheet.sheet)}">${sheet.sample.map(c => `<tr data-cell="${esc(c.cell)}"><td>${esc(c.cell)}</td><td class="old">${esc(JSON.stringify(c.old))}</td><td class="new">${esc(JSON.stringify(c.new))}</td></tr>`).join('')}</table>${more(sheet.truncated)}`).join('')}
        ${(content.added_sheets || []).map(addedSheet).join('')}`;
    case 'document':
      return units('paragraphs', content.paragraphs, text => text ?? '');
    case 'slides':
      return units('slides', content.slides, texts => (texts || []).join(' / '));
    case 'binary':
      return `<div class="small muted">binary: ${content.old_size} → ${content.new_size} bytes</div>`;
    default:
      return `<div class="small muted">${esc(content.reason || 'not compared')}</div>`;
  }
}

/** Column letters of a 1-based column number (`27` → `AA`). */
function columnName(n) {
  let name = '';
  for (; n > 0; n = Math.floor((n - 1) / 26)) name = String.fromCharCode(65 + (n - 1) % 26) + name;
  return name;
}

/** What an added sheet holds: its used range as a grid (column letters, row numbers), cut at
 * the review's size (50 rows × 20 columns); a formula shows on its cell's hover, or in place of
 * an empty value. */
function addedSheet(sheet) {
  const title = `<div class="small">sheet ${esc(sheet.sheet)} added: ${sheet.range ? `${esc(sheet.range)} (${sheet.rows} rows × ${sheet.columns} columns)` : 'empty'}</div>`;
  if (!sheet.range) return title;
  const corner = sheet.range.split(':')[0];
  const first = Number(corner.replace(/[A-Z]/g, ''));
  const start = [...corner.replace(/[0-9]/g, '')].reduce((n, c) => n * 26 + c.charCodeAt(0) - 64, 0);
  const columns = (sheet.cells[0] || []).map((_, i) => columnName(start + i));
  const formulas = sheet.formulas || {};
  const cell = (value, ref) => {
    const shown = value === null ? (formulas[ref] || '') : typeof value === 'string' ? value : JSON.stringify(value);
    return `<td data-cell="${ref}"${formulas[ref] ? ` class="formula" title="${esc(formulas[ref])}"` : ''}>${esc(shown)}</td>`;
  };
  const rows = sheet.cells.map((row, i) => `<tr><th>${first + i}</th>${row.map((value, j) => cell(value, columns[j] + (first + i))).join('')}</tr>`);
  return `${title}<div class="added-sheet-grid"><table class="added-sheet mono small" data-sheet="${esc(sheet.sheet)}"><tr><th></th>${columns.map(c => `<th>${c}</th>`).join('')}</tr>${rows.join('')}</table></div>
    ${sheet.truncated ? '<div class="muted small more-cells">… more cells than shown (a review shows at most 50 rows × 20 columns)</div>' : ''}`;
}

/** Posts to `path` when `button` is clicked (after `confirmText`, if any), then refreshes. */
function bindAction(button, path, done, confirmText, body) {
  if (!button) return;
  button.addEventListener('click', async () => {
    if (confirmText && !confirm(confirmText)) return;
    button.disabled = true;
    try {
      await api(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body || {}) });
      toast(done);
    } catch (error) { toast(error.message, true); }
    schedule(0);
  });
}

/** Approve and Reject of the call `job` waits on (the buttons of `approvalBox`). */
function bindApproval(job) {
  const path = `/api/jobs/${encodeURIComponent(job.job_id)}`;
  const call = job.pending_approval ? job.pending_approval.call_id : undefined;
  bindAction(document.getElementById('approve'), `${path}/approve`, 'Approved', null, { call_id: call });
  bindAction(document.getElementById('reject'), `${path}/reject`, 'Rejected', null, { reason: 'rejected in the dashboard', call_id: call });
}

function wireJobActions(job) {
  const act = (id, path, done, confirmText, body) => bindAction(document.getElementById(id), path, done, confirmText, body);
  const jobPath = `/api/jobs/${encodeURIComponent(job.job_id)}`;
  const wbPath = `/api/workbenches/${encodeURIComponent(job.workbench)}`;
  act('cancel', `${jobPath}/cancel`, 'Cancel requested', 'Cancel this job at its next step?');
  act('resume', `${jobPath}/resume`, 'Resume requested');
  bindApproval(job);
  act('publish', `${wbPath}/publish`, `Published the draft of ${job.workbench}`);
  act('discard', `${wbPath}/discard`, `Discarded the draft of ${job.workbench}`, 'Throw the draft away?');
}

// ---- workers ------------------------------------------------------------------------------------

/** The autoscaler's bounds and last decision for a pool, or that the pool is fixed. */
function autoscaleLine(autoscale) {
  if (!autoscale) return `<div class="muted small" data-autoscale="fixed">fixed size (start or stop workers yourself, or <code>atelier pool</code>)</div>`;
  const last = autoscale.last_decision;
  return `<div class="small" data-autoscale="on">autoscaled ${autoscale.min}..${autoscale.max} · ${autoscale.workers} worker process(es) · ${autoscale.scale_ups} up, ${autoscale.scale_downs} down${last ? ` · last: <b>${esc(last.direction)}</b> ${last.from} → ${last.to} (${esc(last.reason)}) at ${new Date(last.at_ms).toLocaleTimeString()}` : ''}</div>`;
}

function workersPage() {
  const refresh = async () => {
    const pools = await api('/api/workers');
    const root = document.getElementById('pools');
    if (!root) return;
    root.innerHTML = pools.map(pool => `
      <div class="card pool" data-pool="${esc(pool.pool)}"><div class="toolbar"><h2 class="grow">${esc(pool.pool)} <span class="muted small mono">${esc(pool.service)}</span></h2></div>
        <div class="stats">
          <div class="stat"><div class="value" data-stat="instances">${pool.instances.length}</div><div class="label">instances</div></div>
          <div class="stat"><div class="value">${pool.requests}</div><div class="label">requests</div></div>
          <div class="stat"><div class="value ${pool.errors ? 'error' : ''}">${pool.errors}</div><div class="label">errors</div></div>
          <div class="stat"><div class="value">${pool.average_latency_ms.toFixed(1)} ms</div><div class="label">average latency</div></div>
          <div class="stat"><div class="value" data-stat="slots">${pool.in_flight}/${pool.slots}</div><div class="label">busy slots</div></div>
          <div class="stat"><div class="value" data-stat="pending">${pool.pending_calls}</div><div class="label">calls waiting</div></div>
          <div class="stat"><div class="value">${pool.dispatch_wait.count ? (1000 * pool.dispatch_wait.sum_secs / pool.dispatch_wait.count).toFixed(1) : '0.0'} ms</div><div class="label">avg dispatch wait</div></div>
        </div>
        ${autoscaleLine(pool.autoscale)}
        ${pool.instances.length ? `<table style="margin-top:12px"><thead><tr><th>Worker</th><th>Instance</th><th>Started</th><th class="num">Requests</th><th class="num">Errors</th><th class="num">Avg latency</th><th class="num">In flight</th><th class="num">Waiting</th><th>Last error</th></tr></thead><tbody>
          ${pool.instances.map(i => `<tr><td class="mono">${esc(i.worker)}</td><td class="mono small">${esc(i.id)}</td><td class="small">${esc(i.started ? new Date(i.started).toLocaleString() : '—')}</td>
            <td class="num">${i.requests}</td><td class="num">${i.errors}</td><td class="num">${i.average_latency_ms.toFixed(1)} ms</td><td class="num">${i.in_flight}/${i.max_concurrency}${i.draining ? ' <span class="muted small">draining</span>' : ''}</td><td class="num">${i.pending}</td><td class="small error">${esc(i.last_error || '')}</td></tr>`).join('')}
          </tbody></table>` : `<div class="empty">No worker serves this pool. Start one: <code>atelier worker --pool ${esc(pool.pool)} --nats URL</code></div>`}
      </div>`).join('');
  };
  mount(`<div class="toolbar"><h1 class="grow">Workers</h1><span class="muted small">from the NATS micro services API ($SRV.INFO, $SRV.STATS) · also <code>nats micro ls</code></span></div><div id="pools"></div>`,
    refresh, event => { if (event.kind.type === 'tool_complete') schedule(800); }, () => schedule(0)).catch(showError);
}

// ---- throughput ---------------------------------------------------------------------------------

function throughputPage() {
  const refresh = async () => {
    const data = await api('/api/throughput');
    const root = document.getElementById('charts');
    if (!root) return;
    const h = data.hour;
    root.innerHTML = `
      <div class="card"><div class="stats">
        <div class="stat"><div class="value" style="color:var(--ok)">${h.succeeded}</div><div class="label">succeeded (1 h)</div></div>
        <div class="stat"><div class="value" style="color:var(--bad)">${h.failed}</div><div class="label">failed (1 h)</div></div>
        <div class="stat"><div class="value">${h.cancelled}</div><div class="label">cancelled (1 h)</div></div>
        <div class="stat"><div class="value">${h.tool_calls}</div><div class="label">tool calls (1 h)</div></div>
        <div class="stat"><div class="value">${h.p50_ms ?? '—'} / ${h.p90_ms ?? '—'} / ${h.p99_ms ?? '—'}</div><div class="label">tool latency p50 / p90 / p99 (ms)</div></div>
      </div></div>
      <div class="card chart"><h2>Jobs finished per minute</h2>${barChart(data.minutes)}
        <div class="legend"><span><i style="background:var(--ok)"></i>succeeded</span><span><i style="background:var(--bad)"></i>failed</span><span><i style="background:var(--warn)"></i>cancelled</span></div></div>
      <div class="card chart"><h2>Tool-call latency per minute (ms)</h2>${lineChart(data.minutes)}
        <div class="legend"><span><i style="background:#4c6ef5"></i>p50</span><span><i style="background:#f59f00"></i>p90</span><span><i style="background:#e03131"></i>p99</span></div></div>`;
  };
  mount(`<div class="toolbar"><h1 class="grow">Throughput</h1><span class="muted small">last hour, from the EVENTS stream</span></div><div id="charts"></div>`,
    refresh, event => { if (['job_finished', 'tool_complete'].includes(event.kind.type)) schedule(500); }, () => schedule(0)).catch(showError);
}

const W = 960, H = 200, PAD = 30;

function axes(max, minutes, unit) {
  const label = k => { const d = new Date(minutes[k].start_ms); return `${d.getHours()}:${String(d.getMinutes()).padStart(2, '0')}`; };
  return `<line class="axis" x1="${PAD}" y1="${H - PAD}" x2="${W}" y2="${H - PAD}"/><line class="axis" x1="${PAD}" y1="10" x2="${PAD}" y2="${H - PAD}"/>
    <text x="2" y="16">${esc(max)}${unit}</text><text x="2" y="${H - PAD}">0</text>
    ${[0, 15, 30, 45, 59].map(k => `<text x="${PAD + (k + (k === 59 ? 1 : 0)) * (W - PAD) / 60}" y="${H - 12}" text-anchor="${k === 59 ? 'end' : 'start'}">${label(k)}</text>`).join('')}`;
}

function barChart(minutes) {
  const max = Math.max(1, ...minutes.map(m => m.succeeded + m.failed + m.cancelled));
  const bw = (W - PAD) / 60, scale = (H - PAD - 10) / max;
  const bars = minutes.map((m, k) => {
    let y = H - PAD;
    return [['succeeded', 'var(--ok)'], ['failed', 'var(--bad)'], ['cancelled', 'var(--warn)']].map(([key, color]) => {
      const height = m[key] * scale;
      y -= height;
      return height ? `<rect x="${PAD + k * bw + 1}" y="${y}" width="${bw - 2}" height="${height}" fill="${color}"><title>${m[key]} ${key}</title></rect>` : '';
    }).join('');
  }).join('');
  return `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" id="jobs-chart">${axes(max, minutes, '')}${bars}</svg>`;
}

function lineChart(minutes) {
  const max = Math.max(1, ...minutes.map(m => m.p99_ms || 0));
  const x = k => PAD + (k + 0.5) * (W - PAD) / 60, y = v => H - PAD - v * (H - PAD - 10) / max;
  const line = (key, color) => {
    const points = minutes.map((m, k) => m[key] == null ? null : `${x(k).toFixed(1)},${y(m[key]).toFixed(1)}`).filter(Boolean);
    const dots = minutes.map((m, k) => m[key] == null ? '' : `<circle cx="${x(k)}" cy="${y(m[key])}" r="2.5" fill="${color}"><title>${key}: ${m[key]} ms</title></circle>`).join('');
    return (points.length > 1 ? `<polyline fill="none" stroke="${color}" stroke-width="2" points="${points.join(' ')}"/>` : '') + dots;
  };
  return `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" id="latency-chart">${axes(max, minutes, ' ms')}${line('p50_ms', '#4c6ef5')}${line('p90_ms', '#f59f00')}${line('p99_ms', '#e03131')}</svg>`;
}

function showError(error) {
  view.insertAdjacentHTML('afterbegin', `<div class="card error">${esc(error.message)}</div>`);
}

// ---- start --------------------------------------------------------------------------------------

api('/api/status').then(status => { document.getElementById('logout').hidden = !status.auth; }).catch(() => {});
window.addEventListener('hashchange', navigate);
connectLive();
navigate();
