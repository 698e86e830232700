"""Answer spans and response segments (METHOD.md section 2).

A response splits into reasoning | bridge | answer | tail. The answer is found on the
response text as a character span (`locate_answer`), then mapped to tokens through their
character offsets (`segment_tokens`). Offsets come from the tokenizer's offset mapping, or,
for responses that exist only as token ids (training), from `offsets_from_ids`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from ..defaults import ANSWER_FORMAT
from ..errors import InputError, TokenizerError, renamed_keyword, unknown_name
from .segments import ANSWER, BRIDGE, REASONING, SEGMENT_LABELS, TAIL, scored_set  # noqa: F401

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class AnswerLocation:
    """Where the final answer sits in a response text.

    Characters [marker_start, start) are the marker (the bridge: `\\boxed{`, `#### `,
    `The answer is `); [start, end) is the answer itself, stripped of surrounding whitespace
    and a trailing period. `fmt` names the format that matched.
    """

    marker_start: int
    start: int
    end: int
    fmt: str

    def __post_init__(self) -> None:
        if not 0 <= self.marker_start <= self.start < self.end:
            raise InputError(
                f"invalid answer location {self.marker_start}, {self.start}, {self.end}: "
                "need 0 <= marker_start <= start < end"
            )

    @property
    def span(self) -> tuple[int, int]:
        return (self.start, self.end)


# --------------------------------------------------------------------------- formats
#
# Every format lists its candidate answers (marker start, raw answer region); `_value` then cuts
# a raw region to its value or refuses it, whatever the format:
# - an expression `45 x 18 = 756` is cut to what follows its last top-level `=`;
# - prose after a marker (`$18 per day`, `0 hours`) is cut to the number or `$...$` expression
#   that leads it, and refused when none leads it (`Here is a short example of how I performed`,
#   `three bolts ... 2 * 4 = 8`, `within 81%`) or when the leading one goes on as an expression
#   (`2^{10} which`, `2 * 4 bolts`): a number further in is not what the sentence states;
# - a region with no letter or digit (`"`), a template placeholder (`<answer>`) or unbalanced
#   brackets (an expression cut off) is refused.
# The located answer is the last candidate that keeps a value (`auto`: over all formats).

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_GSM8K = re.compile(r"####[ \t]*\$?[ \t]*")
_ANSWER_IS = re.compile(
    r"(?:\bthe\s+(?:final\s+)?answer\s+is\b(?!['\u2019])\s*:?|\banswer\s*:)[ \t]*", re.I)
# A period ends the answer only when a space or the end of the text follows it: "72.5" stays.
_ANSWER_IS_END = re.compile(r"\n|\.(?=\s|$)")
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:\s*/\s*\d+)?")
_MATH = re.compile(r"\$([^$]+)\$")
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_PLACEHOLDER = re.compile(r"<[^<>]*>")
_EDGE = " \t\r\n$*\"'`"
_ARITHMETIC = re.compile(r"[\s\d.,+\-*/^()\[\]x\u00d7\u00f7\u2212:]*\d[\s\d.,+\-*/^()\[\]x\u00d7\u00f7\u2212:]*|"
                         r"(?:[\s\d.,+\-*/^(){}]|\\(?:times|cdot|div|frac|left|right))*\d"
                         r"(?:[\s\d.,+\-*/^(){}]|\\(?:times|cdot|div|frac|left|right))*")
_VARIABLE = re.compile(r"\s*[A-Za-z](?:_\{?\w+\}?)?\s*")
# A sentence may hedge its value ("approximately 3.14"); what follows a value must not continue
# it as an expression (`2^{10}`, `2 * 4`, `= 8`, "1 raised to the power of 2").
_HEDGE = re.compile(r"(?:approximately|about|around|roughly|exactly|equal\s+to)\s+", re.I)
_IN_EXPRESSION = re.compile(r"[ \t]*(?:[\^_{}(\\*/=\u00d7\u00f7+\d]|[-\u2212x][ \t]*\d)|"
                            r"\s+(?:times|plus|minus|divided|multiplied|raised|over|squared|cubed|to\s+the)\b", re.I)


@dataclass(frozen=True)
class _Candidate:
    """A marker and the raw region after it, before `_value` cuts it."""

    marker_start: int
    start: int
    end: int
    fmt: str
    prose: bool  # the region may be prose (answer_is, a `####` line): cut it to its value


def _trim(text: str, start: int, end: int, chars: str = " \t\r\n") -> tuple[int, int]:
    """Shrink [start, end) past surrounding `chars` and one trailing period, repeatedly."""
    while True:
        old = (start, end)
        while start < end and text[start] in chars:
            start += 1
        while end > start and text[end - 1] in chars:
            end -= 1
        if end > start and text[end - 1] == ".":
            end -= 1
        if (start, end) == old:
            return start, end


def _closing_brace(text: str, open_at: int) -> int | None:
    """Index of the brace closing the one at `open_at`, or None when unbalanced.

    A backslash escapes the next character, so `\\{` and `\\}` are literal braces.
    """
    depth, i = 0, open_at
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _balanced(value: str) -> bool:
    depth = {"{": 0, "(": 0, "[": 0}
    closing = {"}": "{", ")": "(", "]": "["}
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value) and value[i + 1] in "{}":
            i += 2
            continue
        if ch in depth:
            depth[ch] += 1
        elif ch in closing:
            depth[closing[ch]] -= 1
        i += 1
    # Half-open intervals ("[0, 1)") close a bracket with the other kind: count them as one.
    return depth["{"] == 0 and depth["("] + depth["["] == 0


def _result_start(value: str) -> int:
    """Where the result of a calculation `45 x 18 = 756` or an assignment `x = 5` starts: just
    after the last top-level `=` when what stands between it and the `=` before it is
    arithmetic on numbers or one variable; else 0 (an equation such as `5x - 7y + 4 = 0` is
    the answer itself). `<=`, `>=`, `!=`, `==` are not `=`."""
    depth, cuts = 0, [-1]
    for i, ch in enumerate(value):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "=" and depth == 0 and value[i - 1 : i] not in ("<", ">", "!", "=") \
                and value[i + 1 : i + 2] != "=":
            cuts.append(i)
    if len(cuts) < 2:
        return 0
    left = value[cuts[-2] + 1 : cuts[-1]]
    return cuts[-1] + 1 if _ARITHMETIC.fullmatch(left) or _VARIABLE.fullmatch(left) else 0


def _stated_value(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The value a sentence after a marker states, or None: a number or a `$...$` expression
    that leads the sentence ("$18 per day", "0 hours", "$\\frac{3}{4}$ of the cake", after an
    optional "approximately"), whole (not followed by `^`, `{`, an operator or `=`, which make
    it part of an expression). A value further in ("three bolts ... 2 * 4 = 8", "within 81%")
    is not a statement of the answer, nor is a number inside an expression."""
    pos = start
    hedge = _HEDGE.match(text, pos, end)
    if hedge is not None:
        pos = hedge.end()
    dollar = pos if text.startswith("$", pos) else pos - 1 if pos == start and text[pos - 1 : pos] == "$" else None
    math = None if dollar is None else _MATH.match(text, dollar, end)
    if math is not None and not _PROSE_WORD.search(math.group(1)):
        lead_start, lead_end, after = math.start(1), math.end(1), math.end()
    else:
        number = _NUMBER.match(text, pos + (dollar == pos), end)
        if number is None:
            return None
        lead_start, lead_end, after = number.start(), number.end(), number.end()
    if _IN_EXPRESSION.match(text, after, end):
        return None
    return _trim(text, lead_start, lead_end, _EDGE)


def _value(text: str, cand: _Candidate) -> tuple[int, int] | None:
    """The value's span inside the candidate's region, or None when the region has none."""
    if cand.fmt == "answer_is" and _BOXED.search(text, cand.start, cand.end):
        return None  # the box is the boxed format's answer; this sentence is its bridge
    start, end = _trim(text, cand.start, cand.end, _EDGE)
    cut = _result_start(text[start:end])
    if cut:
        start, end = _trim(text, start + cut, end, _EDGE)
    value = text[start:end]
    if cand.prose and _PROSE_WORD.search(value) and " " in value.strip():
        stated = _stated_value(text, start, end)
        if stated is None:
            return None
        start, end = stated
        value = text[start:end]
    if value.endswith(","):
        end -= 1
        value = value[:-1]
    if not any(ch.isalnum() for ch in value) or _PLACEHOLDER.search(value) or not _balanced(value):
        return None
    return start, end


def _boxed(text: str) -> list[_Candidate]:
    out = []
    for m in _BOXED.finditer(text):
        close = _closing_brace(text, m.end() - 1)
        if close is not None:
            out.append(_Candidate(m.start(), m.end(), close, "boxed", False))
    return out


def _gsm8k(text: str) -> list[_Candidate]:
    # The rest of the line, as GSM8K's own extractor reads it; `_value` cuts it to its value.
    out = []
    for m in _GSM8K.finditer(text):
        line_end = text.find("\n", m.end())
        out.append(_Candidate(m.start(), m.end(), len(text) if line_end < 0 else line_end, "gsm8k", True))
    return out


def _answer_is(text: str) -> list[_Candidate]:
    out = []
    for m in _ANSWER_IS.finditer(text):
        stop = _ANSWER_IS_END.search(text, m.end())
        end = len(text) if stop is None else stop.start()
        out.append(_Candidate(m.start(), m.end(), end, "answer_is", True))
    return out


def _regex(pattern):
    if pattern is None:
        raise InputError("answer_format='regex' needs `answer_pattern`, a regex with one capturing group")
    try:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    except re.error as exc:
        raise InputError(f"the answer regex {pattern!r} does not compile: {exc}") from exc
    if not isinstance(regex, re.Pattern) or regex.groups != 1:
        got = regex.groups if isinstance(regex, re.Pattern) else type(pattern).__name__
        raise InputError(
            f"the answer regex must have exactly one capturing group (the answer), got {got}; "
            "write other groups as non-capturing (?:...)"
        )

    def candidates(text: str) -> list[_Candidate]:
        return [_Candidate(m.start(), m.start(1), m.end(1), "regex", False)
                for m in regex.finditer(text) if m.start(1) >= 0]

    return candidates


_FORMATS: dict[str, Callable[[str], list[_Candidate]]] = {
    "boxed": _boxed,
    "gsm8k": _gsm8k,
    "answer_is": _answer_is,
}
# The formats with a marker, each of which a prompt can ask for (`rollouts.PROMPT_TEMPLATES`),
# and every value of `answer_format`: those, `auto` (any of them) and `regex` (answer_pattern).
MARKER_FORMATS = tuple(_FORMATS)
ANSWER_FORMATS = ("auto", *MARKER_FORMATS, "regex")


def _candidates(text: str, answer_format: str, answer_pattern) -> list[_Candidate]:
    if answer_format == "regex" or (answer_format == "auto" and answer_pattern is not None):
        return _regex(answer_pattern)(text)
    if answer_pattern is not None:
        raise InputError("`answer_pattern` is only used with answer_format='regex' (or 'auto'), "
                         f"got answer_format={answer_format!r}")
    if answer_format == "auto":
        return [c for find in _FORMATS.values() for c in find(text)]
    if answer_format not in _FORMATS:
        raise unknown_name("answer format", answer_format, ANSWER_FORMATS)
    return _FORMATS[answer_format](text)


def _restated_before(text: str, at: int, value: str, valued: list[tuple[_Candidate, tuple[int, int]]]) -> int:
    """Start of the run of statements of the same answer `value` that end right before `at`
    (only whitespace between), else `at`: a restatement is not reasoning."""
    while True:
        before = text[:at].rstrip()
        match = next((c for c, (s, e) in valued if c.marker_start < at and text[s:e] == value
                      and e <= len(before) and text[e:len(before)].strip(" \t.\"'`$*}") == ""), None)
        if match is None:
            return at
        at = match.marker_start


def locate_answer(text: str, answer_format: str = ANSWER_FORMAT, answer_pattern=None) -> AnswerLocation | None:
    """Find the final answer of `text`; None when there is none or none keeps a value.

    answer_format: "boxed" (a balanced `\\boxed{...}` / `\\fbox{...}`), "gsm8k" (`#### N`),
    "answer_is" (`The answer is N` / `Answer: N`, to the end of the line or sentence), "regex"
    (a match of `answer_pattern`, whose single group is the answer), or "auto": any of the
    three. The last candidate that keeps a value wins (the one whose value ends last; the outer
    of nested boxes). A marker whose sentence holds the box (`The answer is $\\boxed{5}$`) and
    restatements of the same answer just before the marker join the bridge.
    """
    cands = _candidates(text, answer_format, answer_pattern)
    valued = [(c, v) for c in cands if (v := _value(text, c)) is not None]
    if not valued:
        return None
    best, (start, end) = max(valued, key=lambda cv: (cv[1][1], cv[0].marker_start))
    marker_start = min([best.marker_start] + [c.marker_start for c in cands
                                              if c.marker_start < best.marker_start and c.end >= best.end])
    marker_start = _restated_before(text, marker_start, text[start:end], valued)
    return AnswerLocation(marker_start, start, end, best.fmt)


def find_answer_span(text: str, answer_format: str = ANSWER_FORMAT, answer_pattern=None, *,
                     fmt: str | None = None, pattern=None) -> tuple[int, int] | None:
    """Character span [start, end) of the final answer in `text`, or None (`locate_answer`;
    `fmt` and `pattern` are the old spellings of answer_format and answer_pattern)."""
    answer_format = renamed_keyword("fmt", fmt, "answer_format", answer_format, "auto")
    answer_pattern = renamed_keyword("pattern", pattern, "answer_pattern", answer_pattern, None)
    found = locate_answer(text, answer_format, answer_pattern)
    return None if found is None else found.span


# --------------------------------------------------------------------------- segments


@dataclass(frozen=True)
class Segments:
    """Per-token segment labels of one response (each one of SEGMENT_LABELS).

    span_found is False when no answer was located: then nothing is scored.
    """

    labels: tuple[str, ...]
    span_found: bool

    def mask(self, *names: str) -> torch.Tensor:
        """(T,) bool: tokens whose label is one of `names`."""
        import torch  # here: the answer formats and the labels are read without torch

        for name in names:
            if name not in SEGMENT_LABELS:
                raise unknown_name("segment label", name, SEGMENT_LABELS)
        return torch.tensor([lab in names for lab in self.labels], dtype=torch.bool)

    @property
    def scored(self) -> torch.Tensor:
        """(T,) bool: the scored positions S (reasoning tokens, only if the span was found)."""
        import torch

        return torch.tensor(scored_set(self.labels, self.span_found), dtype=torch.bool)

    @property
    def answer(self) -> torch.Tensor:
        """(T,) bool: the answer-span tokens."""
        return self.mask(ANSWER)

    @property
    def n_reasoning(self) -> int:
        return sum(lab == REASONING for lab in self.labels)


def _label(i: int, start: int, end: int, loc: AnswerLocation | None, text_end: int) -> str:
    if start == end:
        # Zero-width tokens carry no text: special tokens such as EOS, given (0, 0) by the
        # tokenizer or placed at the end of the text by `offsets_from_ids`.
        if i > 0 and (start == 0 or start >= text_end):
            return TAIL
        if loc is None or start <= loc.marker_start:
            return REASONING
        return TAIL if start >= loc.end else BRIDGE
    if loc is None or end <= loc.marker_start:
        return REASONING
    if start < loc.end and end > loc.start:
        return ANSWER
    return BRIDGE if end <= loc.start else TAIL


def segment_tokens(offsets: Sequence[tuple[int, int]], location: AnswerLocation | None) -> Segments:
    """Label each response token reasoning | bridge | answer | tail.

    offsets: (T,) per-token character spans (start, end) into the response text.
    A token overlapping [start, end) is answer; one ending at or before marker_start is
    reasoning; one between is bridge; one after the answer is tail. Zero-width tokens
    ((0, 0) after the first token, or at the end of the text: EOS, padding) are tail.
    With location None every text token is reasoning and span_found is False.
    """
    offsets = [(int(s), int(e)) for s, e in offsets]
    text_end = max((e for _, e in offsets), default=0)
    labels = tuple(_label(i, s, e, location, text_end) for i, (s, e) in enumerate(offsets))
    found = location is not None and ANSWER in labels
    return Segments(labels, found)


# --------------------------------------------------------------------------- offsets from ids


def _decode_many(tokenizer, seqs: list[list[int]]) -> list[str]:
    """Decode each id list as is: no special-token skipping, no space clean-up."""
    backend = getattr(tokenizer, "backend_tokenizer", None)  # fast tokenizers: one Rust call
    if backend is not None:
        return backend.decode_batch(seqs, skip_special_tokens=False)
    return [
        tokenizer.decode(s, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        for s in seqs
    ]


def _visible_lengths(tokenizer, rows: list[list[int]], context: int = 4) -> list[list[tuple[int, int]]]:
    """Per row, for each k: (length of the complete text of ids[:k+1], 1 if a character is pending).

    A byte-level BPE token can end inside a multi-byte character: the decode then ends in
    U+FFFD until a later token completes the character. Token k's new text is the decode of
    a short window ending at k minus the decode of that window without k (trailing U+FFFD
    dropped from both). Windows keep this O(T) and make leading-space rules (SentencePiece)
    act alike on both decodes. `context` >= 3 covers the longest (4-byte) character. The
    windows of all rows go to the tokenizer in one batch.
    """
    windows = [(ids, max(0, k - context), k) for ids in rows for k in range(len(ids))]
    fulls = _decode_many(tokenizer, [ids[s : k + 1] for ids, s, k in windows])
    bases = _decode_many(tokenizer, [ids[s:k] for ids, s, k in windows])
    out, at = [], 0
    for ids in rows:
        row, length = [], 0
        for full, base in zip(fulls[at : at + len(ids)], bases[at : at + len(ids)]):
            done, before = full.rstrip("\ufffd"), base.rstrip("\ufffd")
            if not done.startswith(before):
                raise TokenizerError(
                    "decoding token ids is not incremental for this tokenizer (a window decodes "
                    "differently inside a longer one); pass the response as text instead"
                )
            length += len(done) - len(before)
            row.append((length, 1 if len(done) < len(full) else 0))
        out.append(row)
        at += len(ids)
    return out


def offsets_from_ids(tokenizer, ids: Sequence[int]) -> tuple[list[tuple[int, int]], str]:
    """Character offsets of response token ids, and the decoded text they index.

    ids: (T,) token ids of a response (list or 1-D tensor).
    Returns (offsets (T,), text), text = decode(ids) without special tokens. A token that
    carries part of a multi-byte character covers that whole character, as the tokenizer's
    own offset mapping does; special tokens (EOS, padding) get (len(text), len(text)).
    """
    return offsets_from_ids_batch(tokenizer, [ids])[0]


def offsets_from_ids_batch(tokenizer, rows: Sequence[Sequence[int]]) -> list[tuple[list[tuple[int, int]], str]]:
    """`offsets_from_ids` of each row, with one tokenizer call for all rows' decodes (a training
    step decodes a whole generation batch; one call per row costs several times more)."""
    rows = [[int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)] for ids in rows]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    plains = [[i for i in ids if i not in special] for ids in rows]
    lengths = _visible_lengths(tokenizer, plains)
    texts = _decode_many(tokenizer, plains)
    out = []
    for ids, text, row_lengths in zip(rows, texts, lengths):
        n = len(text)
        offsets, prev, j = [], 0, 0
        for i in ids:
            if i in special:
                offsets.append((n, n))
                continue
            stable, pending = row_lengths[j]
            # The token starts at the first character not completed before it (which may be
            # a character it shares with the previous token) and ends after its last byte.
            offsets.append((prev, min(stable + pending, n)))
            prev, j = stable, j + 1
        out.append((offsets, text))
    return out
