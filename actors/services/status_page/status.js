// The status page's script (index.html): reads /status (the node's JSON, actors/services/
// node_metrics.cpp) every `refresh` seconds (default 1; `/?refresh=5` for another period) and
// draws the learners, the fragments, the loss curves and the timeline of restarts and faults.
// Charts with Chart.js, served by the node itself (/static/chart.min.js): no network needed.
"use strict";

const params = new URLSearchParams(location.search);
const refreshS = Math.max(0.2, Number(params.get("refresh")) || 1);
const charts = {};
const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf"];

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (typeof x !== "number") return String(x);
  return x.toFixed(digits === undefined ? 3 : digits);
}

function age(s) {
  if (s === null || s === undefined) return "–";
  return s < 60 ? `${s.toFixed(1)} s` : `${(s / 60).toFixed(1)} min`;
}

function card(label, value) {
  return el("div", {class: "card"}, label, el("b", {}, value));
}

function drawSummary(s) {
  const r = s.run || {};
  const box = document.getElementById("summary");
  box.replaceChildren(
    card("learners", `${(s.learners || []).filter(l => l.state === "stepping" || l.state === "live").length} live of ${r.learners ?? "?"}`),
    card("tokens", (r.tokens ?? 0).toLocaleString("en")),
    card("merges", r.merges ?? 0),
    card("validation loss", fmt(r.val_loss)),
    card("goodput", fmt(r.goodput)),
    card("uptime", fmt(r.uptime)),
    card("learner restarts", r.learner_restarts ?? 0),
    card("pushes refused", `${r.pushes_refused ?? 0} of ${r.pushes ?? 0}`),
    card("divergences", r.divergences ?? 0),
    card("run time", age(s.t)));
  document.getElementById("run-id").textContent = `${s.run_id || "?"} (node ${s.node || "?"})`;
}

function drawLearners(s) {
  const body = document.querySelector("#learners tbody");
  const rows = (s.learners || []).map(l => {
    const applied = Object.entries(l.applied_versions || {}).map(([p, v]) => `${p}: ${v}`).join(", ");
    let push = "–";
    if (l.last_push) {
      const p = l.last_push;
      push = `fragment ${p.fragment} on v${p.base_version}, ${p.accepted ? "accepted" : "refused" +
             (p.reason ? ` (${p.reason})` : "")}, ${age((s.t ?? 0) - p.t)} ago`;
    }
    return el("tr", {id: `learner-${l.id}`, "data-learner": l.id, "data-state": l.state,
                     "data-incarnation": l.incarnation},
              el("td", {}, l.id), el("td", {class: "incarnation"}, l.incarnation),
              el("td", {class: "state"}, l.state), el("td", {}, l.step),
              el("td", {}, fmt(l.tokens_per_s, 0)), el("td", {class: "left"}, push),
              el("td", {}, age(l.lease_age_s)), el("td", {class: "left"}, applied || "–"));
  });
  body.replaceChildren(...rows);
}

function drawFragments(s) {
  const body = document.querySelector("#fragments tbody");
  const rows = (s.fragments || []).map(f => {
    const m = f.last_merge || {};
    const who = (m.contributors || []).map(c => `${c.learner}: ${fmt(c.weight, 2)}`).join(", ");
    return el("tr", {id: `fragment-${f.id}`, "data-fragment": f.id},
              el("td", {}, f.id), el("td", {}, f.version),
              el("td", {}, f.grace_s === undefined ? "–" : `${fmt(f.grace_s * 1000, 1)} ms`),
              el("td", {class: "left"}, who || "–"), el("td", {}, m.tokens ?? "–"),
              el("td", {}, m.reason || "–"));
  });
  body.replaceChildren(...rows);
}

function lineChart(id, yLabel) {
  if (charts[id]) return charts[id];
  charts[id] = new Chart(document.getElementById(id), {
    type: "line",
    data: {datasets: []},
    options: {
      animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
      elements: {point: {radius: 0}, line: {borderWidth: 1.5}},
      scales: {x: {type: "linear", title: {display: true, text: "time since the run started (s)"}},
               y: {title: {display: true, text: yLabel}}},
      plugins: {legend: {position: "bottom"}},
    },
  });
  return charts[id];
}

function drawCurves(s) {
  const val = lineChart("val-chart", "validation loss (nats/token)");
  val.data.datasets = [{label: "validation loss", borderColor: "#000", backgroundColor: "#000",
                        pointRadius: 2,
                        data: (s.validation || []).map(p => ({x: p.t, y: p.val_loss}))}];
  val.update();
  const train = lineChart("train-chart", "training loss (nats/token)");
  const tl = (s.training_loss || {}).learners || {};
  train.data.datasets = Object.keys(tl).sort((a, b) => a - b).map((id, k) => ({
    label: `learner ${id}`, borderColor: palette[k % 10], backgroundColor: palette[k % 10],
    data: tl[id].map(p => ({x: p[0], y: p[2]})),
  }));
  train.update();
}

const timelineKinds = [
  ["down (failure, crash, leave)", ["failure", "crash", "leave", "give_up"], "#cf222e", "crossRot"],
  ["restart / rejoin", ["respawn", "rejoin", "join"], "#1a7f37", "triangle"],
  ["fault (in the node)", ["fault", "chaos_fault"], "#8250df", "rect"],
  ["fault (dd-chaos, chaos.jsonl)", ["dd-chaos"], "#bf3989", "rectRot"],
  ["other", null, "#777", "circle"],
];

// dd-chaos's taped faults (/chaos.json) as timeline entries: the tape's Unix times placed on
// the run's clock with /status's `time` (Unix now) and `t` (run time now).
function tapeEvents(s, tape) {
  const offset = (s.time ?? 0) - (s.t ?? 0);
  return ((tape || {}).records || []).map(r => {
    const m = /^learner:(\d+)$/.exec(r.target || "");
    return {event: "dd-chaos", t: r.t - offset, fault: r.kind, target: r.target,
            ...(r.duration ? {duration: r.duration} : {}), result: r.result,
            ...(m ? {learner: Number(m[1])} : {})};
  });
}

function kindOf(e) {
  if (e.event === "join" && !(e.incarnation > 0)) return timelineKinds[4];  // a first join
  for (const k of timelineKinds) if (k[1] === null || k[1].includes(e.event)) return k;
}

// The timeline row: the learner an entry names (a respawn names it as `id`), else -1.
function rowOf(e) {
  if (typeof e.learner === "number" && e.learner >= 0) return e.learner;
  if (typeof e.id === "number" && e.kind === "learner") return e.id;
  return -1;
}

function describe(e) {
  const skip = new Set(["event", "t", "time"]);
  const rest = Object.entries(e).filter(([k]) => !skip.has(k))
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ");
  return `${fmt(e.t, 1)} s  ${e.event}  ${rest}`;
}

function drawTimeline(s, tape) {
  const events = (s.timeline || []).concat(tapeEvents(s, tape)).sort((a, b) => a.t - b.t);
  const list = document.getElementById("timeline");
  list.replaceChildren(...events.slice(-40).reverse().map(e =>
    el("li", {"data-event": e.event, ...(e.learner !== undefined ? {"data-learner": e.learner} : {})},
       describe(e))));
  if (typeof Chart === "undefined") return;
  if (!charts.timeline) {
    charts.timeline = new Chart(document.getElementById("timeline-chart"), {
      type: "scatter",
      data: {datasets: []},
      options: {
        animation: false, maintainAspectRatio: false,
        scales: {x: {type: "linear", title: {display: true, text: "time since the run started (s)"}},
                 y: {title: {display: true, text: "learner (-1: run-wide)"},
                     afterBuildTicks: axis => {
                       axis.ticks = [];
                       for (let v = Math.ceil(axis.min); v <= axis.max; ++v) axis.ticks.push({value: v});
                     }}},
        plugins: {legend: {position: "right"},
                  tooltip: {callbacks: {label: c => c.raw.text}}},
      },
    });
  }
  charts.timeline.data.datasets = timelineKinds.map(([label, , color, style]) => ({
    label, borderColor: color, backgroundColor: color, pointStyle: style, pointRadius: 6,
    data: events.filter(e => kindOf(e)[0] === label).map(e => ({
      x: e.t,
      // dd-chaos's faults a little above their row, so the failure they caused stays visible
      y: rowOf(e) + (e.event === "dd-chaos" ? 0.25 : 0),
      text: describe(e),
    })),
  }));
  const n = (s.run || {}).learners || 1;
  charts.timeline.options.scales.y.min = -1.5;
  charts.timeline.options.scales.y.max = n - 0.5;
  charts.timeline.options.scales.x.min = 0;
  charts.timeline.options.scales.x.max = Math.max(1, s.t || 0);
  charts.timeline.update();
}

async function refresh() {
  const conn = document.getElementById("conn");
  try {
    const r = await fetch("/status", {cache: "no-store"});
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const s = await r.json();
    let tape = null;
    try {
      const t = await fetch("/chaos.json", {cache: "no-store"});
      if (t.ok) tape = await t.json();
    } catch (e) { /* no tape: the node's own events only */ }
    drawSummary(s);
    drawLearners(s);
    drawFragments(s);
    if (typeof Chart !== "undefined") drawCurves(s);
    drawTimeline(s, tape);
    conn.className = "conn";
    conn.textContent = `updated ${new Date().toLocaleTimeString()} · every ${refreshS} s`;
    document.body.dataset.updated = String(Date.now());
  } catch (err) {
    conn.className = "conn error";
    conn.textContent = `cannot read /status (${err.message}); showing the last data, retrying`;
  }
  setTimeout(refresh, refreshS * 1000);
}

document.getElementById("footer").replaceChildren(...(typeof Chart === "undefined"
  ? ["Charts unavailable: this dd-node was built without Chart.js (Debian libjs-chart.js)."]
  : [`Charts: Chart.js ${Chart.version}, served by this node; `,
     el("a", {href: "/static/chart.js-copyright.txt"}, "its copyright and MIT License"), "."]));
refresh();
