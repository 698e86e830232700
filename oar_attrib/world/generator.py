"""The arithmetic reasoning world: seeded problems whose worked solutions are chains of steps.

A problem defines named quantities, each from numbers and earlier quantities, and asks for an
expression of two of them::

    question:  d=4+7, e=d-3, f=7*3, g=e+2. find e+f.
    solution:  d=4+7=11. e=11-3=8. so f=7*3=21. g=8+2=10. #### 29

The last line is computed *at answer time* from two earlier results (8 and 21): nothing in the
trace writes `8+21=29` out. That is on purpose. OAR-P masks one trace token while the rest of the
trace stays fixed, so it measures the *direct* effect of a token on the answer. In a chain whose
last step writes the answer out, that effect sits on the last result alone. With the answer read
from several earlier results, several tokens carry a direct effect and attribution has something
to find.


The oracle of these problems is in `oracle`, their answers and reward in `answers`.
"""
from __future__ import annotations

import hashlib
import re
import random
from dataclasses import asdict, dataclass, field, replace

from ..defaults import WORLD_FORMAT
from ..errors import WorldConfigError, unknown_name
from .answers import WORLD_FORMATS, format_answer, reward
from .oracle import FILLERS, Oracle, ancestors, oracle_spans

NAMES = "abcdefghijklmnopqrstuvwxyz"
_MAX_TRIES = 200



@dataclass(frozen=True)
class WorldConfig:
    """Difficulty knobs of the problem generator."""

    n_steps: int = 2
    n_distractors: int = 1
    max_given: int = 9
    max_value: int = 30
    filler_rate: float = 0.2
    ops: str = "+-*"
    final_ops: str = "+"
    answer_format: str = WORLD_FORMAT
    # Whether later steps may use the two final quantities as operands. A result that a later
    # step copies is written twice, so masking one copy leaves the other to read from.
    reuse_finals: bool = True

    def __post_init__(self) -> None:
        if self.n_steps < 2:
            raise WorldConfigError(
                f"n_steps={self.n_steps}: the answer combines two step results, so n_steps must be >= 2"
            )
        if self.n_distractors < 0:
            raise WorldConfigError(f"n_distractors={self.n_distractors} must be >= 0")
        total = self.n_steps + self.n_distractors
        if total > len(NAMES):
            raise WorldConfigError(
                f"{total} quantities need {total} names but only {len(NAMES)} letters exist; "
                "lower n_steps or n_distractors"
            )
        if self.max_given < 1 or self.max_value < 2 * self.max_given:
            raise WorldConfigError(
                f"max_given={self.max_given}, max_value={self.max_value}: need max_given >= 1 and "
                "max_value >= 2 * max_given so that sums of two numbers fit"
            )
        if not 0.0 <= self.filler_rate <= 1.0:
            raise WorldConfigError(f"filler_rate={self.filler_rate} must lie in [0, 1]")
        if not self.ops or set(self.ops) - set("+-*"):
            raise WorldConfigError(f"ops={self.ops!r} must be a non-empty string over '+-*'")
        if not self.final_ops or set(self.final_ops) - set("+-"):
            raise WorldConfigError(f"final_ops={self.final_ops!r} must be a non-empty string over '+-'")
        if self.answer_format not in WORLD_FORMATS:
            raise unknown_name("answer format", self.answer_format, WORLD_FORMATS)


# `default` is the world every command runs on unless told otherwise: two steps, one
# distractor, sums up to 30, a level at which a small model's sampled groups mix right and
# wrong answers (GRPO learns only from such groups; docs/results/bundled-model.md has the
# figures). `medium` and `hard` add steps, distractors and larger numbers.
PRESETS: dict[str, WorldConfig] = {
    "default": WorldConfig(),
    "medium": WorldConfig(n_steps=3, n_distractors=1, max_given=9, max_value=50),
    "hard": WorldConfig(n_steps=4, n_distractors=2, max_given=12, max_value=99, final_ops="+-"),
    # The world `oar recall` scores attribution on: every token of `direct` is the only place
    # its information is written (the final results are never copied by a later step), and every
    # result is one digit, so each token of `direct` carries a value the answer needs. (With two-
    # digit results of one-digit givens, as in `recall-wide`, a sum's leading digit is always 1:
    # the result's length gives it away, and masking it takes nothing from the answer.)
    "recall": WorldConfig(max_given=4, max_value=9, reuse_finals=False),
    # Default sizes with finals never copied: two-digit results, whose leading digits are
    # predictable, so `direct` holds tokens the answer does not need.
    "recall-wide": WorldConfig(reuse_finals=False),
    # The world of step-level recall (`oar recall steps`): the `recall` world with
    # a third step, so that one step is `upstream` (on the answer's dependency path, read by a
    # final step, not read by the answer itself) beside a distractor. One-digit values, as in
    # `recall`, keep every `direct` token a whole value (docs/benchmarks.md: accuracy on it).
    "upstream": WorldConfig(n_steps=3, max_given=4, max_value=9, reuse_finals=False),
}


def get_config(preset: str | WorldConfig = "default", **overrides) -> WorldConfig:
    """A preset by name (or a config), with field overrides; errors list the known presets."""
    if isinstance(preset, WorldConfig):
        base = preset
    elif preset in PRESETS:
        base = PRESETS[preset]
    else:
        raise unknown_name("world preset", preset, PRESETS)
    try:
        return replace(base, **overrides)
    except TypeError as err:
        raise WorldConfigError(f"{err}; WorldConfig fields: {', '.join(asdict(base))}") from None


Operand = str | int  # a quantity's name or a number written in the question


@dataclass(frozen=True)
class Step:
    name: str
    left: Operand
    op: str
    right: Operand


@dataclass(frozen=True)
class Problem:
    """One problem; `solution` is the reference trace, `answer` the true final answer."""

    steps: tuple[Step, ...]  # in solution order, distractors included
    target: tuple[str, str, str]  # (u, op, v): the answer is u op v
    path: frozenset[str]  # names of the steps on the dependency path
    values: dict[str, int] = field(compare=False, hash=False)
    fillers: tuple[str | None, ...] = ()  # a filler word before each step, or None
    answer_format: str = WORLD_FORMAT

    @property
    def answer(self) -> int:
        u, op, v = self.target
        return _apply(self.values[u], op, self.values[v])

    def value(self, operand: Operand) -> int:
        return operand if isinstance(operand, int) else self.values[operand]

    @property
    def question(self) -> str:
        defs = ", ".join(f"{s.name}={s.left}{s.op}{s.right}" for s in self.steps)
        u, op, v = self.target
        return f"{defs}. find {u}{op}{v}."

    @property
    def prompt(self) -> str:
        """The text the model is conditioned on; the response starts right after it."""
        return self.question + "\n"

    @property
    def solution(self) -> str:
        parts = []
        for step, filler in zip(self.steps, self.fillers or (None,) * len(self.steps)):
            lv, rv = self.value(step.left), self.value(step.right)
            text = f"{step.name}={lv}{step.op}{rv}={self.values[step.name]}."
            parts.append(f"{filler} {text}" if filler else text)
        return " ".join(parts) + " " + format_answer(self.answer, self.answer_format)

    def oracle(self, trace: str | None = None) -> "Oracle":
        """Oracle spans of `trace` (default: the reference solution)."""
        return oracle_spans(self, self.solution if trace is None else trace)

    def reward(self, text: str) -> float:
        return reward(text, self.answer, self.answer_format)



def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _allowed_ops(a: int, b: int, cfg: WorldConfig) -> list[str]:
    ok = []
    if "+" in cfg.ops and a + b <= cfg.max_value:
        ok.append("+")
    if "-" in cfg.ops and a >= b:
        ok.append("-")
    # Products stay within the times table so that a tiny model can learn them.
    if "*" in cfg.ops and a <= 9 and b <= 9 and a * b <= cfg.max_value:
        ok.append("*")
    return ok


def _operand(rng, names: list[str], cfg: WorldConfig, ref_rate: float) -> Operand:
    """An earlier quantity's name (with probability ref_rate, if any) or a fresh number."""
    if names and rng.random() < ref_rate:
        return rng.choice(names)
    return rng.randint(1, cfg.max_given)


def _make_step(rng, name, names, values, cfg, first=None) -> Step | None:
    """A step over numbers and the quantities `names` (the first operand forced when given);
    None if no op fits."""
    val = lambda x: x if isinstance(x, int) else values[x]  # noqa: E731
    for _ in range(20):
        left = first if first is not None else _operand(rng, names, cfg, 0.5)
        right = _operand(rng, names, cfg, 0.25)
        if left == right and isinstance(left, str):
            continue  # x-x and x+x of one quantity make degenerate, easily guessed steps
        ops = _allowed_ops(val(left), val(right), cfg)
        if ops:
            op = rng.choice(ops)
            values[name] = _apply(val(left), op, val(right))
            return Step(name, left, op, right)
    return None


def _try_problem(rng: random.Random, cfg: WorldConfig) -> Problem | None:
    names = rng.sample(NAMES, cfg.n_steps + cfg.n_distractors)
    values: dict[str, int] = {}
    operands: list[str] = []
    path: list[Step] = []
    for name in names[: cfg.n_steps]:
        used = {s.left for s in path} | {s.right for s in path}
        unused = [s.name for s in path if s.name not in used]
        # Consume an unused step result most of the time so that the steps form one path.
        first = rng.choice(unused) if unused and rng.random() < 0.85 else None
        step = _make_step(rng, name, operands, values, cfg, first)
        if step is None:
            return None
        path.append(step)
        operands.append(name)
    by_name = {s.name: s for s in path}
    u = path[-1].name
    if cfg.reuse_finals:
        v = rng.choice([s.name for s in path[:-1]])
    else:  # the two steps no other step uses
        used = {s.left for s in path} | {s.right for s in path}
        free = [s.name for s in path[:-1] if s.name not in used]
        if len(free) != 1:
            return None
        v = free[0]
    if ancestors(u, by_name) | ancestors(v, by_name) != set(by_name):
        return None
    op = rng.choice(cfg.final_ops)
    if op == "-" and values[u] < values[v]:
        u, v = v, u
    if rng.random() < 0.5 and op == "+":
        u, v = v, u
    order = list(path)
    for name in names[cfg.n_steps :]:
        usable = operands if cfg.reuse_finals else [n for n in operands if n not in (u, v)]
        step = _make_step(rng, name, usable, values, cfg)
        if step is None or {step.left, step.right} == {u, v}:
            return None  # a distractor must not write the final expression out
        last = max((i for i, s in enumerate(order) if s.name in (step.left, step.right)), default=-1)
        order.insert(rng.randint(last + 1, len(order)), step)
        operands.append(name)
    fillers = tuple(rng.choice(FILLERS) if rng.random() < cfg.filler_rate else None for _ in order)
    return Problem(
        steps=tuple(order),
        target=(u, op, v),
        path=frozenset(by_name),
        values=values,
        fillers=fillers,
        answer_format=cfg.answer_format,
    )


def split_of(question: str) -> str:
    """'test' for one problem in ten (by a stable hash of its text), else 'train'."""
    return "test" if hashlib.sha256(question.encode()).digest()[0] % 10 == 0 else "train"


def generate_problems(
    n: int, preset: str | WorldConfig = "default", seed: int = 0, split: str | None = "train", **overrides
) -> list[Problem]:
    """`n` problems from a seeded generator; `split` keeps only 'train' or 'test' problems
    (None keeps both). The same arguments always give the same problems."""
    cfg = get_config(preset, **overrides)
    if split not in ("train", "test", None):
        raise WorldConfigError(f"split={split!r} must be 'train', 'test' or None")
    rng = random.Random(f"oar-world-{seed}")
    out: list[Problem] = []
    failures = 0
    while len(out) < n:
        problem = _try_problem(rng, cfg)
        if problem is None:
            failures += 1
            if failures > _MAX_TRIES and not out:
                raise WorldConfigError(
                    f"could not build a problem with {cfg} after {_MAX_TRIES} tries; "
                    "raise max_value or allow more ops"
                )
            continue
        if split is None or split_of(problem.question) == split:
            out.append(problem)
    return out


_DEF_RE = re.compile(r"(?P<name>[a-z])=(?P<l>[a-z]|\d+)(?P<op>[+\-*])(?P<r>[a-z]|\d+)")
_QUESTION_RE = re.compile(r"^\s*(?P<defs>.+?)\.\s*find\s+(?P<u>[a-z])(?P<op>[+\-])(?P<v>[a-z])\.\s*$")


def parse_question(text: str) -> Problem | None:
    """The problem a world question (`Problem.question`, e.g. ``d=4+7, e=d-3. find d+e.``)
    states, values computed, fillers unknown; None when `text` is not one (another world, a
    name used before it is defined, a malformed definition)."""
    match = _QUESTION_RE.match(text)
    if match is None:
        return None
    steps, values = [], {}
    for part in match["defs"].split(","):
        found = _DEF_RE.fullmatch(part.strip())
        if found is None:
            return None
        left, right = (int(x) if x.isdigit() else x for x in (found["l"], found["r"]))
        if any(isinstance(x, str) and x not in values for x in (left, right)):
            return None
        step = Step(found["name"], left, found["op"], right)
        values[step.name] = _apply(values.get(left, left), step.op, values.get(right, right))
        steps.append(step)
    u, op, v = match["u"], match["op"], match["v"]
    if u not in values or v not in values:
        return None
    by_name = {s.name: s for s in steps}
    return Problem(steps=tuple(steps), target=(u, op, v), path=frozenset(ancestors(u, by_name) | ancestors(v, by_name)),
                   values=values)
