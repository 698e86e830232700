"""A resume under other settings is refused, for every knob: `oar attribute` (JSONL and store
outputs, and in place), `oar recall data --cf-cache`, `oar train --resume` and `oar experiment run`.

Each refusal exits 2 with one line naming the flag as that command line spells it, before the
model loads, and leaves the output byte for byte as it was; the same command unchanged
resumes. The knobs of `oar attribute` are enumerated from its parser, so a new flag is covered
(or must be declared here as not changing results, with the reason).
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from oar_attrib import cli
from oar_attrib.cli.choices import METHOD_KNOBS, knob_flag
from oar_attrib.methods import method_spec
from oar_attrib.methods.registry import RUN_ONLY
from oar_attrib.models import resolve
from oar_attrib.weights import pipeline
from oar_attrib.world import generate_problems

# Flags of `oar attribute` that do not change a result, and why: they stay out of the record.
NOT_RESULTS = {
    "--help": "prints help",
    "--input": "which lines are attributed, not how (lines resume by number)",
    "--out": "where results go", "--store": "where results go", "--run": "where results go",
    "--force-new-run": "the remedy itself",
    "--batch-size": "rows are scored independently of their batch (tests/weights)",
    "--no-progress": "display", "--device": "where it runs",
    "--max-batch-tokens": "every budgeted method gives the same scores under any budget",
}
# Method knobs the registry declares speed-only (`speed_params`, `RUN_ONLY`).
SPEED_KNOBS = {knob_flag(m, p) for m, p, _, _ in METHOD_KNOBS
               if p in method_spec(m).speed_params or p in RUN_ONLY}
KNOB_METHODS = sorted({m for m, _, _, _ in METHOD_KNOBS})
# The base command: every method a knob belongs to, each at a cheap value.
BASE = ["--methods", *KNOB_METHODS, "--ig-n-steps", "2", "--resample-n-samples", "2",
        "--oar-g-n-noise", "2", "--no-progress"]
# Another value for flags whose type does not give one (strings, names, paths).
OTHER = {"--methods": KNOB_METHODS[1:], "--probe": ["lt"], "--answer-format": ["boxed"],
         "--weighting": ["top_rho"], "--granularity": ["step"], "--step-pool": ["max"],
         "--dtype": ["bfloat16"], "--oar-p-mask": ["eos"], "--oar-p-step-mask": ["eos"],
         "--oar-p-hier-mask": ["eos"], "--oar-p-hier-top-steps": ["7"],  # 3 is its default
         "--oar-p-hier-top-mass": ["0.5"]}  # a share in (0, 1]


def _attribute_parser() -> argparse.ArgumentParser:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["attribute"]


def _flag(action: argparse.Action) -> str:
    return next(s for s in action.option_strings if s.startswith("--"))


def _knobs() -> list[argparse.Action]:
    return [a for a in _attribute_parser()._actions if a.option_strings
            and _flag(a) not in NOT_RESULTS and _flag(a) not in SPEED_KNOBS]


def _without(argv: list[str], flag: str) -> list[str]:
    """`argv` without `flag` and its values."""
    if flag not in argv:
        return list(argv)
    start = end = argv.index(flag)
    end += 1
    while end < len(argv) and not argv[end].startswith("--"):
        end += 1
    return argv[:start] + argv[end:]


def _method_default(flag: str):
    """The default of the method keyword behind a method knob's flag (None: not one, or none)."""
    import inspect

    for method, param, _, _ in METHOD_KNOBS:
        if knob_flag(method, param) == flag:
            default = inspect.signature(method_spec(method).fn).parameters[param].default
            return None if default is inspect.Parameter.empty else default
    return None


def _changed(action: argparse.Action, other_model: Path) -> list[str]:
    """The base command with `action`'s flag set to another value than the base's."""
    flag = _flag(action)
    if flag == "--model":
        return [*BASE, flag, str(other_model)]
    if flag == "--chat":
        return [*BASE, "--no-chat"]
    if flag in OTHER:
        return [*_without(BASE, flag), flag, *OTHER[flag]]
    kind = getattr(action.type, "__name__", "")
    assert kind in ("int", "float"), f"{flag}: add another value to OTHER (or to NOT_RESULTS, with why)"
    given = BASE[BASE.index(flag) + 1] if flag in BASE else action.default
    if given is None:  # a method knob left to the method: change its own default (3 is oar_p_hier's top_steps)
        given = _method_default(flag)
    value = 3 if given is None else (float(given) / 2 if kind == "float" else int(given) + 1)
    return [*_without(BASE, flag), flag, str(value)]


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("in")
    problems = generate_problems(3, "default", seed=2)
    for n in (1, 2, 3):
        (folder / f"in{n}.jsonl").write_text("".join(
            json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n" for p in problems[:n]))
    return folder


@pytest.fixture(scope="module")
def other_model(tmp_path_factory) -> Path:
    """arith-tiny with one weight changed: the same name on disk, other weights."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path_factory.mktemp("model") / "arith-tiny-changed"
    shutil.copytree(resolve("arith-tiny"), folder)
    for file in folder.glob("*.safetensors"):
        tensors = load_file(file)
        key = sorted(tensors)[0]
        tensors[key] = tensors[key].clone()
        tensors[key].view(-1)[0] += 1.0
        save_file(tensors, file, metadata={"format": "pt"})
    return folder


def _zero_scores(model, batch, settings, rows, **kw):
    """`pipeline.score`'s (importances, per-draw importances): zeros, and no draws."""
    return torch.zeros(batch.input_ids.shape, dtype=torch.float32), None


@pytest.fixture
def fast_scores(monkeypatch):
    """Every method scores zeros: these tests are about the record around the scores."""
    monkeypatch.setattr(pipeline, "score", _zero_scores)


@pytest.fixture(scope="module")
def made(lines, tmp_path_factory) -> Path:
    """A JSONL made by the base command over one line (zero scores: the records are real)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "score", _zero_scores)
        out = tmp_path_factory.mktemp("out") / "out.jsonl"
        assert cli.main(["attribute", "--input", str(lines / "in1.jsonl"), "--out", str(out), *BASE]) == 0
    return out


def _no_loading(monkeypatch):
    import oar_attrib.models

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr(oar_attrib.models, "load_model", refuse)


def _refused(argv, capsys, *words) -> str:
    code = cli.main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    for word in words:
        assert word in err[0], err[0]
    return err[0]


def test_every_knob_of_oar_attribute_is_one_the_test_changes():
    flags = {_flag(a) for a in _knobs()}
    assert {"--tau", "--beta", "--w-min", "--weighting", "--rho", "--granularity", "--step-pool", "--probe",
            "--methods", "--answer-format", "--oar-p-mask", "--oar-g-n-noise", "--oar-g-noise-std",
            "--ig-n-steps", "--resample-n-samples", "--dtype", "--model", "--chat"} <= flags
    assert "--ig-internal-batch-size" in SPEED_KNOBS and "--ig-internal-batch-size" not in flags


@pytest.mark.parametrize("action", _knobs(), ids=_flag)
def test_a_changed_knob_is_refused_naming_its_flag_and_writes_nothing(action, lines, made, other_model,
                                                                       tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.jsonl"
    shutil.copy(made, out)
    _no_loading(monkeypatch)
    flag = _flag(action)
    line = _refused(["attribute", "--input", str(lines / "in2.jsonl"), "--out", str(out),
                     *_changed(action, other_model)], capsys, f"({flag}: ", "pass a new --out")
    assert line.startswith(f"oar attribute: error: --out {out} was made with other settings")
    assert out.read_bytes() == made.read_bytes()


def test_the_unchanged_command_resumes_after_the_lines_there(lines, made, tmp_path, fast_scores, capsys):
    out = tmp_path / "out.jsonl"
    shutil.copy(made, out)
    assert cli.main(["attribute", "--input", str(lines / "in2.jsonl"), "--out", str(out), *BASE]) == 0
    assert "wrote 1 attributions" in capsys.readouterr().err
    text = out.read_bytes()
    assert text.startswith(made.read_bytes()) and [json.loads(x)["line"] for x in text.splitlines()] == [1, 2]


def test_the_issues_reproduction_is_refused_and_the_file_unchanged(lines, tmp_path, capsys):
    """`oar attribute --methods oar_p` over two lines, then over three with --tau 0.9: before,
    line 3 was appended under tau 0.9 and the command exited 0. Real OAR-P scores."""
    out = tmp_path / "x.jsonl"
    command = ["attribute", "--methods", "oar_p", "--out", str(out), "--no-progress"]
    assert cli.main([*command, "--input", str(lines / "in2.jsonl")]) == 0
    before = out.read_bytes()
    capsys.readouterr()
    _refused([*command, "--input", str(lines / "in3.jsonl"), "--tau", "0.9"], capsys, "(--tau: 0.4 there, 0.9 here)")
    assert out.read_bytes() == before
    _refused([*command, "--input", str(lines / "in3.jsonl"), "--weighting", "top_rho", "--granularity", "step"],
             capsys, "--granularity: token there, step here", "--weighting: none there, top_rho here")
    assert out.read_bytes() == before
    _refused([*command, "--input", str(lines / "in3.jsonl"), "--force-new-run"], capsys, "a JSONL")
    assert cli.main([*command, "--input", str(lines / "in3.jsonl")]) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3] and {r["params"]["settings"]["tau"] for r in records} == {0.4}


def test_a_store_output_refuses_resumes_and_takes_a_new_run_when_forced(lines, tmp_path, fast_scores, capsys):
    from oar_attrib.store import Store

    out = tmp_path / "x.db"
    command = ["attribute", "--methods", "oar_p", "oar_g", "--out", str(out), "--no-progress",
               "--input", str(lines / "in2.jsonl")]
    assert cli.main(command) == 0
    before = out.read_bytes()
    capsys.readouterr()
    _refused([*command, "--oar-g-n-noise", "2"], capsys, "(--oar-g-n-noise: 8 there, 2 here)",
             "or --force-new-run to start a new run in it")
    assert out.read_bytes() == before
    assert cli.main(command) == 0 and "2 lines already there" in capsys.readouterr().err
    assert cli.main([*command, "--oar-g-n-noise", "2", "--force-new-run"]) == 0
    with Store(out, readonly=True) as store:
        runs = store.runs()
        assert len(runs) == 2 and [r.config["methods"]["oar_g"]["n_noise"] for r in runs] == [2, 8]
        assert runs[0].config["input"] == str(lines / "in2.jsonl")
        traces = list(store.iter_traces(runs[0].id))
        assert {t.params["methods"]["oar_g"]["n_noise"] for t in traces} == {2}


def test_attributing_in_place_again_under_other_settings_is_refused(tmp_path, fast_scores, capsys):
    from models import write_verl_dump

    write_verl_dump(tmp_path / "rollouts", steps=(1,))
    db = tmp_path / "runs.db"
    assert cli.main(["import", "verl", str(tmp_path / "rollouts"), "--out", str(db)]) == 0
    place = ["attribute", "--store", str(db), "--run", "1", "--methods", "oar_p", "--no-progress"]
    assert cli.main(place) == 0
    before = db.read_bytes()
    capsys.readouterr()
    _refused([*place, "--tau", "0.9"], capsys, f"--store {db} --run 1 was made with other settings (--tau: ")
    assert db.read_bytes() == before
    assert cli.main([*place[:-2], "entropy", "--tau", "0.9", "--no-progress"]) == 0  # another method: its own record


def test_a_recall_cache_of_another_model_or_dtype_is_refused(lines, other_model, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cf.jsonl"
    command = ["recall", "data", "--data", str(lines / "in2.jsonl"), "--n", "2", "--methods", "random",
               "--cf-positions", "2", "--cf-cache", str(cache), "--no-progress", "--json"]
    assert cli.main(command) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["record"]["methods"] == {"random": {}} and report["record"]["recall"]["cf_positions"] == 2
    before = cache.read_bytes()
    assert len(before.splitlines()) == 3  # the record and two traces' oracles
    with monkeypatch.context() as patch:
        _no_loading(patch)
        _refused([*command, "--dtype", "bfloat16"], capsys, "(--dtype: float32 there, bfloat16 here)",
                 "pass a new --cf-cache")
        _refused([*command[:-2], "--model", str(other_model), "--no-progress"], capsys, "(--model: arith-tiny")
    assert cache.read_bytes() == before
    assert cli.main([*command, "--methods", "random", "entropy"]) == 0  # methods do not key the oracle
    assert cache.read_bytes() == before  # nothing regenerated


class _Trainer:
    """What `launch.train` needs of a trainer, without training."""

    def __init__(self, args):
        from types import SimpleNamespace

        self.state = SimpleNamespace(global_step=0)
        self.model = self.model_wrapped = None
        self.accelerator = SimpleNamespace(free_memory=lambda: None, end_training=lambda: None)

    def train(self, resume_from_checkpoint=None):
        from types import SimpleNamespace

        self.resumed = resume_from_checkpoint
        return SimpleNamespace(training_loss=0.0)

    def save_model(self, folder):
        pass


def test_train_resume_under_other_settings_is_refused_before_loading(tmp_path, monkeypatch, capsys):
    from oar_attrib.training import cli as train_cli
    from oar_attrib.training import launch

    built = []
    monkeypatch.setattr(launch, "build_trainer", lambda run, args, **kw: built.append(args) or (_Trainer(args), None))
    monkeypatch.setattr(launch, "check_checkpoint", lambda folder: None)
    out = tmp_path / "run"
    assert train_cli.main(["--output-dir", str(out), "--method", "oar_g"]) == 0
    record = json.loads((out / launch.RECORD_FILE).read_text())
    assert record["methods"]["oar_g"]["n_noise"] == 1  # training: the paper's 1 draw
    (out / "checkpoint-1").mkdir()
    capsys.readouterr()
    before = sorted((p.name, p.read_bytes()) for p in out.iterdir() if p.is_file())
    _refused(["train", "--output-dir", str(out), "--method", "oar_g", "--resume", "latest", "oar_tau=0.9"],
             capsys, f"--output-dir {out} was made with other settings (oar_tau: ", "0.9 here")
    _refused(["train", "--output-dir", str(out), "--method", "oar_p", "--resume", "latest"],
             capsys, "(--method: oar_g there, oar_p here)")
    _refused(["train", "--output-dir", str(out), "--method", "oar_g", "--resume", "latest", "learning_rate=0.5"],
             capsys, "(learning_rate: ")
    assert len(built) == 1 and sorted((p.name, p.read_bytes()) for p in out.iterdir() if p.is_file()) == before
    assert train_cli.main(["--output-dir", str(out), "--method", "oar_g", "--resume", "latest"]) == 0
    assert len(built) == 2


def test_experiment_run_refuses_a_cell_set_up_with_other_settings(tmp_path, capsys):
    from oar_attrib.training import experiment

    spec = {"experiment": {"name": "g", "preset": "arith-tiny", "seeds": [0], "steps": 1, "eval_every": 1,
                           "store": str(tmp_path / "exp.db"), "output_dir": str(tmp_path / "out"),
                           "methods": {"none": {"oar_method": "none"}, "random": {"oar_method": "random"}}}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(spec))
    store, cells, _ = experiment.plan(*experiment.load(path))  # registers the cells, trains nothing
    store.close()
    with experiment.ExperimentStore(spec["experiment"]["store"]) as db:
        settings = db.cell(cells[1].id).settings
    assert settings["record"]["methods"] == {"random": {}} and settings["record"]["model"]["name"] == "arith-tiny"
    before = (tmp_path / "exp.db").read_bytes()
    spec["experiment"]["methods"]["random"]["oar_tau"] = 0.9
    path.write_text(yaml.safe_dump(spec))
    _refused(["experiment", "run", str(path)], capsys, "cell random seed 0 in exp.db was made with other settings "
             "(oar_tau: ", "0.9 here", "give the changed method another label")
    assert (tmp_path / "exp.db").read_bytes() == before
    spec["experiment"]["methods"]["random"].pop("oar_tau")
    path.write_text(yaml.safe_dump(spec))
    store, again, _ = experiment.plan(*experiment.load(path))  # unchanged: the same cells
    store.close()
    assert [c.id for c in again] == [c.id for c in cells]
