// The job's page, live (agent/status/page.hpp). The agent rendered every panel it could; this script follows
// /events (the model, pushed every second), draws the progress history of /progress.json, and opens stacks (/stacks)
// and log tails (/logs) on a click. No library, and nothing fetched but the agent's own routes. Sized for 1,024 ranks:
// rows are grouped by node, nodes are folded when the job has more than FOLD_OVER ranks, a filter picks rows, and an
// update rewrites at most MAX_ROWS rank rows.
(function () {
  'use strict';
  const MAX_ROWS = 256;
  const FOLD_OVER = 64;
  const HEAT_ROWS = 256;
  const $ = (sel) => document.querySelector(sel);
  const esc = (s) => String(s === undefined || s === null ? '' : s).replace(/[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
  let model = JSON.parse($('#model').textContent);
  let history = null;        // /progress.json
  const unfolded = new Set();  // nodes opened by a click (large jobs)
  const folded = new Set();    // nodes closed by a click (small jobs)
  let filterText = '';
  let stackRank = null;

  // ---- words and numbers ----
  function secs(s) {
    if (typeof s !== 'number') return '-';
    if (s < 1) return Math.round(s * 1000) + ' ms';
    if (s < 60) return s.toFixed(1) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s';
    return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  }
  function num(v, digits) { return typeof v === 'number' ? v.toFixed(digits) : '-'; }
  function bytes(n) {
    if (typeof n !== 'number') return '-';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + units[i];
  }
  function clock(t) { return typeof t === 'number' ? new Date(t * 1000).toLocaleTimeString() : '-'; }
  function stateWords(r) {
    if (r.state === 'exited') return 'exited ' + (r.signal || r.exitcode);
    if (r.state === 'no_groups') return 'no groups';
    return String(r.state || '').replace(/_/g, ' ');
  }
  function ended() { return ['failed', 'succeeded', 'ended'].includes(model.job && model.job.state); }

  // ---- the filter: numbers and ranges pick ranks (any of them), "node N" a node, other words must all appear ----
  function matcher(text) {
    const tokens = text.toLowerCase().split(/[\s,]+/).filter(Boolean);
    const ranks = [], nodes = [], words = [];
    for (let i = 0; i < tokens.length; i++) {
      const t = tokens[i];
      let m;
      if (t === 'node' && i + 1 < tokens.length) { nodes.push(tokens[++i]); continue; }
      if ((m = /^(\d+)$/.exec(t))) { ranks.push([+m[1], +m[1]]); continue; }
      if ((m = /^(\d+)-(\d+)$/.exec(t))) { ranks.push([+m[1], +m[2]]); continue; }
      words.push(t);
    }
    return (r) => {
      if (ranks.length && !ranks.some(([a, b]) => r.rank >= a && r.rank <= b)) return false;
      if (nodes.length && !nodes.includes(String(r.node))) return false;
      const hay = [r.host, r.state, stateWords(r), r.op, r.signal].join(' ').toLowerCase();
      return words.every((w) => hay.includes(w));
    };
  }

  // ---- ranks, grouped by node ----
  function groups() {
    const byNode = new Map();
    for (const r of model.ranks || []) {
      const key = String(r.node === undefined ? '0' : r.node);
      if (!byNode.has(key)) byNode.set(key, []);
      byNode.get(key).push(r);
    }
    return [...byNode.entries()].sort((a, b) => a[1][0].rank - b[1][0].rank);
  }

  function spark(rank) {
    const series = history && history.ranks && history.ranks[rank];
    if (!series) return '';
    const points = series.slice(-60);
    const max = Math.max(1e-9, ...points.filter((v) => typeof v === 'number'));
    const step = 90 / Math.max(points.length - 1, 1);
    const xy = [];
    points.forEach((v, i) => {
      if (typeof v === 'number') xy.push((i * step).toFixed(1) + ',' + (15 - (v / max) * 14).toFixed(1));
    });
    return '<svg class="spark" viewBox="0 0 90 16" data-points="' + xy.length + '"><polyline points="' + xy.join(' ') +
      '"/></svg>';
  }

  function rowHtml(r, jobRate) {
    const slow = typeof r.rate === 'number' && typeof jobRate === 'number' && jobRate > 0 && r.rate < 0.5 * jobRate;
    const stack = r.local ? '<button class="stack" data-rank="' + r.rank + '">stack</button>' : '';
    return '<tr class="rank st-' + esc(r.state) + (slow ? ' slow' : '') + '" data-rank="' + r.rank + '">' +
      '<td class="r">' + r.rank + '</td><td>' + esc(r.node) + '</td><td>' + esc(r.host) + '</td><td class="r">' +
      esc(r.local_rank) + '</td><td class="r">' + esc(r.pid) + '</td><td class="state">' + esc(stateWords(r)) +
      '</td><td>' + esc(r.op === null ? '' : r.op) + (typeof r.seq === 'number' ? ' #' + r.seq : '') +
      '</td><td class="r">' + secs(r.in_state_s) + '</td><td class="r">' + esc(r.restarts) + '</td><td class="r">' +
      secs(r.lag_s) + '</td><td class="r rate">' + num(r.rate, 1) + '</td><td class="spark">' + spark(r.rank) +
      '</td><td>' + stack + '</td></tr>';
  }

  function nodeHead(key, rows, open) {
    const hosts = [...new Set(rows.map((r) => r.host))].join(', ');
    const counts = {};
    for (const r of rows) counts[stateWords(r).split(' ')[0]] = (counts[stateWords(r).split(' ')[0]] || 0) + 1;
    const states = Object.entries(counts).map(([s, n]) => n + ' ' + s).join(', ');
    const rates = rows.map((r) => r.rate).filter((v) => typeof v === 'number').sort((a, b) => a - b);
    const median = rates.length ? rates[Math.floor(rates.length / 2)].toFixed(1) + ' ops/s' : '';
    const hung = rows.some((r) => r.state === 'hung') ? ' · <b style="color:var(--bad)">hung rank</b>' : '';
    return '<tr class="node-head" data-node="' + esc(key) + '"><td colspan="13"><span class="caret">' +
      (open ? '▾' : '▸') + '</span> node ' + esc(key) + ' · ' + esc(hosts) + ' · ranks ' + rows[0].rank + '–' +
      rows[rows.length - 1].rank + ' · ' + esc(states) + (median ? ' · ' + median : '') + hung + '</td></tr>';
  }

  function renderRanks() {
    const filtering = filterText.trim() !== '';
    const match = matcher(filterText);
    const all = model.ranks || [];
    const big = all.length > FOLD_OVER;
    const many = groups().length > 1;
    const jobRate = model.job && model.job.job_rate;
    let html = '', shown = 0, matched = 0;
    for (const [key, rows] of groups()) {
      const picked = filtering ? rows.filter(match) : rows;
      if (!picked.length) continue;
      matched += picked.length;
      const open = filtering || (big ? unfolded.has(key) : !folded.has(key));
      if (many || big) html += nodeHead(key, rows, open);
      if (!open) continue;
      for (const r of picked) {
        if (shown >= MAX_ROWS) break;
        html += rowHtml(r, jobRate);
        shown++;
      }
    }
    $('#rank-rows').innerHTML = html;
    $('#shown').textContent = shown + ' of ' + all.length + ' ranks shown' +
      (matched > shown ? ' (' + (matched - shown) + ' more match: narrow the filter or open a node)' : '') +
      (big && !filtering ? '; click a node to open it' : '');
  }

  // ---- header, alerts, failure ----
  function renderTop() {
    const j = model.job || {};
    const parts = [j.state, 'attempt ' + j.attempts, (model.ranks || []).length + ' ranks on ' + Math.max(j.nodes || 1, 1) +
      ' node(s)', j.restarts + ' of ' + j.max_restarts + ' restarts used'];
    if (typeof j.job_rate === 'number') parts.push(j.job_rate.toFixed(1) + ' collectives/s');
    if (typeof j.newest_step === 'number') parts.push('checkpoint step ' + j.newest_step);
    $('#summary').textContent = parts.join(' · ');
    let alerts = '';
    for (const h of model.hangs || []) alerts += '<p class="alert hang">hang: ' + esc(h.words) + '</p>';
    for (const w of model.p2p_waits || []) alerts += '<p class="alert info">p2p wait: ' + esc(w.words) + '</p>';
    $('#alerts').innerHTML = alerts;
    const f = model.failure;
    $('#failure-panel').hidden = !f;
    if (f) $('#failure').textContent = f.summary || ('rank ' + f.rank + ' exit code ' + f.exitcode);
  }

  // ---- attempts: a bar per attempt over the job's time, and the table ----
  function renderAttempts() {
    const list = model.attempts || [];
    const now = model.job.now;
    if (list.length) {
      const t0 = list[0].formed_at;
      const span = Math.max(now - t0, 1);
      let svg = '<svg viewBox="0 0 1000 34" preserveAspectRatio="none">';
      for (const a of list) {
        const from = a.started_at || a.formed_at, to = a.ended_at || now;
        const x = ((from - t0) / span) * 1000, w = Math.max(((to - from) / span) * 1000, 2);
        svg += '<rect class="out-' + esc(a.outcome) + '" x="' + x.toFixed(1) + '" y="4" width="' + w.toFixed(1) +
          '" height="16" rx="2"><title>#' + a.attempt + ' ' + esc(a.outcome) + (a.cause ? ': ' + esc(a.cause.text) : '') +
          '</title></rect>';
      }
      svg += '<text x="0" y="32">' + clock(t0) + '</text><text x="1000" y="32" text-anchor="end">' + clock(now) +
        '</text></svg>';
      $('#timeline').innerHTML = svg;
    }
    let rows = '';
    for (const a of list) {
      const resume = a.checkpoints ? (typeof a.resume_step === 'number' ? 'step ' + a.resume_step : 'no step held') : '-';
      const notes = (a.notes || []).length ? '<br><span class="note">' + a.notes.map(esc).join('<br>') + '</span>' : '';
      rows += '<tr class="attempt out-' + esc(a.outcome) + '" data-attempt="' + a.attempt + '"><td class="r">' + a.attempt +
        '</td><td class="r">' + esc(a.restart_count) + '</td><td class="r">' + esc(a.round) + '</td><td class="r">' +
        esc(a.world_size) + '</td><td>' + clock(a.started_at || a.formed_at) + ', ' +
        (a.outcome === 'running' ? 'running ' : 'ran ') + secs(a.duration_s) + '</td><td class="outcome">' +
        esc(a.outcome) + '</td><td class="cause">' + esc(a.cause ? a.cause.text : '') + notes + '</td><td class="resume">' +
        resume + '</td></tr>';
    }
    $('#attempt-rows').innerHTML = rows;
  }

  // ---- checkpoints and nodes ----
  function renderCheckpoints() {
    const c = model.checkpoints;
    if (!c) {
      $('#checkpoints').innerHTML = '<p class="note">None held on this node (in-memory checkpoints: ' +
        '<code>ctrun_torch.checkpoint</code> and <code>--checkpoint-memory</code>, docs/checkpoints.md).</p>';
      return;
    }
    const step = (s) => (typeof s === 'number' && s >= 0 ? 'step ' + s : 'none');
    const share = c.limit_bytes ? Math.min(100, (100 * c.bytes) / c.limit_bytes) : 0;
    let html = '<dl class="kv"><dt>this node</dt><dd>' + (c.on ? 'on' : 'off for this attempt') + '</dd>' +
      '<dt>steps held</dt><dd>' + step(c.oldest_step) + ' to ' + step(c.newest_step) + '</dd>' +
      '<dt>memory</dt><dd><span class="bar"><span style="width:' + share.toFixed(1) + '%"></span></span> ' + bytes(c.bytes) +
      ' of ' + (c.limit_bytes ? bytes(c.limit_bytes) : 'no limit') + ' (--checkpoint-memory)</dd>';
    if (c.replicas > 0) {
      html += '<dt>replicas</dt><dd>' + c.replicas + ' other node(s): ' + step(c.replicated_step) +
        (typeof c.newest_step === 'number' && c.replicated_step >= 0 ? ', ' + (c.newest_step - c.replicated_step) +
          ' step(s) behind' : '') + (typeof c.replicated_age_s === 'number' ? ', ' + secs(c.replicated_age_s) + ' ago' : '') +
        '; ' + bytes(c.bytes_sent) + ' sent, ' + bytes(c.bytes_received) + ' received</dd>';
    }
    if ('spilled_step' in c) html += '<dt>spilled</dt><dd>' + step(c.spilled_step) + ' on disk (--checkpoint-dir)</dd>';
    html += '</dl>';
    if (Array.isArray(c.nodes) && c.nodes.length) {
      html += '<h3>Other nodes</h3><table><tr><th>node</th><th>steps</th><th>memory</th><th>replicated</th></tr>';
      for (const n of c.nodes) {
        html += '<tr><td>' + n.group_rank + '</td>' + (n.published ? '<td>' + step(n.oldest_step) + ' to ' +
          step(n.newest_step) + '</td><td>' + bytes(n.bytes) + '</td><td>' + step(n.replicated_step) + '</td>' :
          '<td colspan="3" class="note">has not published yet</td>') + '</tr>';
      }
      html += '</table>';
    }
    $('#checkpoints').innerHTML = html;
  }

  function renderNodes() {
    const n = model.nodes || {};
    let html = '<table><tr><th>node</th><th>host</th><th>ranks</th><th>hung</th><th>exited</th><th class="r">ops/s</th></tr>';
    for (const x of n.nodes || []) {
      html += '<tr><td>' + esc(x.node) + (x.self ? ' (this agent)' : '') + '</td><td>' + esc((x.hosts || []).join(', ')) +
        '</td><td>' + x.first_rank + '–' + x.last_rank + ' (' + x.ranks + ')</td><td>' + x.hung + '</td><td>' + x.exited +
        '</td><td class="r">' + num(x.median_rate, 1) + '</td></tr>';
    }
    html += '</table>';
    const s = n.self || {};
    html += '<dl class="kv" style="margin-top:8px"><dt>health checks failed here</dt><dd>' + (s.health_check_failures || 0) +
      '</dd><dt>step-outs of this node</dt><dd>' + (s.step_outs || 0) +
      (typeof s.cooldown_left_s === 'number' ? ' (cooldown: ' + secs(s.cooldown_left_s) + ' left)' : '') + '</dd>' +
      '<dt>spares waiting</dt><dd>' + (n.spares_waiting || 0) + '</dd></dl>';
    if ((n.events || []).length) {
      html += '<h3>Events</h3><table>';
      for (const e of n.events.slice().reverse()) html += '<tr><td>' + clock(e.time) + '</td><td>' + esc(e.kind) +
        '</td><td class="cause">' + esc(e.text) + '</td></tr>';
      html += '</table>';
    }
    $('#nodes').innerHTML = html;
  }

  // ---- progress: the job's throughput and a heat strip (a row per rank, a column per second) ----
  function renderProgress() {
    if (!history) return;
    const t = history.t || [], job = history.job || [];
    const values = job.filter((v) => typeof v === 'number');
    const max = Math.max(1e-9, ...values);
    const span = Math.max(-(t[0] || 0), 1);
    const xy = [];
    job.forEach((v, i) => {
      if (typeof v === 'number') xy.push((1000 + (t[i] / span) * 1000).toFixed(1) + ',' + (80 - (v / max) * 72).toFixed(1));
    });
    $('#throughput').innerHTML = '<svg viewBox="0 0 1000 90" preserveAspectRatio="none"><polyline points="' +
      xy.join(' ') + '"/><text x="4" y="10">' + max.toFixed(1) + ' collectives/s (median rank)</text><text x="4" y="88">' +
      secs(span) + ' ago</text><text x="996" y="88" text-anchor="end">now</text></svg>';
    const ranks = Object.keys(history.ranks || {}).map(Number).sort((a, b) => a - b);
    const canvas = $('#heat');
    if (!ranks.length || !t.length) return;
    const per = Math.ceil(ranks.length / HEAT_ROWS);  // ranks per row: the slowest of them is shown
    const rows = Math.ceil(ranks.length / per), cols = t.length;
    canvas.width = cols;
    canvas.height = rows;
    canvas.style.height = Math.min(Math.max(rows * 14, 40), 240) + 'px';
    const ctx = canvas.getContext('2d');
    const img = ctx.createImageData(cols, rows);
    for (let row = 0; row < rows; row++) {
      for (let c = 0; c < cols; c++) {
        let v = null;
        for (let k = row * per; k < Math.min((row + 1) * per, ranks.length); k++) {
          const x = history.ranks[ranks[k]][c];
          if (typeof x === 'number') v = v === null ? x : Math.min(v, x);
        }
        const ref = job[c];
        let rgb = [225, 229, 234];  // no record then
        if (v !== null && typeof ref === 'number' && ref > 0) {
          const q = v / ref;
          rgb = q >= 0.8 ? [46, 157, 87] : q >= 0.4 ? [216, 162, 28] : [210, 65, 58];
        } else if (v !== null) {
          rgb = [160, 170, 180];
        }
        const at = (row * cols + c) * 4;
        img.data[at] = rgb[0]; img.data[at + 1] = rgb[1]; img.data[at + 2] = rgb[2]; img.data[at + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    $('#history-note').innerHTML = 'Each row a rank' + (per > 1 ? ' group of ' + per + ' (its slowest)' : '') +
      ', each column ' + history.interval_s + ' s: <span class="legend"><span style="background:#2e9d57"></span>' +
      'at the median<span style="background:#d8a21c"></span>below 80 %<span style="background:#d2413a"></span>below 40 %' +
      '</span>. History: ' + cols + ' of ' + history.max_samples + ' samples, ' + bytes(history.memory_bytes) + ' of ' +
      bytes(history.max_bytes) + ' the agent keeps.';
  }

  function loadProgress() {
    fetch('/progress.json', { cache: 'no-store' }).then((r) => (r.ok ? r.json() : null)).then((h) => {
      if (!h) return;
      history = h;
      renderProgress();
      renderRanks();
    }).catch(() => {});
  }

  // ---- stacks and logs, on request ----
  function showStack(rank) {
    stackRank = rank;
    $('#stack').hidden = false;
    $('#stack-title').textContent = 'stack of rank ' + rank + ' (asking its worker...)';
    $('#stack-text').textContent = '';
    fetch('/stacks', { cache: 'no-store' }).then((r) => r.text()).then((text) => {
      if (stackRank !== rank) return;
      const parts = text.split(/^(?=stack of rank \d+ )/m);
      const mine = parts.find((p) => p.startsWith('stack of rank ' + rank + ' '));
      $('#stack-title').textContent = 'stack of rank ' + rank;
      $('#stack-text').textContent = mine || text;
    }).catch((e) => { $('#stack-text').textContent = 'no answer: ' + e; });
  }

  function logChoices() {
    const select = $('#log-rank');
    const local = (model.ranks || []).filter((r) => r.local);
    const want = ['all'].concat(local.map((r) => String(r.rank)));
    const have = [...select.options].map((o) => o.value);
    if (want.join() === have.join()) return;
    const chosen = select.value;
    select.innerHTML = want.map((v) => '<option value="' + v + '">' + (v === 'all' ? 'every rank on this node' :
      'rank ' + v) + '</option>').join('');
    if (want.includes(chosen)) select.value = chosen;
  }

  let logRequest = 0;  // only the newest request's answer is shown (an older one may be for another rank)
  function loadLogs() {
    const rank = $('#log-rank').value || 'all';
    const mine = ++logRequest;
    fetch('/logs?rank=' + encodeURIComponent(rank) + '&lines=200', { cache: 'no-store' })
      .then((r) => r.text()).then((text) => {
        if (mine !== logRequest) return;
        const pre = $('#log');
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.textContent = text || '(nothing written yet)';
        if (atEnd) pre.scrollTop = pre.scrollHeight;
      }).catch(() => {});
  }

  // ---- everything, from the model ----
  function render() {
    renderTop();
    renderRanks();
    renderAttempts();
    renderCheckpoints();
    renderNodes();
    logChoices();
  }

  function live(state, words) {
    const el = $('#live');
    el.className = 'live ' + state;
    el.textContent = words;
  }

  function follow() {
    if (!window.EventSource) {
      live('off', 'static: this browser has no EventSource');
      return;
    }
    const source = new EventSource('/events');
    source.onopen = () => live('', 'live');
    source.onmessage = (e) => {
      try {
        model = JSON.parse(e.data);
        render();
        if (ended()) live('ended', 'job ' + model.job.state);
      } catch (err) { /* a torn message: the next one comes in a second */ }
    };
    source.onerror = () => {
      if (ended()) { live('ended', 'job ' + model.job.state + ' (the agent has gone)'); source.close(); return; }
      if (source.readyState === EventSource.CLOSED) {  // refused (503: too many viewers) or gone: try again later
        live('off', 'not live (too many viewers, or the agent has gone): retrying');
        setTimeout(follow, 5000);
      } else {
        live('off', 'reconnecting');
      }
    };
  }

  // ---- wiring ----
  $('#filter').hidden = false;
  $('#filter').addEventListener('input', (e) => { filterText = e.target.value; renderRanks(); });
  $('#ranks').addEventListener('click', (e) => {
    const stack = e.target.closest('.stack');
    if (stack) {
      e.preventDefault();
      showStack(Number(stack.dataset.rank));
      return;
    }
    const head = e.target.closest('tr.node-head');
    if (head) {
      const key = head.dataset.node;
      const big = (model.ranks || []).length > FOLD_OVER;
      const set = big ? unfolded : folded;
      if (set.has(key)) set.delete(key); else set.add(key);
      renderRanks();
    }
  });
  $('#log-rank').addEventListener('change', () => {
    $('#log').textContent = '(loading)';  // never another rank's lines under this one's name
    loadLogs();
  });
  render();
  loadProgress();
  loadLogs();
  follow();
  setInterval(() => { if (!ended()) loadProgress(); }, 2000);
  setInterval(() => { if ($('#log-follow').checked && !ended()) loadLogs(); }, 2000);
})();
