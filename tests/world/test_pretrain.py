"""The bundled model's training data: masked inputs keep their targets and touch only reasoning."""
import pytest
import torch

from oar_attrib.world import generate_problems
from oar_attrib.world.tokenizer import build_tokenizer
from oar_attrib.training.pretrain import PretrainConfig, encode


@pytest.fixture(scope="module")
def problems():
    return (generate_problems(12, "default", seed=3)
            + generate_problems(4, "medium", seed=3, answer_format="boxed"))


@pytest.fixture(scope="module")
def tokenizer(problems):
    return build_tokenizer([p.prompt + p.solution for p in problems], 280)


def test_masking_replaces_only_reasoning_inputs_and_keeps_every_target(problems, tokenizer):
    plain = encode(problems, tokenizer, 4.0)
    masked = encode(problems, tokenizer, 4.0, mask_rate=0.5, generator=torch.Generator().manual_seed(0))
    ids0, mask0, labels0, weights0 = plain
    ids1, mask1, labels1, weights1 = masked
    assert torch.equal(mask0, mask1) and torch.equal(labels0, labels1) and torch.equal(weights0, weights1)
    changed = ids0 != ids1
    assert (ids1[changed] == tokenizer.pad_token_id).all()
    n_reasoning = 0
    for row, p in enumerate(problems):
        prompt_len = len(tokenizer(p.prompt).input_ids)
        enc = tokenizer(p.solution, return_offsets_mapping=True)
        marker = p.solution.rfind("####") if "####" in p.solution else p.solution.rfind("\\boxed")
        reasoning = torch.zeros(ids0.shape[1], dtype=torch.bool)
        for i, (_, end) in enumerate(enc.offset_mapping):
            reasoning[prompt_len + i] = end <= marker
        n_reasoning += int(reasoning.sum())
        # Never the prompt, the marker, the answer, EOS or padding; only reasoning tokens.
        assert not (changed[row] & ~reasoning).any()
    # Half of the reasoning tokens, give or take the draw.
    assert 0.35 < changed.sum().item() / n_reasoning < 0.65
    again = encode(problems, tokenizer, 4.0, mask_rate=0.5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again[0], ids1)  # seeded


def test_mask_rate_is_validated():
    with pytest.raises(ValueError, match="mask_rate"):
        PretrainConfig(mask_rate=1.0)
