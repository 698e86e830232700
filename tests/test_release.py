"""A release: `python -m build` makes a wheel and an sdist, and the wheel installed into a fresh
environment runs `oar demo --help`, with the package's assets and one version everywhere."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

import oar_attrib

ROOT = Path(__file__).resolve().parents[1]
# Files a user's install needs beside the code (pyproject's package-data).
PACKAGE_DATA = ("oar_attrib/assets/arith-tiny/config.json", "oar_attrib/assets/export/trace.html",
                "oar_attrib/webapp/templates/trace.html", "oar_attrib/webapp/static/token_views.js",
                "oar_attrib/training/presets/arith-tiny.yaml")


def test_the_version_is_written_once_and_the_changelog_has_its_section():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "oar_attrib.version.__version__"}
    assert project["project"]["license"] == "Apache-2.0"  # an SPDX string, not a TOML table
    release = re.match(r"\d+\.\d+\.\d+", oar_attrib.__version__).group(0)
    sections = re.findall(r"^## (\d+\.\d+\.\d+)( \(unreleased\))?", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert sections[0][0] == release, "the newest CHANGELOG section is the package's version"
    assert bool(sections[0][1]) == (release != oar_attrib.__version__), "a .dev version is unreleased"
    assert [v for v, _ in sections] == sorted((v for v, _ in sections),
                                              key=lambda v: tuple(map(int, v.split("."))), reverse=True)


@pytest.mark.heavy
@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_environment_and_runs(tmp_path):
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "deprecated" not in built.stderr.lower(), built.stderr[-3000:]
    version = oar_attrib.__version__
    (wheel,) = dist.glob(f"oar_attrib-{version}-py3-none-any.whl")
    (sdist,) = dist.glob(f"oar_attrib-{version}.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(PACKAGE_DATA) <= names
    assert not any(n.startswith(("tests/", "training/", "webapp/")) for n in names)
    with tarfile.open(sdist) as archive:
        inside = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", *PACKAGE_DATA} <= inside

    # A fresh environment with the wheel alone; its dependencies are read from this
    # environment's site-packages (a path, not a site dir: this checkout's editable install
    # is not active there), so nothing is downloaded.
    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=True)
    python = fresh / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, oar_attrib; "
                            "print(oar_attrib.__file__); print(m.version('oar-attrib'))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-3000:]
    where, meta_version = probe.stdout.split()
    assert Path(where).is_relative_to(fresh) and meta_version == version
    oar = subprocess.run([str(fresh / "bin" / "oar"), "demo", "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert oar.returncode == 0, oar.stderr[-3000:]
    assert oar.stdout.startswith("usage: oar demo") and "--no-real" in oar.stdout
