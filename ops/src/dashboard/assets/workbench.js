// The workbench page (#/workbenches/NAME): its files (files.js), the conversation with "Rewind to here" on every
// message, "Regenerate from here" on every user message (saying first what it discards) and
// Regenerate; the composer, which sends a message (with a model among the allowed ones) and
// follows its run live (phases, tool calls, the streamed answer, approvals inline); the draft's
// content review with Publish and Discard; the checkpoints with Restore. Loaded before app.js,
// whose router and helpers it uses.

// The run the composer follows: the job last sent from this page, or the one running.
const composer = { workbench: null, job: null, answer: '', answerOf: null };

function workbenchPage(name) {
  const base = `/api/workbenches/${encodeURIComponent(name)}`;
  if (composer.workbench !== name) Object.assign(composer, { workbench: name, job: null, answer: '' });
  const html = `<div id="workbench" data-workbench="${esc(name)}">
    <div id="workbench-head"><div class="empty">Loading ${esc(name)}…</div></div>
    ${filesCard()}
    <div class="grid cols-2">
      <div><div id="workbench-conversation"></div><div id="run-box"></div>${composerForm()}</div>
      <div id="workbench-state"></div>
    </div></div>`;
  const refresh = async () => {
    const [history, checkpoints, diff] = await Promise.all([
      api(`${base}/history`), api(`${base}/checkpoints`), api(`${base}/diff`).catch(() => null)]);
    const held = await draftContracts(history.draft);
    renderWorkbench(base, history, checkpoints, diff, held);
    await Promise.all([refreshRun(history), refreshFiles(name, history)]);
  };
  const onEvent = event => {
    if (event.kind.type !== 'assistant_delta') { schedule(300); return; }
    if (event.job_id === composer.job) { streamed(event.job_id, event.kind.text); showAnswer(); }
  };
  mount(html, refresh, onEvent, () => schedule(0)).catch(showError);
  wireFiles(name);
  wireComposer(base);
  loadModels();
}

// ---- the composer ------------------------------------------------------------------------------

function composerForm() {
  return `<form class="card" id="composer"><h2>New message</h2>
    <textarea id="composer-text" rows="3" placeholder="What should the agent do? (Ctrl+Enter sends)" aria-label="message"></textarea>
    <div class="actions">
      <label class="small">model <select id="composer-model" aria-label="model"><option value="">the workbench's</option></select></label>
      <label class="small" id="composer-continue-label" hidden><input type="checkbox" id="composer-continue"> keep working on the draft</label>
      <label class="small"><input type="checkbox" id="composer-auto"> run destructive calls without asking</label>
      <span class="grow"></span>
      <button class="primary" id="composer-send" type="submit">Send</button>
    </div>
    <div class="small error" id="composer-error" hidden></div></form>`;
}

/** The models a message may name: the operator's profiles (the default stays the first option). */
async function loadModels() {
  const choices = await api('/api/models').catch(() => null);
  const select = document.getElementById('composer-model');
  if (!choices || !select) return;
  select.dataset.default = choices.default_model || '';
  select.insertAdjacentHTML('beforeend', choices.profiles.map(p =>
    `<option value="${esc(p.name)}">${esc(p.name)} · ${esc(p.kind)} ${esc(p.model)}</option>`).join(''));
}

function wireComposer(base) {
  const form = document.getElementById('composer');
  const text = document.getElementById('composer-text');
  text.addEventListener('keydown', event => { if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) form.requestSubmit(); });
  form.addEventListener('submit', async event => {
    event.preventDefault();
    const message = text.value.trim();
    if (!message) { composerError('Write a message first.'); return; }
    const send = document.getElementById('composer-send');
    send.disabled = true;
    const body = {
      message,
      model: document.getElementById('composer-model').value || null,
      continue_draft: document.getElementById('composer-continue').checked,
      auto_approve: document.getElementById('composer-auto').checked,
    };
    try {
      const sent = await api(`${base}/messages`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      Object.assign(composer, { job: sent.ok.job_id, answer: '' });
      text.value = '';
      composerError('');
      toast(`Sent: job ${shortId(sent.ok.job_id)}`);
    } catch (error) {
      composerError(error.message, error.code);
      send.disabled = false;
    }
    schedule(0);
  });
}

/** Shows (or with '' hides) why the message was not sent; for the page's own cases, what to do here. */
function composerError(text, code) {
  const box = document.getElementById('composer-error');
  if (!box) return;
  const here = {
    DRAFT_EXISTS: 'DRAFT_EXISTS: the workbench has a draft. Publish or discard it, or tick "keep working on the draft".',
    WORKBENCH_BUSY: 'WORKBENCH_BUSY: a job is answering on this workbench. Wait for it, or cancel it.',
  };
  box.textContent = here[code] || text;
  box.dataset.code = code || '';
  box.hidden = !text;
}

/** The composer's state from the conversation: busy while a job runs, the draft option when one exists. */
function updateComposer(history) {
  const send = document.getElementById('composer-send');
  if (!send) return;
  send.disabled = Boolean(history.running_job);
  document.getElementById('composer-continue-label').hidden = !history.has_draft;
  const select = document.getElementById('composer-model');
  const current = history.model || select.dataset.default;
  select.options[0].textContent = current ? `the workbench's (${current})` : "the workbench's";
}

// ---- the live run ------------------------------------------------------------------------------

async function refreshRun(history) {
  if (history.running_job) composer.job = history.running_job;
  const box = document.getElementById('run-box');
  if (!box) return;
  if (!composer.job) { box.innerHTML = ''; return; }
  const page = await api(`/api/jobs/${encodeURIComponent(composer.job)}`).catch(() => null);
  if (!page) { box.innerHTML = `<div class="card small muted" id="run">Job ${esc(shortId(composer.job))} is queued…</div>`; return; }
  const { job, trace } = page;
  // The record can lag the deltas already shown (the trace folds events behind the live feed):
  // what was streamed stays while the record is a start of it.
  const recorded = job.summary || trace.summary || '';
  const shown = composer.answerOf === job.job_id ? composer.answer : '';
  composer.answer = shown.startsWith(recorded) ? shown : recorded;
  composer.answerOf = job.job_id;
  box.innerHTML = runCard(job, trace);
  showAnswer();
  bindApproval(job);
  const path = `/api/jobs/${encodeURIComponent(job.job_id)}`;
  bindAction(document.getElementById('run-cancel'), `${path}/cancel`, 'Cancel requested', 'Cancel this job at its next step?');
}

function runCard(job, trace) {
  const terminal = ['succeeded', 'failed', 'cancelled'].includes(job.state);
  const phases = trace.phases.map(p => `<li data-phase="${esc(p.phase)}" data-done="${p.ended_ms ? 'yes' : 'no'}">${esc(p.phase)}${p.ended_ms ? ' ✓' : '…'}</li>`).join('');
  const calls = trace.log.filter(entry => entry.kind === 'call').map(call =>
    `<li data-tool="${esc(call.tool)}" data-status="${esc(call.status)}"><span class="mono">${esc(call.tool)}</span>${call.path ? ` <span class="mono small">${esc(call.path)}</span>` : ''}
      ${badge(call.status)} <span class="small muted">${call.elapsed_ms != null ? esc(duration(call.elapsed_ms)) : '…'}</span>
      ${call.error ? `<span class="small error">${esc(call.error.code)}</span>` : ''}</li>`).join('');
  const now = trace.current && trace.current.tool ? ` · <span class="mono">${esc(trace.current.tool)}</span>` : '';
  return `<div class="card" id="run" data-job-id="${esc(job.job_id)}" data-state="${esc(job.state)}">
    <h2>Run <a class="mono small" href="#/jobs/${encodeURIComponent(job.job_id)}">${esc(shortId(job.job_id))}</a> ${badge(job.state)}
      <span class="small muted">${esc(job.phase)}${now}</span></h2>
    <ol class="phases" id="run-phases">${phases || '<li class="muted">queued</li>'}</ol>
    ${calls ? `<ul class="run-tools" id="run-tools">${calls}</ul>` : ''}
    ${approvalBox(job)}
    <div class="markdown" id="run-answer"></div>
    ${job.error ? `<div class="error" id="run-error"><b>${esc(job.error.code)}</b> ${esc(job.error.message)}</div>` : ''}
    ${job.outcome ? `<div class="small" id="run-outcome" data-kind="${esc(job.outcome.kind)}">${esc(outcomeText(job.outcome))}</div>` : ''}
    ${terminal ? '' : '<div class="actions"><button id="run-cancel" class="danger">Cancel</button></div>'}</div>`;
}

/** Appends a streamed piece of job `jobId`'s answer (a new job's answer starts empty). */
function streamed(jobId, text) {
  if (composer.answerOf !== jobId) { composer.answer = ''; composer.answerOf = jobId; }
  composer.answer += text;
}

/** The answer as streamed so far. */
function showAnswer() {
  const box = document.getElementById('run-answer');
  if (box) box.innerHTML = markdown(composer.answer);
}

// ---- the conversation, draft and checkpoints ---------------------------------------------------

// When and by what the draft was started; an old one is pointed out.
function draftOrigin(origin) {
  if (!origin) return '';
  const hours = (Date.now() - origin.started_at_ms) / 3600000;
  const minutes = Math.round(hours * 60);
  const age = minutes < 1 ? 'less than a minute' : hours < 1 ? `${minutes} min` : hours < 48 ? `${Math.round(hours)} h` : `${Math.round(hours / 24)} d`;
  const by = origin.batch_id ? ` by batch <span class="mono">${esc(shortId(origin.batch_id))}</span>`
    : origin.message_id ? ` by message ${esc(origin.message_id)}` : '';
  const job = origin.job_id ? ` (job <a class="mono" href="#/jobs/${encodeURIComponent(origin.job_id)}">${esc(shortId(origin.job_id))}</a>)` : '';
  const stale = origin.stale ? ' <strong class="stale">This draft is old: review it, then publish or discard it.</strong>' : '';
  return `<div class="small muted" id="draft-origin">Started ${age} ago${by}${job}.${stale}</div>`;
}

// The contracts of the job that started the draft, for the files that job changed, by path
// (null when no job started it or its view cannot be read). A finished job's are kept: they no
// longer change, so the page asks for a job's view again only while it runs.
const originContracts = new Map();

async function draftContracts(origin) {
  const id = origin && origin.job_id;
  if (!id) return null;
  if (originContracts.has(id)) return originContracts.get(id);
  const page = await api(`/api/jobs/${encodeURIComponent(id)}`).catch(() => null);
  if (!page) return null;
  const changed = new Set(page.job.items.flatMap(item => item.changed || []));
  const held = contractsByPath(page.contracts || [], changed);
  if (['succeeded', 'failed', 'cancelled'].includes(page.job.state)) originContracts.set(id, held);
  return held;
}

function renderWorkbench(base, history, checkpoints, diff, held) {
  const head = document.getElementById('workbench-head');
  if (!head) return;
  const busy = history.running_job;
  head.innerHTML = `<div class="toolbar"><h1 class="grow">${esc(history.workbench)}</h1>
      <span class="small muted">model <span class="mono">${esc(history.model || 'coordinator default')}</span></span>
      <button id="regenerate" ${busy ? 'disabled' : ''}>Regenerate</button></div>`;
  document.getElementById('workbench-conversation').innerHTML = `<div class="card"><h2>Conversation</h2><ol id="conversation" class="conversation">${history.messages.map(m => messageItem(m, busy)).join('')
      || '<li class="muted">No messages yet: write one below.</li>'}</ol></div>`;
  document.getElementById('workbench-state').innerHTML = `
    <div class="card" id="draft"><h2>Draft</h2>${draftOrigin(history.draft)}${draftBox(diff, held)}</div>
    <div class="card"><h2>Checkpoints</h2><ul id="checkpoints">${checkpoints.map(c => checkpointItem(c, history.has_draft)).join('')
      || '<li class="muted">No checkpoints yet (publishing makes one).</li>'}</ul></div>`;
  updateComposer(history);
  const root = document.getElementById('workbench');
  const rewindText = 'Rewinding will discard all messages after this point and revert draft changes made after this point.';
  root.querySelectorAll('button.rewind').forEach(button =>
    bindAction(button, `${base}/rewind/${encodeURIComponent(button.dataset.id)}`, `Rewound to ${button.dataset.id}`, rewindText));
  root.querySelectorAll('button.restore').forEach(button =>
    bindAction(button, `${base}/restore/${encodeURIComponent(button.dataset.id)}`, `Restored checkpoint ${button.dataset.id}`,
      'Make this checkpoint the published state? The current one is checkpointed first.'));
  const later = id => history.messages.map(m => m.id).filter(other => Number(other.slice(1)) > Number(id.slice(1)));
  root.querySelectorAll('button.regenerate-from').forEach(button => {
    const id = button.dataset.id;
    const gone = later(id);
    const text = gone.length
      ? `Regenerating the answer to ${id} will discard ${gone.join(', ')} and put the draft back as it was at ${id}.`
      : `Regenerate the answer to ${id}?`;
    bindAction(button, `${base}/regenerate/${encodeURIComponent(id)}`, `Regenerating the answer to ${id}`, text);
  });
  bindAction(document.getElementById('regenerate'), `${base}/regenerate`, 'Regenerating the answer');
  bindAction(document.getElementById('publish'), `${base}/publish`, 'Published the draft');
  bindAction(document.getElementById('discard'), `${base}/discard`, 'Discarded the draft', 'Throw the draft away?');
}

function messageItem(message, busy) {
  return `<li class="msg ${esc(message.role)}" data-id="${esc(message.id)}" data-role="${esc(message.role)}">
    <span class="mono small muted">${esc(message.id)}</span> <b>${esc(message.role)}</b>
    <span class="small muted">${time(message.at_ms)}</span>
    <button class="rewind link small" data-id="${esc(message.id)}" ${busy ? 'disabled' : ''}>Rewind to here</button>
    ${message.role === 'user' ? `<button class="regenerate-from link small" data-id="${esc(message.id)}" ${busy ? 'disabled' : ''}>Regenerate from here</button>` : ''}
    <div class="text">${message.role === 'assistant' ? markdown(message.text) : esc(message.text)}</div></li>`;
}

function checkpointItem(checkpoint, hasDraft) {
  const blocked = hasDraft ? 'disabled title="publish or discard the draft first"' : '';
  return `<li data-id="${esc(checkpoint.id)}" data-reason="${esc(checkpoint.reason)}">
    <b>#${esc(checkpoint.id)}</b> ${esc(checkpoint.reason.replace('_', ' '))} · ${time(checkpoint.at_ms)} ·
    ${checkpoint.files.length} file(s)${checkpoint.note ? ` · ${esc(checkpoint.note)}` : ''}
    <button class="restore small" data-id="${esc(checkpoint.id)}" ${blocked}>Restore</button></li>`;
}
