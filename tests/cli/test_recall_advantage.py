"""`oar recall --sets advantage`: the JSON's last line carries, per method, the within-trace
Spearman and the credit agreement (mean, low, high), the label's reliability and the positive
control; the text report ends in a reading in words (verdicts) and shows no Python reprs; bad knobs are one line."""
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
        for metric in ("spearman", "credit_agreement"):
            stats = report["methods"][method][metric]
            assert {"mean", "low", "high", "p_holm", "undefined"} <= set(stats)
            if stats["n"] >= 2:
                assert stats["low"] <= stats["mean"] <= stats["high"]
            else:  # no interval of one trace or group
                assert stats["low"] is None and stats["high"] is None
    assert {"r", "spearman_brown"} <= set(report["reliability"])
    assert 0 <= report["positive_control"]["chain"]["mean"] <= 1
    assert report["n_scored"] + sum(report["skipped"].values()) == report["n"] == 2
    assert main(SMALL + cache) == 0  # the text report, from the cache
    text = capsys.readouterr().out
    lines = text.strip().splitlines()
    assert "Reading:" in lines and lines[-1].startswith("Next: oar recall")  # verdicts.reading's block
    assert any(line.startswith("  random: ") for line in lines)  # a verdict per method
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
    """Every trace below --min-steps: no trace and no group is scored, and the report says so."""
    argv = SMALL + ["--min-steps", "99", "--cf-cache", str(tmp_path / "c.jsonl"), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["n_scored"] == 0 and report["skipped"]["few_steps"] + report["skipped"]["no_steps"] == 2
    assert report["per_group"] == []

