// The workbench page (#/workbenches/NAME): the conversation with "Rewind to here" on every
// message, "Regenerate from here" on every user message (saying first what it discards) and
// Regenerate, the checkpoints with Restore, and the draft's content review with
// Publish and Discard. Loaded before app.js, whose router and helpers it uses.

function workbenchPage(name) {
  const base = `/api/workbenches/${encodeURIComponent(name)}`;
  const html = `<div id="workbench" data-workbench="${esc(name)}"><div class="empty">Loading ${esc(name)}…</div></div>`;
  const refresh = async () => {
    const [history, checkpoints, diff] = await Promise.all([
      api(`${base}/history`), api(`${base}/checkpoints`), api(`${base}/diff`).catch(() => null)]);
    renderWorkbench(base, history, checkpoints, diff);
  };
  mount(html, refresh, event => { if (event.kind.type !== 'assistant_delta') schedule(300); }, () => schedule(0))
    .catch(showError);
}

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

function renderWorkbench(base, history, checkpoints, diff) {
  const root = document.getElementById('workbench');
  if (!root) return;
  const busy = history.running_job;
  root.innerHTML = `
    <div class="toolbar"><h1 class="grow">${esc(history.workbench)}</h1>
      <span class="small muted">model <span class="mono">${esc(history.model || 'coordinator default')}</span></span>
      <button id="regenerate" ${busy ? 'disabled' : ''}>Regenerate</button></div>
    ${busy ? `<div class="card small" id="running">Job <a class="mono" href="#/jobs/${encodeURIComponent(busy)}">${esc(shortId(busy))}</a> is answering…</div>` : ''}
    <div class="card"><h2>Conversation</h2><ol id="conversation" class="conversation">${history.messages.map(m => messageItem(m, busy)).join('')
      || '<li class="muted">No messages yet: <code>atelier submit</code> or <code>atelier chat</code>.</li>'}</ol></div>
    <div class="card"><h2>Checkpoints</h2><ul id="checkpoints">${checkpoints.map(c => checkpointItem(c, history.has_draft)).join('')
      || '<li class="muted">No checkpoints yet (publishing makes one).</li>'}</ul></div>
    <div class="card" id="draft"><h2>Draft</h2>${draftOrigin(history.draft)}${draftBox(diff)}</div>`;
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
