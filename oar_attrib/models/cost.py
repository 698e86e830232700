"""How long a command will take, said before it starts: the size of its work times the speed
this machine measured a moment ago.

Speed (`measure_speed`): a no-grad forward of n tokens takes `fixed + per_token * n` seconds
here, from timed forwards of the model (8 tokens and a trace's length, the faster of two each,
after one of each to warm up): about a second on a 135M model on a CPU, and it includes
whatever else the machine is running. A token of a forward with backward costs GRAD times a no-grad one.

Work (`method_work`): the tokens each method passes through the model for one trace, from the
trace's shape (`TraceShape`: prompt P, the positions up to the last probe, `end`, the scored
positions and the steps' first positions), as the methods run them:

    oar_p       end + PADDING * sum over scored t of (end - t)   (one window per token: the
                clean cache serves the prefix, `methods.perturb`), copies in forwards of ~6
    oar_p_step  the same with one window per step
    oar_p_hier  the steps' windows, then the tokens of its top_steps chosen steps (their share
                top_steps / K of the token windows; all of them when K <= top_steps)
    oar_g       end, then n_noise rows of end - P tokens with a backward
    ig          end + R, then n_steps rows of R tokens with a backward
    grail       P + R with a backward;  entropy  P + R with every token's logits (ENTROPY_HEAD)
    random, none, ktae   nothing (no forward);  resample  no estimate (it samples text)

Measured on SmolLM2-135M on a CPU (tests/test_cost.py holds the counts to the methods'
own forwards): these counts are within 15% of the tokens the methods ran, and with the measured
speed the seconds within 20% (GRAD 2.3-2.5, ENTROPY_HEAD 1.26). A trace's work grows with its
length, token OAR-P's with its square: an estimate made on the first trace is said as such.

`Estimate` puts it in words for `oar attribute` (`attribution_estimate`); `decode_estimate` does
the same for sampling answers (`oar generate`, the demo), from a decoding step's measured time.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

GRAD = 2.4  # seconds per token of a forward with backward / of a no-grad forward (measured 2.3-2.5)
ENTROPY_HEAD = 1.3  # every token's logits (the vocabulary projection): measured 1.26x a forward
PADDING = 1.1  # copies batched into one forward are padded to the longest window (measured 1.03-1.09)
COPIES_PER_FORWARD = 6  # perturbed copies the engine groups into one forward on a CPU (measured 5-6)
DRAWS_PER_FORWARD = 3  # OAR-G's noise draws / IG's path points per forward with backward (measured)
WARM_UP = 8  # tokens of the warm-up and of the short timed forward
LONG = 60.0  # seconds a trace: above this an estimate names the faster choice


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


@dataclass(frozen=True)
class Work:
    """Tokens through no-grad forwards, tokens through forwards with backward, forward calls."""

    forward: float = 0.0
    backward: float = 0.0
    calls: int = 0

    def __add__(self, other: "Work") -> "Work":
        return Work(self.forward + other.forward, self.backward + other.backward, self.calls + other.calls)


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
    "random": lambda s, p: Work(),
    "none": lambda s, p: Work(),
    "ktae": lambda s, p: Work(),
}


def method_work(method: str, shape: TraceShape, params: dict | None = None) -> Work | None:
    """The work of `method` on a trace of `shape` (module docstring); None when it has no cost
    model here (resampling, a plugin's method). A trace without scored positions costs the
    span-scoped methods nothing (they do not run on it)."""
    from ..methods import method_spec

    spec = method_spec(method)
    name = method if method in WORK else spec.variant_of
    if name not in WORK:
        return None
    if not shape.scored and spec.scope != "response":
        return Work()
    return WORK[name](shape, params or {})


@dataclass(frozen=True)
class Speed:
    """Seconds of a no-grad forward here: `fixed` per call plus `per_token` per token."""

    fixed: float
    per_token: float

    def seconds(self, work: Work) -> float:
        return work.calls * self.fixed + self.per_token * (work.forward + GRAD * work.backward)


def _timed(model, ids: torch.Tensor) -> float:
    device = ids.device
    start = time.perf_counter()
    model(input_ids=ids, logits_to_keep=1)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def measure_speed(model, length: int) -> Speed:
    """The `Speed` of `model` on this machine now, from forwards of WARM_UP tokens and of
    `length` (a trace's): one of each to warm up (the first forward of a shape allocates), then
    the faster of two of each, timed (a busy machine's pauses fall on one of them)."""
    from .lm import eval_mode, model_device

    vocab = int(model.get_input_embeddings().weight.shape[0])
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, max(int(length), 2 * WARM_UP)), generator=generator)
    ids = ids.to(model_device(model))
    with torch.no_grad(), eval_mode(model):
        _timed(model, ids[:, :WARM_UP]), _timed(model, ids)
        short = min(_timed(model, ids[:, :WARM_UP]) for _ in range(2))
        long = min(_timed(model, ids) for _ in range(2))
    per_token = max(long - short, 1e-9) / (ids.shape[1] - WARM_UP)
    return Speed(fixed=max(short - WARM_UP * per_token, 0.0), per_token=per_token)


def duration(seconds: float) -> str:
    """`seconds` in words of one unit, rounded to what an estimate can say."""
    if seconds < 10:
        return f"{seconds:.1f} s" if seconds >= 0.05 else "under 0.1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


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
    from ..methods import method_spec

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


class DecodeClock:
    """Times the first decoding steps of a sampling run (`on_step` of `generation.StepCounter`)
    and, once STEPS of them are measured, says through `tell` how long the run will take at
    most: `batches` batches, each its prefill (the time to the first step) and up to
    `max_new_tokens` steps (a batch ends sooner when all its answers end)."""

    STEPS = 4

    def __init__(self, command: str, batches: int, max_new_tokens: int, tell, shorter: str = ""):
        self.command, self.batches, self.max_new_tokens = command, batches, max_new_tokens
        self.tell, self.shorter = tell, shorter
        self.began, self.first, self.steps, self.told = time.perf_counter(), None, 0, False

    def step(self) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
            return
        self.steps += 1
        if self.steps == self.STEPS and not self.told:
            self.told = True
            self.tell(self.line((now - self.first) / self.STEPS, self.first - self.began))

    def line(self, step: float, prefill: float) -> str:
        total = self.batches * (prefill + self.max_new_tokens * step)
        text = (f"{self.command}: at most about {duration(total)} here: {self.batches} "
                f"batch{'es' if self.batches != 1 else ''} of up to {self.max_new_tokens} decoding steps, "
                f"{duration(step)} a step (measured on the first; a batch ends when its answers do)")
        return text + (f"; {self.shorter}" if total > 10 * LONG and self.shorter else "")
