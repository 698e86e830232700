"""The value oracle of the word-problem world: which characters of ANY free-text trace carry a
value the answer needs.

Every value of a `words.WordProblem` is distinct, so a number written in a trace names exactly
one quantity, whatever the sentence around it says. The oracle finds every number the trace's
reasoning writes and marks it by the quantity it names (`WordProblem.roles`)::

    question:  Mia has 14 stickers. Leo is 9 years old. Mia buys 6 more stickers.
               Noah has twice as many stickers as Mia. How many stickers does Noah have now?
    trace:     Mia had 14 and bought six more, so 14 + 6 = 20. Noah has twice 20, 40.
               The answer is 40.

- ``direct``: the values the final operation combines (``20``, ``2`` written as ``twice``).
- ``upstream``: the other values on the dependency path (``14``, ``six``).
- ``distractor``: the distractors' values (``9``, when the trace restates it).
- ``answer``: the gold value where the reasoning writes it (``40`` after the comma); for
  analysis, not a set a method should find.

A value is marked at each of its mentions, restated question values count, and only the
reasoning is read: the final answer statement (the span `spans.locate_answer` finds, with its
marker and any restatement before it) and what follows are not reasoning and are never marked.
Numbers are digits (``1,200``, ``12.0``, ``$12``: the span is the digits), or words from
``two`` to ``nine hundred ninety-nine`` (``twenty-one``, ``twenty one``, ``a hundred and five``),
and ``twice`` for 2. A number inside a larger one is not a mention (``12`` in ``120`` or ``1.25``).
Values are >= 2, so ``one`` (a pronoun as often as a number) never names a quantity. A
numbered list's marker (``2.`` or ``2)`` opening a line, as in ``1. Mia has 14.\n2. She buys
6.``) numbers the list, not a quantity, and is not a mention.

`ValueOracle` has the attributes recall reads of the arithmetic world's `Oracle` (a tuple of
character spans per set and `complete`), so `instruments.world.recall.trace_recall(trace, oracle,
sets=VALUE_SETS)` scores methods against it unchanged; `to_token_sets(offsets)` gives the token
indices of each set.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..defaults import ANSWER_FORMAT
from ..inputs.spans import locate_answer
from ..inputs.segments import span_mask

if TYPE_CHECKING:
    from .words import WordProblem

Span = tuple[int, int]
# The sets a method is scored against; `answer` is kept for analysis.
VALUE_SETS = ("direct", "upstream", "distractor")

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
          "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
WORD_VALUES = {**{w: i for i, w in enumerate(_UNITS)}, **{w: 20 + 10 * i for i, w in enumerate(_TENS)}}
_longest = lambda words: "|".join(sorted(words, key=len, reverse=True))  # noqa: E731
_BELOW_100 = rf"(?:(?:{_longest(_TENS)})(?:[-\s](?:{_longest(_UNITS[1:10])}))?|(?:{_longest(_UNITS)}))"
_WORDS_RE = re.compile(
    rf"\b(?:(?:{_longest(_UNITS[1:10])}|a)\s+hundred(?:\s+(?:and\s+)?{_BELOW_100})?|{_BELOW_100}|twice)\b",
    re.I)
# Digits, with thousands commas and decimals; not part of a longer number on either side.
_DIGITS_RE = re.compile(r"(?<![\d.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d|\.\d|,\d{3}(?!\d))")
# A numbered list's marker: a number opening a line (after spaces, a bullet or Markdown's bold),
# followed by `.` or `)` and a space (`2. Mia buys...`, `**3)** ...`); `2.5` or `20 + 5` are not.
_LIST_MARKER_RE = re.compile(r"^[ \t>*\-]*(?:\*\*)?(\d{1,3})(?:\.|\))(?:\*\*)?[ \t]", re.M)


@dataclass(frozen=True)
class Mention:
    """A number written in a text: characters [start, end) and its value."""

    start: int
    end: int
    value: float


def _word_value(text: str) -> int:
    words = [w for w in re.split(r"[-\s]+", text.lower()) if w and w != "and"]
    if words == ["twice"]:
        return 2
    total = 0
    for w in words:
        total = total * 100 if w == "hundred" else total + (1 if w == "a" else WORD_VALUES[w])
    return total


def parse_number(text: str) -> float | None:
    """The value of a bare number (`1,200`, `$12`, `12.50`, `twenty-one`), or None."""
    text = text.strip().strip("$").strip()
    if _DIGITS_RE.fullmatch(text):
        return float(text.replace(",", ""))
    if _WORDS_RE.fullmatch(text):
        return float(_word_value(text))
    return None


def list_markers(text: str) -> set[int]:
    """Start positions of the numbered-list markers of `text` (`2.` opening a line)."""
    return {m.start(1) for m in _LIST_MARKER_RE.finditer(text)}


def find_numbers(text: str) -> list[Mention]:
    """Every number of `text`, digits or words, in order of position; a numbered list's
    markers (`list_markers`) are not numbers of the text."""
    markers = list_markers(text)
    found = [Mention(m.start(), m.end(), float(m.group().replace(",", ""))) for m in _DIGITS_RE.finditer(text)
             if m.start() not in markers]
    found += [Mention(m.start(), m.end(), float(_word_value(m.group()))) for m in _WORDS_RE.finditer(text)]
    return sorted(found, key=lambda m: m.start)


@dataclass(frozen=True)
class ValueOracle:
    """Character spans of a trace by value set (module docstring). `complete`: every direct
    value is written at least once in the reasoning. `reasoning_end`: where the reasoning stops
    (the final answer statement's start, or the text's end when there is none)."""

    direct: tuple[Span, ...]
    upstream: tuple[Span, ...]
    distractor: tuple[Span, ...]
    answer: tuple[Span, ...]
    complete: bool
    reasoning_end: int

    @property
    def chain(self) -> tuple[Span, ...]:
        """Every value on the answer's path: `direct` and `upstream` together."""
        return tuple(sorted(self.direct + self.upstream))

    def sets(self) -> dict[str, tuple[Span, ...]]:
        """The three sets methods are scored on (VALUE_SETS)."""
        return {k: getattr(self, k) for k in VALUE_SETS}

    def span_lists(self) -> dict[str, list[list[int]]]:
        """The three sets as JSON-ready lists of [start, end], as stores keep them."""
        return {k: [list(s) for s in v] for k, v in self.sets().items()}

    def to_token_sets(self, offsets: Sequence[tuple[int, int]]) -> dict[str, frozenset[int]]:
        """{set: token indices} for VALUE_SETS and `answer`: the tokens (character offsets
        (T, 2) of the trace's tokenization) whose characters overlap a span of the set."""
        names = VALUE_SETS + ("answer",)
        return {k: frozenset(int(i) for i in span_mask(offsets, getattr(self, k)).nonzero()[0]) for k in names}


def value_oracle(problem: "WordProblem", trace: str, answer_format: str = ANSWER_FORMAT) -> ValueOracle:
    """Mark the value mentions of `trace`'s reasoning by the quantity each names."""
    found = locate_answer(trace, answer_format)
    end = len(trace) if found is None else found.marker_start
    roles = problem.roles()
    marked: dict[str, list[Span]] = {"direct": [], "upstream": [], "distractor": [], "answer": []}
    for m in find_numbers(trace[:end]):
        role = roles.get(int(m.value)) if m.value == int(m.value) else None
        if role is not None:
            marked[role].append((m.start, m.end))
    direct_values = {v for v, r in roles.items() if r == "direct"}
    seen = {int(parse_number(trace[s:e])) for s, e in marked["direct"]}
    return ValueOracle(direct=tuple(marked["direct"]), upstream=tuple(marked["upstream"]),
                       distractor=tuple(marked["distractor"]), answer=tuple(marked["answer"]),
                       complete=seen >= direct_values, reasoning_end=end)
