// Comb's status page: polls /api/overview and draws what it says. Every
// string from the API goes into the page as text, never as HTML.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";

// el builds an element: el("td", {class: "x"}, "text", child…).
function el(tag, attrs, ...kids) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}

const int = (n) => Number(n).toLocaleString("en-US");
const rate = (n) => (n === null || n === undefined ? "–" : n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en-US"));

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function duration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

const qs = (tenant, queue) => new URLSearchParams({ tenant, queue }).toString();
const label = (q) => (q.tenant ? q.tenant + " / " : "") + q.name;

// chart draws series (each {cls, values}) over times into an SVG: a line
// per series, null values break it; the y axis starts at 0.
function chart(times, series, unit) {
  const W = 320, H = 96, L = 34, R = 6, T = 8, B = 14;
  const svg = el("svg:svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
  let top = 0;
  for (const s of series) for (const v of s.values) if (v !== null && v > top) top = v;
  top = niceCeil(top);
  const t0 = times.length ? times[0] : 0, t1 = times.length ? times[times.length - 1] : 1;
  const x = (t) => L + (t1 > t0 ? ((t - t0) / (t1 - t0)) * (W - L - R) : W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  for (const v of [0, top / 2, top]) {
    svg.append(el("svg:line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    svg.append(el("svg:text", { x: L - 3, y: y(v) + 3, "text-anchor": "end" }, short(v)));
  }
  const span = (t1 - t0) / 1000;
  svg.append(el("svg:text", { x: L, y: H - 2 }, times.length > 1 ? "−" + duration(span) : "collecting samples…"));
  svg.append(el("svg:text", { x: W - R, y: H - 2, "text-anchor": "end" }, "now" + (unit ? " · " + unit : "")));
  for (const s of series) {
    let d = "", pen = false;
    s.values.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      d += (pen ? "L" : "M") + x(times[i]).toFixed(1) + "," + y(v).toFixed(1);
      pen = true;
    });
    if (d) svg.append(el("svg:path", { class: "s-" + s.cls, d }));
  }
  return svg;
}

function niceCeil(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function short(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + "k";
  return String(Math.round(v * 10) / 10);
}

function legend(...items) {
  const p = el("p", { class: "legend" });
  for (const [cls, text] of items) p.append(el("i", { class: "l-" + cls }), text);
  return p;
}

function fig(name, field, value) {
  return el("div", {}, el("dt", {}, name), el("dd", { "data-field": field }, value));
}

function table(node, head, rows) {
  node.replaceChildren(el("tr", {}, ...head.map((h) => el("th", {}, h))), ...rows);
}

function setHealth(key, ok, state, detail) {
  const card = document.querySelector(`[data-health="${key}"]`);
  const s = card.querySelector(".state");
  s.textContent = state;
  s.className = "state" + (ok === true ? " ok" : ok === false ? " bad" : "");
  if (detail !== undefined) card.querySelector(".detail").textContent = detail;
}

// spoolCard is the spool card's state and detail: off, empty, or what it
// holds and how fast it drains; maintenance mode shows first.
function spoolCard(sp) {
  if (!sp.enabled) return [sp.maintenance ? false : null, sp.maintenance ? "maintenance" : "none", sp.note];
  const full = sp.max_bytes ? Math.round((100 * sp.bytes) / sp.max_bytes) : 0;
  let detail = `${sp.records} records (${sp.messages} messages), ${bytes(sp.bytes)} of ${bytes(sp.max_bytes)} (${full}%)`;
  if (sp.records) detail += `, oldest ${duration(sp.oldest_age_s)}`;
  if (sp.drain_rate) detail += `, draining ${sp.drain_rate.toFixed(0)} msg/s`;
  detail += `; ${sp.drained} drained since start`;
  if (sp.maintenance) return [false, "maintenance", detail];
  if (!sp.records) return [true, "empty", detail];
  return [full > 90 ? false : null, "holding", detail];
}

function renderQueue(o, q) {
  const r = q.rates;
  const card = el("article", { class: "queue", "data-tenant": q.tenant, "data-queue": q.name },
    el("h3", {}, el("a", { href: "#" + qs(q.tenant, q.name) }, q.name), q.tenant ? el("span", { class: "tenant" }, "tenant " + q.tenant) : "",
      el("span", { class: "tenant", "data-field": "partitions" }, int(q.partitions) + (q.partitions === 1 ? " partition" : " partitions"))),
    el("dl", { class: "figs" },
      fig("depth (backlog)", "depth", int(q.depth)),
      fig("retained", "messages", int(q.messages)),
      fig("retained bytes", "bytes", bytes(q.bytes)),
      fig("pushed", "pushed", int(q.pushed)),
      fig("push/s", "push-rate", rate(r && r.push)),
      fig("pop/s", "pop-rate", rate(r && r.pop)),
      fig("ack/s", "ack-rate", rate(r && r.ack)),
      fig("dead letters", "dead-letters", int(q.dead_letters))),
    el("div", { class: "charts" },
      el("div", {}, chart(o.times, [{ cls: "push", values: q.series.push }, { cls: "pop", values: q.series.pop }, { cls: "ack", values: q.series.ack }], "msg/s"),
        legend(["push", "push"], ["pop", "pop"], ["ack", "ack"])),
      el("div", {}, chart(o.times, [{ cls: "depth", values: q.series.depth }], "messages"), legend(["depth", "depth (backlog)"]))));
  if (q.groups.length) {
    const t = el("table", { class: "groups" });
    table(t, ["group", "pending", "leased", "popped", "settled"], q.groups.map((g) =>
      el("tr", { "data-group": g.name }, el("td", {}, g.name), el("td", { "data-field": "pending" }, int(g.pending)),
        el("td", { "data-field": "leased" }, int(g.leased)), el("td", { "data-field": "popped" }, int(g.popped)),
        el("td", { "data-field": "settled" }, int(g.settled)))));
    card.append(t);
  } else {
    card.append(el("p", { class: "muted" }, "no groups yet"));
  }
  return card;
}

function render(o) {
  window.combOverview = o; // what the page shows, for tests and the console
  const h = o.health;
  document.getElementById("version").textContent = "version " + h.version;
  setHealth("postgres", h.postgres, h.postgres ? "reachable" : "unreachable", h.postgres ? "" : h.postgres_error || "");
  setHealth("nats", h.nats, h.nats ? "ready" : "not ready");
  setHealth("bridge", h.bridge, h.bridge ? "running" : "stopped");
  setHealth("uptime", null, duration(h.uptime_s), "since " + new Date(h.started_at).toLocaleString());
  setHealth("spool", ...spoolCard(o.spool));

  const errs = [o.error, o.sample_error && "latest sample: " + o.sample_error].filter(Boolean);
  const banner = document.getElementById("error");
  banner.hidden = !errs.length;
  banner.textContent = errs.join(" · ");

  const every = (o.sample_interval_ms / 1000) + " s";
  let note = `${o.queues.length} queue${o.queues.length === 1 ? "" : "s"} of every tenant; rates sampled every ${every}.`;
  if (o.more) note = `More than ${o.max_queues} queues: showing the first ${o.max_queues} by tenant and name; rates sampled every ${every}.`;
  document.getElementById("queues-note").textContent = note;
  document.getElementById("queues").replaceChildren(...o.queues.map((q) => renderQueue(o, q)));
  document.getElementById("updated").textContent = "updated " + new Date(o.now).toLocaleTimeString();
}

// The queue shown in detail is the page's hash: #tenant=…&queue=….
function selected() {
  const p = new URLSearchParams(location.hash.slice(1));
  return p.get("queue") ? { tenant: p.get("tenant") || "", name: p.get("queue") } : null;
}

async function getJSON(url) {
  const res = await fetch(url, { cache: "no-store" });
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

let replayOn = false;

async function renderDetail() {
  const sel = selected();
  const sec = document.getElementById("detail");
  if (!sel) { sec.hidden = true; return; }
  sec.hidden = false;
  document.getElementById("detail-title").textContent = "Queue " + label(sel);
  const err = document.getElementById("detail-error");
  try {
    const [info, dlq] = await Promise.all([
      getJSON("/api/queue?" + qs(sel.tenant, sel.name)),
      getJSON("/api/dlq?" + qs(sel.tenant, sel.name) + "&limit=100"),
    ]);
    err.hidden = true;
    table(document.getElementById("partitions"), ["partition", "next offset", "low offset", "retained"], info.partitions.map((p) =>
      el("tr", { "data-partition": p.name }, el("td", {}, p.name), el("td", {}, int(p.next_offset)), el("td", {}, int(p.low_offset)),
        el("td", {}, int(p.next_offset - p.low_offset)))));
    table(document.getElementById("groups"), ["group", "lag (pending)", "leased partitions"], info.groups.map((g) =>
      el("tr", { "data-group": g.name }, el("td", {}, g.name), el("td", {}, int(g.pending)), el("td", {}, int(g.leased)))));
    // The page shows the first page of each list; the counts say how many there are.
    shownOf("partitions-note", info.partitions.length, info.partition_count, "partitions");
    shownOf("groups-note", info.groups.length, info.group_count, "groups");
    renderDLQ(sel, dlq);
  } catch (e) {
    err.hidden = false;
    err.textContent = String(e.message || e);
  }
}

function shownOf(id, shown, total, what) {
  const note = document.getElementById(id);
  note.hidden = shown >= total;
  note.textContent = "the first " + int(shown) + " of " + int(total) + " " + what + " (by name)";
}

function renderDLQ(sel, dlq) {
  const checked = new Set([...document.querySelectorAll("#dlq input:checked")].map((c) => c.value));
  const rows = dlq.dead_letters.map((d) => {
    const data = d.data !== undefined ? JSON.stringify(d.data) : d.data_b64 !== undefined ? "base64 " + d.data_b64 : "";
    const box = el("input", { type: "checkbox", value: d.dlq_id, "aria-label": "select " + d.dlq_id });
    box.checked = checked.has(d.dlq_id);
    box.disabled = !replayOn;
    return el("tr", { "data-dlq": d.dlq_id }, el("td", {}, box, " ", d.dlq_id), el("td", { class: "text" }, d.group),
      el("td", { class: "text" }, d.partition), el("td", {}, int(d.offset)), el("td", {}, int(d.attempts)),
      el("td", { class: "text" }, d.reason), el("td", { class: "text" }, new Date(d.dead_at).toLocaleString()),
      el("td", { class: "data", title: data }, data.slice(0, 200)));
  });
  table(document.getElementById("dlq"), ["id", "group", "partition", "offset", "attempts", "reason", "dead at", "data"], rows);
  let note = rows.length ? "" : "none";
  if (dlq.next) note = `showing the oldest ${rows.length}; more follow`;
  if (!replayOn) note += (note ? " · " : "") + "replay is off (start comb with -http-dlq-replay to allow it here)";
  document.getElementById("dlq-note").textContent = note;
  document.getElementById("replay").hidden = !replayOn || !rows.length;
}

async function replay() {
  const sel = selected();
  const ids = [...document.querySelectorAll("#dlq input:checked")].map((c) => c.value);
  const out = document.getElementById("replay-result");
  if (!sel || !ids.length) { out.textContent = "select dead letters first"; return; }
  try {
    const res = await fetch("/api/dlq/replay", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ tenant: sel.tenant, queue: sel.name, ids }),
    });
    const body = await res.json();
    if (!res.ok) throw new Error(body.error || res.statusText);
    out.textContent = `replayed ${body.done}`;
    for (const c of document.querySelectorAll("#dlq input:checked")) c.checked = false;
  } catch (e) {
    out.textContent = "replay failed: " + (e.message || e);
  }
  renderDetail();
}

async function poll() {
  try {
    const o = await getJSON("/api/overview");
    replayOn = o.replay;
    render(o);
    await renderDetail();
  } catch (e) {
    const banner = document.getElementById("error");
    banner.hidden = false;
    banner.textContent = "cannot reach the broker: " + (e.message || e);
  }
  setTimeout(poll, POLL_MS);
}

document.getElementById("replay").addEventListener("click", replay);
window.addEventListener("hashchange", renderDetail);
poll();
