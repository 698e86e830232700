"""Exports of one trace: its view as ONE self-contained HTML file, and its token and step
tables as CSV and JSON. The web app serves the same files; `TraceAttribution.to_html`
writes the HTML view from Python.

The HTML view has no script and loads nothing: styles are inline, colours are computed here,
a step's tokens open with <details>, and a Content-Security-Policy meta tag forbids every
request. Every text of the trace (prompt, tokens, step texts, method names) goes through
Jinja's autoescaping, so model output can only ever be text; invisible and bidi control
characters in it are shown as a visible marker (`visible_text`, also the web app's `visible`
filter) so that they can neither hide text nor reorder what is shown around them.

The CSV tables are safe to open in a spreadsheet: every text cell is quoted (a CR, LF or TAB
inside a cell can never start a row), and a cell a spreadsheet would run as a formula gets a
leading `'` (`csv_cell`).
"""
from __future__ import annotations

import csv
import io
import json
import math
import unicodedata
from pathlib import Path

import jinja2
import markupsafe

from ..defaults import VIEW_STEP_POOL
from .step_view import display_levels, step_pieces, step_table, trace_steps

EXPORT_KINDS = ("view.html", "tokens.csv", "steps.csv", "tokens.json", "steps.json")
_TEMPLATES = Path(__file__).resolve().parents[1] / "assets" / "export"
_HEAT_RGB = (230, 85, 13)  # the heat colour of the web app too (its views use heat_style; static/app.js)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["heat"] = heat_style
    env.filters["num"] = fmt_number
    env.filters["visible"] = visible_text
    return env


# Characters that draw nothing or move the text around them: C0/C1 controls (but for tab and
# newline, which the views lay out), format characters (bidi embeddings, overrides and
# isolates U+202A-202E, U+2066-2069, marks U+200E/F, zero-width space and joiners, BOM) and
# the line and paragraph separators.
_SHOWN_CONTROLS = {"\t", "\n"}


def is_invisible(char: str) -> bool:
    """Whether `char` is a control or format character that a view must show as a marker."""
    return char not in _SHOWN_CONTROLS and unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")


def visible_text(text) -> markupsafe.Markup:
    """HTML of untrusted text: escaped, and each invisible or bidi control character replaced
    by a visible marker whose title names its code point (the character itself is dropped,
    so it cannot reorder the page). The one helper of the exports and the web app's pages;
    static/app.js's `visibleText` does the same in the browser."""
    text = "" if text is None else str(text)
    out = []
    for char in text:
        if is_invisible(char):
            name = unicodedata.name(char, "control")
            out.append(markupsafe.Markup('<span class="ctl" title="U+{:04X} {}">\u25c7</span>')
                       .format(ord(char), name))
        else:
            out.append(markupsafe.escape(char))
    return markupsafe.Markup("").join(out)


def plain_text(text) -> str:
    """Untrusted text for a place that takes no markup (a tooltip): each invisible or bidi
    control character as `⟨U+XXXX⟩`. static/text.js's `plainLabel` does the same."""
    return "".join(f"\u27e8U+{ord(c):04X}\u27e9" if is_invisible(c) else c for c in str(text))


def isolated_text(text) -> markupsafe.Markup:
    """`visible_text` inside <bdi>: user or model text set among the page's own words (a run
    name in a breadcrumb, a method in a table) can then not reorder them, even when it is
    right-to-left. The web app's `bdi` filter."""
    return markupsafe.Markup("<bdi>{}</bdi>").format(visible_text(text))


def heat_style(level) -> str:
    """CSS background of a level in [0, 1] ('' when missing): the web app's heat scale."""
    if level is None:
        return ""
    alpha = 0.06 + 0.84 * float(level)
    return f"background-color: rgba({_HEAT_RGB[0]}, {_HEAT_RGB[1]}, {_HEAT_RGB[2]}, {alpha:.3f})"


def fmt_number(x, spec: str = ".4g") -> str:
    return "n/a" if x is None or not math.isfinite(float(x)) else format(float(x), spec)


def _finite(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def token_rows(record) -> list[dict]:
    """One row per response token: position, token, segment, scored, step, and per method
    its score, weight and (when stored) reshaped advantage."""
    step_of = {}
    for s in trace_steps(record):
        for i in range(s.start, s.end):
            step_of[i] = s.index
    scored = list(record.scored)
    rows = []
    for i, token in enumerate(record.tokens):
        row = {"position": i, "token": token, "start": int(record.offsets[i][0]),
               "end": int(record.offsets[i][1]), "segment": record.segments[i],
               "scored": bool(scored[i]), "step": step_of.get(i)}
        for m, a in record.attributions.items():
            row[f"score.{m}"] = _finite(a.scores[i])
            row[f"weight.{m}"] = _finite(a.weights[i])
            if a.token_advantages is not None:
                row[f"advantage.{m}"] = _finite(a.token_advantages[i])
        rows.append(row)
    return rows


def step_rows(record, table: dict | None = None, pool: str = VIEW_STEP_POOL) -> list[dict]:
    """One row per step: index, token and character range, answer flag, text, and per
    method its step score (tokens pooled by `pool`) and level (normalised over the steps)."""
    table = table or step_table(record, pool)
    rows = []
    for s, text in zip(table["steps"], table["texts"]):
        row = {"step": s["index"], "start": s["start"], "end": s["end"],
               "char_start": s["char_start"], "char_end": s["char_end"], "answer": s["answer"],
               "text": text}
        for m in table["scores"]:
            row[f"score.{m}"] = table["scores"][m][s["index"]]
            row[f"level.{m}"] = table["levels"][m][s["index"]]
        for name, flags in table["oracle"].items():
            row[f"oracle.{name}"] = flags[s["index"]]
        rows.append(row)
    return rows


# What starts a formula in a spreadsheet (OWASP's list): a cell beginning with one of these,
# also after leading whitespace, is guarded by a leading quote.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A value as a CSV cell: None as empty; a text a spreadsheet would run as a formula
    with a leading `'`; numbers unchanged."""
    if value is None:
        return ""
    if isinstance(value, str) and (value[:1] in FORMULA_STARTS
                                   or value.lstrip()[:1] in FORMULA_STARTS):
        return "'" + value
    return value


def rows_csv(rows: list[dict]) -> str:
    """CSV text of rows (header from the first row). Every text cell is quoted, so a CR, LF,
    TAB or comma inside one stays inside it, and formula cells are guarded (`csv_cell`)."""
    out = io.StringIO()
    if not rows:
        return ""
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n",
                            quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_cell(v) for k, v in row.items()})
    return out.getvalue()


def rows_json(rows: list[dict]) -> str:
    return json.dumps(rows, ensure_ascii=False, allow_nan=False)


def render_html(record, method: str | None = None, *, title: str | None = None,
                random_weights: bool = False, oracle_set: str = "direct",
                pool: str = VIEW_STEP_POOL) -> str:
    """The self-contained HTML view of a TraceRecord, coloured by `method` (default oar_p,
    else the first method), steps of `oracle_set` outlined when the trace has an oracle."""
    methods = list(record.attributions)
    method = method if method in methods else ("oar_p" if "oar_p" in methods else
                                               (methods[0] if methods else None))
    table = step_table(record, pool)
    levels = _token_levels(record, method) if method is not None else {}
    tops = table["top"].get(method) or [[] for _ in table["steps"]]
    steps = []
    for s, text, pieces in zip(table["steps"], table["texts"], step_pieces(record, table["steps"])):
        k = s["index"]
        steps.append({**s, "text": text, "pieces": pieces, "top": set(tops[k]),
                      "level": table["levels"][method][k] if method else None,
                      "score": table["scores"][method][k] if method else None})
    return _env().get_template("trace.html").render(
        record=record, method=method, methods=methods, steps=steps, table=table,
        token_levels=levels, oracle_steps=table["oracle"].get(oracle_set),
        title=title or (f"Trace {record.id}" if record.id else "Trace"),
        random_weights=random_weights, rows=step_rows(record, table))


def _token_levels(record, method: str) -> dict[int, float]:
    """Token display levels of `method` over the scored tokens (the gate's I^)."""
    scored = list(record.scored)
    values = [float(v) if scored[i] else None for i, v in enumerate(record.attributions[method].scores)]
    return {i: v for i, v in enumerate(display_levels(values)) if v is not None}


def export(record, kind: str, method: str | None = None, pool: str = VIEW_STEP_POOL,
           **html_options) -> tuple[str, str]:
    """(text, media type) of one export kind of a TraceRecord (see EXPORT_KINDS)."""
    from ..errors import unknown_name

    if kind == "view.html":
        return render_html(record, method, pool=pool, **html_options), "text/html; charset=utf-8"
    if kind not in EXPORT_KINDS:
        raise unknown_name("export", kind, EXPORT_KINDS)
    rows = token_rows(record) if kind.startswith("tokens") else step_rows(record, pool=pool)
    if kind.endswith(".csv"):
        return rows_csv(rows), "text/csv; charset=utf-8"
    return rows_json(rows), "application/json"


def write_html(attribution_or_record, path: str | Path, method: str | None = None) -> Path:
    """Write the HTML view of a TraceAttribution (or TraceRecord) to `path`."""
    from .record import TraceRecord

    record = attribution_or_record
    if not isinstance(record, TraceRecord):
        record = TraceRecord.from_attribution(record)
    path = Path(path)
    path.write_text(render_html(record, method), encoding="utf-8")
    return path
