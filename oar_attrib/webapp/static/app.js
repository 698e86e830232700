// oar-attrib page scripts. Data comes from <script type="application/json"> blocks or the
// JSON API; text is written with textContent only (never innerHTML), so no trace text can
// become markup. Plotly hover labels accept a little HTML, so text given to them is escaped.
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
  return `token ${JSON.stringify(token)} | score ${fmt(score, 4)} | weight ${w} | reshaped advantage ${fmt(adv, 4)}`;
}

function escapeForPlotly(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function at(values, i) { return values ? values[i] : null; }

// --------------------------------------------------------------------------- heatmap

function paintHeatmap(root, data, method) {
  const levels = data.levels[method] || [];
  for (const el of root.querySelectorAll(".tok[data-i]")) {
    const i = Number(el.dataset.i);
    el.style.backgroundColor = heatColour(levels[i]);
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
    span.textContent = p.text;
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
  return data.tokens.map((t, i) => `${escapeForPlotly(JSON.stringify(t))}<br>` +
    `${escapeForPlotly(method)}: ${fmt(at(data.scores[method], i), 4)}`);
}

function drawScores(id, data, selected) {
  const x = data.tokens.map((_, i) => i);
  const traces = data.methods.map((m) => ({
    x, y: data.levels[m], name: m, type: "scatter", mode: "lines+markers",
    line: { width: m === selected ? 3 : 1.2 }, marker: { size: m === selected ? 6 : 3 },
    text: hoverTexts(data, m), hoverinfo: "text+name", connectgaps: false,
  }));
  Plotly.react(id, traces, {
    margin: { t: 10, r: 10, b: 40, l: 50 }, xaxis: { title: { text: "response token" } },
    yaxis: { title: { text: "normalised importance" }, range: [-0.05, 1.05] },
    legend: { orientation: "h" },
  }, { responsive: true, displaylogo: false });
}

function drawAdvantage(id, data, selected) {
  const x = data.tokens.map((_, i) => i);
  // With A = 0 (a group that was all right or all wrong) every A·w_t is 0: show w_t instead.
  const useAdv = Boolean(data.advantage) && Object.keys(data.token_advantages).length > 0;
  const source = useAdv ? data.token_advantages : data.weights;
  const traces = data.methods.filter((m) => source[m]).map((m) => ({
    x, y: source[m], name: m, type: "scatter", mode: "lines",
    line: { width: m === selected ? 3 : 1.2, shape: "hvh" },
    text: data.tokens.map((t) => escapeForPlotly(JSON.stringify(t))), hoverinfo: "text+y+name",
  }));
  Plotly.react(id, traces, {
    margin: { t: 10, r: 10, b: 40, l: 50 }, xaxis: { title: { text: "response token" } },
    yaxis: { title: { text: useAdv ? "A · w_t" : "w_t" } }, legend: { orientation: "h" },
  }, { responsive: true, displaylogo: false });
}

// --------------------------------------------------------------------------- pages

function tracePage() {
  const data = JSON.parse(document.getElementById("trace-data").textContent);
  const root = document.getElementById("heatmap");
  const methodSelect = document.getElementById("method-select");
  const oracleSelect = document.getElementById("oracle-select");
  const selected = () => methodSelect.value;
  attachTooltip(root);
  if (data.methods.length) paintHeatmap(root, data, selected());
  drawScores("chart-scores", data, selected());
  drawAdvantage("chart-advantage", data, selected());
  methodSelect.addEventListener("change", () => {
    paintHeatmap(root, data, selected());
    drawScores("chart-scores", data, selected());
    drawAdvantage("chart-advantage", data, selected());
    const url = new URL(window.location.href);
    url.searchParams.set("method", selected());
    window.history.replaceState(null, "", url);
  });
  oracleSelect.addEventListener("change", () => outlineOracle(root, data, oracleSelect.value));
}

function reportPage() {
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const methods = [...new Set(data.recall.map((r) => r.method))].sort();
  const bars = data.oracle_sets.map((set) => {
    const rows = methods.map((m) => data.recall.find((r) => r.method === m && r.oracle === set));
    const y = rows.map((r) => (r ? r.recall : null));
    return {
      type: "bar", name: set, x: methods, y,
      error_y: { type: "data", symmetric: false,
                 array: rows.map((r, i) => (r && r.ci95[1] !== null ? r.ci95[1] - y[i] : 0)),
                 arrayminus: rows.map((r, i) => (r && r.ci95[0] !== null ? y[i] - r.ci95[0] : 0)) },
    };
  });
  Plotly.newPlot("chart-recall", bars, {
    barmode: "group", margin: { t: 10, r: 10, b: 60, l: 50 },
    yaxis: { title: { text: "recall@|O|" }, range: [0, 1] }, legend: { orientation: "h" },
  }, { responsive: true, displaylogo: false });
  const ag = data.agreement;
  Plotly.newPlot("chart-agreement", [{
    type: "heatmap", z: ag.spearman, x: ag.methods, y: ag.methods, zmin: -1, zmax: 1,
    colorscale: "RdBu", reversescale: true,
    text: ag.spearman.map((row) => row.map((v) => fmt(v, 2))), texttemplate: "%{text}",
    hovertemplate: "%{y} vs %{x}: %{z:.3f}<extra></extra>",
  }], { margin: { t: 10, r: 10, b: 80, l: 80 }, yaxis: { autorange: "reversed" } },
  { responsive: true, displaylogo: false });
  const credit = data.credit;
  Plotly.newPlot("chart-credit", [
    { type: "bar", name: "ESS ratio", x: credit.map((c) => c.method), y: credit.map((c) => c.ess_ratio) },
    { type: "bar", name: "top-10% mass", x: credit.map((c) => c.method), y: credit.map((c) => c.top10_mass) },
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
      option.value = m; option.textContent = m;
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
