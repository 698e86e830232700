"""Hostile rollout imports (`oar import`), round 3: values of the wrong type or out of range
(NaN or list steps, 400-digit integers, a completion that is a number, rewards that sum to
inf), rows too long for the model, two runs whose files share names (never merged, resumed
exactly after Ctrl-C, a file named twice read once), odd files in a dump folder (FIFOs,
devices, folders, links out of it) and file names holding terminal escapes. Each bad row is
reported by file and row and skipped, the rest imported; nothing hangs, nothing is a
traceback, and the console never receives a raw control character."""
import json
import os
import signal
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hostile_helpers import _run

from models import write_verl_dump

from oar_attrib.importers.verl import TEXT_RULE, UID_RULE
from oar_attrib.importers.rows import ADVANTAGE_EPS


class Hung(Exception):
    """The command under test did not return in time (it blocked, e.g. opening a FIFO)."""


@pytest.fixture
def deadline():
    """Raise Hung in the test after 60 s: a command blocked in Python (an open of a FIFO)
    fails instead of hanging (a block inside a C library may outlast it)."""
    def expire(signum, frame):
        raise Hung("the command blocked for 60 s")

    before = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)


def _import(capsys, stack, *argv) -> tuple[int, list[str]]:
    code, lines = _run(["import", stack, *map(str, argv)], capsys)
    assert not [line for line in lines if "\x1b" in line or "\x07" in line]  # no raw escape
    # the grouping rule a verl import names first (tests/importers/test_verl_uid.py reads it)
    return code, [line for line in lines if not line.endswith((TEXT_RULE, UID_RULE))]


def _rows(db: Path) -> list[tuple]:
    """(source shown, row, reward, advantage, step, group) of every stored trace, in order."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT json_extract(extra, '$.source'), json_extract(extra, '$.row'), "
                            "reward, advantage, step, grp FROM traces ORDER BY id").fetchall()


def _trl_log(folder: Path, columns: dict, name: str = "completions_00001.parquet") -> Path:
    """A TRL completions parquet file under `folder`/completions, the columns typed as given."""
    out = folder / "completions" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), out)
    return out


def _trl_group(rewards, step: int = 1, prompt: str = "1+1?") -> dict:
    n = len(rewards)
    return {"step": pa.array([step] * n, pa.int64()), "prompt": [prompt] * n,
            "completion": ["1+1=2. #### 2"] * n, "world_reward": pa.array(rewards, pa.float64())}


# ------------------------------------------------------------------ family 1: each value checked


def test_trl_steps_that_are_nan_lists_or_huge_skip_their_rows_only(tmp_path, capsys):
    good = ["1+1=2. #### 2"] * 2
    _trl_log(tmp_path / "nan", {"step": pa.array([1.0, float("nan"), 2.0]), "prompt": ["q"] * 3,
                                "completion": good + ["2+2=4. #### 4"], "r": [1.0, 0.0, 1.0]})
    _trl_log(tmp_path / "list", {"step": pa.array([[1], [2]]), "prompt": ["q", "q"],
                                 "completion": good, "r": [1.0, 0.0]})
    db = tmp_path / "runs.db"
    code, err = _import(capsys, "trl", tmp_path / "nan", "--out", db)
    assert code == 2 and "completions_00001.parquet:2: skipped (fields): the step nan is not an integer" in err[0]
    assert [(r[1], r[4]) for r in _rows(db)] == [(1, 1), (3, 2)]
    code, err = _import(capsys, "trl", tmp_path / "list", "--out", tmp_path / "list.db")
    assert code == 2 and "completions_00001.parquet:1: skipped (fields): the step [1] is not an integer" in err[0]
    assert ":2: skipped (fields): the step [2] is not an integer" in err[1]
    assert err[2] == f"oar import: error: no usable rollout in {[str(tmp_path / 'list')]}; every row was skipped"


def test_a_verl_dump_with_one_bad_row_imports_the_rest(tmp_path, capsys):
    good = write_verl_dump(tmp_path / "dump", steps=(1,))
    path = tmp_path / "dump" / "1.jsonl"
    lines = path.read_text().splitlines()
    big = "1" + "0" * 400
    bad = ['{"input": "q", "output": "a #### 1", "score": 1.0, "step": %s}' % big,  # SQLite overflow
           '{"input": "q", "output": "a #### 1", "score": %s}' % big,  # float overflow
           '{"input": "q", "output": "a #### 1", "score": 1.0, "gts": {"a": [1]}, "acc": NaN}',
           '{"input": "q", "output": 7, "score": 1.0}']
    path.write_text("\n".join(lines[:2] + bad + lines[2:]) + "\n")
    db = tmp_path / "runs.db"
    code, err = _import(capsys, "verl", tmp_path / "dump", "--out", db)
    assert code == 2
    assert f"{path}:3: skipped (fields): the step <an integer of 401 digits> is out of range" in err[0]
    assert f"{path}:4: skipped (bad_reward): the score <an integer of 401 digits> is too large" in err[1]
    assert f"{path}:6: skipped (fields): the output is int 7, not text" in err[2]
    rows = _rows(db)
    assert [r[1] for r in rows] == [1, 2, 5, 7, 8, 9, 10]  # the good rows and row 5 (a dict gold)
    assert len(good) == 6


def test_an_int_completion_is_named_as_an_int(tmp_path, capsys):
    _trl_log(tmp_path / "run", {"step": pa.array([1, 1]), "prompt": ["q", "q"],
                                "completion": pa.array([5, 6]), "r": [1.0, 0.0]})
    code, err = _import(capsys, "trl", tmp_path / "run", "--out", tmp_path / "runs.db")
    assert code == 2 and "skipped (fields): the completion is int 5, not text" in err[0]
    assert "NoneType" not in " ".join(err)


def test_rewards_that_sum_to_inf_are_refused_and_the_group_keeps_finite_advantages(tmp_path, capsys):
    columns = _trl_group([1.0, 0.0, 0.0, 0.0])
    columns["other_reward"] = pa.array([1e308, 0.0, 0.0, 0.0])
    columns["world_reward"] = pa.array([1e308, 1.0, 0.0, 0.0])
    _trl_log(tmp_path / "run", columns)
    db = tmp_path / "runs.db"
    code, err = _import(capsys, "trl", tmp_path / "run", "--out", db)
    assert code == 2 and ":1: skipped (bad_reward): the reward columns sum to inf" in err[0]
    rows = _rows(db)
    assert [r[1] for r in rows] == [2, 3, 4] and all(r[3] is not None for r in rows)
    std = (1 / 3) ** 0.5  # rewards 1, 0, 0: mean 1/3
    assert [r[3] for r in rows] == pytest.approx([x / (std + ADVANTAGE_EPS) for x in (2 / 3, -1 / 3, -1 / 3)])


# ------------------------------------------------------------------ family 2: bounded rows


def _unbounded_tokenizer_model(tmp_path: Path) -> Path:
    """arith-tiny (512 positions) whose tokenizer says "no limit", as converted GGUF ones do."""
    import shutil

    from oar_attrib.models import bundled_path

    folder = tmp_path / "model"
    shutil.copytree(bundled_path(), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 10**30}))
    return folder


def test_rows_past_the_models_positions_or_the_byte_limit_are_skipped(tmp_path, capsys):
    rows = [{"prompt": "a=1. find a.\n", "response": "a=1. #### 1"},
            {"prompt": "a=1. find a.\n", "response": "a=1+1. " * 200 + "#### 1"},  # > 512 tokens
            {"prompt": "a=1. find a.\n", "response": "a=1. " * 400_000 + "#### 1"}]  # 2 MB
    src = tmp_path / "rollouts.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    size = len(rows[2]["prompt"]) + len(rows[2]["response"])
    db = tmp_path / "runs.db"
    code, err = _import(capsys, "jsonl", src, "--out", db, "--model", _unbounded_tokenizer_model(tmp_path))
    assert code == 2
    assert ":2: skipped (too_long):" in err[0] and "more than the model's 512 positions" in err[0]
    assert err[1] == f"{src}:3: skipped (too_long): {size} bytes, more than --max-bytes 1048576"
    assert [r[1] for r in _rows(db)] == [1]
    code, err = _import(capsys, "jsonl", src, "--out", tmp_path / "small.db", "--max-bytes", "20")
    assert code == 2 and all("more than --max-bytes 20" in e for e in err[:3])


# ------------------------------------------------------------------ family 3: sources by content


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Two TRL runs whose logs have the same file name, step and prompt (every run writes
    completions_00001.parquet), with different rewards."""
    a, b = tmp_path / "runA", tmp_path / "runB"
    _trl_log(a, _trl_group([1.0, 0.0, 0.0, 0.0]))
    _trl_log(b, _trl_group([0.0, 0.0, 1.0, 1.0]))
    return a, b


def test_two_runs_with_the_same_file_names_keep_their_own_groups(tmp_path, capsys):
    a, b = _two_runs(tmp_path)
    assert _import(capsys, "trl", a, "--out", tmp_path / "a.db")[0] == 0
    assert _import(capsys, "trl", a, b, "--out", tmp_path / "ab.db")[0] == 0
    alone, both = _rows(tmp_path / "a.db"), _rows(tmp_path / "ab.db")
    high, low = 0.75 / (0.5 + ADVANTAGE_EPS), -0.25 / (0.5 + ADVANTAGE_EPS)  # 1.5, -0.5
    assert [r[3] for r in alone] == pytest.approx([high, low, low, low])
    assert [r[3] for r in both[:4]] == pytest.approx([r[3] for r in alone])
    assert [r[5] for r in both] == [0, 0, 0, 0, 1, 1, 1, 1]  # two groups, not one of eight
    assert [r[0] for r in both] == [str(a / "completions" / "completions_00001.parquet")] * 4 + [
        str(b / "completions" / "completions_00001.parquet")] * 4


def test_a_source_named_twice_is_imported_once(tmp_path, capsys):
    write_verl_dump(tmp_path / "dump", steps=(1,))
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes((tmp_path / "dump" / "1.jsonl").read_bytes())
    db = tmp_path / "runs.db"
    code, err = _import(capsys, "verl", tmp_path / "dump", tmp_path / "dump" / "1.jsonl", copy, "--out", db)
    assert code == 2 and err[0] == f"{copy}: skipped: the same content as {tmp_path / 'dump' / '1.jsonl'}, imported once"
    assert [r[1] for r in _rows(db)] == [1, 2, 3, 4, 5, 6]


def test_ctrl_c_in_an_import_of_two_runs_resumes_each_source_exactly(tmp_path, capsys, monkeypatch):
    from oar_attrib.store import Store

    write_verl_dump(tmp_path / "runA", steps=(1, 2))
    write_verl_dump(tmp_path / "runB", steps=(1, 2), n=4)  # the same names: 1.jsonl, 2.jsonl
    argv = ["verl", tmp_path / "runA", tmp_path / "runB", "--out", tmp_path / "runs.db", "--batch-size", "5"]
    real, calls = Store.add_traces, []

    def interrupted_on_the_third_batch(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Store, "add_traces", interrupted_on_the_third_batch)
    code, err = _import(capsys, *argv)
    assert code == 130 and err == [f"oar import: interrupted; the 10 rows written to "
                                   f"{tmp_path / 'runs.db'} are kept, rerun the same command to resume"]
    monkeypatch.setattr(Store, "add_traces", real)
    code, err = _import(capsys, *argv)
    assert code == 0 and "imported 18 rollouts" in err[-2] and "10 rows already there" in err[-2]
    assert err[-1].startswith("next: oar attribute --store ")
    rows = _rows(tmp_path / "runs.db")
    assert len(rows) == 28 and len({(r[0], r[1]) for r in rows}) == 28  # 12 + 16, each once
    assert sum(r[0].startswith(str(tmp_path / "runB")) for r in rows) == 16


# ------------------------------------------------------------------ family 4: only regular files


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="needs FIFOs and /dev/zero")
def test_odd_files_in_a_dump_folder_are_skipped_with_one_line_each(tmp_path, capsys, deadline):
    dump = tmp_path / "dump"
    write_verl_dump(dump, steps=(1,))
    (dump / "2.jsonl").mkdir()
    os.mkfifo(dump / "3.jsonl")
    (dump / "4.jsonl").symlink_to("/dev/zero")
    (tmp_path / "outside.jsonl").write_text((dump / "1.jsonl").read_text())
    (dump / "5.jsonl").symlink_to(tmp_path / "outside.jsonl")
    db = tmp_path / "runs.db"
    code, err = _import(capsys, "verl", dump, "--out", db)
    assert code == 2
    assert err[:4] == [f"{dump / '2.jsonl'}: skipped: a folder, not a regular file",
                       f"{dump / '3.jsonl'}: skipped: a FIFO (named pipe), not a regular file",
                       f"{dump / '4.jsonl'}: skipped: a link out of {dump} (to /dev/zero)",
                       f"{dump / '5.jsonl'}: skipped: a link out of {dump} (to {tmp_path / 'outside.jsonl'})"]
    assert err[-2].endswith("; 4 files left out") and len(err) == 6
    assert err[-1].startswith("next: oar attribute --store ")
    assert [r[1] for r in _rows(db)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_a_trl_log_or_named_is_never_opened(tmp_path, capsys, deadline):
    run = tmp_path / "run"
    _trl_log(run, _trl_group([1.0, 0.0]), name="completions_00002.parquet")
    os.mkfifo(run / "completions" / "completions_00001.parquet")
    code, err = _import(capsys, "trl", run, "--out", tmp_path / "runs.db")
    assert code == 2 and err[0].endswith("completions_00001.parquet: skipped: a FIFO (named pipe), not a regular file")
    assert len(_rows(tmp_path / "runs.db")) == 2
    code, err = _import(capsys, "trl", run / "completions" / "completions_00001.parquet", "--out", tmp_path / "b.db")
    assert code == 2 and err == [f"oar import: error: {run / 'completions' / 'completions_00001.parquet'} is "
                                 "a FIFO (named pipe), not a regular file; pass a TRL output_dir or its parquet files"]


# ------------------------------------------------------------------ family 5: file names on the console


def test_escapes_in_file_names_and_values_reach_the_console_as_escapes(tmp_path, capsys):
    dump = tmp_path / "dump"
    write_verl_dump(dump, steps=(1,))
    named = dump / "7\x1b]0;pwned\x07.jsonl"
    named.write_text(json.dumps({"input": "q", "output": 5, "score": 1.0}) + "\n"
                     + json.dumps({"input": "q", "output": "a #### 1", "score": "\x1b[2J"}) + "\n")
    code, err = _import(capsys, "verl", dump, "--out", tmp_path / "runs.db")
    assert code == 2
    shown = str(dump) + "/7\\x1b]0;pwned\\x07.jsonl"
    assert err[0] == f"{shown}:1: skipped (fields): the output is int 5, not text"
    assert err[1] == f"{shown}:2: skipped (bad_reward): the score '\\x1b[2J' is not a number"
