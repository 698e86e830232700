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


# ------------------------------------------------------------------ round 5: what a resume reads back


def _fingerprint_only(folder):
    """g* zeroed everywhere but the coordinates reference.json fingerprints."""
    import numpy as np

    path = folder / "reference" / "gstar.npy"
    star = np.load(path)
    keep = [int(k) for k in json.loads((folder / "reference" / "reference.json").read_text())["fingerprint"]]
    zeroed = np.zeros_like(star)
    zeroed[keep] = star[keep]
    np.save(path, zeroed)


def _rewrite_gstar(make):
    import numpy as np

    def damage(folder):
        path = folder / "reference" / "gstar.npy"
        np.save(path, make(np.load(path)), allow_pickle=True)
    return damage


def _unprinted(damage):
    def both(folder):
        (folder / "reference" / "vectors.json").unlink()  # a store made before the prints were kept
        damage(folder)
    return both


GSTAR = {
    "a wrong shape": (_rewrite_gstar(lambda v: v[:10]), "shape (10,)"),
    "cut short": (lambda f: _cut(f / "reference" / "gstar.npy", 200), "cannot be read"),
    "an object array": (_rewrite_gstar(lambda v: __import__("numpy").array([object(), 1.0], dtype=object)),
                        "cannot be read"),
    "all NaN": (_rewrite_gstar(lambda v: v * float("nan")), "NaN"),
    "float64": (_rewrite_gstar(lambda v: v.astype("float64")), "float64"),
    "zeroed outside the fingerprint": (_fingerprint_only, "sha256"),
    "an old store's, zeroed outside the fingerprint": (_unprinted(_fingerprint_only), "reference.json"),
}


def _unfinished(store, tmp_path):
    """A copy of the finished store whose last batch was lost (a resume measures it again)."""
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    lines = (copy / "results.jsonl").read_text().splitlines(keepends=True)
    (copy / "results.jsonl").write_text("".join(lines[:-1]))
    return copy


@pytest.mark.parametrize("case", list(GSTAR))
def test_a_replaced_or_damaged_gstar_is_refused_on_resume_and_the_folder_left_as_it_is(store, tmp_path,
                                                                                       capsys, case):
    copy = _unfinished(store, tmp_path)
    damage, words = GSTAR[case]
    damage(copy)
    before = _snapshot(copy)
    capsys.readouterr()
    assert align_cli.main(BAR + ["--store", str(copy)]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip() and "Loading weights" not in x]
    assert len(err) == 1 and "reference/gstar.npy" in err[0] and words in err[0], err
    assert "delete reference/gstar*.npy" in err[0] and "Traceback" not in err[0]
    assert _snapshot(copy) == before and not (tmp_path / "copy.lock").exists()


def test_an_old_store_with_a_sound_gstar_resumes_and_records_its_prints(store, tmp_path, capsys):
    copy = _unfinished(store, tmp_path)
    prints = json.loads((copy / "reference" / "vectors.json").read_text())
    (copy / "reference" / "vectors.json").unlink()
    assert align_cli.main(BAR + ["--store", str(copy), "--json"]) == 0
    assert json.loads((copy / "reference" / "vectors.json").read_text()) == prints
    assert len((copy / "results.jsonl").read_text().splitlines()) == 3


def test_a_deeply_nested_last_result_line_does_not_pass_report(store, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    with open(copy / "results.jsonl", "a") as handle:
        handle.write("[" * 100_000 + "]" * 100_000 + "\n")
    before = _snapshot(copy)
    capsys.readouterr()
    assert align_cli.main(["--store", str(copy), "--report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "results.jsonl line 4" in err[0] and "nested too deeply" in err[0], err
    assert _snapshot(copy) == before


def test_the_error_page_of_a_bad_folder_is_safe_for_a_terminal_and_names_no_path(store, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    copy = root / "evil"
    shutil.copytree(store, copy)

    def evil_label(line):
        line["methods"]["n\x1b]0;owned\x07one"] = line["methods"].pop("none")
        line["methods"]["n\x1b]0;owned\x07one"]["all"]["dot_star"] = "0.5"
    _edit_line(copy / "results.jsonl", 0, evil_label)
    db = tmp_path / "empty.db"
    Store(db).close()
    with TestClient(create_app(db, settings=WebSettings(align_results=(str(root),))),
                    base_url="http://127.0.0.1") as client:
        for url in ("/align/evil", "/api/align/evil"):
            page = client.get(url)
            text = page.json()["detail"] if url.startswith("/api") else page.text
            assert page.status_code == 422 and "results.jsonl line 1" in text, (url, text)
            assert "\x1b" not in text and "\x07" not in text and "\\x1b" in text, url
            assert str(tmp_path) not in text and "align result evil/results.jsonl" in text, url


@pytest.mark.parametrize("export, words", [
    ("{store}/sub", "inside the align store"),
    ("{other}/sub", "inside the align store"),
    ("", "--export is empty"),
    (" ", "--export is empty"),
])
def test_export_is_never_inside_a_store_nor_empty(store, tmp_path, capsys, export, words):
    other = tmp_path / "other"
    shutil.copytree(store, other)
    before = _snapshot(store), _snapshot(other)
    target = export.format(store=store, other=other)
    capsys.readouterr()
    assert align_cli.main(["--store", str(store), "--report", "--export", target]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert (_snapshot(store), _snapshot(other)) == before


def test_an_empty_summary_path_is_refused_not_ignored(store, capsys):
    capsys.readouterr()
    assert align_cli.main(["--store", str(store), "--report", "--summary", ""]) == 2
    assert "--summary is empty" in capsys.readouterr().err
