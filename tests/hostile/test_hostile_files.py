"""Hostile files: another application's SQLite file given as a store (whatever its
user_version), a disk that fills up during `oar attribute` (JSONL and store), a read-only
place, and damaged checkpoints given to `oar train --resume`. Each is one line on stderr, exit
status 2, never a traceback (the real `oar` in a subprocess, for each family), and nothing
already written is changed or lost."""
import json
import pickle
import sqlite3
import subprocess
from pathlib import Path

import pytest

from hostile_helpers import (PY, ENV, _write_input, _run, _one_line_error, _jsonl_lines, _out_lines, _after_estimate,
                             _attribute, _checkpoint, _ours)


FOREIGN = "is an SQLite file not written by oar-attrib (not a run store); it was left unchanged"


def _oar(*argv, code: str | None = None) -> subprocess.CompletedProcess:
    """The real command line in a new process (`code`: a wrapper that ends in main(argv))."""
    head = [PY, "-c", code] if code else [PY, "-m", "oar_attrib.cli"]
    return subprocess.run([*head, *map(str, argv)], env=ENV, capture_output=True, text=True,
                          timeout=300)


def _foreign(path: Path, user_version: int) -> bytes:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('kept')")
        conn.execute(f"PRAGMA user_version = {user_version}")
    conn.close()
    return path.read_bytes()


# ------------------------------------------------------------------ another application's file


@pytest.mark.parametrize("user_version", [0, 1, 7])
def test_a_foreign_sqlite_file_is_refused_unchanged_by_every_writer_and_reader(
        tmp_path, problems, user_version, capsys):
    src = _write_input(tmp_path / "in.jsonl", problems[:2])
    other = tmp_path / "other.db"
    before = _foreign(other, user_version)
    _one_line_error(_attribute(src, other), capsys, str(other), FOREIGN)
    _one_line_error(["experiment", "run", "arith-tiny-grid", f"experiment.store={other}",
                     f"experiment.output_dir={tmp_path / 'runs'}"], capsys, str(other), FOREIGN)
    _one_line_error(["web", "--store", str(other)], capsys, str(other), FOREIGN)
    assert other.read_bytes() == before  # header bytes 18-19 too: never switched to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "other.db"]


def test_no_traceback_for_a_foreign_file_from_the_real_command(tmp_path, problems):
    src = _write_input(tmp_path / "in.jsonl", problems[:2])
    other = tmp_path / "other.db"
    before = _foreign(other, 1)
    done = _oar(*_attribute(src, other))
    assert done.returncode == 2 and len(_ours(done.stderr)) == 1 and FOREIGN in done.stderr
    assert other.read_bytes() == before


# ------------------------------------------------------------------ a disk that fills up

# `oar attribute` whose --out (JSONL) sits on a disk with argv[1] bytes free: the append-only
# log's write past them is cut short and fails with ENOSPC, as a real full disk does.
FULL_JSONL = '''
import errno, os, sys
import oar_attrib.jsonl as jsonl
from oar_attrib.cli import main

free = [int(sys.argv[1])]


class FullDisk:
    """The `os` the append-only log writes through, on a disk with free[0] bytes left."""

    def write(self, fd, data):
        data = bytes(data)
        if len(data) > free[0]:
            os.write(fd, data[:free[0]])  # what fitted reaches the disk
            free[0] = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        free[0] -= len(data)
        return os.write(fd, data)

    def __getattr__(self, name):
        return getattr(os, name)


jsonl.os = FullDisk()
sys.exit(main(sys.argv[2:]))
'''

# `oar attribute` whose --out store may grow by argv[1] pages only: SQLite's own "database or
# disk is full" (SQLITE_FULL), the error of a real full disk.
FULL_STORE = '''
import sys
import oar_attrib.store.schema as schema
from oar_attrib.cli import main

real = schema.connect


def small_disk(path, *, readonly, timeout):
    conn = real(path, readonly=readonly, timeout=timeout)
    if not readonly:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + int(sys.argv[1])}")
    return conn


schema.connect = small_disk
sys.exit(main(sys.argv[2:]))
'''


@pytest.mark.slow
@pytest.mark.parametrize("suffix, code, free", [(".jsonl", FULL_JSONL, 30_000),
                                                (".db", FULL_STORE, 4)])
def test_a_full_disk_is_one_line_keeps_the_written_lines_and_the_rerun_completes(
        tmp_path, problems, suffix, code, free):
    src, out = _write_input(tmp_path / "in.jsonl", problems), tmp_path / f"out{suffix}"
    argv = _attribute(src, out, "--batch-size", "2")
    full = _oar(free, *argv, code=code)
    kept = _out_lines(out) if suffix == ".db" else _jsonl_lines(_complete_lines(out))
    assert full.returncode == 2, full.stderr
    [line] = _after_estimate(_ours(full.stderr))
    if suffix == ".db":
        assert line == (f"oar attribute: error: {out}: the disk is full; nothing already "
                        "committed is lost; free some space and rerun the same command")
    else:
        assert line == (f"oar attribute: error: --out {out} cannot be written (the disk is "
                        f"full); {len(kept)} lines kept; free space or fix the place, then rerun "
                        "the same command to resume")
    assert 0 < len(kept) < len(problems) and kept == list(range(1, len(kept) + 1))
    rerun = _oar(*argv)  # space freed: the same command resumes
    assert rerun.returncode == 0, rerun.stderr
    assert _out_lines(out) == list(range(1, len(problems) + 1))  # each line once


def _complete_lines(path: Path) -> Path:
    """A copy of a JSONL file without a last line the full disk cut short."""
    text = path.read_text(encoding="utf-8")
    copy = path.with_suffix(".complete")
    copy.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")
    return copy


@pytest.mark.parametrize("error, words", [
    ("database or disk is full", "the disk is full"),
    ("attempt to write a readonly database", "cannot be written here (a read-only file"),
])
def test_store_write_errors_are_explained_in_the_cli_and_the_web_app(tmp_path, problems,
                                                                      monkeypatch, capsys,
                                                                      error, words):
    import oar_attrib.store.schema as schema
    from oar_attrib.store import StoreError
    from oar_attrib.webapp import create_app

    src, out = _write_input(tmp_path / "in.jsonl", problems[:2]), tmp_path / "out.db"
    assert _run(_attribute(src, out), capsys)[0] == 0
    before = out.read_bytes()

    def failing(path, readonly, timeout):
        raise sqlite3.OperationalError(error)

    monkeypatch.setattr(schema, "_open", failing)
    code, said = _run(_attribute(src, tmp_path / "new.db"), capsys)  # the store is opened at the first write
    [line] = _after_estimate(said)
    assert code == 2 and words in line and "not a readable SQLite store" not in line, said
    with pytest.raises(StoreError, match=words.replace("(", r"\(")):
        create_app(out)
    _one_line_error(["web", "--store", str(out)], capsys, words)
    assert out.read_bytes() == before


# ------------------------------------------------------------------ damaged checkpoints


def _resumable(tmp_path: Path) -> Path:
    """A checkpoint folder as Trainer saves one: the model, trainer_state.json, optimizer.pt."""
    import torch

    folder = _checkpoint(tmp_path, "checkpoint-1")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": []}))
    torch.save({"state": {}, "param_groups": [{"lr": 1e-5, "params": []}]}, folder / "optimizer.pt")
    return folder


class _RunsCode:
    """A pickle that creates a file when unpickled: weights-only loading must refuse it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES = {
    "safetensors truncated": (lambda f: _truncate(f / "model.safetensors"), "the model cannot be loaded"),
    "safetensors missing": (lambda f: (f / "model.safetensors").unlink(), "model.safetensors is missing"),
    "trainer_state missing": (lambda f: (f / "trainer_state.json").unlink(), "trainer_state.json is missing"),
    "trainer_state bad": (lambda f: (f / "trainer_state.json").write_text("{step: 1"),
                          "trainer_state.json is not valid JSON"),
    "config bad": (lambda f: (f / "config.json").write_text("[1, 2]"), "config.json is not a JSON object"),
    "optimizer truncated": (lambda f: _truncate(f / "optimizer.pt"),
                            "optimizer.pt cannot be read by weights-only loading"),
    "optimizer a pickle of code": (
        lambda f: (f / "optimizer.pt").write_bytes(pickle.dumps(_RunsCode(f.parent / "ran"))),
        "optimizer.pt cannot be read by weights-only loading"),
}


def test_an_undamaged_checkpoint_passes_the_check(tmp_path):
    from oar_attrib.training.launch import check_checkpoint

    check_checkpoint(_resumable(tmp_path))  # else every refusal below would prove nothing


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_checkpoint_is_one_line_naming_the_file(tmp_path, damage, capsys):
    folder = _resumable(tmp_path)
    hurt, words = DAMAGES[damage]
    hurt(folder)
    line = _one_line_error(["train", "--resume", str(folder), f"output_dir={tmp_path / 'out'}"],
                           capsys, str(folder), words, "pass --resume another checkpoint, or "
                           "train without --resume to start fresh")
    assert len(line) < 600
    assert not (tmp_path / "ran").exists()  # the pickle's code never ran
    assert not (tmp_path / "out").exists()  # refused before training began


def test_no_traceback_for_a_damaged_checkpoint_from_the_real_command(tmp_path):
    folder = _resumable(tmp_path)
    DAMAGES["optimizer a pickle of code"][0](folder)
    done = _oar("train", "--resume", folder, f"output_dir={tmp_path / 'out'}")
    assert done.returncode == 2 and len(_ours(done.stderr)) == 1, done.stderr
    assert "optimizer.pt cannot be read by weights-only loading" in done.stderr
    assert not (tmp_path / "ran").exists()
