"""Optional extras: `pip install oar-attrib` is the core (attribution, weights, records, store);
`[web]`, `[train]`, `[gguf]` and `[all]` add the rest, and `[dev]` pulls everything. A use of a
missing extra is answered with one line naming it. The slow test installs the core alone into a
fresh environment and uses it there."""
import importlib.util
import os
import shutil
import subprocess
import venv
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from oar_attrib import cli, extras
from oar_attrib.extras import EXTRAS, require_extra
from oar_attrib.errors import MissingExtraError

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRA_LISTS = PROJECT["optional-dependencies"]


def _name(spec: str) -> str:
    """The normalised distribution name of a requirement (`trl>=1.16,<1.17` -> `trl`)."""
    name = spec.split(";")[0].split("[")[0]
    for stop in "<>=!~ ":
        name = name.split(stop)[0]
    return name.strip().lower().replace("_", "-")


# Distributions an extra lists that the core installs anyway (transformers requires PyYAML):
# their modules cannot tell whether the extra is installed.
WITH_THE_CORE = {"pyyaml"}


# Extras the dev environment leaves out: verl caps transformers below the versions the default
# tier runs on; tests/training/verl_plugin checks its table in verl's own environment.
OUTSIDE_DEV = {"verl"}


def test_the_extras_table_covers_each_extra_with_its_own_modules():
    """Each module `extras.EXTRAS` checks for an extra comes from a distribution that extra
    lists, and each distribution an extra lists (but those the core brings) is checked through
    one of them."""
    dists = {m: {d.lower().replace("_", "-") for d in ds} for m, ds in packages_distributions().items()}
    assert set(EXTRA_LISTS) - set(EXTRAS) == {"all", "dev", "notebooks", "deepspeed"} and set(EXTRAS) <= set(EXTRA_LISTS)
    for extra, modules in EXTRAS.items():
        if extra in OUTSIDE_DEV:
            assert "oar-attrib[all]" in EXTRA_LISTS["dev"] and not any(
                extra in spec for spec in EXTRA_LISTS["dev"] + EXTRA_LISTS["all"]), extra
            continue
        declared = {_name(s) for s in EXTRA_LISTS[extra]}
        seen = set()
        for module in modules:
            assert dists.get(module, set()) & declared, (extra, module)
            seen |= dists[module] & declared
        assert seen == declared - WITH_THE_CORE, (extra, declared - seen)


def test_all_is_every_extra_and_dev_pulls_it():
    assert EXTRA_LISTS["all"] == ["oar-attrib[web,train,gguf]"]
    assert "oar-attrib[all]" in EXTRA_LISTS["dev"]
    core = {_name(s) for s in PROJECT["dependencies"]}
    stack = {"fastapi", "uvicorn", "plotly", "trl", "datasets", "pyyaml", "accelerate", "gguf"}
    assert not core & stack  # the core pulls none of the web, training or GGUF stack


def test_require_extra_is_one_line_naming_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    assert extras.missing_modules("web") == ["uvicorn"]
    with pytest.raises(MissingExtraError) as err:
        require_extra("web", "oar web")
    assert str(err.value) == "oar web needs the web extra: pip install 'oar-attrib[web]'"
    require_extra("gguf", "a .gguf model")  # installed: no error


@pytest.mark.parametrize("argv, extra, module", [
    (["web", "--store", "x.db"], "web", "fastapi"),
    (["demo", "--no-progress"], "web", "fastapi"),
    (["train", "--dry-run"], "train", "trl"),
    (["experiment", "run", "arith-tiny-grid", "--dry-run"], "train", "datasets"),
])
def test_each_command_of_an_extra_answers_one_line_without_it(monkeypatch, capsys, tmp_path, argv, extra, module):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    use = " ".join(argv[:1])
    assert err == f"oar {use} needs the {extra} extra: pip install 'oar-attrib[{extra}]'\n"
    assert not list(tmp_path.iterdir())  # it stopped before doing anything


def test_a_lazy_export_of_an_extra_names_it(monkeypatch):
    import oar_attrib
    import oar_attrib.training as training

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("trl", "plotly") else real(name, *a))
    monkeypatch.delitem(vars(training), "OARConfig", raising=False)
    monkeypatch.delitem(vars(oar_attrib), "recall_figure", raising=False)
    with pytest.raises(MissingExtraError, match=r"^oar_attrib.training.OARConfig needs the train extra: "
                                                r"pip install 'oar-attrib\[train\]'$"):
        training.OARConfig  # noqa: B018
    with pytest.raises(MissingExtraError, match=r"^oar_attrib.recall_figure needs the web extra"):
        oar_attrib.recall_figure  # noqa: B018


# In the fresh environment: the core attributes a response on the bundled model, and the
# commands and names of the extras say which extra they need.
_CORE_USE = r"""
import importlib.util, json, math
import oar_attrib.training
from oar_attrib import attribute, load_model
from oar_attrib.errors import MissingExtraError

installed = [m for m in ("fastapi", "uvicorn", "plotly", "trl", "datasets", "accelerate", "gguf")
           if importlib.util.find_spec(m) is not None]
model, tokenizer = load_model("arith-tiny")
(trace,) = attribute(model, tokenizer, ["a=4, b=7. c=a+b. find c.\n"], ["c=4+7=11. #### 11"],
                     ["oar_p", "oar_g"])
try:
    oar_attrib.training.OARConfig
    said = None
except MissingExtraError as err:
    said = str(err)
print(json.dumps({"installed_extras": installed, "span": trace.span_found,
                  "scored": sum(trace.scored), "finite": all(math.isfinite(x) for x in trace.scores["oar_p"]),
                  "training": said}))
"""


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=1800, **kw)


@pytest.mark.heavy
@pytest.mark.slow
def test_the_core_installs_alone_attributes_and_names_the_web_extra(tmp_path):
    """`pip install .` without extras (torch first, as scripts/setup.sh does) into a fresh
    environment, no system site-packages: oar_attrib imports and attributes on the bundled
    model, `oar web` and `oar train` name their extra in one line (exit 2), `oar --help` runs."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "oar_attrib", source / "oar_attrib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = str(env_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    # --no-compile: byte-compiling torch's thousands of files is most of an install's time.
    for argv in ([py, "-m", "pip", "install", "-q", "--no-compile", "torch==2.13.0"],
                 [py, "-m", "pip", "install", "-q", "--no-compile", str(source)]):
        done = _run(argv, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]

    done = _run([py, "-c", _CORE_USE], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert got["installed_extras"] == [] and got["span"] and got["scored"] > 0 and got["finite"]
    assert got["training"] == ("oar_attrib.training.OARConfig needs the train extra: "
                               "pip install 'oar-attrib[train]'")

    oar = str(env_dir / "bin" / "oar")
    for argv, extra in ((["web", "--store", "runs.db"], "web"), (["train"], "train")):
        done = _run([oar, *argv], env=env, cwd=tmp_path)
        assert (done.returncode, done.stderr) == (2, f"oar {argv[0]} needs the {extra} extra: "
                                                     f"pip install 'oar-attrib[{extra}]'\n")
        assert "Traceback" not in done.stdout + done.stderr
    done = _run([oar, "--help"], env=env, cwd=tmp_path)
    assert done.returncode == 0 and "attribute" in done.stdout and "web" in done.stdout
    assert not (tmp_path / "runs.db").exists()
