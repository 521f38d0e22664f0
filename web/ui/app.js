// Plumb dashboard: reads the server's JSON and draws it. No libraries, so
// it works offline; every name from a job or a block goes into the page as
// text, never as markup.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const REFRESH_MS = 2000;

// el builds an element: attrs are attributes (on* are listeners), kids are
// nodes or strings.
function el(ns, tag, attrs, ...kids) {
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}
const h = (tag, attrs, ...kids) => el(null, tag, attrs, ...kids);
const s = (tag, attrs, ...kids) => el(SVG, tag, attrs, ...kids);

async function get(path) {
  const r = await fetch(path, { headers: { Accept: 'application/json' } });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${(await r.text()).trim()}`);
  return r.json();
}

// post sends an admin action. Its JSON body is what keeps another site's
// form from sending it with this user's login (see web/actions.go).
async function post(path, body) {
  const r = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify(body) });
  if (!r.ok) throw new Error((await r.text()).trim());
  return r.json();
}

// me is who the page is shown to: admins get the action buttons.
let me = { admin: false, user: '' };

// actionButton does what it says on a second click (the first asks to
// confirm), then shows the answer above the page and redraws it.
function actionButton(label, what, run) {
  const b = h('button', { class: 'action', type: 'button', 'data-action': what }, label);
  let armed = false;
  b.addEventListener('click', async ev => {
    ev.stopPropagation();
    if (!armed) {
      armed = true;
      b.textContent = `Confirm: ${label.toLowerCase()}?`;
      b.classList.add('armed');
      return;
    }
    b.disabled = true;
    const flash = document.getElementById('flash');
    try {
      const res = await run();
      flash.textContent = `${what}: ${JSON.stringify(res)}`;
      flash.className = 'ok';
    } catch (e) {
      flash.textContent = e.message;
      flash.className = 'bad';
    }
    flash.hidden = false;
    render();
  });
  return b;
}

// chartRange is the time range of the charts; the choice is kept.
let chartRange = localStorage.getItem('plumb-range') || '1h';
function rangePicker() {
  return h('label', { class: 'range' }, 'range ',
    h('select', { id: 'range', onchange: ev => { chartRange = ev.target.value; localStorage.setItem('plumb-range', chartRange); render(); } },
      ['15m', '1h', '6h', '24h'].map(v => h('option', { value: v, selected: v === chartRange }, v))));
}

function rate(n, unit) {
  if (!n) return `0 ${unit}/s`;
  return n >= 100 ? `${Math.round(n)} ${unit}/s` : n >= 1 ? `${n.toFixed(1)} ${unit}/s` : `${n.toPrecision(2)} ${unit}/s`;
}
const mbps = n => rate(n / 1e6, 'MB');

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// dur formats nanoseconds (or milliseconds with ms=true) for people.
function dur(ns, ms) {
  let sec = ms ? ns / 1e3 : ns / 1e9;
  if (!isFinite(sec)) return '–';
  const sign = sec < 0 ? '-' : '';
  sec = Math.abs(sec);
  if (sec < 1) return `${sign}${Math.round(sec * 1000)}ms`;
  if (sec < 60) return `${sign}${sec.toFixed(1)}s`;
  if (sec < 3600) return `${sign}${Math.floor(sec / 60)}m${Math.round(sec % 60)}s`;
  if (sec < 86400) return `${sign}${Math.floor(sec / 3600)}h${Math.round((sec % 3600) / 60)}m`;
  return `${sign}${Math.floor(sec / 86400)}d${Math.round((sec % 86400) / 3600)}h`;
}

const when = t => (t ? new Date(t).toISOString().replace('.000Z', 'Z') : '');

// ---- the graph ----------------------------------------------------------

const STAGE_W = 200, STAGE_H = 62, QUEUE_RX = 82, QUEUE_RY = 20, COL_W = 260, ROW_H = 86, PAD = 24;

// layout places queues and stages in columns by depth: a source queue is in
// column 0, a stage one right of its deepest input, its outputs one right
// of it. Within a column nodes sit near the mean height of their inputs.
function layout(g) {
  const producer = new Map();
  for (const st of g.stages) for (const q of st.outputs) producer.set(q, st);
  const rank = new Map();
  const rankOf = (key, depth) => {
    if (rank.has(key)) return rank.get(key);
    if (depth > 200) return 0; // a cycle; the engine refuses them, but never hang
    let r = 0;
    if (key.startsWith('q:')) {
      const p = producer.get(key.slice(2));
      if (p) r = rankOf('s:' + p.id, depth + 1) + 1;
    } else {
      const st = g.stages.find(x => 's:' + x.id === key);
      for (const q of st.inputs) r = Math.max(r, rankOf('q:' + q, depth + 1) + 1);
    }
    rank.set(key, r);
    return r;
  };
  const queues = new Set(g.queues);
  for (const st of g.stages) for (const q of [...st.inputs, ...st.outputs]) queues.add(q);
  const nodes = [];
  for (const q of queues) nodes.push({ key: 'q:' + q, kind: 'queue', name: q, rank: rankOf('q:' + q, 0) });
  for (const st of g.stages) nodes.push({ key: 's:' + st.id, kind: 'stage', stage: st, rank: rankOf('s:' + st.id, 0) });
  const byKey = new Map(nodes.map(n => [n.key, n]));
  const preds = n => n.kind === 'queue'
    ? (producer.has(n.name) ? ['s:' + producer.get(n.name).id] : [])
    : n.stage.inputs.map(q => 'q:' + q);
  const cols = [];
  for (const n of nodes) (cols[n.rank] ||= []).push(n);
  cols.forEach((col, c) => {
    if (c > 0) {
      for (const n of col) {
        const ys = preds(n).map(k => byKey.get(k).y).filter(y => y !== undefined);
        n.want = ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : 0;
      }
      col.sort((a, b) => a.want - b.want);
    }
    col.forEach((n, i) => {
      n.x = PAD + STAGE_W / 2 + c * COL_W;
      n.y = PAD + ROW_H / 2 + i * ROW_H;
    });
  });
  const edges = [];
  for (const st of g.stages) {
    for (const q of st.inputs) edges.push([byKey.get('q:' + q), byKey.get('s:' + st.id)]);
    for (const q of st.outputs) edges.push([byKey.get('s:' + st.id), byKey.get('q:' + q)]);
  }
  const width = PAD * 2 + STAGE_W + Math.max(0, cols.length - 1) * COL_W;
  const height = PAD * 2 + Math.max(1, ...cols.map(c => c.length)) * ROW_H;
  return { nodes, edges, width, height };
}

const halfWidth = n => (n.kind === 'queue' ? QUEUE_RX : STAGE_W / 2);

function drawGraph(g, queues, rates) {
  const { nodes, edges, width, height } = layout(g);
  // The latest rate along each edge, by "from→to" with stages by name.
  const edgeRate = new Map();
  for (const r of rates) if (r.kind === 'edge' && r.points.length) edgeRate.set(`${r.from}→${r.to}`, r.points[r.points.length - 1]);
  const keyOf = n => (n.kind === 'queue' ? n.name : n.stage.name);
  const blocksOf = new Map(queues.map(q => [q.name, q]));
  const svg = s('svg', { class: 'graph', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img',
    'aria-label': 'the merged pipeline graph' });
  svg.append(s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto' },
    s('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#98a2b3' }))));
  for (const [a, b] of edges) {
    const x1 = a.x + halfWidth(a), x2 = b.x - halfWidth(b), mx = (x1 + x2) / 2;
    svg.append(s('path', { class: 'edge', d: `M${x1},${a.y} C${mx},${a.y} ${mx},${b.y} ${x2},${b.y}`, 'marker-end': 'url(#arrow)' }));
    const r = edgeRate.get(`${keyOf(a)}→${keyOf(b)}`);
    if (r && r.blocks_per_second > 0) {
      svg.append(s('text', { class: 'rate', x: mx, y: (a.y + b.y) / 2 - 7, 'data-edge': `${keyOf(a)}→${keyOf(b)}` },
        `${rate(r.blocks_per_second, 'blk')} · ${mbps(r.bytes_per_second)}`));
    }
  }
  for (const n of nodes) {
    if (n.kind === 'queue') {
      const q = blocksOf.get(n.name);
      const detail = q ? `${q.blocks} blocks · ${bytes(q.bytes)}` : 'no blocks yet';
      svg.append(s('g', { class: 'node queue', 'data-queue': n.name, tabindex: 0,
        onclick: () => { location.hash = '#/queue/' + encodeURIComponent(n.name); } },
        s('title', {}, `queue ${n.name}: ${detail}`),
        s('ellipse', { cx: n.x, cy: n.y, rx: QUEUE_RX, ry: QUEUE_RY }),
        s('text', { x: n.x, y: n.y - 6, class: 'name' }, n.name),
        s('text', { x: n.x, y: n.y + 9, class: 'detail' }, detail)));
      continue;
    }
    const st = n.stage;
    const x = n.x - STAGE_W / 2, y = n.y - STAGE_H / 2;
    const owners = st.owners && st.owners.length ? st.owners.join('\n  ') : '(none)';
    const tip = `${st.name}${st.merged ? ' (merged: shared by ' + st.owners.length + ' jobs)' : ''}\n` +
      `program: ${st.program}\nabstraction: ${st.abstraction || 'block'}\nowners:\n  ${owners}`;
    // Blocks held for a window not yet due are waiting by design: drawn
    // as such, not as a backlog more workers would clear.
    const waiting = st.waiting_for_window || 0;
    const g1 = s('g', { class: `node stage${st.merged ? ' merged' : ''}${st.backlog > 0 ? ' busy' : waiting > 0 ? ' waiting' : ''}`,
      'data-stage': st.name, 'data-id': st.id, 'data-backlog': st.backlog, 'data-waiting': waiting, 'data-workers': st.workers, 'data-faulty': st.faulty,
      tabindex: 0, onclick: () => { location.hash = '#/queue/' + encodeURIComponent(st.inputs[0]); } },
      s('title', {}, tip));
    if (st.merged) g1.append(s('rect', { class: 'outer', x: x - 4, y: y - 4, width: STAGE_W + 8, height: STAGE_H + 8, rx: 8 }));
    g1.append(s('rect', { class: 'box', x, y, width: STAGE_W, height: STAGE_H, rx: 5 }));
    g1.append(s('text', { x: n.x, y: y + 14, class: 'name' }, clip(st.name, 28)));
    g1.append(s('text', { x: n.x, y: y + 32, class: 'load' }, `backlog ${st.backlog} · workers ${st.workers}`));
    if (st.faulty > 0) g1.append(s('text', { x: n.x, y: y + 49, class: 'faulty' }, `faulty ${st.faulty}`));
    else if (waiting > 0) g1.append(s('text', { x: n.x, y: y + 49, class: 'waiting' }, `${waiting} waiting for windows`));
    else if (st.merged) g1.append(s('text', { x: n.x, y: y + 49, class: 'detail' }, `merged · ${st.owners.length} owners`));
    svg.append(g1);
  }
  return svg;
}

function clip(t, n) { return t.length > n ? t.slice(0, n - 1) + '…' : t; }

async function graphPage() {
  const [g, queues, rates] = await Promise.all([get('/api/graph'), get('/api/queues'), get('/api/rates?range=15m')]);
  const faulty = g.stages.reduce((a, st) => a + st.faulty, 0);
  return [
    h('h1', {}, 'Pipeline graph'),
    h('p', { class: 'muted' }, `${g.stages.length} stages over ${g.queues.length} queues. ` +
      'Ovals are queues, boxes are stages; a double border marks a stage several jobs share. ' +
      'Hover for owners; click for the queue. Edges show the latest blocks/s and MB/s.',
      faulty ? h('span', { class: 'bad' }, ` ${faulty} faulty blocks.`) : ''),
    g.stages.length || g.queues.length ? drawGraph(g, queues, rates) : h('p', {}, 'No queues or jobs yet. Submit one with `plumb job submit FILE.yaml`.'),
  ];
}

// ---- queues ---------------------------------------------------------------

async function queuesPage() {
  const qs = await get('/api/queues');
  return [
    h('h1', {}, 'Queues'),
    qs.length === 0 ? h('p', {}, 'No queues yet.') :
      h('table', { id: 'queues' },
        h('tr', {}, h('th', {}, 'queue'), h('th', { class: 'num' }, 'blocks'), h('th', { class: 'num' }, 'bytes'), h('th', {}, 'created')),
        qs.map(q => h('tr', { class: 'link', 'data-queue': q.name, onclick: () => { location.hash = '#/queue/' + encodeURIComponent(q.name); } },
          h('td', {}, h('a', { href: '#/queue/' + encodeURIComponent(q.name) }, q.name)),
          h('td', { class: 'num' }, q.blocks), h('td', { class: 'num' }, bytes(q.bytes)), h('td', {}, when(q.created))))),
  ];
}

async function queuePage(name) {
  const p = await get('/api/queue/' + encodeURIComponent(name));
  const groups = p.groups.map(g => g.group);
  return [
    h('h1', {}, `Queue ${p.queue.name}`),
    h('dl', { class: 'facts' },
      h('dt', {}, 'blocks'), h('dd', { id: 'queue-blocks' }, `${p.queue.blocks} (${bytes(p.queue.bytes)})`),
      h('dt', {}, 'retention'), h('dd', {}, p.retention),
      h('dt', {}, 'written by'), h('dd', {}, p.producer || 'agents and uploads'),
      h('dt', {}, 'read by'), h('dd', {}, p.readers.length ? p.readers.join(', ') : 'no stage')),
    h('h2', {}, 'Subscribers'),
    p.groups.length === 0 ? h('p', { class: 'muted' }, 'None.') :
      h('table', { id: 'groups' },
        h('tr', {}, h('th', {}, 'group'), ...['owed', 'reserved', 'done', 'faulty'].map(c => h('th', { class: 'num' }, c))),
        p.groups.map(g => h('tr', {}, h('td', { title: g.group }, p.names[g.group] || g.group), h('td', { class: 'num' }, g.unreserved), h('td', { class: 'num' }, g.reserved),
          h('td', { class: 'num' }, g.done), h('td', { class: 'num' + (g.faulty ? ' bad' : '') }, g.faulty)))),
    h('h2', {}, `Newest blocks (${p.blocks.length} shown)`),
    h('table', { id: 'blocks' },
      h('tr', {}, h('th', {}, 'block'), h('th', { class: 'num' }, 'size'), h('th', {}, 'arrived'), groups.map(g => h('th', { title: g }, p.names[g] || g))),
      p.blocks.map(b => h('tr', { 'data-block': b.name },
        h('td', {}, b.name), h('td', { class: 'num' }, bytes(b.size)), h('td', {}, when(b.arrived)),
        groups.map(g => {
          const d = (b.states || {})[g];
          if (!d) return h('td', { class: 'muted' }, '–');
          return h('td', { class: 'state-' + d.state, title: d.last_error || '' }, d.state.toLowerCase(),
            d.attempts > 1 ? ` (${d.attempts} tries)` : '');
        })))),
  ];
}

// ---- windows --------------------------------------------------------------

const siteOf = w => w.id.split('/')[0];

function waitText(w, now) {
  if (w.state !== 'waiting') return w.reason || w.state;
  if (w.blocked_by) return `in order after ${w.blocked_by}`;
  if (!w.bracketed) return 'for a block beyond its end';
  if (w.wait_until) {
    const left = new Date(w.wait_until).getTime() - now;
    return left > 0 ? `max_wait ends in ${dur(left, true)}` : 'max_wait over; firing';
  }
  return 'for the missing blocks (no max_wait)';
}

async function windowsPage() {
  const ws = await get('/api/windows');
  const now = Date.now();
  const open = ws.filter(w => w.state === 'waiting');
  const done = ws.filter(w => w.state !== 'waiting');
  const row = w => h('tr', { class: 'link', 'data-window': `${w.stage} ${w.id}`, 'data-missing': (w.missing || []).length,
    onclick: () => { location.hash = `#/window/${encodeURIComponent(w.stage)}/${encodeURIComponent(w.id)}${w.revision ? '/' + w.revision : ''}`; } },
    h('td', {}, w.stage), h('td', {}, siteOf(w)), h('td', {}, `${when(w.from)} – ${when(w.to)}`),
    h('td', { class: 'num' }, w.blocks), h('td', { class: 'num' + (w.missing && w.missing.length ? ' bad' : '') }, (w.missing || []).length),
    h('td', {}, w.state === 'faulty' ? h('span', { class: 'bad' }, w.error ? `faulty: ${w.error}` : 'faulty') : waitText(w, now)),
    me.admin && w.state === 'waiting' ? h('td', {}, actionButton('Fire now', 'fire-window', () => post('/api/fire-window', { stage: w.stage, window: w.id }))) : []);
  const head = last => h('tr', {}, h('th', {}, 'stage'), h('th', {}, 'site'), h('th', {}, 'window'),
    h('th', { class: 'num' }, 'present'), h('th', { class: 'num' }, 'missing'), h('th', {}, last), me.admin && last === 'waiting' ? h('th', {}, '') : []);
  return [
    h('h1', {}, 'Windows'),
    h('h2', {}, `Open (${open.length})`),
    open.length ? h('table', { id: 'open-windows' }, head('waiting'), open.map(row)) : h('p', { class: 'muted' }, 'No window is waiting.'),
    h('h2', {}, `Fired (${done.length})`),
    done.length ? h('table', { id: 'fired-windows' }, head('why'), done.map(row)) : h('p', { class: 'muted' }, 'None yet.'),
  ];
}

async function windowPage(stage, id, rev) {
  const ws = await get('/api/windows');
  const w = ws.find(x => x.stage === stage && x.id === id && (rev ? String(x.revision) === rev : x.state === 'waiting')) ||
    ws.find(x => x.stage === stage && x.id === id);
  if (!w) return [h('h1', {}, `Window ${id}`), h('p', {}, `No window ${id} of ${stage} now; it may have fired and aged out.`)];
  const list = xs => (xs && xs.length ? h('div', { class: 'seqs' }, xs.join(' ')) : h('span', { class: 'muted' }, 'none'));
  return [
    h('h1', { id: 'window-title' }, `Window ${w.id} of ${w.stage}`),
    h('dl', { class: 'facts' },
      h('dt', {}, 'site'), h('dd', {}, siteOf(w)),
      h('dt', {}, 'state'), h('dd', { id: 'window-state' }, w.state + (w.revision ? ` (revision ${w.revision})` : '')),
      h('dt', {}, 'from'), h('dd', {}, when(w.from)),
      h('dt', {}, 'to'), h('dd', {}, when(w.to)),
      h('dt', {}, 'blocks present'), h('dd', {}, w.blocks),
      h('dt', {}, 'missing'), h('dd', { id: 'window-missing' }, list(w.missing)),
      h('dt', {}, 'late'), h('dd', {}, list(w.late)),
      h('dt', {}, w.state === 'waiting' ? 'waiting' : 'why'), h('dd', {}, waitText(w, Date.now())),
      w.fired ? [h('dt', {}, 'fired'), h('dd', {}, when(w.fired))] : [],
      w.error ? [h('dt', {}, 'error'), h('dd', { class: 'bad' }, w.error)] : []),
    h('p', {}, h('a', { href: '#/windows' }, '← all windows')),
  ];
}

// ---- latency --------------------------------------------------------------

const seriesKey = r => (r.kind === 'stage' ? `stage ${r.stage}` : r.kind === 'stream' ? `${r.queue} ⇢ ${r.group} (stream)` : `${r.queue} → ${r.group}`);
const rowName = r => (r.kind === 'stage' ? r.stage : r.kind === 'stream' ? `stream ${r.group}` : r.group);

// chart draws lines over time: lines are [key, class] pairs of points'
// fields, fmt formats the top of the scale.
function chart(points, lines = [['p50', 'p50'], ['p99', 'p99']], fmt = dur, w = 420, ht = 160) {
  const left = 56, bottom = 20, top = 8, right = 8;
  const ts = points.map(p => p.t), vs = points.flatMap(p => lines.map(([k]) => p[k] || 0));
  const t0 = Math.min(...ts), t1 = Math.max(...ts, t0 + 1);
  const top0 = Math.max(...vs, 0), vmax = top0 || 1; // an idle series: a flat line, no scale
  const X = t => left + ((t - t0) / (t1 - t0)) * (w - left - right);
  const Y = v => top + (1 - v / vmax) * (ht - top - bottom);
  const line = k => points.map(p => `${X(p.t).toFixed(1)},${Y(p[k] || 0).toFixed(1)}`).join(' ');
  return s('svg', { class: 'chart', width: w, height: ht, viewBox: `0 0 ${w} ${ht}` },
    s('line', { class: 'axis', x1: left, y1: ht - bottom, x2: w - right, y2: ht - bottom }),
    s('line', { class: 'axis', x1: left, y1: top, x2: left, y2: ht - bottom }),
    s('text', { x: left - 4, y: top + 8, 'text-anchor': 'end' }, top0 ? fmt(top0) : ''),
    s('text', { x: left - 4, y: ht - bottom, 'text-anchor': 'end' }, '0'),
    s('text', { x: left, y: ht - 4 }, new Date(t0).toISOString().slice(11, 19)),
    s('text', { x: w - right, y: ht - 4, 'text-anchor': 'end' }, new Date(t1).toISOString().slice(11, 19)),
    lines.map(([k, cls]) => s('polyline', { class: cls, points: line(k) })));
}

async function latencyPage() {
  const [hist, now] = await Promise.all([get('/api/latency?range=' + chartRange), get('/api/status')]);
  const series = new Map();
  for (const pt of hist) {
    const t = new Date(pt.at).getTime();
    for (const r of pt.rows || []) {
      if (!r.arrival_to.samples) continue;
      const k = seriesKey(r);
      if (!series.has(k)) series.set(k, []);
      series.get(k).push({ t, p50: r.arrival_to.p50_ns, p99: r.arrival_to.p99_ns });
    }
  }
  return [
    h('h1', {}, 'Latency'),
    h('p', { class: 'muted' }, 'From a block\'s arrival to its stage output (stages), its acknowledgement (subscribers) or the consumer moving past it (ordered streams and stream stages), over the last hour at each sample.'),
    h('table', { id: 'status' },
      h('tr', {}, h('th', {}, 'stage or subscriber'), h('th', {}, 'queue'), h('th', { class: 'num' }, 'backlog'), h('th', { class: 'num' }, 'oldest owed'),
        h('th', { class: 'num' }, 'p50'), h('th', { class: 'num' }, 'p99'), h('th', { class: 'num' }, 'samples')),
      now.map(r => h('tr', { 'data-series': seriesKey(r) },
        h('td', {}, rowName(r)), h('td', {}, r.queue), h('td', { class: 'num' }, r.backlog),
        h('td', { class: 'num' }, r.oldest_age_ns ? dur(r.oldest_age_ns) : '–'),
        h('td', { class: 'num' }, r.arrival_to.samples ? dur(r.arrival_to.p50_ns) : '–'),
        h('td', { class: 'num' }, r.arrival_to.samples ? dur(r.arrival_to.p99_ns) : '–'),
        h('td', { class: 'num' }, r.arrival_to.samples)))),
    h('h2', {}, 'Over time'),
    h('p', { class: 'legend' }, rangePicker(), h('span', { class: 'p50' }, '— p50'), h('span', { class: 'p99' }, '— p99')),
    series.size === 0 ? h('p', { class: 'muted' }, 'No block has gone through yet.') :
      h('div', { class: 'charts' }, [...series].map(([k, pts]) => h('figure', { 'data-chart': k }, h('figcaption', {}, k), chart(pts)))),
  ];
}

// ---- rates ----------------------------------------------------------------

async function ratesPage() {
  const rates = await get('/api/rates?range=' + chartRange);
  const pts = r => r.points.map(p => ({ ...p, t: new Date(p.at).getTime() }));
  const stages = rates.filter(r => r.kind === 'stage'), edges = rates.filter(r => r.kind === 'edge');
  const last = r => r.points[r.points.length - 1] || {};
  return [
    h('h1', {}, 'Rates'),
    h('p', { class: 'muted' }, 'What each stage read and wrote per second, and what went along each edge of the graph, between the dashboard\'s samples.'),
    h('p', { class: 'legend' }, rangePicker(), h('span', { class: 'in' }, '— in'), h('span', { class: 'out' }, '— out')),
    rates.length === 0 ? h('p', { class: 'muted' }, 'No two samples yet: rates appear after the second.') : [
      h('table', { id: 'rates' },
        h('tr', {}, h('th', {}, 'stage or edge'), ...['blocks/s', 'MB/s', 'out blocks/s', 'out MB/s', 'runs/s'].map(c => h('th', { class: 'num' }, c))),
        [...stages, ...edges].map(r => {
          const p = last(r), name = r.kind === 'stage' ? r.stage : `${r.from} → ${r.to}`;
          return h('tr', { 'data-rate': name },
            h('td', {}, name), h('td', { class: 'num' }, (p.blocks_per_second || 0).toFixed(2)), h('td', { class: 'num' }, ((p.bytes_per_second || 0) / 1e6).toFixed(3)),
            h('td', { class: 'num' }, r.kind === 'stage' ? (p.out_blocks_per_second || 0).toFixed(2) : ''),
            h('td', { class: 'num' }, r.kind === 'stage' ? ((p.out_bytes_per_second || 0) / 1e6).toFixed(3) : ''),
            h('td', { class: 'num' }, r.kind === 'stage' ? (p.runs_per_second || 0).toFixed(2) : ''));
        })),
      h('h2', {}, 'Stages, MB/s'),
      h('div', { class: 'charts' }, stages.map(r => h('figure', { 'data-chart': 'stage ' + r.stage }, h('figcaption', {}, r.stage),
        chart(pts(r), [['bytes_per_second', 'in'], ['out_bytes_per_second', 'out']], mbps)))),
      h('h2', {}, 'Edges, blocks/s'),
      h('div', { class: 'charts' }, edges.map(r => h('figure', { 'data-chart': `${r.from} → ${r.to}` }, h('figcaption', {}, `${r.from} → ${r.to}`),
        chart(pts(r), [['blocks_per_second', 'in']], v => rate(v, 'blk'))))),
    ],
  ];
}

// ---- sites ----------------------------------------------------------------

async function sitesPage() {
  const sites = await get('/api/sites');
  const silent = sites.filter(x => x.silent).length, gaps = sites.filter(x => x.missing > 0).length;
  return [
    h('h1', {}, 'Sites'),
    h('p', { class: 'muted' }, `Each agent instance shipping to a source queue, from its latest 256 sequence numbers. ${sites.length} sites; `,
      h('span', { class: silent ? 'bad' : '' }, `${silent} silent`), ', ', h('span', { class: gaps ? 'bad' : '' }, `${gaps} with gaps`), '.'),
    sites.length === 0 ? h('p', {}, 'No site has shipped a block yet.') :
      h('table', { id: 'sites' },
        h('tr', {}, h('th', {}, 'queue'), h('th', {}, 'site'), h('th', {}, 'status'), h('th', { class: 'num' }, 'last seq'), h('th', {}, 'last block'),
          h('th', { class: 'num' }, 'age'), h('th', { class: 'num' }, 'missing'), h('th', { class: 'num' }, 'bytes/s'), h('th', { class: 'num' }, 'kernel drops')),
        sites.map(x => h('tr', { 'data-site': `${x.queue} ${x.site}`, 'data-missing': x.missing, 'data-silent': String(x.silent) },
          h('td', {}, x.queue), h('td', {}, x.site),
          h('td', { class: x.silent ? 'bad' : 'ok' }, x.silent ? 'silent' : x.ended ? 'ended' : 'shipping'),
          h('td', { class: 'num' }, x.last_seq), h('td', { class: 'name' }, x.last ? x.last.name : '–'),
          h('td', { class: 'num' + (x.silent ? ' bad' : '') }, x.last ? dur(x.age_ns) : '–'),
          h('td', { class: 'num' + (x.missing ? ' bad' : '') }, x.missing),
          h('td', { class: 'num' }, x.bytes_per_second ? bytes(x.bytes_per_second) + '/s' : '–'),
          h('td', { class: 'num' + (x.kernel_dropped ? ' bad' : '') }, x.kernel_dropped)))),
  ];
}

// ---- faulty ---------------------------------------------------------------

async function faultyPage() {
  const fb = await get('/api/faulty');
  const queues = [...new Set(fb.map(b => b.queue))];
  return [
    h('h1', {}, 'Faulty blocks'),
    h('p', { class: 'muted' }, 'Blocks a stage or consumer set aside after its last attempt, with the error it gave. Retrying puts a block back in its queue for that subscriber.'),
    fb.length === 0 ? h('p', {}, 'None.') : [
      me.admin ? h('p', {}, queues.map(q => actionButton(`Retry all of ${q}`, 'retry', () => post('/api/retry', { queue: q })))) : [],
      h('table', { id: 'faulty' },
        h('tr', {}, h('th', {}, 'block'), h('th', {}, 'stage or group'), h('th', { class: 'num' }, 'attempts'), h('th', {}, 'block time'), h('th', {}, 'error'), me.admin ? h('th', {}, '') : []),
        fb.map(b => h('tr', { 'data-block': b.block, 'data-group': b.stage || b.group },
          h('td', {}, b.block), h('td', {}, b.stage || b.group), h('td', { class: 'num' }, b.attempts), h('td', {}, when(b.time)),
          h('td', { class: 'error' }, b.error),
          me.admin ? h('td', {}, actionButton('Retry', 'retry', () => post('/api/retry', { queue: b.queue, block: b.block }))) : []))),
    ],
  ];
}

// ---- jobs -----------------------------------------------------------------

async function jobsPage() {
  const jobs = await get('/api/jobs');
  return [
    h('h1', {}, 'Jobs'),
    jobs.length === 0 ? h('p', {}, 'No job submitted yet.') :
      h('table', { id: 'jobs' },
        h('tr', {}, h('th', {}, 'job'), h('th', {}, 'owner'), h('th', {}, 'state'), h('th', {}, 'submitted'), h('th', {}, 'why'), h('th', {}, '')),
        jobs.map(j => h('tr', { 'data-job': j.name },
          h('td', {}, j.name), h('td', {}, j.owner || ''), h('td', { class: j.state === 'rejected' ? 'bad' : '' }, j.state), h('td', {}, when(j.submitted)),
          h('td', {}, j.reason || j.suspended || (j.warnings || []).join('; ')),
          h('td', {}, j.state === 'accepted' && (me.admin || (me.user && me.user === j.owner))
            ? actionButton('Retract', 'retract', () => post('/api/retract', { job: j.name })) : [])))),
  ];
}

// ---- workers --------------------------------------------------------------

async function workersPage() {
  const ws = await get('/api/workers');
  const now = Date.now();
  return [
    h('h1', {}, 'Remote workers'),
    h('p', { class: 'muted' }, 'Machines running stage runs for this server (plumb worker), seen in the last 30 s.'),
    ws.length === 0 ? h('p', {}, 'None: every stage runs on the server.') :
      h('table', { id: 'workers' },
        h('tr', {}, h('th', {}, 'worker'), h('th', {}, 'host'), h('th', { class: 'num' }, 'slots'), h('th', {}, 'runs held'),
          h('th', { class: 'num' }, 'done'), h('th', { class: 'num' }, 'lost'), h('th', { class: 'num' }, 'last seen')),
        ws.map(w => h('tr', { 'data-worker': w.worker },
          h('td', {}, w.worker), h('td', {}, w.host), h('td', { class: 'num' }, w.slots),
          h('td', {}, w.runs.length ? w.runs.join(', ') : h('span', { class: 'muted' }, 'idle')),
          h('td', { class: 'num' }, w.done), h('td', { class: 'num' + (w.lost ? ' bad' : '') }, w.lost),
          h('td', { class: 'num' }, dur(now - new Date(w.last_seen).getTime(), true) + ' ago')))),
  ];
}

// ---- routing --------------------------------------------------------------

function route() {
  const parts = (location.hash.replace(/^#\/?/, '') || 'graph').split('/').map(decodeURIComponent);
  switch (parts[0]) {
    case 'queues': return ['queues', queuesPage];
    case 'queue': return ['queues', () => queuePage(parts[1])];
    case 'windows': return ['windows', windowsPage];
    case 'window': return ['windows', () => windowPage(parts[1], parts[2], parts[3])];
    case 'latency': return ['latency', latencyPage];
    case 'workers': return ['workers', workersPage];
    case 'rates': return ['rates', ratesPage];
    case 'sites': return ['sites', sitesPage];
    case 'faulty': return ['faulty', faultyPage];
    case 'jobs': return ['jobs', jobsPage];
    default: return ['graph', graphPage];
  }
}

let timer = null, generation = 0;

async function render() {
  clearTimeout(timer);
  const gen = ++generation;
  const [nav, page] = route();
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.nav === nav);
  const err = document.getElementById('error');
  try {
    me = await get('/api/me');
    const kids = await page();
    if (gen !== generation) return; // the user moved on meanwhile
    document.getElementById('view').replaceChildren(...kids.flat());
    err.hidden = true;
    document.getElementById('updated').textContent = 'updated ' + new Date().toISOString().slice(11, 19) + 'Z';
    document.body.dataset.ready = nav;
  } catch (e) {
    if (gen !== generation) return;
    err.textContent = `Could not load this page: ${e.message}. Retrying.`;
    err.hidden = false;
  }
  timer = setTimeout(render, REFRESH_MS);
}

window.addEventListener('hashchange', () => { document.getElementById('flash').hidden = true; render(); });
render();
