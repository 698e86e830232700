"""Hostile concurrency: two writers on one output (started together, a second one mid-way,
a SIGKILLed first one followed by a second), and `oar experiment run`'s cells when their
parent is killed. Exactly one writer wins, the loser says who holds the output in one line,
and the output holds every line once."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile_helpers import (PY, ENV, _write_input, _run, _out_lines, _attribute, _start, _ours,
                             _wait_for_lines)


def _refused(lines: list[str], out: Path, pid: int) -> None:
    assert lines == [f"oar attribute: error: --out {out} is being written by process {pid} (pid "
                     f"in {out.name}.lock); wait for it to end, or pass another path"], lines


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".jsonl", ".db"])
def test_two_writers_started_together_one_wins_and_each_line_is_written_once(tmp_path, problems,
                                                                             suffix):
    problems = problems[:20]
    src = _write_input(tmp_path / "in.jsonl", problems)
    out = tmp_path / f"out{suffix}"
    procs = [_start(src, out, "--batch-size", "2") for _ in range(2)]
    results = [(p, *p.communicate(timeout=300)) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [(p.returncode, e[-2000:]) for p, _, e in results]
    (winner,), (loser,) = ([r for r in results if r[0].returncode == c] for c in (0, 2))
    _refused(_ours(loser[2]), out, winner[0].pid)
    assert _ours(winner[2])[-1].startswith(f"wrote {len(problems)} attributions")
    assert _out_lines(out) == list(range(1, len(problems) + 1))  # each line once


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".jsonl", ".db"])
def test_a_second_writer_started_mid_way_is_refused_and_changes_nothing(tmp_path, problems, suffix):
    problems = problems[:20]
    src = _write_input(tmp_path / "in.jsonl", problems)
    out = tmp_path / f"out{suffix}"
    hold = tmp_path / "hold"
    first = _start(src, out, "--batch-size", "1", hold=hold)
    _wait_for_lines(first, out, 2)
    hold.touch()  # the first writer stops before its next batch, still holding the output
    second = _start(src, out, "--batch-size", "1")
    _, err = second.communicate(timeout=300)
    assert second.returncode == 2 and first.poll() is None, "the first writer must still run"
    _refused(_ours(err), out, first.pid)
    hold.unlink()
    first.communicate(timeout=300)
    assert first.returncode == 0
    assert _out_lines(out) == list(range(1, len(problems) + 1))
    if suffix == ".db":  # one run, whose summary counts each line once
        from oar_attrib.store import Store

        with Store(out, readonly=True) as store:
            (run,) = store.runs()
            assert run.n_traces == len(problems)


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".jsonl", ".db"])
def test_the_lock_of_a_sigkilled_writer_is_taken_over(tmp_path, problems, suffix, capsys):
    problems = problems[:20]
    src = _write_input(tmp_path / "in.jsonl", problems)
    out = tmp_path / f"out{suffix}"
    first = _start(src, out, "--batch-size", "1")
    _wait_for_lines(first, out, 2)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    kept = _out_lines(out)
    assert (out.parent / f"{out.name}.lock").read_text().strip() == str(first.pid)  # left behind
    code, lines = _run(_attribute(src, out), capsys)
    assert code == 0 and f"{len(kept)} lines already there" in lines[-1], lines
    assert _out_lines(out) == list(range(1, len(problems) + 1))


def test_the_writer_lock_in_one_process(tmp_path):
    """The lock itself: refused while held (naming the holder), free once released."""
    from oar_attrib.store.errors import WriterBusyError
    from oar_attrib.store.lock import WriterLock

    path = tmp_path / "out.jsonl"
    code = ("import sys, time; from oar_attrib.store.lock import WriterLock; "
            "l = WriterLock(sys.argv[1]); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([PY, "-c", code, str(path)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(WriterBusyError, match=f"being written by process {holder.pid} "):
            WriterLock(path)
    finally:
        holder.kill()
        holder.wait()
    with WriterLock(path) as lock:  # the dead holder's lock is free
        assert lock.path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(WriterBusyError, match=f"process {os.getpid()} "):
            WriterLock(path)  # one writer even within a process
    WriterLock(path).release()


def test_an_experiment_run_refuses_a_store_another_run_writes(tmp_path, capsys):
    from oar_attrib.cli import main
    from oar_attrib.store.lock import WriterLock

    store = tmp_path / "exp.db"
    with WriterLock(store):
        code = main(["experiment", "run", "arith-tiny-grid", f"experiment.store={store}",
                     f"experiment.output_dir={tmp_path / 'runs'}"])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert code == 2 and err == [
        f"oar experiment run: error: experiment.store {store} is being written by process "
        f"{os.getpid()} (pid in exp.db.lock); wait for it to end, or pass another path"], err
    assert not store.exists()  # refused before anything was written


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals are Linux's")
def test_a_cell_ends_when_its_parent_is_sigkilled(tmp_path):
    """`oar experiment run` starts its cells with `tied_popen`: a SIGKILLed parent (no chance
    to stop them itself) leaves no cell running, so a rerun never trains a cell twice at once."""
    code = ("import sys, time; from oar_attrib.training.experiment import tied_popen; "
            "child = tied_popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            "print(child.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([PY, "-c", code], env=ENV, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert os.getpgid(child) == child != os.getpgid(parent.pid)  # its own group: no terminal Ctrl-C
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as stat:
                if stat.read().split(") ")[1][0] == "Z":  # ended, waiting for init to reap it
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the cell outlived its SIGKILLed parent")
