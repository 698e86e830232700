"""Hostile interrupts: Ctrl-C (SIGINT) in `oar attribute`, `oar experiment run` and `oar web`,
delivered to a real process. Each ends with one line and no traceback: a command that keeps
work exits 130 and says what it kept (and that a rerun resumes), `oar web` stops quietly with
exit status 0, and nothing already written is lost."""
import argparse
import signal
import subprocess
import time

import pytest

from hostile_helpers import PY, ENV, _write_input, _jsonl_lines, _start, _ours, _wait_for_lines, _demo_store, _after_estimate


from oar_attrib import cli


def _interrupt(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the process did not end on Ctrl-C") from None


@pytest.mark.parametrize("error", [KeyboardInterrupt(), KeyboardInterrupt("interrupted; 3 lines kept")])
def test_every_command_turns_ctrl_c_into_one_line_and_130(error, capsys):
    def func(args):
        raise error

    code = cli.run_command(argparse.Namespace(func=func), "recall")
    assert code == 130
    assert capsys.readouterr().err == f"oar recall: {str(error) or 'interrupted'}\n"


def test_ctrl_c_while_the_parser_is_built_is_one_line(monkeypatch, capsys):
    """A Ctrl-C while `main` builds the parser (the plugins' commands import there) is one line
    and exit 130."""
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["models"]) == 130
    assert capsys.readouterr().err == "oar: interrupted\n"


@pytest.mark.slow
def test_ctrl_c_in_attribute_keeps_the_written_lines_and_says_so(tmp_path, problems):
    src, out = _write_input(tmp_path / "in.jsonl", problems), tmp_path / "out.jsonl"
    proc = _start(src, out, "--batch-size", "2")
    _wait_for_lines(proc, out, 4)
    _, err = _interrupt(proc)
    kept = _jsonl_lines(out)
    assert proc.returncode == 130 and 4 <= len(kept) < len(problems)
    assert _after_estimate(_ours(err)) == [f"oar attribute: interrupted; {len(kept)} lines kept in {out}, rerun "
                          "the same command to resume"]
    assert kept == list(range(1, len(kept) + 1))  # every line once, in order
    from oar_attrib.store.lock import WriterLock

    WriterLock(out).release()  # the interrupted writer released its lock (else: WriterBusyError)


@pytest.mark.slow
def test_ctrl_c_stops_oar_web_quietly(tmp_path):
    db = _demo_store(tmp_path)
    proc = subprocess.Popen([PY, "-m", "oar_attrib.cli", "web", "--store", str(db), "--port", "0"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert "Ctrl+C to stop" in first, first
    before = db.read_bytes()
    out, err = _interrupt(proc)
    assert proc.returncode == 130 and out == "oar-attrib web app: stopped\n"  # 130 as every oar command
    assert _ours(err) == []
    assert db.read_bytes() == before


@pytest.mark.slow
def test_ctrl_c_in_experiment_run_ends_its_cells_and_says_so(tmp_path):
    store = tmp_path / "exp.db"
    proc = subprocess.Popen([PY, "-m", "oar_attrib.cli", "experiment", "run", "arith-tiny-grid",
                             f"experiment.store={store}", f"experiment.output_dir={tmp_path / 'runs'}"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    line = ""
    while "start" not in line and time.monotonic() < deadline:
        line = proc.stdout.readline()
    assert "start" in line, line
    time.sleep(1.0)
    cells = _children(proc.pid)
    assert cells, "the experiment started no cell"
    out, err = _interrupt(proc)
    assert proc.returncode == 130
    assert _ours(err) == [f"oar experiment run: interrupted; every finished cell is kept in {store}, "
                          "rerun the same command to resume"]
    assert not [pid for pid in cells if _alive(pid)]  # a rerun cannot race a cell


def _wait_for_torch(pid: int, timeout: float = 60.0) -> None:
    """Until process `pid` has torch's library mapped (it is importing torch), however loaded
    the machine is: a fixed sleep raced the parser on a busy one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/maps") as maps:
            if "libtorch" in maps.read():
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not start importing torch in {timeout} s")


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_ctrl_c_while_a_command_starts_is_one_line(tmp_path):
    """`import oar_attrib.cli` loads no subcommand and no torch, and building the parser loads
    none either; a Ctrl-C while a command then imports torch and transformers (seconds) is one
    line and exit 130, never a traceback."""
    proc = subprocess.Popen([PY, "-c", "import sys, time; import oar_attrib.cli as c; "
                             "print('ready', flush=True); "
                             "sys.exit(c.main(['recall', 'world', '--n', '2', '--no-progress']))"],
                            env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"  # the package is imported; main starts now
    _wait_for_torch(proc.pid)  # the parser imports no torch: now inside the command, importing it
    _, err = _interrupt(proc)
    assert proc.returncode == 130, err
    assert _ours(err) == ["oar recall world: interrupted"]
