// wanka control dashboard: polls /v1/dashboard and each job's /v1/jobs/ID/metrics with the bearer
// token kept in sessionStorage (never in a URL), and draws everything itself (SVG; no libraries).
"use strict";

const POLL_MS = 2000;
const KEY = "wanka_token";
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, text = null, ns = null) {
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;  // textContent only: nothing from the API becomes markup
  return e;
}

async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + sessionStorage.getItem(KEY) } });
  if (r.status === 401) throw new Error("token refused: " + (await r.json()).detail);
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

// green (0) -> red (1)
function heatColour(x) {
  const v = Math.max(0, Math.min(1, x));
  return `hsl(${Math.round(120 * (1 - v))}, 70%, 70%)`;
}

function renderNodes(nodes) {
  const box = $("nodes");
  box.replaceChildren();
  for (const n of nodes) {
    const d = el("div", { class: "node", "data-node": n.name, "data-state": n.state });
    d.append(el("div", {}, n.name));
    const health = el("div", { class: "cell health" }, n.state);
    health.style.background = n.state === "up" ? heatColour(0) : "#bbb";
    const risk = el("div", { class: "cell risk" }, n.risk === null ? "risk —" : "risk " + n.risk.toFixed(2));
    risk.style.background = n.risk === null ? "#eee" : heatColour(n.risk);
    const util = el("div", { class: "cell util" }, `${n.used_slots}/${n.slots} ranks`);
    util.style.background = heatColour(n.utilisation);
    d.append(health, risk, util);
    box.append(d);
  }
}

// A line chart of `key` over step; `planned` (optional) is drawn as a dashed horizontal line.
function chart(points, key, label, planned) {
  const W = 360, H = 160, L = 48, R = 8, T = 16, B = 22;
  const svg = el("svg", { class: `chart ${key}-chart`, width: W, height: H, viewBox: `0 0 ${W} ${H}` }, null, SVG);
  // a non-finite value arrives as a string ("nan", "inf"): kept as a point, left out of the scale
  const pts = points.filter((p) => p[key] !== null && p[key] !== undefined);
  const finite = pts.filter((p) => typeof p[key] === "number" && Number.isFinite(p[key]));
  const ys = finite.map((p) => p[key]).concat(planned ? [planned] : []);
  svg.append(el("text", { x: L, y: 11 }, label + (pts.length ? "" : " (no steps yet)"), SVG));
  if (!ys.length) return svg;
  const steps = pts.map((p) => p.step);
  const x0 = Math.min(...steps), x1 = Math.max(x0 + 1, ...steps);
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (y1 - y0 < 1e-12) { y0 -= 1; y1 += 1; }
  const sx = (s) => L + ((s - x0) / (x1 - x0)) * (W - L - R);
  const sy = (v) => T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
  svg.append(el("text", { x: 2, y: T + 8 }, y1.toPrecision(3), SVG), el("text", { x: 2, y: H - B }, y0.toPrecision(3), SVG),
             el("text", { x: L, y: H - 6 }, "step " + x0, SVG), el("text", { x: W - R - 50, y: H - 6 }, "step " + x1, SVG));
  if (planned) {
    svg.append(el("line", { class: "planned", x1: L, x2: W - R, y1: sy(planned), y2: sy(planned) }, null, SVG));
  }
  svg.append(el("polyline", { class: "line", points: finite.map((p) => `${sx(p.step)},${sy(p[key])}`).join(" ") }, null, SVG));
  for (const p of pts) {
    const ok = typeof p[key] === "number" && Number.isFinite(p[key]);  // a NaN/inf is marked at the top in red
    svg.append(el("circle", { class: ok ? "pt" : "pt bad", "data-step": p.step, cx: sx(p.step), cy: ok ? sy(p[key]) : T,
                              r: 2.5 }, null, SVG));
  }
  return svg;
}

async function renderJob(job) {
  const m = await api(`/v1/jobs/${job.id}/metrics`);
  const box = el("div", { class: "job", id: `job-${job.id}`, "data-state": job.state });
  const last = m.points.length ? m.points[m.points.length - 1] : null;
  box.append(el("div", { class: "title" },
    `job ${job.id} · ${job.owner} · ${job.model} ${job.layout || ""} · ${job.state}` +
    ` · step ${last ? last.step : "—"}/${job.steps} · attempt ${job.attempt}`));
  const p = m.predicted;
  box.append(el("div", { class: "prediction" }, p.tokens_per_s === null ? p.source
    : `predicted ${Math.round(p.tokens_per_s).toLocaleString()} tokens/s (${p.source})`));
  const charts = el("div", { class: "charts" });
  charts.append(chart(m.points, "loss", "loss"), chart(m.points, "tokens_per_s", "tokens/s", p.tokens_per_s));
  box.append(charts);
  return box;
}

function renderTimeline(rows) {
  const list = $("timeline");
  list.replaceChildren();
  for (const r of rows.slice().reverse()) {
    const li = el("li", { class: "event", "data-rule": r.rule, "data-decision": r.decision });
    const at = new Date(r.detected_at * 1000).toISOString().slice(11, 19);
    const where = r.job_id !== null ? `job ${r.job_id}` : `node ${r.node}`;
    li.append(el("time", {}, at + " "), el("span", { class: "alert" }, `${r.rule} · ${where}: ${r.detection}`),
              el("span", {}, " → "), el("span", { class: "action" }, `${r.decision}: ${r.action}`));
    li.title = r.reason;
    list.append(li);
  }
}

let timer = null;

async function refresh() {
  try {
    const d = await api("/v1/dashboard");
    $("who").textContent = `${d.user} (${d.role})`;
    renderNodes(d.nodes);
    const boxes = await Promise.all(d.jobs.slice().reverse().map(renderJob));
    $("jobs").replaceChildren(...boxes);
    renderTimeline(d.audit);
    $("status").className = "";
    $("status").textContent = "updated " + new Date().toISOString().slice(11, 19);
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  } catch (err) {
    $("status").className = "error";
    $("status").textContent = String(err.message || err);
  }
}

function start() {
  $("login").hidden = true;
  $("logout").hidden = false;
  refresh();
  timer = setInterval(refresh, POLL_MS);
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const t = $("token").value.trim();
  if (!t) return;
  sessionStorage.setItem(KEY, t);
  $("token").value = "";
  start();
});
$("logout").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  clearInterval(timer);
  location.reload();
});
if (sessionStorage.getItem(KEY)) start();
