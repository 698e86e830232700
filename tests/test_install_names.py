"""The package's sub-packages cannot be shadowed by a user's own `training/` or `webapp/`."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, training, webapp
from oar_attrib.training import OARConfig, OARGRPOTrainer
import oar_attrib.training.config as config
import oar_attrib.webapp.main as app
print(json.dumps({"user": [training.WHOSE, webapp.WHOSE], "config": config.__file__,
                  "app": app.__file__, "trainer": OARGRPOTrainer.__module__}))
"""


def test_a_users_training_folder_does_not_shadow_the_package(tmp_path):
    for name in ("training", "webapp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"WHOSE = 'user {name}'\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["user"] == ["user training", "user webapp"]  # the user's own folders import
    package = ROOT / "oar_attrib"
    assert Path(seen["config"]).resolve() == package / "training" / "config.py"
    assert Path(seen["app"]).resolve() == package / "webapp" / "main.py"
    assert seen["trainer"] == "oar_attrib.training.trainer"
