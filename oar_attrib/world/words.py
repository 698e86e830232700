"""A natural-language world: GSM8K-style word problems from templates, with exact gold answers
and the dependency graph behind them::

    question:  Mia has 14 stickers. Leo is 9 years old. Mia buys 6 more stickers.
               Noah has twice as many stickers as Mia. How many stickers does Noah have now?
    solution:  Mia has 14 + 6 = 20 stickers.
               Noah has 20 * 2 = 40 stickers.
               The answer is 40.

Each problem follows one holder's count of one item through a dependency path of operations
(`+` buys / finds / is given, `-` gives away / loses / sells, `*` "twice as many" / "k times as
many", and a final "per" step that turns the count into dollars), with distractor sentences
that state numbers of their own and filler sentences that state none. Every value of a problem
(each given number, each intermediate result, the answer, each distractor's number) is drawn
distinct and >= 2, so a number written in any trace names exactly one quantity: that is what
makes the value oracle (`value_oracle`) exact. The quantities the final operation combines are
`direct`, the other quantities on the path `upstream`, the distractors' numbers `distractor`.

Splits are by a stable hash of the question text (`generator.split_of`), so train and test
never share a problem.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields, replace

from ..defaults import option
from ..errors import WorldConfigError, unknown_name
from ..inputs.spans import locate_answer
from .generator import split_of
from .value_oracle import ValueOracle, parse_number, value_oracle

PEOPLE = ("Mia", "Leo", "Ava", "Noah", "Emma", "Liam", "Zoe", "Omar", "Lily", "Ravi", "Nina", "Sam",
          "Ella", "Ben", "Aisha", "Tom", "Sofia", "Max", "Maya", "Jack")
ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "books", "stamps", "shells",
         "cards", "balloons", "crayons", "oranges")
# Templates of one operation on the holder's count: {a} the holder, {b} another person, {k} the
# number the sentence states, {items} the item. `*` makes {b} the new holder.
OP_TEMPLATES = {
    "+": ("{a} buys {k} more {items}.", "{b} gives {a} {k} {items}.", "{a} finds {k} more {items}.",
          "Then {a} gets {k} more {items}."),
    "-": ("{a} gives away {k} {items}.", "{a} gives {k} {items} to {b}.", "{a} loses {k} {items}.",
          "{a} sells {k} of the {items}."),
    "*": ("{b} has {k} times as many {items} as {a}.",),
}
TWICE = "{b} has twice as many {items} as {a}."
PER = "{a} sells each of the {items} for ${k}."
DISTRACTORS = ("{c} has {d} {other}.", "{a}'s cousin is {d} years old.", "{c} owns {d} {other}.",
               "The shop is {d} meters from {a}'s house.", "{a} also keeps {d} {other} in a box.",
               "{c} read {d} pages last week.")
FILLER_SENTENCES = ("{a} likes {items} a lot.", "It is a sunny day.", "{a} is very happy today.",
           "{c} smiles.", "The {items} look nice.", "{a} counts carefully.")
GIVEN, STEP, DISTRACTOR = "given", "step", "distractor"
_MAX_TRIES = 500


@dataclass(frozen=True)
class WordConfig:
    """Difficulty knobs of the word-problem generator; `WORD_PRESETS` names the calibrated ones."""

    min_steps: int = option(2, "fewest operations on the dependency path")
    max_steps: int = option(2, "most operations on the dependency path")
    n_distractors: int = option(1, "sentences that state a number the answer never uses")
    n_fillers: int = option(1, "sentences without a number")
    max_given: int = option(20, "largest number a sentence states (smallest is 2)")
    max_value: int = option(60, "largest intermediate result or answer")
    max_factor: int = option(3, "largest multiplier of a `*` step")
    ops: str = option("+-*", "operations the path may use, over '+-*'")
    per_rate: float = option(0.2, "chance the last step is a price per item (`*`, in dollars)")

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps <= 6:
            raise WorldConfigError(f"min_steps={self.min_steps}, max_steps={self.max_steps}: need "
                                   "1 <= min_steps <= max_steps <= 6")
        if self.n_distractors < 0 or self.n_fillers < 0:
            raise WorldConfigError(f"n_distractors={self.n_distractors} and n_fillers={self.n_fillers} must be >= 0")
        if self.max_given < 5 or self.max_value < 2 * self.max_given:
            raise WorldConfigError(f"max_given={self.max_given}, max_value={self.max_value}: need max_given >= 5 "
                                   "and max_value >= 2 * max_given so that distinct values fit")
        if not 2 <= self.max_factor <= 9:
            raise WorldConfigError(f"max_factor={self.max_factor} must lie in [2, 9]")
        if not self.ops or set(self.ops) - set("+-*"):
            raise WorldConfigError(f"ops={self.ops!r} must be a non-empty string over '+-*'")
        if not 0.0 <= self.per_rate <= 1.0:
            raise WorldConfigError(f"per_rate={self.per_rate} must lie in [0, 1]")

    @classmethod
    def help(cls) -> dict[str, str]:
        """{field: help text}."""
        return {f.name: f.metadata["help"] for f in fields(cls)}


# Measured on SmolLM2-135M-Instruct (docs/experiments/wordworld/calibration.json): at temperature 1
# it is right on 5% of `tiny` and `one-step` and on none of the others; greedy on 28% of `tiny`.
WORD_PRESETS: dict[str, WordConfig] = {
    # One addition with one-digit givens, with and without a distractor sentence: the easiest
    # problems the world writes, for a model as weak as a 135M one.
    "tiny": WordConfig(min_steps=1, max_steps=1, n_distractors=0, n_fillers=0, max_given=9, max_value=20,
                       ops="+", per_rate=0.0),
    "tiny-distractor": WordConfig(min_steps=1, max_steps=1, n_distractors=1, n_fillers=0, max_given=9,
                                  max_value=20, ops="+", per_rate=0.0),
    "one-step": WordConfig(min_steps=1, max_steps=1, max_given=12, max_value=40, n_fillers=0, per_rate=0.0),
    "easy": WordConfig(min_steps=1, max_steps=2, max_given=12, max_value=40, per_rate=0.0),
    "two-step": WordConfig(),
    "three-step": WordConfig(min_steps=3, max_steps=3, n_distractors=2, max_value=100),
    "four-step": WordConfig(min_steps=4, max_steps=4, n_distractors=2, n_fillers=2, max_value=200),
}


def get_word_config(preset: str | WordConfig = "two-step", **overrides) -> WordConfig:
    """A preset by name (or a config), with field overrides; errors list the known presets."""
    base = preset if isinstance(preset, WordConfig) else WORD_PRESETS.get(preset)
    if base is None:
        raise unknown_name("word-problem preset", preset, WORD_PRESETS)
    try:
        return replace(base, **overrides)
    except TypeError as err:
        raise WorldConfigError(f"{err}; WordConfig fields: {', '.join(asdict(base))}") from None


@dataclass(frozen=True)
class Quantity:
    """One number of a problem: stated in sentence `sentence` (`given`, `distractor`) or computed
    there (`step`: inputs[0] op inputs[1], keys of other quantities)."""

    key: str
    value: int
    kind: str
    sentence: int
    op: str | None = None
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class WordProblem:
    """One word problem. `question` is the text asked, `answer` the gold value, `quantities`
    the dependency graph (the answer is the quantity `target`), `solution` a reference trace."""

    sentences: tuple[str, ...]
    ask: str
    quantities: tuple[Quantity, ...]
    target: str
    solution: str

    @property
    def question(self) -> str:
        return " ".join(self.sentences + (self.ask,))

    @property
    def by_key(self) -> dict[str, Quantity]:
        return {q.key: q for q in self.quantities}

    @property
    def answer(self) -> int:
        return self.by_key[self.target].value

    def evaluate(self, key: str | None = None) -> int:
        """The value of quantity `key` (default the answer) recomputed from the graph."""
        q = self.by_key[key or self.target]
        if q.kind != STEP:
            return q.value
        left, right = (self.evaluate(k) for k in q.inputs)
        return _apply(left, q.op, right)

    def roles(self) -> dict[int, str]:
        """{value: "direct" | "upstream" | "distractor" | "answer"} for every value of the problem:
        direct = the final operation's inputs, upstream = the rest of the path, answer = the gold."""
        by_key, out = self.by_key, {}
        todo, seen = list(by_key[self.target].inputs), set()
        while todo:
            key = todo.pop()
            if key not in seen:
                seen.add(key)
                todo += by_key[key].inputs
        direct = set(by_key[self.target].inputs)
        for q in self.quantities:
            out[q.value] = ("answer" if q.key == self.target else "direct" if q.key in direct
                            else "upstream" if q.key in seen else DISTRACTOR)
        return out

    def oracle(self, trace: str | None = None) -> ValueOracle:
        """The value oracle of `trace` (default: the reference solution)."""
        return value_oracle(self, self.solution if trace is None else trace)

    def reward(self, text: str) -> float:
        """1.0 when the text's final answer (any format `spans.locate_answer` reads) is the gold."""
        found = locate_answer(text)
        value = None if found is None else parse_number(text[found.start:found.end])
        return 1.0 if value is not None and value == self.answer else 0.0


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


class _Draw:
    """Distinct values >= 2: each draw avoids every value already used."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def take(self, lo: int, hi: int) -> int | None:
        free = [v for v in range(max(lo, 2), hi + 1) if v not in self.used]
        if not free:
            return None
        value = self.rng.choice(free)
        self.used.add(value)
        return value

    def claim(self, value: int) -> bool:
        if value < 2 or value in self.used:
            return False
        self.used.add(value)
        return True


def _step(rng, draw: _Draw, cfg: WordConfig, prev: int, last: bool) -> tuple[str, int, int] | None:
    """(template, k, result) of one operation on the count `prev`, or None when none fits."""
    ops = [op for op in cfg.ops if op != "-" or prev > 4]
    if not ops:
        return None
    op = rng.choice(ops)
    if last and rng.random() < cfg.per_rate:
        op, template = "*", PER
        k = draw.take(2, min(cfg.max_given, cfg.max_value // prev))
    elif op == "*":
        k = draw.take(2, min(cfg.max_factor, cfg.max_value // prev))
        template = TWICE if k == 2 else OP_TEMPLATES["*"][0]
    elif op == "+":
        k = draw.take(2, min(cfg.max_given, cfg.max_value - prev))
        template = rng.choice(OP_TEMPLATES["+"])
    else:
        k = draw.take(2, min(cfg.max_given, prev - 2))
        template = rng.choice(OP_TEMPLATES["-"])
    if k is None:
        return None
    result = _apply(prev, op, k)
    return (template, k, result) if draw.claim(result) else None


_SOLUTION = {"+": "{a} has {p} + {k} = {r} {items}.", "-": "{a} has {p} - {k} = {r} {items} left.",
             "*": "{b} has {p} * {k} = {r} {items}.", "per": "{a} gets {p} * {k} = {r} dollars."}


def _try_problem(rng: random.Random, cfg: WordConfig) -> WordProblem | None:
    names = rng.sample(PEOPLE, 3 + cfg.max_steps)
    items, other = rng.sample(ITEMS, 2)
    draw = _Draw(rng)
    holder, spare = names[0], list(names[3:])
    start = draw.take(5, cfg.max_given)
    sentences = [f"{holder} has {start} {items}."]
    quantities = [Quantity("q0", start, GIVEN, 0)]
    lines, prev, prev_key = [], start, "q0"
    n_steps = rng.randint(cfg.min_steps, cfg.max_steps)
    for i in range(1, n_steps + 1):
        made = _step(rng, draw, cfg, prev, last=i == n_steps)
        if made is None:
            return None
        template, k, result = made
        other_person = spare.pop()
        sentences.append(template.format(a=holder, b=other_person, k=k, items=items))
        s = len(sentences) - 1
        op = "-" if template in OP_TEMPLATES["-"] else "*" if template in (TWICE, PER, *OP_TEMPLATES["*"]) else "+"
        quantities += [Quantity(f"k{i}", k, GIVEN, s), Quantity(f"q{i}", result, STEP, s, op, (prev_key, f"k{i}"))]
        kind = "per" if template == PER else op
        if template in (TWICE, *OP_TEMPLATES["*"]):
            holder = other_person
        lines.append(_SOLUTION[kind].format(a=holder, b=holder, p=prev, k=k, r=result, items=items))
        prev, prev_key = result, f"q{i}"
    ask = (f"How many dollars does {holder} get?" if lines[-1].endswith("dollars.")
           else f"How many {items} does {holder} have now?")
    body = _interleave(rng, cfg, sentences, quantities, draw, names, items, other)
    if body is None:
        return None
    sentences, quantities = body
    solution = "\n".join(lines + [f"The answer is {prev}."])
    return WordProblem(tuple(sentences), ask, tuple(quantities), prev_key, solution)


def _interleave(rng, cfg, sentences, quantities, draw, names, items, other):
    """Distractor and filler sentences put among the path's (never first), quantities renumbered
    to their sentence's new place."""
    slots = [(s, None) for s in sentences[1:]]
    fills = {"a": names[0], "c": names[1], "items": items, "other": other}
    for j in range(cfg.n_distractors):
        d = draw.take(2, min(cfg.max_value, 3 * cfg.max_given))  # ages and pages stay plausible
        if d is None:
            return None
        text = rng.choice(DISTRACTORS).format(d=d, **fills)
        slots.insert(rng.randint(0, len(slots)), (text, Quantity(f"d{j}", d, DISTRACTOR, -1)))
    for _ in range(cfg.n_fillers):
        slots.insert(rng.randint(0, len(slots)), (rng.choice(FILLER_SENTENCES).format(**fills), None))
    order = [sentences[0]] + [text for text, _ in slots]
    where = {text: i for i, text in enumerate(order)}
    if len(where) != len(order):
        return None  # the same sentence twice would make the graph's sentence index ambiguous
    moved = [replace(q, sentence=where[sentences[q.sentence]]) for q in quantities]
    moved += [replace(q, sentence=where[text]) for text, q in slots if q is not None]
    return order, moved


def generate_word_problems(n: int, preset: str | WordConfig = "two-step", seed: int = 0,
                           split: str | None = "train", **overrides) -> list[WordProblem]:
    """`n` word problems from a seeded generator; `split` keeps only 'train' or 'test' problems
    (None keeps both). The same arguments always give the same problems."""
    cfg = get_word_config(preset, **overrides)
    if split not in ("train", "test", None):
        raise WorldConfigError(f"split={split!r} must be 'train', 'test' or None")
    rng = random.Random(f"oar-words-{seed}")
    out: list[WordProblem] = []
    failures = 0
    while len(out) < n:
        problem = _try_problem(rng, cfg)
        if problem is None:
            failures += 1
            if failures > _MAX_TRIES and not out:
                raise WorldConfigError(f"could not build a word problem with {cfg} after {_MAX_TRIES} "
                                       "tries; raise max_value or max_given")
            continue
        if split is None or split_of(problem.question) == split:
            out.append(problem)
    return out
