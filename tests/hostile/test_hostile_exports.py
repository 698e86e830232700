"""Hostile exports: token and step texts that would split a CSV into forged rows or run as
spreadsheet formulas, and invisible or bidi control characters that would hide or reorder
text in the HTML view. Each export is read back and compared with what was written."""
import csv
import io
import re
from html.parser import HTMLParser

import pandas as pd
import pytest

from oar_attrib.attribution import TraceAttribution
from oar_attrib.records.export import (FORMULA_STARTS, csv_cell, render_html, rows_csv, step_rows,
                               token_rows, visible_text)
from oar_attrib.store.records import TraceRecord

# Each piece is one token; the response is their concatenation.
FORGING_TOKENS = ["x", " is", " 2", "\r=1+1", "\t=1+1", " @SUM(A1)", " +cmd", " -1", "\n",
                  "=1+2+3+cmd|' /C calc'!A0", " and", " y", " is", " 3", ".", " so", " ####", " 3"]
CONTROLS = {"\u202e": "RIGHT-TO-LEFT OVERRIDE", "\u2066": "LEFT-TO-RIGHT ISOLATE",
            "\u2067": "RIGHT-TO-LEFT ISOLATE", "\u2068": "FIRST STRONG ISOLATE",
            "\u2069": "POP DIRECTIONAL ISOLATE", "\u200d": "ZERO WIDTH JOINER",
            "\u200b": "ZERO WIDTH SPACE"}
BIDI_TOKENS = ["total", " =", " \u202e", "0001$", " yap", " ok", " \u2066a\u2069", "\u2067b\u2068",
               " c\u200dd", "\u200b", ".", " ####", " 1"]


def _record(pieces: list[str], methods=("oar_p", "entropy")) -> TraceRecord:
    offsets, at = [], 0
    for piece in pieces:
        offsets.append((at, at + len(piece)))
        at += len(piece)
    n = len(pieces)
    attribution = TraceAttribution(
        prompt="find y.\n", response="".join(pieces), token_ids=list(range(n)), tokens=pieces,
        offsets=offsets, segments=["reasoning"] * (n - 2) + ["bridge", "answer"], span_found=True,
        answer_span=offsets[-1], answer_text=pieces[-1].strip(), probe="as_mean",
        scores={m: [(-1) ** i * i / n for i in range(n)] for m in methods},
        weights={m: [1.0] * n for m in methods})
    return TraceRecord.from_attribution(attribution, trace_id=1)


def _written(rows: list[dict]) -> list[dict]:
    """The rows as their CSV cells are meant to read back: text guarded, None empty."""
    return [{k: str(csv_cell(v)) for k, v in row.items()} for row in rows]


def _guarded(text: str) -> bool:
    return text.startswith("'") or not (text[:1] in FORMULA_STARTS
                                        or text.lstrip()[:1] in FORMULA_STARTS)


@pytest.mark.parametrize("table", [token_rows, step_rows])
def test_a_csv_export_reads_back_as_exactly_the_rows_written(table):
    rows = table(_record(FORGING_TOKENS))
    text = rows_csv(rows)
    want = _written(rows)
    got = list(csv.DictReader(io.StringIO(text, newline="")))
    assert got == want  # no row split, none added, every cell as written
    frame = pd.read_csv(io.StringIO(text, newline=""), dtype=str, keep_default_na=False)
    assert frame.to_dict("records") == want
    for row in got:  # every text cell is safe in a spreadsheet
        for key in ("token", "text"):
            if key in row:
                assert _guarded(row[key]), row[key]


def test_the_formula_tokens_are_guarded_and_the_bare_cr_stays_in_its_cell():
    rows = token_rows(_record(FORGING_TOKENS))
    got = [r["token"] for r in csv.DictReader(io.StringIO(rows_csv(rows), newline=""))]
    assert len(got) == len(FORGING_TOKENS)
    assert got[3:6] == ["'\r=1+1", "'\t=1+1", "' @SUM(A1)"]
    assert got[6:10] == ["' +cmd", "' -1", "\n", "'=1+2+3+cmd|' /C calc'!A0"]
    assert got[0] == "x" and got[-1] == " 3"  # plain text unchanged


def test_csv_cell_guards_every_formula_start_and_leaves_numbers():
    for start in FORMULA_STARTS:
        assert csv_cell(f"{start}1") == f"'{start}1"
        if start.strip():  # also after leading whitespace
            assert csv_cell(f" \t{start}1") == f"' \t{start}1"
    assert csv_cell(-1.5) == -1.5 and csv_cell(None) == "" and csv_cell("a=1") == "a=1"


# ------------------------------------------------------------------ invisible and bidi controls


class _Text(HTMLParser):
    """Text nodes, and the titles of the control-character markers."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.markers, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if attrs.get("class") == "ctl":
            self.markers.append(attrs["title"])

    def handle_data(self, data):
        self.text.append(data)


def test_visible_text_shows_each_control_as_a_marker_with_its_code_point():
    parsed = _Text()
    parsed.feed(str(visible_text("a" + "".join(CONTROLS) + "<b>\tz\n")))
    assert parsed.markers == [f"U+{ord(c):04X} {name}" for c, name in CONTROLS.items()]
    text = "".join(parsed.text)
    assert not set(CONTROLS) & set(text) and "<b>\tz\n" in text  # markup is text; tab, newline kept


def test_the_html_export_shows_controls_and_isolates_model_text():
    record = _record(BIDI_TOKENS, methods=("oar_p", "m\u202eevil"))
    html = render_html(record, "oar_p")
    parsed = _Text()
    parsed.feed(html)
    assert not set(CONTROLS) & set("".join(parsed.text))  # none is drawn (attributes hold data)
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in parsed.markers
    for char in CONTROLS:
        assert any(m.startswith(f"U+{ord(char):04X} ") for m in parsed.markers), char
    isolated = [a for t, a in parsed.tags if a.get("dir") == "auto"]
    assert {"prompt"} <= {a.get("class") for a in isolated}
    assert re.search(r'<span dir="auto">total =', html)  # the step text sits in its own isolate
    assert ".tokens span { unicode-bidi: isolate; }" in html
