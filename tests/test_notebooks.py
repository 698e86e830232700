"""The notebooks run top to bottom on one CPU thread, and their key outputs hold.

Each notebook's last cell prints a JSON summary of its results; the tests parse it from the
executed notebook and check invariants and equivalences (never the bundled model's own
numbers, which change when it is retrained).
"""
import base64
import json
import math
import os
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import oar_attrib as oa
from oar_attrib.attribution import attribute

pytestmark = [pytest.mark.heavy, pytest.mark.notebook, pytest.mark.slow]

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
from shared_data import shared_folder  # ../shared, or the trimmed copy vendored under tests/data
PLOTLY = "application/vnd.plotly.v1+json"
CELL_TIMEOUT = 240
# Variables the notebooks read: the tests set them explicitly, whatever the caller's shell has.
NOTEBOOK_ENV = ("OAR_RUN_STORE", "OAR_SHARED", "OAR_EXPERIMENT_STORE", "OAR_EXPERIMENT", "OAR_EXPERIMENTS",
                "OAR_GRID_SUMMARY", "OAR_ALIGN_RESULTS", "OAR_GRADED_RESULTS", "OAR_ADVANTAGE_RESULTS")


def run_notebook(name: str, **env: str) -> tuple[nbformat.NotebookNode, dict]:
    """Execute notebooks/<name> with cwd notebooks/ on one thread; (executed notebook, summary)."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    kernel_env = {k: v for k, v in os.environ.items() if k not in NOTEBOOK_ENV}
    kernel_env |= {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **env}
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute(env=kernel_env)
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream"
                      and o.name == "stdout")
    return nb, json.loads(printed.strip().splitlines()[-1])


def plotly_outputs(nb) -> list[dict]:
    """The Plotly figures the notebook displayed, as their JSON specs."""
    return [o["data"][PLOTLY] for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "data" in o and PLOTLY in o["data"]]


def plotly_array(value) -> np.ndarray:
    """A data array of a figure's JSON: a list, or Plotly's typed array {dtype, bdata, shape}."""
    if isinstance(value, dict) and "bdata" in value:
        out = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = value.get("shape")
        return out.reshape([int(n) for n in str(shape).split(",")]) if shape else out
    return np.asarray(value)


def finite(x) -> bool:
    return x is not None and math.isfinite(x)


def test_notebooks_are_committed_without_outputs():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == ["01_attribution_recall.ipynb", "02_reshaping.ipynb", "03_your_model.ipynb",
                     "04_steps.ipynb", "05_experiment.ipynb", "06_real_model.ipynb",
                     "07_gradient_alignment.ipynb", "08_graded_oracle.ipynb", "09_advantage_oracle.ipynb"]
    for name in names:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3"
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, name
                # Public API only, and no machine paths.
                assert "oar_attrib." not in cell.source and "from training" not in cell.source
                assert "/work/" not in cell.source and "/home/" not in cell.source


def test_01_attribution_recall(bundled):
    nb, s = run_notebook("01_attribution_recall.ipynb")
    methods = s["methods"]
    # Every method but resample, which samples (`oar recall steps` runs it).
    assert methods == [m for m in oa.available_methods() if m != "resample"] and s["n_scored"] > 0
    assert list(s["table"]) == [*methods, "random expectation"]
    for method, row in s["table"].items():
        for name in ("direct", "chain"):
            assert 0.0 <= row[name] <= 1.0
            assert row[f"{name} lo"] <= row[name] <= row[f"{name} hi"]
        if method in methods:
            # Per-trace rows and a recomputation from the traces give the summary's means.
            assert s["frame_means"][method]["direct"] == pytest.approx(row["direct"], abs=1e-9)
            assert s["frame_means"][method]["chain"] == pytest.approx(row["chain"], abs=1e-9)
            assert s["recomputed_direct"][method] == pytest.approx(row["direct"], abs=1e-9)

    # The same problems through oracle_recall here give the notebook's OAR-P recall.
    model, tok = bundled
    again = oa.oracle_recall(model, tok, n=s["n"], seed=s["seed"], methods=["oar_p"])
    for name in ("direct", "chain"):
        table = s["table"]
        assert again.methods["oar_p"][name]["recall"] == pytest.approx(table["oar_p"][name], abs=1e-9)
        assert again.random[name]["recall"] == pytest.approx(table["random expectation"][name], abs=1e-9)

    heat = s["heatmap"]
    assert heat["rows"] == methods and heat["shape"] == [len(methods), heat["n_tokens"]]
    agreement = np.array(s["agreement"]["matrix"], dtype=float)
    assert s["agreement"]["methods"] == methods
    np.testing.assert_allclose(np.diag(agreement), 1.0)
    np.testing.assert_allclose(agreement, agreement.T, equal_nan=True)
    assert np.all(np.isnan(agreement) | (np.abs(agreement) <= 1 + 1e-12))

    cf = s["counterfactual"]
    assert cf["traces"] and 0 < cf["tested"] <= 10 * len(cf["traces"])
    assert 0 < cf["causal"] <= cf["tested"]  # some causal tokens, so every recall is defined
    assert set(cf["recall"]) == set(methods)
    assert all(finite(r) and 0.0 <= r <= 1.0 for r in cf["recall"].values()), cf["recall"]

    figures = plotly_outputs(nb)
    assert len(figures) == 3
    bars = {t["name"]: t for t in figures[0]["data"] if t["type"] == "bar"}
    for name in ("direct", "chain"):
        assert list(plotly_array(bars[name]["x"])) == methods
        np.testing.assert_allclose(plotly_array(bars[name]["y"]), [s["table"][m][name] for m in methods])
    heatmap = figures[1]["data"][0]
    assert plotly_array(heatmap["z"]).shape == tuple(heat["shape"])


def _training_like_store(path: Path, model, tok) -> dict:
    """A run store in the shape training writes (steps, groups, rewards, one method); returns
    the mean reward per step it holds."""
    problems = oa.generate_problems(6, "default", seed=5, split="test")
    texts = [p.solution if i % 2 == 0 else p.solution.rsplit("####", 1)[0] + f"#### {p.answer + 1}"
             for i, p in enumerate(problems)]
    rewards = [p.reward(t) for p, t in zip(problems, texts)]
    advantages = [r - 0.5 for r in rewards]
    res = attribute(model, tok, [p.prompt for p in problems], texts, ["oar_g"], advantages=advantages)
    steps = [0, 0, 0, 0, 1, 1]
    with oa.Store(path) as store:
        run = store.add_run("notebook-test", model="arith-tiny", config={"oar_method": "oar_g"})
        store.add_traces(run, res, rewards=rewards, steps=steps, groups=[i // 2 for i in range(6)],
                         oracles=[p.oracle(t) for p, t in zip(problems, texts)])
    return {step: np.mean([r for r, s in zip(rewards, steps) if s == step]) for step in (0, 1)}


def _check_reshaping(s: dict) -> None:
    assert s["n_scored_traces"] > 0
    grid = s["grid"]
    assert len(grid) == 6 * 4
    for row in grid:
        assert row["max |mean w - 1|"] <= 1e-5  # mass preservation, every tau and beta
        assert 0.0 < row["min ess_ratio"] <= row["ess_ratio"] <= 1.0 + 1e-6
        assert 0.1 - 1e-6 <= row["top10_mass"] <= 1.0
    by = {(r["tau"], r["beta"]): r for r in grid}
    assert by[(0.0, 0.0)]["ess_ratio"] == pytest.approx(1.0)  # boost-only with no boost: uniform
    # Suppress-only gating (tau = 1) has nothing to boost: beta changes nothing.
    assert len({round(r["ess_ratio"], 9) for (tau, _), r in by.items() if tau == 1.0}) == 1
    # A stronger boost concentrates the weights (tau = 0.4).
    ess = [by[(0.4, beta)]["ess_ratio"] for beta in (0.0, 1.0, 2.0, 4.0)]
    assert ess == sorted(ess, reverse=True)

    credit = s["credit"]
    for name in ("oar_p", "oar_g", "grpo"):
        assert credit[name]["mean w over S"] == pytest.approx(1.0, abs=1e-5)
    assert credit["grpo"]["ess_ratio"] == pytest.approx(1.0)
    # The entropy mask keeps the batch's top 20% (more only on ties at the cut), weight 0 elsewhere.
    assert 0.75 <= credit["entropy top-20%"]["zero weight"] <= 0.8 + 1e-6
    assert all(0.0 < c["ess_ratio"] <= 1.0 + 1e-6 for c in credit.values())
    assert all(s["same_as_attribute"].values())

    mass = s["advantage_mass"]
    for name in ("oar_p", "oar_g", "grpo"):
        assert mass["by_reshaper"][name] == pytest.approx(mass["grpo_total"], rel=1e-4, abs=1e-4)
    assert all(w == pytest.approx(1.0, abs=1e-5) for w in s["weights_curves"].values())


def test_02_reshaping_without_a_run_store():
    nb, s = run_notebook("02_reshaping.ipynb")
    _check_reshaping(s)
    assert s["store"] is None
    shown = [o["data"].get("text/markdown", "") for c in nb.cells if c.cell_type == "code"
             for o in c.outputs if "data" in o]
    assert any("No run store" in text for text in shown)
    assert len(plotly_outputs(nb)) == 3


def test_02_reshaping_reads_a_run_store(tmp_path, bundled):
    expected = _training_like_store(tmp_path / "runs.db", *bundled)
    nb, s = run_notebook("02_reshaping.ipynb", OAR_RUN_STORE=str(tmp_path / "runs.db"))
    _check_reshaping(s)
    store = s["store"]
    assert store["run"] == "notebook-test" and store["n_traces"] == 6 and store["methods"] == ["oar_g"]
    per_step = {row["step"]: row for row in store["per_step"]}
    assert set(per_step) == {0, 1}
    for step, reward in expected.items():
        assert per_step[step]["reward"] == pytest.approx(reward)
        assert 0.0 < per_step[step]["ess_ratio"] <= 1.0
    assert [per_step[0]["traces"], per_step[1]["traces"]] == [4, 2]
    figures = plotly_outputs(nb)
    assert len(figures) == 4 and figures[-1]["data"][0]["type"] == "heatmap"


def test_03_your_model():
    nb, s = run_notebook("03_your_model.ipynb", OAR_SHARED=str(shared_folder()))
    assert s["model"]["loaded_from_folder"] and s["model"]["n_params"] > 0
    spans = {(r["dataset"], r["id"]): r for r in s["spans"]}
    traces = {(r["dataset"], r["id"]): r for r in s["traces"]}
    assert {d for d, _ in spans} == {"gsm8k", "math500"} and set(spans) == set(traces)
    gold = {key: r["gold"].replace(",", "") for key, r in spans.items()}
    for key, row in spans.items():
        assert row["span"] is not None, key
        trace = traces[key]
        assert trace["span found"] and trace["answer text"] == row["span text"]
        assert 0 < trace["scored"] < trace["tokens"]
        assert all(trace[f"{m} s"] > 0 for m in ("oar_p", "oar_g"))
        if key[0] == "gsm8k":
            # The span's text and the decoded answer tokens are the gold answer.
            assert row["matches gold"] and row["span text"].replace(",", "") == gold[key]
            assert trace["answer tokens"].replace(",", "") == gold[key]
        else:
            assert trace["answer text"] in trace["answer tokens"]
    assert s["segments_agree"]
    figures = plotly_outputs(nb)
    assert len(figures) == 2
    line = {t["name"]: t for t in figures[0]["data"]}
    assert set(line) == {"oar_p", "oar_g"}
    by_len = sorted(traces.values(), key=lambda r: r["scored"])
    np.testing.assert_allclose(plotly_array(line["oar_p"]["x"]), [r["scored"] for r in by_len])


def test_04_steps():
    nb, s = run_notebook("04_steps.ipynb", OAR_SHARED=str(shared_folder()))
    assert s["steps_cover"] and s["constant_within_steps"] and s["step_scores_match_attribute"]
    assert s["perturbations"] == {"token": s["n_reasoning"], "step": s["n_steps"]}
    assert 1 < s["n_steps"] < s["n_reasoning"] < s["n_tokens"]
    assert s["ratio"] > 1 and s["step_seconds"] > 0
    (figure,) = plotly_outputs(nb)
    assert len(plotly_array(figure["data"][0]["y"])) == s["n_steps"]


def test_05_experiment_reads_an_experiment_store(tmp_path):
    from oar_attrib.store.experiments import ExperimentStore

    spec = {"steps": 2, "eval_every": 1, "eval_presets": ["default"], "world_seed": 0, "preset": "arith-tiny",
            "base": {"run": {"eval_samples": 2}, "trainer": {}}}
    finals = {"none": [0.50, 0.55, 0.40], "oar_g": [0.60, 0.50, 0.45]}
    with ExperimentStore(tmp_path / "exp.db") as db:
        exp = db.ensure_experiment("grid", spec)
        for method, values in finals.items():
            for seed, final in enumerate(values):
                cell = db.ensure_cell(exp, method, seed, {"method": method})
                for step, acc in ((0, 0.3), (1, 0.35), (2, final)):
                    db.add_points(cell, step, {"eval/accuracy/default": acc, "eval/accuracy_sampled/default": acc})
                for step in (1, 2):
                    db.add_points(cell, step, {"step_seconds": 1.5, "reward": 0.5, "entropy": 0.2,
                                               "oar/ess_ratio": 1.0 if method == "none" else 0.7})
    nb, s = run_notebook("05_experiment.ipynb", OAR_EXPERIMENT_STORE=str(tmp_path / "exp.db"),
                         OAR_EXPERIMENT="grid")
    expected = np.mean(np.subtract(finals["oar_g"], finals["none"]))
    assert s["metric"] == "eval/accuracy_sampled/default"
    assert s["paired"]["oar_g"] == pytest.approx(expected) and s["recomputed"]["oar_g"] == pytest.approx(expected)
    assert s["finals"]["none"] == {str(i): v for i, v in enumerate(finals["none"])}
    assert len(plotly_outputs(nb)) == 2


EXPERIMENT_DOCS = NOTEBOOKS.parent / "docs" / "experiments"


def test_06_real_model_reads_the_committed_results():
    """06 shows the committed real-model results as they are in the files: every calibration
    figure, each model's best mask x probe cell recomputed here from its summary (its interval
    holding its point estimate, recall in [0, 1]), and the SmolLM2 grid summary's differences
    from GRPO with their pooled Holm intervals, its ANOVA, and last ESS / entropy values, read
    by default (no environment override)."""
    grid_file = EXPERIMENT_DOCS / "smollm2-words-grid.json"
    nb, summary = run_notebook("06_real_model.ipynb")
    calibration = json.loads((EXPERIMENT_DOCS / "wordworld" / "calibration.json").read_text())["presets"]
    assert summary["calibration"] == {k: {"accuracy": r["accuracy"], "ci95": r["ci95"]} for k, r in calibration.items()}
    assert summary["in_band"] == sorted(k for k, r in calibration.items() if 0.2 <= r["accuracy"] <= 0.6)
    files = sorted((EXPERIMENT_DOCS / "masks").glob("*.summary.json"))
    assert sorted(summary["best_mask_probe"]) == sorted(f.name.removesuffix(".summary.json") for f in files)
    for path in files:
        cells = json.loads(path.read_text())["cells"]
        top = max(cells, key=lambda c: cells[c]["recall"]["recall"])
        got = summary["best_mask_probe"][path.name.removesuffix(".summary.json")]
        assert got["cell"] == top and got["recall"] == pytest.approx(cells[top]["recall"]["recall"])
        lo, hi = got["ci95"]
        assert 0 <= lo <= got["recall"] <= hi <= 1
        assert got["above_random"] == (lo > cells[top]["expected"]["expected"])
    grid = json.loads(grid_file.read_text())
    assert summary["grid"]["experiment"] == grid["experiment"]
    for method, entry in grid["methods"].items():
        if entry.get("vs_grpo"):
            got = summary["grid"]["paired"][method]
            assert got["mean"] == pytest.approx(entry["vs_grpo"]["mean"]) and got["n"] == entry["vs_grpo"]["n"]
            assert got["lo"] is None if got["n"] < 2 else got["lo"] <= got["mean"] <= got["hi"]
    anova = grid["anova"][grid["metric"]]  # the pooled analysis the notebook reads (issue 34's)
    assert summary["grid"]["anova"] == anova and anova["residual"]["df"] == 10
    assert summary["grid"]["paired"]["oar_g"]["p_holm"] == grid["methods"]["oar_g"]["vs_grpo"]["pooled"]["p_holm"]
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert f"method effect F(5,10) = {anova['method']['F']:.2f}" in printed and "is a hypothesis" in printed
    for key in ("oar/ess_ratio", "entropy"):
        assert summary["grid"]["last_step"][key] == {m: c["mean"][-1] for m, c in grid["curves"][key].items()}
    assert summary["grid"]["last_step"]["oar/ess_ratio"]["none"] == 1.0  # GRPO's weights are uniform
    # calibration, one per mask table, the paired differences, the ESS and entropy curves
    assert len(plotly_outputs(nb)) == 1 + len(files) + 1 + 2


def test_06_real_model_without_a_grid_summary(tmp_path):
    nb, summary = run_notebook("06_real_model.ipynb", OAR_GRID_SUMMARY=str(tmp_path / "missing.json"))
    assert summary["grid"] is None and summary["best_mask_probe"]
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "missing.json is absent" in printed



def test_07_gradient_alignment_recomputes_the_align_statistics(tmp_path):
    """07 recomputes, with its own code, what `summarise` reports for every result folder:
    the paired difference from GRPO per method (its bootstrap interval holding it), the
    bias-or-variance estimates, each contrast against the two half pools and the interval that
    includes g*'s noise (and where its variance came from), and the attenuation; a run without
    half-pool dot products has only the first two. What each reshaping does to GRPO's step (the
    signal and second-moment ratios and the optimal-step gain, with the same resampled batches'
    intervals), delta cos by the sign of the advantage with its t-test and Holm p, and the power
    table. One delta figure, one bias figure."""
    from align_data import random_batches, write_store
    from oar_attrib.reports.align import summarise

    rng = np.random.default_rng(3)
    star = rng.normal(size=30)
    apart = rng.normal(size=30)  # half pools that disagree: g* has noise of its own
    def with_signal(batches, along):  # every gradient has some along g*: GRPO's signal ratio is defined
        return [{m: (pos + 0.6 * along, neg) for m, (pos, neg) in batch.items()} for batch in batches]

    batches = with_signal(random_batches(rng, 12, 30, ("none", "oar_g", "random")), star)
    for batch in batches:  # a method that follows one half pool's noise: its contrasts split
        batch["oar_g"] = (batch["oar_g"][0] + 2 * apart, batch["oar_g"][1])
    write_store(tmp_path / "base", star, batches, pool_halves=(star + apart, star - apart))
    after = rng.normal(size=30)
    write_store(tmp_path / "after-grpo", after, with_signal(random_batches(rng, 12, 30, ("none", "oar_g", "random")), after))
    (tmp_path / "notes").mkdir()  # not a result folder
    nb, summary = run_notebook("07_gradient_alignment.ipynb", OAR_ALIGN_RESULTS=str(tmp_path))
    assert sorted(summary) == ["after-grpo", "base"]
    for name, found in summary.items():
        expected = summarise(tmp_path / name, n_boot=4000)
        assert list(found["methods"]) == list(expected["methods"])
        assert found["attenuation"] == pytest.approx(expected["reference"]["attenuation"], rel=1e-9)
        for method, got in found["methods"].items():
            want = expected["methods"][method]
            assert got["delta_cos"] == pytest.approx(want["delta_cos"]["mean"], abs=1e-12)
            assert got["low"] <= got["delta_cos"] <= got["high"] and got["batches"] == 12
            for key in ("direction_grpo", "noise_to_signal"):  # None: no signal left in the halves
                bias = want["mean_gradient"][key]
                assert got[key] is None if bias is None else got[key] == pytest.approx(bias, rel=1e-9)
            if method != "none":
                check_step_and_signs(got, want, expected["by_sign"]["family"])
            held = want["delta_cos"]
            if name == "after-grpo" or method == "none":  # no half pools recorded; GRPO has no contrast
                assert "half_a" not in got and ("half_pools" not in held or held["half_pools"] is None)
                continue
            for h in ("a", "b"):
                assert got[f"half_{h}"] == pytest.approx(held["half_pools"][h]["mean"], abs=1e-12)
            noisy = held["with_gstar_noise"]
            if method == "oar_g":
                assert got["gstar_sd"] > 0.05 and got["half_a"] > got["half_b"]
            assert got["gstar_sd"] == pytest.approx(noisy["gstar_sd"], rel=0.15, abs=1e-3)
            assert got["gstar_se"] == pytest.approx(noisy["se"], rel=0.15)  # analytic vs bootstrap variance
            assert got["gstar_low"] <= got["delta_cos"] <= got["gstar_high"]
            assert got["gstar_from"] == noisy["gstar_from"]
        for contrast, row in expected["power"]["contrasts"].items():  # the notebook's own t power search
            for effect, n in zip(expected["power"]["effects"], row["batches_needed"]):
                mine = found["power"][contrast][str(effect)]
                assert (mine is None) == (n is None) and (n is None or abs(mine - n) <= 1)  # its lower tail left out
    assert summary["after-grpo"]["attenuation"] == 1.0  # no half pools: both halves are g* itself
    assert summary["base"]["methods"]["none"]["delta_cos"] == 0.0
    assert len(plotly_outputs(nb)) == 2


def check_step_and_signs(got: dict, want: dict, family: int) -> None:
    """The notebook's step ratios and by-sign tests (`got`) against `summarise`'s (`want`): the
    same bootstrap draw (seed 0, 4000 resamples), so the intervals agree too."""
    step = want["step"]
    for mine, theirs in (("S", "signal_ratio"), ("Q", "second_moment_ratio"), ("G", "gain")):
        assert got[mine] == pytest.approx(step[theirs]["value"], rel=1e-9)
    for mine, theirs in (("S", "signal_ratio"), ("G", "gain")):
        assert (got[f"{mine}_low"], got[f"{mine}_high"]) == (pytest.approx(step[theirs]["low"], rel=1e-9),
                                                             pytest.approx(step[theirs]["high"], rel=1e-9))
    for h in ("a", "b"):
        if step["half_pools"]:
            assert got[f"G_vs_half_{h}"] == pytest.approx(step["half_pools"][h]["gain"]["value"], rel=1e-9)
    for part in ("pos", "neg"):
        d = want[part]["delta_cos"]
        assert got[f"delta_cos_{part}"] == pytest.approx(d["mean"], abs=1e-12)
        assert got[f"p_{part}"] == pytest.approx(d["p_t"], rel=1e-9)
        assert got[f"p_holm_{part}"] == pytest.approx(d["p_t_holm"], rel=1e-9) and family == 4


def test_08_graded_oracle_recomputes_the_printed_means_from_the_per_trace_rows(bundled, tmp_path):
    """08 recomputes, with its own code, each method's mean Spearman, AUC, partial Spearman
    (position held fixed) and Spearman with earliness from the per-trace rows of `oar recall
    --sets graded --json`'s output: the means equal the printed ones, each bootstrap interval
    holds its mean; a file without per-trace rows is passed over."""
    from oar_attrib.instruments.graded.recall import graded_recall
    from oar_attrib.world import generate_problems

    model, tok = bundled
    records = [{"prompt": p.prompt, "answer": str(p.answer)} for p in generate_problems(4, "recall", seed=1, split="test")]
    report = graded_recall(model, tok, records, methods=["oar_p", "entropy", "random"], graded_k=2, positions=4,
                           max_new_tokens=96)
    (tmp_path / "tiny.json").write_text(json.dumps(report.as_dict(), allow_nan=False))
    (tmp_path / "older.json").write_text(json.dumps({"methods": {}, "oracle": {}}))  # no per_trace
    nb, summary = run_notebook("08_graded_oracle.ipynb", OAR_GRADED_RESULTS=str(tmp_path))
    assert list(summary) == ["tiny"]
    got = summary["tiny"]
    assert sorted(got) == ["earliest_first", "entropy", "oar_p", "random"]
    for method, row in got.items():
        assert row["traces"] == report.n_scored > 0
        for metric in ("spearman", "auc"):
            printed = report.methods[method][metric]["mean"]
            assert (row[metric] is None) == (not finite(printed))
            if finite(printed):
                assert row[metric] == pytest.approx(printed, abs=1e-12) == row[f"printed_{metric}"]
        if finite(row["spearman_low"]):
            assert row["spearman_low"] <= row["spearman"] <= row["spearman_high"]
        for metric in ("partial_spearman", "position_spearman"):  # position held fixed, and its bias
            printed = report.methods[method][metric]["mean"]
            assert (row[metric] is None) == (not finite(printed))
            if finite(printed):
                assert row[metric] == pytest.approx(printed, abs=1e-12) == row[f"printed_{metric}"]
    assert got["earliest_first"]["position_spearman"] == 1.0 and got["earliest_first"]["partial_spearman"] is None
    held = [(m, row["partial_p_holm_vs_0"]) for m, row in got.items() if row["partial_p_holm_vs_0"] is not None]
    assert held and "earliest_first" not in dict(held) and all(0 <= p <= 1 for _, p in held)
    for metric in ("spearman", "auc"):  # Holm: each adjusted p at least its own, in the raw p's order
        tested = sorted((row[f"{metric}_p"], row[f"{metric}_p_holm"]) for m, row in got.items()
                        if f"{metric}_p" in row)
        assert tested and all(p <= adj <= 1 for p, adj in tested)
        assert [adj for _, adj in tested] == sorted(adj for _, adj in tested)
        assert tested[0][1] == pytest.approx(min(1.0, len(tested) * tested[0][0]))
    assert "random" not in [m for m, row in got.items() if "spearman_p" in row]
    from oar_attrib.analysis.stats import t_test_p  # the reported p: a paired t-test over traces
    rows = [t for t in report.per_trace if t is not None]
    for m, row in got.items():
        if "spearman_p" in row:
            diff = [t[m]["spearman"] - t["random"]["spearman"] for t in rows]
            assert row["spearman_p"] == pytest.approx(t_test_p(diff), nan_ok=True)
    assert len(plotly_outputs(nb)) == 3  # Spearman, AUC, the flip-rate counts


ADVANTAGE_PLAN = {  # a plan's shape (docs/experiments/advantage/replication/plan.json) over the test's methods
    "what": "a plan for the notebook test", "primary": {"alpha": 0.05}, "min_traces": 2,
    "hypotheses": {"H1": {"method": "oar_g", "metric": "signed", "text": "OAR-G's signed Spearman is above 0"},
                   "H2": {"method": "random", "metric": "signed", "text": "random's signed Spearman is above 0"}}}
# The second replication's shape: a hypothesis on the length- and position-controlled coefficient.
PARTIAL_PLAN = {**ADVANTAGE_PLAN, "hypotheses": {
    "H3": {"method": "oar_g", "metric": "signed", "text": "OAR-G's signed Spearman is above 0"},
    "H5": {"method": "oar_g", "metric": "partial.signed", "text": "OAR-G's controlled coefficient is above 0"}}}


def close(got, want) -> None:
    assert (got is None) == (not finite(want)), (got, want)
    assert got is None or got == pytest.approx(want, abs=1e-9)


def holds(row: dict, key: str = "mean") -> None:
    if row["low"] is not None:
        assert row["low"] <= row[key] <= row["high"], row


def check_advantage_summary(got: dict, report: dict) -> None:
    """09's summary of one report against the figures the command printed."""
    assert got["traces"] == report["n_scored"]
    assert sorted(got["methods"]) == sorted(report["methods"])
    rows = [(got["methods"][m], report["methods"][m]) for m in report["methods"]]
    rows += [(got["references"][r], report["reference"][r]) for r in ("earliest_first", "longest_first")]
    for mine, printed in rows:
        for metric in ("signed", "absolute", *(("signed_before_last", "absolute_before_last") if "says" in mine else ())):
            close(mine[metric]["mean"], printed[metric]["mean"])
            assert mine[metric]["n"] == printed[metric]["n"]
            holds(mine[metric])
        for target in ("signed", "absolute"):
            close(mine["partial"][target]["coef"], printed["partial"][target]["coef"])
            close(mine["partial"][target]["p_holm"], printed["partial"][target]["p_holm"])
            assert mine["partial"][target]["traces"] == printed["partial"][target]["traces"]
            holds(mine["partial"][target], "coef")
    for m, printed in report["methods"].items():
        agreement = got["methods"][m]["credit_agreement"]
        close(agreement["mean"], printed["credit_agreement"]["mean"])
        assert agreement["groups"] == printed["credit_agreement"]["groups"] == report["groups"]["credit_defined"]
        holds(agreement)
        # Fewer than 10 units: every figure is too few to read, never resolved.
        assert report["n_scored"] >= 10 or got["methods"][m]["says"]["signed"] == "too few"
        assert agreement["groups"] >= 10 or got["methods"][m]["says"]["credit_agreement"] == "too few"
    for target in ("signed", "absolute"):
        for part in ("all", "before_last"):
            close(got["ceiling"][target][part], report["ceiling"][target][part]["ceiling"])
    assert got["groups"] == {"credit": report["groups"]["credit_defined"], "labelled": report["groups"]["credit"]}


def test_09_advantage_oracle_recomputes_every_figure_from_the_report_rows(bundled, tmp_path):
    """09 recomputes, with its own code, every figure of each advantage report from its rows
    (the notebook asserts each equals the printed one): the signed and absolute Spearman and
    their Holm p, the length- and position-controlled coefficient, the label's ceiling, the
    credit agreement and its count of groups; a replication's verdicts by its plan's rule.
    Its summary matches the report, each interval holds its mean, and a JSON that is no report
    (a plan, a progress count, a report cut short) is passed over."""
    from oar_attrib.analysis.preregistered import verdicts
    from oar_attrib.instruments.advantage.recall import advantage_recall
    from oar_attrib.world import generate_problems

    model, tok = bundled
    # Problems of 3 steps (`recall`) beside problems of 4 (`upstream`): with --min-steps 4 and
    # --label all, some traces are in the family and the others count only for their group's credit.
    problems = [p for pair in zip(generate_problems(4, "recall", seed=1, split="test"),
                                  generate_problems(4, "upstream", seed=1, split="test")) for p in pair]
    records = [{"prompt": p.prompt, "answer": str(p.answer), "problem": p} for p in problems]
    report = advantage_recall(model, tok, records, n=8, methods=["entropy", "oar_g", "random"], continuations=4,
                              margin=0, group_samples=2, max_new_tokens=64, min_steps=4, label="all").as_dict()
    assert 3 <= report["n_scored"] < report["n_labelled"]
    assert any(not t["family"] for t in report["per_trace"])
    (tmp_path / "tiny.json").write_text(json.dumps(report, allow_nan=False))
    (tmp_path / "other.json").write_text(json.dumps({"methods": {}}))  # not a report
    folder = tmp_path / "replication"
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps(ADVANTAGE_PLAN))
    (folder / "progress.json").write_text(json.dumps({"n": 8, "family": report["n_scored"]}))
    (folder / ".chunk.json").write_text(json.dumps(report)[:200])  # a report cut short
    replicated = {**report, "replication": verdicts(ADVANTAGE_PLAN, report)}
    (folder / "replication.json").write_text(json.dumps(replicated, allow_nan=False))
    second = tmp_path / "replication-2"
    second.mkdir()
    (second / "plan.json").write_text(json.dumps(PARTIAL_PLAN))
    again = {**report, "replication": verdicts(PARTIAL_PLAN, report)}
    assert again["replication"]["hypotheses"]["H5"]["mean"] == report["methods"]["oar_g"]["partial"]["signed"]["coef"]
    (second / "replication.json").write_text(json.dumps(again, allow_nan=False))

    nb, summary = run_notebook("09_advantage_oracle.ipynb", OAR_ADVANTAGE_RESULTS=str(tmp_path))
    assert list(summary) == ["tiny", "replication/replication", "replication-2/replication"]
    assert summary["replication-2/replication"]["verdicts"] == {
        h: row["verdict"] for h, row in again["replication"]["hypotheses"].items()}
    for got in summary.values():
        check_advantage_summary(got, report)
    assert summary["tiny"]["exploratory"] and summary["tiny"]["verdicts"] is None
    assert not summary["replication/replication"]["exploratory"]
    assert summary["replication/replication"]["verdicts"] == {
        h: row["verdict"] for h, row in replicated["replication"]["hypotheses"].items()}
    loaded = "".join(o.get("text", "") for o in nb.cells[1].outputs if o.output_type == "stream")
    for name in ("other", "replication/plan", "replication/progress", "replication/.chunk", "replication-2/plan"):
        assert f"{name}.json: not an advantage report, passed over" in loaded
    assert len(plotly_outputs(nb)) == 6  # per report: signed and absolute per method, agreement against cost
