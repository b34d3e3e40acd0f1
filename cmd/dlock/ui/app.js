// dlock console: renders each update the server pushes (server-sent
// events) into the tables; charts and the deadlock graph come drawn as SVG.
// Text from Redis goes in with textContent only.
"use strict";

const $ = (id) => document.getElementById(id);
let source = null;
let last = null;
let detailName = null;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return e;
}

function dur(ms) {
  if (ms == null) return "–";
  if (ms < 0) return "no expiry";
  if (ms < 1000) return ms + "ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
  return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
}

function who(c, owner) {
  if (!c) return el("span", { class: "sub" }, owner ? "unknown (another client)" : "–");
  const what = c.name && c.name !== c.program ? c.program + " “" + c.name + "”" : c.program || "?";
  return el("span", {}, el("strong", {}, what), el("span", { class: "sub" }, " on " + c.host + ", pid " + c.pid));
}

function lockLink(name) {
  const a = el("a", { class: "lock", href: "#lock=" + encodeURIComponent(name) }, name);
  return a;
}

function fill(table, rows, cols, empty) {
  const body = $(table).tBodies[0];
  if (rows.length === 0) {
    body.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: cols }, empty)));
    return;
  }
  body.replaceChildren(...rows);
}

function cell(v, cls) { return el("td", cls ? { class: cls } : {}, v); }

// The cards count every matching lock (the server counts them), not only
// the rows an update carries.
function renderCards(v) {
  const st = v.state;
  const stats = [
    ["Held locks", v.held],
    ["Waiters", v.waiters],
    ["Fair queues", v.queues.total],
    ["Semaphores", v.semaphores.total],
    ["Elections", st.elections.length],
    ["Deadlocks", st.deadlocks.length, st.deadlocks.length > 0],
  ];
  $("cards").replaceChildren(...stats.map(([k, v, alert]) =>
    el("div", { class: "stat" + (alert ? " alert" : "") }, el("div", { class: "v" }, v), el("div", { class: "k" }, k))));
}

function renderLocks(st, matched) {
  const rows = st.locks.filter((l) => !l.semaphore).map((l) => {
    const h = l.holders[0];
    const kind = l.kind + (l.mode ? " (" + l.mode + ")" : "");
    const holder = h ? who(h.client, h.owner) : el("span", { class: "sub" }, "free, queued");
    if (l.holders.length > 1) holder.append(el("span", { class: "sub" }, " +" + (l.holders.length - 1) + " more"));
    const held = l.held_for_ms == null ? "–" : (l.held_before_start ? "≥ " : "") + dur(l.held_for_ms);
    const tr = el("tr", { class: "clickable", "data-lock": l.name },
      el("td", {}, lockLink(l.name)), el("td", {}, el("span", { class: "kind " + l.kind }, kind)),
      el("td", {}, holder), cell(held, "num"), cell(l.ttl_ms == null ? "–" : dur(l.ttl_ms), "num"),
      cell(l.holds, "num"), cell(l.waiters, "num" + (l.waiters > 0 ? " hot" : "")),
      cell(l.fencing_token == null ? "–" : l.fencing_token, "num mono"));
    tr.addEventListener("click", (e) => { if (e.target.tagName !== "A") openLock(l.name); });
    return tr;
  });
  fill("locks", rows, 8, st.sampled_at ? "no locks held" + (last && last.prefix ? " with prefix " + last.prefix : "") : "waiting for the first sample");
  $("locks-count").textContent = rows.length;
  const more = $("locks-more");
  more.hidden = matched <= st.locks.length;
  more.textContent = "Showing the first " + st.locks.length + " of " + matched + " matching names: narrow the prefix to see the rest (GET /api/state has them all).";
}

// capNote says, under a panel, when the update carries only the first of
// its locks.
function capNote(id, panel, what) {
  const more = $(id);
  more.hidden = panel.total <= panel.rows.length;
  more.textContent = "Showing " + panel.rows.length + " of " + panel.total + " " + what + ": narrow the prefix to see the rest.";
}

function renderQueues(v) {
  const rows = [];
  for (const l of v.queues.rows) {
    (l.queue || []).forEach((w, i) => rows.push(el("tr", {},
      el("td", {}, lockLink(l.name)), cell(i + 1, "num"),
      el("td", {}, w.gone ? el("span", { class: "sub" }, "gone (its process died)") : who(w.client, w.owner)),
      cell(dur(w.deadline_in_ms), "num"))));
  }
  fill("queues", rows, 4, "no fair-lock waiters");
  $("queues-count").textContent = rows.length;
  capNote("queues-more", v.queues, "fair queues");
}

function renderRW(v) {
  const rows = [];
  for (const l of v.rw.rows) {
    for (const h of l.holders) rows.push(el("tr", {},
      el("td", {}, lockLink(l.name)), cell(h.role), el("td", {}, who(h.client, h.owner)),
      cell(h.holds, "num"), cell(dur(h.ttl_ms != null ? h.ttl_ms : l.ttl_ms), "num")));
  }
  fill("rw", rows, 5, "no read-write locks held");
  $("rw-count").textContent = rows.length;
  capNote("rw-more", v.rw, "read-write locks");
}

function permitList(sem) {
  const box = el("span");
  for (const p of sem.permits.slice(0, 12)) {
    box.append(el("span", { class: "permit mono" + (p.expired ? " expired" : "") },
      p.id.slice(0, 8) + " " + (p.expired ? "expired" : dur(p.ttl_ms))));
  }
  if (sem.permits.length > 12) box.append(el("span", { class: "sub" }, "+" + (sem.permits.length - 12) + " more"));
  return box;
}

function renderSems(v) {
  const rows = v.semaphores.rows.map((l) => {
    const tr = el("tr", { class: "clickable" }, el("td", {}, lockLink(l.name)),
      cell(l.semaphore.in_use, "num"), cell(l.semaphore.available, "num"), el("td", {}, permitList(l.semaphore)));
    tr.addEventListener("click", (e) => { if (e.target.tagName !== "A") openLock(l.name); });
    return tr;
  });
  fill("sems", rows, 4, "no permits held");
  $("sems-count").textContent = rows.length;
  capNote("sems-more", v.semaphores, "semaphores");
}

function renderElections(st) {
  const now = Date.now();
  const rows = st.elections.map((e) => el("tr", {},
    el("td", {}, el("span", { class: "mono" }, e.name)), el("td", {}, el("strong", {}, e.value || "–")),
    el("td", {}, who(e.host ? { host: e.host, pid: e.pid, program: e.program, name: e.label } : null, e.owner)),
    cell(e.since ? dur(now - Date.parse(e.since)) + " ago" : "–", "num"),
    cell(e.token + "." + (e.seq || 0), "num mono")));
  fill("elections", rows, 5, "no election has a leader");
  $("elections-count").textContent = rows.length;
}

function renderGraph(v) {
  const g = $("graph");
  if (v.graph_svg) g.innerHTML = v.graph_svg; // drawn and escaped by the server
  else g.replaceChildren(el("p", { class: "none" }, "No deadlocks among the recorded waits (owners of Clients with WithDeadlockDetection)."));
  $("deadlocks-count").textContent = v.state.deadlocks.length;
}

function renderHeader(st) {
  $("redis").textContent = st.redis;
  $("mode").textContent = st.mode;
  const t = new Date(st.sampled_at);
  $("sampled").textContent = "sampled " + t.toLocaleTimeString() + " · scan " + st.scan_ms + " ms";
  $("dot").className = "dot on";
  $("token-box").hidden = !st.writes;
  $("ro").hidden = st.writes;
  for (const b of [$("do-unlock"), $("do-clear")]) {
    b.disabled = false;
    b.title = st.writes ? "" : "read-only console: the server refuses writes";
  }
  const err = $("error");
  err.hidden = !st.error;
  err.textContent = st.error ? "Sampling failed: " + st.error + " (showing the last good sample)" : "";
}

function render(v) {
  last = v;
  const st = v.state;
  renderHeader(st);
  renderCards(v);
  $("acq-chart").innerHTML = v.acq_svg; // drawn and escaped by the server
  $("wait-chart").innerHTML = v.wait_svg;
  renderLocks(st, v.matched);
  renderQueues(v);
  renderRW(v);
  renderSems(v);
  renderElections(st);
  renderGraph(v);
  document.body.dataset.sampled = st.sampled_at;
}

function connect() {
  if (source) source.close();
  const prefix = $("prefix").value;
  source = new EventSource("api/events" + (prefix ? "?prefix=" + encodeURIComponent(prefix) : ""));
  source.onmessage = (e) => render(JSON.parse(e.data));
  source.onerror = () => { $("dot").className = "dot stale"; $("sampled").textContent = "reconnecting…"; };
}

// Detail drawer: one lock, read now (GET /api/locks/NAME), as dlock status shows it.
async function openLock(name) {
  detailName = name;
  if (location.hash !== "#lock=" + encodeURIComponent(name)) history.replaceState(null, "", "#lock=" + encodeURIComponent(name));
  $("detail").hidden = false;
  $("detail-name").textContent = name;
  $("msg").textContent = "";
  $("msg").className = "msg";
  await refreshDetail();
}

async function refreshDetail() {
  const name = detailName;
  const body = $("detail-body");
  const r = await fetch("api/locks/" + encodeURIComponent(name));
  const st = await r.json();
  if (name !== detailName) return;
  if (!r.ok) { body.replaceChildren(el("p", { class: "msg err" }, st.error)); return; }
  const dl = el("dl", {},
    el("dt", {}, "State"), el("dd", {}, st.locked ? "held" : st.semaphore ? "semaphore" : "free"),
    el("dt", {}, "Kind"), el("dd", {}, (st.kind || "–") + (st.mode ? " (" + st.mode + ")" : "")),
    el("dt", {}, "TTL"), el("dd", {}, st.ttl_ms == null ? "–" : dur(st.ttl_ms)),
    el("dt", {}, "Fencing token"), el("dd", { class: "mono" }, st.fencing_token == null ? "–" : st.fencing_token),
    el("dt", {}, "Subscribed"), el("dd", {}, st.subscribed || 0));
  const parts = [dl];
  if (st.holders.length) {
    parts.push(el("h3", {}, "Holders"));
    parts.push(el("table", {}, el("tbody", {}, ...st.holders.map((h) => el("tr", {},
      el("td", { class: "mono small" }, h.owner + (h.role ? " (" + h.role + ")" : "")), el("td", {}, who(h.client, h.owner)), cell("×" + h.holds, "num"))))));
  }
  if (st.queue && st.queue.length) {
    parts.push(el("h3", {}, "Queue"));
    parts.push(el("table", {}, el("tbody", {}, ...st.queue.map((w, i) => el("tr", {},
      cell(i + 1, "num"), el("td", {}, who(w.client, w.owner)), cell(dur(w.deadline_in_ms), "num"))))));
  }
  if (st.semaphore) {
    parts.push(el("h3", {}, "Permits"));
    parts.push(el("p", {}, st.semaphore.in_use + " in use, " + st.semaphore.available + " available "), permitList(st.semaphore));
  }
  body.replaceChildren(...parts);
}

// Writes carry the token the terminal printed, in a header: a cross-site
// page can send neither it nor this header without the server's consent.
async function write(path, what) {
  const msg = $("msg");
  msg.className = "msg";
  msg.textContent = what + "…";
  const token = $("token").value || sessionStorage.getItem("dlock-token") || "";
  if ($("token").value) sessionStorage.setItem("dlock-token", $("token").value);
  const r = await fetch(path, { method: "POST", headers: { "X-Dlock-Token": token } });
  const res = await r.json().catch(() => ({ error: r.statusText }));
  msg.className = "msg " + (r.ok ? "ok" : "err");
  msg.textContent = r.ok ? res.message : "Refused (" + r.status + "): " + res.error;
  msg.dataset.status = r.status;
  if (r.ok) refreshDetail();
}

function fromHash() {
  const m = location.hash.match(/^#lock=(.*)$/);
  if (m) openLock(decodeURIComponent(m[1]));
}

document.addEventListener("DOMContentLoaded", () => {
  let timer = null;
  $("prefix").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(connect, 250); });
  $("detail-close").addEventListener("click", () => { $("detail").hidden = true; detailName = null; history.replaceState(null, "", location.pathname); });
  $("do-unlock").addEventListener("click", () => write("api/locks/" + encodeURIComponent(detailName) + "/unlock", "Unlocking"));
  $("do-clear").addEventListener("click", () => write("api/queues/" + encodeURIComponent(detailName) + "/clear", "Clearing the queue"));
  window.addEventListener("hashchange", fromHash);
  const saved = sessionStorage.getItem("dlock-token");
  if (saved) $("token").value = saved;
  connect();
  fromHash();
});
