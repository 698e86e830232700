"""`oar recall advantage`: the JSON's last line carries, per method, the within-trace Spearman
with the signed and the absolute label (mean pooling), the length- and position-controlled
coefficient, the credit agreement with its number of groups, the label's ceiling, the settings
record and the reading; the text report starts with the ceiling, ends in a reading in words
(verdicts) and shows no Python reprs; bad knobs are one line."""
import json

import pytest

from oar_attrib.cli import main

# One group of 2 traces, 2 continuations a boundary, the two cheapest methods: seconds, not minutes.
SMALL = ["recall", "advantage", "--model", "arith-tiny", "--n", "2", "--group-samples", "2",
         "--continuations", "2", "--methods", "entropy", "random", "--max-new-tokens", "48", "--no-progress"]


def test_json_and_text_reports(capsys, tmp_path):
    cache = ["--cf-cache", str(tmp_path / "cache.jsonl")]
    assert main(SMALL + cache + ["--json"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    report = json.loads(last)
    for method in ("entropy", "random"):
        row = report["methods"][method]
        for target in ("signed", "absolute"):
            stats = row[target]
            assert {"mean", "low", "high", "p_holm", "undefined", "n", "too_few"} <= set(stats)
            assert stats["pooling"] == "mean" and stats["too_few"]  # 2 traces: too few to read
            if stats["n"] >= 2:
                assert -1 <= stats["low"] <= stats["mean"] <= stats["high"] <= 1
            assert {"coef", "low", "high", "p", "traces", "controls"} <= set(row["partial"][target])
        assert row["credit_agreement"]["groups"] == row["credit_agreement"]["n"] <= 1
    assert set(report["ceiling"]) == {"signed", "absolute"}
    assert {"r", "spearman_brown", "ceiling", "traces"} <= set(report["ceiling"]["signed"]["before_last"])
    assert {"r", "spearman_brown"} <= set(report["reliability"])
    assert 0 <= report["positive_control"]["chain"]["mean"] <= 1
    assert report["n_labelled"] == report["n"] == 2 and report["groups"]["credit"] == 1
    assert report["record"]["model"]["name"] == "arith-tiny" and report["record"]["advantage"]["continuations"] == 2
    assert sorted(report["record"]["methods"]) == ["entropy", "random"]
    assert report["reading"][0].startswith("The signed label's ceiling") and "Reading:" in report["reading"]
    traces = report["ceiling"]["signed"]["all"]["traces"]  # below 10: the ceiling is not read either
    assert f"over {traces} traces, too few to read" in report["reading"][0]
    assert main(SMALL + cache) == 0  # the text report, from the cache
    text = capsys.readouterr().out
    lines = text.strip().splitlines()
    assert lines[0].startswith("label ceiling: sign(A)*dV")
    assert "Reading:" in lines and lines[-1].startswith("Next: oar recall")  # verdicts.reading's block
    assert any(line.startswith("  random: too few to read") for line in lines)  # 2 traces: never resolved
    assert lines[lines.index("Reading:") - 1] == report["reading"][0]  # the JSON's reading is the text's
    assert "{" not in text and "[" not in text.replace(" [", "")  # intervals only, no reprs


def test_bad_knobs_are_one_line(capsys):
    assert main(SMALL + ["--continuations", "0"]) == 2
    assert "--continuations must be an integer from 1" in capsys.readouterr().err
    assert main(SMALL + ["--group-samples", "1"]) == 2
    assert "at least 2 answers" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # advantage scores steps itself: the parser refuses it
        main(SMALL + ["--granularity", "step"])
    assert exit_.value.code == 2


def test_a_group_with_no_trace_long_enough_is_skipped_not_an_error(capsys, tmp_path):
    """Every trace below --min-steps: no trace is in the within-trace figures, and the report
    says so; with --label all (the default) the group still counts for credit agreement, with
    --label scored nothing is labelled."""
    argv = SMALL + ["--min-steps", "99", "--cf-cache", str(tmp_path / "c.jsonl"), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["n_scored"] == 0 and report["skipped"]["few_steps"] + report["skipped"]["no_steps"] == 2
    assert len(report["per_group"]) == 1 and report["n_labelled"] == 2
    assert main(argv + ["--label", "scored"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["per_group"] == [] and report["n_labelled"] == 0
