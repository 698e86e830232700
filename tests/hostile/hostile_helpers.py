"""What the hostile tests share (the fixtures are in conftest.py): the CLI run and its one-line
answer, inputs written from world problems, the lines an output holds, a copied checkpoint,
slowed `oar attribute` subprocesses, a small demo store. No test module imports another."""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from oar_attrib import cli

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def _line(p) -> str:
    return json.dumps({"prompt": p.prompt, "response": p.solution})


def _write_input(path: Path, problems) -> Path:
    path.write_text("".join(_line(p) + "\n" for p in problems), encoding="utf-8")
    return path


def _run(argv, capsys) -> tuple[int, list[str]]:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # transformers' weight-loading bar is not ours; everything else is.
    return code, [line for line in err.splitlines() if line.strip() and "Loading weights" not in line]


# What `oar attribute` and `oar generate` say of their cost before their work (the estimate,
# `cli.progress.tell_cost`); a line said once the work began (an interrupt, a full disk) follows it.
ESTIMATE = re.compile(r"oar (attribute: \d+ traces with .*Ctrl-C keeps those|generate: \d+ answers to \d+ "
                      r"questions, .*|generate: at most about .*)")


def _after_estimate(lines: list[str]) -> list[str]:
    """`lines` without the estimate lines they open with (there must be at least one)."""
    said = 0
    while said < len(lines) and ESTIMATE.fullmatch(lines[said]):
        said += 1
    assert said, f"no estimate before the work: {lines}"
    return lines[said:]


def _one_line_error(argv, capsys, *words) -> str:
    code, lines = _run(argv, capsys)
    assert code == 2 and len(lines) == 1, lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _jsonl_lines(path: Path) -> list[int]:
    return [json.loads(line)["line"] for line in path.read_text(encoding="utf-8").splitlines()]


def _store_lines(path: Path) -> list[int]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return [r[0] for r in conn.execute(
            "SELECT json_extract(extra, '$.line') FROM traces ORDER BY id")]


def _out_lines(path: Path) -> list[int]:
    return _store_lines(path) if path.suffix == ".db" else _jsonl_lines(path)


def _attribute(src, out, *extra) -> list[str]:
    return ["attribute", "--input", str(src), "--out", str(out), "--methods", "oar_p",
            "--no-progress", *extra]


def _checkpoint(tmp_path: Path, name: str) -> Path:
    from oar_attrib.models import bundled_path

    folder = tmp_path / name
    shutil.copytree(bundled_path(), folder)
    return folder


def _too_many_ids(folder: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tok.add_tokens([f"extra{i}" for i in range(40)])
    tok.save_pretrained(folder)


ENV = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]) + os.pathsep + os.environ.get("PYTHONPATH", "")}


# `oar attribute` with each batch slowed by 0.3 s, so that a writer is still at work when the
# other one starts, and held before a batch while the file $OAR_TEST_HOLD exists, so that a
# test can keep it at work however long the other one takes to start on a loaded machine.
SLOW_OAR = ("import os, sys, time; import oar_attrib.attribution as a; real = a.attribute; "
            "hold = os.environ.get('OAR_TEST_HOLD', ''); "
            "wait = lambda: [time.sleep(0.05) for _ in iter(lambda: bool(hold) and os.path.exists(hold), False)]; "
            "a.attribute = lambda *x, **k: (time.sleep(0.3), wait(), real(*x, **k))[2]; "
            "from oar_attrib.cli import main; sys.exit(main(sys.argv[1:]))")


def _start(src: Path, out: Path, *extra, hold: Path | None = None) -> subprocess.Popen:
    env = {**ENV, "OAR_TEST_HOLD": str(hold or "")}
    return subprocess.Popen([PY, "-c", SLOW_OAR, *_attribute(src, out, *extra)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ours(stderr: str) -> list[str]:
    """The lines of our own on stderr (transformers' weight-loading bar is not ours)."""
    assert "Traceback" not in stderr, stderr
    return [x for x in stderr.splitlines() if x.strip() and "Loading weights" not in x]


def _wait_for_lines(proc: subprocess.Popen, out: Path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if out.exists() and len(_out_lines(out)) >= n:
                return
        except Exception:  # noqa: BLE001 - the schema is being made / a line half written
            pass
        time.sleep(0.05)
    raise AssertionError(f"the first writer did not write {n} lines while running")


def _demo_store(tmp_path: Path, n_batches: int = 1) -> Path:
    from oar_attrib.attribution import attribute
    from oar_attrib.models import load_model
    from oar_attrib.store import Store

    model, tokenizer = load_model()
    db = tmp_path / "web.db"
    with Store(db) as store:
        run = store.add_run("web", model="arith-tiny")
        for _ in range(n_batches):
            store.add_traces(run, attribute(model, tokenizer, ["a=1. find a.\n"] * 4,
                                            ["a=1. #### 1"] * 4, ["entropy"]))
    return db
