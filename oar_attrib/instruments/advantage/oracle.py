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

The boundaries of a trace decode together (`generation.sample_prefixes`): each prefix is
prefilled once and its cache repeated N times, all of the trace's rows run in one decode loop
(as many boundaries per pass as memory allows, `boundary_chunks`), and a row that ends leaves
the batch. Each boundary samples from its own stream, seeded by the hash of its key (model,
settings, prefix ids), so a boundary read back from the cache, one decoded alone
(`batched=False`, the reference) and one decoded beside the others agree. (Caches made before
0.2.0 hold continuations of an earlier sampler, one boundary per pass from torch's global
stream: the same distribution, other draws.)

`split_half` says how reliable the label is: the N continuations of each boundary split into
two halves, dV computed from each, the halves' Pearson correlation over every step of every
trace, and Spearman-Brown's 2 r / (1 + r) for the full N.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

from ...defaults import ADVANTAGE_CONTINUATIONS, option
from ...errors import InputError
from ...models.generation import sample_prefixes, stop_ids
from ...defaults import REGENERATION_MARGIN


@dataclass(frozen=True)
class AdvantageSettings:
    """What the advantage oracle samples; every field is in the record that keys its cache."""

    n: int = option(ADVANTAGE_CONTINUATIONS, "Continuations sampled per step boundary (V_k's denominator).")
    temperature: float = option(1.0, "The policy's sampling temperature.")
    seed: int = option(0, "Seed of the continuations (hashed with each prefix).")
    margin: int = option(REGENERATION_MARGIN, "Tokens a continuation may write beyond the rest of the original "
                                              "response.")

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


class Boundaries:
    """Where the oracle's boundary rewards are kept: `seed(prefix)` the sampling seed of a
    prefix's continuations, `get(prefix)` its N rewards when they are known (else None),
    `put(prefix, rewards, seconds)` keeps them. This one keeps them in memory, seeded by the
    prefix's ids and the settings; `advantage_recall`'s keeps them in its cache, keyed and
    seeded by the model's record as well."""

    def __init__(self, settings: "AdvantageSettings"):
        self.settings, self.known = settings, {}

    def seed(self, prefix: list[int]) -> int:
        return prefix_seed(json.dumps([asdict(self.settings), prefix]))

    def get(self, prefix: list[int]) -> list[float] | None:
        return self.known.get(tuple(prefix))

    def put(self, prefix: list[int], rewards: list[float], seconds: float) -> None:
        self.known[tuple(prefix)] = rewards


def prefix_chunks(model, widths: list[int], n: int) -> list[list[int]]:
    """The prefixes (indices into `widths`, each prefix's tokens with its continuations' budget)
    in chunks decoded together: as many as keep their rows' KV caches (n rows each, every row at
    the chunk's widest) within the memory bound of one pass (`models.budget.memory_bound`), at
    least one a chunk."""
    from ...models.budget import Shape, memory_bound

    per_token = Shape.of(model).cache()
    widest = max(widths, default=1)
    per_chunk = max(1, int(memory_bound(next(model.parameters()).device) // (per_token * n * widest)))
    order = list(range(len(widths)))
    return [order[i:i + per_chunk] for i in range(0, len(order), per_chunk)]


def prefix_rewards(model, tokenizer, prefixes: list[list[int]], budgets: list[int],
                   reward_of: Callable[[int, list[int]], float], settings: AdvantageSettings, store: Boundaries,
                   batched: bool = True) -> tuple[list[list[float]], int]:
    """(per prefix its N continuation rewards, new tokens decoded now): read from `store` where
    it holds them, else sampled at the settings' temperature (`generation.sample_prefixes`,
    each prefix from its own stream seeded by `store.seed`), at most budgets[i] tokens each,
    graded by `reward_of(i, continuation ids)` and kept in `store`. The prefixes not in the
    store decode together, as many per pass as memory allows (`prefix_chunks`); `batched=False`
    one per pass (the reference: the same continuations)."""
    found = [store.get(p) for p in prefixes]
    todo = [i for i, hit in enumerate(found) if hit is None]
    chunks = prefix_chunks(model, [len(prefixes[i]) + budgets[i] for i in todo], settings.n) \
        if batched else [[j] for j in range(len(todo))]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    new = 0
    for chunk in chunks:
        ids = [todo[j] for j in chunk]
        tick = time.perf_counter()
        tails = sample_prefixes(model, [prefixes[i] for i in ids], [store.seed(prefixes[i]) for i in ids],
                                [budgets[i] for i in ids], samples=settings.n, temperature=settings.temperature,
                                pad_id=pad, stop=stop_ids(model, tokenizer))
        seconds = time.perf_counter() - tick
        made = sum(len(t) for rows in tails for t in rows)
        new += made
        for i, rows in zip(ids, tails):
            found[i] = [float(reward_of(i, t)) for t in rows]
            share = sum(len(t) for t in rows) / made if made else 1 / len(ids)
            store.put(prefixes[i], found[i], seconds * share)
    return found, new


def advantage_oracle(model, tokenizer, prompt_ids: Sequence[int], response_ids: Sequence[int],
                     steps: Sequence[tuple[int, int]], reward_of: Callable[[str], float], reward: float,
                     settings: AdvantageSettings = AdvantageSettings(), *, store: Boundaries | None = None,
                     batched: bool = True) -> AdvantageTrace:
    """The advantage oracle of one trace (module docstring).

    prompt_ids: (P,), response_ids: (T,); steps: the S token ranges of the response's steps
    (in order, covering its reasoning); reward_of: response text (decoded without special
    tokens) -> reward; reward: the trace's own. store: where boundary rewards are read from and
    kept (`Boundaries`; default in memory). The boundaries not in the store are decoded
    together (`prefix_rewards`); `batched=False` decodes them one per pass (the reference)."""
    if not steps:
        raise InputError("the advantage oracle needs a trace with at least one step")
    prompt, response = [int(i) for i in prompt_ids], [int(i) for i in response_ids]
    if steps[-1][1] > len(response):
        raise InputError(f"steps reach token {steps[-1][1]} of a {len(response)}-token response")
    if not prompt:
        raise InputError("the advantage oracle needs a prompt: V_0 is sampled from it")
    start = time.perf_counter()
    bounds = [0] + [b for _, b in steps[:-1]]

    def graded(k: int, tail: list[int]) -> float:
        return reward_of(tokenizer.decode(response[:bounds[k]] + tail, skip_special_tokens=True))

    rewards, new = prefix_rewards(model, tokenizer, [prompt + response[:b] for b in bounds],
                                  [len(response) - b + settings.margin for b in bounds], graded, settings,
                                  store if store is not None else Boundaries(settings), batched)
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
