"""`oar experiment`: a real 2-method x 2-seed x 3-step grid, killed between cells and resumed;
the report's paired differences against a recomputation straight from the stored points (two
methods: the pooled interval is the paired t-interval); the per-problem outcomes, gradient norms
and ||delta theta|| it stores; the t quantile against the t table; the web page; bad settings."""
from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from oar_attrib.reports.experiment import CREDIT_KEYS, load_report, paired_difference, summary
from oar_attrib.training import experiment_cli

ROOT = Path(__file__).resolve().parents[2]
# Two-sided 95% t quantiles from a printed t table (df = 1, 2, 3, 4, 9).
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 9: 2.262}
EVAL_KEYS = ["eval/accuracy/default", "eval/accuracy/recall",
             "eval/accuracy_sampled/default", "eval/accuracy_sampled/recall"]


def test_paired_difference_by_hand():
    got = paired_difference({0: 0.5, 1: 0.7, 2: 0.6, 3: 0.9}, {0: 0.4, 1: 0.7, 2: 0.65})
    diffs = [0.1, 0.0, -0.05]  # seed 3 has no baseline: not paired
    sd = statistics.stdev(diffs)
    half = T_TABLE[2] * sd / math.sqrt(3)
    assert got["seeds"] == [0, 1, 2] and (got["wins"], got["ties"], got["losses"]) == (1, 1, 1)
    assert got["mean"] == pytest.approx(statistics.mean(diffs))
    assert (got["lo"], got["hi"]) == pytest.approx((statistics.mean(diffs) - half, statistics.mean(diffs) + half),
                                                   abs=1e-4)
    one = paired_difference({0: 0.5}, {0: 0.25})
    assert one["mean"] == 0.25 and one["lo"] is None  # one seed: no interval


def _grid(tmp_path: Path) -> Path:
    spec = {
        "experiment": {"name": "tiny", "preset": "arith-tiny", "seeds": [0, 1], "steps": 3, "eval_every": 2,
                       "eval_presets": ["default", "recall"], "world_seed": 7,
                       "store": str(tmp_path / "exp.db"), "output_dir": str(tmp_path / "out"),
                       "methods": {"none": {"oar_method": "none"}, "random": {"oar_method": "random"}}},
        "run": {"eval_n": 6, "eval_samples": 2, "world_train_size": 64},
        "trainer": {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 48,
                    "learning_rate": 2.0e-3, "warmup_steps": 0},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _complete_cells(db: Path) -> set[tuple[str, int]]:
    """Cells with a step time at steps 1-3 and every eval key and the reward at step 3 (SQL only)."""
    if not db.exists():
        return set()
    conn = sqlite3.connect(db, timeout=30)
    try:
        rows = conn.execute("SELECT c.method, c.seed, p.step, p.key FROM experiment_points p "
                            "JOIN experiment_cells c ON c.id = p.cell_id").fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return set()
    finally:
        conn.close()
    have: dict = {}
    for method, seed, step, key in rows:
        have.setdefault((method, seed), set()).add((step, key))
    need = {(s, "step_seconds") for s in (1, 2, 3)} | {(3, k) for k in EVAL_KEYS + ["reward"]}
    return {cell for cell, got in have.items() if need <= got}


def _cell_rows(db: Path, method: str, seed: int) -> list:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT p.step, p.key, p.value, c.attempts FROM experiment_points p JOIN experiment_cells c "
                            "ON c.id = p.cell_id WHERE c.method = ? AND c.seed = ? ORDER BY p.step, p.key",
                            (method, seed)).fetchall()
    finally:
        conn.close()


def _command(path: Path, jobs: int) -> list[str]:
    return [sys.executable, "-m", "oar_attrib.training.experiment_cli", "run", "--jobs", str(jobs), str(path)]


@pytest.mark.heavy
@pytest.mark.slow
def test_grid_resumes_after_a_kill_and_its_report_matches_the_stored_points(tmp_path):
    path = _grid(tmp_path)
    db = tmp_path / "exp.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    first = subprocess.Popen(_command(path, 1), cwd=ROOT, env=env, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while not _complete_cells(db) and first.poll() is None and time.time() < deadline:
        time.sleep(0.3)
    os.killpg(first.pid, signal.SIGKILL)  # the runner and the cell it has started since
    first.wait()
    done_before = _complete_cells(db)
    assert done_before == {("none", 0)}, first.stdout.read().decode()[-2000:]
    kept = _cell_rows(db, "none", 0)

    second = subprocess.run(_command(path, 2), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "4 cells, 1 finished, 3 to run" in second.stdout
    assert _complete_cells(db) == {(m, s) for m in ("none", "random") for s in (0, 1)}
    assert _cell_rows(db, "none", 0) == kept  # not re-run: same points, one attempt
    assert kept[0][3] == 1

    # Paired differences recomputed from the stored points with SQL and the statistics module.
    report = load_report(db, "tiny")
    conn = sqlite3.connect(db)
    final = dict(((m, s), v) for m, s, v in conn.execute(
        "SELECT c.method, c.seed, p.value FROM experiment_points p JOIN experiment_cells c ON c.id = p.cell_id "
        "WHERE p.step = 3 AND p.key = 'eval/accuracy_sampled/default'"))
    conn.close()
    diffs = [final[("random", s)] - final[("none", s)] for s in (0, 1)]
    got = report.paired["eval/accuracy_sampled/default"]["random"]
    assert report.metric == "eval/accuracy_sampled/default"
    assert got["diffs"] == pytest.approx(diffs) and got["mean"] == pytest.approx(statistics.mean(diffs))
    half = T_TABLE[1] * statistics.stdev(diffs) / math.sqrt(2)
    assert (got["lo"], got["hi"]) == pytest.approx((statistics.mean(diffs) - half, statistics.mean(diffs) + half),
                                                   abs=1e-3 * max(half, 1e-3))
    assert got["wins"] == sum(d > 0 for d in diffs)
    _check_stored_extras(db, report)
    # Same SFT checkpoint and evaluation set: every cell's step-0 evaluation is the same.
    starts = {tuple(c["mean"][0] for c in report.curves[k].values()) for k in EVAL_KEYS}
    assert all(len(set(values)) == 1 for values in starts)
    assert report.curves["oar/weight_max"]["none"]["mean"] == [1.0, 1.0, 1.0]  # GRPO: uniform weights
    # The committed summary carries the credit curves (ESS, entropy, ...) as the report has them.
    curves = json.loads(json.dumps(summary(report), allow_nan=False))["curves"]
    assert set(curves) == set(CREDIT_KEYS) and curves["entropy"] == report.curves["entropy"]
    assert curves["oar/ess_ratio"]["none"]["mean"] == [1.0, 1.0, 1.0] and curves["reward"]["random"]["steps"] == [1, 2, 3]
    _check_web(db)


def _check_stored_extras(db: Path, report) -> None:
    """Each held-out problem's outcome (its mean is the cell's accuracy), the gradient norm and
    ||theta_t - theta_0|| (0 before the first step, growing) are points of every cell."""
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT c.method, c.seed, p.step, p.key, p.value FROM experiment_points p "
                        "JOIN experiment_cells c ON c.id = p.cell_id").fetchall()
    conn.close()
    points = {(m, s, step, k): v for m, s, step, k, v in rows}
    for method, seed in {(m, s) for m, s, *_ in rows}:
        outcomes = [points[(method, seed, 3, f"eval/problem/default/{i}")] for i in range(6)]
        assert set(outcomes) <= {0.0, 1.0}
        assert sum(outcomes) / 6 == pytest.approx(points[(method, seed, 3, "eval/accuracy/default")])
        assert all(points[(method, seed, s, "grad_norm")] >= 0 for s in (1, 2, 3))
        assert 0 < points[(method, seed, 1, "delta_theta")] <= points[(method, seed, 3, "delta_theta")] * 1.5
    assert set(report.bootstrap["eval/accuracy/default"]) == {"random"}


def _check_web(db: Path) -> None:
    from fastapi.testclient import TestClient

    from oar_attrib.store import Store
    from oar_attrib.webapp.main import create_app

    Store(db).close()
    with TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        assert client.get("/api/experiments").json() == ["tiny"]
        page = client.get("/experiments/tiny")
        assert page.status_code == 200 and 'id="finals"' in page.text
        assert "<td>random</td>" in page.text and "/static/experiment.js" in page.text
        assert client.get("/experiments/missing").status_code == 404
        api = client.get("/api/experiments/tiny").json()
        assert set(api["paired"]["eval/accuracy_sampled/default"]) == {"random"}


def test_bad_settings_exit_2_in_one_line(tmp_path, capsys):
    path = _grid(tmp_path)
    assert experiment_cli.main(["run", str(path), "experiment.sedes=[0]"]) == 2
    assert "unknown experiment setting(s): sedes" in capsys.readouterr().err
    assert experiment_cli.main(["run", str(path), "experiment.methods={oar_g: {oar_method: oar_g}}"]) == 2
    assert "needs 'none'" in capsys.readouterr().err
    assert experiment_cli.main(["run", str(path), "oar_tau=2", "--dry-run"]) == 2
    assert not (tmp_path / "exp.db").exists()  # nothing written for a bad grid


def _synthetic(path: Path, finals: dict[str, list[float]]) -> None:
    """A store with a 2-step experiment 'grid' whose last-step accuracies are `finals`."""
    from oar_attrib.store.experiments import ExperimentStore

    spec = {"steps": 2, "eval_every": 1, "eval_presets": ["default"], "world_seed": 0, "preset": "arith-tiny",
            "base": {"run": {"eval_samples": 2}, "trainer": {}}}
    with ExperimentStore(path) as db:
        exp = db.ensure_experiment("grid", spec)
        for method, values in finals.items():
            for seed, final in enumerate(values):
                cell = db.ensure_cell(exp, method, seed, {"method": method})
                for step, acc in ((0, 0.3), (1, 0.35), (2, final)):
                    db.add_points(cell, step, {"eval/accuracy/default": acc, "eval/accuracy_sampled/default": acc})
                for step in (1, 2):
                    db.add_points(cell, step, {"step_seconds": 1.0 + seed, "reward": 0.5})


def test_report_and_page_of_a_stored_grid_escape_labels(tmp_path):
    from fastapi.testclient import TestClient

    from oar_attrib.reports.experiment import format_report, summary
    from oar_attrib.store import Store
    from oar_attrib.webapp.main import create_app

    evil = "<script>alert(1)</script>"
    finals = {"none": [0.5, 0.6, 0.4], evil: [0.6, 0.6, 0.5]}
    db = tmp_path / "exp.db"
    _synthetic(db, finals)
    report = load_report(db, "grid")
    d = report.paired["eval/accuracy_sampled/default"][evil]
    assert d["diffs"] == pytest.approx([0.1, 0.0, 0.1]) and (d["wins"], d["ties"]) == (2, 1)
    assert report.seconds["none"] == {"step": pytest.approx(2.0), "eval": pytest.approx(float("nan"), nan_ok=True),
                                      "steps": 6}
    assert summary(report)["methods"][evil]["vs_grpo"]["mean"] == pytest.approx(0.2 / 3)
    assert "+0.067" in format_report(report)
    Store(db).close()
    with TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        page = client.get("/experiments/grid").text
        assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert client.get("/experiments").status_code == 200


@pytest.mark.parametrize("path", sorted((ROOT / "docs" / "experiments").glob("*.json")), ids=lambda p: p.name)
def test_committed_summaries_are_consistent(path):
    """Each committed summary's differences from GRPO follow from its own per-seed finals: the
    seed pairs, and the pooled error of the method x seed grid (its residual mean square by
    hand: y - row mean - column mean + grand mean)."""
    from scipy import stats

    data = json.loads(path.read_text())
    methods = data["methods"]
    base = methods["none"]["final"]
    seeds = sorted(set.intersection(*(set(e["final"]) for e in methods.values())), key=int)
    y = np.array([[e["final"][s] for s in seeds] for e in methods.values()])  # (M, S)
    residual = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    df = (y.shape[0] - 1) * (y.shape[1] - 1)
    se = math.sqrt(2 * (residual ** 2).sum() / df / len(seeds))
    assert data["anova"][data["metric"]]["residual"]["df"] == df
    for method, entry in methods.items():
        if method == "none":
            continue
        paired = sorted(set(entry["final"]) & set(base), key=int)
        diffs = [entry["final"][s] - base[s] for s in paired]
        got = entry["vs_grpo"]
        assert got["n"] == len(paired) and got["mean"] == pytest.approx(statistics.mean(diffs))
        assert got["wins"] == sum(d > 0 for d in diffs)
        half = stats.t.ppf(0.975, df) * se
        pooled = got["pooled"]
        assert (pooled["lo95"], pooled["hi95"]) == pytest.approx((got["mean"] - half, got["mean"] + half))
        assert got["lo"] <= pooled["lo95"] and got["hi"] >= pooled["hi95"] and pooled["p_holm"] >= pooled["p"]


@pytest.mark.parametrize("path", sorted((ROOT / "training" / "experiments").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_committed_grid_resolves_to_valid_cells(path):
    """Every grid file in training/experiments/ loads, has GRPO, and each method's cell settings
    validate (`cell_settings` builds the configs) with the grid's steps and seed."""
    from oar_attrib.training.experiment import cell_settings, load

    spec, base = load(path)
    assert spec.name == path.stem and "none" in spec.methods and len(spec.seeds) >= 3
    for method in spec.methods:
        settings = cell_settings(spec, base, method, spec.seeds[0])
        assert settings["trainer"]["max_steps"] == spec.steps
        assert settings["trainer"]["oar_method"] == spec.methods[method]["oar_method"]
