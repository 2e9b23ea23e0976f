// ctxwarden inspector: plain JS, no build step. Reads the admin API only:
//   /admin/sessions, /admin/evictions (the decision table, same as `ctxwarden log --json`),
//   /admin/turns (per-turn tokens by class), /admin/chunk (exact text, recall query),
//   /admin/sent (the body a turn forwarded, while the proxy keeps it);
//   an event's `media` (images, audio, files of an evicted message) is named in its detail.
// Every string from the API goes into the page as text (textContent), never as HTML.
"use strict";

const CLASSES = ["PERMANENT", "STRUCTURAL", "TRANSIENT", "EPHEMERAL"];
const HUES = { PERMANENT: "#4e79a7", STRUCTURAL: "#59a14f", TRANSIENT: "#f28e2b",
               EPHEMERAL: "#e15759" };
const KEY = "ctxwarden.adminKey";
const $ = (id) => document.getElementById(id);
const state = { session: null, tenant: null, events: [], turns: [], chart: null, waiting: null };
window.inspector = state; // for tests and the curious: the data behind what is drawn

// ---- the admin API, with a key when the proxy asks for one ------------------------------
// A call about one session names its tenant (the sessions list gives each row's).
async function api(path, tenant) {
  for (;;) {
    const key = localStorage.getItem(KEY);
    const headers = key ? { Authorization: `Bearer ${key}` } : {};
    if (tenant) headers["X-Tenant-ID"] = tenant;
    const resp = await fetch(path, { headers });
    if (resp.status === 401 || resp.status === 403) {
      if (key) localStorage.removeItem(KEY);
      await askForKey();
      continue;
    }
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) {
      const msg = (body.error && body.error.message) || `${resp.status} ${resp.statusText}`;
      throw new Error(`${path}: ${msg}`);
    }
    return body;
  }
}

function askForKey() {
  const form = $("auth");
  form.hidden = false;
  $("auth-key").focus();
  if (!state.waiting) {
    state.waiting = new Promise((resolve) => {
      form.addEventListener("submit", function onSubmit(ev) {
        ev.preventDefault();
        const key = $("auth-key").value.trim();
        if (!key) return;
        localStorage.setItem(KEY, key);
        $("auth-key").value = "";
        form.hidden = true;
        form.removeEventListener("submit", onSubmit);
        state.waiting = null;
        resolve();
      });
    });
  }
  return state.waiting;
}

function showError(err) {
  const el = $("error");
  el.textContent = err ? String(err.message || err) : "";
  el.hidden = !err;
}

// ---- small DOM helpers ----------------------------------------------------------------
function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}
const fmt = (n) => Number(n).toLocaleString("en-US");
const when = (t) => new Date(t * 1000).toLocaleString();
const sum = (obj) => Object.values(obj || {}).reduce((a, b) => a + b, 0);

// ---- sessions -------------------------------------------------------------------------
async function loadSessions() {
  const { sessions } = await api("/admin/sessions");
  const body = $("sessions").tBodies[0];
  body.replaceChildren();
  for (const s of sessions) {
    const row = body.insertRow();
    row.dataset.session = s.session;
    row.dataset.tenant = s.tenant;
    row.tabIndex = 0;
    if (s.session === state.session && s.tenant === state.tenant) row.classList.add("selected");
    const id = cell(row, s.session, "mono");
    if (s.tenant !== "default") {  // a client key's tenant (keyed modes): under the id
      const t = document.createElement("div");
      t.className = "tenant";
      t.textContent = s.tenant;
      id.append(t);
    }
    cell(row, s.last_turn, "num");
    cell(row, `${s.evicted} · ${fmt(s.evicted_tokens)} tok`, "num");
    cell(row, s.recalled, "num");
    cell(row, new Date(s.last_time * 1000).toLocaleTimeString()).title = when(s.last_time);
    const open = () => {
      location.hash = `session=${encodeURIComponent(s.session)}&tenant=${encodeURIComponent(s.tenant)}`;
    };
    row.addEventListener("click", open);
    row.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
  }
  $("no-sessions").hidden = sessions.length > 0;
}

// ---- one session ----------------------------------------------------------------------
async function loadSession(session, tenant) {
  state.session = session;
  state.tenant = tenant;
  for (const row of $("sessions").tBodies[0].rows) {
    row.classList.toggle("selected", row.dataset.session === session &&
                        (!tenant || row.dataset.tenant === tenant));
  }
  const q = `session=${encodeURIComponent(session)}`;
  const [{ events }, { turns }] = await Promise.all([
    api(`/admin/evictions?${q}`, tenant), api(`/admin/turns?${q}`, tenant)]);
  state.events = events;
  state.turns = turns;
  $("session-view").hidden = false;
  $("session-id").textContent = session;
  const ev = events.filter((e) => e.action === "evict");
  const rc = events.filter((e) => e.action === "recall");
  $("session-summary").textContent =
    `${turns.length} turns seen; ${ev.length} chunks evicted (${fmt(ev.reduce((a, e) => a + e.tokens, 0))} tokens), ` +
    `${rc.length} passages recalled (${fmt(rc.reduce((a, e) => a + e.tokens, 0))} tokens).` +
    (turns.length ? ` Window ${fmt(turns[turns.length - 1].window)}, budget ${fmt(turns[turns.length - 1].budget)} tokens.` : "");
  drawChart(turns);
  drawEvents(events);
  $("detail").hidden = true;
}

function hatch(color) {
  const c = document.createElement("canvas");
  c.width = c.height = 8;
  const g = c.getContext("2d");
  g.strokeStyle = color;
  g.lineWidth = 2;
  g.beginPath();
  g.moveTo(0, 8); g.lineTo(8, 0); g.moveTo(-2, 2); g.lineTo(2, -2); g.moveTo(6, 10); g.lineTo(10, 6);
  g.stroke();
  return g.createPattern(c, "repeat");
}

function chartData(turns) {
  const labels = turns.map((t) => `t${t.turn}`);
  const sets = [];
  const add = (label, kind, klass, values, style) => {
    if (values.some((v) => v > 0)) sets.push({ label, kind, klass, data: values, stack: "ctx", ...style });
  };
  for (const k of CLASSES) {
    add(`${k} kept`, "kept", k, turns.map((t) => (t.kept || {})[k] || 0), { backgroundColor: HUES[k] });
  }
  add("stubs and framing", "other", null, turns.map((t) => Math.max(0, t.other || 0)), { backgroundColor: "#bab0ac" });
  for (const k of CLASSES) {
    add(`${k} recalled`, "recalled", k, turns.map((t) => (t.recalled || {})[k] || 0),
      { backgroundColor: "#ffffff", borderColor: HUES[k], borderWidth: 2 });
  }
  for (const k of CLASSES) {
    add(`${k} evicted`, "evicted", k, turns.map((t) => (t.evicted || {})[k] || 0),
      { backgroundColor: hatch(HUES[k]), borderColor: HUES[k], borderWidth: 1 });
  }
  sets.push({ label: "budget", kind: "budget", type: "line", data: turns.map((t) => t.budget),
    borderColor: "#222", borderDash: [6, 4], borderWidth: 2, pointRadius: 0, stepped: "middle",
    fill: false, order: -1 });
  return { labels, datasets: sets };
}

function drawChart(turns) {
  const data = chartData(turns);
  if (state.chart) state.chart.destroy();
  state.chart = new Chart($("timeline"), {
    type: "bar",
    data,
    options: {
      animation: false,
      maintainAspectRatio: false,
      scales: { x: { stacked: true, title: { display: true, text: "turn" } },
                y: { stacked: true, beginAtZero: true, title: { display: true, text: "tokens" } } },
      plugins: {
        legend: { position: "bottom", labels: { boxWidth: 14 } },
        tooltip: { callbacks: { footer: (items) => {
          const t = turns[items[0].dataIndex];
          return `in ${fmt(t.tokens_in)} → out ${fmt(t.tokens_out)} (budget ${fmt(t.budget)}, tools ${fmt(t.tools)})`;
        } } },
      },
      onClick: (_ev, elements) => {
        if (elements.length) pickTurn(turns[elements[0].index].turn);
      },
    },
  });
}

function drawEvents(events) {
  const body = $("events").tBodies[0];
  body.replaceChildren();
  events.forEach((e, i) => {
    const row = body.insertRow();
    row.dataset.index = i;
    row.dataset.turn = e.turn;
    row.tabIndex = 0;
    row.className = `action-${e.action}`;
    cell(row, e.turn, "num");
    cell(row, e.action);
    cell(row, e.class).style.color = HUES[e.class] || "";
    cell(row, fmt(e.tokens), "num");
    cell(row, e.score.toFixed(4), "num");
    cell(row, e.reason, "reason").title = e.reason;
    cell(row, e.preview, "preview").title = e.preview;
    const open = () => showDetail(i).catch(showError);
    row.addEventListener("click", open);
    row.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
  });
  $("no-events").hidden = events.length > 0;
}

function pickTurn(turn) {
  let first = null;
  for (const row of $("events").tBodies[0].rows) {
    const hit = Number(row.dataset.turn) === turn;
    row.classList.toggle("picked", hit);
    if (hit && !first) first = row;
  }
  if (first) first.scrollIntoView({ block: "nearest" });
}

async function showDetail(i) {
  const e = state.events[i];
  for (const row of $("events").tBodies[0].rows) row.classList.toggle("selected", Number(row.dataset.index) === i);
  const q = new URLSearchParams({ session: state.session, chunk_id: e.chunk_id, turn: String(e.turn) });
  const { chunk, recall } = await api(`/admin/chunk?${q}`, state.tenant);
  $("detail").hidden = false;
  $("detail-title").textContent = `Turn ${e.turn}: ${e.action} of chunk ${e.chunk_id}`;
  $("detail-meta").textContent =
    `${chunk.role} message from turn ${chunk.turn}, ${chunk.class}, ${fmt(chunk.tokens)} tokens; ` +
    `${e.action === "recall" ? "similarity" : "score"} ${e.score.toFixed(4)} (${e.policy}): ${e.reason}` +
    (e.media ? `; it held ${e.media}, stored whole: ` +
     `/admin/sessions/${encodeURIComponent(state.session)}/chunks/${e.chunk_id}` : "");
  $("detail-text").textContent = chunk.text;
  $("detail-query").hidden = !recall;
  $("detail-query-text").textContent = recall ? recall.query : "";
  showSent(e.turn);
  $("detail").scrollIntoView({ block: "nearest" });
}

// The body the turn forwarded (kept in the proxy's memory for each session's last turns):
// its latest answer only, when details are clicked in quick succession.
function showSent(turn) {
  const ask = (state.sentAsk = (state.sentAsk || 0) + 1);
  const out = $("detail-sent-text");
  out.textContent = "";
  const q = new URLSearchParams({ session: state.session, turn: String(turn) });
  api(`/admin/sent?${q}`, state.tenant).then(
    (body) => { if (ask === state.sentAsk) out.textContent = JSON.stringify(body, null, 2); },
    (err) => { if (ask === state.sentAsk) out.textContent = err.message; });
}

// ---- wiring ---------------------------------------------------------------------------
function fromHash(name) {
  const m = new RegExp(`(?:^|[#&])${name}=([^&]+)`).exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

async function refresh() {
  try {
    showError(null);
    await loadSessions();
    const s = fromHash("session");
    if (s) await loadSession(s, fromHash("tenant"));
    document.body.dataset.ready = "1";
  } catch (err) {
    showError(err);
  }
}

window.addEventListener("hashchange", refresh);
$("refresh").addEventListener("click", refresh);
refresh();
