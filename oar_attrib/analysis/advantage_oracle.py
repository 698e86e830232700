"""The Monte-Carlo advantage oracle: how much does each step change the expected reward?

For a trace whose reasoning splits into steps 1..S (`inputs.steps`, `TraceAttribution.steps`),
boundary k is the prefix that ends with step k (boundary 0: the prompt alone). From each
boundary k < S, N continuations are sampled from the policy at its sampling temperature (no
top-k/top-p) and graded by the caller's reward (`reward_of`: the response text, prefix and
continuation, -> reward), and

    V_k = mean reward of the N continuations from boundary k      (k = 0 .. S-1)
    V_S = the trace's own reward (the last step runs through the answer)
    dV_k = V_k - V_{k-1}                                           (the label of step k)

VinePPO's estimator of the value of a prefix under the policy's own continuations: dV_k is the
advantage of writing step k, the credit RL wants, measured on the policy's distribution (never
greedy). A step whose dV is 0 changed nothing the policy would have reached anyway.

The N continuations of one boundary share its KV cache and decode as one batch
(`generation.continue_groups`: the prefix is prefilled once, its cache repeated N times);
`batched=False` decodes them one by one (the reference, and the slow side of
`bench/bench_advantage.py`). Each boundary's sampling is seeded by the hash of its key (model,
settings, prefix ids), so a boundary read back from the cache and one decoded now agree.

`split_half` says how reliable the label is: the N continuations of each boundary split into
two halves, dV computed from each, the halves' Pearson correlation over every step of every
trace, and Spearman-Brown's 2 r / (1 + r) for the full N.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ..errors import InputError
from ..models.generation import continue_groups, cut_at_stop, stop_ids
from .counterfactual_recall import REGENERATION_MARGIN


@dataclass(frozen=True)
class AdvantageSettings:
    """What the advantage oracle samples; every field is in the record that keys its cache."""

    n: int = field(default=16, metadata={"help": "Continuations sampled per step boundary (V_k's "
                                                 "denominator)."})
    temperature: float = field(default=1.0, metadata={"help": "The policy's sampling temperature."})
    seed: int = field(default=0, metadata={"help": "Seed of the continuations (hashed with each prefix)."})
    margin: int = field(default=REGENERATION_MARGIN, metadata={
        "help": "Tokens a continuation may write beyond the rest of the original response."})

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise InputError(f"advantage oracle: n={self.n!r} must be an integer >= 1 (continuations per boundary)")
        if not (isinstance(self.temperature, (int, float)) and 0 < self.temperature < float("inf")):
            raise InputError(f"advantage oracle: temperature={self.temperature!r} must be a finite number > 0")
        if not isinstance(self.margin, int) or self.margin < 0:
            raise InputError(f"advantage oracle: margin={self.margin!r} must be an integer >= 0")


@dataclass
class AdvantageTrace:
    """The oracle of one trace: rewards[k] the N continuation rewards from boundary k (k < S),
    `reward` the trace's own; `seconds` and `new_tokens` the decoding work done now."""

    rewards: list[list[float]]
    reward: float
    seconds: float = 0.0
    new_tokens: int = 0

    def values(self) -> np.ndarray:
        """(S + 1,) V_0 .. V_S."""
        return np.array([float(np.mean(r)) for r in self.rewards] + [self.reward], dtype=np.float64)

    def dv(self) -> np.ndarray:
        """(S,) dV_1 .. dV_S."""
        return np.diff(self.values())

    def halves(self) -> tuple[np.ndarray, np.ndarray]:
        """(S,) dV from the first and from the second half of each boundary's continuations
        (an odd last one sits in neither)."""
        m = min(len(r) for r in self.rewards) // 2 if self.rewards else 0
        if m < 1:
            raise InputError("split-half reliability needs at least 2 continuations per boundary")
        a = [float(np.mean(r[:m])) for r in self.rewards] + [self.reward]
        b = [float(np.mean(r[m:2 * m])) for r in self.rewards] + [self.reward]
        return np.diff(a), np.diff(b)


def prefix_seed(key: str) -> int:
    """The sampling seed of one boundary: its cache key hashed to 63 bits."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)


@torch.no_grad()
def sample_continuations(model, prefix: Sequence[int], n: int, *, pad_id: int, eos: list[int],
                         max_new_tokens: int, temperature: float, seed: int,
                         batched: bool = True) -> list[list[int]]:
    """n continuations of the (L,) prefix ids sampled at `temperature`, each cut before its
    first EOS. batched: one prefill and one decode loop of n rows sharing the prefix's cache
    (`continue_groups`); else n decodes of one row. Seeded by `seed` once before decoding."""
    torch.manual_seed(seed)
    rows = [list(prefix)]
    kwargs = dict(max_new_tokens=max_new_tokens, greedy=False, temperature=temperature, eos_token_id=eos or None)
    if batched:
        out = continue_groups(model, rows, pad_id, samples=n, **kwargs).tolist()
    else:
        out = [continue_groups(model, rows, pad_id, samples=1, **kwargs).tolist()[0] for _ in range(n)]
    return [cut_at_stop(row, eos, keep=False) for row in out]


def advantage_oracle(model, tokenizer, prompt_ids: Sequence[int], response_ids: Sequence[int],
                     steps: Sequence[tuple[int, int]], reward_of: Callable[[str], float], reward: float,
                     settings: AdvantageSettings = AdvantageSettings(), *, lookup=None,
                     batched: bool = True) -> AdvantageTrace:
    """The advantage oracle of one trace (module docstring).

    prompt_ids: (P,), response_ids: (T,); steps: the S token ranges of the response's steps
    (in order, covering its reasoning); reward_of: response text (decoded without special
    tokens) -> reward; reward: the trace's own. lookup: optional `(key_parts, compute) ->
    rewards`, the cache (`advantage_recall`'s), given each boundary's prefix ids and a function
    that samples it now."""
    if not steps:
        raise InputError("the advantage oracle needs a trace with at least one step")
    prompt, response = [int(i) for i in prompt_ids], [int(i) for i in response_ids]
    if steps[-1][1] > len(response):
        raise InputError(f"steps reach token {steps[-1][1]} of a {len(response)}-token response")
    if not prompt:
        raise InputError("the advantage oracle needs a prompt: V_0 is sampled from it")
    start, new = time.perf_counter(), 0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    eos = stop_ids(model, tokenizer)
    bounds = [0] + [b for _, b in steps[:-1]]
    rewards = []
    for b in bounds:
        head = response[:b]

        def compute(seed: int, head=head) -> list[float]:
            nonlocal new
            tails = sample_continuations(model, prompt + head, settings.n, pad_id=pad, eos=eos,
                                         max_new_tokens=len(response) - b + settings.margin,
                                         temperature=settings.temperature, seed=seed, batched=batched)
            new += sum(len(t) for t in tails)
            return [float(reward_of(tokenizer.decode(head + t, skip_special_tokens=True))) for t in tails]

        if lookup is None:
            rewards.append(compute(prefix_seed(json.dumps([asdict(settings), prompt, head]))))
        else:
            rewards.append(lookup(prompt + head, compute))
    return AdvantageTrace(rewards, float(reward), time.perf_counter() - start, new)


def split_half(traces: Sequence[AdvantageTrace]) -> dict:
    """The label's reliability over every step of `traces`: {"r": Pearson correlation of the
    two halves' dV, "spearman_brown": 2 r / (1 + r) (r as it is when r <= 0), "steps": their
    count, "before_last": the same over each trace's steps but its last}; r None (undefined)
    with fewer than 3 steps or a constant half.

    The last step's dV is the trace's own reward minus V before it in both halves, so its
    halves share that reward and agree by construction: over every step the figure is
    inflated by traces that differ in reward. `before_last` is the reliability of the steps
    whose both V's are sampled, the ones a ranking of steps mostly orders (on the bundled
    model's `hard` world it is 0.00 where the whole figure is 0.85)."""
    pairs = [t.halves() for t in traces]
    out = _correlation([p[0] for p in pairs], [p[1] for p in pairs])
    out["before_last"] = _correlation([p[0][:-1] for p in pairs], [p[1][:-1] for p in pairs])
    return out


def _correlation(first: list, second: list) -> dict:
    a = np.concatenate(first) if first else np.zeros(0)
    b = np.concatenate(second) if second else np.zeros(0)
    if a.size < 3 or a.std() == 0 or b.std() == 0:
        return {"r": None, "spearman_brown": None, "steps": int(a.size)}
    r = float(np.corrcoef(a, b)[0, 1])
    return {"r": r, "spearman_brown": 2 * r / (1 + r) if r > 0 else r, "steps": int(a.size)}
