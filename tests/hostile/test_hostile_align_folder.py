"""An align result folder whose files are not what `oar align` writes: every reader (the
resume, `--report`, the /align page) ends in one line naming the file and what to do, exits
non-zero, and changes nothing; a finished folder whose last result line was cut is measured
again where it was cut, not left stuck."""
import json
import shutil

import pytest
from fastapi.testclient import TestClient

from oar_attrib.store import Store
from oar_attrib.training.align import cli as align_cli
from oar_attrib.training.align import run as align_run
from oar_attrib.webapp import WebSettings, create_app

BAR = ["--model", "arith-tiny", "--methods", "none", "random", "--quick", "--no-progress", "--n-boot", "200"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A finished quick store (3 batches, a 2-batch pool, with mean-gradient sums)."""
    folder = tmp_path_factory.mktemp("align") / "store"
    assert align_cli.main(BAR + ["--store", str(folder)]) == 0
    return folder


def _record(folder):
    return next(p for p in (folder / "settings_record.json", folder / "record.json") if p.exists())


def _cut(path, keep=12):
    path.write_bytes(path.read_bytes()[:keep])


def _edit_line(path, k, edit):
    lines = path.read_text().splitlines()
    line = json.loads(lines[k])
    edit(line)
    lines[k] = json.dumps(line)
    path.write_text("\n".join(lines) + "\n")


def _set_first_sum(line):
    line["methods"]["none"]["all"]["dot_star"] = "0.5"


def _record_dir(folder):
    path = _record(folder)
    path.unlink()
    path.mkdir()


DAMAGE = {
    "record cut short": ("settings_record.json", lambda f: _cut(_record(f))),
    "record a list": ("settings_record.json", lambda f: _record(f).write_text("[1, 2]")),
    "record a directory": ("settings_record.json", _record_dir),
    "record without align": ("settings_record.json", lambda f: _record(f).write_text('{"model": {}}')),
    "result number a string": ("results.jsonl", lambda f: _edit_line(f / "results.jsonl", 0, _set_first_sum)),
    "screen seconds abc": ("screen.jsonl", lambda f: _edit_line(f / "screen.jsonl", 0,
                                                                lambda line: line.update(seconds="abc"))),
    "mean gradients cut": ("mean_gradients.json", lambda f: _cut(f / "mean_gradients.json")),
}


def _snapshot(folder):
    return {p: (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def _damaged(store, tmp_path, case):
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    DAMAGE[case][1](copy)
    return copy


def _one_line(capsys, name):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and name in err[-1] and ("restore it" in err[-1] or "new --store" in err[-1]), err
    assert "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_folder_is_refused_in_one_line_by_report_and_resume(store, tmp_path, capsys, monkeypatch, case):
    copy = _damaged(store, tmp_path, case)
    name = DAMAGE[case][0]
    before = _snapshot(copy)
    capsys.readouterr()
    assert align_cli.main(["--store", str(copy), "--report"]) == 2
    _one_line(capsys, name if name != "settings_record.json" else "record")
    monkeypatch.setattr("oar_attrib.training.launch.build_trainer",
                        lambda *a, **k: pytest.fail("the model loaded before the folder was checked"))
    assert align_cli.main(BAR + ["--store", str(copy)]) == 2
    _one_line(capsys, name if name != "settings_record.json" else "record")
    assert _snapshot(copy) == before


@pytest.mark.parametrize("case", list(DAMAGE))
def test_the_align_page_of_a_damaged_folder_is_an_error_page_not_a_500(store, tmp_path, case):
    root = tmp_path / "root"
    root.mkdir()
    copy = _damaged(store, root, case)
    db = tmp_path / "empty.db"
    Store(db).close()
    with TestClient(create_app(db, settings=WebSettings(align_results=(str(root),))),
                    base_url="http://127.0.0.1") as client:
        for url in (f"/align/{copy.name}", f"/api/align/{copy.name}", "/align"):
            page = client.get(url)
            assert page.status_code < 500, (url, page.status_code)
        page = client.get(f"/align/{copy.name}")
        assert page.status_code == 404 or DAMAGE[case][0].split(".")[0] in page.text


@pytest.mark.parametrize("how", ["cut mid-line", "whole line lost"])
def test_a_finished_folder_whose_last_result_line_was_cut_measures_that_batch_again(store, tmp_path, capsys, how):
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    lines = (copy / "results.jsonl").read_text().splitlines(keepends=True)
    last = lines[-1]
    (copy / "results.jsonl").write_text("".join(lines[:-1]) + (last[:40] if how == "cut mid-line" else ""))
    sums = (copy / "mean_gradients.json").read_bytes()
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        original = align_run.method_gradient
        patch.setattr(align_run, "method_gradient", lambda *a, **k: calls.append(1) or original(*a, **k))
        assert align_cli.main(BAR + ["--store", str(copy), "--json"]) == 0
    assert len(calls) == 2  # the cut batch, two methods; nothing else measured again
    again = (copy / "results.jsonl").read_text().splitlines(keepends=True)
    assert len(again) == len(lines)
    old, new = json.loads(last), json.loads(again[-1])
    for label in old["methods"]:
        assert new["methods"][label]["all"]["dot_star"] == pytest.approx(old["methods"][label]["all"]["dot_star"],
                                                                         rel=1e-5)
    assert (copy / "mean_gradients.json").read_bytes() == sums  # the running sums held the batch already
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["batches"] == summary["planned_batches"] == 3 and "blinded" not in summary
