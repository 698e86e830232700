"""`oar align`: the gradient it measures is the trainer's own, and its store resumes.

The equivalence tests train one real step of OARGRPOTrainer on a tiny random Qwen2 (scripted
rollouts), keep the generation batch TRL produced and the gradient the optimizer was about to
apply, and measure the same batch with align's `method_gradient` on a fresh copy of the
starting policy. The command-line tests run the issue's bar command once (module fixture).
"""
import argparse
import json
import re
import shutil

import numpy as np
import pytest
import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from oar_attrib.training.align import cli as align_cli
from oar_attrib.training.align import gradients, rollouts
from oar_attrib.training.align import run as align_run
from oar_attrib.training.align.gradients import ParamLayout, method_gradient, shared_forward
from oar_attrib.training.align.settings import AlignSettings, MethodChoice, resolve_methods
from oar_attrib.training.errors import AlignError
from models import tiny_trainer


class KeepGradients(TrainerCallback):
    """The flat gradient of every parameter right before the optimizer steps."""

    def __init__(self):
        self.flat = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.flat = torch.cat([p.grad.detach().float().reshape(-1).clone() for p in model.parameters()
                               if p.requires_grad])


def trainer_step(tmp_path, tok, world, monkeypatch, **overrides) -> tuple[dict, torch.Tensor]:
    """(TRL's generation output before reshaping, the gradient the trainer applied) of one
    training step from the seeded tiny policy; no clipping (max_grad_norm=0)."""
    kept = {}
    original = GRPOTrainer._generate_and_score_completions

    def keep(self, inputs):
        output = original(self, inputs)
        kept.update({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in output.items()})
        return output

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", keep)
    trainer = tiny_trainer(tmp_path / "train", tok, world, max_grad_norm=0.0, **overrides)
    callback = KeepGradients()
    trainer.add_callback(callback)
    trainer.train()
    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", original)
    return kept, callback.flat


def measured(tmp_path, tok, world, output, choice: MethodChoice, **overrides) -> gradients.MethodGradient:
    """align's gradient of `output` under `choice`, by a trainer that does no reshaping of its
    own, over a fresh policy built from the same seed."""
    trainer = tiny_trainer(tmp_path / "align", tok, world, max_grad_norm=0.0,
                           **{**overrides, "oar_method": "none"})
    layout = ParamLayout(trainer.model)
    with shared_forward(trainer):
        return method_gradient(trainer, layout, dict(output), choice, gradients.base_settings(trainer))


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("method,loss_type", [("oar_g", "dapo"), ("none", "dapo"), ("oar_p", "grpo")])
def test_measured_gradient_is_the_gradient_the_trainer_applies(tmp_path, tok, world, monkeypatch,
                                                               method, loss_type):
    output, applied = trainer_step(tmp_path, tok, world, monkeypatch, oar_method=method, loss_type=loss_type)
    assert (output["advantages"] > 0).any() and (output["advantages"] < 0).any()
    g = measured(tmp_path, tok, world, output, MethodChoice(method, method), loss_type=loss_type)
    assert relative(g.all, applied) < 1e-5
    assert g.pos.norm() > 0 and g.neg.norm() > 0 and relative(g.pos, applied) > 1e-2  # two real halves


def test_row_halves_equal_zeroed_advantage_halves(tmp_path, tok, world, monkeypatch):
    """The dapo fast path (each half's rows alone) gives the halves of the zeroed-advantage loss."""
    output, _ = trainer_step(tmp_path, tok, world, monkeypatch, oar_method="none")
    fast = measured(tmp_path, tok, world, output, MethodChoice("random", "random"))
    monkeypatch.setattr(gradients, "ROW_INDEPENDENT_LOSSES", ())
    slow = measured(tmp_path, tok, world, output, MethodChoice("random", "random"))
    assert relative(fast.pos, slow.pos) < 1e-5 and relative(fast.neg, slow.neg) < 1e-5


def test_method_params_reach_the_method(tmp_path, tok, world, monkeypatch):
    output, _ = trainer_step(tmp_path, tok, world, monkeypatch, oar_method="none")
    one = measured(tmp_path, tok, world, output, MethodChoice("oar_g", "oar_g"))
    eight = measured(tmp_path, tok, world, output, MethodChoice.parse("oar_g:n_noise=8"))
    assert relative(one.all, eight.all) > 1e-4


def test_collate_rebuilds_the_generation_batch(tmp_path, tok, world, monkeypatch):
    output, _ = trainer_step(tmp_path, tok, world, monkeypatch, oar_method="none")
    groups = output["advantages"].numel() // 4
    parts = [rollouts.group_rows(output, g, 4) for g in range(groups)]
    batch = rollouts.collate(parts, tok.pad_token_id)
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"):
        assert torch.equal(batch[key], output[key]), key
    assert int(batch["num_items_in_batch"]) == int(output["num_items_in_batch"])


def test_method_choices_parse_and_are_checked():
    choice = MethodChoice.parse("oar_g:n_noise=8")
    assert (choice.label, choice.name, choice.params) == ("oar_g:n_noise=8", "oar_g", {"n_noise": 8})
    assert [c.label for c in resolve_methods(["oar_g", "random"])] == ["none", "oar_g", "random"]
    for bad, words in (("oar_g:n_noise", "key=value"), ("oar_g:bogus=1", "takes no bogus"),
                       ("no_such", "not one the trainer")):
        with pytest.raises(AlignError, match=words):
            resolve_methods([bad])
    with pytest.raises(AlignError, match="twice"):
        resolve_methods(["oar_g", "oar_g"])
    with pytest.raises(AlignError, match="pool_batches"):
        AlignSettings(pool_batches=1)
    parsed = align_cli._configure(argparse.ArgumentParser()).parse_args(
        ["--methods", "oar_g", "oar_g:n_noise=8", "temperature=0.5", "trainer.seed=1"])
    settings = align_cli.settings_from_args(parsed)
    assert settings.methods == ("oar_g", "oar_g:n_noise=8")
    assert settings.overrides == ("temperature=0.5", "trainer.seed=1")


# ---------------------------------------------------------------------------- the command line

BAR = ["--model", "arith-tiny", "--methods", "none", "oar_g", "oar_p_step", "random", "--quick", "--json",
       "--no-progress", "--n-boot", "2000"]


def run_cli(argv, capsys) -> tuple[int, str, str]:
    code = align_cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def bar_store(tmp_path_factory):
    """The bar command's store, killed while committing its last batch (after that batch's
    running sums were written, a torn line in results.jsonl) and resumed; returns the store,
    the command line and how many method gradients the resume measured."""
    from oar_attrib.training.align.store import AlignStore

    store = tmp_path_factory.mktemp("align") / "store"
    argv = BAR + ["--store", str(store)]
    commit = AlignStore.commit

    def killed(self, kind, line):
        if kind == "results" and line["batch"] == 2:
            with open(self.path / "results.jsonl", "a") as handle:
                handle.write(json.dumps(line)[:40])
            raise KeyboardInterrupt
        return commit(self, kind, line)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AlignStore, "commit", killed)
        assert align_cli.main(argv) == 130
    assert {p.name for p in (store / "accum" / "0").glob("a-*.npy")} == {"a-1.npy", "a-2.npy"}
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        original = align_run.method_gradient
        patch.setattr(align_run, "method_gradient", lambda *a, **k: calls.append(1) or original(*a, **k))
        patch.setattr(align_run, "screen_call", lambda *a, **k: pytest.fail("screened again"))
        patch.setattr(align_run, "grpo_gradient", lambda *a, **k: pytest.fail("pool measured again"))
        assert align_cli.main(argv) == 0
    return store, argv, len(calls)


def test_a_resume_after_a_kill_redoes_only_the_uncommitted_batch(bar_store):
    store, _, calls = bar_store
    assert calls == 4  # one batch, four methods
    lines = [json.loads(line) for line in (store / "results.jsonl").read_text().splitlines()]
    assert [line["batch"] for line in lines] == [0, 1, 2]


def test_bar_prints_delta_cos_per_method_last(bar_store, capsys):
    store, argv, _ = bar_store
    code, out, _ = run_cli(argv, capsys)  # a resume of the finished store: statistics only
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert set(summary["methods"]) == {"none", "oar_g", "oar_p_step", "random"}
    for name, entry in summary["methods"].items():
        assert {"mean", "low", "high"} <= set(entry["delta_cos"])
    assert summary["methods"]["none"]["delta_cos"]["mean"] == 0.0
    assert summary["batches"] == 3 and summary["reference"]["pool_batches"] == 2
    oar_g = summary["methods"]["oar_g"]["delta_cos"]
    assert oar_g["low"] <= oar_g["mean"] <= oar_g["high"]
    assert summary["methods"]["none"]["cos_grpo"]["mean"] == pytest.approx(1.0)
    assert "oar_g - random" in summary["contrasts"]
    # the JSON says in words what the text form says: the same sentences, in order
    assert summary["reading"] and summary["reading"][-1].startswith("Next: ")
    code, text, _ = run_cli([a for a in argv if a != "--json"], capsys)
    said = text.split("what it says:")[1].splitlines()
    assert code == 0 and [line.strip() for line in said if line.strip()] == summary["reading"]


def test_results_are_consistent_with_the_running_sums(bar_store):
    """The per-batch <g, g*> summed over a half equals <S_half, g*> of its stored running sum."""
    store, _, _ = bar_store
    lines = [json.loads(line) for line in (store / "results.jsonl").read_text().splitlines()]
    star = np.load(store / "reference" / "gstar.npy")
    for i, label in enumerate(("none", "oar_g", "oar_p_step", "random")):
        for half in ("a", "b"):
            mine = [line for line in lines if line["half"] == half]
            running = np.load(store / "accum" / str(i) / f"{half}-{len(mine)}.npy").astype(np.float64)
            expected = sum(line["methods"][label]["all"]["dot_star"] for line in mine)
            assert float(running @ star) == pytest.approx(expected, rel=1e-5)
            assert len(list((store / "accum" / str(i)).glob(f"{half}-*.npy"))) == 1  # old sums deleted


def test_report_reads_a_store_as_it_stands_and_changes_nothing(bar_store, tmp_path, capsys, monkeypatch):
    """`--report`: the finished store's statistics equal those its run printed; a store a run
    is still writing (two of three batches committed, a third line half written) reports its
    two batches, blinded (the power table and the cost, no estimate) unless --unblind; no model
    is loaded and no file of the store is touched."""
    store, argv, _ = bar_store
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    ran = json.loads(out.strip().splitlines()[-1])
    monkeypatch.setattr(align_run, "align", lambda *a, **k: pytest.fail("measured"))
    report = ["--report", "--json", "--n-boot", "2000"]
    code, out, _ = run_cli(["--store", str(store), *report], capsys)
    assert code == 0 and json.loads(out.strip().splitlines()[-1]) == ran
    partial = tmp_path / "partial"
    shutil.copytree(store, partial)
    lines = (partial / "results.jsonl").read_text().splitlines(keepends=True)
    (partial / "results.jsonl").write_text("".join(lines[:2]) + lines[2][:40])
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in partial.rglob("*")}
    code, out, _ = run_cli(["--store", str(partial), *report], capsys)
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and (summary["batches"], summary["planned_batches"]) == (2, 3)
    # blinded before the planned batches are in: the noise (power table) and the cost, no estimate
    assert summary["blinded"] is True and "methods" not in summary and "contrasts" not in summary
    assert summary["reading"][0].startswith("Blinded: 2 of 3 planned batches are in")
    assert set(summary["power"]["contrasts"]) == set(ran["power"]["contrasts"])
    mine = [json.loads(line) for line in lines[:2]]
    assert summary["seconds_per_batch"]["oar_g"]["weights"] == pytest.approx(
        np.mean([line["methods"]["oar_g"]["seconds"]["weights"] for line in mine]))
    code, out, _ = run_cli(["--store", str(partial), *report, "--unblind"], capsys)
    unblinded = json.loads(out.strip().splitlines()[-1])
    assert "blinded" not in unblinded and unblinded["batches"] == 2 and set(unblinded["methods"]) == set(ran["methods"])
    assert unblinded["power"] == summary["power"]
    code, out, _ = run_cli(["--store", str(partial), "--report"], capsys)  # the text: no estimate in it
    assert code == 0 and "blinded" in out and "batches needed" in out
    assert "Holm interval" not in out and "p_holm" not in out  # no estimate table, no contrast line
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in partial.rglob("*")} == before
    recorded = json.loads((partial / "settings_record.json").read_text())
    recorded["align"]["seed"] = 7  # a report resamples with the store's own seed, whatever --seed says
    (partial / "settings_record.json").write_text(json.dumps(recorded))
    _, out, _ = run_cli(["--store", str(partial), *report, "--unblind"], capsys)
    _, again, _ = run_cli(["--store", str(partial), *report, "--unblind", "--seed", "3"], capsys)
    assert json.loads(again.strip().splitlines()[-1]) == json.loads(out.strip().splitlines()[-1])
    assert json.loads(out.strip().splitlines()[-1]) != unblinded  # seed 7, not 0
    code, _, err = run_cli(["--store", str(partial), "--unblind"], capsys)
    assert code == 2 and "--unblind goes with --report" in err
    code, _, err = run_cli(["--store", str(tmp_path / "none"), "--report"], capsys)
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1


def test_a_resume_with_other_settings_is_refused_naming_the_flags(bar_store, capsys):
    store, argv, _ = bar_store
    code, _, err = run_cli(argv + ["--batches", "4", "temperature=0.5"], capsys)
    assert code == 2
    assert "--batches: 3 there, 4 here" in err and "temperature=" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli([a if a != "random" else "entropy" for a in argv], capsys)
    assert code == 2 and "--methods" in err


# ---------------------------------------------------------------------------- the positive control


def test_align_says_how_long_before_it_measures(tmp_path, tok, world):
    """A fresh run: each method's batch from the cost model at the model's measured speed; a
    resume: the seconds its committed batches took."""
    from types import SimpleNamespace

    trainer = tiny_trainer(tmp_path / "align", tok, world, oar_method="none")
    settings = AlignSettings(batches=4, pool_batches=2, batch_prompts=2)
    choices = [MethodChoice("none", "none"), MethodChoice("oar_g", "oar_g"), MethodChoice("resample", "resample")]
    said = []
    fresh = SimpleNamespace(lines=lambda kind: [])
    align_run.tell_cost(fresh, trainer, choices, settings, tell=said.append)
    rows = 2 * trainer.num_generations
    assert said[0].startswith(f"oar align: 2 pool batches and 4 batches of {rows} completions: at most about ")
    # every built-in method has a cost model (`methods.cost.WORK`), resample's included
    assert all(re.search(rf"\b{c.label} (under )?[0-9.]+ (s|min|h|days)\b", said[0]) for c in choices), said[0]
    assert "no estimate" not in said[0] and "plus the screening's sampling" in said[0]
    line = {"methods": {"none": {"seconds": {"weights": 0.0, "backward": 2.0}},
                        "oar_g": {"seconds": {"weights": 3.0, "backward": 2.0}}}}
    resumed = SimpleNamespace(lines=lambda kind: [line, line])
    align_run.tell_cost(resumed, trainer, choices, settings, tell=said.append)
    assert said[1] == ("oar align: 2 of 4 batches to measure, about 14 s here (7.0 s a batch over the 2 "
                       "measured), plus any screening still needed")


def test_parse_question_reads_back_every_generated_problem():
    from oar_attrib.world import generate_problems
    from oar_attrib.world.generator import parse_question

    problems = generate_problems(200, "hard", seed=3) + generate_problems(200, "default")
    for p in problems:
        q = parse_question(p.prompt)
        assert (q.steps, q.target, q.path, q.values) == (p.steps, p.target, p.path, p.values)
    for text in ("What is 2+3?", "d=4+7, e=q-3. find d+e.", "d=4+7. find d+e.", ""):
        assert parse_question(text) is None


def test_causal_oracle_scores_the_results_the_answer_reads(tok):
    from oar_attrib.errors import InputError
    from oar_attrib.training.align.control import row_scores
    from oar_attrib.world import generate_problems

    p = generate_problems(1, "recall", seed=5)[0]
    prompt, trace = tok.encode(p.prompt), tok.encode(p.solution)
    for oracle_set in ("direct", "chain"):
        scores = row_scores(tok, prompt, trace, oracle_set)
        marked = [i for i, s in enumerate(scores) if s == 1.0]
        text = tok.decode(trace)
        spans = getattr(p.oracle(text), oracle_set)
        assert marked and "".join(text[i] for i in marked) == "".join(text[s:e] for s, e in spans)
    idle = row_scores(tok, prompt, trace, "not_idle")
    assert sum(idle) > sum(row_scores(tok, prompt, trace, "chain")) - 1  # everything but distractors/fillers
    with pytest.raises(InputError, match="arithmetic world"):
        row_scores(tok, tok.encode("What is 2+3?\n"), trace, "direct")


def test_the_control_is_refused_where_the_causal_tokens_are_unknown(capsys, tmp_path):
    code, _, err = run_cli(["--preset", "smollm2-words", "--methods", "none", "causal_oracle",
                            "--store", str(tmp_path / "s"), "--quick"], capsys)
    assert code == 2 and "arithmetic world only" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()  # refused before anything was written


CONTROL = ["--model", "arith-tiny", "--methods", "none", "causal_oracle", "causal_scramble", "random", "--batches", "30",
           "--pool-batches", "16", "--json", "--no-progress", "--n-boot", "2000", "--no-mean-gradients"]


@pytest.fixture(scope="module")
def control_summary(tmp_path_factory):
    """The issue's positive-control bar (30 batches, a 16-batch pool: about a CPU minute), with
    the scramble of the oracle's scores beside it."""
    store = tmp_path_factory.mktemp("control") / "store"
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert align_cli.main(CONTROL + ["--store", str(store)]) == 0
    return store, json.loads(out.getvalue().strip().splitlines()[-1])


def test_the_positive_control_beats_grpo_and_random_does_not(control_summary):
    """`causal_oracle` (the world's known causal tokens) must resolve above GRPO, against the
    whole pool, against each half pool, and with g*'s own noise in the interval; random's mean
    lies below it."""
    _, summary = control_summary
    oracle, random_ = summary["methods"]["causal_oracle"]["delta_cos"], summary["methods"]["random"]["delta_cos"]
    assert oracle["low"] > 0 and random_["mean"] < oracle["low"]
    for half in ("a", "b"):
        assert oracle["half_pools"][half]["low"] > 0 and random_["half_pools"][half]["mean"] < oracle["mean"]
    won = summary["contrasts"]["causal_oracle - causal_scramble"]  # by which tokens, not how many
    assert won["low"] > 0 and won["p_holm"] < 0.05  # seed 0; seed 1 in test_align_control (heavy)
    assert summary["methods"]["causal_oracle"]["step"]["gain"]["low"] > 1  # a better direction, not a longer step
    noisy = oracle["with_gstar_noise"]
    assert noisy["low"] > 0 and noisy["high"] - noisy["low"] >= oracle["high"] - oracle["low"] - 1e-9
    assert noisy["se"] ** 2 == pytest.approx(noisy["batch_se"] ** 2 + noisy["gstar_sd"] ** 2)
    ref = summary["reference"]
    assert ref["attenuation"] == pytest.approx(np.sqrt(ref["reliability"]))


def test_half_pool_cosines_recompute_from_the_half_vectors(control_summary):
    """dot_star_a / dot_star_b are the dots with each half pool's mean, and g* is their mean."""
    store, _ = control_summary
    ref = json.loads((store / "reference" / "reference.json").read_text())
    a, b, star = (np.load(store / "reference" / f"{n}.npy").astype(np.float64) for n in ("gstar_a", "gstar_b", "gstar"))
    assert np.allclose((a * ref["halves"]["a"] + b * ref["halves"]["b"]) / ref["pool_batches"], star, atol=1e-7)
    assert float(a @ a) == pytest.approx(ref["halves_sq"]["a"], rel=1e-5)
    line = json.loads((store / "results.jsonl").read_text().splitlines()[0])
    entry = line["methods"]["causal_oracle"]["all"]
    scale = abs(entry["dot_star"]) + abs(entry["dot_star_a"]) + abs(entry["dot_star_b"])
    mix = (entry["dot_star_a"] * ref["halves"]["a"] + entry["dot_star_b"] * ref["halves"]["b"]) / ref["pool_batches"]
    assert mix == pytest.approx(entry["dot_star"], abs=1e-5 * scale)
    assert not (store / "accum").exists() and not (store / "mean_gradients.json").exists()


def test_with_gstar_noise_adds_the_half_pools_disagreement():
    from oar_attrib.reports.align import with_gstar_noise

    rng = np.random.default_rng(0)
    n = 40
    grpo = {"all": {"cos": rng.normal(0.2, 0.02, n), "cos_a": rng.normal(0.2, 0.02, n), "cos_b": rng.normal(0.2, 0.02, n)}}
    base = rng.normal(0.01, 0.01, n)
    agree = {"all": {k: grpo["all"][k] + base for k in ("cos", "cos_a", "cos_b")}}
    apart = {"all": {"cos": grpo["all"]["cos"] + base, "cos_a": grpo["all"]["cos_a"] + base + 0.02,
                     "cos_b": grpo["all"]["cos_b"] + base - 0.02}}
    index = rng.integers(0, n, size=(4000, n))
    same = with_gstar_noise({"m": agree, "none": grpo}, ("m", "none"), index, 0.95)
    wide = with_gstar_noise({"m": apart, "none": grpo}, ("m", "none"), index, 0.95)
    assert same["gstar_sd"] < 1e-12 and same["df"] == pytest.approx(n - 1)
    assert wide["gstar_sd"] == pytest.approx(0.02, rel=0.05)  # (0.04^2 / 4) ** 0.5, less the batch part
    assert wide["high"] - wide["low"] > 3 * (same["high"] - same["low"])
    assert same["mean"] == wide["mean"] == pytest.approx(float(np.mean(base)))


def test_a_fresh_machine_resumes_from_the_committed_result_files(control_summary, tmp_path, capsys):
    """Only the exported files (no rollouts, sums or g*), one result line removed: the resume
    samples the screen again and checks it, recomputes g* and checks its fingerprint, and
    measures the missing batch to the line it had; a g* that differs is refused in one line."""
    from oar_attrib.training.align.store import export

    store, summary = control_summary
    fresh = tmp_path / "fresh"
    export(store, fresh)
    lines = (fresh / "results.jsonl").read_text().splitlines(keepends=True)
    (fresh / "results.jsonl").write_text("".join(lines[:-1]))
    code, out, _ = run_cli(CONTROL + ["--store", str(fresh)], capsys)
    assert code == 0
    again = json.loads((fresh / "results.jsonl").read_text().splitlines()[-1])
    first = json.loads(lines[-1])
    for label, entry in first["methods"].items():
        assert again["methods"][label]["all"]["dot_star"] == pytest.approx(entry["all"]["dot_star"], rel=1e-4)
    assert json.loads(out.strip().splitlines()[-1])["methods"]["causal_oracle"]["delta_cos"]["mean"] == \
        pytest.approx(summary["methods"]["causal_oracle"]["delta_cos"]["mean"], rel=1e-3)
    tampered = tmp_path / "tampered"
    export(store, tampered)
    reference = json.loads((tampered / "reference" / "reference.json").read_text())
    reference["sq"] *= 1.01
    (tampered / "reference" / "reference.json").write_text(json.dumps(reference))
    (tampered / "results.jsonl").write_text("".join(lines[:-1]))
    before = {p: p.read_bytes() for p in tampered.rglob("*") if p.is_file()}
    code, _, err = run_cli(CONTROL + ["--store", str(tampered)], capsys)
    assert code == 2 and "fingerprints" in err.strip().splitlines()[-1]  # one line (after the weights' bar)
    assert {p: p.read_bytes() for p in before} == before  # the committed files as they were
