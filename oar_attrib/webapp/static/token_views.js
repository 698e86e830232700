// The trace page's "colour by" views beside importance (webapp/token_views.py computes every
// level; this file only picks one): importance, log-probability (as surprisal), entropy, the
// reshaped advantage A·w_t (orange positive, blue negative) and TRL's entropy top-20% mask,
// each on the value scale or the rank scale. Loaded before app.js, which calls tokenColours.
"use strict";

const NEGATIVE = [31, 78, 154];  // app.css --accent

function levelColour(level, rgb) {
  if (level === null || level === undefined) return "";
  return `rgba(${rgb[0]}, ${rgb[1]}, ${rgb[2]}, ${(0.06 + 0.84 * level).toFixed(3)})`;
}

function advantageColours(data, method, scale) {
  const values = data.token_advantages[method] || data.weights[method] || [];
  const scored = data.scored;
  const mags = values.map((v, i) => (scored[i] && Number.isFinite(v) ? Math.abs(v) : null));
  let levels;
  if (scale === "rank") {
    const order = mags.map((v, i) => [v, i]).filter(([v]) => v !== null).sort((a, b) => a[0] - b[0]);
    levels = mags.map(() => null);
    order.forEach(([, i], k) => { levels[i] = order.length > 1 ? k / (order.length - 1) : 1; });
  } else {
    const top = Math.max(0, ...mags.filter((v) => v !== null));
    levels = mags.map((v) => (v === null ? null : (top > 0 ? v / top : 0)));
  }
  return values.map((v, i) => levelColour(levels[i], v < 0 ? NEGATIVE : HEAT));
}

// One CSS colour per response token for the selected view, or null for app.js's default
// (importance on the value scale).
function tokenColours(data, method) {
  const colourBy = document.getElementById("colour-select");
  const scale = document.getElementById("scale-select");
  if (!colourBy || !scale || !data.views) return null;
  const by = colourBy.value, sc = scale.value;
  const stats = data.views.stats;
  if (by === "importance") {
    return sc === "rank" ? (data.views.rank[method] || []).map((l) => levelColour(l, HEAT)) : null;
  }
  if (by === "advantage") return advantageColours(data, method, sc);
  if (!stats) return data.tokens.map(() => "");
  if (by === "entropy_top") return stats.entropy_top.map((k) => (k ? levelColour(1, HEAT) : ""));
  const levels = (sc === "rank" ? stats.rank : stats.levels)[by] || [];
  return levels.map((l) => levelColour(l, HEAT));
}

// The legend of each "colour by" view: [swatch class, words] pairs. The reshaped advantage is
// a diverging scale (its sign is the colour), the others run from low to high.
function legendItems(by, rank, stats) {
  const top = stats ? Math.round(stats.rho * 100) : 20;
  const items = {
    importance: [["lo", "low importance"], ["hi", "high"]],
    advantage: [["neg", "negative A·w_t (blue)"], ["zero", "0"], ["hi", "positive A·w_t (orange); shade: |A·w_t|"]],
    logprob: [["lo", "low surprisal (a likely token)"], ["hi", "high surprisal"]],
    entropy: [["lo", "low entropy"], ["hi", "high entropy"]],
    entropy_top: [["zero", "not in the mask"], ["hi", `top ${top}% entropy (TRL's mask)`]],
  }[by] || [];
  return rank && by !== "entropy_top" ? items.map(([c, w]) => [c, `${w} (rank)`]) : items;
}

// Writes the legend of the selected view into #colour-legend (text only, no markup from data).
function paintLegend(data) {
  const box = document.getElementById("colour-legend");
  const colourBy = document.getElementById("colour-select");
  const scale = document.getElementById("scale-select");
  if (!box || !colourBy || !scale) return;
  box.replaceChildren();
  const stats = data.views && data.views.stats;
  legendItems(colourBy.value, scale.value === "rank", stats).forEach(([cls, words], k) => {
    const swatch = document.createElement("span");
    swatch.className = `swatch ${cls}`;
    box.append(...(k ? [" "] : []), swatch, ` ${words}`);
  });
  box.dataset.colour = colourBy.value;
}

function drawPolicy(id, data, selected) {
  const box = document.getElementById(id);
  const stats = data.views && data.views.stats;
  if (!box || !stats) return;
  const x = data.tokens.map((_, i) => i);
  const text = data.tokens.map((t) => plotlyLabel(JSON.stringify(t)));
  const top = x.filter((i) => stats.entropy_top[i]);
  Plotly.react(id, [
    { x, y: stats.logprob, name: "log-probability", type: "scatter", mode: "lines", text,
      hoverinfo: "text+y+name" },
    { x, y: stats.entropy, name: "entropy (nats)", type: "scatter", mode: "lines", yaxis: "y2",
      text, hoverinfo: "text+y+name" },
    { x: top, y: top.map((i) => stats.entropy[i]), name: `entropy top ${Math.round(stats.rho * 100)}%`,
      type: "scatter", mode: "markers", yaxis: "y2", marker: { symbol: "triangle-up", size: 8 },
      text: top.map((i) => text[i]), hoverinfo: "text+y+name" },
  ], {
    margin: { t: 10, r: 60, b: 40, l: 60 }, xaxis: { title: { text: "response token" } },
    yaxis: { title: { text: "log p(y_t)" } },
    yaxis2: { title: { text: "entropy" }, overlaying: "y", side: "right", rangemode: "tozero" },
    legend: { orientation: "h" },
  }, { responsive: true, displaylogo: false });
  const agreement = document.getElementById("entropy-agreement");
  if (agreement) {
    const rho = stats.agreement[selected];
    agreement.textContent = `${selected} vs entropy, Spearman over the scored tokens: ${fmt(rho, 3)}`;
  }
}
