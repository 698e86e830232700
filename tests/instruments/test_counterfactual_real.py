"""The counterfactual oracle on a real model and data set (`instruments.data.recall`,
`oar recall data`): the batched oracle equals a one-row-at-a-time reference on SmolLM2,
recall is computed for every method beside the random expectation and resumes from its cache,
and bad input is one line before any model loads."""
import json
import re

import numpy as np
import pytest
import torch

from oar_attrib.instruments.data import recall as cfr
from oar_attrib.instruments.data.oracle import choose_positions, counterfactual_oracle
from oar_attrib.errors import InputError
from oar_attrib.models.generation import stop_ids

QUESTION = "Mia has 14 stickers. Mia buys 6 more stickers. How many stickers does Mia have now?"
RIGHT = "Mia has 14 + 6 = 20 stickers.\nThe answer is 20."
WRONG = "Mia has 14 + 6 = 21 stickers.\nThe answer is 21."


def _reference(model, tok, prompt_ids, response_ids, positions, max_new_tokens):
    """One row at a time, no padding: replace, regenerate greedily, compare the answers."""
    original = cfr.answer_key(tok.decode(response_ids, skip_special_tokens=True))
    eos = stop_ids(model, tok)
    out = {}
    for t in positions:
        prefix = list(response_ids[:t]) + [tok.pad_token_id]
        ids = torch.tensor([list(prompt_ids) + prefix])
        with torch.no_grad():
            new = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=tok.pad_token_id,
                                 top_k=None, top_p=None, temperature=None)[0, ids.shape[1]:].tolist()
        cut = next((i for i, x in enumerate(new) if x in eos), len(new))
        out[t] = cfr.answer_key(tok.decode(prefix + new[:cut], skip_special_tokens=True)) != original
    return out


def test_the_batched_oracle_equals_the_one_row_reference(smollm2):
    model, tok = smollm2
    prompt_ids = cfr.encode_prompt_ids(tok, cfr.record_prompt({"question": QUESTION}))
    response_ids = tok(RIGHT, add_special_tokens=False).input_ids
    reasoning = len(tok(RIGHT.split("\n")[0], add_special_tokens=False).input_ids)
    positions = choose_positions(range(reasoning), 4, seed=0)
    fast = counterfactual_oracle(model, tok, prompt_ids, response_ids, positions, cfr.answer_key,
                                 max_positions=4, batch_size=3, max_new_tokens=len(response_ids) + 4)
    assert sorted(fast) == positions
    assert fast == _reference(model, tok, prompt_ids, response_ids, positions, len(response_ids) + 4)


@pytest.mark.heavy
def test_recall_of_every_method_beside_the_random_expectation_and_a_resumed_run(smollm2, tmp_path, monkeypatch):
    model, tok = smollm2
    records = [{"prompt": cfr.record_prompt({"question": QUESTION}), "response": RIGHT, "answer": "20"},
               {"prompt": cfr.record_prompt({"question": QUESTION}), "response": WRONG, "answer": "20"},
               {"prompt": cfr.record_prompt({"question": QUESTION}), "response": "Mia has many.", "answer": "20"}]
    cache = tmp_path / "cf.jsonl"
    methods = ["oar_p", "random"]
    report = cfr.counterfactual_recall(model, tok, records, methods=methods, cf_positions=3, cache=cache,
                                       model_name="smollm2-135m")
    assert report.status == ["scored", "scored", "no_answer_span"] and report.correct == [True, False, False]
    assert report.accuracy == pytest.approx(1 / 3)
    lines = [json.loads(x) for x in cache.read_text().splitlines()]
    assert len(lines) == 2 and all(len(x["causal"]) == 3 for x in lines)
    assert report.oracle["positions_tested"] == 6
    assert report.oracle["causal"] == sum(c for x in lines for _, c in x["causal"])
    # The random expectation of a trace is |O| / |tested|, from the oracle the cache holds.
    for res, line in zip(report.per_trace, lines):
        flags = [c for _, c in line["causal"]]
        expected = res["random_expectation"]["counterfactual"]
        assert (np.isnan(expected) and not any(flags)) or expected == pytest.approx(sum(flags) / len(flags))
    assert set(report.methods) == set(methods)
    for stats in report.methods.values():
        cell = stats["counterfactual"]
        assert cell["recall"] is None or (0 <= cell["ci95"][0] <= cell["recall"] <= cell["ci95"][1] <= 1)
    assert set(report.by_outcome) <= {"right", "wrong"}
    # A rerun with the cache regenerates nothing and gives the same summary.
    monkeypatch.setattr(cfr, "counterfactual_oracle", lambda *a, **k: pytest.fail("regenerated"))
    again = cfr.counterfactual_recall(model, tok, records, methods=methods, cf_positions=3, cache=cache,
                                      model_name="smollm2-135m")
    assert again.as_dict() == report.as_dict()


def test_answers_are_compared_by_value():
    assert cfr.answer_key("so $1,200 in all.\nThe answer is $1,200.") == cfr.answer_key("The answer is 1200")
    assert cfr.answer_key("The answer is 12") != cfr.answer_key("The answer is 120")
    assert cfr.answer_key("no answer here") is None


def test_bad_data_is_one_line_before_any_model_loads(tmp_path, capsys):
    from oar_attrib.cli import main

    with pytest.raises(InputError, match="does not exist"):
        cfr.read_records(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "1"}\n{"text": "no question"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: needs `question`"):
        cfr.read_records(bad)
    assert len(cfr.read_records(bad, n=1)) == 1
    assert main(["recall", "data", "--data", str(tmp_path / "missing.jsonl"), "--model", "no-such-model"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["recall", "data", "--data", str(bad), "--n", "1", "--sets", "direct", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "scored at token granularity on --sets counterfactual " in err and len(err.strip().splitlines()) == 1
    assert "wordworld:<preset>" in err  # where the value oracle's sets are scored
    with pytest.raises(InputError, match="value oracle's sets need word-problem records"):
        cfr.counterfactual_recall(None, None, cfr.read_records(bad, n=1), sets=("counterfactual", "upstream"))
    # MATH-500's `problem` field is question text, not a word problem of the world.
    math = [{"problem": "What is 1 + 1?", "answer": "2"}]
    assert cfr.data_sets(math) == ("counterfactual",)
    assert cfr.data_sets(cfr.data_records("wordworld:tiny", 1)) == ("counterfactual", "direct", "upstream", "distractor")


def _marked_tokens(trace, text: str, values: list[str]) -> set[int]:
    """Hand marking: the tokens whose characters overlap a whole-number mention of a value."""
    spans = [(m.start(), m.end()) for v in values for m in re.finditer(rf"(?<![\d.]){v}(?![\d])", text)]
    return {t for t, (a, b) in enumerate(trace.offsets) if any(a < e and s < b for s, e in spans)}


@pytest.mark.heavy
def test_word_problems_are_scored_on_the_value_oracle_beside_the_counterfactual(smollm2, monkeypatch):
    """`wordworld:<preset>` records carry their problem: the model's own text is scored on the
    value oracle's sets (tokens that write the answer's operands, the distractor's value), each
    recall and random expectation equal to a hand count; no regeneration without
    `counterfactual`."""
    model, tok = smollm2
    records = cfr.data_records("wordworld:tiny-distractor", 2, seed=0)
    assert [r["answer"] for r in records] == ["8", "16"] and all(r[cfr.WORD_PROBLEM].question == r["question"] for r in records)
    records[0]["response"] = "Aisha has 5 shells; the shop is 12 meters away. 5 + 3 = 8 shells.\nThe answer is 8."
    records[1]["response"] = "Nina has 9 + 7 = 16 oranges.\nThe answer is 16."
    monkeypatch.setattr(cfr, "counterfactual_oracle", lambda *a, **k: pytest.fail("regenerated"))
    report = cfr.counterfactual_recall(model, tok, records, methods=["random", "entropy"], sets=("direct", "distractor"))
    assert report.status == ["scored", "scored"] and report.correct == [True, True]
    assert report.oracle["sets"] == ["direct", "distractor"] and report.oracle["positions_tested"] == 0
    hand = [{"direct": ["5", "3"], "distractor": ["12"]}, {"direct": ["9", "7"], "distractor": []}]
    for trace, record, res, values in zip(report.traces, records, report.per_trace, hand):
        scored = np.flatnonzero(trace.scored)
        for name, vals in values.items():
            target = _marked_tokens(trace, record["response"], vals) & set(scored.tolist())
            if not target:
                assert np.isnan(res["random_expectation"][name])
                continue
            assert res["random_expectation"][name] == pytest.approx(len(target) / len(scored))
            for method in ("random", "entropy"):
                scores = np.asarray(trace.scores[method])[scored]
                top = scored[np.argsort(-scores, kind="stable")[:len(target)]]
                assert res[method][name]["recall"] == pytest.approx(len(target & set(top.tolist())) / len(target))
    assert len(_marked_tokens(report.traces[0], records[0]["response"], ["5", "3"])) >= 3  # 5 twice, 3 once
