"""Hostile use, as a user tried it: interrupted `oar attribute` runs, bad input lines, damaged
checkpoints and stores, non-finite and malformed web requests, bad numbers on the command line.
Every case checks the exit code (or HTTP status), that the answer is one line (never a
traceback) and that nothing already written was lost."""
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from hostile_helpers import (ROOT, PY, _line, _write_input, _run, _one_line_error, _jsonl_lines,
                             _store_lines, _out_lines, _attribute, _checkpoint, _too_many_ids)

from oar_attrib import cli

# ------------------------------------------------------------------ interrupted runs resume


class Interrupted(BaseException):
    """A kill, delivered deterministically after a number of batches."""


@pytest.mark.parametrize("suffix", [".jsonl", ".db"])
def test_an_interrupted_run_keeps_its_lines_and_a_rerun_completes_it(tmp_path, problems, suffix,
                                                                     monkeypatch, capsys):
    import oar_attrib.attribution as attribution

    src = _write_input(tmp_path / "in.jsonl", problems[:10])
    reference = tmp_path / f"reference{suffix}"
    assert _run(_attribute(src, reference, "--batch-size", "3"), capsys)[0] == 0

    real, calls = attribution.attribute, []

    def dies_on_third_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise Interrupted
        return real(*args, **kwargs)

    out = tmp_path / f"out{suffix}"
    monkeypatch.setattr(attribution, "attribute", dies_on_third_batch)
    with pytest.raises(Interrupted):
        cli.main(_attribute(src, out, "--batch-size", "3"))
    assert _out_lines(out) == [1, 2, 3, 4, 5, 6]  # both finished batches, nothing partial
    monkeypatch.setattr(attribution, "attribute", real)

    code, lines = _run(_attribute(src, out, "--batch-size", "3"), capsys)
    assert code == 0 and "6 lines already there" in lines[-1], lines
    assert _out_lines(out) == list(range(1, 11))  # complete, no duplicates
    code, lines = _run(_attribute(src, out, "--batch-size", "3"), capsys)  # nothing left to do
    assert code == 0 and "wrote 0 attributions" in lines[-1] and _out_lines(out) == list(range(1, 11))
    if suffix == ".jsonl":  # resumed batches align with the uninterrupted run's: same numbers
        got = [json.loads(x) for x in out.read_text().splitlines()]
        want = [json.loads(x) for x in reference.read_text().splitlines()]
        assert [g["scores"] for g in got] == [w["scores"] for w in want]
    else:
        from oar_attrib.store import Store

        with Store(out, readonly=True) as store:
            (run,) = store.runs()
            assert run.n_traces == 10 and store.report(run.id)


def test_a_line_cut_short_by_a_kill_is_dropped_and_redone(tmp_path, problems, capsys):
    src = _write_input(tmp_path / "in.jsonl", problems[:4])
    out = tmp_path / "out.jsonl"
    assert _run(_attribute(src, out), capsys)[0] == 0
    full = out.read_text().splitlines()
    out.write_text("\n".join(full[:2]) + "\n" + full[2][: len(full[2]) // 2])  # killed mid-write
    assert _run(_attribute(src, out), capsys)[0] == 0
    assert _jsonl_lines(out) == [1, 2, 3, 4]


def test_resuming_with_other_methods_is_refused_and_changes_nothing(tmp_path, problems, capsys):
    src = _write_input(tmp_path / "in.jsonl", problems[:2])
    out = tmp_path / "out.jsonl"
    assert _run(_attribute(src, out), capsys)[0] == 0
    before = out.read_bytes()
    _one_line_error(["attribute", "--input", str(src), "--out", str(out), "--methods", "entropy"],
                    capsys, "--methods: oar_p there, entropy here", "new --out")
    assert out.read_bytes() == before


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".jsonl", ".db"])
def test_a_killed_process_keeps_every_finished_line(tmp_path, problems, suffix, capsys):
    src = _write_input(tmp_path / "in.jsonl", problems)
    out = tmp_path / f"out{suffix}"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([PY, "-m", "oar_attrib.cli", *_attribute(src, out, "--batch-size", "1")],
                            env=env, stderr=subprocess.DEVNULL)
    deadline, seen = time.monotonic() + 120, []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            seen = _out_lines(out) if out.exists() else []
        except (sqlite3.Error, ValueError):  # the schema is being created / a line half written
            seen = []
        if len(seen) >= 3:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    if suffix == ".jsonl":
        kept = [json.loads(x)["line"] for x in out.read_text().split("\n")[:-1]]  # whole lines
    else:
        kept = _store_lines(out)
    assert len(kept) >= 3 and kept == list(range(1, len(kept) + 1))
    assert _run(_attribute(src, out), capsys)[0] == 0
    assert _out_lines(out) == list(range(1, len(problems) + 1))


# ------------------------------------------------------------------ --input and --out checked first


def test_bad_out_paths_fail_before_the_model_loads(tmp_path, problems, no_model, capsys):
    src = _write_input(tmp_path / "in.jsonl", problems[:1])
    a_file = tmp_path / "plain.txt"
    a_file.write_text("keep me")
    _one_line_error(_attribute(src, tmp_path / "missing" / "out.jsonl"), capsys, "does not exist")
    _one_line_error(_attribute(src, tmp_path / "missing" / "out.db"), capsys, "does not exist")
    _one_line_error(_attribute(src, tmp_path), capsys, "is a folder")
    _one_line_error(_attribute(src, a_file / "out.jsonl"), capsys, "is a file, not a folder")
    assert a_file.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "plain.txt"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_nobody_can_create_files_in_fails_before_the_model_loads(tmp_path, problems,
                                                                          no_model, capsys):
    src = _write_input(tmp_path / "in.jsonl", problems[:1])
    _one_line_error(_attribute(src, "/proc/oar-out.jsonl"), capsys, "cannot")
    _one_line_error(_attribute(src, "/proc/oar-out.db"), capsys, "/proc/oar-out.db")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_folder_fails_before_the_model_loads(tmp_path, problems, no_model, capsys):
    src = _write_input(tmp_path / "in.jsonl", problems[:1])
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    _one_line_error(_attribute(src, locked / "out.jsonl"), capsys, "no permission")


def test_a_store_with_a_newer_schema_fails_before_the_model_loads(tmp_path, problems, no_model,
                                                                  capsys):
    from oar_attrib.store import SCHEMA_VERSION

    src = _write_input(tmp_path / "in.jsonl", problems[:1])
    db = tmp_path / "future.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = db.read_bytes()
    _one_line_error(_attribute(src, db), capsys, "newer than this oar-attrib", "upgrade")
    assert db.read_bytes() == before


def test_a_missing_or_folder_input_fails_before_the_model_loads(tmp_path, no_model, capsys):
    _one_line_error(_attribute(tmp_path / "nope.jsonl", tmp_path / "o.jsonl"), capsys, "does not exist")
    _one_line_error(_attribute(tmp_path, tmp_path / "o.jsonl"), capsys, "is a folder")
    assert not (tmp_path / "o.jsonl").exists()


# ------------------------------------------------------------------ every line judged alone


def test_bad_lines_are_reported_by_line_number_and_the_good_ones_attributed(tmp_path, problems,
                                                                           capsys):
    good = [_line(p).encode() for p in problems[:5]]
    chat_ok = json.dumps({"prompt": [{"role": "user", "content": problems[5].prompt}],
                          "response": problems[5].solution}).encode()
    lines = [
        b"\xef\xbb\xbf" + good[0],                                                # 1 BOM: fine
        json.dumps({"prompt": "caf\u00e9", "response": "x #### 1"}).encode("latin-1"),  # 2 ascii
        '{"prompt": "café", "response": "x #### 1"}'.encode("latin-1"),          # 3 latin-1
        good[1],                                                                  # 4
        '{"prompt": "x", "response": "y"}'.encode("utf-16"),                      # 5 UTF-16
        bytes(b for b in range(256) if b != 10),                                  # 6 binary
        b'{"prompt": "x\\ud800", "response": "y #### 1"}',                        # 7 surrogate
        json.dumps({"prompt": problems[6].prompt, "response": ""}).encode(),     # 8 empty
        good[2],                                                                  # 9
        json.dumps({"prompt": problems[7].prompt,
                    "response": "1+1=2. " * 300 + "#### 2"}).encode(),            # 10 too long
        json.dumps({"prompt": [{"role": 1}], "response": "a #### 1"}).encode(),  # 11 bad chat
        chat_ok,                                                                  # 12 no template
        b"{not json",                                                             # 13
        good[3],                                                                  # 14
    ]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    code, err = _run(_attribute(src, out), capsys)
    assert code == 2
    reports = {int(x.split(":")[1]): x for x in err if x.startswith(str(src))}
    assert sorted(reports) == [3, 5, 6, 7, 8, 10, 11, 12, 13]
    kinds = {3: "not_utf8", 5: "not_utf8", 6: "not_utf8", 7: "surrogate", 8: "empty_response",
             10: "too_long", 11: "bad_chat", 12: "unscorable", 13: "not_json"}
    for number, kind in kinds.items():
        assert f"skipped ({kind})" in reports[number]
    assert "no chat_template" in reports[12]
    assert err[-1].endswith("9 bad lines skipped (bad_chat 1, empty_response 1, not_json 1, "
                            "not_utf8 3, surrogate 1, too_long 1, unscorable 1)")
    assert _jsonl_lines(out) == [1, 2, 4, 9, 14]


def test_a_utf16_file_is_named_as_such(tmp_path, problems, capsys):
    src = tmp_path / "in.jsonl"
    src.write_bytes("".join(_line(p) + "\n" for p in problems[:2]).encode("utf-16"))
    code, err = _run(_attribute(src, tmp_path / "out.jsonl"), capsys)
    assert code == 2 and "looks UTF-16" in err[0] and "wrote 0 attributions" in err[-1]


def test_an_overlong_line_is_skipped_without_being_read_whole(tmp_path):
    from oar_attrib.jsonl import iter_jsonl

    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"a": 1}\n' + b'{"b": "' + b"x" * 5000 + b'"}\n{"c": 3}\n')
    got = list(iter_jsonl(src, max_bytes=100))
    assert got[0] == (1, {"a": 1}) and got[2] == (3, {"c": 3})
    assert got[1][0] == 2 and got[1][1].kind == "too_long"


def test_store_import_shares_the_reader(tmp_path):
    from oar_attrib.store import Store, StoreError

    src = tmp_path / "records.jsonl"
    src.write_bytes(b'\xef\xbb\xbf\n{"x": "\xff"}\n')
    with Store(tmp_path / "s.db") as store, pytest.raises(StoreError, match=r"records.jsonl:2 .*not UTF-8"):
        store.import_jsonl(src)


# ------------------------------------------------------------------ models checked on loading


def _break_vocab(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 9}))


def _truncate_weights(folder: Path, keep: int) -> None:
    """Keep the first `keep` bytes (the header cut) or drop the last -`keep` (data cut)."""
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:keep])


@pytest.mark.parametrize("damage, words", [
    (_too_many_ids, ("tokenizer has 357 ids but the model's embedding only 317 rows",)),
    (lambda f: [(f / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")],
     ("has no tokenizer files",)),
    (_break_vocab, ("config.json does not match its weights", "embed_tokens")),
    (lambda f: _truncate_weights(f, 1000), ("is damaged",)),
    (lambda f: _truncate_weights(f, -64), ("is damaged",)),
])
def test_a_broken_checkpoint_is_one_line_on_the_cli(tmp_path, problems, damage, words, capsys):
    folder = _checkpoint(tmp_path, "ckpt")
    damage(folder)
    src = _write_input(tmp_path / "in.jsonl", problems[:1])
    out = tmp_path / "out.jsonl"
    _one_line_error([*_attribute(src, out), "--model", str(folder)], capsys, *words)
    assert not out.exists() and not (tmp_path / "out.jsonl.lock").exists()  # refused after --out was opened


@pytest.mark.parametrize("device, words", [("bogus", "unknown device 'bogus'"),
                                           ("cuda:99", "CUDA")])
def test_a_device_that_does_not_exist_is_one_line(tmp_path, problems, device, words, capsys):
    src = _write_input(tmp_path / "in.jsonl", problems[:1])
    _one_line_error([*_attribute(src, tmp_path / "o.jsonl"), "--device", device], capsys, words)


# ------------------------------------------------------------------ numbers on the command line


@pytest.mark.parametrize("n", ["0", "-5"])
def test_eval_needs_at_least_one_problem(n, no_model, capsys):
    # -5 is out of every count's range (commands.check_flag_numbers), 0 of eval's own
    want = "--n must be at least 1" if n == "0" else "--n must be an integer from 0 to"
    _one_line_error(["eval", "--n", n, "--no-progress"], capsys, want, f"got {n}")


def test_train_checks_override_types_in_dry_run(capsys):
    code, lines = _run(["train", "--dry-run", "learning_rate=abc"], capsys)
    assert code == 2 and lines == ["oar train: error: trainer.learning_rate='abc' does not fit the "
                                   "type float; give a value of that type"]
    _one_line_error(["train", "--dry-run", "max_steps=1.5"], capsys, "max_steps=1.5", "int")
    _one_line_error(["train", "--dry-run", "eval_every=often"], capsys, "run.eval_every")
    assert _run(["train", "--dry-run", "learning_rate=3e-4", "run_name=7"], capsys)[0] == 0


def test_train_resume_and_config_are_checked_first(tmp_path, capsys):
    _one_line_error(["train", "--resume", str(tmp_path / "nope")], capsys, "no checkpoint folder")
    _one_line_error(["train", "--resume", "latest", f"output_dir={tmp_path}"], capsys,
                    "no checkpoint-N folder")
    binary = tmp_path / "config.yaml"
    binary.write_bytes(bytes(range(256)))
    _one_line_error(["train", "--config", str(binary), "--dry-run"], capsys, "not a text file")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    _one_line_error(["train", "--config", str(listed), "--dry-run"], capsys, "must be a mapping")


# ------------------------------------------------------------------ sharded over processes


def _torchrun(tmp_path: Path, argv: list[str]) -> subprocess.CompletedProcess:
    import socket

    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
           "127.0.0.1", "--master_port", str(port), "-m", "oar_attrib.cli", *argv]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)


@pytest.mark.slow
def test_two_processes_shard_the_lines_resume_and_end_in_one_store(tmp_path, problems, capsys):
    """Rank r of 2 takes lines r+1, r+3, ...; an earlier run left lines 1-2 in the store and
    line 4 in rank 1's part file: they are kept, not redone, and the result is one run holding
    every line once, with the scores of a one-process run."""
    from oar_attrib.cli import build_parser, outputs
    from oar_attrib.cli.attribute import attribute_flags, open_output
    from oar_attrib.store import Store

    src = _write_input(tmp_path / "in.jsonl", problems[:9])
    reference = tmp_path / "reference.jsonl"
    assert _run(_attribute(src, reference), capsys)[0] == 0
    want = {json.loads(x)["line"]: json.loads(x) for x in reference.read_text().splitlines()}
    out = tmp_path / "out.db"
    earlier = open_output(attribute_flags(build_parser().parse_args(_attribute(src, out))))
    earlier.write([want[1], want[2]])
    earlier.close(finish=False)
    outputs.part_path(out, 1, 2).write_text(json.dumps(want[4]) + "\n")

    got = _torchrun(tmp_path, _attribute(src, out, "--batch-size", "2"))
    assert got.returncode == 0, got.stderr[-3000:]
    assert "wrote 6 attributions" in got.stderr and "3 lines already there" in got.stderr
    assert sorted(_out_lines(out)) == list(range(1, 10)) and len(_out_lines(out)) == 9
    assert not outputs.part_files(out)  # merged and removed
    with Store(out, readonly=True) as store:
        (run,) = store.runs()
        for record in store.iter_traces(run.id):
            line = record.extra["line"]
            got_scores = record.to_attribution().scores["oar_p"]
            assert got_scores == pytest.approx(want[line]["scores"]["oar_p"], abs=1e-5), line


def test_parts_merge_in_line_order_once_even_when_resumed_out_of_order(tmp_path):
    from oar_attrib.cli import outputs

    out = tmp_path / "out.jsonl"
    record = lambda n: {"line": n, "response": "", "params": {}, "scores": {"oar_p": [float(n)]},  # noqa: E731
                        "probe": "as_mean"}
    out.write_text(json.dumps(record(1)) + "\n")
    parts = {(0, 2): [5, 3, 1], (1, 2): [4, 2, 6], (0, 3): [2, 7]}  # resumed parts, a leftover
    for (rank, world), lines in parts.items():
        text = "".join(json.dumps(record(n)) + "\n" for n in lines)
        outputs.part_path(out, rank, world).write_text(text + '{"line": 8, "cut sh')  # a kill
    final = outputs.JsonlOutput(out, {"methods": {"oar_p": {}}, "settings": {"probe": "as_mean"}})
    assert outputs.merge_parts(final, out, batch=2) == 6
    final.close()
    assert _jsonl_lines(out) == [1, 2, 3, 4, 5, 6, 7] and not outputs.part_files(out)
    assert [json.loads(x)["scores"]["oar_p"] for x in out.read_text().splitlines()] == \
        [[float(n)] for n in range(1, 8)]
