"""The public entry point `attribute`, its result type, the recall report and the CLI."""
import json

import numpy as np
import pytest
import torch

from oar_attrib import cli
from oar_attrib.attribution import AttributionBatch, attribute, compute_weights
from oar_attrib.errors import InputError, TokenizerError, UnknownNameError
from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.methods import available_methods, get_method
from oar_attrib.models import random_qwen2
from oar_attrib.instruments.world.recall import EXPECTED, oracle_token_mask, summarise, trace_recall
from oar_attrib.world import generate_problems
from oar_attrib.world.tokenizer import build_tokenizer
from models import world_policy

FAST = ["oar_p", "oar_g", "entropy", "grail", "random"]


@pytest.fixture(scope="module")
def problems():
    return generate_problems(40, "default", seed=3, filler_rate=0.5)


@pytest.fixture(scope="module")
def tokenizer(problems):
    return build_tokenizer([p.prompt + p.solution for p in problems], 280)


@pytest.fixture(scope="module")
def model(tokenizer):
    return world_policy(tokenizer)


@pytest.fixture(scope="module")
def traces(model, tokenizer, problems):
    texts = [p.solution for p in problems[:4]] + ["no answer here, just steps a=1+2=3."]
    prompts = [p.prompt for p in problems[:5]]
    return attribute(model, tokenizer, prompts, texts, FAST, advantages=[1.0, -0.5, 0.25, 2.0, 1.0],
                     batch_size=3)


def test_lists_align_and_segments_are_respected(traces):
    for t in traces[:4]:
        n = len(t.token_ids)
        assert t.span_found and not t.flags
        assert "".join(t.tokens) == t.response
        scored = np.array(t.scored)
        assert scored.any() and t.segments.count("answer") >= 1
        answer = np.array(t.segments) == "answer"
        for method in FAST:
            s, w = np.array(t.scores[method]), np.array(t.weights[method])
            assert s.shape == w.shape == (n,)
            assert (s[~scored] == 0).all() and (s[scored] >= 0).all()
            if method == "entropy":  # the 80/20 reshaper: 1 on the top 20% of the response, else 0
                assert set(w) <= {0.0, 1.0}
            elif method == "grail":  # published GRAIL: the answer at the ceiling, no renormalisation
                assert (w[answer] == 5.0).all() and (w[~scored & ~answer] == 1).all()
            else:
                assert (w[~scored] == 1).all()
                assert w[scored].mean() == pytest.approx(1.0, abs=1e-5)


def test_scores_equal_the_registered_method_on_the_same_batch(traces, model, tokenizer, problems):
    batch, pairs = encode_pairs(tokenizer, [p.prompt for p in problems[:3]], [p.solution for p in problems[:3]])
    direct = get_method("oar_p")(model, batch, probe="as_mean")
    for row, pair in enumerate(pairs):
        expected = direct[row, pair.response_start : pair.length]
        np.testing.assert_allclose(traces[row].scores["oar_p"], expected.numpy(), rtol=1e-5, atol=1e-7)
        weights = compute_weights("oar_p", expected[None], batch.scored_mask[row, pair.response_start : pair.length][None])
        np.testing.assert_allclose(traces[row].weights["oar_p"], weights[0].numpy(), rtol=1e-5)


def test_token_advantages_are_advantage_times_weight(traces):
    for t in traces[:4]:
        for method in FAST:
            np.testing.assert_allclose(t.token_advantages[method], t.advantage * np.array(t.weights[method]), rtol=1e-6)
            assert 0.0 < t.metrics[method]["top10_mass"] <= 1.0
            assert 0.0 < t.metrics[method]["ess_ratio"] <= 1.0


def test_no_answer_span_is_flagged_and_gets_weight_one(traces):
    t = traces[4]
    assert not t.span_found and t.flags == ["no_answer_span"]
    for method in FAST:
        assert set(t.scores[method]) == {0.0}
        # the 80/20 entropy reshaper weighs every response token of every row, span or not
        assert set(t.weights[method]) <= ({0.0, 1.0} if method == "entropy" else {1.0})


def test_json_round_trip_and_frame(traces):
    back = AttributionBatch.from_json(traces.to_json())
    assert back == traces
    frame = traces.to_frame()
    assert len(frame) == sum(len(t.token_ids) for t in traces)
    assert {"token", "segment", "scored", "score_oar_p", "weight_oar_g", "advantage_grail", "trace"} <= set(frame)


def test_bad_names_list_the_known_ones(model, tokenizer, problems):
    p = problems[0]
    with pytest.raises(UnknownNameError, match="oar_p"):
        attribute(model, tokenizer, p.prompt, p.solution, ["oar_x"])
    with pytest.raises(UnknownNameError, match="as_mean"):
        attribute(model, tokenizer, p.prompt, p.solution, ["oar_p"], probe="median")
    assert set(FAST) | {"ig"} <= set(available_methods())


def test_mismatched_inputs_and_missing_pad_token(model, tokenizer, problems):
    p = problems[0]
    with pytest.raises(InputError, match="2 prompts but 1 responses"):
        attribute(model, tokenizer, [p.prompt, p.prompt], [p.solution])
    no_pad = build_tokenizer([p.prompt + p.solution], 280)
    no_pad.pad_token = None
    with pytest.raises(TokenizerError, match="pad_token"):
        attribute(model, no_pad, p.prompt, p.solution)


def test_too_long_response_is_a_clear_error(model, tokenizer, problems):
    p = problems[0]
    with pytest.raises(InputError, match="max_position_embeddings=256"):
        attribute(model, tokenizer, p.prompt, p.solution * 12, ["oar_p"])


def test_nan_logits_are_flagged_not_gated(tokenizer, problems):
    broken = random_qwen2(len(tokenizer), layers=1, heads=2, kv_heads=2, tie=False)
    with torch.no_grad():
        broken.lm_head.weight.fill_(float("nan"))
    p = problems[0]
    (t,) = attribute(broken, tokenizer, p.prompt, p.solution, ["oar_p", "entropy"])
    assert "non_finite_scores:oar_p" in t.flags and "non_finite_scores:entropy" in t.flags
    assert set(t.weights["oar_p"]) == {1.0}


def test_oracle_token_mask_and_recall_of_a_perfect_and_a_reversed_ranking(traces, problems):
    t, problem = traces[0], problems[0]
    oracle = problem.oracle(t.response)
    direct = oracle_token_mask(t.offsets, oracle.direct)
    picked = "".join(tok for tok, d in zip(t.tokens, direct) if d).replace(" ", "")
    u, _, v = problem.target
    assert sorted(picked) == sorted(f"{problem.values[u]}{problem.values[v]}")
    scored = np.array(t.scored)
    perfect = t.__class__.from_dict({**t.to_dict(), "scores": {"best": (direct & scored).astype(float).tolist(),
                                                               "worst": (~direct & scored).astype(float).tolist()},
                                     "weights": {"best": [1.0] * len(t.tokens), "worst": [1.0] * len(t.tokens)}})
    res = trace_recall(perfect, oracle)
    assert res["best"]["direct"]["recall"] == 1.0 and res["best"]["direct"]["ap"] == 1.0
    assert res["worst"]["direct"]["recall"] == 0.0
    expected = (direct & scored).sum() / scored.sum()
    assert res[EXPECTED]["direct"] == pytest.approx(expected)
    summary, rand = summarise([res, res], ["best", "worst"])
    assert summary["best"]["direct"]["recall"] == 1.0 and summary["best"]["direct"]["ci95"] == [1.0, 1.0]
    assert rand["direct"]["recall"] == pytest.approx(expected)


def test_cli_attribute_reports_bad_lines_and_writes_good_ones(tmp_path, model, tokenizer, problems, capsys):
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    p = problems[0]
    lines = [json.dumps({"prompt": p.prompt, "response": p.solution}), "{not json", json.dumps({"prompt": 3}),
             "", json.dumps({"prompt": p.prompt, "response": "no answer"})]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    code = cli.main(["attribute", "--model", str(folder), "--input", str(src), "--out", str(out),
                     "--methods", "oar_p", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2  # some lines were skipped; the good ones are written
    assert ":2: skipped (not_json): not JSON" in err and ":3: skipped (fields): needs a 'prompt'" in err
    assert "2 bad lines skipped (fields 1, not_json 1)" in err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in rows] == [1, 5]
    assert rows[0]["span_found"] and not rows[1]["span_found"]


def test_cli_attribute_accepts_exactly_the_registered_methods(tmp_path, model, tokenizer, problems, capsys):
    from oar_attrib.methods import register_method, unregister_method

    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": problems[0].prompt, "response": problems[0].solution}) + "\n")
    out = tmp_path / "out.jsonl"
    argv = ["attribute", "--model", str(folder), "--input", str(src), "--out", str(out),
            "--methods", "test_ones", "--no-progress"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)  # not registered yet: argparse refuses it, naming the known methods
    assert exit_.value.code == 2 and "unknown importance method 'test_ones'" in capsys.readouterr().err
    register_method("test_ones")(lambda model, batch, **kw: (batch.scored_mask & batch.has_answer[:, None]).float())
    try:
        assert cli.main(argv) == 0
    finally:
        unregister_method("test_ones")
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    scored = [s == "reasoning" for s in row["segments"]]
    assert row["scores"]["test_ones"] == [1.0 if s else 0.0 for s in scored]
    assert row["weights"]["test_ones"] == [1.0] * len(scored)  # equal importances: flat, weight 1


def test_cli_unknown_model_folder_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["eval", "--model", str(tmp_path / "nope"), "--no-progress"]) == 2
    assert "is neither a catalogue model" in capsys.readouterr().err


def test_cli_attribute_into_a_store(tmp_path, model, tokenizer, problems):
    from oar_attrib.store import Store

    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n" for p in problems[:3]))
    db = tmp_path / "runs.db"
    assert cli.main(["attribute", "--model", str(folder), "--input", str(src), "--out", str(db),
                     "--methods", "oar_p", "entropy", "--no-progress"]) == 0
    store = Store(db, readonly=True)
    (run,) = store.runs()
    assert run.n_traces == 3 and set(run.methods) == {"oar_p", "entropy"}
    page, total = store.traces(run.id)
    assert total == 3 and all(row.span_found for row in page)
    first = store.trace(page[0].id).to_attribution()
    expected = json.loads(src.read_text().splitlines()[0])
    assert first.response == expected["response"]


def test_public_api_names_resolve():
    import importlib

    from pathlib import Path

    import oar_attrib
    from oar_attrib.lazy import declared_exports

    homes = declared_exports(Path(oar_attrib.__file__).read_text(encoding="utf-8"), "oar_attrib")
    assert set(homes) == set(oar_attrib.__all__)
    for name in oar_attrib.__all__:
        home = importlib.import_module(homes[name])
        assert getattr(oar_attrib, name) is getattr(home, name), name  # the module's own object
    with pytest.raises(AttributeError):
        oar_attrib.no_such_name


def test_public_attribute_stays_the_function_after_submodules_load():
    # A submodule named like an export would replace the function on the package once imported.
    import importlib

    import oar_attrib as oa

    for name in ("instruments.world.recall", "attribution", "analysis.figures", "cli", "world", "training", "webapp"):
        importlib.import_module(f"oar_attrib.{name}")
    assert callable(oa.attribute) and oa.attribute.__name__ == "attribute"
    clashes = [n for n in oa.__all__ if importlib.util.find_spec(f"oar_attrib.{n}") is not None]
    assert clashes == [], f"exports shadowed by submodules of the same name: {clashes}"


def test_cli_attribute_progress_counts_traces_and_positions(tmp_path, model, tokenizer, problems, capsys):
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    lines = [json.dumps({"prompt": p.prompt, "response": p.solution}) for p in problems[:5]]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines[:3] + ["{not json", ""] + lines[3:]) + "\n")
    out = tmp_path / "out.jsonl"
    cli.main(["attribute", "--model", str(folder), "--input", str(src), "--out", str(out),
              "--methods", "oar_p", "--batch-size", "2"])
    err = capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    positions = sum(sum(s == "reasoning" for s in r["segments"]) for r in rows if r["span_found"])
    assert len(rows) == 5 and positions > 0
    # 6 non-blank lines: 5 traces and a skipped one; the bar ends at the last one (what it
    # shows in between depends on tqdm's refresh interval), with a time estimate.
    last_bar = [part for part in err.split("\r") if part.startswith("attribute:")][-1]
    assert "6.0/6 traces [" in last_bar and "<00:00" in last_bar and f"positions={positions}" in last_bar and "trace" in last_bar


def test_python_attribute_progress_counts_traces(model, tokenizer, problems, capsys):
    res = attribute(model, tokenizer, [p.prompt for p in problems[:5]], [p.solution for p in problems[:5]],
                    ["entropy"], batch_size=2, progress=True)
    err = capsys.readouterr().err
    assert "5/5 [" in err and f"positions={sum(sum(t.scored) for t in res)}" in err


def test_old_spellings_are_gone_and_the_new_ones_work(model, tokenizer, problems, tmp_path, capsys):
    """0.1.0 removed fmt=, pattern= and --format (CHANGELOG.md): the old names are refused."""
    p = problems[0]
    new = attribute(model, tokenizer, p.prompt, p.solution, ["entropy"], answer_format="gsm8k")
    assert new[0].answer_span is not None and new[0].answer_text == str(p.answer)
    for old in ("fmt", "pattern"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
            attribute(model, tokenizer, p.prompt, p.solution, ["entropy"], **{old: "gsm8k"})
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n")
    out = tmp_path / "out.jsonl"
    assert cli.main(["attribute", "--model", str(folder), "--input", str(src), "--out", str(out),
                     "--methods", "entropy", "--answer-format", "gsm8k", "--no-progress"]) == 0
    assert json.loads(out.read_text())["answer_span"] == list(new[0].answer_span)
    with pytest.raises(SystemExit):
        cli.main(["attribute", "--model", str(folder), "--input", str(src), "--out", str(tmp_path / "o2.jsonl"),
                  "--methods", "entropy", "--format", "gsm8k"])
    assert "unrecognized arguments: --format" in capsys.readouterr().err


def test_the_api_signature_shows_its_defaults_and_types():
    """The API page is built from the signature: `step_unit` reads "auto" (not a constant's
    name) and the model and tokenizer are typed."""
    import inspect

    from oar_attrib.inputs.steps import AUTO

    params = inspect.signature(attribute).parameters
    assert params["step_unit"].default == AUTO == "auto"
    assert params["model"].annotation == "PreTrainedModel"
    assert params["tokenizer"].annotation == "PreTrainedTokenizerBase"
