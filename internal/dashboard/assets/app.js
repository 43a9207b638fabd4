// The Rover job dashboard. It reads the job from the server-sent events of
// api/stream and draws it. Every string that comes from the job (node ids,
// job names, exception messages, tracebacks) goes into the page as text:
// through textContent or text nodes, never as markup.
'use strict';

(function () {
  const SVG = 'http://www.w3.org/2000/svg';
  const MAX_SAMPLES = 3600;
  const MAX_EVENTS = 500;

  const state = { job: null, history: [], events: [], lastSeq: 0 };

  // el makes an element; children that are strings become text nodes.
  function el(tag, cls, ...children) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    }
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function byId(id) { return document.getElementById(id); }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  // num reads a protojson number: int64 fields come as strings.
  function num(v) {
    if (v === null || v === undefined || v === '') return 0;
    const n = Number(v);
    return Number.isFinite(n) ? n : 0;
  }

  function timeOfNanos(v) {
    const ms = num(v) / 1e6;
    return ms > 0 ? new Date(ms) : null;
  }

  function clock(d) {
    return d ? d.toLocaleTimeString([], { hour12: false }) : '—';
  }

  function secs(v) {
    const s = num(v);
    if (s === 0) return '0';
    return s < 10 ? s.toFixed(2) + ' s' : s.toFixed(1) + ' s';
  }

  function orDash(s) { return s === null || s === undefined || s === '' ? '—' : String(s); }

  // fillTable replaces a table's rows; rows is a list of [cells, rowClass].
  function fillTable(id, rows, emptyText) {
    const body = byId(id).tBodies[0];
    clear(body);
    if (rows.length === 0) {
      const cols = byId(id).tHead.rows[0].cells.length;
      const td = el('td', 'empty', emptyText);
      td.colSpan = cols;
      body.appendChild(el('tr', null, td));
      return;
    }
    for (const [cells, cls] of rows) {
      const tr = el('tr', cls || null);
      for (const c of cells) tr.appendChild(c instanceof Node && c.nodeName === 'TD' ? c : el('td', null, c));
      body.appendChild(tr);
    }
  }

  function numCell(v) { return el('td', 'num', String(v)); }

  function jobState(job) {
    switch (job.jobState) {
      case 'JOB_STATE_RUNNING': return 'running';
      case 'JOB_STATE_SUCCEEDED': return 'succeeded';
      case 'JOB_STATE_FAILED': return 'failed';
      default: return 'unknown';
    }
  }

  function phase(job) {
    if (jobState(job) !== 'running') return jobState(job);
    if (job.roundOpen) return 'collecting nodes';
    return (job.goodput && job.goodput.phase) || 'training';
  }

  function renderHeader(job) {
    const name = job.runId || '(unnamed)';
    byId('job-name').textContent = name;
    document.title = 'Rover job ' + name;
    const badge = byId('job-state');
    badge.textContent = jobState(job);
    badge.className = 'badge ' + jobState(job);
    byId('job-phase').textContent = phase(job);
    byId('job-reason').textContent = job.reason || '';
    const g = job.goodput || {};
    const p = job.progress || {};
    const items = [
      ['Round', num(job.round)],
      ['World size', num(job.worldSize)],
      ['Restarts', num(job.restartCount) + ' of ' + num(job.maxRestarts)],
      ['Relaunches', num(job.relaunches)],
      ['Step', p.step !== undefined && num(p.step) >= 0 ? num(p.step) : '—'],
      ['Goodput', g.ratio !== undefined ? (num(g.ratio) * 100).toFixed(1) + ' %' : '—'],
      ['Wall time', secs(g.wallSeconds)],
      ['Platform', orDash(job.platform)],
    ];
    const dl = byId('summary');
    clear(dl);
    for (const [k, v] of items) dl.appendChild(el('div', null, el('dt', null, k), el('dd', null, String(v))));
  }

  // nodeRows joins the agents the master knows with the nodes its platform
  // runs, by node id.
  function nodeRows(job) {
    const rows = new Map();
    for (const n of job.nodes || []) {
      rows.set(n.nodeId, {
        id: n.nodeId, rank: num(n.nodeRank), group: '', host: n.host || n.addr,
        state: n.lost ? 'lost' : (num(n.groupRank) >= 0 ? 'in world' : 'waiting'),
        relaunches: String(num(n.relaunchCount)), lastExit: '', why: n.lostReason || '',
      });
    }
    for (const m of job.managedNodes || []) {
      const r = rows.get(m.nodeId) || { id: m.nodeId, rank: num(m.rank), host: '', why: '' };
      r.group = m.group;
      r.state = m.state + (r.state === 'lost' ? ' (lost)' : '');
      r.host = m.host || r.host;
      r.relaunches = num(m.relaunches) + ' of ' + num(m.budget);
      r.lastExit = m.lastExit || '';
      r.why = m.reason || r.why;
      rows.set(m.nodeId, r);
    }
    return [...rows.values()].sort((a, b) => a.rank - b.rank || String(a.id).localeCompare(String(b.id)));
  }

  function renderNodes(job) {
    const rows = nodeRows(job).map((r) => {
      const bad = /lost|Failed/.test(r.state);
      return [[r.id, numCell(r.rank), orDash(r.group), r.state, orDash(r.host), r.relaunches, orDash(r.lastExit), orDash(r.why)], bad ? 'bad' : ''];
    });
    fillTable('nodes', rows, 'no node has joined yet');
  }

  function exitText(f) {
    if (num(f.signal) !== 0) return 'signal ' + num(f.signal);
    return 'exit ' + num(f.exitCode);
  }

  function renderFailures(job) {
    const fs = (job.failures || []).slice().reverse();
    const rows = fs.map((f) => {
      let tb = '—';
      const text = f.traceback || f.logTail || '';
      if (text) {
        tb = el('td', null, el('details', null, el('summary', null, f.traceback ? 'traceback' : 'log tail'), el('pre', null, text)));
      }
      const cause = el('td', 'bad', orDash(f.cause));
      if (f.diagnosis) cause.title = f.diagnosis;
      return [[clock(timeOfNanos(f.timeUnixNanos)), numCell(num(f.round)), orDash(f.nodeId), numCell(num(f.rank)), exitText(f),
        cause, orDash(f.action), orDash(f.message), tb], 'failure'];
    });
    fillTable('failures', rows, 'no worker has failed');
  }

  function renderRestarts(job) {
    const rs = ((job.goodput && job.goodput.latestRestarts) || []).slice().reverse();
    const rows = rs.map((r) => [[numCell(num(r.round)), num(r.newRound) ? numCell(num(r.newRound)) : '—', orDash(r.reason),
      r.done ? secs(r.downtimeSeconds) : secs(r.downtimeSeconds) + ' so far', secs(r.detectSeconds), secs(r.stopSeconds),
      secs(r.rendezvousSeconds), secs(r.spawnSeconds), secs(r.restoreSeconds), secs(r.firstStepSeconds),
      r.resumed ? 'step ' + num(r.resumedStep) : '—', numCell(num(r.lostSteps))], '']);
    fillTable('restarts', rows, 'no restart yet');
  }

  function renderCheckpoints(job) {
    const g = job.goodput || {};
    const step = num(job.checkpointStep);
    const dl = byId('checkpoints');
    clear(dl);
    const items = [['Committed step', step >= 0 ? step : 'none'], ['Saves', num(g.saves)], ['Steps lost', num(g.lostSteps)]];
    for (const [k, v] of items) dl.appendChild(el('div', null, el('dt', null, k), el('dd', null, String(v))));
  }

  function renderCheckpointEvents() {
    const ul = byId('checkpoint-events');
    clear(ul);
    const evs = state.events.filter((e) => /checkpoint/i.test(e.kind)).slice(-10).reverse();
    for (const e of evs) ul.appendChild(el('li', null, clock(new Date(e.time)) + ' ' + e.message));
  }

  function renderNodeCheck(job) {
    const nc = job.nodeCheck;
    const p = byId('nodecheck-summary');
    if (!nc) {
      p.textContent = 'no node check ran';
      fillTable('nodecheck', [], 'no verdicts');
      return;
    }
    let s = 'round ' + num(nc.round) + ', stage ' + num(nc.stage);
    s += nc.running ? ': running' : (nc.cancelled ? ': cancelled' : ': done');
    if (num(nc.medianMicros) > 0) s += ', median ' + (num(nc.medianMicros) / 1000).toFixed(1) + ' ms';
    p.textContent = s;
    const rows = (nc.verdicts || []).map((v) => [[v.nodeId, v.verdict, v.excluded ? 'yes' : 'no',
      num(v.timeMicros) > 0 ? (num(v.timeMicros) / 1000).toFixed(1) + ' ms' : '—', orDash(v.reason)],
    v.verdict === 'faulty' ? 'bad' : (v.verdict === 'straggler' ? 'warn' : '')]);
    fillTable('nodecheck', rows, 'no verdicts yet');
  }

  function renderProgress(job) {
    const p = job.progress || {};
    const hang = byId('hang');
    hang.hidden = !p.hung;
    hang.textContent = p.hung ? 'The job hangs: ' + (p.hangReason || 'no progress') : '';
    const st = p.stragglers || [];
    byId('stragglers').textContent = (st.length ? 'Stragglers: ' + st.join(', ') + (p.stragglerReason ? ' (' + p.stragglerReason + ')' : '') : 'No stragglers.') +
      (num(p.hangs) > 0 ? ' Hangs so far: ' + num(p.hangs) + '.' : '');
    const rows = (p.nodes || []).map((n) => [[n.nodeId, numCell(num(n.nodeRank)), numCell(num(n.step)), numCell(num(n.stepSeconds).toFixed(3)),
      numCell(num(n.busySeconds).toFixed(3)), numCell(num(n.computeSeconds).toFixed(3)), numCell(num(n.waitSeconds).toFixed(3)),
      numCell(num(n.samples)), n.straggler ? 'yes' : 'no'], n.straggler ? 'warn' : '']);
    fillTable('steptimes', rows, 'no step times yet');
  }

  function renderEvents() {
    const rows = state.events.slice().reverse().map((e) => [[numCell(e.seq), clock(new Date(e.time)), orDash(e.severity), e.kind,
      orDash(e.node), e.round ? numCell(e.round) : '—', e.message], e.severity === 'error' ? 'bad' : (e.severity === 'warning' ? 'warn' : '')]);
    fillTable('events', rows, 'no events yet');
  }

  // chart draws a line chart of points [{t: Date, v: number}] into the
  // element with the id; yMax fixes the top of the scale (0: the data's).
  function chart(id, points, yMax, unit) {
    const box = byId(id);
    clear(box);
    box.dataset.points = String(points.length);
    box.dataset.last = points.length ? String(points[points.length - 1].v) : '0';
    const W = 600, H = 200, L = 48, R = 10, T = 10, B = 24;
    const root = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img' });
    root.appendChild(svg('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }));
    root.appendChild(svg('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
    if (points.length === 0) {
      root.appendChild(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no samples yet'));
      box.appendChild(root);
      return;
    }
    const t0 = points[0].t.getTime(), t1 = Math.max(points[points.length - 1].t.getTime(), t0 + 1000);
    const top = yMax || Math.max(1e-9, ...points.map((p) => p.v)) * 1.1;
    const x = (t) => L + (t - t0) / (t1 - t0) * (W - L - R);
    const y = (v) => H - B - Math.min(v, top) / top * (H - T - B);
    const line = svg('polyline', { class: 'line', points: points.map((p) => x(p.t.getTime()).toFixed(1) + ',' + y(p.v).toFixed(1)).join(' ') });
    root.appendChild(line);
    const fmt = (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)) + unit;
    root.appendChild(svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }, fmt(top)));
    root.appendChild(svg('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, '0'));
    root.appendChild(svg('text', { x: L, y: H - 6 }, clock(new Date(t0))));
    root.appendChild(svg('text', { x: W - R, y: H - 6, 'text-anchor': 'end' }, clock(new Date(t1))));
    const last = points[points.length - 1];
    root.appendChild(svg('text', { x: W - R, y: T + 8, 'text-anchor': 'end' }, 'now ' + fmt(last.v)));
    box.appendChild(root);
  }

  // timeline draws the rounds the samples saw, one band each, and a mark
  // at each failure.
  function timeline(job) {
    const box = byId('rounds');
    clear(box);
    const hs = state.history;
    // One unit a pixel, so that the labels keep their size on wide screens.
    const W = Math.max(300, Math.round(box.getBoundingClientRect().width) || 600), H = 56, L = 10, R = 10;
    const root = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img' });
    box.appendChild(root);
    if (hs.length === 0) {
      root.appendChild(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no samples yet'));
      return;
    }
    // The axis runs from the first sample to the newest sample or failure.
    const failures = ((job && job.failures) || []).map((f) => [f, timeOfNanos(f.timeUnixNanos)]).filter(([, t]) => t);
    const t0 = new Date(hs[0].time).getTime();
    const t1 = Math.max(new Date(hs[hs.length - 1].time).getTime(), t0 + 1000, ...failures.map(([, t]) => t.getTime()));
    const x = (t) => L + (t - t0) / (t1 - t0) * (W - L - R);
    const bands = [];
    for (const s of hs) {
      const t = new Date(s.time).getTime();
      const b = bands[bands.length - 1];
      if (b && b.round === s.round) b.end = t;
      else { if (b) b.end = t; bands.push({ round: s.round, start: t, end: t }); }
    }
    bands.forEach((b, i) => {
      const x0 = x(b.start), x1 = Math.max(x(b.end), x0 + 2);
      root.appendChild(svg('rect', { class: 'round' + (i % 2 ? ' odd' : ''), x: x0, y: 6, width: x1 - x0, height: 26 }));
      if (x1 - x0 > 30) root.appendChild(svg('text', { x: x0 + 4, y: 24 }, 'round ' + b.round));
    });
    for (const [f, t] of failures) {
      if (t.getTime() < t0) continue;
      const fx = x(t.getTime());
      const mark = svg('line', { class: 'failure', x1: fx, y1: 2, x2: fx, y2: 36 });
      mark.appendChild(svg('title', {}, (f.cause || 'failure') + ' on ' + (f.nodeId || '?')));
      root.appendChild(mark);
    }
    root.appendChild(svg('text', { x: L, y: 50 }, clock(new Date(t0))));
    root.appendChild(svg('text', { x: W - R, y: 50, 'text-anchor': 'end' }, clock(new Date(t1))));
  }

  function renderCharts() {
    const pts = state.history.map((s) => ({ t: new Date(s.time), rate: s.stepRate, goodput: s.goodput * 100 }));
    chart('chart-steprate', pts.map((p) => ({ t: p.t, v: p.rate })), 0, '');
    chart('chart-goodput', pts.map((p) => ({ t: p.t, v: p.goodput })), 100, '%');
    timeline(state.job);
  }

  function renderJob() {
    const job = state.job;
    if (!job) return;
    renderHeader(job);
    renderNodes(job);
    renderFailures(job);
    renderRestarts(job);
    renderCheckpoints(job);
    renderNodeCheck(job);
    renderProgress(job);
  }

  function banner(text) {
    const b = byId('banner');
    b.hidden = !text;
    b.textContent = text || '';
  }

  function setConn(text, cls) {
    const c = byId('conn');
    c.textContent = text;
    c.className = 'conn ' + cls;
  }

  // Messages come in bursts (every event of the log on connecting): they
  // change the state at once, and the page is drawn again once a frame.
  const dirty = new Set();
  const renderers = {
    job: renderJob,
    charts: renderCharts,
    events: () => { renderEvents(); renderCheckpointEvents(); },
  };
  function schedule(what) {
    if (dirty.size === 0) requestAnimationFrame(flush);
    dirty.add(what);
  }
  function flush() {
    const what = [...dirty];
    dirty.clear();
    for (const w of what) renderers[w]();
  }

  function connect() {
    const es = new EventSource('api/stream');
    let opens = 0;
    es.onopen = () => {
      opens++;
      document.body.dataset.connections = String(opens);
      setConn('live', 'live');
    };
    es.onerror = () => setConn('reconnecting…', 'down');
    es.addEventListener('job', (m) => {
      state.job = JSON.parse(m.data);
      banner('');
      schedule('job');
      schedule('charts'); // the timeline marks the job's failures
    });
    es.addEventListener('fault', (m) => banner(JSON.parse(m.data).message));
    es.addEventListener('history', (m) => {
      state.history = JSON.parse(m.data) || [];
      schedule('charts');
    });
    es.addEventListener('sample', (m) => {
      state.history.push(JSON.parse(m.data));
      if (state.history.length > MAX_SAMPLES) state.history.splice(0, state.history.length - MAX_SAMPLES);
      schedule('charts');
    });
    es.addEventListener('event', (m) => {
      const e = JSON.parse(m.data);
      if (e.seq <= state.lastSeq) return;
      state.lastSeq = e.seq;
      state.events.push(e);
      if (state.events.length > MAX_EVENTS) state.events.splice(0, state.events.length - MAX_EVENTS);
      schedule('events');
    });
  }

  document.addEventListener('DOMContentLoaded', () => {
    renderEvents();
    renderCharts();
    connect();
  });
})();
