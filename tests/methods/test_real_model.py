"""Every method on a real pretrained model (SmolLM2-135M-Instruct, float32) and on random models
of other architectures with large vocabularies: exactness, dtype agreement and memory bounds.

Kept cheap for CI: one short trace for exactness and dtypes, one ~300-token trace per model for
memory, each method once.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from oar_attrib.models import budget
from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.methods import get_method
from oar_attrib.weights.metrics import spearman
from oar_attrib.methods.oar_p import oar_p, oar_p_reference

pytestmark = pytest.mark.heavy

HERE = Path(__file__).resolve().parents[1]  # tests/
PROMPT = [{"role": "user", "content": "12 boxes of 3 pens, and 5 pens. How many pens?"}]
RESPONSE = "12 * 3 = 36 pens in boxes.\n36 + 5 = 41 pens.\n#### 41"


@pytest.fixture(scope="module")
def short(smollm2):
    """A ~75-token chat trace of SmolLM2 (its template adds a system prompt; two reasoning
    lines, `#### 41`)."""
    model, tokenizer = smollm2
    batch, _ = encode_pairs(tokenizer, [PROMPT], [RESPONSE])
    assert 50 <= batch.input_ids.shape[1] <= 80 and bool(batch.has_answer[0])
    return batch


@pytest.mark.parametrize("packing", ["padded", "packed"])
def test_oar_p_fast_equals_the_reference_on_smollm2(smollm2, short, packing):
    """The fast engine (cache reuse, windows, packing, a budget that splits the copies over
    several forwards) gives the brute-force definition's numbers on the real model."""
    model, _ = smollm2
    reference = oar_p_reference(model, short, "as_mean")
    fast = oar_p(model, short, probe="as_mean", packing=packing,
                 max_batch_tokens=4 * short.input_ids.shape[1])
    assert reference[short.scored_mask].gt(0).sum() > 10
    torch.testing.assert_close(fast, reference, atol=1e-4, rtol=1e-4)


# Spearman rank agreement of bf16 with float32 on the short trace, per method.
# random: no model, the same numbers in every dtype (not tested). oar_p_step: a handful of steps,
# too few for a rank correlation (its token engine is oar_p's, checked here).
BF16_FLOORS = {"oar_p": 0.9, "oar_g": 0.9, "entropy": 0.9, "grail": 0.9, "ig": 0.9}
# OAR-G with one noise draw is noise-dominated on this trace even in float32: two seeds' ranks
# agree -0.08 to 0.77 (Spearman), and bf16 against float32 with the same seed 0.27 to 0.94, by
# seed and by thread count. Averaging 8 draws takes float32 seed-to-seed agreement to 0.93-0.96
# and bf16's to 0.94-0.99 (docs/benchmarks.md): the comparison is made where the estimator's own
# variance no longer hides the dtype's.
# IG at 4 path points: bf16 matmuls are ~14x slower than float32 on a CPU (72 s at 16 points,
# 20 s at 4), and the dtype comparison holds the estimator fixed (bf16 vs fp32 Spearman 0.96 at
# 16 points, 0.98 at 8, 0.975 at 4 on this trace).
BF16_PARAMS = {"ig": {"n_steps": 4}, "oar_g": {"n_noise": 8}}


@pytest.mark.parametrize("method", sorted(BF16_FLOORS))
def test_bf16_ranks_tokens_like_float32_on_smollm2(smollm2, short, method):
    model, _ = smollm2
    half = _bf16(model)
    params = BF16_PARAMS.get(method, {})
    fn = get_method(method)
    scored = short.scored_mask.clone()
    scored[:, 0] = False  # entropy has no value at position 0
    full = fn(model, short, generator=torch.Generator().manual_seed(0), **params)[scored]
    low = fn(half, short, generator=torch.Generator().manual_seed(0), **params)[scored]
    assert torch.isfinite(low).all() and full.std() > 0
    rho = spearman(full.numpy(), low.numpy())
    assert rho >= BF16_FLOORS[method], f"{method}: bf16 vs fp32 Spearman {rho:.3f}"


def test_oar_g_draws_average_to_a_seed_independent_ranking(smollm2, short):
    """The mean of 8 OAR-G draws ranks the short trace's tokens alike whatever the seed (>= 0.9),
    and more alike than single draws do (these agreed -0.08 to 0.77 between seeds here)."""
    model, _ = smollm2
    fn = get_method("oar_g")
    scored = short.scored_mask

    def ranks(seed: int, n_noise: int):
        return fn(model, short, generator=torch.Generator().manual_seed(seed), n_noise=n_noise)[scored].numpy()

    one = [spearman(ranks(0, 1), ranks(seed, 1)) for seed in (1, 2, 3)]
    eight = [spearman(ranks(0, 8), ranks(seed, 8)) for seed in (1, 2, 3)]
    assert min(eight) >= 0.9 and min(eight) > min(one), (one, eight)


_HALF = {}


def _bf16(model):
    """A bfloat16 copy of `model`, made once per session."""
    if id(model) not in _HALF:
        _HALF[id(model)] = copy.deepcopy(model).to(torch.bfloat16)
    return _HALF[id(model)]


def _peaks(kind: str, cap: int, kernels: str | None = None) -> dict:
    """tests/memory_run.py in a fresh process: each method's peak RSS above its start; `kernels`
    caps PyTorch's CPU kernels (ATEN_CPU_CAPABILITY) as on a CPU without AVX-512."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    if kernels:
        env["ATEN_CPU_CAPABILITY"] = kernels
    done = subprocess.run([sys.executable, str(HERE / "memory_run.py"), kind, str(cap)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


needs_proc = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                                reason="peak RSS reset needs Linux's /proc/self/clear_refs")


@needs_proc
@pytest.mark.parametrize("kind, cap, kernels", [
    ("smollm2", budget.CPU_MEMORY_CAP, None),  # the default bound; a row's backward needs ~0.5 GB
    ("gemma3", 256 << 20, None),  # 262k vocabulary, sliding and full attention layers
    ("qwen2", 128 << 20, None),  # 152k vocabulary
    # AVX2 kernels allocate differently; entropy's whole-tensor softmax peaked at 96-160 MiB
    # from run to run here (48-74 MiB with its temporaries sliced): the bound holds on both.
    ("qwen2", 128 << 20, "avx2"),
])
def test_every_method_stays_within_the_stated_memory_bound(kind, cap, kernels):
    """On a 300-token trace, each method's peak resident memory above the model's stays under
    `budget.cpu_memory_bound()` (CPU_MEMORY_CAP set to `cap`). Before the bounds, IG held all
    its path copies (13.7 GB on SmolLM2) and entropy every position's logits (300 x 262k floats
    and their float32 copies, ~1.3 GB, on the Gemma 3 vocabulary)."""
    result = _peaks(kind, cap, kernels)
    assert result["length"] >= 290
    assert result["bound"] <= cap
    over = {m: round(p / 2**20) for m, p in result["peaks"].items() if p > result["bound"]}
    assert not over, f"peak MiB over the {result['bound'] / 2**20:.0f} MiB bound: {over}"
