"""The repository's root `training/` and `webapp/` folders: entry scripts and recipes that run
from a checkout, holding no package (`oar_attrib` is the only import name)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from oar_attrib.store import Store
from oar_attrib.training.experiment import experiment_path

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    # No PYTHONPATH: the entry scripts find the checkout's package themselves.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OAR_") and k != "PYTHONPATH"}
    return env | {"OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("folder", ["training", "webapp"])
def test_root_folders_hold_no_package(folder):
    files = {p.relative_to(ROOT / folder).as_posix() for p in (ROOT / folder).rglob("*") if p.is_file()}
    assert not [f for f in files if f.endswith("__init__.py")]
    scripts = {f for f in files if f.endswith(".py")}
    assert scripts == {"training": {"train.py"}, "webapp": {"serve.py"}}[folder]
    assert "README.md" in files


def test_training_entry_script_dry_run_from_a_checkout(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "training" / "train.py"), "--preset", "arith-tiny",
                           "--dry-run", "oar_tau=0.5"], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    settings = yaml.safe_load(done.stdout)
    assert settings["run"]["model"] == "arith-tiny"
    assert settings["trainer"]["oar_method"] == "oar_g" and settings["trainer"]["oar_tau"] == 0.5


def test_launcher_configs_and_grids_are_read_from_the_root_folder():
    for name in ("ddp", "zero2", "zero3"):
        config = yaml.safe_load((ROOT / "training" / "accelerate" / f"{name}.yaml").read_text())
        assert config["num_machines"] == 1
    grid = experiment_path("arith-tiny-grid")
    assert grid == ROOT / "training" / "experiments" / "arith-tiny-grid.yaml"
    assert "none" in yaml.safe_load(grid.read_text())["experiment"]["methods"]


def _serve_module():
    spec = importlib.util.spec_from_file_location("oar_serve_factory", ROOT / "webapp" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_webapp_factory_serves_the_store_named_in_the_environment(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    store = tmp_path / "runs.db"
    Store(store).close()
    serve = _serve_module()
    monkeypatch.delenv("OAR_STORE", raising=False)
    with pytest.raises(SystemExit, match="set OAR_STORE"):
        serve.create()
    monkeypatch.setenv("OAR_STORE", str(store))
    monkeypatch.delenv("OAR_MODEL", raising=False)
    with TestClient(serve.create(), base_url="http://127.0.0.1") as client:  # loopback only
        answer = client.get("/api/runs")
        assert answer.status_code == 200, answer.text
        assert answer.json() == []  # the fresh store named in OAR_STORE: no runs yet
