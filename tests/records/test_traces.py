"""The trace record: `build_trace` from an encoded pair, the one shape `attribute`, the run store
hook and the store share; hand-computed metrics, and the undefined ones as None everywhere."""

import pytest
import torch

from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.records.traces import build_trace, scored_positions
from oar_attrib.training.reshaping import TokenWeights
from oar_attrib.training.run_store_hook import trace_record
from models import word_tokenizer


@pytest.fixture(scope="module")
def pairs():
    tok = word_tokenizer()
    # Row 0: 4 reasoning tokens, then "#### 7"; row 1: no answer span.
    _, pairs = encode_pairs(tok, ["what ?", "what ?"], ["x = 3 + #### 7", "x = 3 + 4"], fmt="gsm8k")
    return pairs


def test_build_trace_hand_computed_metrics(pairs):
    pair = pairs[0]
    scored = scored_positions(pair)
    assert scored.tolist() == [True, True, True, True, False, False]
    w = torch.tensor([2.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    trace = build_trace(pair, "what ?", probe="lt", scores={"m": torch.tensor([3.0, 1, 1, 0, 9, 9])},
                        weights={"m": w}, advantage=0.5)
    # ESS over S: (2+1+1+0)^2 / (4 * (4+1+1+0)) = 16/24; top-10% of |A| on S: k = 1 of 4, 1.0 of 2.0.
    assert trace.metrics["m"]["ess_ratio"] == pytest.approx(16 / 24)
    assert trace.metrics["m"]["top10_mass"] == pytest.approx(0.5)
    assert trace.scores["m"] == [3.0, 1.0, 1.0, 0.0, 0.0, 0.0]  # kept on S only
    assert trace.token_advantages["m"] == [1.0, 0.5, 0.5, 0.0, 0.5, 0.5]
    assert trace.tokens == ["x", "=", "3", "+", "####", "7"] and trace.answer_text == "7"
    assert trace.segments == ["reasoning"] * 4 + ["bridge", "answer"]
    assert trace.flags == [] and trace.span_found


def test_an_empty_scored_set_has_undefined_metrics_in_every_producer(pairs):
    pair = pairs[1]
    n = len(pair.response_ids)
    trace = build_trace(pair, "what ?", probe="lt", scores={"m": torch.zeros(n)},
                        weights={"m": torch.ones(n)}, advantage=1.0)
    assert trace.metrics["m"] == {"ess_ratio": None, "top10_mass": None}
    assert trace.flags == ["no_answer_span"]
    # The trainer's hook builds the same record from its TokenWeights.
    tw = TokenWeights(weights=torch.ones(1, n), importances=torch.zeros(1, n),
                      scored=torch.zeros(1, n, dtype=torch.bool), span_found=torch.tensor([False]),
                      attributed=torch.tensor([False]), nonfinite=torch.tensor([False]), pairs=[pair],
                      seconds=0.0)
    record = trace_record(tw, 0, prompt="what ?", reward=0.0, advantage=1.0, step=3, method="m", probe="lt")
    assert record["metrics"]["m"] == {"ess_ratio": None, "top10_mass": None}
    assert record["flags"] == ["no_answer_span"] and record["step"] == 3
    # Apart from the training fields, the record is the trace's dict.
    fields = {k: v for k, v in record.items() if k not in ("reward", "step", "group", "extra", "timings")}
    expected = {k: v for k, v in trace.to_dict().items() if k != "timings"}
    assert fields == expected


def test_non_finite_scores_are_flagged_and_kept_as_nan(pairs):
    pair = pairs[0]
    values = torch.tensor([1.0, float("nan"), 1.0, 1.0, 0.0, 0.0])
    trace = build_trace(pair, "p", probe="lt", scores={"m": values}, weights={"m": torch.ones(6)})
    assert trace.flags == ["non_finite_scores:m"]
    assert trace.scores["m"][0] == 1.0 and trace.scores["m"][1] != trace.scores["m"][1]
    assert trace.metrics["m"] == {"ess_ratio": 1.0} and trace.token_advantages == {}
