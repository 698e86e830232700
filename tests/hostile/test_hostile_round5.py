"""Hostile use, round 5: the writer lock and the files appended to are judged before anything is
written. A `<out>.lock` that is a link, a FIFO, a folder, a hard link or another file is refused
in one line by every door that takes the lock, and its target is left byte for byte; a file that
is not the command's own output (a one-line `json.dump`, another program's lines, another
command's output) is refused by every door that appends (`jsonl.AppendLog`) and left byte for
byte; a resumed output holding a repeated line or keys no line has is refused; a refusal after
the output was opened (a model config out of bounds) leaves no file and no lock, and a clean
exit leaves no lock; question rows run on a model without a chat template; a refused count is
answered in the documented form, and a Ctrl-C'd import counts what the store holds."""
import errno
import json
import os
from pathlib import Path

import pytest

from hostile_helpers import _after_estimate, _attribute, _checkpoint, _jsonl_lines, _write_input

# ------------------------------------------------------------------ fixtures: inputs of every door


@pytest.fixture
def inputs(tmp_path, problems) -> dict:
    """The input files of the doors: attribute's pairs, generate's and recall's questions,
    import's rollouts."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    questions = folder / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question": f"What is {i} + 2?", "answer": str(i + 2)}) + "\n"
                                 for i in range(2)))
    rollouts = folder / "rollouts.jsonl"
    rollouts.write_text("".join(json.dumps({"prompt": p.prompt, "response": p.solution, "reward": float(i % 2),
                                            "group": 0}) + "\n" for i, p in enumerate(problems[:2])))
    return {"pairs": _write_input(folder / "pairs.jsonl", problems[:2]), "questions": questions,
            "rollouts": rollouts}


def _argv(door: str, out: Path, inputs: dict) -> list:
    """The command line of `door` writing `out`."""
    if door.startswith("attribute"):
        return _attribute(inputs["pairs"], out)
    return {
        "generate --out": lambda: ["generate", "--model", "arith-tiny", "--data", inputs["questions"], "--out",
                                   out, "--samples", "2", "--max-new-tokens", "8", "--temperature", "1",
                                   "--answer-format", "gsm8k", "--no-progress"],
        "import --out": lambda: ["import", "jsonl", inputs["rollouts"], "--out", out, "--model", "arith-tiny"],
        "align --store": lambda: ["align", "--model", "arith-tiny", "--methods", "none", "random", "--quick",
                                  "--no-progress", "--n-boot", "200", "--store", out],
        "recall data --cf-cache": lambda: ["recall", "data", "--data", inputs["pairs"], "--n", "1",
                                           "--no-progress", "--cf-cache", out],
        "recall graded --cf-cache": lambda: ["recall", "graded", "--n", "1", "--no-progress", "--cf-cache", out],
        "recall advantage --cf-cache": lambda: ["recall", "advantage", "--n", "2", "--no-progress",
                                                "--cf-cache", out],
    }[door]()


OUT_NAMES = {"attribute --out x.jsonl": "x.jsonl", "attribute --out x.db": "x.db", "generate --out": "x.jsonl",
             "import --out": "x.db", "align --store": "store", "recall data --cf-cache": "cache.jsonl",
             "recall graded --cf-cache": "cache.jsonl", "recall advantage --cf-cache": "cache.jsonl"}

# ------------------------------------------------------------------ family 1: the writer lock


def _link(lock: Path, victim: Path) -> None:
    lock.symlink_to(victim)


def _dangling(lock: Path, victim: Path) -> None:
    lock.symlink_to(victim.with_name("nothing-here"))


def _folder(lock: Path, victim: Path) -> None:
    lock.mkdir()
    (lock / "notes.txt").write_text("mine\n")


LOCKS = {
    "a symbolic link": (_link, "a symbolic link"),
    "a dangling link": (_dangling, "a symbolic link"),
    "a FIFO": (lambda lock, victim: os.mkfifo(lock), "a FIFO"),
    "a folder": (_folder, "a folder"),
    "a hard link": (lambda lock, victim: os.link(victim, lock), "a hard link"),
    "another file": (lambda lock, victim: lock.write_text("my notes, not a pid\n"), "not a lock file"),
}
LOCK_DOORS = ("attribute --out x.jsonl", "attribute --out x.db", "generate --out", "import --out", "align --store")


def _kind(path: Path):
    """What is at `path`, as far as a refusal may change it: link target, bytes, entries."""
    if path.is_symlink():
        return ("link", os.readlink(path))
    if path.is_fifo():
        return ("fifo",)
    if path.is_dir():
        return ("folder", sorted(p.name for p in path.iterdir()))
    return ("file", path.read_bytes())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and links")
@pytest.mark.parametrize("door", LOCK_DOORS)
@pytest.mark.parametrize("case", list(LOCKS))
def test_a_lock_path_that_is_not_a_lock_file_is_refused_and_left_as_it_is(door, case, tmp_path, inputs,
                                                                          refused, no_model):
    make, words = LOCKS[case]
    out = tmp_path / OUT_NAMES[door]
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\x00bytes\n")
    lock = tmp_path / f"{out.name}.lock"
    make(lock, victim)
    before = _kind(lock)
    refused(*_argv(door, out, inputs), words=("lock file", words, "left as it is"))
    assert victim.read_bytes() == b"precious\x00bytes\n" and _kind(lock) == before
    assert not out.exists() and not victim.with_name("nothing-here").exists()


@pytest.mark.parametrize("case", ["a symbolic link", "a FIFO", "another file"])
def test_attribute_in_place_shares_the_lock_rule(case, tmp_path, refused):
    from hostile_helpers import _demo_store

    db = _demo_store(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    lock = tmp_path / "web.db.lock"
    LOCKS[case][0](lock, victim)
    before = db.read_bytes(), _kind(lock)
    refused("attribute", "--store", db, "--run", 1, "--methods", "entropy", "--no-progress",
            words=("lock file", LOCKS[case][1]))
    assert (db.read_bytes(), _kind(lock)) == before and victim.read_bytes() == b"precious\n"


def test_a_lock_is_deleted_when_let_go_and_a_stale_handle_is_never_a_second_lock(tmp_path, monkeypatch):
    """The race that deleting a lock file opens: a writer that opened the file just before its
    holder deleted it must not hold a lock on the deleted file while a third holds the new one."""
    from oar_attrib.store.errors import WriterBusyError
    from oar_attrib.store.lock import WriterLock

    out = tmp_path / "out.jsonl"
    first = WriterLock(out)
    stale = os.open(first.path, os.O_RDWR)  # opened by a second writer just before the release
    first.release()
    assert not first.path.exists()
    real, handed = WriterLock._open, []

    def open_stale_first(self):
        if not handed:
            handed.append(stale)
            return stale
        return real(self)

    monkeypatch.setattr(WriterLock, "_open", open_stale_first)
    second = WriterLock(out)  # takes the stale file's lock, sees it is not the path's, tries again
    monkeypatch.setattr(WriterLock, "_open", real)
    assert second.path.read_text() == f"{os.getpid()}\n"
    with pytest.raises(WriterBusyError):
        WriterLock(out)  # the file at the path is held: one writer
    second.release()
    assert not second.path.exists()


def test_clean_runs_leave_no_lock_and_a_refused_model_leaves_no_file(tmp_path, inputs, oar):
    """The lock is deleted on a clean exit (attribute into a JSONL and a store, generate,
    import, an instrument's cache), and a model refused after --out was opened leaves neither --out (nor a cache
    holding only a record of the refused model) nor its lock."""
    for door in ("attribute --out x.jsonl", "attribute --out x.db", "generate --out", "import --out",
                 "recall data --cf-cache", "recall advantage --cf-cache"):
        out = tmp_path / door.replace(" ", "_").replace("-", "") / OUT_NAMES[door]
        out.parent.mkdir()
        code, _ = oar(*_argv(door, out, inputs), *(["--methods", "entropy"] if "attribute" in door else []))
        assert code == 0 and out.exists() and list(out.parent.glob("*.lock")) == [], door
    folder = _checkpoint(tmp_path, "many-heads")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_attention_heads": 10 ** 9}))
    for door in ("attribute --out x.jsonl", "attribute --out x.db", "generate --out", "recall data --cf-cache"):
        out = tmp_path / "refused" / OUT_NAMES[door]
        out.parent.mkdir(exist_ok=True)
        code, lines = oar(*_argv(door, out, inputs), "--model", folder)
        assert code == 2 and len(lines) == 1 and "num_attention_heads" in lines[0], (door, lines)
        assert list(out.parent.iterdir()) == [], door


# ------------------------------------------------------------------ family 2: foreign outputs

FOREIGN = {
    "a one-line json.dump": b'{"settings": {"lr": 0.1}, "notes": "mine"}',
    "two JSON lines, the last cut": b'{"a": 1}\n{"b": 2}',
    "text lines": b"first note\nsecond note\n",
    "blank lines": b"\n\n",
}
APPEND_DOORS = ("attribute --out x.jsonl", "generate --out", "recall data --cf-cache", "recall graded --cf-cache",
                "recall advantage --cf-cache", "attribute --out x.db", "import --out")


def _sqlite_of_another_program(path: Path) -> bytes:
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("door", APPEND_DOORS)
@pytest.mark.parametrize("case", [*FOREIGN, "another program's SQLite file"])
def test_a_file_that_is_not_the_commands_own_is_refused_and_left_byte_for_byte(door, case, tmp_path, inputs,
                                                                               refused, no_model):
    out = tmp_path / OUT_NAMES[door]
    if case in FOREIGN:
        out.write_bytes(FOREIGN[case])
    before = out.read_bytes() if case in FOREIGN else _sqlite_of_another_program(out)
    refused(*_argv(door, out, inputs), words=(str(out),))
    assert out.read_bytes() == before and list(tmp_path.glob("*.lock")) == []


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, problems):
    """An `oar attribute` output and an `oar generate` one, each made by its command."""
    from oar_attrib import cli

    folder = tmp_path_factory.mktemp("outputs")
    src = _write_input(folder / "in.jsonl", problems[:3])
    assert cli.main([str(a) for a in _attribute(src, folder / "attributed.jsonl", "--methods", "entropy")]) == 0
    questions = folder / "q.jsonl"
    questions.write_text(json.dumps({"question": "What is 1 + 2?", "answer": "3"}) + "\n")
    assert cli.main([str(a) for a in _argv("generate --out", folder / "answers.jsonl",
                                           {"questions": questions})]) == 0
    return {"attribute": folder / "attributed.jsonl", "generate": folder / "answers.jsonl", "input": src,
            "questions": questions}


@pytest.mark.parametrize("door, other", [("attribute --out x.jsonl", "generate"), ("generate --out", "attribute")])
def test_another_commands_output_is_refused_unchanged(door, other, outputs, tmp_path, inputs, refused, no_model):
    out = tmp_path / "other.jsonl"
    out.write_bytes(outputs[other].read_bytes())
    refused(*_argv(door, out, inputs), words=("left as it is",))
    assert out.read_bytes() == outputs[other].read_bytes()


def test_ctrl_c_keeps_the_written_lines_and_deletes_the_lock(outputs, tmp_path, oar, monkeypatch):
    import oar_attrib.attribution as attribution

    real, calls = attribution.attribute, []

    def interrupted_at_the_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(attribution, "attribute", interrupted_at_the_second_batch)
    out = tmp_path / "out.jsonl"
    code, err = oar(*_attribute(outputs["input"], out, "--methods", "entropy", "--batch-size", "1"))
    assert code == 130 and _after_estimate(err) == [f"oar attribute: interrupted; 1 lines kept in {out}, rerun the same "
                                   "command to resume"], err
    assert _jsonl_lines(out) == [1] and not (tmp_path / "out.jsonl.lock").exists()


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _with_extra_key(line: str) -> str:
    return json.dumps({**json.loads(line), "injected": "<script>"}) + "\n"


RESUMED = {
    "a repeated line": (lambda lines: lines + lines[:1], "repeats input line 1"),
    "a line with extra keys": (lambda lines: lines[:1] + [_with_extra_key(lines[1])] + lines[2:], "injected"),
    "a foreign line in the middle": (lambda lines: lines[:1] + ['{"note": 1}\n'] + lines[1:],
                                     "is not a line of oar attribute"),
    "a line that is not JSON": (lambda lines: lines[:1] + ["not json\n"] + lines[1:],
                                "is not a line of oar attribute"),
}


GENERATED = {
    "a repeated line": (lambda lines: lines + lines[:1], "repeats the answer on line 1"),
    "a line with extra keys": (lambda lines: lines[:1] + [_with_extra_key(lines[1])] + lines[2:], "injected"),
}


@pytest.mark.parametrize("door, case", [*(("attribute", c) for c in RESUMED), *(("generate", c) for c in GENERATED)])
def test_a_resumed_output_with_nonsense_lines_is_refused_unchanged(door, case, outputs, tmp_path, refused,
                                                                   no_model):
    edit, words = (RESUMED if door == "attribute" else GENERATED)[case]
    out = tmp_path / "resumed.jsonl"
    out.write_text("".join(edit(_lines(outputs[door]))), encoding="utf-8")
    before = out.read_bytes()
    argv = (_attribute(outputs["input"], out, "--methods", "entropy") if door == "attribute"
            else _argv("generate --out", out, {"questions": outputs["questions"]}))
    refused(*argv, words=(words, "left as it is"))
    assert out.read_bytes() == before and not (tmp_path / "resumed.jsonl.lock").exists()


def test_every_key_of_an_output_line_is_one_its_resume_knows(outputs):
    from oar_attrib.cli.outputs import line_keys
    from oar_attrib.rollouts import ANSWER_KEYS

    for line in _lines(outputs["attribute"]):
        assert set(json.loads(line)) <= line_keys()
    for line in _lines(outputs["generate"]):
        assert set(json.loads(line)) == ANSWER_KEYS


def test_an_own_output_cut_by_a_kill_still_resumes(outputs, tmp_path, oar):
    out = tmp_path / "cut.jsonl"
    lines = _lines(outputs["attribute"])
    out.write_text("".join(lines[:2]) + lines[2][:50], encoding="utf-8")
    code, err = oar(*_attribute(outputs["input"], out, "--methods", "entropy"))
    assert code == 0 and "2 lines already there" in err[-1], err
    assert _jsonl_lines(out) == [1, 2, 3]


def test_every_appender_shares_the_owner_rule(tmp_path):
    """The appenders beside the commands (the align folder's logs, the trainer's evaluation
    curve and JSONL run store) refuse a foreign file unchanged, and a write that fails part way
    takes back its own bytes."""
    from oar_attrib.reports.align_folder import RESULTS, SCREEN, AlignFolder
    from oar_attrib.errors import OutputError
    from oar_attrib.jsonl import AppendLog, append_jsonl
    from oar_attrib.training.callbacks import CURVE
    from oar_attrib.training.run_store_hook import RECORDS

    foreign = b'{"mine": true}\n{"also": "mine"}\n'
    for name in (RESULTS, SCREEN):
        (tmp_path / name).write_bytes(foreign)
        with pytest.raises(OutputError, match="left as it is"):
            AlignFolder(tmp_path).append(name, [{"batch": 0}])
        assert (tmp_path / name).read_bytes() == foreign
    for owner in (CURVE, RECORDS):
        path = tmp_path / "log.jsonl"
        path.write_bytes(foreign)
        with pytest.raises(OutputError, match="left as it is"):
            append_jsonl(path, [{"step": 1, "accuracy": 0.5, "params": {}}], owner=owner)
        assert path.read_bytes() == foreign
    path = tmp_path / "own.jsonl"
    path.write_bytes(b'{"step": 0, "accuracy": 0.5}\n')
    real, calls = os.write, []

    def full_disk(fd, data):  # the first write goes part way, the next finds the disk full
        calls.append(1)
        if len(calls) == 1:
            return real(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, "No space left on device")

    with AppendLog(path, owner=CURVE) as log, pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "write", full_disk)
        with pytest.raises(OSError):
            log.write([{"step": 1, "accuracy": 0.75}])
    assert len(calls) == 2 and path.read_bytes() == b'{"step": 0, "accuracy": 0.5}\n'


# ------------------------------------------------------------------ model configs, chat-less models


@pytest.mark.parametrize("key, value", [("num_attention_heads", 10 ** 9), ("num_hidden_layers", 10 ** 7),
                                        ("hidden_size", -32), ("num_key_value_heads", 3), ("vocab_size", 1.5)])
def test_a_config_out_of_bounds_is_one_line_before_anything_is_built(key, value, tmp_path, problems, refused):
    folder = _checkpoint(tmp_path, "ckpt")
    config = json.loads((folder / "config.json").read_text())
    config.pop("layer_types", None)  # else transformers' own validator answers first (also one line)
    (folder / "config.json").write_text(json.dumps({**config, key: value}))
    src = _write_input(tmp_path / "in.jsonl", problems[:1])
    out = tmp_path / "out.jsonl"
    refused(*_attribute(src, out), "--model", folder, words=(key, "config.json"))
    assert not out.exists() and not (tmp_path / "out.jsonl.lock").exists()


def test_recall_data_runs_question_rows_on_a_model_without_a_chat_template(inputs, oar):
    code, err = oar("recall", "data", "--data", inputs["questions"], "--n", "1", "--max-new-tokens", "8",
                    "--cf-positions", "2", "--methods", "entropy", "--no-progress")
    assert code == 0, err


# ------------------------------------------------------------------ messages


def test_a_refused_recall_count_is_in_the_documented_form(refused, no_model):
    line = refused("recall", "world", "--n", "0", "--no-progress")
    assert line == "oar recall world: error: --n must be an integer from 1 to 100000, got 0"


def test_ctrl_c_after_a_commit_counts_the_rows_the_store_holds(tmp_path, inputs, oar, monkeypatch):
    from oar_attrib.store import Store

    rollouts = tmp_path / "many.jsonl"
    rows = [json.loads(line) for line in inputs["rollouts"].read_text().splitlines()] * 6
    rollouts.write_text("".join(json.dumps({**r, "group": i // 2}) + "\n" for i, r in enumerate(rows)))
    real, calls = Store.add_traces, []

    def commit_then_interrupt(self, *args, **kwargs):
        calls.append(1)
        result = real(self, *args, **kwargs)
        if len(calls) == 3:
            raise KeyboardInterrupt  # after the third batch's commit, before its count
        return result

    monkeypatch.setattr(Store, "add_traces", commit_then_interrupt)
    db = tmp_path / "runs.db"
    code, err = oar("import", "jsonl", rollouts, "--out", db, "--model", "arith-tiny", "--batch-size", "3")
    with Store(db, readonly=True) as store:
        (run,) = store.runs()
        held = len(store.trace_extras(run.id, "row"))
    assert code == 130 and held == 9
    assert err == [f"oar import: interrupted; the 9 rows of this run in {db} are kept, rerun the same "
                   "command to resume"]
