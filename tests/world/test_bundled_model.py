"""The bundled `arith-tiny` checkpoint: loads offline, writes well-formed traces, and OAR-P's
fast engine equals the reference on it."""
import json

import pytest
import torch

from oar_attrib import load_model
from oar_attrib.errors import ModelLoadError
from oar_attrib.world.evaluation import evaluate_world
from oar_attrib.models.generation import generate
from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.models import bundled_path
from oar_attrib.methods.oar_p import oar_p, oar_p_reference
from oar_attrib.world import PRESETS, extract_answer, generate_problems


def test_checkpoint_is_small_safetensors_with_a_model_card():
    folder = bundled_path()
    files = {p.name for p in folder.iterdir()}
    assert "model.safetensors" in files and not any(f.endswith((".bin", ".pt", ".pth")) for f in files)
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 8 * 2**20
    card = json.loads((folder / "model_card.json").read_text())
    assert card["command"].startswith("python -m oar_attrib.training.pretrain")
    assert set(card["held_out"]) == set(PRESETS)
    assert all(res["format_rate"] >= 0.90 and res["n"] == 200 for res in card["held_out"].values())
    # The level the default world is set at: right and wrong answers, groups that mix them.
    default = card["held_out"]["default"]
    assert 0.30 <= default["accuracy"] <= 0.85 and default["mixed_group_rate"] >= 0.5
    # The demo and `oar recall` run on `recall`: it must answer some right, and groups mix.
    recall = card["held_out"]["recall"]
    assert recall["accuracy"] >= 0.15 and recall["mixed_group_rate"] >= 0.4


def test_model_card_accuracy_is_what_the_model_measures(bundled):
    model, tokenizer = bundled
    card = json.loads((bundled_path() / "model_card.json").read_text())["held_out"]["default"]
    fresh = evaluate_world(model, tokenizer, "default", n=card["n"], seed=card["seed"])
    assert fresh.accuracy == pytest.approx(card["accuracy"], abs=0.02)
    assert fresh.format_rate == pytest.approx(card["format_rate"], abs=0.02)


def test_loads_offline_and_writes_a_well_formed_trace(bundled, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = bundled
    assert not model.training and tokenizer.pad_token_id is not None
    problems = generate_problems(16, "default", seed=123, split="test")
    ids = generate(model, tokenizer, [p.prompt for p in problems])
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    assert all(row[-1] == tokenizer.eos_token_id for row in ids)
    parsed = [extract_answer(t) for t in texts]
    assert sum(a is not None for a in parsed) >= 14
    assert sum(p.reward(t) for p, t in zip(problems, texts)) >= 3
    # Traces follow the world's grammar: the oracle finds the final quantities in most.
    assert sum(p.oracle(t).complete for p, t in zip(problems, texts)) >= 12


def test_fast_oar_p_equals_reference_on_the_bundled_model(bundled):
    model, tokenizer = bundled
    problems = generate_problems(1, "hard", seed=5, split="test") + generate_problems(2, "default", seed=5, split="test")
    batch, _ = encode_pairs(tokenizer, [p.prompt for p in problems], [p.solution for p in problems])
    assert len(set(batch.lengths.tolist())) > 1  # rows of different lengths, padded
    for probe in ("lt", "as_mean", "as_joint"):
        ref = oar_p_reference(model, batch, probe)
        for budget in (256, 4096):
            fast = oar_p(model, batch, probe=probe, max_batch_tokens=budget)
            torch.testing.assert_close(fast, ref, atol=1e-4, rtol=0)


def test_unknown_model_names_are_clear_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="bundled"):
        bundled_path("arith-huge")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(tmp_path)
