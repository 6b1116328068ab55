// Fullerene's web UI: a single page of vanilla JavaScript over the master's HTTP API, embedded in
// the binary (master/src/server/http/ui.rs explains how it is served and how a browser logs in).
// Pages are hash routes (#/overview, #/agents, ...). Everything shown is built with DOM calls and
// textContent, never innerHTML, so no task name or attribute can inject markup; the content policy
// forbids inline script besides.
//
// Endpoints that a master may not serve yet (/events, /jobs, task logs) are tried once: a 404 makes
// their views say "not available on this master" and the page polls instead of streaming.
'use strict';

const POLL_MS = 2000; // without the event stream
const LIVE_POLL_MS = 5000; // with it: events trigger reads, this catches anything missed
const SERIES_POINTS = 300; // fairness samples kept (10 minutes at 2 s)
const EVENTS_KEPT = 500;
const LOG_CHUNK = 64 * 1024;
const STREAM_KINDS = [
  'leader_elected', 'agent_registered', 'agent_reregistered', 'agent_reachable',
  'agent_unreachable', 'agent_lost', 'agent_draining', 'agent_drained', 'agent_undrained',
  'framework_subscribed', 'framework_reconnected', 'framework_disconnected',
  'framework_torn_down', 'task_state_changed', 'master_added', 'master_removed',
  'group_weight_changed', 'events_omitted',
];

const ui = {
  session: null, // {who, scope, cookie}
  state: null, // /state
  cluster: null, // /cluster
  jobs: null, // /jobs, when served
  available: { events: null, jobs: null, logs: null }, // null: not tried yet
  events: [], // newest last
  live: false,
  series: [], // [{t, groups: {name: {share, held, deficit}}}]
  logs: {}, // key -> {stream, text, offset, size, follow, missing, error}
  error: null,
  armed: null, // id of a dangerous button waiting for its confirming click
};

// ---- DOM helpers ----------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'text') el.textContent = value;
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'width%') el.style.width = value + '%';
    else if (key === 'color') el.style.background = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

const $ = (id) => document.getElementById(id);

function stateBadge(state) {
  const text = String(state);
  return h('span', { class: 'state state-' + text.replace(/ /g, '-'), text });
}

function fmt(n, digits = 1) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  if (Math.abs(n) >= 100 || Number.isInteger(n)) return String(Math.round(n));
  return n.toFixed(digits);
}

function ago(ms) {
  if (!ms) return '–';
  const secs = Math.max(0, (Date.now() - ms) / 1000);
  if (secs < 90) return secs.toFixed(0) + ' s ago';
  if (secs < 5400) return (secs / 60).toFixed(0) + ' min ago';
  return (secs / 3600).toFixed(1) + ' h ago';
}

function duration(ms) {
  if (ms === null || ms === undefined) return '–';
  const secs = ms / 1000;
  if (secs < 120) return secs.toFixed(1) + ' s';
  return (secs / 60).toFixed(1) + ' min';
}

function bar(used, total, label) {
  const pct = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  return h('div', { class: 'bar', role: 'img', 'aria-label': `${label}: ${fmt(used)} of ${fmt(total)}` },
    h('span', { 'width%': pct.toFixed(1) }),
    h('em', { text: `${fmt(used)} / ${fmt(total)}` }));
}

// A table's head; the `narrow` columns hide on a phone (their cells carry `hide-narrow` too).
function headRow(names, narrow = []) {
  return h('thead', {}, h('tr', {}, names.map((t) => h('th', { text: t, class: narrow.includes(t) ? 'hide-narrow' : null }))));
}

function unavailable(what) {
  return h('p', { class: 'unavailable', text: `${what}: not available on this master.` });
}

function counts(map) {
  const entries = Object.entries(map).filter(([, n]) => n > 0);
  if (!entries.length) return h('span', { class: 'muted', text: 'none' });
  return h('span', { class: 'counts' }, entries.map(([k, n]) => h('span', {}, stateBadge(k), ' ', n)));
}

function countBy(items, key) {
  const out = {};
  for (const item of items) out[key(item)] = (out[key(item)] || 0) + 1;
  return out;
}

function enc(part) { return encodeURIComponent(part); }

// ---- the API --------------------------------------------------------------------------------

class NeedLogin extends Error {}

async function api(path, options = {}) {
  const response = await fetch(path, {
    credentials: 'same-origin',
    // A follower answers 307 to the leader's origin, which a script may not read: the page
    // reloads instead, and the reload lands on the leader's page.
    redirect: 'manual',
    ...options,
    headers: { Accept: 'application/json', ...(options.headers || {}) },
  });
  if (response.type === 'opaqueredirect') {
    window.location.reload();
    throw new Error('this master no longer leads; reloading from the leader');
  }
  if (response.status === 401) throw new NeedLogin();
  return response;
}

async function readJson(path) {
  const response = await api(path);
  if (response.status === 404) return { missing: true };
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `${path}: HTTP ${response.status}`);
  return body;
}

async function write(method, path, body) {
  const headers = { 'X-Fullerene-CSRF': '1' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await api(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
  return answer;
}

function canWrite() { return ui.session && ui.session.scope === 'write'; }

// A button that acts at once, reporting failures in the status line.
function actionButton(id, label, act, danger = false) {
  const armed = ui.armed === id;
  return h('button', {
    type: 'button', id, class: danger ? 'danger' + (armed ? ' armed' : '') : null,
    onclick: async (event) => {
      // Irreversible actions ask for a second click within 5 s (no modal dialog: keyboard and
      // WebDriver friendly).
      if (danger && ui.armed !== id) {
        ui.armed = id;
        setTimeout(() => { if (ui.armed === id) { ui.armed = null; render(); } }, 5000);
        render();
        return;
      }
      ui.armed = null;
      event.target.disabled = true;
      try {
        await act();
        setStatus(`${label}: done`);
      } catch (error) {
        setStatus(`${label}: ${error.message}`, true);
      }
      await refresh();
    },
  }, armed ? `Confirm: ${label.toLowerCase()}` : label);
}

// ---- reading the cluster --------------------------------------------------------------------

async function refresh() {
  try {
    const [state, cluster] = await Promise.all([readJson('/state'), readJson('/cluster')]);
    ui.state = state;
    ui.cluster = cluster;
    if (ui.available.jobs !== false) {
      const jobs = await readJson('/jobs');
      ui.available.jobs = !jobs.missing;
      ui.jobs = jobs.missing ? null : jobs;
    }
    sampleGroups();
    ui.error = null;
  } catch (error) {
    if (error instanceof NeedLogin) { showLogin(); return; }
    ui.error = error.message;
  }
  render();
}

function sampleGroups() {
  // Events trigger reads often; the chart keeps one sample per poll interval at most.
  const last = ui.series[ui.series.length - 1];
  if (last && Date.now() - last.t < POLL_MS - 100) return;
  const groups = {};
  for (const g of (ui.state && ui.state.groups) || []) {
    groups[g.name] = { share: g.share, held: g.held, deficit: g.deficit };
  }
  ui.series.push({ t: Date.now(), groups });
  if (ui.series.length > SERIES_POINTS) ui.series.shift();
}

async function startEvents() {
  try {
    const first = await readJson('/events');
    ui.available.events = !first.missing;
    if (first.missing) return;
    const list = Array.isArray(first) ? first : (first.events || []);
    ui.events = list.slice(-EVENTS_KEPT);
  } catch (error) {
    if (error instanceof NeedLogin) return;
    ui.available.events = false;
    return;
  }
  if (!window.EventSource) return;
  const source = new EventSource('/events');
  let pending = null;
  const onEvent = (message) => {
    let event;
    try { event = JSON.parse(message.data); } catch { return; }
    if (ui.events.length && ui.events[ui.events.length - 1].seq >= event.seq) return;
    ui.events.push(event);
    if (ui.events.length > EVENTS_KEPT) ui.events.shift();
    if (!pending) pending = setTimeout(() => { pending = null; refresh(); }, 250);
  };
  source.onmessage = onEvent;
  for (const kind of STREAM_KINDS) source.addEventListener(kind, onEvent);
  source.onopen = () => { ui.live = true; setStatus(); };
  source.onerror = () => { ui.live = false; setStatus(); };
}

// ---- pages ----------------------------------------------------------------------------------

function allTasks() {
  const st = ui.state || {};
  const running = (st.tasks || []).map((t) => ({
    framework: t.framework_id, id: t.spec.id, name: t.spec.name, agent: t.agent_id, state: t.state,
    origin: t.spec.origin, resources: t.spec.resources, executor: t.spec.executor, finished: false,
  }));
  const finished = (st.finished_tasks || []).map((t) => ({
    framework: t.framework_id, id: t.task_id, name: t.name, agent: t.agent_id, state: t.state,
    origin: t.origin, resources: t.resources, reason: t.reason, launched: t.launched_at_ms,
    ended: t.ended_at_ms, finished: true,
  }));
  return finished.concat(running);
}

function pageOverview() {
  const st = ui.state;
  const cl = ui.cluster && ui.cluster.cluster;
  const out = [h('h1', { text: 'Overview' })];
  if (cl) {
    const leader = cl.leader ? cl.leader.id : null;
    out.push(h('h2', { text: `Masters (term ${cl.term}, commit ${cl.commit})` }),
      h('div', { class: 'scroll' }, h('table', { id: 'masters' },
        headRow(['Master', 'Address', 'Role', 'Matched', 'Lag']),
        h('tbody', {}, cl.members.map((m) => h('tr', {},
          h('td', { text: m.id }), h('td', { text: m.addr }),
          h('td', {}, m.id === leader ? stateBadge('leader') : (m.voter ? 'follower' : 'learner')),
          h('td', { class: 'num', text: m.matched }), h('td', { class: 'num', text: m.lag })))))));
  }
  if (!st) return out;
  const agents = st.agents || [];
  const capacity = {};
  for (const a of agents.filter((a) => a.state === 'Active')) {
    for (const [r, v] of Object.entries(a.total)) {
      capacity[r] = capacity[r] || { used: 0, total: 0 };
      capacity[r].total += v;
      capacity[r].used += a.used[r] || 0;
    }
  }
  out.push(h('h2', { text: 'Capacity of active agents' }),
    h('div', { class: 'resources', id: 'capacity' }, Object.entries(capacity).map(([r, c]) =>
      [h('span', { text: r }), bar(c.used, c.total, r)])));
  const tasks = allTasks();
  const jobs = ui.jobs ? ui.jobs.jobs : null;
  out.push(h('div', { class: 'cards', id: 'counts' },
    h('div', { class: 'card' }, h('h3', {}, h('a', { href: '#/agents', text: 'Agents' })),
      h('div', { class: 'big', id: 'agent-count', text: agents.length }),
      counts(countBy(agents, agentState))),
    h('div', { class: 'card' }, h('h3', {}, h('a', { href: '#/frameworks', text: 'Frameworks' })),
      h('div', { class: 'big', text: (st.frameworks || []).length }),
      counts(countBy(st.frameworks || [], frameworkState))),
    h('div', { class: 'card' }, h('h3', {}, h('a', { href: '#/frameworks', text: 'Jobs' })),
      jobs ? [h('div', { class: 'big', text: jobs.length }), counts(countBy(jobs, (j) => j.outcome || 'running'))]
        : [h('div', { class: 'big', text: new Set(tasks.filter((t) => t.origin).map((t) => t.framework + '/' + t.origin.job)).size }),
          h('span', { class: 'muted', text: 'with tasks in view (/jobs not available)' })]),
    h('div', { class: 'card' }, h('h3', {}, h('a', { href: '#/tasks', text: 'Tasks' })),
      h('div', { class: 'big', text: tasks.length }), counts(countBy(tasks, (t) => t.state)))));
  out.push(h('h2', {}, h('a', { href: '#/events', text: 'Recent events' })), eventList(10));
  out.push(h('h2', { text: 'Agents' }), agentTable(false));
  return out;
}

function agentState(a) {
  if (a.drain) return a.drain.drained ? 'drained' : 'draining';
  return a.state;
}

function frameworkState(f) {
  if (f.torn_down) return 'torn down';
  return f.connected ? 'connected' : 'disconnected';
}

function isolationText(iso) {
  if (!iso) return 'unknown';
  const part = (name, e) => (e === 'enforced' ? `${name} enforced` : `${name} not enforced (${(e.not_enforced || {}).reason || '?'})`);
  return `${part('users', iso.users)}; ${part('limits', iso.limits)}`;
}

function agentTable(withControls) {
  const agents = (ui.state && ui.state.agents) || [];
  if (!agents.length) return h('p', { class: 'muted', text: 'No agent has registered.' });
  const heads = ['Agent', 'State', 'Resources (used / total)', 'Attributes', 'Last heartbeat', 'Isolation'];
  if (withControls && canWrite()) heads.push('Maintenance');
  return h('div', { class: 'scroll' }, h('table', { class: 'agents' },
    headRow(heads, ['Attributes', 'Isolation']),
    h('tbody', {}, agents.map((a) => h('tr', { 'data-agent': a.id },
      h('td', {}, h('strong', { text: a.id }), h('br'), h('span', { class: 'muted', text: a.hostname })),
      h('td', {}, stateBadge(agentState(a)),
        a.drain && a.drain.deadline_ms ? h('div', { class: 'muted', text: `deadline ${new Date(a.drain.deadline_ms).toLocaleTimeString()}` }) : null),
      h('td', {}, h('div', { class: 'resources' }, Object.entries(a.total).map(([r, v]) =>
        [h('span', { text: r }), bar(a.used[r] || 0, v, `${a.id} ${r}`)]))),
      h('td', { class: 'hide-narrow' }, Object.entries(a.attributes || {}).map(([k, v]) => h('div', { text: `${k}=${v}` }))),
      h('td', { text: ago(a.last_heartbeat_ms) }),
      h('td', { class: 'hide-narrow', text: isolationText(a.isolation) }),
      withControls && canWrite() ? h('td', {}, a.drain
        ? actionButton(`undrain-${a.id}`, 'Undrain', () => write('DELETE', `/agents/${enc(a.id)}/drain`))
        : actionButton(`drain-${a.id}`, 'Drain', () => write('POST', `/agents/${enc(a.id)}/drain`, { deadline_after_ms: null }))) : null)))));
}

function pageAgents() {
  return [h('h1', { text: 'Agents' }),
    h('p', { class: 'muted', text: 'A drained agent gets no new tasks; its running tasks finish (or are killed at the drain deadline).' }),
    agentTable(true)];
}

// Jobs as /jobs describes them, else as the tasks in view suggest (stages without edges).
function jobList() {
  if (ui.jobs) return ui.jobs.jobs;
  const jobs = {};
  for (const t of allTasks()) {
    if (!t.origin) continue;
    const key = t.framework + '/' + t.origin.job;
    const job = jobs[key] || (jobs[key] = { framework_id: t.framework, job: t.origin.job, stages: {}, derived: true });
    const stage = job.stages[t.origin.stage] || (job.stages[t.origin.stage] = { stage: t.origin.stage, name: `stage-${t.origin.stage}`, parents: [], tasks: {} });
    stage.tasks[t.state] = (stage.tasks[t.state] || 0) + 1;
  }
  return Object.values(jobs).map((j) => ({ ...j, stages: Object.values(j.stages).sort((a, b) => a.stage - b.stage) }));
}

function jobOutcome(job) {
  if (job.outcome) return job.outcome;
  return job.derived ? 'in view' : 'running';
}

function jct(job) {
  if (!job.submitted_at_ms) return null;
  return (job.ended_at_ms || Date.now()) - job.submitted_at_ms;
}

function pageFrameworks() {
  const frameworks = (ui.state && ui.state.frameworks) || [];
  const jobs = jobList();
  const out = [h('h1', { text: 'Frameworks and jobs' }), h('h2', { text: 'Frameworks' })];
  out.push(frameworks.length ? h('div', { class: 'scroll' }, h('table', { id: 'frameworks' },
    headRow(['Framework', 'Name', 'Principal / group', 'State', 'Active tasks', 'Using', ''], ['Using']),
    h('tbody', {}, frameworks.map((f) => h('tr', { 'data-framework': f.id },
      h('td', {}, h('a', { href: `#/tasks?framework=${enc(f.id)}`, text: f.id })),
      h('td', { text: f.name }), h('td', { text: `${f.principal} / ${f.group}` }),
      h('td', {}, stateBadge(frameworkState(f))),
      h('td', { class: 'num', text: f.active_tasks }),
      h('td', { class: 'hide-narrow', text: Object.entries(f.used).map(([r, v]) => `${r} ${fmt(v)}`).join(', ') }),
      h('td', {}, canWrite() && !f.torn_down ? actionButton(`teardown-${f.id}`, 'Tear down',
        () => write('POST', `/frameworks/${enc(f.id)}/teardown`), true) : null))))))
    : h('p', { class: 'muted', text: 'No framework.' }));
  out.push(h('h2', { text: 'Jobs' }));
  if (!ui.jobs) out.push(unavailable('Job documents (/jobs: stages, edges, JCT, policy)'), h('p', { class: 'muted', text: 'Jobs below are gathered from the tasks in view.' }));
  out.push(jobs.length ? h('div', { class: 'scroll' }, h('table', { id: 'jobs' },
    headRow(['Job', 'Framework', 'Policy', 'Outcome', 'Tasks', 'JCT']),
    h('tbody', {}, jobs.map((j) => h('tr', { 'data-job': j.job },
      h('td', {}, h('a', { href: `#/jobs/${enc(j.framework_id)}/${enc(j.job)}`, text: j.job })),
      h('td', { text: j.framework_id }), h('td', { text: j.policy || '–' }),
      h('td', {}, stateBadge(jobOutcome(j))),
      h('td', {}, counts(stageTotals(j))),
      h('td', { class: 'num', text: duration(jct(j)) }))))))
    : h('p', { class: 'muted', text: 'No job.' }));
  return out;
}

function stageTotals(job) {
  const total = {};
  for (const stage of job.stages) for (const [k, n] of Object.entries(stage.tasks)) total[k] = (total[k] || 0) + n;
  return total;
}

function pageJob(framework, name) {
  const job = jobList().find((j) => j.framework_id === framework && j.job === name);
  const fw = ((ui.state && ui.state.frameworks) || []).find((f) => f.id === framework);
  const out = [h('p', {}, h('a', { href: '#/frameworks', text: '← Frameworks and jobs' })),
    h('h1', { id: 'job-title', text: `Job ${name}` })];
  if (!job) return out.concat(h('p', { class: 'muted', text: 'This job has no task in view (it may have finished before the history kept it).' }));
  out.push(h('div', { class: 'cards' },
    h('div', { class: 'card' }, h('h3', { text: 'Outcome' }), h('div', { id: 'job-outcome' }, stateBadge(jobOutcome(job)))),
    h('div', { class: 'card' }, h('h3', { text: job.ended_at_ms ? 'JCT' : 'Running for' }), h('div', { class: 'big', text: duration(jct(job)) })),
    h('div', { class: 'card' }, h('h3', { text: 'Policy' }), h('div', { text: job.policy || '–' })),
    h('div', { class: 'card' }, h('h3', { text: 'Tasks' }), h('div', { id: 'job-tasks' }, counts(stageTotals(job))))));
  if (canWrite() && fw && !fw.torn_down) {
    out.push(h('div', { class: 'toolbar' }, actionButton(`teardown-${framework}`, 'Kill (tear the framework down)',
      () => write('POST', `/frameworks/${enc(framework)}/teardown`), true)));
  }
  out.push(h('h2', { text: 'DAG' }));
  if (job.derived) out.push(unavailable('Stage edges (/jobs)'));
  out.push(h('div', { class: 'scroll' }, dagSvg(job)));
  out.push(h('h2', { text: 'Stages' }), h('div', { class: 'scroll' }, h('table', { id: 'stages' },
    headRow(['Stage', 'Name', 'Parents', 'Tasks by state', 'Done']),
    h('tbody', {}, job.stages.map((st) => {
      // /jobs gives each stage's size; a stage derived from the tasks in view has only counts.
      const total = st.total || Object.values(st.tasks).reduce((a, b) => a + b, 0);
      return h('tr', { 'data-stage': st.stage },
        h('td', { text: st.stage }), h('td', { text: st.name }), h('td', { text: st.parents.join(', ') || '–' }),
        h('td', {}, counts(st.tasks)), h('td', {}, bar(st.tasks.Finished || st.tasks.finished || 0, total, `stage ${st.stage} finished`)));
    })))));
  return out;
}

// The DAG drawn as layers by depth (a stage's depth is one more than its deepest parent's),
// left to right, stages in each layer by number; edges are curves from parent to child. Enough
// for the tens of stages of TPC-H-like jobs; no crossing reduction.
function dagSvg(job) {
  const byId = new Map(job.stages.map((st) => [st.stage, st]));
  const depth = new Map();
  const depthOf = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0; // a cycle would be a bug upstream; draw it rather than hang
    seen.add(id);
    const parents = (byId.get(id) || { parents: [] }).parents.filter((p) => byId.has(p));
    const d = parents.length ? 1 + Math.max(...parents.map((p) => depthOf(p, seen))) : 0;
    depth.set(id, d);
    return d;
  };
  const layers = [];
  for (const st of job.stages) (layers[depthOf(st.stage)] = layers[depthOf(st.stage)] || []).push(st);
  const W = 130, H = 46, GX = 50, GY = 16;
  const pos = new Map();
  layers.forEach((layer, x) => (layer || []).forEach((st, y) => pos.set(st.stage, { x: 10 + x * (W + GX), y: 10 + y * (H + GY) })));
  const width = 20 + layers.length * (W + GX) - GX;
  const height = 20 + Math.max(1, ...layers.map((l) => (l || []).length)) * (H + GY) - GY;
  const svg = s('svg', { class: 'dag', id: 'dag', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': `DAG of ${job.job}: ${job.stages.length} stages in ${layers.length} layers` });
  for (const st of job.stages) {
    for (const p of st.parents) {
      const a = pos.get(p), b = pos.get(st.stage);
      if (!a || !b) continue;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      svg.append(s('path', { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
    }
  }
  for (const st of job.stages) {
    const p = pos.get(st.stage);
    // /jobs names states in lower case, tasks in view capitalised; /jobs also gives the size.
    const n = (state) => (st.tasks[state] || 0) + (st.tasks[state.toLowerCase()] || 0);
    const total = st.total || Object.values(st.tasks).reduce((a, b) => a + b, 0);
    const done = n('Finished');
    const failed = n('Failed') + n('Lost') + n('Killed');
    const running = n('Running') + n('Staging');
    const cls = failed ? 'failed' : total && done === total ? 'done' : running ? 'running' : 'waiting';
    svg.append(s('g', { 'data-stage': st.stage },
      s('title', { text: `${st.name}: ${Object.entries(st.tasks).map(([k, n]) => `${n} ${k}`).join(', ')}` }),
      s('rect', { x: p.x, y: p.y, width: W, height: H, class: cls }),
      s('text', { x: p.x + 8, y: p.y + 18, text: st.name.length > 18 ? st.name.slice(0, 17) + '…' : st.name }),
      s('text', { x: p.x + 8, y: p.y + 36, text: `${done}/${total} done${running ? `, ${running} run` : ''}` })));
  }
  return svg;
}

function pageTasks(params) {
  const query = ui.taskQuery !== undefined ? ui.taskQuery : (params.get('q') || '');
  const framework = params.get('framework');
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const tasks = allTasks().filter((t) => (!framework || t.framework === framework)
    && words.every((w) => [t.id, t.name, t.framework, t.agent, t.state, t.origin && t.origin.job].join(' ').toLowerCase().includes(w)));
  const shown = tasks.slice(-500).reverse();
  const st = ui.state || {};
  const out = [h('h1', { text: framework ? `Tasks of ${framework}` : 'Tasks' }),
    h('div', { class: 'toolbar' },
      h('label', { for: 'task-search', text: 'Search' }),
      h('input', { id: 'task-search', type: 'search', value: query, placeholder: 'id, name, job, agent, state', oninput: (e) => { ui.taskQuery = e.target.value; render(); } }),
      h('span', { class: 'muted', id: 'task-count', text: `${tasks.length} tasks${tasks.length > shown.length ? `, newest ${shown.length} shown` : ''}` })),
    st.tasks_omitted ? h('p', { class: 'muted', text: `${st.tasks_omitted} running tasks are beyond the view's bound.` }) : null,
    st.finished_tasks === undefined ? unavailable('Finished-task history') : null];
  out.push(h('div', { class: 'scroll' }, h('table', { id: 'tasks' },
    headRow(['Task', 'Name', 'Framework', 'Agent', 'State'], ['Name']),
    h('tbody', {}, shown.map((t) => h('tr', { 'data-task': t.id, 'data-state': t.state },
      h('td', {}, h('a', { href: `#/task/${enc(t.framework)}/${enc(t.id)}`, text: t.id })),
      h('td', { class: 'hide-narrow', text: t.name }), h('td', { text: t.framework }),
      h('td', { text: t.agent }), h('td', {}, stateBadge(t.state))))))));
  return out;
}

function pageTask(framework, id) {
  const task = allTasks().filter((t) => t.framework === framework && t.id === id).pop();
  const out = [h('p', {}, h('a', { href: '#/tasks', text: '← Tasks' })), h('h1', { text: `Task ${id}` })];
  if (task) {
    out.push(h('table', { id: 'task-details' }, h('tbody', {},
      [['Name', task.name], ['Framework', task.framework], ['Agent', task.agent], ['State', stateBadge(task.state)],
        ['Job', task.origin ? `${task.origin.job}, stage ${task.origin.stage}, index ${task.origin.index}, attempt ${task.origin.attempt}` : '–'],
        ['Resources', Object.entries(task.resources || {}).map(([r, v]) => `${r} ${fmt(v)}`).join(', ')],
        ['Ended', task.ended ? `${new Date(task.ended).toLocaleString()}${task.reason ? ' (' + JSON.stringify(task.reason) + ')' : ''}` : '–'],
      ].map(([k, v]) => h('tr', {}, h('th', { text: k }), h('td', {}, v))))));
    if (canWrite() && !task.finished && ['Staging', 'Running'].includes(task.state)) {
      out.push(h('div', { class: 'toolbar' }, actionButton(`kill-${id}`, 'Kill task',
        () => write('POST', `/frameworks/${enc(framework)}/tasks/${enc(id)}/kill`), true)));
    }
  } else {
    out.push(h('p', { class: 'muted', text: 'Not in view (finished before the history kept it, or beyond the bound).' }));
  }
  out.push(h('h2', { text: 'State history' }));
  if (ui.available.events) {
    const history = ui.events.filter((e) => e.kind === 'task_state_changed' && e.framework === framework && e.task === id);
    out.push(history.length ? h('ol', { class: 'events', id: 'task-history' }, history.map((e) => h('li', {},
      `${e.at_ms ? new Date(e.at_ms).toLocaleTimeString() : '–'} `, e.from ? stateBadge(e.from) : '–', ' → ', stateBadge(e.to), e.message ? ` ${e.message}` : '')))
      : h('p', { class: 'muted', text: 'No state change of this task among the events kept.' }));
  } else {
    out.push(unavailable('State history (/events)'));
  }
  out.push(h('h2', { text: 'Logs' }), logViewer(framework, id, task));
  return out;
}

function logViewer(framework, id, task) {
  const key = `${framework}/${id}`;
  const log = ui.logs[key] || (ui.logs[key] = { stream: 'stdout', text: '', offset: 0, size: null, follow: false, missing: false, error: null, loaded: false });
  if (!log.loaded) { log.loaded = true; fetchLog(framework, id, log); }
  if (log.missing) return unavailable('Task logs (/frameworks/…/files/stdout)');
  const running = task && !task.finished && ['Staging', 'Running'].includes(task.state);
  return h('div', { id: 'log-viewer' },
    h('div', { class: 'toolbar' },
      ['stdout', 'stderr'].map((stream) => h('button', {
        type: 'button', id: `log-${stream}`, 'aria-pressed': String(log.stream === stream),
        onclick: () => { Object.assign(log, { stream, text: '', offset: 0, size: null, error: null }); fetchLog(framework, id, log); },
      }, stream)),
      h('label', {}, h('input', { type: 'checkbox', id: 'log-follow', checked: log.follow, onchange: (e) => { log.follow = e.target.checked; if (log.follow) followLog(framework, id, log); } }), ' follow'),
      h('button', { type: 'button', id: 'log-reload', onclick: () => fetchLog(framework, id, log) }, 'Load more'),
      h('span', { class: 'muted', text: log.size === null ? '' : `${log.offset} of ${log.size} bytes${running ? ' (still running)' : ''}` })),
    log.error ? h('p', { class: 'error', text: log.error }) : null,
    h('pre', { class: 'log', id: 'log-text', tabindex: '0', 'aria-label': `${log.stream} of ${id}` }, log.text || '(empty)'));
}

async function fetchLog(framework, id, log) {
  const path = `/frameworks/${enc(framework)}/tasks/${enc(id)}/files/${log.stream}?offset=${log.offset}&length=${LOG_CHUNK}`;
  try {
    const response = await api(path, { headers: { Accept: '*/*' } });
    if (response.status === 404 && ui.available.logs !== true) {
      const body = await response.json().catch(() => ({}));
      // The route missing entirely (the API's "no such path") differs from a task without logs.
      if (!body.error || body.error.startsWith('no such path')) { log.missing = true; ui.available.logs = false; render(); return; }
      log.error = body.error;
    } else if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      log.error = body.error || `HTTP ${response.status}`;
    } else {
      ui.available.logs = true;
      const chunk = await response.text();
      log.text += chunk;
      log.offset += new TextEncoder().encode(chunk).length;
      const size = response.headers.get('X-Fullerene-File-Size');
      log.size = size === null ? log.offset : Number(size);
      log.error = null;
    }
  } catch (error) {
    if (error instanceof NeedLogin) { showLogin(); return; }
    log.error = error.message;
  }
  render();
}

function followLog(framework, id, log) {
  if (!log.follow || routeKey() !== `task/${framework}/${id}`) { log.follow = false; return; }
  fetchLog(framework, id, log).then(() => setTimeout(() => followLog(framework, id, log), 1000));
}

function pageFairness() {
  const groups = (ui.state && ui.state.groups) || [];
  const out = [h('h1', { text: 'Fairness' }),
    h('p', { class: 'muted', text: 'Each group\'s fair share (by weight), the share it holds, and the deficit counter the allocator keeps for it (how far it is behind its share).' })];
  out.push(groups.length ? h('div', { class: 'scroll' }, h('table', { id: 'groups' },
    headRow(['Group', 'Weight', 'Frameworks', 'Fair share', 'Held', 'Deficit']),
    h('tbody', {}, groups.map((g) => h('tr', { 'data-group': g.name },
      h('td', { text: g.name }), h('td', { class: 'num', text: fmt(g.weight, 2) }), h('td', { class: 'num', text: g.frameworks }),
      h('td', { class: 'num', text: fmt(g.share, 3) }), h('td', { class: 'num', text: fmt(g.held, 3) }), h('td', { class: 'num', text: fmt(g.deficit, 3) }))))))
    : h('p', { class: 'muted', text: 'No group.' }));
  out.push(h('h2', { text: 'Deficit over time' }), chart('deficit'), h('h2', { text: 'Held share over time' }), chart('held'));
  return out;
}

const PALETTE = ['#0969da', '#cf222e', '#1a7f37', '#9a6700', '#8250df', '#bf3989', '#0a7ea4', '#57606a'];

// A line chart of one field of every group over the samples this page took (it keeps them while
// open: the master serves current values only).
function chart(field) {
  const names = [...new Set(ui.series.flatMap((p) => Object.keys(p.groups)))].sort();
  const W = 720, H = 200, L = 48, B = 22;
  if (ui.series.length < 2 || !names.length) return h('p', { class: 'muted', text: 'Collecting samples…' });
  const t0 = ui.series[0].t, t1 = ui.series[ui.series.length - 1].t;
  const values = ui.series.flatMap((p) => names.map((n) => (p.groups[n] || {})[field]).filter((v) => typeof v === 'number'));
  let lo = Math.min(0, ...values), hi = Math.max(...values, lo + 1e-9);
  if (hi - lo < 1e-6) hi = lo + 1;
  const x = (t) => L + ((W - L - 8) * (t - t0)) / Math.max(1, t1 - t0);
  const y = (v) => 8 + ((H - B - 8) * (hi - v)) / (hi - lo);
  const svg = s('svg', { class: 'chart', id: `chart-${field}`, viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': `${field} of each group over the last ${Math.round((t1 - t0) / 1000)} s` },
    s('line', { class: 'axis', x1: L, y1: 8, x2: L, y2: H - B }), s('line', { class: 'axis', x1: L, y1: H - B, x2: W - 8, y2: H - B }),
    s('text', { x: 4, y: 16, text: fmt(hi, 3) }), s('text', { x: 4, y: H - B, text: fmt(lo, 3) }),
    s('text', { x: L, y: H - 6, text: `−${Math.round((t1 - t0) / 1000)} s` }), s('text', { x: W - 40, y: H - 6, text: 'now' }));
  names.forEach((n, i) => {
    const points = ui.series.filter((p) => p.groups[n]).map((p) => `${x(p.t).toFixed(1)},${y(p.groups[n][field]).toFixed(1)}`);
    svg.append(s('polyline', { points: points.join(' '), stroke: PALETTE[i % PALETTE.length] }, s('title', { text: n })));
  });
  return h('figure', {}, h('div', { class: 'scroll' }, svg), h('figcaption', { class: 'legend' },
    names.map((n, i) => h('span', {}, h('span', { class: 'swatch', color: PALETTE[i % PALETTE.length] }), n))));
}

function eventText(e) {
  const rest = Object.entries(e).filter(([k]) => !['seq', 'index', 'at_ms', 'kind'].includes(k))
    .map(([k, v]) => `${k}=${typeof v === 'object' && v !== null ? JSON.stringify(v) : v}`);
  return rest.join(' ');
}

function eventList(limit, kind) {
  if (ui.available.events === false) return unavailable('Events (/events)');
  if (ui.available.events === null) return h('p', { class: 'muted', text: 'Loading events…' });
  const events = ui.events.filter((e) => !kind || e.kind === kind).slice(-limit).reverse();
  if (!events.length) return h('p', { class: 'muted', text: 'No event yet.' });
  return h('ol', { class: 'events', id: 'event-list' }, events.map((e) => h('li', { 'data-kind': e.kind },
    h('span', { class: 'muted', text: `${e.at_ms ? new Date(e.at_ms).toLocaleTimeString() : '–'} ` }),
    h('code', { text: e.kind }), ' ', eventText(e))));
}

function pageEvents() {
  const kinds = [...new Set(ui.events.map((e) => e.kind))].sort();
  return [h('h1', { text: 'Events' }),
    ui.available.events ? h('div', { class: 'toolbar' }, h('label', { for: 'event-kind', text: 'Kind' }),
      h('select', { id: 'event-kind', onchange: (e) => { ui.eventKind = e.target.value; render(); } },
        h('option', { value: '', text: 'all' }), kinds.map((k) => h('option', { value: k, text: k, selected: ui.eventKind === k })))) : null,
    eventList(EVENTS_KEPT, ui.eventKind)];
}

// ---- routing and rendering --------------------------------------------------------------------

function routeKey() { return (window.location.hash || '#/overview').slice(2).split('?')[0]; }

function render() {
  if (!ui.session) return;
  const [path, queryString] = (window.location.hash || '#/overview').slice(2).split('?');
  const parts = path.split('/').map(decodeURIComponent);
  const params = new URLSearchParams(queryString || '');
  const page = parts[0] || 'overview';
  for (const link of document.querySelectorAll('nav a')) {
    const current = link.dataset.page === page || (link.dataset.page === 'frameworks' && page === 'jobs') || (link.dataset.page === 'tasks' && page === 'task');
    if (current) link.setAttribute('aria-current', 'page'); else link.removeAttribute('aria-current');
  }
  let content;
  switch (page) {
    case 'agents': content = pageAgents(); break;
    case 'frameworks': content = pageFrameworks(); break;
    case 'jobs': content = pageJob(parts[1], parts.slice(2).join('/')); break;
    case 'tasks': content = pageTasks(params); break;
    case 'task': content = pageTask(parts[1], parts.slice(2).join('/')); break;
    case 'fairness': content = pageFairness(); break;
    case 'events': content = pageEvents(); break;
    default: content = pageOverview();
  }
  // Re-rendering replaces the page: keep the focused control (by id) and its caret.
  const focused = document.activeElement && document.activeElement.id;
  const caret = focused && document.activeElement.selectionStart;
  const view = $('view');
  view.replaceChildren(...[ui.error ? h('p', { class: 'error', role: 'alert', text: ui.error }) : null, content].flat(Infinity).filter(Boolean));
  if (focused && $(focused)) {
    $(focused).focus();
    if (typeof caret === 'number' && $(focused).setSelectionRange) { try { $(focused).setSelectionRange(caret, caret); } catch { /* not a text field */ } }
  }
  setStatus();
}

let statusNote = null;
function setStatus(note, bad) {
  if (note !== undefined) statusNote = { note, bad, at: Date.now() };
  const st = ui.state;
  const parts = [ui.live ? 'live (events)' : `polling every ${POLL_MS / 1000} s`];
  if (st) parts.push(`leader ${st.leader}, term ${st.term}`);
  if (statusNote && Date.now() - statusNote.at < 10000) parts.push(statusNote.note);
  // A live region: written only when it changes, so a screen reader is not told every poll.
  const text = parts.join(' · ');
  if ($('status').textContent !== text) $('status').textContent = text;
  $('status').classList.toggle('error', Boolean(statusNote && statusNote.bad && Date.now() - statusNote.at < 10000));
}

// ---- login ----------------------------------------------------------------------------------

function showLogin(message) {
  ui.session = null;
  $('login').hidden = false;
  $('view').replaceChildren();
  $('logout').hidden = true;
  $('who').textContent = '';
  $('login-error').textContent = message || '';
  $('token').focus();
}

async function login(token) {
  const response = await api('/ui/session', {
    method: 'POST', headers: { Authorization: `Bearer ${token}`, 'X-Fullerene-CSRF': '1' },
  }).catch((error) => ({ ok: false, status: 0, json: async () => ({ error: error instanceof NeedLogin ? 'this token is not accepted' : error.message }) }));
  const body = await response.json().catch(() => ({}));
  if (!response.ok) { showLogin(body.error || `HTTP ${response.status}`); return false; }
  return true;
}

async function start() {
  // A one-time link (`fullerene dev` prints one): the token travels in the fragment, which
  // is never sent to a server; it is exchanged for the cookie and removed from the address bar
  // and the history at once.
  const hash = window.location.hash;
  if (hash.startsWith('#token=')) {
    const token = decodeURIComponent(hash.slice('#token='.length));
    window.history.replaceState(null, '', window.location.pathname + '#/overview');
    await login(token);
  }
  $('login-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const token = $('token').value.trim();
    $('token').value = '';
    if (await login(token)) await begin();
  });
  $('logout').addEventListener('click', async () => {
    await fetch('/ui/session', { method: 'DELETE', credentials: 'same-origin' }).catch(() => {});
    showLogin('Logged out.');
  });
  // A new page: its content gets the focus (screen readers announce it) and the view starts at
  // the top.
  window.addEventListener('hashchange', () => {
    ui.taskQuery = undefined;
    render();
    $('main').focus({ preventScroll: true });
    window.scrollTo(0, 0);
  });
  await begin();
}

let polling = null;
async function begin() {
  try {
    const response = await api('/ui/session');
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    ui.session = await response.json();
  } catch (error) {
    showLogin(error instanceof NeedLogin ? '' : error.message);
    return;
  }
  $('login').hidden = true;
  $('logout').hidden = !ui.session.cookie;
  $('who').textContent = `${ui.session.who} (${ui.session.scope})`;
  await refresh();
  await startEvents();
  render();
  if (polling) clearTimeout(polling);
  const tick = async () => { if (ui.session) await refresh(); polling = setTimeout(tick, ui.live ? LIVE_POLL_MS : POLL_MS); };
  polling = setTimeout(tick, POLL_MS);
}

start();
