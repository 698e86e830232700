"""A preregistered plan's verdicts: "confirmed" only with a Holm p below alpha, a positive mean
and enough traces; the committed replication plan names what its rule reads."""
import hashlib
import json
from pathlib import Path

import pytest

from oar_attrib.analysis.preregistered import main, verdicts
from oar_attrib.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
PLAN = {"what": "a plan", "min_traces": 42, "primary": {"alpha": 0.05},
        "hypotheses": {"H1": {"method": "a", "metric": "signed", "text": "a above 0"},
                       "H2": {"method": "b", "metric": "signed", "text": "b above 0"}}}


def report(a: dict, b: dict, n_scored: int = 50) -> dict:
    row = {"low": 0.0, "high": 0.5}
    return {"n_scored": n_scored, "methods": {"a": {"signed": {**row, **a}}, "b": {"signed": {**row, **b}}}}


@pytest.mark.parametrize("a, verdict", [
    ({"mean": 0.2, "p_holm": 0.01, "n": 50}, "confirmed"),
    ({"mean": 0.2, "p_holm": 0.06, "n": 50}, "not confirmed"),  # Holm keeps it
    ({"mean": -0.2, "p_holm": 0.01, "n": 50}, "not confirmed"),  # resolved, the other way
    ({"mean": 0.2, "p_holm": 0.01, "n": 41}, "not confirmed"),  # below the plan's traces
    ({"mean": 0.2, "p_holm": None, "n": 50}, "not confirmed")])
def test_the_rule(a, verdict):
    got = verdicts(PLAN, report(a, {"mean": 0.0, "p_holm": 1.0, "n": 50}))
    assert got["hypotheses"]["H1"]["verdict"] == verdict and got["hypotheses"]["H2"]["verdict"] == "not confirmed"
    assert got["traces"] == 50 and got["alpha"] == 0.05


@pytest.mark.parametrize("coef, p_holm, traces, verdict", [
    (0.2, 0.01, 50, "confirmed"), (0.2, 0.2, 50, "not confirmed"), (-0.2, 0.01, 50, "not confirmed"),
    (0.2, 0.01, 41, "not confirmed")])
def test_a_nested_metric_reads_the_coefficient_and_its_traces(coef, p_holm, traces, verdict):
    plan = {**PLAN, "hypotheses": {"H3": {"method": "a", "metric": "partial.signed", "text": "a's partial above 0"}}}
    partial = {"coef": coef, "low": coef - 0.1, "high": coef + 0.1, "p": 0.001, "p_holm": p_holm, "traces": traces}
    got = verdicts(plan, {"n_scored": 50, "methods": {"a": {"partial": {"signed": partial}}}})["hypotheses"]["H3"]
    assert got["verdict"] == verdict and got["mean"] == coef and got["n"] == traces and got["low"] == coef - 0.1
    with pytest.raises(InputError, match="no partial.signed of a"):
        verdicts(plan, {"n_scored": 1, "methods": {"a": {"partial": {}}}})


def test_a_report_without_the_figure_is_refused():
    with pytest.raises(InputError, match="no signed of a"):
        verdicts(PLAN, {"n_scored": 1, "methods": {}})


def test_the_command_writes_the_verdicts_into_the_report(tmp_path, capsys):
    plan, out = tmp_path / "plan.json", tmp_path / "report.json"
    plan.write_text(json.dumps(PLAN))
    out.write_text(json.dumps(report({"mean": 0.2, "p_holm": 0.01, "n": 50}, {"mean": 0.1, "p_holm": 0.2, "n": 50})))
    assert main([str(plan), str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["replication"]["hypotheses"]["H1"]["verdict"] == "confirmed"
    assert written["methods"]["a"]["signed"]["mean"] == 0.2  # the report itself unchanged
    assert "H1 (a, signed): confirmed" in capsys.readouterr().out


def test_the_committed_replication_plan_is_one_the_rule_reads():
    plan = json.loads((ROOT / "docs/experiments/advantage/replication/plan.json").read_text())
    assert plan["primary"]["family"] == ["oar_p_step", "oar_p_hier", "oar_p", "oar_g", "entropy", "random"]
    assert {h["method"] for h in plan["hypotheses"].values()} <= set(plan["primary"]["family"])
    assert all(h["metric"] == "signed" for h in plan["hypotheses"].values())
    assert plan["min_traces"] == 42 and plan["primary"]["alpha"] == 0.05
    run = (ROOT / "docs/experiments/advantage/replication/run.sh").read_text()
    for method in plan["primary"]["family"]:
        assert method in run  # the run scores the whole family


def test_the_second_replication_plan_is_one_the_rule_reads():
    folder = ROOT / "docs/experiments/advantage/replication-2"
    plan = json.loads((folder / "plan.json").read_text())
    assert plan["primary"]["family"] == ["oar_p", "oar_g", "oar_p_step", "random"]
    assert {h["method"] for h in plan["hypotheses"].values()} == {"oar_p", "oar_g"}
    assert {h["metric"] for h in plan["hypotheses"].values()} == {"signed", "partial.signed"}
    assert plan["min_traces"] == 30 and plan["primary"]["alpha"] == 0.05
    assert hashlib.sha256((folder / "questions.jsonl").read_bytes()).hexdigest() == plan["data"]["sha256"]
    run = (folder / "run.sh").read_text()
    assert "LEAST=30" in run and "WANT=${1:-46}" in run and "--label scored" in run and "--seed 3" in run
    for method in plan["primary"]["family"]:
        assert method in run  # the run scores the whole family
    # the planned verdicts are read from a report of the shape the analysis writes
    row = {"mean": 0.2, "low": 0.1, "high": 0.3, "p_holm": 0.01, "n": 46}
    partial = {"coef": 0.2, "low": 0.1, "high": 0.3, "p_holm": 0.01, "traces": 46}
    methods = {m: {"signed": row, "partial": {"signed": partial}} for m in plan["primary"]["family"]}
    got = verdicts(plan, {"n_scored": 46, "methods": methods})["hypotheses"]
    assert sorted(got) == ["H3", "H4", "H5", "H6"] and {h["verdict"] for h in got.values()} == {"confirmed"}
