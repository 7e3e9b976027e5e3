"""The run's live page itself: static HTML and a script that reads ``state.json`` every second.

Every element a test or a reader looks for carries a stable attribute: a
device's row ``data-device`` (its canonical name), a loop's section
``data-loop``, a metric's chart ``data-metric``, a sweep's section
``data-sweep``, a copy's row ``data-copy`` (its index) with ``data-state``,
a decision's row ``data-rung``. Names are set as text, never as markup.
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>orchestrator: this run</title>
<style>
body{font:13px system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:18px}h2{font-size:15px;margin-top:1.5em}h3{font-size:13px;margin:.8em 0 .2em}
table{border-collapse:collapse;margin:.3em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.running{color:#06c}.done,.finished{color:#080}.stopped{color:#a60}.failed{color:#c00}.waiting{color:#888}
svg{background:#fafafa;border:1px solid #ddd;margin:2px 8px 2px 0}.notes{color:#555;max-width:60em}
.over{color:#c00;font-weight:bold}
</style></head><body>
<h1>orchestrator: <span id="run-name">no run yet</span> <span id="run-status"></span></h1>
<p>Run <span id="run-token"></span>; updated <span id="updated">never</span>.
<a href="../status">Dask's dashboard</a></p>
<h2>Devices</h2>
<table id="devices"><thead><tr><th>device</th><th>plan's peak</th><th>cap</th><th>held now</th>
<th>worker process (Dask's "bytes stored")</th><th>running now</th><th>Dask tasks</th>
<th>busy over time</th><th>moved in (Dask) / planned in</th></tr></thead><tbody></tbody></table>
<h2>Loops</h2><div id="loops"></div>
<h2>Sweeps</h2><div id="sweeps"></div>
<h2>What the numbers count</h2><ul id="notes" class="notes"></ul>
<script>
"use strict";
const STATE = location.pathname.replace(/\\/?$/, "/") + "state.json";
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) { if (v !== undefined && v !== null) e.setAttribute(k, v); }
  for (const kid of kids) { e.append(kid instanceof Node ? kid : document.createTextNode(kid === null || kid === undefined ? "" : String(kid))); }
  return e;
}
function bytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}
function num(v) { return v === null || v === undefined ? "-" : Number(v).toPrecision(4); }
function word(state) { return (state || "waiting").split(/[ :(]/)[0]; }
function chart(points, width, height, low, high) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  const good = points.filter(p => p[1] !== null);
  if (good.length) {
    const xs = good.map(p => p[0]), ys = good.map(p => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = low ?? Math.min(...ys), y1 = high ?? Math.max(...ys);
    const sx = x => 2 + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (width - 4);
    const sy = y => height - 2 - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * (height - 4);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", good.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" "));
    line.setAttribute("fill", "none"); line.setAttribute("stroke", "#06c");
    svg.append(line);
  }
  return svg;
}
function devices(run, live) {
  const body = document.querySelector("#devices tbody"); body.replaceChildren();
  for (const d of (run.plan || {}).devices || []) {
    const now = live[d.name] || {}, mem = now.memory || {};
    const gpu = mem.in_use !== undefined;
    const held = gpu ? mem.in_use : now.managed_bytes;
    const over = d.cap && held > d.cap;
    const busy = chart(now.busy || [], 160, 24, 0, 1);
    busy.setAttribute("data-busy", d.name);
    const moved = (now.moved || {})[run.run] || 0;
    body.append(el("tr", {"data-device": d.name, "data-kind": d.kind},
      el("td", {}, d.name), el("td", {class: "n"}, bytes(d.peak) + (d.unknown ? " +?" : "")),
      el("td", {class: "n"}, d.cap ? bytes(d.cap) : "none"),
      el("td", {class: "n" + (over ? " over" : ""), "data-held": held ?? ""},
         now.address ? bytes(held) + (gpu ? "" : " (Dask's)") : "no worker"),
      el("td", {class: "n"}, now.address ? bytes(now.process_bytes) : "-"),
      el("td", {"data-running": (now.running || []).join(" ")}, (now.running || []).join(", ") || "idle"),
      el("td", {class: "n"}, now.processing ?? "-"), el("td", {}, busy),
      el("td", {class: "n", "data-moved": moved}, bytes(moved) + " / " + bytes(d.planned_in[0]) +
         " (" + d.planned_in[1] + " planned" + (d.planned_in[2] ? ", " + d.planned_in[2] + " of unknown size" : "") + ")")));
  }
}
function loopSection(spec, got) {
  const state = got.state || (got.step ? "running" : "waiting");
  const box = el("section", {"data-loop": spec.name, "data-state": word(state), "data-step": got.step || 0});
  const rate = got.rate ? ", " + got.rate.toFixed(1) + " steps/s" : "";
  box.append(el("h3", {}, spec.name + ": step " + (got.step || 0) + " / " + spec.steps + rate + " ",
                el("span", {class: word(state)}, state)));
  const facts = [];
  const stop = got.stopping;
  if (spec.early_stop.length) facts.push("early stopping on " + spec.early_stop.join(", ") + ": " +
     (stop ? "best " + num(stop.best) + " at step " + (stop.best_step ?? "-") + ", " + stop.wait + " evaluation(s) without improving" : "no evaluation yet"));
  if (spec.checkpoint_every) facts.push("checkpoint every " + spec.checkpoint_every + " steps: last at " +
     (got.checkpoint ? "step " + got.checkpoint : "none yet"));
  if (facts.length) box.append(el("p", {"data-facts": spec.name}, facts.join("; ")));
  const charts = el("div", {});
  for (const [part, names] of [["series", spec.metrics], ["evaluations", spec.evaluations]]) {
    for (const name of names) {
      const points = ((got[part] || {})[name]) || [];
      const last = points.length ? points[points.length - 1][1] : null;
      const svg = chart(points, 260, 70);
      svg.setAttribute("data-metric", name); svg.setAttribute("data-points", points.length);
      charts.append(el("figure", {style: "display:inline-block;margin:0"}, svg,
                       el("figcaption", {}, name + (part === "evaluations" ? " (evaluation)" : "") + ": " + num(last))));
    }
  }
  box.append(charts);
  return box;
}
function copyState(copy, loops, ended) {
  // a copy's end as the run report has it (sent when the run ends): the only word on a copy that runs no loop
  const end = ended && ended[copy.index];
  if (end) return {finished: "done", reused: "done"}[end] || end;
  if (!copy.loops.length) return "waiting";
  const states = copy.loops.map(name => (loops[name] || {}).state || ((loops[name] || {}).step ? "running" : "waiting"));
  for (const w of ["failed", "stopped", "running"]) { const s = states.find(x => word(x) === w); if (s) return s; }
  if (states.length && states.every(s => s === "done")) return "done";
  return states.some(s => s === "done") ? "running" : "waiting";
}
function copyMetric(copy, sweep, loops) {
  const name = copy.ruled || copy.loops[0], got = loops[name] || {};
  const metric = sweep.rule ? sweep.rule.metric : Object.keys(got.series || {})[0];
  const points = ((got.series || {})[metric]) || ((got.evaluations || {})[metric]) || [];
  return [metric, points.length ? points[points.length - 1][1] : null];
}
function sweepSection(sweep, run) {
  const loops = run.loops, box = el("section", {"data-sweep": sweep.name});
  const counts = {};
  const rows = el("tbody", {});
  const copies = [...sweep.copies].sort((a, b) => String(a.device).localeCompare(String(b.device)) || (a.wave - b.wave) || (a.index - b.index));
  for (const copy of copies) {
    const state = copyState(copy, loops, (run.copies || {})[sweep.name]), [metric, value] = copyMetric(copy, sweep, loops);
    counts[word(state)] = (counts[word(state)] || 0) + 1;
    const step = Math.max(0, ...copy.loops.map(n => (loops[n] || {}).step || 0));
    rows.append(el("tr", {"data-copy": copy.index, "data-state": word(state)}, el("td", {class: "n"}, copy.index),
      el("td", {}, JSON.stringify(copy.values)), el("td", {}, copy.device ?? "-"), el("td", {class: "n"}, copy.wave ?? "-"),
      el("td", {class: word(state)}, state), el("td", {class: "n"}, step), el("td", {class: "n", "data-value": value ?? ""}, (metric || "") + " " + num(value))));
  }
  box.append(el("h3", {}, "sweep " + sweep.name + ": " + Object.entries(counts).map(([k, v]) => v + " " + k).join(", ")));
  const head = el("tr", {}, ...["copy", "values", "device", "wave", "state", "step", "metric"].map(h => el("th", {}, h)));
  box.append(el("table", {}, el("thead", {}, head), rows));
  const decisions = run.decisions.filter(d => d.sweep === sweep.name);
  if (sweep.rule) {
    const table = el("table", {"data-rungs": sweep.name}, el("thead", {}, el("tr", {}, ...["rung", "step", "metric", "kept", "stopped"].map(h => el("th", {}, h)))));
    const body = el("tbody", {});
    for (const d of decisions) {
      const kept = d.copies.filter(r => r.kept).map(r => r.copy + " (" + num(r.value) + ")");
      const gone = d.copies.filter(r => !r.kept).map(r => r.copy + " (" + num(r.value) + ")");
      body.append(el("tr", {"data-rung": d.rung ?? d.decision}, el("td", {class: "n"}, d.rung ?? d.decision), el("td", {class: "n"}, d.step),
        el("td", {}, d.metric + " (" + d.mode + ")"), el("td", {}, kept.join(", ")), el("td", {}, gone.join(", "))));
    }
    for (const step of sweep.rule.steps.slice(decisions.length)) {
      body.append(el("tr", {class: "waiting"}, el("td", {}, "-"), el("td", {class: "n"}, step), el("td", {}, sweep.rule.metric), el("td", {}, "to come"), el("td", {}, "")));
    }
    table.append(body);
    box.append(el("p", {}, sweep.rule.kind + " on " + sweep.rule.metric + ":"), table);
  }
  return box;
}
function show(state) {
  const run = state.runs[0];
  document.getElementById("updated").textContent = new Date(state.now * 1000).toLocaleTimeString();
  const notes = document.getElementById("notes"); notes.replaceChildren();
  for (const [k, v] of Object.entries(state.notes)) notes.append(el("li", {"data-note": k}, v));
  if (!run || !run.plan) return;
  document.getElementById("run-name").textContent = run.plan.name;
  const status = document.getElementById("run-status");
  status.textContent = run.status + (run.error ? ": " + run.error : ""); status.className = word(run.status);
  document.getElementById("run-token").textContent = run.run;
  devices(run, state.devices);
  const inSweeps = new Set(run.plan.sweeps.flatMap(s => s.copies.flatMap(c => c.loops)));
  const loops = document.getElementById("loops"); loops.replaceChildren();
  for (const spec of run.plan.loops) { if (!inSweeps.has(spec.name)) loops.append(loopSection(spec, run.loops[spec.name] || {})); }
  const sweeps = document.getElementById("sweeps"); sweeps.replaceChildren();
  for (const sweep of run.plan.sweeps) sweeps.append(sweepSection(sweep, run));
  for (const spec of run.plan.loops) { if (inSweeps.has(spec.name) && run.loops[spec.name]) sweeps.append(loopSection(spec, run.loops[spec.name])); }
}
async function poll() {
  try { const response = await fetch(STATE, {cache: "no-store"}); show(await response.json()); }
  catch (e) { document.getElementById("updated").textContent = "not reachable (" + e + ")"; }
  setTimeout(poll, 1000);
}
poll();
</script></body></html>
"""
