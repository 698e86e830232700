// oar-attrib page scripts. Data comes from <script type="application/json"> blocks or the
// JSON API; text is written with textContent only (never innerHTML), so no trace text can
// become markup. Plotly labels accept a little HTML, so every one goes through plotlyLabel,
// and model text shows its invisible controls (visibleNodes); both are in text.js.
"use strict";

const HEAT = [230, 85, 13];  // views.py _HEAT_RGB

function heatColour(level) {
  if (level === null || level === undefined) return "";
  return `rgba(${HEAT[0]}, ${HEAT[1]}, ${HEAT[2]}, ${(0.06 + 0.84 * level).toFixed(3)})`;
}

function fmt(x, digits) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "n/a";
  return Number(x.toPrecision(digits)).toString();
}

function tokenTitle(token, score, weight, adv) {
  const w = (weight === null || weight === undefined) ? "n/a" : weight.toFixed(3);
  return `token ${plainLabel(JSON.stringify(token))} | score ${fmt(score, 4)} | weight ${w} | reshaped advantage ${fmt(adv, 4)}`;
}

function at(values, i) { return values ? values[i] : null; }

// --------------------------------------------------------------------------- heatmap

function paintHeatmap(root, data, method, colours) {
  const levels = data.levels[method] || [];
  for (const el of root.querySelectorAll(".tok[data-i]")) {
    const i = Number(el.dataset.i);
    el.style.backgroundColor = colours ? colours[i] : heatColour(levels[i]);
    el.dataset.tip = tokenTitle(data.tokens[i], at(data.scores[method], i),
                                at(data.weights[method], i), at(data.token_advantages[method], i));
    el.removeAttribute("title");
  }
  root.dataset.method = method;
}

function outlineOracle(root, data, set) {
  const mask = data.oracle[set] || [];
  for (const el of root.querySelectorAll(".tok[data-i]")) {
    el.classList.toggle("oracle", Boolean(mask[Number(el.dataset.i)]));
  }
}

function attachTooltip(root) {
  const tip = document.getElementById("tooltip");
  if (!tip) return;
  root.addEventListener("mouseover", (ev) => {
    const el = ev.target.closest(".tok[data-i]");
    if (!el || !el.dataset.tip) { tip.hidden = true; return; }
    tip.textContent = el.dataset.tip;
    const box = el.getBoundingClientRect();
    tip.style.left = `${window.scrollX + box.left}px`;
    tip.style.top = `${window.scrollY + box.bottom + 4}px`;
    tip.hidden = false;
  });
  root.addEventListener("mouseleave", () => { tip.hidden = true; });
}

function buildHeatmap(root, pieces) {
  root.replaceChildren();
  for (const p of pieces) {
    const span = document.createElement("span");
    span.replaceChildren(...visibleNodes(p.text));
    if (p.index === null) {
      span.className = "gap";
    } else {
      span.className = p.classes;
      span.dataset.i = String(p.index);
    }
    root.appendChild(span);
  }
}

// --------------------------------------------------------------------------- charts

function hoverTexts(data, method) {
  return data.tokens.map((t, i) => `${plotlyLabel(JSON.stringify(t))}<br>` +
    `${plotlyLabel(method)}: ${fmt(at(data.scores[method], i), 4)}`);
}

// Long traces are drawn as at most MAX_POINTS points per method: each point aggregates a
// bin of consecutive tokens (the max of the levels, so that a spike stays visible; the mean
// of the advantages). Steps are drawn as vertical boundaries.
const MAX_POINTS = 600;

function binned(values, tokens, reduce) {
  const n = values ? values.length : 0;
  const size = Math.max(1, Math.ceil(n / MAX_POINTS));
  const x = [], y = [], text = [];
  for (let a = 0; a < n; a += size) {
    const b = Math.min(n, a + size);
    const part = values.slice(a, b).filter((v) => v !== null && v !== undefined);
    x.push(size === 1 ? a : (a + b - 1) / 2);
    y.push(part.length ? reduce(part) : null);
    text.push(size === 1 ? plotlyLabel(JSON.stringify(tokens[a])) : `tokens ${a}-${b - 1}`);
  }
  return { x, y, text, size };
}

const maxOf = (v) => Math.max(...v);
const meanOf = (v) => v.reduce((s, x) => s + x, 0) / v.length;

function stepShapes(steps) {
  if (!steps) return [];
  return steps.steps.slice(1).map(([a]) => ({
    type: "line", xref: "x", yref: "paper", x0: a - 0.5, x1: a - 0.5, y0: 0, y1: 1,
    line: { color: "rgba(90, 100, 115, 0.35)", width: 1, dash: "dot" },
  }));
}

function drawScores(id, data, selected, steps) {
  const traces = data.methods.map((m) => {
    const s = binned(data.levels[m], data.tokens, maxOf);
    return {
      x: s.x, y: s.y, name: plotlyLabel(m), type: "scatter", mode: s.size === 1 ? "lines+markers" : "lines",
      line: { width: m === selected ? 3 : 1.2 }, marker: { size: m === selected ? 6 : 3 },
      text: s.size === 1 ? hoverTexts(data, m) : s.text.map((t) => `${t} (max)<br>${plotlyLabel(m)}`),
      hoverinfo: s.size === 1 ? "text+name" : "text+y", connectgaps: false,
    };
  });
  Plotly.react(id, traces, {
    margin: { t: 10, r: 10, b: 40, l: 50 }, xaxis: { title: { text: "response token" } },
    yaxis: { title: { text: "normalised importance" }, range: [-0.05, 1.05] },
    legend: { orientation: "h" }, shapes: stepShapes(steps),
  }, { responsive: true, displaylogo: false });
}

function drawAdvantage(id, data, selected, steps) {
  // With A = 0 (a group that was all right or all wrong) every A·w_t is 0: show w_t instead.
  const useAdv = Boolean(data.advantage) && Object.keys(data.token_advantages).length > 0;
  const source = useAdv ? data.token_advantages : data.weights;
  const traces = data.methods.filter((m) => source[m]).map((m) => {
    const s = binned(source[m], data.tokens, meanOf);
    return {
      x: s.x, y: s.y, name: plotlyLabel(m), type: "scatter", mode: "lines",
      line: { width: m === selected ? 3 : 1.2, shape: s.size === 1 ? "hvh" : "linear" },
      text: s.size === 1 ? s.text : s.text.map((t) => `${t} (mean)`), hoverinfo: "text+y+name",
    };
  });
  Plotly.react(id, traces, {
    margin: { t: 10, r: 10, b: 40, l: 50 }, xaxis: { title: { text: "response token" } },
    yaxis: { title: { text: useAdv ? "A · w_t" : "w_t" } }, legend: { orientation: "h" },
    shapes: stepShapes(steps),
  }, { responsive: true, displaylogo: false });
}

// --------------------------------------------------------------------------- step view

function stepTitle(steps, k, method) {
  if (k === steps.answer_step) return `step ${k + 1}: answer`;
  return `step ${k + 1} | ${plainLabel(method)} step score ${fmt(at(steps.scores[method], k), 4)}`;
}

function paintStepTokens(block, data, method, open) {
  const levels = data.levels[method] || [];
  for (const el of block.querySelectorAll(".tok[data-i]")) {
    const i = Number(el.dataset.i);
    el.style.backgroundColor = open ? heatColour(levels[i]) : "";
    if (open) {
      el.dataset.tip = tokenTitle(data.tokens[i], at(data.scores[method], i),
                                  at(data.weights[method], i), at(data.token_advantages[method], i));
    } else {
      delete el.dataset.tip;
    }
  }
}

function paintSteps(root, overview, data, steps, method) {
  const levels = steps.levels[method] || [];
  const tops = new Set((steps.top[method] || []).flat());
  for (const block of root.querySelectorAll(".step[data-step]")) {
    const k = Number(block.dataset.step);
    const open = block.classList.contains("open");
    block.style.backgroundColor = open ? "" : heatColour(levels[k]);
    block.title = stepTitle(steps, k, method);
    for (const el of block.querySelectorAll(".tok[data-i]")) {
      el.classList.toggle("top", tops.has(Number(el.dataset.i)));
    }
    if (open) paintStepTokens(block, data, method, true);
  }
  for (const cell of overview.querySelectorAll(".cell[data-step]")) {
    const k = Number(cell.dataset.step);
    cell.style.backgroundColor = heatColour(levels[k]);
    cell.title = stepTitle(steps, k, method);
  }
  root.dataset.method = method;
}

function outlineOracleSteps(root, overview, steps, set) {
  const flags = steps.oracle[set] || [];
  for (const el of [...root.querySelectorAll(".step[data-step]"), ...overview.querySelectorAll(".cell[data-step]")]) {
    el.classList.toggle("oracle", Boolean(flags[Number(el.dataset.step)]));
  }
}

function goToStep(k) {
  const block = document.getElementById(`step-${k}`);
  if (!block) return;
  block.scrollIntoView({ block: "center" });
  block.classList.remove("flash");
  void block.offsetWidth;  // restart the animation
  block.classList.add("flash");
}

// The pieces of each step (an untokenised gap goes with the token after it, a trailing gap
// with the last step), without the whitespace at the block's edges (the line breaks between
// steps, which the blocks already show): step_view.step_pieces, trimmed for display.
function stepPieces(pieces, steps) {
  const owner = [];
  steps.steps.forEach(([a, b], k) => { for (let i = a; i < b; i++) owner[i] = k; });
  const groups = steps.steps.map(() => []);
  let pending = [];
  for (const [i, text] of pieces) {
    if (i === null) { pending.push([null, text]); continue; }
    if (owner[i] !== undefined) groups[owner[i]].push(...pending, [i, text]);
    pending = [];
  }
  if (groups.length) groups[groups.length - 1].push(...pending);
  for (const parts of groups) {
    for (const part of parts) { part[1] = part[1].replace(/^\s+/, ""); if (part[1]) break; }
    for (const part of [...parts].reverse()) { part[1] = part[1].replace(/\s+$/, ""); if (part[1]) break; }
  }
  return groups;
}

function buildSteps(root, pieces, steps) {
  const groups = stepPieces(pieces, steps);
  for (const block of root.querySelectorAll(".step[data-step]")) {
    const holder = block.querySelector(".step-text");
    const spans = (groups[Number(block.dataset.step)] || []).map(([i, text]) => {
      const span = document.createElement("span");
      span.replaceChildren(...visibleNodes(text));
      if (i === null) span.className = "gap";
      else { span.className = "tok"; span.dataset.i = String(i); }
      return span;
    });
    holder.replaceChildren(...spans);
  }
}

function attachStepView(data, steps, selected, pieces) {
  const root = document.getElementById("steps");
  const overview = document.getElementById("overview");
  buildSteps(root, pieces, steps);
  root.addEventListener("click", (ev) => {
    const block = ev.target.closest(".step[data-step]");
    if (!block || window.getSelection().toString()) return;
    const open = block.classList.toggle("open");
    block.style.backgroundColor = open ? "" : heatColour((steps.levels[selected()] || [])[Number(block.dataset.step)]);
    paintStepTokens(block, data, selected(), open);
  });
  overview.addEventListener("click", (ev) => {
    const cell = ev.target.closest(".cell[data-step]");
    if (cell) goToStep(Number(cell.dataset.step));
  });
  const matrix = document.getElementById("step-matrix");
  if (matrix) {
    matrix.addEventListener("click", (ev) => {
      const row = ev.target.closest("tr[data-step]");
      if (!row) return;
      showView("steps");
      goToStep(Number(row.dataset.step));
    });
  }
  attachTooltip(root);
  return { root, overview };
}

function showView(name) {
  for (const view of ["steps", "tokens"]) {
    const section = document.getElementById(`${view === "steps" ? "step" : "token"}-view`);
    const button = document.getElementById(`view-${view}`);
    if (section) section.hidden = view !== name;
    if (button) button.setAttribute("aria-pressed", String(view === name));
  }
}

// --------------------------------------------------------------------------- pages

function tracePage() {
  const data = JSON.parse(document.getElementById("trace-data").textContent);
  const steps = JSON.parse(document.getElementById("step-data").textContent);
  const pieces = JSON.parse(document.getElementById("token-pieces").textContent);
  const root = document.getElementById("heatmap");
  if (!root.children.length) {  // long traces: the token view is built here
    buildHeatmap(root, pieces.map(([index, text, classes]) => ({ index, text, classes })));
  }
  const methodSelect = document.getElementById("method-select");
  const oracleSelect = document.getElementById("oracle-select");
  const exportLink = document.getElementById("export-html");
  const selected = () => methodSelect.value;
  attachTooltip(root);
  const view = attachStepView(data, steps, selected, pieces);
  for (const button of document.querySelectorAll(".view-toggle button[data-view]")) {
    button.addEventListener("click", () => showView(button.dataset.view));
  }
  const paint = () => {
    if (data.methods.length) {
      paintHeatmap(root, data, selected(), tokenColours(data, selected()));
      paintSteps(view.root, view.overview, data, steps, selected());
    }
    paintLegend(data);
    drawScores("chart-scores", data, selected(), steps);
    drawAdvantage("chart-advantage", data, selected(), steps);
    drawPolicy("chart-policy", data, selected());
  };
  paint();
  for (const id of ["colour-select", "scale-select"]) document.getElementById(id).addEventListener("change", paint);
  methodSelect.addEventListener("change", () => {
    paint();
    const url = new URL(window.location.href);
    url.searchParams.set("method", selected());
    window.history.replaceState(null, "", url);
    const link = new URL(exportLink.href);
    link.searchParams.set("method", selected());
    exportLink.href = link.toString();
  });
  const poolSelect = document.getElementById("pool-select");
  poolSelect.addEventListener("change", () => {  // step scores are pooled on the server
    const url = new URL(window.location.href);
    url.searchParams.set("method", selected());
    url.searchParams.set("pool", poolSelect.value);
    window.location.assign(url);
  });
  oracleSelect.addEventListener("change", () => {
    outlineOracle(root, data, oracleSelect.value);
    outlineOracleSteps(view.root, view.overview, steps, oracleSelect.value);
  });
}

function reportPage() {
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const methods = [...new Set(data.recall.map((r) => r.method))].sort();
  const bars = data.oracle_sets.map((set) => {
    const rows = methods.map((m) => data.recall.find((r) => r.method === m && r.oracle === set));
    const y = rows.map((r) => (r ? r.recall : null));
    return {
      type: "bar", name: plotlyLabel(set), x: methods.map(plotlyLabel), y,
      error_y: { type: "data", symmetric: false,
                 array: rows.map((r, i) => (r && r.ci95[1] !== null ? r.ci95[1] - y[i] : 0)),
                 arrayminus: rows.map((r, i) => (r && r.ci95[0] !== null ? y[i] - r.ci95[0] : 0)) },
    };
  });
  if (document.getElementById("chart-recall")) {  // absent when no trace carries an oracle
    Plotly.newPlot("chart-recall", bars, {
      barmode: "group", margin: { t: 10, r: 10, b: 60, l: 50 },
      yaxis: { title: { text: "recall@|O|" }, range: [0, 1] }, legend: { orientation: "h" },
    }, { responsive: true, displaylogo: false });
  }
  const ag = data.agreement;
  Plotly.newPlot("chart-agreement", [{
    type: "heatmap", z: ag.spearman, x: ag.methods.map(plotlyLabel), y: ag.methods.map(plotlyLabel), zmin: -1, zmax: 1,
    colorscale: "RdBu", reversescale: true,
    text: ag.spearman.map((row) => row.map((v) => fmt(v, 2))), texttemplate: "%{text}",
    hovertemplate: "%{y} vs %{x}: %{z:.3f}<extra></extra>",
  }], { margin: { t: 10, r: 10, b: 80, l: 80 }, yaxis: { autorange: "reversed" } },
  { responsive: true, displaylogo: false });
  const credit = data.credit;
  Plotly.newPlot("chart-credit", [
    { type: "bar", name: "ESS ratio", x: credit.map((c) => plotlyLabel(c.method)), y: credit.map((c) => c.ess_ratio) },
    { type: "bar", name: "top-10% mass", x: credit.map((c) => plotlyLabel(c.method)), y: credit.map((c) => c.top10_mass) },
  ], { barmode: "group", margin: { t: 10, r: 10, b: 60, l: 50 }, yaxis: { range: [0, 1] },
       legend: { orientation: "h" } }, { responsive: true, displaylogo: false });
}

function attributePage() {
  const form = document.getElementById("attribute-form");
  const status = document.getElementById("attribute-status");
  const result = document.getElementById("attribute-result");
  const root = document.getElementById("heatmap");
  const methodSelect = document.getElementById("method-select");
  let data = null;
  attachTooltip(root);
  methodSelect.addEventListener("change", () => {
    paintHeatmap(root, data, methodSelect.value);
    drawScores("chart-scores", data, methodSelect.value);
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const fields = new FormData(form);
    const body = { prompt: fields.get("prompt"), response: fields.get("response"),
                   methods: fields.getAll("methods"), probe: fields.get("probe") };
    status.textContent = "attributing…";
    const reply = await fetch("/api/attribute", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    const answer = await reply.json();
    if (!reply.ok) {
      const detail = typeof answer.detail === "string" ? answer.detail
        : (answer.detail || []).map((e) => `${(e.loc || []).join(".")}: ${e.msg}`).join("; ");
      status.textContent = `error ${reply.status}: ${detail}`;
      return;
    }
    data = answer.view.payload;
    buildHeatmap(root, answer.view.pieces);
    methodSelect.replaceChildren(...data.methods.map((m) => {
      const option = document.createElement("option");
      option.value = m; option.textContent = plainLabel(m);
      return option;
    }));
    paintHeatmap(root, data, data.methods[0]);
    result.hidden = false;
    drawScores("chart-scores", data, data.methods[0]);
    status.textContent = `done: ${data.tokens.length} response tokens`;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "trace") tracePage();
  else if (page === "report") reportPage();
  else if (page === "attribute") attributePage();
});
