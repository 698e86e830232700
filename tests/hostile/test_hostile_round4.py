"""Hostile use, round 4 (the doors opened since round 3): `oar align`'s paths and `--export`
(nothing that exists is overwritten), its numbers and method keywords checked with bounds before
anything is written (so the corrected command then runs), labels read from an align folder
escaped on the terminal, the settings record naming the model's config and tokenizer, and the
count flags of `oar recall` and `oar attribute` bounded."""
import json
import os
import shutil
from pathlib import Path

import pytest

from oar_attrib.models import resolve
from oar_attrib.records import settings_record as sr
from oar_attrib.training.align import cli as align_cli

QUICK = ("align", "--model", "arith-tiny", "--methods", "none", "random", "--quick", "--no-progress",
         "--n-boot", "200")

BAD_NUMBERS = {
    "n_noise=-5": (("--methods", "none", "oar_g:n_noise=-5"), "n_noise"),
    "n_noise=nan": (("--methods", "none", "oar_g:n_noise=nan"), "n_noise"),
    "n_noise markup": (("--methods", "none", "oar_g:n_noise=<b>8</b>"), "n_noise"),
    "n_noise=1e12": (("--methods", "none", "oar_g:n_noise=1000000000000"), "at most"),
    "noise_std=inf": (("--methods", "none", "oar_g:noise_std=.inf"), "noise_std"),
    "seed -1": (("--seed", "-1"), "seed"),
    "n-boot 0": (("--n-boot", "0"), "--n-boot"),
    "n-boot -1": (("--n-boot", "-1"), "--n-boot"),
    "n-boot 1e12": (("--n-boot", "1000000000000"), "--n-boot"),
    "effects nan": (("--effects", "nan"), "--effects"),
    "effects 0 -1": (("--effects", "0", "-1"), "--effects"),
    "batches 1e12": (("--batches", "1000000000000"), "batches"),
    "batch-prompts 1e12": (("--batch-prompts", "1000000000000"), "--batch-prompts"),
}


@pytest.mark.parametrize("case", sorted(BAD_NUMBERS))
def test_a_bad_number_or_method_keyword_is_refused_before_anything_is_written(case, tmp_path, refused,
                                                                               no_model):
    flags, word = BAD_NUMBERS[case]
    store = tmp_path / "store"
    refused(*QUICK, "--store", store, *flags, words=(word,))
    assert not store.exists() and not list(tmp_path.iterdir())  # no record, screen, rollouts or lock


@pytest.fixture(scope="module")
def align_store(tmp_path_factory):
    """A finished quick align folder, made by the corrected command after refused ones had
    aimed at the same --store (so a refusal must leave nothing that poisons it)."""
    store = tmp_path_factory.mktemp("align") / "store"
    for flags, _ in BAD_NUMBERS.values():
        assert align_cli.main([*QUICK[1:], "--store", str(store), *flags]) == 2
        assert not store.exists()
    assert align_cli.main([*QUICK[1:], "--store", str(store)]) == 0
    return store


def test_the_corrected_command_runs_after_the_refusals(align_store):
    lines = (align_store / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["batch"] for line in lines] == [0, 1, 2]


def _targets(tmp_path: Path, store: Path) -> dict:
    other = tmp_path / "other-run"
    shutil.copytree(store, other)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.md").write_text("mine\n")
    afile = tmp_path / "afile"
    afile.write_text("a file\n")
    return {"another align folder": other, "a non-empty folder": notes, "a file": afile, "the store": store}


@pytest.mark.parametrize("target", ["another align folder", "a non-empty folder", "a file", "the store"])
def test_export_never_overwrites(target, align_store, tmp_path, refused, snapshot):
    """The bar: `oar align --report --store S --export T` onto an align folder or a non-empty
    folder refuses and leaves T byte for byte as it was (a file, or S itself, too)."""
    dest = _targets(tmp_path, align_store)[target]
    before = snapshot(dest) if dest.is_dir() else dest.read_bytes()
    store_before = snapshot(align_store)
    refused("align", "--report", "--store", align_store, "--export", dest, words=(f"--export {dest}",))
    assert (snapshot(dest) if dest.is_dir() else dest.read_bytes()) == before
    assert snapshot(align_store) == store_before


def test_export_into_a_new_folder_copies_the_result_files(align_store, tmp_path, oar):
    dest = tmp_path / "new" / "export"
    code, _ = oar("align", "--report", "--store", align_store, "--export", dest, "--n-boot", "200")
    assert code == 0
    assert {p: b for p, b in _files(dest).items()} == {p: b for p, b in _files(align_store).items() if p in _files(dest)}
    assert "results.jsonl" in _files(dest)


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("flag", ["--store", "--summary"])
@pytest.mark.parametrize("kind", ["a file", "a FIFO"])
def test_a_store_or_summary_of_the_wrong_kind_is_one_line(flag, kind, align_store, tmp_path, refused):
    path = tmp_path / "thing"
    if kind == "a FIFO":
        os.mkfifo(path)
    else:
        path.write_text("x\n")
    if flag == "--summary" and kind == "a file":
        path.unlink()
        path.symlink_to(tmp_path / "elsewhere.json")  # a link: never written through
        kind = "symbolic link"
    argv = ("--store", path) if flag == "--store" else ("--store", align_store, "--summary", path)
    refused("align", "--report", *argv, words=(f"{flag} {path}", kind.split()[-1]))
    assert not (tmp_path / "elsewhere.json").exists()


def test_report_labels_read_from_the_folder_reach_the_terminal_escaped(align_store, tmp_path, capsys):
    hostile = "rand\\u001b[2J\\u001b[31mom\\u202e"
    store = tmp_path / "store"
    shutil.copytree(align_store, store)
    for name in (sr.RECORD_FILE, "results.jsonl", "mean_gradients.json"):
        path = store / name
        path.write_text(path.read_text(encoding="utf-8").replace('"random', '"' + hostile), encoding="utf-8")
    assert align_cli.main(["--report", "--store", str(store), "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    assert "rand\\x1b[2J\\x1b[31mom\\u202e" in out  # shown as escapes
    assert "\x1b" not in out and "\u202e" not in out


# ---------------------------------------------------------------------------- the settings record


def _twin(tmp_path: Path, name: str, **config) -> Path:
    """A copy of the bundled model's folder with `config` set in its config.json."""
    folder = tmp_path / name
    shutil.copytree(resolve("arith-tiny"), folder)
    data = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**data, **config}, indent=1))
    return folder


def test_the_record_names_the_config_and_tokenizer_beside_the_weights(tmp_path):
    same = _twin(tmp_path, "same")
    other = _twin(tmp_path, "other", rms_norm_eps=1e-2, rope_theta=10.0)
    a, b = sr.model_identity(str(same)), sr.model_identity(str(other))
    assert a["weights_sha256"] == b["weights_sha256"] and a["config_sha256"] != b["config_sha256"]
    template = _twin(tmp_path, "template")
    config = json.loads((template / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ messages[0]['content'] }}"
    (template / "tokenizer_config.json").write_text(json.dumps(config))
    assert sr.model_identity(str(template))["config_sha256"] not in (a["config_sha256"], None)
    old = {"model": {"name": "x", "weights_sha256": a["weights_sha256"]}}  # a record made before the field
    assert sr.record_differences(old, {"model": {**old["model"], "config_sha256": b["config_sha256"]}}) == []
    assert sr.record_differences({"model": a}, {"model": b}) == ["model.config_sha256"]


def test_the_same_weights_with_another_config_cannot_append_to_an_output(tmp_path, oar, refused):
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + 2? Answer:", "answer": str(i + 2)}) + "\n"
                            for i in range(2)))
    out = tmp_path / "answers.jsonl"

    def generate(model):
        return ("generate", "--model", model, "--data", data, "--out", out, "--samples", "2",
                "--max-new-tokens", "6", "--temperature", "1", "--answer-format", "gsm8k", "--no-progress")

    assert oar(*generate(_twin(tmp_path, "a")))[0] == 0
    before = out.read_bytes()
    line = refused(*generate(_twin(tmp_path, "b", rms_norm_eps=1e-2, rope_theta=10.0)),
                   words=(f"--out {out}", "config"))
    assert "model.config_sha256" in line or "config, tokenizer and chat template" in line
    assert out.read_bytes() == before


# ---------------------------------------------------------------------------- other commands' counts


@pytest.mark.parametrize("flags, word", [
    (("recall", "world", "--n", "1000000000000"), "--n"),
    (("recall", "world", "--seed", "-1"), "--seed"),
    (("recall", "steps", "--resample-samples", "1000000000000"), "--resample-samples"),
    (("recall", "graded", "--graded-k", "1000000000000"), "--graded-k"),
    (("recall", "world", "--cf-positions", "1000000000000"), "--cf-positions"),
    (("recall", "graded", "--positions", "1000000000000"), "--positions"),
    (("recall", "graded", "--max-new-tokens", "1000000000000"), "--max-new-tokens"),
    (("attribute", "--input", "x.jsonl", "--out", "y.jsonl", "--batch-size", "1000000000000"), "--batch-size"),
])
def test_count_flags_are_bounded_before_the_model_loads(flags, word, tmp_path, monkeypatch, refused, no_model):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text(json.dumps({"prompt": "1 + 1 =", "response": "2"}) + "\n")
    refused(*flags, "--model", "arith-tiny", "--no-progress", words=(word,))
    assert not (tmp_path / "y.jsonl").exists()


@pytest.mark.parametrize("flag, value, word", [("--oar-g-n-noise", "1000000000000", "at most 100000"),
                                               ("--oar-g-noise-std", "inf", "finite"),
                                               ("--oar-g-noise-std", "nan", "finite")])
def test_method_knob_flags_are_bounded_by_the_parser(flag, value, word, tmp_path, capsys, no_model):
    from oar_attrib import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["attribute", "--input", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "y.jsonl"),
                  flag, value])
    assert exit_.value.code == 2
    assert word in capsys.readouterr().err.strip().splitlines()[-1]
