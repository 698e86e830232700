"""The versions CI installs as floors are the floors pyproject.toml declares (core or extra)."""
import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def test_ci_floors_are_the_declared_floors():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {}  # the core's floors and the extras' (trl, accelerate, datasets are `train`'s)
    for spec in project["dependencies"] + sum(project["optional-dependencies"].values(), []):
        match = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)", spec)
        if match:
            declared[match.group(1).lower()] = match.group(2)
    pins = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    assert set(pins) == {"transformers", "trl", "accelerate", "datasets"}
    for name, version in pins.items():
        floor = declared[name].split(".")
        assert version.split(".")[:len(floor)] == floor, (name, version, declared[name])
        assert all(part == "0" for part in version.split(".")[len(floor):]), (name, version)
