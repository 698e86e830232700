// The gradient-alignment page: paired differences with their intervals per part of the batch,
// and each method's bias against its variance. Method labels come from a command line, so
// every label goes through text.js's plotlyLabel (Plotly labels accept a little HTML).
"use strict";

const ALIGN_CONFIG = { responsive: true, displaylogo: false };
const PART_COLOURS = { all: "#1f77b4", pos: "#2ca02c", neg: "#d62728" };

function deltaTrace(names, data, part, label) {
  const stats = names.map((m) => (part === "all" ? data.methods[m].delta_cos : data.methods[m][part].delta_cos) || {});
  const ok = (v) => (v === null || v === undefined ? 0 : v);
  return {
    type: "bar", name: label, x: names.map(plotlyLabel), y: stats.map((d) => d.mean),
    marker: { color: PART_COLOURS[part] },
    error_y: { type: "data", symmetric: false,
               array: stats.map((d) => ok(d.high) - ok(d.mean)), arrayminus: stats.map((d) => ok(d.mean) - ok(d.low)) },
  };
}

function alignPage() {
  const data = JSON.parse(document.getElementById("align-data").textContent);
  const names = Object.keys(data.methods).filter((m) => m !== "none");
  Plotly.newPlot("chart-delta", [
    deltaTrace(names, data, "all", "all rows"),
    deltaTrace(names, data, "pos", "rows with A > 0"),
    deltaTrace(names, data, "neg", "rows with A ≤ 0"),
  ], { barmode: "group", margin: { t: 10, r: 10, b: 80, l: 70 }, legend: { orientation: "h" },
       yaxis: { title: { text: "cos(g, g*) − cos(g_GRPO, g*)" }, zeroline: true } }, ALIGN_CONFIG);
  const all = Object.keys(data.methods).filter((m) => data.methods[m].mean_gradient);
  Plotly.newPlot("chart-bias", [{
    type: "scatter", mode: "markers+text", x: all.map((m) => data.methods[m].mean_gradient.noise_to_signal),
    y: all.map((m) => data.methods[m].mean_gradient.direction_grpo), text: all.map(plotlyLabel),
    textposition: "top center", marker: { size: 10, color: all.map((m) => (m === "none" ? "#4c4c4c" : "#1f77b4")) },
  }], { margin: { t: 10, r: 10, b: 50, l: 70 },
        xaxis: { title: { text: "per-batch noise / signal (lower: less variance)" } },
        yaxis: { title: { text: "direction vs GRPO's expected gradient (1: no bias)" } } }, ALIGN_CONFIG);
}

if (document.body.dataset.page === "align") alignPage();
