"""How long attributing traces will take, said before it starts (`oar attribute`, the demo's
fill, `oar align`; the recall instruments may call it too): the tokens each method passes
through the model for one trace, priced at the model's measured speed (`models.cost`).

Work (`method_work`): from the trace's shape (`TraceShape`: prompt P, the positions up to the
last probe, `end`, the scored positions and the steps' first positions), as the methods run:

    oar_p       end + PADDING * sum over scored t of (end - t)   (one window per token: the
                clean cache serves the prefix, `methods.perturb`), copies in forwards of ~6
    oar_p_step  the same with one window per step
    oar_p_hier  the steps' windows, then the tokens of its top_steps chosen steps (their share
                top_steps / K of the token windows; all of them when K <= top_steps)
    oar_g       end, then n_noise rows of end - P tokens with a backward
    ig          end + R, then n_steps rows of R tokens with a backward
    grail       P + R with a backward;  entropy  P + R with every token's logits (ENTROPY_HEAD)
    resample    2 n_samples continuations per step, ROLLOUTS_PER_CALL at a time, each its prefix
                and up to end - (first step) + 16 new tokens decoded one step (a call) at a time
                with every row's logits: an upper bound, as continuations end early
    random, none, ktae   nothing (no forward); a plugin's method: no estimate

Measured on SmolLM2-135M on a CPU (tests/test_cost.py holds the counts to the methods' own
forwards on a tiny model): the counts are within 10% of the tokens the methods ran (hierarchical
OAR-P's within 45%: which steps it chooses depends on the scores), and with the measured speed
the seconds within 20%. A trace's work grows with its length, token OAR-P's with its square: an
estimate made on the first trace is said as such.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..models.cost import LONG, Speed, Work, duration, measure_speed

ENTROPY_HEAD = 1.3  # every token's logits (the vocabulary projection): measured 1.26x a forward
PADDING = 1.1  # copies batched into one forward are padded to the longest window (measured 1.03-1.09)
COPIES_PER_FORWARD = 6  # perturbed copies the engine groups into one forward on a CPU (measured 5-6)
DRAWS_PER_FORWARD = 3  # OAR-G's noise draws / IG's path points per forward with backward (measured)
ROLLOUTS_PER_CALL = 64  # resample's continuations decoded together (its batch_size)


@dataclass(frozen=True)
class TraceShape:
    """What sets a trace's work (positions are of the whole row, prompt first): `prompt` P,
    `response` R, `end` (the positions the probes read: up to the last answer token), the
    scored positions S and the first position of each step; no answer span: nothing scored."""

    prompt: int
    response: int
    end: int
    scored: tuple[int, ...]
    steps: tuple[int, ...]

    @property
    def length(self) -> int:
        return self.prompt + self.response

    @classmethod
    def of(cls, pair) -> "TraceShape":
        """The shape of an `inputs.encoding.EncodedPair`."""
        from ..inputs.segments import ANSWER, scored_set

        prompt, labels = len(pair.prompt_ids), list(pair.labels)
        answer = [i for i, label in enumerate(labels) if label == ANSWER]
        scored = [prompt + i for i, s in enumerate(scored_set(labels, pair.span_found)) if s]
        return cls(prompt=prompt, response=len(labels), end=prompt + (answer[-1] if answer else len(labels)),
                   scored=tuple(scored) if pair.span_found else (),
                   steps=tuple(prompt + a for a, _ in pair.steps) if pair.span_found else ())


def _windows(shape: TraceShape, anchors: Sequence[int]) -> Work:
    """Perturbed copies, one window [anchor, end) each, on the clean pass's cache."""
    tokens = sum(max(shape.end - a, 1) for a in anchors)
    return Work(forward=PADDING * tokens, calls=math.ceil(len(anchors) / COPIES_PER_FORWARD))


def _clean(shape: TraceShape) -> Work:
    return Work(forward=shape.end, calls=1)


def _hierarchical(shape: TraceShape, params: dict) -> Work:
    top = int(params.get("top_steps", 3))
    share = 1.0 if len(shape.steps) <= top else top / len(shape.steps)
    tokens = _windows(shape, shape.scored)
    return (_clean(shape) + _windows(shape, shape.steps)
            + Work(forward=share * tokens.forward, calls=math.ceil(share * tokens.calls)))


def _resample(shape: TraceShape, params: dict) -> Work:
    if not shape.steps:
        return Work()
    rollouts = 2 * int(params.get("n_samples", 8)) * len(shape.steps)
    budget = shape.end - shape.steps[0] + 16
    prefix = (shape.steps[0] + shape.end) / 2
    return Work(forward=rollouts * (prefix + ENTROPY_HEAD * budget),
                calls=math.ceil(rollouts / ROLLOUTS_PER_CALL) * budget)


def _draws(rows: int, width: int) -> Work:
    return Work(backward=rows * width, calls=math.ceil(rows / DRAWS_PER_FORWARD))


# Per method (the registry's name; a variant is costed as the method it varies, `variant_of`):
# its work on one trace of a shape, with its keyword arguments as the attribution passes them.
WORK: dict[str, Callable[[TraceShape, dict], Work]] = {
    "oar_p": lambda s, p: _clean(s) + _windows(s, s.scored),
    "oar_p_step": lambda s, p: _clean(s) + _windows(s, s.steps),
    "oar_p_hier": _hierarchical,
    "oar_g": lambda s, p: Work(forward=s.end, calls=2) + _draws(int(p.get("n_noise", 8)), s.end - s.prompt),
    "ig": lambda s, p: Work(forward=s.end + s.response, calls=3) + _draws(int(p.get("n_steps", 32)), s.response),
    "grail": lambda s, p: Work(backward=s.length, calls=1),
    "entropy": lambda s, p: Work(forward=ENTROPY_HEAD * s.length, calls=1),
    "resample": _resample,
    "random": lambda s, p: Work(),
    "none": lambda s, p: Work(),
    "ktae": lambda s, p: Work(),
}


def method_work(method: str, shape: TraceShape, params: dict | None = None) -> Work | None:
    """The work of `method` on a trace of `shape` (module docstring); None when it has no cost
    model here (resampling, a plugin's method). A trace without scored positions costs the
    span-scoped methods nothing (they do not run on it)."""
    from . import method_spec  # the package's: the built-in methods registered

    spec = method_spec(method)
    name = method if method in WORK else spec.variant_of
    if name not in WORK:
        return None
    if not shape.scored and spec.scope != "response":
        return Work()
    return WORK[name](shape, params or {})


@dataclass(frozen=True)
class Estimate:
    """Seconds per trace of each method (None: no estimate) on one measured trace of `tokens`
    tokens, `extra` seconds per trace beside them, and the `traces` to attribute."""

    methods: dict[str, float | None]
    traces: int
    tokens: int
    extra: float = 0.0

    @property
    def per_trace(self) -> float:
        return self.extra + sum(s for s in self.methods.values() if s is not None)

    @property
    def about(self) -> str:
        """'about', or 'at least' when a method has no estimate."""
        return "at least" if None in self.methods.values() else "about"

    def parts(self) -> str:
        """'oar_p_hier 21 s, oar_g 7.0 s, resample no estimate'."""
        return ", ".join(f"{m} {'no estimate' if s is None else duration(s)}" for m, s in self.methods.items())


def attribution_estimate(model, pair, methods: Sequence[str], params: dict | None, traces: int,
                         speed: Speed | None = None, extra_forward: bool = False) -> Estimate:
    """The `Estimate` of attributing `traces` traces like `pair` (an `EncodedPair`, the first)
    with `methods` (their keyword arguments: `params` over each method's analysis defaults) at
    `speed` (default: `measure_speed` on the pair's length). `extra_forward`: one more forward
    with every token's logits per trace (`oar attribute --store`'s token statistics)."""
    from . import method_spec
    shape = TraceShape.of(pair)
    speed = speed or measure_speed(model, shape.length)
    seconds = {}
    for method in methods:
        work = method_work(method, shape, method_spec(method).analysis_kwargs((params or {}).get(method)))
        seconds[method] = None if work is None else speed.seconds(work)
    extra = speed.seconds(Work(forward=ENTROPY_HEAD * shape.length, calls=1)) if extra_forward else 0.0
    return Estimate(seconds, traces, shape.length, extra)


def estimate_lines(command: str, estimate: Estimate, model: str, faster: Estimate | None = None) -> list[str]:
    """What `command` will do and how long it will take, in one line; when a trace takes more
    than LONG seconds and `faster` (the same traces with other methods) takes at most half as
    long, a second line names the slow methods and the faster choice."""
    methods = ", ".join(estimate.methods)
    total = estimate.per_trace * estimate.traces
    line = (f"{command}: {estimate.traces} traces with {methods} on {model}: {estimate.about} "
            f"{duration(estimate.per_trace)} a trace here, measured on the first ({estimate.tokens} tokens; "
            f"{estimate.parts()}; longer traces take longer), {estimate.about} {duration(total)} in all; each "
            "trace is written when it is done and Ctrl-C keeps those")
    out = [line]
    if estimate.per_trace > LONG and faster is not None and faster.per_trace <= estimate.per_trace / 2:
        slow = [m for m, s in estimate.methods.items() if s is not None and s > LONG / 2 and m not in faster.methods]
        named = ", ".join(f"{m} {duration(estimate.methods[m])}" for m in slow) or methods
        out.append(f"{command}: a long run ({named} a trace here); the reading set, --methods "
                   f"{' '.join(faster.methods)}, takes about {duration(faster.per_trace)} a trace "
                   f"({duration(faster.per_trace * faster.traces)} in all)")
    return out
