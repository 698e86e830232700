// Untrusted text (trace tokens, method, run and experiment names) for display, the one place
// the pages' scripts prepare it; every page loads this file before its own script.
// - plotlyLabel: Plotly draws a label's <a>, <b>, <span style>, ... as markup, so every label
//   and hover text given to it goes through this (escaped, its controls named).
// - visibleNodes: DOM nodes of a text with each invisible or bidi control shown as a marker
//   that names its code point on hover (export.visible_text's markers, in the browser).
"use strict";

// As export.is_invisible: control and format characters and the line and paragraph
// separators, but for tab and newline, which the views lay out.
const CONTROL = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

function codePoint(char) {
  return `U+${char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
}

function isControl(char) {
  return char !== "\t" && char !== "\n" && CONTROL.test(char);
}

// Text for places that take no markup (tooltips, option labels, SVG): each control as ⟨U+XXXX⟩.
function plainLabel(text) {
  return Array.from(String(text), (c) => (isControl(c) ? `⟨${codePoint(c)}⟩` : c)).join("");
}

function plotlyLabel(text) {
  return plainLabel(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function visibleNodes(text) {
  const nodes = [];
  let run = "";
  for (const c of String(text)) {
    if (!isControl(c)) { run += c; continue; }
    if (run) { nodes.push(document.createTextNode(run)); run = ""; }
    const marker = document.createElement("span");
    marker.className = "ctl";
    marker.title = codePoint(c);
    marker.textContent = "\u25c7";
    nodes.push(marker);
  }
  if (run) nodes.push(document.createTextNode(run));
  return nodes;
}
