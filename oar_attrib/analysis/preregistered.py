"""A preregistered plan's verdicts, applied to the report its analysis printed.

A plan (a JSON file committed before its data) names its hypotheses as {"method", "metric",
"text"}: the method's `metric` above 0, either a mean over traces (`signed`: the signed
Spearman) or the length- and position-controlled coefficient (`partial.signed`: its `coef`,
over its `traces`). Its rule (`confirmed_when`): a hypothesis is "confirmed" when that
figure's Holm-adjusted p is below the plan's alpha, the figure is above 0 and it stands on at
least `min_traces` traces; "not confirmed" otherwise, whatever the direction. `python -m
oar_attrib.analysis.preregistered PLAN REPORT` writes the verdicts into the report (its
`replication` block), nothing else of it changed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import InputError
from ..files import write_file


def _figure(report: dict, method: str, metric: str) -> dict | None:
    """The hypothesis's figure as {"mean", "low", "high", "p_holm", "n"}: a method's metric, or
    a nested one (`partial.signed`, whose coefficient and trace count stand for mean and n)."""
    row = report.get("methods", {}).get(method) or {}
    for key in metric.split("."):
        row = row.get(key) if isinstance(row, dict) else None
    if row is None or "coef" not in row:
        return row
    return {"mean": row["coef"], "low": row["low"], "high": row["high"], "p_holm": row["p_holm"],
            "n": row["traces"]}


def verdicts(plan: dict, report: dict) -> dict:
    """{"plan": the plan's `what`, "alpha", "min_traces", "traces": the family's count,
    "hypotheses": {name: {"text", "method", "metric", "mean", "p_holm", "n", "verdict"}}}."""
    alpha, least = plan["primary"]["alpha"], plan["min_traces"]
    out = {}
    for name, h in plan["hypotheses"].items():
        row = _figure(report, h["method"], h["metric"])
        if row is None:
            raise InputError(f"the report has no {h['metric']} of {h['method']} ({name} of the plan): run the "
                             "plan's analysis command")
        held = (row["p_holm"] is not None and row["p_holm"] < alpha and row["mean"] is not None and row["mean"] > 0
                and row["n"] >= least)
        out[name] = {"text": h["text"], "method": h["method"], "metric": h["metric"], "mean": row["mean"],
                     "low": row["low"], "high": row["high"], "p_holm": row["p_holm"], "n": row["n"],
                     "verdict": "confirmed" if held else "not confirmed"}
    return {"plan": plan["what"], "alpha": alpha, "min_traces": least, "traces": report["n_scored"],
            "hypotheses": out}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m oar_attrib.analysis.preregistered PLAN.json REPORT.json", file=sys.stderr)
        return 2
    plan, path = json.loads(Path(argv[0]).read_text()), Path(argv[1])
    report = json.loads(path.read_text())
    report["replication"] = verdicts(plan, report)
    write_file(path, json.dumps(report, allow_nan=False) + "\n")
    for name, h in report["replication"]["hypotheses"].items():
        print(f"{name} ({h['method']}, {h['metric']}): {h['verdict']} ({h['mean']:+.3f}, Holm p {h['p_holm']:.3g}, "
              f"{h['n']} traces)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
