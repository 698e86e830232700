"""The structural oracle: which characters of a trace the answer reads.

It marks character spans of a trace (the reference solution or a trace the model generated)
with four sets; the examples are those of the problem and solution ::

    question:  d=4+7, e=d-3, f=7*3, g=e+2. find e+f.
    solution:  d=4+7=11. e=11-3=8. so f=7*3=21. g=8+2=10. #### 29

- ``direct``: the tokens the answer is read from when the rest of the trace is held fixed: the
  *result* of each quantity the final expression combines (``8`` and ``21``). This is the set
  teacher-forced OAR-P should find. It is exact only where nothing else in the trace carries
  the same information, which the `recall` preset guarantees: no later step copies a final
  result as its operand (``reuse_finals=False``; where one does, as ``g=8+2`` here, the value
  is written twice and masking either copy leaves the other to read from), and every value is
  one digit (a two-digit sum of one-digit givens always starts with ``1``, which the result's
  length gives away: masking that digit takes nothing from the answer).
- ``chain``: every step on the answer's dependency path (the final quantities and everything they
  are computed from: ``d=4+7=11``, ``e=11-3=8``, ``f=7*3=21``). In a free-running model each
  step decides the next; with the trace held fixed only the ``direct`` tokens still matter, so
  this set measures how much of the *causal history* an importance method credits.
- ``distractor``: steps whose quantity the answer never uses (``g=8+2=10``). A method that
  credits them is wrong.
- ``filler``: words between steps (``so``) that carry no information.

``names`` (``e``, ``f``: the names of the final quantities' steps) is kept as a fifth set for
analysis, not in ``direct``: the trace writes the steps in the question's order, so a step's
place identifies its quantity as well as its name does, and masking a name removes nothing the
answer needs.

``direct`` lies inside ``chain``; ``chain``, ``distractor`` and ``filler`` are disjoint. The oracle
of a generated trace is found by parsing the trace and following the *problem's* dependency
graph by name, so a step the model got wrong still counts where its name puts it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    from .generator import Problem, Step

FILLERS = ("so", "then", "now", "ok", "next", "hmm", "well")
# One written step, `name=left op right=result`, with each part a named group.
STEP_RE = re.compile(r"(?<![a-z])(?P<name>[a-z])=(?P<l>-?\d+)(?P<op>[+\-*])(?P<r>-?\d+)=(?P<res>-?\d+)")
_FILLER_RE = re.compile(r"\b(?:" + "|".join(FILLERS) + r")\b")

Span = tuple[int, int]
# The four sets an Oracle holds as spans, stores keep and the trace page can outline.
SPAN_SETS = ("direct", "chain", "distractor", "filler")
# Every oracle set a method can be scored against: `results` is `direct`, `names` the steps' names.
KNOWN_SETS = ("direct", "chain", "names", "results", "distractor", "filler")
# The sets recall is scored on unless told otherwise: what OAR-P should find, and the causal path.
DEFAULT_SETS = ("direct", "chain")


def ancestors(name: str, by_name: dict[str, "Step"]) -> set[str]:
    """`name` and every step it is computed from (names of steps in `by_name`)."""
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if isinstance(n, str) and n in by_name and n not in seen:
            seen.add(n)
            todo += [by_name[n].left, by_name[n].right]
    return seen


@dataclass(frozen=True)
class Oracle:
    """Character spans of a trace, by oracle set (see the module docstring)."""

    direct: tuple[Span, ...]
    chain: tuple[Span, ...]
    distractor: tuple[Span, ...]
    filler: tuple[Span, ...]
    complete: bool  # every quantity of the final expression was found in the trace
    # The final quantities' names (not in `direct`: see the module docstring).
    names: tuple[Span, ...] = ()

    @property
    def results(self) -> tuple[Span, ...]:
        """The final quantities' results: the `direct` set, under the name `--sets` uses."""
        return self.direct

    def sets(self) -> dict[str, tuple[Span, ...]]:
        """The four oracle sets (`names` is for analysis)."""
        return {k: getattr(self, k) for k in SPAN_SETS}

    def span_lists(self) -> dict[str, list[list[int]]]:
        """The four sets as JSON-ready lists of [start, end], as stores keep them."""
        return {k: [list(s) for s in v] for k, v in self.sets().items()}


def oracle_spans(problem: "Problem", trace: str) -> Oracle:
    """Parse `trace` into steps and mark the oracle sets by the problem's dependency graph."""
    by_name = {s.name: s for s in problem.steps}
    u, _, v = problem.target
    needed = ancestors(u, by_name) | ancestors(v, by_name)
    chain, distractor = [], []
    last: dict[str, re.Match] = {}
    for m in STEP_RE.finditer(trace):
        name = m.group("name")
        if name in needed:
            chain.append((m.start("name"), m.end("res")))
            last[name] = m
        elif name in by_name:
            distractor.append((m.start("name"), m.end("res")))
    names = sorted(last[n].span("name") for n in dict.fromkeys((u, v)) if n in last)
    results = sorted(last[n].span("res") for n in dict.fromkeys((u, v)) if n in last)
    filler = [m.span() for m in _FILLER_RE.finditer(trace)]
    return Oracle(
        direct=tuple(results),
        chain=tuple(chain),
        distractor=tuple(distractor),
        filler=tuple(filler),
        complete=u in last and v in last,
        names=tuple(names),
    )


def shift_result(step: str, by: int = 1) -> str:
    """The written step `name=a op b=result` with its result changed by `by`: an intervention on
    what the step hands to later steps, its arithmetic left as written. Used as a `resample`
    removal (the rest of the trace regenerated from the changed result), it measures how much
    the model's answer depends on that result. Raises InputError when `step` holds no such
    clause."""
    match = STEP_RE.search(step)
    if match is None:
        raise InputError(f"no step of the form name=a op b=result in {step!r}; shift_result "
                         "edits the arithmetic world's written steps only")
    start, end = match.span("res")
    return step[:start] + str(int(match["res"]) + by) + step[end:]
