"""Low-precision models: bf16 importances rank like float32 ones, and every command loads the
model in the dtype its `--dtype` names."""
import json

import pytest
import torch

import oar_attrib.models as models_module
from oar_attrib import load_model
from oar_attrib.attribution import attribute
from oar_attrib.cli import main
from oar_attrib.weights.metrics import spearman
from oar_attrib.world import generate_problems


@pytest.fixture(scope="module")
def problems():
    return generate_problems(6, "recall", seed=3, split="test")


@pytest.mark.slow
def test_bf16_ranks_tokens_like_float32_on_the_bundled_model(problems):
    """Spearman agreement of bf16 with float32 over the scored (reasoning) tokens of 6 traces,
    for OAR-P and OAR-G (same seed, so the same noise draw for OAR-G)."""
    prompts, texts = [p.prompt for p in problems], [p.solution for p in problems]
    traces = {}
    for dtype in ("float32", "bfloat16"):
        model, tokenizer = load_model("arith-tiny", dtype=dtype)
        assert model.dtype == getattr(torch, dtype)
        traces[dtype] = attribute(model, tokenizer, prompts, texts, ["oar_p", "oar_g"], seed=0)
    for method in ("oar_p", "oar_g"):
        full, half = [], []
        for a, b in zip(traces["float32"], traces["bfloat16"]):
            scored = [i for i, seg in enumerate(a.segments) if seg == "reasoning"]
            full += [a.scores[method][i] for i in scored]
            half += [b.scores[method][i] for i in scored]
        assert len(full) > 100 and max(full) > 0
        assert full != half  # bf16 really ran in bf16
        assert spearman(full, half) >= 0.9, method


def test_oar_g_default_noise_is_relative_per_row():
    from oar_attrib.methods.oar_g import RELATIVE_NOISE, noise_sigma

    embeds = torch.zeros(2, 4, 3)
    embeds[0] = 2.0  # RMS 2 over the scored positions
    embeds[1, :2] = 0.5
    embeds[1, 2:] = 100.0  # not scored: left out
    scored = torch.tensor([[True] * 4, [True, True, False, False]])
    sigma = noise_sigma(None, embeds.to(torch.bfloat16), scored)
    assert sigma.dtype == torch.float32 and sigma.shape == (2, 1, 1)
    torch.testing.assert_close(sigma.flatten(), torch.tensor([2.0, 0.5]) * RELATIVE_NOISE)
    assert noise_sigma(1e-3, embeds, scored).flatten().tolist() == pytest.approx([1e-3, 1e-3])


@pytest.fixture()
def loads(monkeypatch):
    """Record the dtype of every load_model call, then load as asked."""
    seen = []
    real = models_module.load_model

    def recording(name, device=None, dtype=None):
        seen.append(dtype)
        return real(name, device=device, dtype=dtype)

    monkeypatch.setattr(models_module, "load_model", recording)
    return seen


def test_attribute_recall_and_eval_load_in_the_given_dtype(tmp_path, loads, problems, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n"
                             for p in problems[:2]))
    scores = {}
    for dtype in ("float32", "bfloat16"):
        out = tmp_path / f"{dtype}.jsonl"
        assert main(["attribute", "--input", str(pairs), "--out", str(out), "--methods", "oar_p",
                     "--dtype", dtype, "--max-batch-tokens", "4096", "--no-progress"]) == 0
        scores[dtype] = [json.loads(line)["scores"]["oar_p"] for line in out.read_text().splitlines()]
    assert scores["float32"] != scores["bfloat16"]
    assert main(["recall", "world", "--n", "2", "--methods", "oar_p", "--dtype", "float16", "--json",
                 "--no-progress", "--max-batch-tokens", "4096"]) == 0
    assert main(["eval", "--n", "2", "--dtype", "bfloat16", "--json", "--no-progress"]) == 0
    assert loads == ["float32", "bfloat16", "float16", "bfloat16"]
    capsys.readouterr()


def test_demo_and_web_load_in_the_given_dtype(tmp_path, monkeypatch, loads):
    import oar_attrib.webapp.demo as demo
    import oar_attrib.webapp.demo_fill as demo_fill
    from oar_attrib.store import Store
    from oar_attrib.webapp.main import create_app
    from fastapi.testclient import TestClient

    class Stop(Exception):
        pass

    def stop_after_load(model, tokenizer, config, **kwargs):
        assert model.dtype == torch.float16
        raise Stop

    monkeypatch.setattr(demo_fill, "sample_world", stop_after_load)
    monkeypatch.setattr(demo, "cache_dir", lambda: tmp_path)
    with pytest.raises(Stop):
        main(["demo", "--build-only", "--rebuild", "--dtype", "float16", "--no-progress"])
    assert main(["demo", "--build-only", "--dtype", "float64"]) == 2  # one clear line, exit 2
    path = tmp_path / "empty.db"
    Store(path).close()
    with TestClient(create_app(path, model="arith-tiny", dtype="bfloat16")) as client:
        client.app.state.live_loader.join()
        assert client.app.state.live.model.dtype == torch.bfloat16
    assert loads == ["float16", "bfloat16"]
