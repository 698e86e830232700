"""The mask x probe table: per-cell metrics with known values, scoring only the tested
positions, one trace's row on a tiny model, the summary's intervals, and the script's resume."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from oar_attrib.analysis import mask_probe as mp
from oar_attrib.instruments.data.oracle import counterfactual_oracle
from oar_attrib.instruments.data.recall import answer_key
from oar_attrib.inputs.encoding import encode_pair, pairs_to_batch
from oar_attrib.methods.oar_p import oar_p

from models import tiny_qwen2, word_tokenizer

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "what is 3 + 4 ?"
RESPONSE = "so x = 3 + 4 = 7 so x + 2 = 9 the answer is 9"


@pytest.fixture(scope="module")
def tok():
    return word_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2(seed=1)


def test_a_method_equal_to_the_oracle_gets_recall_and_rho_one():
    causal = np.array([0, 1, 0, 0, 1, 0, 0, 0], bool)
    got = mp.cell_metrics(causal.astype(float) * 3.0, causal)
    assert got == {"recall": 1.0, "spearman": pytest.approx(1.0), "expected": 0.25}
    flipped = mp.cell_metrics(1.0 - causal, causal)
    assert flipped["recall"] == 0.0 and flipped["spearman"] == pytest.approx(-1.0)
    assert np.isnan(mp.cell_metrics(np.arange(8.0), np.zeros(8, bool))["recall"])
    assert np.isnan(mp.cell_metrics(np.arange(8.0), np.ones(8, bool))["spearman"])


def test_random_scores_get_about_the_expectation():
    rng = np.random.default_rng(0)
    causal = np.zeros(16, bool)
    causal[[2, 5, 11]] = True
    rows = [mp.cell_metrics(rng.random(16), causal) for _ in range(4000)]
    assert np.mean([r["recall"] for r in rows]) == pytest.approx(3 / 16, abs=0.01)
    assert np.mean([r["spearman"] for r in rows]) == pytest.approx(0.0, abs=0.01)
    assert mp.cell_metrics(np.ones(16), causal)["recall"] == pytest.approx(3 / 16)  # ties


def row(scores: dict, causal):
    return {"status": "scored", "positions": list(range(len(causal))), "causal": list(causal),
            "metrics": {c: mp.cell_metrics(s, np.array(causal, bool)) for c, s in scores.items()}}


def test_summary_means_intervals_and_table():
    rng = np.random.default_rng(1)
    rows = [{"status": "no_answer_span"}]
    for _ in range(12):
        causal = (rng.random(10) < 0.3).astype(int)
        causal[0] = 1
        rows.append(row({"pad/as_mean": causal * 1.0, "zero/lt": rng.random(10)}, causal))
    summary = mp.summarise_rows(rows, seed=0)
    assert summary["n_traces"] == 13 and summary["n_scored"] == 12
    assert summary["positions_tested"] == 120
    oracle_like = summary["cells"]["pad/as_mean"]
    assert oracle_like["recall"]["recall"] == 1.0 and oracle_like["recall"]["n"] == 12
    for cell in summary["cells"].values():
        for stat in ("recall", "spearman", "expected"):
            lo, hi = cell[stat]["ci95"]
            assert lo <= cell[stat][stat] <= hi
    expected = np.mean([r["metrics"]["zero/lt"]["expected"] for r in rows[1:]])
    assert summary["cells"]["zero/lt"]["expected"]["expected"] == pytest.approx(expected)
    table = mp.markdown_table(summary)
    assert table.splitlines()[0] == "| mask | lt | as_mean |"
    assert "| pad | n/a | 1.00 [1.00, 1.00] (12) |" in table
    assert list(summary["cells"]) == ["pad/as_mean", "zero/lt"]  # TABLE_MASKS order
    # paired: each trace's difference to the reference cell (pad/as_mean), then the mean
    diffs = [r["metrics"]["zero/lt"]["recall"] - 1.0 for r in rows[1:]]
    paired = summary["cells"]["zero/lt"]["minus_reference"]["recall"]
    assert paired["recall"] == pytest.approx(np.mean(diffs)) and paired["n"] == 12
    assert summary["cells"]["pad/as_mean"]["minus_reference"]["recall"]["ci95"] == [0.0, 0.0]
    assert "| pad | n/a | 0.00 [0.00, 0.00] (12) |" in mp.markdown_table(summary, paired=True)


def test_scoring_only_the_tested_positions_changes_no_score(model, tok):
    pair = encode_pair(tok, PROMPT, RESPONSE, chat=False)
    batch = pairs_to_batch([pair], tok.pad_token_id)
    full = oar_p(model, batch, probe="as_mean")[0]
    columns = [pair.response_start + t for t in (0, 3, 7)]
    part = oar_p(model, mp.only_positions(batch, columns), probe="as_mean")[0]
    torch.testing.assert_close(part[columns], full[columns])
    assert part.count_nonzero() <= 3
    with pytest.raises(mp.InputError, match="scored positions"):
        mp.only_positions(batch, [0])  # a prompt position


def test_trace_row_on_a_tiny_model(model, tok):
    masks = mp.usable_masks(tok, ("pad", "eos", "unk", "zero", "delete"))
    assert masks == {"pad": "pad", "eos": tok.eos_token_id, "unk": tok.unk_token_id,
                     "zero": "zero", "delete": "delete"}
    got = mp.trace_row(model, tok, PROMPT, RESPONSE, "9", masks=masks, cf_positions=6, seed=2)
    assert got["status"] == "scored" and len(got["positions"]) == 6
    pair = encode_pair(tok, PROMPT, RESPONSE, chat=False)
    oracle = counterfactual_oracle(model, tok, pair.prompt_ids, pair.response_ids, got["positions"],
                                   answer_key, replacement="resample", seed=3,
                                   max_new_tokens=len(pair.response_ids) + 16)
    assert got["causal"] == [int(oracle[t]) for t in got["positions"]]
    cells = {mp.cell_name(m, p) for m in masks for p in mp.TABLE_PROBES}
    assert set(got["scores"]) | set(got["errors"]) == cells
    batch = pairs_to_batch([pair], tok.pad_token_id)
    full = oar_p(model, batch, probe="lt", mask="zero")[0]
    want = [float(full[pair.response_start + t]) for t in got["positions"]]
    assert got["scores"]["zero/lt"] == pytest.approx(want, rel=1e-5, abs=1e-7)
    # gold == the model's answer: the gold probe is as_joint
    assert got["scores"]["pad/gold"] == got["scores"]["pad/as_joint"]
    assert mp.trace_row(model, tok, PROMPT, "so x = 3", None, masks=masks) == {"status": "no_answer_span"}


def test_step_cells_give_each_tested_token_its_step_score(model, tok):
    from oar_attrib.methods.oar_p_step import oar_p_step

    masks = {"pad": "pad", "mean": "mean"}
    got = mp.trace_row(model, tok, PROMPT, RESPONSE, "9", masks=masks, probes=("as_mean", "gold"),
                       cf_positions=6, seed=2, step=True)
    assert {c for c in got["scores"] if c.endswith("/step")} == {
        "pad/as_mean/step", "mean/as_mean/step", "pad/gold/step", "mean/gold/step"}
    pair = encode_pair(tok, PROMPT, RESPONSE, chat=False)
    full = oar_p_step(model, pairs_to_batch([pair], tok.pad_token_id), probe="as_mean", mask="mean")[0]
    want = [float(full[pair.response_start + t]) for t in got["positions"]]
    assert got["scores"]["mean/as_mean/step"] == pytest.approx(want, rel=1e-5, abs=1e-7)
    summary = mp.summarise_rows([got])
    steps = {"cells": {c: v for c, v in summary["cells"].items() if c.endswith("/step")}}
    assert "| pad | " in mp.markdown_table(steps, step=True)
    assert "| pad | " not in mp.markdown_table(steps)  # the token table reads token cells only


def load_script():
    spec = importlib.util.spec_from_file_location("mask_probe_table", ROOT / "scripts" / "mask_probe_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_resumes_and_skips_done_traces(tmp_path, monkeypatch, model, tok):
    script = load_script()
    calls = []

    def fake_row(model, tok, prompt, text, gold, **kw):
        calls.append(prompt)
        return row({"pad/lt": [1.0, 0.0, 0.5]}, [1, 0, 0])

    monkeypatch.setattr(script, "load_model", lambda name: (model, tok))
    monkeypatch.setattr(script.mp, "trace_row", fake_row)
    monkeypatch.setattr(script, "responses", lambda m, t, records, data, n: ["the answer is 9"] * len(records))
    records = [{"prompt": f"q{i}", "answer": "9"} for i in range(5)]
    monkeypatch.setattr(script, "load_records", lambda data, n, seed: records[:n])
    out = tmp_path / "rows.jsonl"
    argv = ["x", "--out", str(out), "--masks", "pad", "--probes", "lt", "--chunk", "2"]
    monkeypatch.setattr("sys.argv", argv + ["--n", "3"])
    script.main()
    assert calls == ["q0", "q1", "q2"]
    with out.open("a") as f:
        f.write('{"index": 3, "cut off')  # a kill mid-write
    monkeypatch.setattr("sys.argv", argv + ["--n", "5"])
    script.main()
    assert calls == ["q0", "q1", "q2", "q3", "q4"]  # done traces skipped, the cut-off one redone
    summary = json.loads((tmp_path / "rows.summary.json").read_text())
    assert summary["n_scored"] == 5 and summary["cells"]["pad/lt"]["recall"]["recall"] == 1.0
    assert (tmp_path / "rows.md").read_text().count("| pad |") == 4  # recall, rho, each paired
    monkeypatch.setattr("sys.argv", argv + ["--n", "5", "--seed", "1"])
    script.main()  # another configuration is another set of rows
    assert len(calls) == 10
