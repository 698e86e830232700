"""`oar demo` ended by Ctrl-C: the server and the fill stop together, the command says how far
the fill got and that the next run resumes it, and exits 130 (as every `oar` command)."""
import pytest

from test_webapp import model_dir  # noqa: F401 - a pytest fixture (the tiny model saved as a folder)


def test_ctrl_c_on_the_demo_exits_130_and_says_the_fill_resumes(tmp_path, monkeypatch, model_dir, capsys):
    """Ctrl-C reaches the server and the fill (one process group): the fill ends where it is,
    the command says so and that the next `oar demo` resumes it, and exits 130."""
    import argparse

    from oar_attrib.webapp import cli as web_cli
    from oar_attrib.webapp import demo_fill

    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    from oar_attrib.webapp.progress import Progress

    def start_fill(path, config):  # a fill that got to trace 16 of 96 when the same Ctrl-C ended it
        Progress.of_store(path).stage(demo_fill.WORLD_STAGE, state="running", done=16, total=96)
        return type("Ended", (), {"poll": lambda self: 130})()

    monkeypatch.setattr(demo_fill, "start_fill", start_fill)
    monkeypatch.setattr(web_cli, "serve", lambda *a, **k: True)  # stopped by Ctrl-C
    parser = argparse.ArgumentParser(prog="oar")
    web_cli.add_web_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["demo", "--model", str(model_dir), "--n-problems", "2", "--samples", "2", "--no-real"])
    assert args.func(args) == 130
    err = capsys.readouterr().err
    assert "it is filled in the background (the fill says how long" in err
    assert ("oar demo: the background fill stopped (arithmetic world: 16/96 traces); the next `oar demo` "
            "resumes it where it stopped") in err


@pytest.mark.slow
def test_the_demo_under_sigint_exits_130(tmp_path, model_dir):
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "OAR_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "oar_attrib.cli", "demo", "--model", str(model_dir), "--n-problems", "2",
            "--samples", "2", "--methods", "entropy", "--no-real", "--port", "0"]
    demo = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = demo.stdout.readline()  # the URL, once the app answers
        assert line.startswith("oar-attrib web app: http://127.0.0.1:"), line + demo.stderr.read()
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 130
    finally:
        if demo.poll() is None:
            demo.kill()
