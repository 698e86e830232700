"""Numbers a computation cannot hold (issue 52, the numeric family): every float flag and method
knob is checked in the one place flags are checked, against float32's range and its own domain
(the field's or the knob's `bounds`), so one added later is covered; each case is one line,
exit 2, and nothing written."""
import json

import pytest

from oar_attrib import cli

CASES = [
    (["recall", "world", "--oar-g-noise-std", "1e308"], "--oar-g-noise-std"),
    (["recall", "world", "--oar-g-noise-std", "1e30"], "--oar-g-noise-std"),
    (["attribute", "--model", "arith-tiny", "--input", "in.jsonl", "--out", "out.jsonl", "--oar-g-noise-std", "1e308"],
     "--oar-g-noise-std"),
    (["recall", "advantage", "--temperature", "1e308"], "--temperature"),
    (["recall", "world", "--oar-p-hier-top-mass", "1e308"], "--oar-p-hier-top-mass"),
    (["import", "jsonl", "rows.jsonl", "--out", "runs.db", "--correct-threshold", "-1"], "--correct-threshold"),
    (["recall", "graded", "--seed", str(2**40)], "--seed"),
]


@pytest.mark.parametrize("argv, flag", CASES, ids=[" ".join(a[:2] + a[-2:]) for a, _ in CASES])
def test_a_number_the_computation_cannot_hold_is_one_line_and_nothing_is_written(argv, flag, tmp_path,
                                                                                 monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text(json.dumps({"prompt": "1 + 1 =", "response": "2"}) + "\n")
    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "1 + 1 =", "response": "2", "reward": 1}) + "\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # the parser's refusal of a knob's value
        code = exit_.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and flag in err[-1] and "Traceback" not in "\n".join(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_align_refuses_a_noise_std_it_cannot_hold_before_its_store_is_made(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = cli.main(["align", "--model", "arith-tiny", "--store", "s", "--methods", "none", "oar_g:noise_std=1e308",
                      "--quick", "--no-progress"])
    assert code == 2 and "noise_std" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
