// The experiment page: accuracy curves with seed bands, paired differences, credit metrics,
// seconds per step. Data comes from the page's JSON block; method labels come from an
// experiment file, so they go through text.js's plotlyLabel (Plotly labels accept a little HTML).
"use strict";

const PALETTE = ["#4c4c4c", "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"];
const CONFIG = { responsive: true, displaylogo: false };

function bandTraces(curve, colour, name, axis, showLegend) {
  const x = curve.steps;
  return [
    { x: x.concat([...x].reverse()), y: curve.hi.concat([...curve.lo].reverse()), fill: "toself",
      fillcolor: colour, opacity: 0.15, line: { width: 0 }, hoverinfo: "skip", showlegend: false,
      legendgroup: name, xaxis: axis.x, yaxis: axis.y },
    { x, y: curve.mean, mode: "lines+markers", name: plotlyLabel(name), legendgroup: name,
      line: { color: colour }, showlegend: showLegend, xaxis: axis.x, yaxis: axis.y },
  ];
}

function curvesChart(id, data, keys, colours) {
  const traces = [];
  const layout = { grid: { rows: 1, columns: keys.length, pattern: "independent" },
                   margin: { t: 30, r: 10, b: 40, l: 50 }, legend: { orientation: "h" }, annotations: [] };
  keys.forEach((key, i) => {
    const axis = { x: i ? `x${i + 1}` : "x", y: i ? `y${i + 1}` : "y" };
    data.methods.forEach((m) => {
      const curve = (data.curves[key] || {})[m];
      if (curve) traces.push(...bandTraces(curve, colours[m], m, axis, i === 0));
    });
    layout.annotations.push({ text: plotlyLabel(key), showarrow: false, xref: `${axis.x} domain`,
                              yref: `${axis.y} domain`, x: 0.5, y: 1.08 });
  });
  Plotly.newPlot(id, traces, layout, CONFIG);
}

function experimentPage() {
  const data = JSON.parse(document.getElementById("experiment-data").textContent);
  const colours = {};
  data.methods.forEach((m, i) => { colours[m] = PALETTE[i % PALETTE.length]; });
  curvesChart("chart-accuracy", data, data.accuracy_keys, colours);
  const paired = data.paired[data.metric] || {};
  const names = data.methods.filter((m) => paired[m] && paired[m].mean !== null);
  Plotly.newPlot("chart-paired", [{
    type: "bar", x: names.map(plotlyLabel), y: names.map((m) => paired[m].mean),
    marker: { color: names.map((m) => colours[m]) },
    error_y: { type: "data", symmetric: false,
               array: names.map((m) => (paired[m].hi === null ? 0 : paired[m].hi - paired[m].mean)),
               arrayminus: names.map((m) => (paired[m].lo === null ? 0 : paired[m].mean - paired[m].lo)) },
  }], { margin: { t: 10, r: 10, b: 60, l: 60 },
        yaxis: { title: { text: `final ${plotlyLabel(data.metric)} − GRPO` }, zeroline: true } }, CONFIG);
  curvesChart("chart-credit", data, ["oar/ess_ratio", "oar/top10_mass", "oar/weight_max", "entropy"], colours);
  Plotly.newPlot("chart-seconds", [{
    type: "bar", x: data.methods.map(plotlyLabel), y: data.methods.map((m) => (data.seconds[m] || {}).step),
    marker: { color: data.methods.map((m) => colours[m]) },
  }], { margin: { t: 10, r: 10, b: 60, l: 60 }, yaxis: { title: { text: "seconds / step" } } }, CONFIG);
}

if (document.body.dataset.page === "experiment") experimentPage();
