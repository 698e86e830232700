"""How fast a model runs on this machine now, and how long a piece of work takes at that speed:
the unit a command's estimate is priced in (`methods.cost` counts each method's work; `oar
generate` times its decoding steps).

Speed (`measure_speed`): a no-grad forward of n tokens takes `fixed + per_token * n` seconds
here, from timed forwards of the model (8 tokens and a trace's length, the faster of two each,
after one of each to warm up): about a second on a 135M model on a CPU, and it includes
whatever else the machine is running. A token of a forward with backward costs GRAD times a
no-grad one (measured 2.3-2.5 on SmolLM2-135M on a CPU).

`DecodeClock` times the first decoding steps of a sampling run and says how long the run will
take at most; `duration` says seconds in words.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

GRAD = 2.4  # seconds per token of a forward with backward / of a no-grad forward (measured 2.3-2.5)
WARM_UP = 8  # tokens of the warm-up and of the short timed forward
LONG = 60.0  # seconds a trace: above this an estimate names the faster choice


@dataclass(frozen=True)
class Work:
    """Tokens through no-grad forwards, tokens through forwards with backward, forward calls."""

    forward: float = 0.0
    backward: float = 0.0
    calls: int = 0

    def __add__(self, other: "Work") -> "Work":
        return Work(self.forward + other.forward, self.backward + other.backward, self.calls + other.calls)


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
