// The credit profiles page (analysis/profiles.py computes every number; this only draws).
// Method names reach Plotly as trace names and titles through text.js's plotlyLabel, as
// everywhere in the app.
"use strict";

const CONFIG = { responsive: true, displaylogo: false };

function drawPosition(p) {
  const x = p.centres;
  const lines = ["all", "correct", "wrong"].map((name) => ({
    x, y: p.subsets[name].mean, name: `${name} (${Math.max(0, ...p.subsets[name].n)} traces)`,
    type: "scatter", mode: "lines+markers", connectgaps: false,
    customdata: p.subsets[name].n, hovertemplate: "position %{x:.2f}: %{y:.3f} (%{customdata} traces)",
  }));
  lines.push({ x: [0, 1], y: [1, 1], name: "uniform", mode: "lines", hoverinfo: "skip",
               line: { dash: "dot", color: "rgba(90, 100, 115, 0.6)" } });
  Plotly.newPlot("chart-position", lines, {
    margin: { t: 10, r: 10, b: 40, l: 60 }, legend: { orientation: "h" },
    xaxis: { title: { text: "relative position in the reasoning" }, range: [0, 1] },
    yaxis: { title: { text: `mean weight (${plotlyLabel(p.method)})` } },
  }, CONFIG);
}

function drawSteps(p) {
  if (!p.steps.length) return;
  Plotly.newPlot("chart-step-position", [{
    type: "heatmap", z: p.by_step, x: p.centres, y: p.steps.map((s) => `step ${s}`),
    colorscale: "Viridis", hovertemplate: "%{y}, position %{x:.2f}: %{z:.3f}<extra></extra>",
  }], { margin: { t: 10, r: 10, b: 40, l: 70 }, xaxis: { title: { text: "relative position" } } }, CONFIG);
  Plotly.newPlot("chart-concentration", [
    { x: p.steps, y: p.ess_ratio, name: "ESS ratio", type: "scatter", mode: "lines+markers" },
    { x: p.steps, y: p.top10_mass, name: "top-10% mass", type: "scatter", mode: "lines+markers" },
  ], { margin: { t: 10, r: 10, b: 40, l: 60 }, legend: { orientation: "h" },
       xaxis: { title: { text: "training step" } }, yaxis: { range: [0, 1.05] } }, CONFIG);
}

document.addEventListener("DOMContentLoaded", () => {
  const block = document.getElementById("profile-data");
  if (!block) return;
  const profile = JSON.parse(block.textContent);
  drawPosition(profile);
  drawSteps(profile);
});
